"""CPU engine: exact INT8 products on the CPU's INT8 units through oneDNN.

``dnnl_gemm_s8s8s32`` (oneDNN's row-major BLAS-like INT8 GEMM) runs on AVX-512
VNNI / AVX-VNNI (``vpdpbusd``) or AMX-INT8 tiles where the CPU has them: 16-20x
native DGEMM's rate on the machines this project measured (docs/performance.md).
It is exact there. Below VNNI, oneDNN emulates it with ``vpmaddubsw``, which
saturates to INT16 and is NOT exact for values near -128 / 127; so the engine
never assumes: a one-time self-test at the extreme values (:func:`self_test`)
decides, and the engine is only used where it passes
(:func:`ozlinalg.engines.select`). Running out of memory during that test is
not a verdict: the creation raises MemoryError, nothing is cached, and the next
call tests again.

Storage
-------
Slices are int8 (``slice_bytes = 1``: a quarter of the SGEMM engine's float32
slices). The slices of a product's operand live in a ``(rows, s, k)`` array,
slice index in the middle and B's slices in reverse order (the layout the GPU
engine uses), so the slices ``A_i, A_{i+1}, ...`` of one row lie side by side
along the inner dimension, as do ``B_{g-i}, B_{g-i-1}, ...``: the EF group
``sum_i A_i B_{g-i}^T`` is ONE GEMM with inner length ``count * k`` and leading
dimension ``s * k`` (DESIGN.md section 5), as long as ``count * k * bound**2``
stays below 2**31; longer runs are several GEMMs accumulated in INT32 with
``beta = 1``, and a run that would pass 2**31 is added to an int64 buffer
(never needed with the driver's group limit ``r``; it keeps the engine exact
for any caller). SplitFP's floating slices stay on SGEMM (``float_matmul``).
Ozaki II's residues pair one modulus at a time: B's are kept in order, and the
INT8 residues of the finished products reuse B's dead slots (:class:`_FusedCRT`).

The passes around the GEMMs are fused compiled kernels (:mod:`.kernels`, built at
install time) where they are built, and the generic array code otherwise; both give
the same bits.
"""
from __future__ import annotations

import contextlib
import functools
import warnings

import numpy as np

from .._exceptions import PerformanceWarning
from . import _dnnl, kernels
from ._process import BlasThreadLimit, at_fork_child, native_threads
from ._scratch import ScratchPool, release_after_oom
from .base import APPROX_PRESCALE, group_runs
from .sgemm import SGEMMEngine

__all__ = ["EngineUnavailable", "OneDNNEngine", "INT32_EXACT", "self_test"]

#: Largest magnitude an INT32 run may reach.
INT32_EXACT = (1 << 31) - 1

#: Scale of the estimate operands (squares in [0, 1)): keeps tiny squares out of
#: BF16 / FP32 subnormals (which oneDNN may flush); the products stay below 2**113.
_EST_SCALE = APPROX_PRESCALE

ENV_FUSED = kernels.ENV_FUSED


class EngineUnavailable(RuntimeError):
    """The oneDNN engine cannot run here (library missing, or not exact)."""


#: Passes over fewer entries than this, and GEMMs of fewer INT8 operations than
#: GEMM_PARALLEL_MIN, run on one thread (about a millisecond of work): a parallel
#: region's barrier costs more than the work when the other cores are busy
#: (measured on the shared 2-core box under load: a 40 x 300 split took 8 ms on
#: two threads and 0.15 ms on one; a 40 x 30 x 300 GEMM 3.5-12 ms against 9 us).
PARALLEL_MIN = 1 << 20
GEMM_PARALLEL_MIN = 1 << 30


def _load_kernels():
    """The compiled kernel module (:mod:`ozlinalg.engines.kernels`), or ``(None, reason)``;
    warns once per process (:class:`ozlinalg.PerformanceWarning`) where the kernels are
    missing without the user having asked for that (``OZLINALG_FUSED=0``)."""
    mod, reason = kernels.load()
    if mod is None and not reason.startswith(ENV_FUSED) and not _WARNED:
        _WARNED.append(True)
        warnings.warn(f"ozlinalg: the CPU INT8 engine runs its passes as NumPy code ({reason});"
                      " the results are the same, 1.5-2x slower. Reinstall ozlinalg where a C "
                      "compiler with OpenMP is available to build its kernels.",
                      PerformanceWarning, stacklevel=2)
    return mod, reason


_WARNED: list = []


class OneDNNEngine(SGEMMEngine):
    """Exact INT8 GEMMs on oneDNN (``dnnl_gemm_s8s8s32``) for NumPy arrays.

    Raises :class:`EngineUnavailable` (with the reason) where oneDNN does not
    load or its INT8 GEMM fails the exactness self-test.
    """

    name = "cpu-onednn"
    device = "cpu"
    slice_bytes = 1

    def __init__(self, threads: int | None = None, lib=None, fused: bool | None = None):
        # OpenMP threads (oneDNN's and the kernels'): one in a forked child
        super().__init__(threads or native_threads())
        at_fork_child(OneDNNEngine._after_fork_onednn, self)
        if lib is None:
            lib, reason = _dnnl.load()
            if lib is None:
                raise EngineUnavailable(reason)
        self.lib = lib
        if fused is False:
            self.kernels, self.kernels_reason = None, "disabled"
        else:
            self.kernels, self.kernels_reason = _load_kernels()
        self.launches = 0
        BlasThreadLimit.prepare()  # find the BLAS libraries now, not inside a product
        # The pool reads OZLINALG_SCRATCH_CACHE: a bad value must raise here, not
        # inside the self-test, which would take it for an inexact GEMM.
        self.scratch  # noqa: B018
        ok, detail = self._run_self_test()
        self.self_test = detail
        if not ok:
            raise EngineUnavailable(
                f"oneDNN {self.version} (ISA {lib.isa_name}) failed the INT8 exactness "
                f"self-test: {detail}")

    def _run_self_test(self):
        """:func:`self_test`, where running out of memory is no verdict.

        A MemoryError (a busy machine, a tight container) says nothing about the
        GEMM's exactness: it propagates, with the pool's buffers released, and
        as no engine was made, nothing is cached (:mod:`.select`), so the next
        call tests again. A KeyboardInterrupt propagates as it is. Only a wrong
        answer, or another failing call, is an :class:`EngineUnavailable`.
        """
        try:
            return self_test(self)
        except MemoryError as exc:
            release_after_oom()
            raise MemoryError(
                "ozlinalg: out of memory during the oneDNN engine's one-time exactness "
                "self-test (a few MiB); nothing was cached, the next call tries again"
            ) from exc

    @functools.cached_property
    def scratch(self):
        """Large temporaries kept between products (no page faults; see
        :mod:`ozlinalg.engines._scratch`)."""
        return ScratchPool()

    # -- what ran ---------------------------------------------------------------------

    @property
    def version(self):
        return ".".join(map(str, self.lib.version))

    @property
    def isa(self):
        return self.lib.isa_name

    #: BLAS threads for the native calls between emulated products (factorization
    #: panels, see :meth:`native_blas`); None leaves BLAS alone.
    native_blas_threads = 1

    def native_blas(self):
        """One BLAS thread for the native calls between emulated products.

        OpenBLAS's worker threads keep spinning for a while after each call
        (``OPENBLAS_THREAD_TIMEOUT``, 2**28 cycles by default) and take the cores
        from the next oneDNN GEMM (2x slower on the 2-core box; the panel of a
        factorization is followed by its trailing update every step). With one
        BLAS thread the workers stay asleep; the panels are a small share of the
        flops. Measured: ``benchmarks/cpu_threads.py``, docs/performance.md. The
        limit is reference-counted across threads and restores what it found
        (:class:`ozlinalg.engines._process.BlasThreadLimit`).
        """
        if self.native_blas_threads is None:
            return contextlib.nullcontext()
        return BlasThreadLimit(self.native_blas_threads)

    def _after_fork_onednn(self):
        # libgomp's pool does not survive fork: OpenMP work on one thread in the child
        self.threads = 1

    def describe(self):
        why = self.kernels_reason
        passes = f"fused ({why})" if self.kernels else f"NumPy: {why}"
        return (f"{self.name} (oneDNN {self.version}, ISA {self.isa}, int8 self-test passed, "
                f"passes: {passes})")

    # -- storage ----------------------------------------------------------------------

    def empty_slices(self, s, rows, k, kind, operand=None):
        """int8 slices ``(s, rows, k)``, rows contiguous; for a product's operand
        ("a" / "b") grouped as in the module doc. SplitFP's slices (kind "fp") are
        float32 for SGEMM."""
        empty = self.scratch.empty
        if kind == "fp":
            return empty((s, rows, k), np.float32)
        if operand not in ("a", "b"):
            return empty((s, rows, k), np.int8)
        full = empty((rows, s, k), np.int8)
        view = full[:, ::-1, :] if _reversed(kind, operand) else full
        return view.transpose(1, 0, 2)

    def empty_slices_like(self, x, s, kind, operand=None):
        """Slices of ``x`` (rows x k) laid out in ``x``'s own memory order.

        Rows of B^T are columns of a row-major B (and a Fortran-ordered A has
        contiguous columns): their slices are stored as ``(s, k, rows)``
        (``[:, ::-1]`` for "b": slices reversed), so splitting never transposes and
        the GEMM reads them with ``trans = 'N'`` / ``'T'``; an EF group's slices are
        still stacked along the inner dimension (one GEMM). Ozaki II's residues
        ("crt") are never grouped, so B's stay in order: slot t first in memory,
        where :class:`_FusedCRT` reuses the slots of finished products.
        """
        rows, k = x.shape
        if kind == "fp" or not _is_cols(x):
            return self.empty_slices(s, rows, k, kind, operand)
        full = self.scratch.empty((s, k, rows), np.int8)
        view = full[::-1] if _reversed(kind, operand) else full
        return view.transpose(0, 2, 1)

    output_orders = ("C", "F")
    #: Never: on the 2-core AVX-512 VNNI machine this was measured on, emulation
    #: (default method, ``slices="auto"``) took 3.2-4.6x native DGEMM / LAPACK at
    #: n = 1024 .. 4096 (``OZLINALG_ENGINE=onednn python benchmarks/crossover.py
    #: --sizes 1024 2048 4096 --reps 2``, 2026-12-01, 2 threads;
    #: benchmarks/results/crossover-cpu-onednn-2026-12-01.json). The INT8 units are
    #: 15-16x DGEMM's rate there and a DGEMM-level product needs 36-45 INT8 GEMMs;
    #: on AMX machines (2048 INT8 ops per cycle per core) re-measure.
    crossovers: dict = {}

    @property
    def memory_model(self):
        """``ozaki.memory.plan_bytes`` coefficients of the fused passes (the generic ones,
        ``ozaki.memory.MEMORY_MODEL``, for any key missing here): one normalized float64
        copy (none for fixed counts) and BF16 squares per input entry; FP64 accumulator
        (beside the result when there are several tiles), top groups, INT32 result and
        the FP32 estimate per output entry; for Ozaki-II also the bound operand, and one
        int8 residue per output entry and modulus instead of FP64 limbs; W as int32.
        Fitted to the peaks of ``benchmarks/memory_bound.py`` (tests/test_matmul.py::
        TestMemory checks them)."""
        if self.kernels is None:
            return None
        return {"input": 12, "output": 32, "product_output": 72, "crt_input": 16,
                "crt_output": 32, "crt_output_per_modulus": 1, "bounds": 4}
    #: Panel width of the factorizations: at INT8 speed the passes over each trailing
    #: update's output (estimate, one per EF group, scaling) weigh against its
    #: k = block_size inner dimension. Measured on 2 threads, getrf / potrf / geqrf
    #: against LAPACK at n = 4096: 5.3 / 4.9 / 3.1x with 256, 4.4 / 4.2 / 3.0x with 384,
    #: 3.8 / 3.6 / 3.3x with 512; 512 was also the best at n = 1024 and 2048
    #: (docs/performance.md, "Factorizations").
    block_size = 512

    def workspace(self, m, p, order="C"):
        """The INT32 result buffer, in the memory order the caller accumulates in."""
        return {"out": self.scratch.empty((m, p), np.int32, order=order)}

    # -- products ---------------------------------------------------------------------

    @staticmethod
    def _layout(x):
        """``(x, trans, ld, kstep)`` of int8 slices ``x`` (s, rows, k): ``trans`` False
        when the k entries of a row are contiguous (stored rows x k, row stride ld),
        True when the rows are (stored k x rows, ld = kstep = stride along k)."""
        if x.dtype != np.int8:
            raise TypeError(f"ozlinalg: the oneDNN engine multiplies int8 slices, got {x.dtype}")
        _, rows, k = x.shape
        if (x.strides[2] == 1 or k <= 1) and x.strides[1] >= max(k, 1):
            return x, False, max(x.strides[1], k, 1), 1
        if (x.strides[1] == 1 or rows <= 1) and x.strides[2] >= max(rows, 1):
            return x, True, max(x.strides[2], rows, 1), max(x.strides[2], rows, 1)
        x = np.ascontiguousarray(x)
        return x, False, max(k, 1), 1

    def gemm(self, transa, a_ptr, lda, transb, b_ptr, ldb, c, m, p, k, beta):
        """``c (m x p, int32, row-major) (+)= A @ B^T`` for int8 ``A`` (m x k) and ``B``
        (p x k), each stored either way (``trans*``: stored transposed)."""
        # (a one-row c may carry any row stride: oneDNN wants ldc >= p)
        self.lib.gemm_s8s8s32(b"T" if transa else b"N", b"N" if transb else b"T", m, p, k,
                              a_ptr, lda, b_ptr, ldb, c.ctypes.data,
                              max(c.strides[0] // 4, p, 1), beta,
                              self.threads if 2 * m * p * k >= GEMM_PARALLEL_MIN else 1)
        self.launches += 1

    def int_matmul_sum(self, a, b, pairs, bound_a, bound_b, ws=None):
        """Exact ``sum((i, j) in pairs) a[i] @ b[j].T`` as int32 (int64 when a sum could
        pass INT32), a buffer of ``ws``; runs of pairs adjacent in the grouped storage
        are one GEMM each."""
        _, m, k = a.shape
        p = b.shape[1]
        a, ta, lda, ka = self._layout(a)
        b, tb, ldb, kb = self._layout(b)
        ws = ws if ws is not None else self.workspace(m, p)
        out = ws["out"]
        if m == 0 or p == 0:
            return out, 0
        if k == 0 or not pairs:
            out.fill(0)
            return out, 0
        per_elem = max(1, int(bound_a) * int(bound_b))
        one = k * per_elem  # worst case of one product
        joinable = (a.strides[0] == k * ka and b.strides[0] == -k * kb and one <= INT32_EXACT)
        runs = group_runs(pairs, joinable, max(1, INT32_EXACT // one))
        kc = max(1, INT32_EXACT // per_elem)  # pieces of a single product past INT32
        a0, b0 = a.ctypes.data, b.ctypes.data
        sa, sb = a.strides[0], b.strides[0]
        # A column-major result is the row-major C^T = B A^T: the operands swap roles.
        colmajor = not out.flags.c_contiguous and out.flags.f_contiguous
        acc64 = None
        cur = 0
        calls = 0
        for i, j, count in runs:
            pieces = [(0, count * k)] if one <= INT32_EXACT else [
                (k0, min(k, k0 + kc)) for k0 in range(0, k, kc)]
            for k0, k1 in pieces:
                w = (k1 - k0) * per_elem
                if cur and cur + w > INT32_EXACT:
                    acc64 = out.astype(np.int64, order="K") if acc64 is None else acc64 + out
                    cur = 0
                pa, pb = a0 + i * sa + k0 * ka, b0 + j * sb + k0 * kb
                if colmajor:
                    self.gemm(tb, pb, ldb, ta, pa, lda, out.T, p, m, k1 - k0, 1 if cur else 0)
                else:
                    self.gemm(ta, pa, lda, tb, pb, ldb, out, m, p, k1 - k0, 1 if cur else 0)
                calls += 1
                cur += w
        if acc64 is not None:
            acc64 += out
            return acc64, calls
        return out, calls

    def approx_matmul(self, a, b):
        """``a @ b.T`` of nonnegative float32 data to a few bits, on BF16
        (``dnnl_gemm_bf16bf16f32``, FP32 accumulation), as float64.

        Inputs are scaled by 2**48 (exact) so that no product is flushed as a
        subnormal; relative error per entry below 2**-7 (0.01 bit in log2).
        """
        if self.lib._bf16 is None:
            return super().approx_matmul(a, b)
        return self._bf16_products(_to_bf16(self.approx_operand(a)), False,
                                   _to_bf16(self.approx_operand(b)), False)

    def approx_squares(self, xa, xb):
        """``(xa**2) @ (xb**2).T`` to a few bits (``slices="auto"``'s estimate):
        squares written as BF16 in one fused pass per operand, one BF16 GEMM."""
        if self.lib._bf16 is None or self.kernels is None:
            return None
        (a16, ta), (b16, tb) = self._squares(xa), self._squares(xb)
        return self._bf16_products(a16, ta, b16, tb)

    def _squares(self, x):
        """bf16 of ``x**2 * 2**48`` in ``x``'s memory order: ``(array, transposed)``."""
        cols = _is_cols(x)
        x = x.T if cols else np.ascontiguousarray(x)
        out = self.scratch.empty(x.shape, np.uint16)
        self._k(x.size).squares_bf16(x, _EST_SCALE, out)
        return out, cols

    def _bf16_products(self, a16, ta, b16, tb):
        """float64 products of the scaled bf16 operands, scaled back."""
        c = self._bf16_scaled(a16, ta, b16, tb)
        out = self.scratch.empty(c.shape, np.float64)
        if self.kernels is not None:
            self._k(out.size).to_float64(c, _EST_SCALE**-2, out)
        else:
            np.multiply(c, _EST_SCALE**-2, out=out)
        return out

    def _bf16_scaled(self, a16, ta, b16, tb):
        """float32 ``op(a16) @ op(b16)`` (still scaled by 2**96)."""
        m, k = a16.shape[::-1] if ta else a16.shape
        p = b16.shape[1] if tb else b16.shape[0]
        c = self.scratch.empty((m, p), np.float32)
        if m and p:
            if k:
                self.lib.gemm_bf16(b"T" if ta else b"N", b"N" if tb else b"T", m, p, k,
                                   a16.ctypes.data, max(a16.shape[1], 1), b16.ctypes.data,
                                   max(b16.shape[1], 1), c.ctypes.data, max(p, 1),
                                   self.threads if 2 * m * p * k >= GEMM_PARALLEL_MIN else 1)
            else:
                c.fill(0)
        return c

    def scaled_estimate(self, xa, xb):
        """``(q32, scale)``: the estimate of ``xa**2 @ xb**2.T`` times ``scale`` (2**96),
        float32, never converted; None where there is no BF16 GEMM or kernel."""
        if self.lib._bf16 is None or self.kernels is None:
            return None
        (a16, ta), (b16, tb) = self._squares(xa), self._squares(xb)
        return self._bf16_scaled(a16, ta, b16, tb), _EST_SCALE**2

    def classify_estimate(self, q, consts, num):
        """One pass of ``ozlinalg.ozaki.decide.CountPlan.add_tile``: ``(codes, row_lo,
        row_hi)`` (0 kept, 1 native, 2 undecided; per row the smallest bounds of the kept
        entries); None where the generic code must run."""
        if self.kernels is None or q.ndim != 2 or not q.flags.c_contiguous:
            return None
        m, p = q.shape
        codes = np.empty((m, p), np.int8)
        row_lo, row_hi = np.empty(m), np.empty(m)
        self._k(q.size).classify_estimate(q, *consts, *self._num_args(num, m, p), codes,
                                          row_lo, row_hi)
        return codes, row_lo, row_hi

    def kept_below(self, q, consts, num, codes, bound, row_lo):
        """The kept entries whose lower bound is below ``bound`` (bool mask; ``row_lo``
        from :meth:`classify_estimate`); None: generic."""
        if self.kernels is None or q.ndim != 2 or not q.flags.c_contiguous:
            return None
        out = np.empty(q.shape, np.bool_)
        inv, absf, c_lo, c_hi, slack, _ = consts
        self._k(q.size).kept_below(q, inv, absf, c_lo, c_hi, slack,
                                   *self._num_args(num, *q.shape), codes, bound, row_lo, out)
        return out

    @staticmethod
    def _num_args(num, m, p):
        if num is None:
            z = np.zeros(1)
            return z, z, z, z, False
        ia, nb, na, ib = (np.ascontiguousarray(v, np.float64) for v in num)
        return ia, nb, na, ib, True

    def small_product(self, a, bt, out, kind, width, slices, thresholds, min_shift,
                      times=None):
        """A whole small EF product ``out = a @ bt.T`` in one compiled call, with the
        driver's bits (:func:`ozlinalg.ozaki.small.small_product`); returns ``(slices
        used, auto's count)``, or None where the driver must run (no kernels, Inf / NaN,
        native entries, an undecided count). ``thresholds``: ``slices="auto"``'s, for
        up to ``max(max_slices, slices)`` slices. ``times``: a list that receives the
        seconds spent splitting, in the products and accumulating."""
        ker = self.kernels
        if ker is None or kind not in ("hybrid", "bitmask"):
            return None
        info = np.zeros(6 if times is not None else 3, np.int64)
        ker.small_ef_product(a, bt, out, kind == "bitmask", width,
                             0 if slices == "auto" else int(slices), thresholds,
                             0 if min_shift is None else int(min_shift), info)
        if info[1] != 0:  # the driver runs (SMALL_NOMEM too: it raises MemoryError
            return None   # itself if memory is short for it as well)
        if times is not None:
            times[:] = (info[3:] * 1e-9).tolist()
        return int(info[0]), int(info[2])

    # -- fused passes (compiled kernels), each returning False where the generic code runs

    def _k(self, work):
        """The kernel module, its thread count set for a pass over ``work`` entries."""
        ker = self.kernels
        ker.set_threads(self.threads if work >= PARALLEL_MIN else 1)
        return ker

    def map_rows(self, fn, rows, k):
        if self.kernels is not None:
            fn(0, rows)  # the fused kernels are row-parallel themselves
        else:
            super().map_rows(fn, rows, k)

    def axpy(self, alpha, x, acc):
        ker = self.kernels
        if (ker is not None and acc.ndim == 2 and x.shape == acc.shape
                and acc.dtype == np.float64 and x.dtype in (np.int32, np.int64, np.float64)):
            if acc.flags.c_contiguous:
                self._k(acc.size).axpy(float(alpha), x, acc)
                return
            if acc.flags.f_contiguous:  # elementwise: the transposes are row-major
                self._k(acc.size).axpy(float(alpha), x.T, acc.T)
                return
        super().axpy(alpha, x, acc)

    def axpy_outer(self, x, fa, fb, acc):
        """``acc += (x * fa[:, None]) * fb[None, :]`` in one pass; False: generic code."""
        # row-major only: on the transposes the products would come in the other
        # order, (x fb) fa, which rounds differently where one underflows
        if (self.kernels is None or acc.ndim != 2 or x.shape != acc.shape
                or acc.dtype != np.float64 or not acc.flags.c_contiguous):
            return False
        self._k(acc.size).axpy_outer(x, np.ascontiguousarray(fa, np.float64),
                                     np.ascontiguousarray(fb, np.float64), acc)
        return True

    def finish_ef(self, acc, tops, weights, alpha, factors):
        """End of an EF product: ``top = sum(w G for w, G in zip(weights, tops))``
        (exact, in this order), ``acc += alpha * top`` and, with ``factors = (fa, fb)``,
        ``acc *= fa[:, None]; acc *= fb[None, :]``: one pass over the output instead
        of five, the generic operations in the generic order."""
        ok = (self.kernels is not None and acc.ndim == 2 and len(tops) == 3
              and all(t.shape == acc.shape for t in tops))
        fa, fb = factors if factors is not None else (np.ones(1), np.ones(1))
        fa = np.ascontiguousarray(fa, np.float64)
        fb = np.ascontiguousarray(fb, np.float64)
        if ok and acc.flags.c_contiguous:
            self._k(acc.size).finish_ef(acc, *tops, *weights, alpha, fa, fb, factors is not None)
        elif ok and acc.flags.f_contiguous:  # elementwise; (x fb) fa: both exact
            self._k(acc.size).finish_ef(acc.T, *(t.T for t in tops), *weights, alpha, fb, fa,
                                        factors is not None)
        else:
            top = np.zeros(acc.shape, order="F" if acc.flags.f_contiguous else "C")
            for w, t in zip(weights, tops):
                self.axpy(w, t, top)
            self.axpy(alpha, top, acc)
            if factors is not None:
                acc *= fa[:, None]
                acc *= fb[None, :]

    # -- faithful mode (ozlinalg.ozaki.faithful): the generic operations in one pass each

    def axpy_twosum(self, alpha, x, acc, comp):
        """``acc + comp += alpha * x`` by TwoSum; False: generic code."""
        ker = self.kernels
        if (ker is None or acc.ndim != 2 or x.shape != acc.shape or comp.shape != acc.shape
                or x.dtype not in (np.int32, np.int64, np.float64)):
            return False
        if acc.flags.c_contiguous and comp.flags.c_contiguous:
            self._k(acc.size).axpy_twosum(float(alpha), x, acc, comp)
        elif acc.flags.f_contiguous and comp.flags.f_contiguous:  # elementwise
            self._k(acc.size).axpy_twosum(float(alpha), x.T, acc.T, comp.T)
        else:
            return False
        return True

    def finish_twosum(self, acc, comp, top, alpha):
        """The slop of ``ozlinalg.ozaki.faithful.finish`` (``acc`` updated); None: generic."""
        if self.kernels is None or acc.ndim != 2:
            return None
        cu = 2.0**-53 * (1.0 + 2.0**-20)
        if acc.flags.c_contiguous and comp.flags.c_contiguous and top.flags.c_contiguous:
            slop = np.empty(acc.shape)
            self._k(acc.size).finish_twosum(acc, comp, top, float(alpha), cu, slop)
            return slop
        if acc.flags.f_contiguous and comp.flags.f_contiguous and top.flags.f_contiguous:
            slop = np.empty(acc.shape, order="F")
            self._k(acc.size).finish_twosum(acc.T, comp.T, top.T, float(alpha), cu, slop.T)
            return slop
        return None

    def fixed_sums(self, x, square):
        """``ozlinalg.ozaki.decide._fixed_sum`` of ``x**2`` (``square``) or ``|x|`` per row,
        the same floats (exact integer sums), in one pass; None: generic."""
        if self.kernels is None or x.dtype != np.float64 or x.ndim != 2:
            return None
        rows, k = x.shape
        out = np.empty(rows)
        ker = self._k(rows * k)
        if x.strides[1] == 8 or k <= 1:
            ker.fixed_row_sums(x, bool(square), out)
        elif x.strides[0] == 8 or rows <= 1:
            ker.fixed_col_sums(x.T, bool(square), out)
        else:
            return None
        return out

    def digit_sums(self, d):
        """``D[t, i] = sum_k |d[t, i, k]|`` of int8 slices in either layout; None: generic."""
        if self.kernels is None or d.dtype != np.int8 or d.ndim != 3:
            return None
        s, rows, k = d.shape
        out = np.empty((s, rows))
        ker = self._k(rows * k)
        for t in range(s):
            dt = d[t]
            if dt.strides[1] == 1 or k <= 1:
                ker.abs_row_sums(dt, out[t])
            elif dt.strides[0] == 1 or rows <= 1:
                ker.abs_col_sums(dt.T, out[t])
            else:
                return None
        return out

    def certify_ef(self, r, slop, vec, ea, eb, slack):
        """``ozlinalg.ozaki.faithful.ef_certify`` in one pass; None: generic."""
        if self.kernels is None or r.ndim != 2:
            return None
        f64 = np.ascontiguousarray
        va = (f64(vec.SA), f64(vec.WA), f64(vec.MA), f64(vec.nzA))
        vb = (f64(vec.SB), f64(vec.WB), f64(vec.MB), f64(vec.nzB))
        e_a, e_b = f64(ea, np.int64), f64(eb, np.int64)
        if r.flags.c_contiguous and slop.flags.c_contiguous:
            out = np.empty(r.shape, np.bool_)
            self._k(r.size).ef_certify(r, slop, *va, *vb, vec.c1, vec.c0, vec.c2, e_a, e_b,
                                       slack, out)
            return out
        if r.flags.f_contiguous and slop.flags.f_contiguous:  # the bound is symmetric
            out = np.empty(r.shape, np.bool_, order="F")
            self._k(r.size).ef_certify(r.T, slop.T, *vb, *va, vec.c1, vec.c0, vec.c2, e_b,
                                       e_a, slack, out.T)
            return out
        return None

    def certify_crt(self, r, slop, vec, ea, eb, slack):
        """``ozlinalg.ozaki.faithful.crt_certify`` in one pass; None: generic."""
        if (self.kernels is None or r.ndim != 2 or not r.flags.c_contiguous
                or not slop.flags.c_contiguous):
            return None
        f64 = np.ascontiguousarray
        out = np.empty(r.shape, np.bool_)
        self._k(r.size).crt_certify(r, slop, f64(vec.pa), f64(vec.pb), f64(vec.ra),
                                    f64(vec.rb), f64(vec.za), f64(vec.zb), vec.k,
                                    f64(ea, np.int64), f64(eb, np.int64), slack, out)
        return out

    def scale_outer(self, acc, fa, fb):
        """``acc *= fa[:, None] * fb[None, :]`` (two roundings, as the generic code) in
        one pass; False: use the generic code."""
        if self.kernels is None or acc.dtype != np.float64 or acc.ndim != 2:
            return False
        fa = np.ascontiguousarray(fa, np.float64)
        fb = np.ascontiguousarray(fb, np.float64)
        if acc.flags.c_contiguous:
            self._k(acc.size).scale_outer(acc, fa, fb)
        elif acc.flags.f_contiguous:
            # (x fb) fa instead of (x fa) fb: both products are exact (powers of two,
            # no intermediate leaves the normal range: apply_exponents' safe case)
            self._k(acc.size).scale_outer(acc.T, fb, fa)
        else:
            return False
        return True

    def normalize_rows(self, a):
        """Fused :func:`ozlinalg.ozaki.split.normalize_rows` (one pass, row-parallel);
        the result follows ``a``'s memory order (column-contiguous stays so)."""
        done = self._normalize(a, False)
        return None if done is None else done[:2]

    def normalize_rows_sumsq(self, a):
        """``(x, exps, ss)``: :meth:`normalize_rows` and ``ss = (x * x).sum(axis=1)``, with
        NumPy's summation order for ``x``'s memory order (pairwise along contiguous
        rows, one column at a time for column-contiguous ones), in the same pass and
        without the squared temporary; None: generic code."""
        return self._normalize(a, True)

    def _normalize(self, a, sumsq):
        ker = self.kernels
        if ker is None or a.dtype != np.float64 or a.ndim != 2:
            return None
        rows, k = a.shape
        e = np.empty(rows, np.int32)
        ss = np.empty(rows if sumsq else 0)
        ker = self._k(a.size)
        if _is_cols(a):
            xt = self.scratch.empty((k, rows), np.float64)
            if sumsq:
                ker.normalize_cols_sumsq(a.T, xt, e, ss, max(1, min(ker.threads(), rows // 64)))
            else:
                ker.normalize_cols(a.T, xt, e)
            return xt.T, e, ss
        x = self.scratch.empty((rows, k), np.float64)
        ker.normalize_rows(a, x, e, ss)
        return x, e, ss

    def split_rows(self, kind, x, s, width, out, scales):
        """Fused split into int8 slices (hybrid, bitmask, rn) in ``x``'s memory order;
        False: use the generic code."""
        ker = self.kernels
        if ker is None or out.dtype != np.int8 or x.dtype != np.float64 or kind == "fp":
            return False
        rows = x.shape[0]
        cols = _is_cols(x) and (out.strides[1] == 1 or rows <= 1)
        if cols:
            xt, outt = x.T, out.transpose(0, 2, 1)
        else:
            x = np.ascontiguousarray(x)
        ker = self._k(x.size * s)
        if kind == "hybrid":
            base = np.empty(rows)
            if cols:
                ker.split_hybrid_cols(xt, s, width, outt, base)
            else:
                ker.split_hybrid(x, s, width, out, base)
            for t in range(s):
                scales[t] = base * 2.0 ** (-width * t)
        elif kind == "bitmask":
            if cols:  # elementwise: the transposes are a row split
                ker.split_bitmask(xt, s, width, outt)
            else:
                ker.split_bitmask(x, s, width, out)
            for t in range(s):
                scales[t] = 2.0 ** (-width * (t + 1))
        elif kind == "rn":
            mus = np.empty((s, rows))
            if cols:
                ker.split_rn_cols(xt, s, width, outt, mus)
            else:
                ker.split_rn(x, s, width, out, mus)
            scales[...] = mus
        else:
            return False
        return True

    def split_raw(self, kind, a, s, width, operand):
        """``(slices, scales, exps)`` of the rows of ``a`` straight from ``a``: the
        normalization and the split in one pass, no normalized copy (fixed slice
        counts: ``auto`` needs the normalized rows for its estimate). The result
        is that of :func:`ozlinalg.ozaki.split.normalize_rows` and the split, bit
        for bit. None where it does not apply (kind, dtype, no kernels)."""
        if self.kernels is None or kind != "hybrid" or a.dtype != np.float64 or a.ndim != 2:
            return None
        rows = a.shape[0]
        out = self.empty_slices_like(a, s, kind, operand)
        base = np.empty(rows)
        exps = np.empty(rows, np.int32)
        ker = self._k(a.size * s)
        if _is_cols(a) and (out.strides[1] == 1 or rows <= 1):
            ker.split_hybrid_raw_cols(a.T, s, width, out.transpose(0, 2, 1), base, exps)
        else:
            if not (a.flags.c_contiguous or a.strides[1] == 8):
                a = np.ascontiguousarray(a)
            ker.split_hybrid_raw(a, s, width, out, base, exps)
        scales = np.empty((s, rows))
        for t in range(s):
            scales[t] = base * 2.0 ** (-width * t)
        return out, scales, exps

    def crt_residues(self, x, mult, round_rows, mods, bits, out):
        """Fused Ozaki-II residues (int8) in ``x``'s memory order; False: generic code."""
        ker = self.kernels
        if ker is None or out.dtype != np.int8 or x.dtype != np.float64:
            return False
        plan = _residue_constants(tuple(int(p) for p in mods), int(bits))
        if plan is None:
            return False
        d, pf, inv, coefs, pow2 = plan
        mult = np.ascontiguousarray(mult, np.float64)
        rnd = np.ascontiguousarray(round_rows, np.bool_)
        ker = self._k(x.size * len(mods))
        if _is_cols(x) and (out.strides[1] == 1 or x.shape[0] <= 1):
            o, slots = _slot_first(out.transpose(0, 2, 1))
            if o is None:
                return False
            ker.crt_residues_cols(x.T, mult, rnd, d, pf, inv, coefs, pow2, o, slots)
            return True
        o, slots = _slot_first(out)
        mid = False
        if o is None:  # the grouped layout: (rows, s, k) storage
            o, slots = _slot_first(out.transpose(1, 0, 2), axis=1)
            mid = True
            if o is None:
                return False
        ker.crt_residues(np.ascontiguousarray(x), mult, rnd, d, pf, inv, coefs, pow2, o, slots,
                         mid)
        return True

    def crt_bound(self, x, out):
        """``out = -ceil(128 |x|)`` in int8 (Ozaki-II's accurate bound); False: generic."""
        if self.kernels is None or out.dtype != np.int8:
            return False
        ker = self._k(x.size)
        if _is_cols(x) and (out.strides[0] == 1 or x.shape[0] <= 1):
            ker.crt_bound(x.T, out.T)  # elementwise
        else:
            ker.crt_bound(np.ascontiguousarray(x), out)
        return True

    def abs_max(self, x, axis):
        """``max |x|`` along ``axis`` of a float64 2-D array in one parallel pass
        (``ozlinalg.ozaki.balance._abs_max``: Inf where a line holds Inf or NaN); None:
        generic."""
        if self.kernels is None or x.dtype != np.float64 or x.ndim != 2 or x.size == 0:
            return None
        c, f = x.flags.c_contiguous, x.flags.f_contiguous
        if not (c or f):
            return None
        rows = (axis == 1) == c  # the lines reduced are contiguous
        xx = x if c else x.T
        out = np.empty(xx.shape[0] if rows else xx.shape[1])
        ker = self._k(x.size)
        (ker.abs_max_rows if rows else ker.abs_max_cols)(xx, out)
        return out

    def bound_r_min(self, w, ca, cb, num, inv_k):
        """``ozlinalg.ozaki.crt._bound_r_min`` in one pass; None: generic."""
        if self.kernels is None or w.dtype != np.int32 or w.ndim != 2 or \
                not w.flags.c_contiguous:
            return None
        f64 = np.ascontiguousarray
        rows = w.shape[0]
        rmin, rarg = np.empty(rows), np.empty(rows, np.int64)
        self._k(w.size).bound_r_min(w, f64(ca, np.float64), f64(cb, np.float64),
                                    *(f64(v, np.float64) for v in num), float(inv_k),
                                    rmin, rarg)
        return rmin, rarg

    def crt_bound_shifts(self, m, p):
        """A :class:`_BoundShifts` for an m x p product's accurate scaling (None: the
        generic ``log2 W`` tiles)."""
        return None if self.kernels is None else _BoundShifts(self, m, p)

    def crt_accumulator(self, consts):
        """Residues reduced to int8 right after each GEMM, one combine pass at the end."""
        if self.kernels is None:
            return None
        return _FusedCRT(self, consts)


class _FusedCRT:
    """:class:`ozlinalg.ozaki.crt.CRTAccumulator` in two fused kernels: ``add`` reduces
    each INT32 product mod p_t to int8 (1 byte per entry and modulus), ``result``
    rebuilds C' per entry from all residues (the generic operations in the generic
    order)."""

    def __init__(self, engine, consts):
        self.engine, self.consts = engine, consts
        self.res = None
        self.spare = None

    def recycle(self, b):
        """Let the residues live in the memory of ``b`` (the products' right operand,
        slices ``(s, p, k)``), whose slot t is dead once product t is taken: with the
        slots in order in one C-contiguous block and m <= k, the residues of products
        0..t fit in slots 0..t, and the combine's input needs no memory of its own
        (240 MB at n = 4096, 15 moduli)."""
        self.spare = b

    def _storage(self, shape):
        """int8 ``(nmod,) + shape``, in the spare operand's memory where it fits."""
        b, self.spare = self.spare, None
        nmod = len(self.consts.moduli)
        if b is not None and b.dtype == np.int8 and b.shape[0] == nmod and \
                shape[0] <= b.shape[2] and shape[1] == b.shape[1]:
            for view in (b.transpose(0, 2, 1), b):
                o, slots = _slot_first(view)
                if o is not None and slots.size and slots[0] == 0:
                    return o.reshape(-1)[:nmod * shape[0] * shape[1]].reshape((nmod,) + shape)
        return np.empty((nmod,) + shape, np.int8)

    def add(self, t, prod):
        consts = self.consts
        if self.res is None:
            self.res = self._storage(prod.shape)
        p = int(consts.moduli[t])
        if prod.dtype == np.int32 and prod.flags.c_contiguous and _reducible(p):
            self.engine._k(prod.size).crt_reduce(prod, float(p), p & (p - 1) == 0, self.res[t])
        else:
            from ..exact import symmetric_mod  # noqa: PLC0415

            self.res[t] = symmetric_mod(np, prod.astype(np.float64), p)

    def faithful_result(self):
        """``(c, slop)`` as ``CRTAccumulator.faithful_result``, in one fused pass."""
        consts = self.consts
        res, self.res = self.res, None
        from ..exact import LIMB_BITS  # noqa: PLC0415

        nl = len(consts.P_limbs)
        # both internal: the caller certifies and copies them into its result
        out = self.engine.scratch.empty(res.shape[1:], np.float64)
        slop = self.engine.scratch.empty(res.shape[1:], np.float64)
        powers = np.array([2.0 ** (LIMB_BITS * l) for l in range(nl)])
        self.engine._k(res.size).crt_combine_faithful(
            res, *_combine_constants(consts), 2.0**LIMB_BITS, powers,
            2.0**-53 * (1.0 + 2.0**-20), out, slop)
        return out, slop

    def result(self):
        consts = self.consts
        res, self.res = self.res, None
        from ..exact import LIMB_BITS  # noqa: PLC0415

        out = _touched(np.empty(res.shape[1:]))
        self.engine._k(res.size).crt_combine(res, *_combine_constants(consts),
                                             2.0**LIMB_BITS, out)
        return out


def _touched(x):
    """``x`` (fresh, C-contiguous) with every page written once from this thread.

    The combine's result is the caller's array (not from the scratch pool), a fresh
    mapping each call. Its first touch inside the two-thread kernel took 35 ms at
    n = 2048 (32 MiB) on the VM this was measured on, against 2 ms for one thread
    writing one element per page before it (then the kernel ran in 7 ms): the
    product went from 220 to 185 ms."""
    flat = x.reshape(-1)
    if flat.nbytes >= (4 << 20):
        flat[::4096 // flat.itemsize] = 0
    return x


def _combine_constants(consts):
    """``(frac, wlimbs, plimbs)`` for the ``crt_combine`` kernel: rows padded with
    zeros to a multiple of four moduli, at least three limb columns."""
    n, nl = len(consts.moduli), len(consts.P_limbs)
    rows = -(-n // 4) * 4
    frac = np.zeros(rows)
    frac[:n] = consts.frac
    wl = np.zeros((rows, max(nl, 3)))
    wl[:n, :nl] = consts.weight_limbs
    return frac, wl, np.array(consts.P_limbs)


class _BoundShifts:
    """The accurate scaling's exact maxima (``ozlinalg.ozaki.crt._accurate_shifts``) from
    the bound products W kept as int32 (half of a float64 copy): per row ``max_j W_ij``
    as the tiles arrive, per column ``max_i W_ij 2**mu_i`` as the maxima over the rows
    of each shift value g (a few groups) of ``M_gj 2**g``, one integer pass over W. The
    same values as the generic code's float pass (all exact), so the same shifts."""

    def __init__(self, engine, m, p):
        self.engine, self.m, self.p = engine, m, p
        self.rowmax = np.zeros(m)
        self.tiles = []

    def add(self, i0, i1, j0, j1, w, keep=True):
        """Take the bound product ``w`` of the output tile (i0:i1, j0:j1): its row maxima,
        and ``w`` itself, kept as it is (the caller gives it a buffer of its own), unless
        ``keep`` is False (W recomputed for the later passes, :meth:`stream`)."""
        if not (w.dtype == np.int32 and w.flags.c_contiguous):
            w = np.ascontiguousarray(w, np.int32)  # W < 2**31
        if w.shape[1]:
            part = np.ascontiguousarray(self.rowmax[i0:i1])
            self.engine._k(w.size).int_row_max(w, part)
            self.rowmax[i0:i1] = part
        if keep:
            self.tiles.append((i0, i1, j0, j1, w))

    def stream(self, tiles):
        """Read W from ``tiles`` (an iterable of ``(i0, i1, j0, j1, w)`` that recomputes
        them on each pass) in the later passes instead of kept tiles: where W for the
        whole output does not fit the memory plan (``ozlinalg.ozaki.memory``)."""
        self.tiles = tiles

    def row_max(self):
        """``max_j W_ij`` per row, exactly."""
        return self.rowmax

    def col_max_scaled(self, mu):
        """``max_i W_ij 2**mu_i`` per column, exactly: the column maxima per group of rows
        with one shift (a few groups), one integer pass over W."""
        groups, gid = np.unique(mu, return_inverse=True)
        gid = np.ascontiguousarray(gid.reshape(-1), np.int64)
        cm = np.zeros((len(groups), self.p), np.int64)
        for i0, i1, j0, j1, w in self.tiles:
            if w.size:
                part = np.ascontiguousarray(cm[:, j0:j1])
                ker = self.engine._k(w.size)
                ker.group_col_max(w, gid[i0:i1], part, max(1, min(ker.threads(), w.shape[1] // 64)))
                cm[:, j0:j1] = part
        out = np.zeros(self.p)
        for g, row in zip(groups.tolist(), cm):  # W < 2**31: exact in float64, and scaled
            np.maximum(out, np.ldexp(row.astype(np.float64), int(g)), out=out)
        return out


def _reducible(p):
    """Moduli the division-free residue kernels take: odd, or a power of two."""
    return 1 <= p <= 256 and (p % 2 == 1 or p & (p - 1) == 0)


#: |digit sum| < 2**51: the exactness condition of the kernels' residue route.
_RESIDUE_BITS = 51


@functools.lru_cache(maxsize=64)
def _residue_constants(mods, bits):
    """``(d, moduli, 1 / moduli, coefs, pow2)`` for the ``crt_residues`` kernel,
    or None (a modulus the kernels do not take).

    Integers below 2**bits are cut into ``count`` digits of ``d`` bits so that
    ``sum_t digit_t (2**(d t) mod p)`` stays below 2**51 in magnitude (the digits are
    below 2**d, the coefficients below 256): one digit (none cut) up to 51 bits,
    then ``d = 51 - ceil(log2(255 (count - 1) + 1))``, 43 bits for two digits.
    """
    if not all(_reducible(p) for p in mods):
        return None
    bits = max(int(bits), 1)
    if bits <= _RESIDUE_BITS:
        d, count = bits, 1
    else:
        for count in range(2, 16):
            d = _RESIDUE_BITS - (255 * (count - 1)).bit_length()
            if count * d >= bits:
                break
        else:
            return None
    coefs = np.array([[float(pow(2, d * t, p)) for t in range(count)] for p in mods])
    pf = np.array([float(p) for p in mods])
    pow2 = np.array([p & (p - 1) == 0 for p in mods])
    return d, pf, 1.0 / pf, coefs, pow2


def _slot_first(view, axis=0):
    """``(o, slots)``: the C-contiguous array behind ``view`` with its slot axis
    ``axis`` un-reversed, and slot t's index in it; ``(None, None)`` if there is none."""
    s = view.shape[axis]
    slots = np.arange(s)
    if view.strides[axis] < 0:
        view = np.flip(view, axis)
        slots = s - 1 - slots
    if not view.flags.c_contiguous:
        return None, None
    return view, slots


def _reversed(kind, operand):
    """Whether an operand's slices are stored in reverse order: B's slices for the EF
    groups (``A_i B_{g-i}`` adjacent); Ozaki II pairs residues of one modulus only."""
    return operand == "b" and kind != "crt"


def _is_cols(x):
    """True when the columns of the 2-D ``x`` are contiguous and its rows are not."""
    return x.ndim == 2 and x.T.flags.c_contiguous and not x.flags.c_contiguous


def _to_bf16(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (u >> np.uint32(16)).astype(np.uint16)


def self_test(engine):
    """``(ok, detail)``: is ``engine``'s INT8 GEMM exact at the extreme values?

    Products of -128 and 127 in every sign combination, a long inner dimension
    whose worst case is just below 2**31 (k = 2**17 - 1024 of (-128)(-128),
    the Ozaki-II bound GEMM's case), random full-range values, and the grouped
    storage with a multi-GEMM ``beta = 1`` run, all against int64 NumPy.
    Below VNNI, oneDNN's ``vpmaddubsw`` path saturates on these and fails.

    A call that raises is a failed test, except MemoryError (and KeyboardInterrupt),
    which propagate: they are no verdict on the GEMM, and the caller tries again.
    """
    rng = np.random.default_rng(20250)
    checks = []
    try:
        k = (1 << 17) - 1024
        pat = np.empty((6, k), np.int8)
        pat[0] = -128
        pat[1] = 127
        pat[2] = np.where(np.arange(k) % 2, 127, -128)
        pat[3] = np.where(np.arange(k) % 3, -128, 127)
        pat[4] = rng.choice(np.array([-128, 127, -127, 126], np.int8), k)
        pat[5] = rng.integers(-128, 128, k)
        checks.append(("extremes, k = 2**17 - 1024", pat[None], pat[None], [(0, 0)], 128))
        for kk in (1, 3, 64, 1000, 4099):
            a = rng.choice(np.array([-128, 127], np.int8), (2, 9, kk))
            b = rng.choice(np.array([-128, 127], np.int8), (2, 7, kk))
            checks.append((f"+-128/127, k = {kk}", a, b, [(0, 0), (0, 1), (1, 0)], 128))
        s, kk = 4, 515
        da = engine.empty_slices(s, 33, kk, "bitmask", "a")
        db = engine.empty_slices(s, 17, kk, "bitmask", "b")
        da[...] = rng.integers(-128, 128, da.shape)
        db[...] = rng.integers(-128, 128, db.shape)
        checks.append(("grouped storage, one EF group", da, db, [(i, 3 - i) for i in range(4)],
                       128))
        for name, a, b, pairs, bound in checks:
            got, _ = engine.int_matmul_sum(a, b, pairs, bound, bound)
            a64, b64 = a.astype(np.int64), b.astype(np.int64)
            want = sum(a64[i] @ b64[j].T for i, j in pairs)
            if not np.array_equal(got, want):
                bad = int(np.count_nonzero(got != want))
                return False, f"{name}: {bad} of {want.size} entries wrong"
        # beta = 1 accumulation over several GEMMs (claimed bounds force one GEMM each)
        a = rng.choice(np.array([-128, 127], np.int8), (3, 5, 300))
        got, calls = engine.int_matmul_sum(a, a, [(0, 0), (1, 1), (2, 2)], 1 << 10, 1 << 10)
        want = sum(a[t].astype(np.int64) @ a[t].astype(np.int64).T for t in range(3))
        if calls < 2 or not np.array_equal(got, want):
            return False, "beta = 1 accumulation wrong"
    except MemoryError:  # not a verdict: the engine's creation says so and is retried
        raise
    except Exception as exc:  # a failing call is a failed test, never a crash
        return False, f"{type(exc).__name__}: {exc}"
    return True, f"exact on {len(checks) + 1} checks (ISA {engine.isa})"
