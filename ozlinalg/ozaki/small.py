"""Small products in one engine call: the driver's steps without the driver's set-up.

Below a few million multiply-adds the emulated GEMM's time is set-up, not
arithmetic: validation, scratch buffers, an estimate GEMM, one engine call per
EF group, a pass per group. An engine with a ``small_product`` hook (the CPU
INT8 engine's compiled kernels) runs the whole product for the EF methods with
fixed per-row scales (``hybrid-ef``, ``bitmask-ef``; one inner block) in one
call: the same balancing, normalization, ``slices="auto"`` decision (from
float64 bounds of the exact magnitudes, which decide it exactly wherever they
do not straddle a threshold), split, exact group sums, accumulation order and
exponent step as the driver, so the result has the driver's bits
(tests/ozaki/test_small.py compares the two on many shapes and inputs), and a fixed
count below auto's warns as in the driver (:mod:`.adequacy`). Where the hook
declines (Inf / NaN, entries left to native arithmetic, an undecided count) the
driver runs as usual. Nothing changes for ``accuracy="faithful"``, complex
inputs or the other methods.
"""
from __future__ import annotations

import time
from functools import lru_cache

import numpy as np

from .._profile import CallRecord, active_profiles, record_call
from ..engines import get_engine
from . import params
from .counts.adequacy import count_warning
from .counts.slices import slice_thresholds

__all__ = ["SMALL_OPERANDS", "SMALL_WORK", "small_args", "small_product"]

#: Products of at most this many multiply-adds (m n p) take the one-call path ...
SMALL_WORK = 1 << 21
#: ... when their operands hold at most this many entries ((m + p) n): the call's
#: working memory (the operands' slices as float64) stays below a few MiB.
SMALL_OPERANDS = 1 << 16

@lru_cache(maxsize=256)
def _thresholds(split, width, max_slices, outputs):
    t = np.array(slice_thresholds(split, width, max_slices, outputs), dtype=np.float64)
    t.flags.writeable = False
    return t


def small_args(xp, m, n, p, meth, slices, opts, engine=None):
    """Whether an ``(m x n) @ (n x p)`` product takes the one-call path, and how:
    ``(engine, width, fixed count or 0, thresholds, their cap on the count)``, or None
    where it does not apply (then the driver runs). ``engine``: the call's engine (None:
    the one ``opts.engine`` names)."""
    if (xp is not np or not meth.groupwise or meth.engine != "int8"
            or meth.split not in ("hybrid", "bitmask") or opts.accuracy != "dgemm"):
        return None
    if m == 0 or n == 0 or p == 0 or m * n * p > SMALL_WORK or (m + p) * n > SMALL_OPERANDS:
        return None
    if min(m, n, p) < opts.min_size:
        return None
    # auto's thresholds up to the fixed count too: the driver warns when auto picks more
    cap = opts.max_slices if slices == "auto" else max(opts.max_slices, int(slices))
    smax = opts.max_slices if slices == "auto" else int(slices)
    lim = opts.memory_limit
    if lim is not None and 8 * (smax + 2) * ((m + p) * n + m * p) > lim:
        return None
    if engine is None:
        engine = get_engine(xp, opts.engine)
    if engine.small_product is None:
        return None
    width = params.slice_width(n)
    return (engine, width, 0 if slices == "auto" else int(slices),
            _thresholds(meth.split, width, cap, m * p), cap)


def small_product(xp, a, b, meth, slices, opts, min_shift, order="C", engine=None):
    """``a @ b`` (2-D float64 NumPy arrays, validated) by the engine's one-call path, or
    None where it does not apply or declines (then the caller runs the driver).
    ``engine``: the call's engine (None: the one ``opts.engine`` names)."""
    m, n = a.shape
    p = b.shape[1]
    got = small_args(xp, m, n, p, meth, slices, opts, engine)
    if got is None:
        return None
    engine, width, _, thr, cap = got
    hook = engine.small_product
    prof = bool(active_profiles())
    t0 = time.perf_counter() if prof else 0.0
    times = [0.0, 0.0, 0.0] if prof else None
    out = np.empty((m, p), order=order)
    done = hook(a, b.T, out, meth.split, width, slices, thr, min_shift, times)
    if done is None:
        return None
    s, need = done
    if need > s and opts.count_check:  # the driver's check of fixed counts (counts.adequacy)
        count_warning(s, need, 0, cap, m * p, False, meth.name)
    if prof:
        total = time.perf_counter() - t0
        record_call(CallRecord(
            method=meth.name, shape=(m, n, p), slices=s, int8_gemms=s * (s + 1) // 2,
            engine_calls=1, accumulation_passes=1, time_split=times[0], time_int8=times[1],
            time_accumulate=times[2], time_total=total, device=engine.device,
            engine=f"{engine.describe()}; whole product in one compiled call",
            accuracy=opts.accuracy))
    return out
