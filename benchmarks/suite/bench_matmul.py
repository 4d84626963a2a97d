"""pytest-benchmark: the emulated DGEMM against native FP64 GEMM.

One group per size; each holds native DGEMM (NumPy/BLAS on the host, cuBLAS
through CuPy on a GPU) and every emulation method on the same inputs.
``extra_info``: n, slices, method, device, effective GFLOPS (2 n^3 / time, as
if it were FP64) and the max / median relative error of the first rows
against the exact reference (python-flint). Each benchmark asserts that those
rows are at DGEMM level: every entry within ``ozlinalg.testing.dot_error_bound``
of the exact product (what any FP64 GEMM guarantees), unless a fixed
``OZLINALG_BENCH_SLICES`` is below what ``"auto"`` picks (the product then
warns with an ``AccuracyWarning`` and promises no such bound: ``short_count``
in ``extra_info``).

Default size is small so ``pytest benchmarks --benchmark-disable`` is a quick
smoke test (the test run does this). Larger::

    OZLINALG_BENCH_MATMUL_SIZES=1024,2048 pytest benchmarks/suite/bench_matmul.py \\
        --benchmark-only --benchmark-json=bench.json

Environment: ``OZLINALG_BENCH_MATMUL_SIZES`` (default 160),
``OZLINALG_BENCH_SLICES`` (int or "auto", default auto), ``OZLINALG_BENCH_PHI``
(default 0.5), ``OZLINALG_BENCH_ROUNDS`` (default 3), ``OZLINALG_BENCH_ENGINES``
(NumPy engines, comma-separated: ``auto`` (default), ``onednn``, ``sgemm``, or
``all``). The engine (and its ISA) is in ``extra_info``.
"""
from __future__ import annotations

import functools
import os
import warnings

import numpy as np
import pytest

import ozlinalg
from ozlinalg._array import cupy_or_none, to_numpy
from ozlinalg.testing import dot_error_bound, error_stats, random_matrix

SIZES = [int(s) for s in os.environ.get("OZLINALG_BENCH_MATMUL_SIZES", "160").split(",") if s]
_SL = os.environ.get("OZLINALG_BENCH_SLICES", "auto")
SLICES = _SL if _SL == "auto" else int(_SL)
PHI = float(os.environ.get("OZLINALG_BENCH_PHI", "0.5"))
ROUNDS = int(os.environ.get("OZLINALG_BENCH_ROUNDS", "3"))
CHECK_ROWS = 32
_ENG = os.environ.get("OZLINALG_BENCH_ENGINES", "auto")
ENGINES = ["sgemm", "onednn"] if _ENG == "all" else [e for e in _ENG.split(",") if e]


def _devices():
    cp = cupy_or_none()
    try:
        if cp is not None and cp.cuda.runtime.getDeviceCount() > 0:
            return ["cpu", "gpu"]
    except Exception:
        pass
    return ["cpu"]


@functools.cache
def problem(n):
    rng = np.random.default_rng([n, 7])
    a = random_matrix(rng, n, n, PHI)
    b = random_matrix(rng, n, n, PHI)
    try:
        from ozlinalg.testing import ExactReference

        ref = ExactReference(a[:CHECK_ROWS], b)
    except ImportError:  # python-flint is a test extra; without it nothing is checked
        ref = None
    return a, b, ref


@functools.cache
def bound(n):
    """Entrywise DGEMM-level bound for the checked rows (computed once per size,
    outside the timed calls)."""
    a, b, _ = problem(n)
    return dot_error_bound(a[:CHECK_ROWS], b)


def _xp(device):
    return cupy_or_none() if device == "gpu" else np


def _assert_dgemm_level(c, n, ref):
    """The checked rows of ``c`` are within the FP64 dot-product bound of the exact
    product, entry by entry (the same check as the tests' ``assert_dot_accurate``;
    benchmarks cannot import the tests' conftest)."""
    err = ref.absolute_errors(c)
    bnd = bound(n)
    bad = ~(err <= bnd)
    assert not bad.any(), (f"{int(bad.sum())} of {bad.size} checked entries beyond the "
                           f"FP64 dot-product bound; worst error / bound "
                           f"{np.max(err / bnd):.3g}")


def _run(benchmark, device, fn, n, info, dgemm_level=True):
    """Time ``fn``, record the error of its result and, where the product promises
    DGEMM level (``dgemm_level``), assert it."""
    xp = _xp(device)
    if device == "gpu":
        def timed():
            out = fn()
            xp.cuda.Device().synchronize()
            return out
    else:
        timed = fn
    c = benchmark.pedantic(timed, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    _, _, ref = problem(n)
    if ref is not None:
        rows = to_numpy(c)[:CHECK_ROWS]
        mx, med = error_stats(ref.relative_errors(rows))
        info.update(max_rel_err=mx, median_rel_err=med)
        if dgemm_level:
            _assert_dgemm_level(rows, n, ref)
    stats = getattr(benchmark, "stats", None)
    if stats is not None and getattr(stats, "stats", None) is not None:
        info["gflops"] = 2.0 * n**3 / stats.stats.min / 1e9
    benchmark.extra_info.update(info)


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("n", SIZES)
def bench_native(benchmark, n, device):
    benchmark.group = f"matmul n={n} {device}"
    a, b, _ = problem(n)
    xp = _xp(device)
    da, db = xp.asarray(a), xp.asarray(b)
    _run(benchmark, device, lambda: xp.matmul(da, db), n,
         dict(n=n, method="native", slices=None, device=device))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("method", list(ozlinalg.METHODS))
@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("n", SIZES)
def bench_emulated(benchmark, n, device, method, engine):
    benchmark.group = f"matmul n={n} {device}"
    a, b, _ = problem(n)
    xp = _xp(device)
    da, db = xp.asarray(a), xp.asarray(b)
    with ozlinalg.options(engine=engine if device == "cpu" else None):
        # The untimed first call tells whether the count promises DGEMM level: "auto"
        # does; a fixed count does unless it is below auto's, and then the product
        # says so with an AccuracyWarning.
        with ozlinalg.profile() as prof, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ozlinalg.AccuracyWarning)
            ozlinalg.matmul(da, db, method=method, slices=SLICES)
        short = SLICES != "auto" and any(
            issubclass(w.category, ozlinalg.AccuracyWarning) for w in caught)
        with warnings.catch_warnings():
            # warned once above; the timed calls repeat the same product
            warnings.simplefilter("ignore", ozlinalg.AccuracyWarning)
            _run(benchmark, device,
                 lambda: ozlinalg.matmul(da, db, method=method, slices=SLICES),
                 n, dict(n=n, method=method, slices=prof.slices[0], device=device,
                         engine=prof.calls[0].engine, int8_gemms=prof.int8_gemms,
                         short_count=short),
                 dgemm_level=not short)
