"""The oneDNN engine's class: creation (library, kernels, self-test), slice storage and
the exact INT8 GEMMs; its fused passes come from the pass-family mixins (see
:mod:`ozlinalg.engines.onednn`). Everything but the GEMM is :class:`Int8Engine`, which
the AVX2 engine (:mod:`ozlinalg.engines.avx2`) shares."""
from __future__ import annotations

import contextlib
import functools
import warnings

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..._exceptions import PerformanceWarning
from .. import _dnnl, kernels
from .._process import BlasThreadLimit, at_fork_child, native_threads
from .._scratch import ScratchPool, release_after_oom
from ..base import group_runs
from ..sgemm import SGEMMEngine
from ._common import GEMM_PARALLEL_MIN, EngineUnavailable, _col_lines
from .accumulate import AccumulatePasses
from .crt import CRTPasses, _reducible
from .estimate import EstimatePasses
from .faithful import FaithfulPasses
from .normalize import NormalizePasses
from .selftest import self_test
from .split import SplitPasses

__all__ = ["ENV_FUSED", "INT32_EXACT", "Int8Engine", "OneDNNEngine", "run_view"]

#: oneDNN's ``avx512_core_bf16`` ISA mask (ozlinalg.engines._dnnl.ISA_NAMES; the masks are
#: cumulative): the CPU has BF16 dot products.
_ISA_BF16 = 0xE7

#: oneDNN's ``avx512_core_amx`` ISA mask: the CPU has AMX (INT8 and BF16 tiles).
_ISA_AMX = 0xFEF

#: Largest magnitude an INT32 run may reach.
INT32_EXACT = (1 << 31) - 1

#: Most inner indices of ``gemm_amx_mod`` (the kernel's one panel; X_KMOD in
#: ``_csrc/k_gemm_amx.c``).
AMX_MOD_MAX_K = 4096

ENV_FUSED = kernels.ENV_FUSED


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


class Int8Engine(NormalizePasses, SplitPasses, EstimatePasses, CRTPasses, AccumulatePasses,
                 FaithfulPasses, SGEMMEngine):
    """What the CPU engines with int8 slices share around their exact INT8 GEMM: the
    storage, the fused passes (one mixin per pass family), the INT32 runs of
    :meth:`int_matmul_sum` and the one-time exactness self-test. A subclass supplies
    the GEMM (:meth:`_run_gemm`): :class:`OneDNNEngine` (oneDNN's ``s8s8s32``) and
    :class:`ozlinalg.engines.avx2.AVX2Engine` (the compiled ``vpmaddwd`` GEMM)."""

    device = "cpu"
    slice_bytes = 1
    #: What the exactness self-test's messages call the engine.
    label = "INT8"
    #: oneDNN's BF16 GEMM for the magnitude estimates (``dnnl_gemm_bf16bf16f32``'s
    #: binding), or None: the SGEMM engine's FP32 estimate (:mod:`.estimate`).
    bf16_gemm = None

    def _setup(self, threads, fused):
        """The part of creation before the GEMM is known: threads (OpenMP: one in a
        forked child), the compiled passes (``fused`` False: none), the BLAS libraries
        and the scratch pool."""
        SGEMMEngine.__init__(self, threads or native_threads())
        at_fork_child(Int8Engine._after_fork_onednn, self)
        if fused is False:
            self.kernels, self.kernels_reason = None, "disabled"
        else:
            self.kernels, self.kernels_reason = _load_kernels()
        self.launches = 0
        BlasThreadLimit.prepare()  # find the BLAS libraries now, not inside a product
        # The pool reads OZLINALG_SCRATCH_CACHE: a bad value must raise here, not
        # inside the self-test, which would take it for an inexact GEMM.
        self.scratch  # noqa: B018

    def _run_self_test(self):
        """:func:`self_test`, where running out of memory is no verdict.

        A MemoryError (a busy machine, a tight container) says nothing about the
        GEMM's exactness: it propagates, with the pool's buffers released, and
        as no engine was made, nothing is cached (:mod:`ozlinalg.engines.select`), so the next
        call tests again. A KeyboardInterrupt propagates as it is. Only a wrong
        answer, or another failing call, is an :class:`EngineUnavailable`.
        """
        try:
            return self_test(self)
        except MemoryError as exc:
            release_after_oom()
            raise MemoryError(
                f"ozlinalg: out of memory during the {self.label} engine's one-time "
                "exactness self-test (a few MiB); nothing was cached, the next call tries "
                "again") from exc

    @functools.cached_property
    def scratch(self):
        """Large temporaries kept between products (no page faults; see
        :mod:`ozlinalg.engines._scratch`)."""
        return ScratchPool()

    def _passes_text(self):
        """How the passes run, for :meth:`describe`."""
        why = self.kernels_reason
        return f"fused ({why})" if self.kernels else f"NumPy: {why}"

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
        flops. Measured: ``benchmarks/studies/cpu_threads.py``, docs/performance.md. The
        limit is reference-counted across threads and restores what it found
        (:class:`ozlinalg.engines._process.BlasThreadLimit`).
        """
        if self.native_blas_threads is None:
            return contextlib.nullcontext()
        return BlasThreadLimit(self.native_blas_threads)

    def _after_fork_onednn(self):
        # libgomp's pool does not survive fork: OpenMP work on one thread in the child
        self.threads = 1

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
        where :class:`.crt._FusedCRT` reuses the slots of finished products.
        """
        rows, k = x.shape
        if kind == "fp" or not _col_lines(x):
            return self.empty_slices(s, rows, k, kind, operand)
        full = self.scratch.empty((s, k, rows), np.int8)
        view = full[::-1] if _reversed(kind, operand) else full
        return view.transpose(0, 2, 1)

    output_orders = ("C", "F")
    #: Never: on the 2-core AVX-512 VNNI machine this was measured on, emulation
    #: (default method, ``slices="auto"``) took 3.2-4.6x native DGEMM / LAPACK at
    #: n = 1024 .. 4096 (``OZLINALG_ENGINE=onednn python benchmarks/calibration/crossover.py
    #: --sizes 1024 2048 4096 --reps 2``, 2026-12-01, 2 threads;
    #: benchmarks/results/crossover-onednn-zen5-2026-12-01.json). The INT8 units are
    #: 15-16x DGEMM's rate there and a DGEMM-level product needs 36-45 INT8 GEMMs;
    #: on a 2-core AMX Xeon with the compiled AMX GEMM crt still took 1.9x and
    #: hybrid-ef 3.3x native DGEMM at n = 1024 (``python -m ozlinalg compare --n 1024``,
    #: 2026-12-07).
    crossovers: dict = {}

    @property
    def memory_model(self):
        """``ozaki.memory.plan_bytes`` coefficients of the fused passes (the generic ones,
        ``ozaki.memory.MEMORY_MODEL``, for any key missing here): one normalized float64
        copy (none for fixed counts) and BF16 squares per input entry; FP64 accumulator
        (beside the result when there are several tiles), top groups, INT32 result and
        the FP32 estimate per output entry; for Ozaki-II also the bound operand, and one
        int8 residue per output entry and modulus instead of FP64 limbs; W as int32;
        Ozaki-II's product phase takes its residues from the operands' rows (no
        normalized copy: only the residues, counted as slices).
        Fitted to the peaks of ``benchmarks/studies/memory_bound.py`` (tests/ozaki/test_matmul.py::
        TestMemory checks them)."""
        if self.kernels is None:
            return None
        return {"input": 12, "output": 32, "product_input": 12, "product_output": 72,
                "crt_input": 16, "crt_product_input": 0, "crt_output": 32,
                "crt_output_per_modulus": 1, "bounds": 4}
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

    def _layout(self, x):
        """``(x, trans, ld, kstep)`` of int8 slices ``x`` (s, rows, k): ``trans`` False
        when the k entries of a row are contiguous (stored rows x k, row stride ld),
        True when the rows are (stored k x rows, ld = kstep = stride along k)."""
        if x.dtype != np.int8:
            raise TypeError(f"ozlinalg: the {self.label} engine multiplies int8 slices, "
                            f"got {x.dtype}")
        _, rows, k = x.shape
        if (x.strides[2] == 1 or k <= 1) and x.strides[1] >= max(k, 1):
            return x, False, max(x.strides[1], k, 1), 1
        if (x.strides[1] == 1 or rows <= 1) and x.strides[2] >= max(rows, 1):
            return x, True, max(x.strides[2], rows, 1), max(x.strides[2], rows, 1)
        x = np.ascontiguousarray(x)
        return x, False, max(k, 1), 1

    def _run_gemm(self, la, i, lb, j, k0, k1, out, colmajor, beta):
        """One GEMM of a run: ``out (+)= A_run @ B_run^T`` (``beta`` 0 / 1), ``A_run`` the
        inner indices ``k0 .. k1`` of slice ``i`` of the operand ``la = (x, trans, ld,
        kstep)`` (:meth:`_layout`), continuing into the next slices of the grouped
        storage past its length; ``out`` column-major where ``colmajor``."""
        raise NotImplementedError

    def _compiled_gemm(self, ker, name, parallel_min, la, i, lb, j, k0, k1, out, colmajor,
                       beta):
        """:meth:`_run_gemm` on the compiled GEMM ``name`` of the kernel module ``ker``
        (``c (+)= a @ b.T``, any strides), on one thread below ``parallel_min``
        INT8 operations."""
        x, y = run_view(la, i, k0, k1), run_view(lb, j, k0, k1)
        m, p = out.shape
        ker.set_threads(self.threads if 2 * m * p * (k1 - k0) >= parallel_min else 1)
        gemm = getattr(ker, name)
        if colmajor:  # C^T = B A^T, row-major
            gemm(y, x, out.T, beta)
        else:
            gemm(x, y, out, beta)
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
        la, lb = (a, ta, lda, ka), (b, tb, ldb, kb)
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
                self._run_gemm(la, i, lb, j, k0, k1, out, colmajor, 1 if cur else 0)
                calls += 1
                cur += w
        if acc64 is not None:
            acc64 += out
            return acc64, calls
        return out, calls

    def map_rows(self, fn, rows, k):
        if self.kernels is not None:
            fn(0, rows)  # the fused kernels are row-parallel themselves
        else:
            super().map_rows(fn, rows, k)


class OneDNNEngine(Int8Engine):
    """Exact INT8 GEMMs on oneDNN (``dnnl_gemm_s8s8s32``) for NumPy arrays, or on the
    compiled AMX GEMM (``_csrc/k_gemm_amx.c``) where the CPU has AMX-INT8.

    ``amx``: None takes the AMX GEMM where :func:`~ozlinalg.engines.kernels.load_amx`
    finds it, False never (oneDNN's GEMM throughout), or a ``(module, reason)`` pair
    (tests). The AMX GEMM runs only where it passes the exactness self-test; where it
    fails, oneDNN's GEMM runs and ``amx_reason`` says why.

    Raises :class:`EngineUnavailable` (with the reason) where oneDNN does not
    load or its INT8 GEMM fails the exactness self-test.
    """

    name = "cpu-onednn"
    label = "oneDNN"

    def __init__(self, threads: int | None = None, lib=None, fused: bool | None = None,
                 amx=None):
        # OpenMP threads (oneDNN's and the kernels'): one in a forked child
        self._setup(threads, fused)
        if lib is None:
            lib, reason = _dnnl.load()
            if lib is None:
                raise EngineUnavailable(reason)
        self.lib = lib
        if amx is False:
            amx = (None, "not asked for")
        elif amx is None and lib.isa & _ISA_AMX != _ISA_AMX:
            # oneDNN's ISA says what the engine may run: a CPU without AMX, or a cap
            # (ONEDNN_MAX_CPU_ISA) that stands for one
            amx = (None, f"oneDNN's ISA is {lib.isa_name}")
        self.amx, self.amx_reason = amx if amx is not None else kernels.load_amx()
        if self.amx is not None:
            ok, detail = self._run_self_test()
            if ok:
                self.self_test = detail
                return
            self.amx, self.amx_reason = None, f"failed the INT8 exactness self-test: {detail}"
        ok, detail = self._run_self_test()
        self.self_test = detail
        if not ok:
            raise EngineUnavailable(
                f"oneDNN {self.version} (ISA {lib.isa_name}) failed the INT8 exactness "
                f"self-test: {detail}")

    # -- what ran ---------------------------------------------------------------------

    @property
    def version(self):
        return ".".join(map(str, self.lib.version))

    @property
    def isa(self):
        return self.lib.isa_name

    @property
    def bf16_gemm(self):
        """oneDNN's BF16 GEMM for the estimates where the CPU multiplies BF16 itself
        (oneDNN's ISA avx512_core_bf16 and up: AVX-512 BF16 or AMX), else None: the FP32
        SGEMM estimate. Below that ISA oneDNN converts BF16 to FP32 on the way, and
        its BF16 GEMM ran 6x slower than BLAS SGEMM (n = 2048, one core of an
        AVX-512 VNNI Xeon without BF16: 0.54 s against 0.09 s; the INT8 GEMM 0.03 s)."""
        if self.lib._bf16 is None or self.lib.isa & _ISA_BF16 != _ISA_BF16:
            return None
        return self.lib.gemm_bf16

    def int8_peak_ratio(self):
        """INT8 over FP64 peak per core at oneDNN's ISA: AMX 2048 / 32 ops a cycle (64),
        VNNI 8x per instruction (16 with slack for cores whose FP64 units are fewer),
        else 8 (``vpmaddubsw``)."""
        isa = self.lib.isa  # cumulative masks (ozlinalg.engines._dnnl.ISA_NAMES)
        if isa & _ISA_AMX == _ISA_AMX:
            return 64.0
        return 16.0 if isa & 0x67 == 0x67 or isa & 0xF == 0xF else 8.0  # VNNI (512 / 256)

    def tuning_facts(self):
        """The tuning cache's key here: the SGEMM engine's, oneDNN's effective ISA, the
        GEMM that runs, the compiled kernels' build, and oneDNN's version."""
        return {**super().tuning_facts(), "isa": self.isa, "gemm": self._gemm_text(),
                "kernels": self.kernels.isa if self.kernels is not None else None,
                "libraries": {"onednn": self.version}}

    def _gemm_text(self):
        return "AMX tdpbssd (compiled)" if self.amx is not None else "oneDNN s8s8s32"

    def describe(self):
        why = ""
        if self.amx is None and self.lib.isa & _ISA_AMX == _ISA_AMX:
            why = f"; the compiled AMX GEMM not used: {self.amx_reason}"
        return (f"{self.name} (oneDNN {self.version}, ISA {self.isa}, GEMM: "
                f"{self._gemm_text()}, int8 self-test passed, passes: {self._passes_text()}"
                f"{why})")

    # -- the GEMM ---------------------------------------------------------------------

    def gemm(self, transa, a_ptr, lda, transb, b_ptr, ldb, c, m, p, k, beta):
        """``c (m x p, int32, row-major) (+)= A @ B^T`` for int8 ``A`` (m x k) and ``B``
        (p x k), each stored either way (``trans*``: stored transposed)."""
        # (a one-row c may carry any row stride: oneDNN wants ldc >= p)
        self.lib.gemm_s8s8s32(b"T" if transa else b"N", b"N" if transb else b"T", m, p, k,
                              a_ptr, lda, b_ptr, ldb, c.ctypes.data,
                              max(c.strides[0] // 4, p, 1), beta,
                              self.threads if 2 * m * p * k >= GEMM_PARALLEL_MIN else 1)
        self.launches += 1

    def int_matmul_mod(self, a, b, t, p, out):
        """``out = (a[t] @ b[t].T) mod p`` (symmetric residues, int8) in one fused AMX
        kernel, the INT32 sums reduced from the tiles (no INT32 product in memory, no
        pass over one); False where it does not apply (no AMX GEMM, over
        :data:`AMX_MOD_MAX_K` inner indices, a sum that could pass INT32, a modulus the
        residue kernels do not take, or ``out`` sharing memory other than as the kernel
        allows): the caller multiplies and reduces instead. ``out`` may lie on ``b[t]``'s
        own memory where its column j is row j of ``b[t]`` (Ozaki II's residues in the
        dead slot of B's, :class:`.crt._FusedCRT`)."""
        if self.amx is None or not hasattr(self.amx, "gemm_amx_mod"):
            return False
        _, m, k = a.shape
        pp = b.shape[1]
        if (k > AMX_MOD_MAX_K or k * 128 * 128 > INT32_EXACT or not _reducible(p)
                or out.dtype != np.int8
                or out.shape != (m, pp) or b.shape[2] != k):
            return False
        x = run_view(self._layout(a), t, 0, k)
        y = run_view(self._layout(b), t, 0, k)
        if np.may_share_memory(out, x) or (np.may_share_memory(out, y)
                                           and not _column_on_row(out, y)):
            return False
        self.amx.set_threads(self.threads if 2 * m * pp * k >= GEMM_PARALLEL_MIN else 1)
        self.amx.gemm_amx_mod(x, y, out, float(p), p & (p - 1) == 0)
        self.launches += 1
        return True

    def _run_gemm(self, la, i, lb, j, k0, k1, out, colmajor, beta):
        if self.amx is not None:
            self._compiled_gemm(self.amx, "gemm_amx", GEMM_PARALLEL_MIN, la, i, lb, j, k0, k1,
                                out, colmajor, beta)
            return
        a, ta, lda, ka = la
        b, tb, ldb, kb = lb
        pa = a.ctypes.data + i * a.strides[0] + k0 * ka
        pb = b.ctypes.data + j * b.strides[0] + k0 * kb
        m, p = out.shape
        if colmajor:
            self.gemm(tb, pb, ldb, ta, pa, lda, out.T, p, m, k1 - k0, beta)
        else:
            self.gemm(ta, pa, lda, tb, pb, ldb, out, m, p, k1 - k0, beta)


def _reversed(kind, operand):
    """Whether an operand's slices are stored in reverse order: B's slices for the EF
    groups (``A_i B_{g-i}`` adjacent); Ozaki II pairs residues of one modulus only."""
    return operand == "b" and kind != "crt"


def _column_on_row(out, y):
    """Whether ``out`` (m x p) lies on ``y`` (p x k) with column j of ``out`` on row j of
    ``y``, ``m <= k``: the one sharing ``gemm_amx_mod`` allows."""
    m = out.shape[0]
    k = y.shape[1]
    return (m <= k and out.ctypes.data == y.ctypes.data and out.strides[1] == y.strides[0]
            and out.strides[0] == y.strides[1])


def run_view(lay, i, k0, k1):
    """The int8 operand of one GEMM, ``(rows, k1 - k0)``: inner indices ``k0 .. k1`` of
    slice ``i`` of ``lay = (x, trans, ld, kstep)`` (:meth:`Int8Engine._layout`), read
    on into the next slices of the grouped storage where ``k1`` passes their length
    (``int_matmul_sum`` joins pairs only where the storage is laid out so)."""
    x = lay[0]
    start = x[i, :, k0:k0 + 1]  # the view starts at (i, 0, k0)
    return as_strided(start, shape=(x.shape[1], k1 - k0), strides=(x.strides[1], x.strides[2]),
                      writeable=False)
