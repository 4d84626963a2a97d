"""The float32 SGEMM engine: exact INT8 products on BLAS SGEMM over float32 slices, with
the passes as NumPy code (the CPU reference engine).

The name "sgemm" gives it only where the compiled passes do not load (no build,
``OZLINALG_FUSED=0``); elsewhere it gives the SGEMM engine on int8 slices with the
compiled passes (:mod:`ozlinalg.engines.sgemm_int8`), whose GEMM is made of the same
exact SGEMMs. Tests make this one directly (``SGEMMEngine()``).

Integer ``np.matmul`` is a plain triple loop (about 1 GOP/s); float BLAS is
exact on integer-valued operands as long as no partial sum leaves the range of
consecutive integers of the format. Slices are stored as integer-valued float32,
and every SGEMM is cut so that ``(inner length) * bound_a * bound_b <= 2**24``,
the float32 integer range. Successive pieces accumulate inside SGEMM
(``beta = 1``) while the running bound stays within 2**24; each full run is
added to a float64 accumulator, exact below 2**53. Only whole runs ever touch
float64, so the result is the exact integer product whatever the BLAS's
summation order.
"""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.linalg import blas as _blas

from . import kernels as _kernels
from ._process import BlasThreadLimit, at_fork_child, cpu_threads, fork_safe_lock
from .base import Engine

__all__ = ["SGEMMEngine", "FP32_EXACT"]

#: Integers up to this magnitude are all representable in float32.
FP32_EXACT = 1 << 24


class SGEMMEngine(Engine):
    """Exact INT8 products on BLAS SGEMM over float32 slices for NumPy arrays (module
    docstring): the reference engine, and what the name "sgemm" gives where the
    compiled passes do not load."""

    name = "cpu-sgemm"
    device = "cpu"
    xp = np
    #: No crossover: emulation was slower than native FP64 for every operation
    #: at every order measured, 128..2048 (``python benchmarks/calibration/crossover.py``;
    #: the table is in docs/backend.md).
    crossovers: dict = {}
    #: Why "auto" chose this engine (and the verdict that made it), set by
    #: :func:`ozlinalg.engines.select.cpu_engine` on its fallback; None otherwise.
    selection_reason = selection_verdict = None

    #: Why the name "sgemm" gave this engine and not the one on int8 slices
    #: (:mod:`ozlinalg.engines.sgemm_int8`: no compiled passes), for :meth:`describe`;
    #: None where it was made directly.
    why = None

    def __init__(self, threads: int | None = None, why: str | None = None):
        self.threads = threads or cpu_threads()
        if why is not None:
            self.why = why
        self._pool = None  # a ThreadPoolExecutor, started on first use
        self._pool_lock = fork_safe_lock()
        at_fork_child(SGEMMEngine._after_fork, self)

    def _after_fork(self):
        # The parent's pool threads do not exist in a forked child: a fresh pool.
        self._pool = None

    def _executor(self):
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="ozlinalg")
            return self._pool

    def empty_slices(self, s, rows, k, kind, operand=None):
        return np.empty((s, rows, k), dtype=np.float32)

    @functools.cached_property
    def kernels(self):
        """The compiled kernel module (:mod:`ozlinalg.engines.kernels`) or None, for the
        one-call path of small products (:meth:`small_product`); the INT8 engines set
        their own, which also runs their passes."""
        return _kernels.load()[0]

    def small_product(self, a, bt, out, kind, width, slices, thresholds, min_shift,
                      times=None):
        """A whole small EF product ``out = a @ bt.T`` in one compiled call
        (``k_small.c``: the slices, their exact integer products and the accumulation,
        with the driver's bits, :func:`ozlinalg.ozaki.small.small_product`); returns
        ``(slices used, auto's count)``, or None where the driver must run (no kernels,
        Inf / NaN, native entries, an undecided count). ``thresholds``:
        ``slices="auto"``'s, for up to ``max(max_slices, slices)`` slices. ``times``: a
        list that receives the seconds spent splitting, in the products and
        accumulating. Its products are integer dot products of a few slices, whatever
        engine multiplies the large ones: every CPU engine has it."""
        ker = self.kernels
        if ker is None or kind not in ("hybrid", "bitmask"):
            return None
        info = np.zeros(6 if times is not None else 3, np.int64)
        ker.small_ef_product(a, bt, out, kind == "bitmask", width,
                             0 if slices == "auto" else int(slices), thresholds,
                             0 if min_shift is None else int(min_shift), info)
        got = info.tolist()
        if got[1] != 0:  # the driver runs (SMALL_NOMEM too: it raises MemoryError
            return None  # itself if memory is short for it as well)
        if times is not None:
            times[:] = [t * 1e-9 for t in got[3:]]
        return got[0], got[2]

    def int8_peak_ratio(self):
        """SGEMM runs at most twice DGEMM's rate (half the bytes, the same FMA units)."""
        return 2.0

    def tuning_facts(self):
        """The tuning cache's key here (:meth:`Engine.tuning_facts`): also the BLAS
        threads the native calls run on (read through threadpoolctl, never set)."""
        return {**super().tuning_facts(), "blas_threads": blas_threads()}

    def _pieces(self, pairs, k, per_elem):
        # Longest inner chunk whose worst-case dot product stays exact in float32.
        kc = max(1, FP32_EXACT // per_elem)
        if kc >= 64:
            kc -= kc % 64
        return [(i, j, k0, min(k, k0 + kc)) for (i, j) in pairs for k0 in range(0, k, kc)]

    def workspace(self, m, p):
        """Reusable buffers for a sequence of products of one output shape.

        Fresh multi-megabyte arrays cost a page fault per 4 KiB on first
        touch; one emulated GEMM makes up to s(s+1)/2 products of the same
        shape, so the caller allocates these once and passes them back.
        """
        return {"out": np.empty((m, p)), "run": np.empty((p, m), np.float32, order="F")}

    def int_matmul_sum(self, a, b, pairs, bound_a, bound_b, ws=None):
        _, m, k = a.shape
        p = b.shape[1]
        ws = ws or self.workspace(m, p)
        out, run = ws["out"], ws["run"]  # run.T is (m, p) in C order
        per_elem = int(bound_a) * int(bound_b)
        cur = 0
        calls = 0
        flushed = False
        for i, j, k0, k1 in self._pieces(pairs, k, per_elem):
            w = (k1 - k0) * per_elem
            if cur and cur + w > FP32_EXACT:
                self._flush(out, run, flushed)
                flushed = True
                cur = 0
            ai = a[i, :, k0:k1]
            bj = b[j, :, k0:k1]
            # run (p x m, F) = bj @ ai^T, i.e. run.T = ai @ bj^T in C order.
            _blas.sgemm(1.0, bj.T, ai.T, beta=1.0 if cur else 0.0, c=run,
                        trans_a=1, overwrite_c=1)
            calls += 1
            cur += w
        self._flush(out, run, flushed)
        return out, calls

    @staticmethod
    def _flush(out, run, add):
        # A finished run is an exact integer sum below 2**24: add it in float64.
        if add:
            np.add(out, run.T, out=out)
        else:
            np.copyto(out, run.T)

    def float_matmul(self, a, b):
        # FP16 values held in float32; SGEMM accumulates in FP32 as the tensor core does.
        return np.matmul(a, b.T)

    def axpy(self, alpha, x, acc):
        if acc.flags.c_contiguous and x.flags.c_contiguous and x.dtype == np.float64:
            _blas.daxpy(x.reshape(-1), acc.reshape(-1), a=float(alpha))
        else:
            super().axpy(alpha, x, acc)

    def map_rows(self, fn, rows, k):
        if self.threads <= 1 or rows * max(k, 1) < (1 << 16):
            fn(0, rows)
            return
        # Blocks of ~512 KiB of float64 keep a block's passes in cache.
        rb = max(8, (1 << 16) // max(k, 1))
        pool = self._executor()
        futures = [pool.submit(fn, r0, min(rows, r0 + rb)) for r0 in range(0, rows, rb)]
        for f in futures:
            f.result()

    def describe(self):
        notes = "".join(f"; {w}" for w in (self.why, self.selection_reason) if w)
        return f"{self.name} (BLAS SGEMM on float32 slices, passes: NumPy{notes})"


def blas_threads():
    """The largest thread count of the loaded BLAS libraries (threadpoolctl), or None."""
    with BlasThreadLimit._lock:  # not inside a limited section of another thread
        counts = [lib.num_threads for lib in BlasThreadLimit._libraries()]
    counts = [int(c) for c in counts if c]
    return max(counts) if counts else None
