"""GPU engine: exact INT8 products on cuBLASLt (IMMA tensor cores), through CuPy.

.. warning::
   Written and CPU-checked only (imports, registration). NOT YET RUN ON A GPU:
   ``benchmarks/gpu/gpu_check.py`` and ``tests/engines/test_gpu.py`` are the first checks.

The exact INT8 x INT8 -> INT32 product goes through ``nvmath.bindings.cublasLt``
(nvmath-python's high-level ``matmul`` rejects int8, and CuPy's ``int8 @ int8``
wraps modulo 256, docs/gpu.md "The exact INT8 GEMM"). Everything is imported lazily: this
module imports without CuPy, nvmath-python or a GPU.

Layout (our slices are row-major with the inner dimension last)
--------------------------------------------------------------
``a`` holds slices of A as ``(s, m, k)`` and ``b`` slices of B^T as ``(s, p, k)``;
we want ``C = A_i @ B_j^T`` as a row-major ``(m, p)`` INT32 array. cuBLASLt is
column-major. A row-major ``(r, k)`` array with row stride ``k`` is, read
column-major, the ``(k, r)`` matrix ``X^T`` with leading dimension ``k``; a
row-major ``(m, p)`` result is the column-major ``(p, m)`` matrix ``C^T``
with leading dimension ``p``. So we ask cuBLASLt for

    D (p x m, col-major, ld p) = op(L) @ op(R),  L = B_j^T (k x p, ld k), op(L) = L^T = B_j
                                                 R = A_i^T (k x m, ld k), op(R) = R  = A_i^T

i.e. ``D = B_j A_i^T = (A_i B_j^T)^T``: TRANSA = T, TRANSB = N, the only format
the IMMA kernels accept ("TN"). cuBLASLt's (M, N, K) are (p, m, k); its "A"
operand is our B slice, its "B" operand our A slice. The IMMA requirements on
this "regular" (COL-ordered) path: 4-byte aligned pointers (16 for speed),
M and K and all leading dimensions multiples of 4, int32 alpha/beta (scale
type CUDA_R_32I, compute type COMPUTE_32I), no epilogue. So ``k`` is padded
to a multiple of 16 (zeros: exact) and ``p`` to a multiple of 4; the INT32
result is then an ``(m, p_pad)`` array of which ``[:, :p]`` is returned.

Pointer alignment is DECLARED to cuBLASLt: its heuristic assumes 256-byte
aligned A, B, C and D unless the preference says otherwise
(``CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES``, "uint32_t, default:
256", cublasLt.h), and an algorithm chosen under that assumption may refuse
(CUBLAS_STATUS_NOT_SUPPORTED) or fault on a less aligned pointer. The engine
passes slice ``i`` of the grouped storage at ``base + i * k_pad`` and inner
pieces at ``+ k0``: 16-byte aligned only, unless ``k_pad`` is a multiple of
256 (k = 200 -> 208, 1000 -> 1008 are not). So every GEMM declares the
alignment of its actual pointers (the largest power of two up to 256 that
divides each) and the plan cache is keyed on it (:mod:`._cublaslt_plan`).

EF groups as ONE GEMM: the slices of a product's operands live in a
zero-padded ``(rows_pad, s, k_pad)`` array (slice index in the middle, B's
slices in reverse order; :meth:`CublasLtEngine.empty_slices`), so the slices
``A_i, A_{i+1}, ...`` of one row lie side by side, as do ``B_{g-i}, B_{g-i-1},
...``: the group sum ``sum_i A_i B_{g-i}^T`` is a single GEMM with inner length
``count * k_pad`` and leading dimension ``s * k_pad`` in both operands, one
launch and one INT32 write per group instead of one per product (docs/gpu.md,
"One GEMM per EF group").

Exactness bookkeeping: a product term is at most ``bound_a * bound_b`` in
magnitude, so ``len(pairs) * k * bound_a * bound_b <= 2**31 - 1`` keeps one
INT32 accumulator exact; runs that do not fit in one GEMM are accumulated in
place with ``beta = 1`` (C and D are the same buffer with the same layout,
which cuBLASLt allows). When a run would pass the INT32 range, the run is added to
an int64 buffer and a new run starts (never happens with the driver's
``r`` bound; it keeps the engine exact for any caller).
"""
from __future__ import annotations

import threading

import numpy as np

from ._cublaslt_plan import (
    _COMPUTE_32F,
    _COMPUTE_32F_FAST_16BF,
    _COMPUTE_32I,
    _CUDA_R_8I,
    _CUDA_R_16F,
    _CUDA_R_32F,
    _CUDA_R_32I,
    _GEMM_DEFAULT,
    _OP_N,
    _OP_T,
    WORKSPACE_BYTES,
    _enum,
    _load_bindings,
    _LtPlan,
    pointer_alignment,
)
from .base import APPROX_PRESCALE, Engine, group_runs, register_engine

__all__ = ["CublasLtEngine", "INT32_EXACT", "pad_to"]

#: Largest magnitude an INT32 run may reach.
INT32_EXACT = (1 << 31) - 1

#: Padding of the inner dimension (16 bytes = the fast IMMA alignment).
K_ALIGN = 16
#: Padding of cuBLASLt's M (our p) and of the result's leading dimension.
P_ALIGN = 4


_SLICE_DTYPES = {"fp": "float16"}  # every other kind holds INT8 values


def pad_to(n, align):
    """``n`` rounded up to a multiple of ``align``."""
    return -(-int(n) // align) * align


class CublasLtEngine(Engine):
    """Exact INT8 GEMMs on cuBLASLt for ``cupy`` arrays (one per device and process).

    Named, like its module and its ``name`` ("cupy-cublaslt"), after the library
    that computes the exact products, as :class:`~ozlinalg.engines.sgemm.SGEMMEngine`
    and :class:`~ozlinalg.engines.onednn.OneDNNEngine` are: CuPy only holds the
    arrays, and another GPU engine for CuPy arrays (on another library) would be
    told apart by that name.

    NOT YET RUN ON A GPU (see the module docstring).
    """

    name = "cupy-cublaslt"
    device = "gpu"
    slice_bytes = 1  # INT8 slices (SplitFP's float16 slices: 2, within the estimate's slack)

    def __init__(self, xp=None, bindings=None):
        if xp is None:
            import cupy as xp  # noqa: PLC0415  (lazy: the module imports without CuPy)
        self.xp = xp
        # ``bindings``: a callable returning (cublasLt, cublas, CudaDataType or None);
        # the tests pass a host emulation of cuBLASLt that enforces its rules.
        self._bindings = bindings or _load_bindings
        self._lock = threading.Lock()
        self._lt = None
        self._handles: dict = {}  # device id -> cuBLASLt handle
        self._plans: dict = {}
        # (device id, stream) -> workspace: cuBLASLt workspaces must not be shared by
        # kernels that may run concurrently, i.e. on different streams.
        self._workspaces: dict = {}
        self._alpha = np.ones(1, dtype=np.int32)
        self._beta0 = np.zeros(1, dtype=np.int32)
        self._beta1 = np.ones(1, dtype=np.int32)
        self._f32_one = np.ones(1, dtype=np.float32)
        self._f32_zero = np.zeros(1, dtype=np.float32)
        self.launches = 0
        #: Bytes of slices copied into padded buffers (:meth:`_layout`), for diagnostics:
        #: the driver's slice storage makes this 0.
        self.padded_copy_bytes = 0
        #: Fast paths that failed and fell back (name -> error), for diagnostics.
        self.fallbacks: dict = {}

    # -- cuBLASLt setup ---------------------------------------------------------------

    def _init_lt(self):
        if self._lt is not None:
            return
        with self._lock:
            if self._lt is not None:
                return
            lt, cublas, CudaDataType = self._bindings()
            self._compute_32i = _enum(cublas, "ComputeType", "COMPUTE_32I", _COMPUTE_32I)
            self._op_t = _enum(cublas, "Operation", "T", _OP_T)
            self._op_n = _enum(cublas, "Operation", "N", _OP_N)
            self._r_8i = int(CudaDataType.CUDA_R_8I) if CudaDataType else _CUDA_R_8I
            self._r_32i = int(CudaDataType.CUDA_R_32I) if CudaDataType else _CUDA_R_32I
            try:
                fields = lt.matmul_heuristic_result_dtype.fields
                self._algo_offset = int(fields["algo"][1])
            except Exception:  # pragma: no cover
                self._algo_offset = 0
            self._lt = lt

    @property
    def handle(self):
        """The cuBLASLt handle of the current device (created on first use)."""
        self._init_lt()
        dev = self.xp.cuda.Device().id
        h = self._handles.get(dev)
        if h is None:
            with self._lock:
                h = self._handles.get(dev)
                if h is None:
                    h = self._handles[dev] = self._lt.create()
        return h

    def _workspace(self, stream):
        key = (self.xp.cuda.Device().id, stream)
        ws = self._workspaces.get(key)
        if ws is None:
            ws = self._workspaces[key] = self.xp.empty(WORKSPACE_BYTES, dtype=self.xp.uint8)
        return ws.data.ptr

    @staticmethod
    def _set_attr(setter, dtype_of, obj, attr, value):
        buf = np.zeros(1, dtype=dtype_of(attr))
        buf[0] = value
        setter(obj, int(attr), buf.ctypes.data, buf.itemsize)

    def _plan(self, M, N, K, ld_l, ld_r, align):
        key = (M, N, K, ld_l, ld_r, align, self.xp.cuda.Device().id)
        plan = self._plans.get(key)
        if plan is None:
            self._init_lt()
            plan = _LtPlan(self, M, N, K, ld_l, ld_r, align)
            self._plans[key] = plan
        return plan

    def _gemm(self, M, N, K, ld_l, ld_r, l_ptr, r_ptr, c_ptr, accumulate):
        """C (+)= L^T R on the current CuPy stream, with a plan for these pointers'
        alignment (C and D are the same buffer)."""
        c_align = pointer_alignment(c_ptr)
        plan = self._plan(M, N, K, ld_l, ld_r,
                          (pointer_alignment(l_ptr), pointer_alignment(r_ptr), c_align, c_align))
        beta = self._beta1 if accumulate else self._beta0
        stream = self.xp.cuda.get_current_stream().ptr
        self._lt.matmul(
            self.handle, plan.desc,
            self._alpha.ctypes.data, l_ptr, plan.l_layout, r_ptr, plan.r_layout,
            beta.ctypes.data, c_ptr, plan.c_layout, c_ptr, plan.c_layout,
            plan.algo_ptr, self._workspace(stream), WORKSPACE_BYTES, stream,
        )
        self.launches += 1

    # -- engine interface -------------------------------------------------------------

    def memory_limit(self):
        """Half of the free device memory, counting CuPy's pooled free blocks."""
        cp = self.xp
        free = cp.cuda.runtime.memGetInfo()[0] + cp.get_default_memory_pool().free_bytes()
        return max(64 * 1024**2, free // 2)

    def empty_slices(self, s, rows, k, kind, operand=None):
        """Slice storage ``(s, rows, k)``; for the INT8 slices of a product's operand
        (``operand`` "a" or "b") a view of a zero-padded ``(rows_pad, s, k_pad)``
        array, slice index in the middle, B's slices in reverse order.

        Then the slices of one EF group, ``A_i`` with ``B_{g-i}`` for consecutive
        ``i``, lie side by side along the inner dimension in both operands (A
        forward, B backward, same leading dimension ``s k_pad``), and the whole
        group is ONE cuBLASLt GEMM of inner length ``count * k_pad`` (the padding
        columns are zeros: exact). Other slices: a plain C-contiguous array.
        """
        cp = self.xp
        if kind == "fp" or operand not in ("a", "b"):
            return cp.empty((s, rows, k), dtype=getattr(cp, _SLICE_DTYPES.get(kind, "int8")))
        full = cp.zeros((pad_to(max(rows, 1), P_ALIGN), s, pad_to(max(k, 1), K_ALIGN)),
                        dtype=cp.int8)
        view = full[:rows, :, :k]
        if operand == "b":
            view = view[:, ::-1, :]
        return view.transpose(1, 0, 2)

    def workspace(self, m, p):
        return {"m": m, "p": p}

    def _layout(self, x, rows_pad, k_pad, ws):
        """``(ptr, step, ld)`` of int8 slices ``x`` (s, rows, k): slice t, row r starts at
        ``ptr + t * step + r * ld`` with ``k_pad`` valid columns (zeros past k) and
        ``rows_pad`` valid rows (zeros past rows).

        The grouped storage of :meth:`empty_slices` and C-contiguous slices with
        ``k % 16 == 0`` and aligned rows are used in place; anything else is copied
        once into a padded C-contiguous array kept in ``ws`` (the slices do not
        change while one workspace is in use).
        """
        cp = self.xp
        s, rows, k = x.shape
        if x.dtype != cp.int8:
            raise TypeError(f"ozlinalg: the cuBLASLt engine multiplies int8 slices, got {x.dtype}")
        base = x.base
        if (base is not None and base.ndim == 3 and base.flags.c_contiguous
                and base.shape[1:] == (s, k_pad) and base.shape[0] >= rows_pad
                and x.strides[1:] == (s * k_pad, 1) and abs(x.strides[0]) == k_pad
                and 0 <= x.data.ptr - base.data.ptr < s * k_pad and base.data.ptr % 16 == 0):
            return x.data.ptr, x.strides[0], s * k_pad
        if (rows, k) == (rows_pad, k_pad) and x.flags.c_contiguous and x.data.ptr % 16 == 0:
            return x.data.ptr, rows_pad * k_pad, k_pad
        key = ("pad", x.data.ptr, x.shape, x.strides, rows_pad, k_pad)
        out = ws.get(key)
        if out is None:
            out = cp.zeros((s, rows_pad, k_pad), dtype=cp.int8)
            out[:, :rows, :k] = x
            ws[key] = out
            self.padded_copy_bytes += out.nbytes
        return out.data.ptr, rows_pad * k_pad, k_pad

    def int_matmul_sum(self, a, b, pairs, bound_a, bound_b, ws=None):
        cp = self.xp
        _, m, k = a.shape
        p = b.shape[1]
        ws = ws if ws is not None else self.workspace(m, p)
        k_pad = pad_to(max(k, 1), K_ALIGN)
        p_pad = pad_to(max(p, 1), P_ALIGN)
        # cuBLASLt: M = p_pad (rows of D), N = m, K = inner length; "A" = our B slices
        # (op T), "B" = our A slices (op N), D = C^T column-major = C row-major (m, p_pad).
        a_ptr, a_step, a_ld = self._layout(a, m, k_pad, ws)
        b_ptr, b_step, b_ld = self._layout(b, p_pad, k_pad, ws)
        per_elem = max(1, int(bound_a) * int(bound_b))
        one = max(1, k * per_elem)  # worst case of one product
        # Runs (i, j, count): pairs (i + t, j - t), t < count, adjacent along the inner
        # dimension in both operands (the grouped storage), one GEMM each while the
        # run's worst case fits INT32.
        runs = group_runs(pairs, a_step == k_pad and b_step == -k_pad and one <= INT32_EXACT,
                          max(1, INT32_EXACT // one))
        # Inner pieces of single products whose worst case passes INT32 (huge bounds).
        kc = max(K_ALIGN, (INT32_EXACT // per_elem) // K_ALIGN * K_ALIGN)
        key = ("out", m, p_pad)
        out = ws.get(key)
        if out is None:
            out = cp.empty((m, p_pad), dtype=cp.int32)
            ws[key] = out
        acc64 = None
        cur = 0
        calls = 0
        for i, j, count in runs:
            pieces = [(0, count * k_pad)] if count > 1 or one <= INT32_EXACT else [
                (k0, min(k_pad, k0 + kc)) for k0 in range(0, k_pad, kc)]
            for k0, k1 in pieces:
                w = max(1, count * (min(k1, k) - k0) * per_elem)
                if cur and cur + w > INT32_EXACT:
                    acc64 = self._flush(out, acc64)  # a finished run: exact in int64
                    cur = 0
                self._gemm(p_pad, m, k1 - k0, b_ld, a_ld, b_ptr + j * b_step + k0,
                           a_ptr + i * a_step + k0, out.data.ptr, accumulate=bool(cur))
                calls += 1
                cur += w
        res = out if acc64 is None else self._flush(out, acc64)
        return (res if p_pad == p else res[:, :p]), calls

    def _flush(self, out, acc64):
        cp = self.xp
        if acc64 is None:
            return out.astype(cp.int64)
        acc64 += out
        return acc64

    def float_matmul(self, a, b):
        """``a @ b.T`` with FP32 accumulation and an FP32 result (SplitFP's products).

        float16 inputs: cublasGemmEx (FP16 in, FP32 out, COMPUTE_32F) in the same
        TN arrangement as the INT8 product; float32 inputs: SGEMM. A failed
        GemmEx falls back to SGEMM on the same (exactly representable) values,
        recorded in ``self.fallbacks``.
        """
        cp = self.xp
        if a.dtype == cp.float16 and b.dtype == cp.float16:
            try:
                return self._gemm_ex(cp.ascontiguousarray(a), cp.ascontiguousarray(b),
                                     _CUDA_R_16F, _COMPUTE_32F)
            except Exception as exc:  # pragma: no cover - needs a GPU
                self.fallbacks["float16 GemmEx"] = repr(exc)
        return cp.matmul(a.astype(cp.float32, copy=False), b.astype(cp.float32, copy=False).T)

    def approx_matmul(self, a, b):
        """``a @ b.T`` of nonnegative data (float64 squares), to a few bits (``auto``'s
        estimates), as float64.

        On BF16 tensor cores with FP32 accumulation (``COMPUTE_32F_FAST_16BF``),
        ~10x an FP32 SGEMM's rate on Hopper: inputs rounded to BF16's 8 bits, so
        each product (and a sum of nonnegative ones) is within about 2**-7, i.e.
        ~0.01 bits in the log2 that ``slices="auto"`` uses (its calibration slack
        is 0.25 bits). Both inputs
        are scaled by 2**48 IN THEIR OWN PRECISION before the cast to float32
        (:meth:`Engine.approx_operand`): CuPy compiles its kernels with
        flush-to-zero, so a float64 square in [2**-149, 2**-126) cast first
        would be flushed (``cvt.rn.ftz.f32.f64``) where the CPU keeps it, and
        the GPU could pick another slice count than the CPU. Scaled, entries
        down to 2**-149 are normal FP32 and no product a tensor core might
        flush is lost (|entries| <= 1, k <= 2**17: the scaled sums stay below
        2**113). Falls back to SGEMM on the same operands (recorded in
        ``self.fallbacks``).
        """
        cp = self.xp
        a32, b32 = self.approx_operand(a), self.approx_operand(b)
        try:
            c = self._gemm_ex(a32, b32, _CUDA_R_32F, _COMPUTE_32F_FAST_16BF)
        except Exception as exc:
            self.fallbacks["approx BF16 GemmEx"] = repr(exc)
            c = cp.matmul(a32, b32.T)
        return c.astype(cp.float64) * (1.0 / APPROX_PRESCALE**2)

    def _gemm_ex(self, a, b, in_type, compute):
        """``a @ b.T`` (row-major (m, k) and (p, k)) into a new float32 (m, p), TN."""
        cp = self.xp
        from cupy.cuda import cublas as cb  # noqa: PLC0415
        from cupy.cuda import device as cdev  # noqa: PLC0415

        m, k = a.shape
        p = b.shape[0]
        c = cp.empty((m, p), dtype=cp.float32)
        if m == 0 or p == 0:
            return c
        if k == 0:
            c[...] = 0
            return c
        handle = cdev.get_cublas_handle()
        cb.setStream(handle, cp.cuda.get_current_stream().ptr)
        cb.gemmEx(handle, _OP_T, _OP_N, p, m, k,
                  self._f32_one.ctypes.data, b.data.ptr, in_type, k,
                  a.data.ptr, in_type, k,
                  self._f32_zero.ctypes.data, c.data.ptr, _CUDA_R_32F, p,
                  compute, _GEMM_DEFAULT)
        return c

    def axpy(self, alpha, x, acc):
        """``acc += alpha * x`` in FP64 in one fused pass (x: int32/int64/float)."""
        from ._cuda_kernels import axpy_into  # noqa: PLC0415

        axpy_into(float(alpha), x, acc, xp=self.xp)

    def split_rows(self, kind, x, s, width, out, scales):
        """Fused split where one exists (hybrid); False: the driver runs the generic code.

        Same contract as :func:`ozlinalg.ozaki.split.split_rows`, except that the
        fused path leaves ``x`` unchanged instead of the residual (the driver
        never reads the residual).
        """
        from ._cuda_kernels import hybrid_split_fused  # noqa: PLC0415

        return kind == "hybrid" and hybrid_split_fused(x, s, width, out, scales, xp=self.xp)

    def crt_residues(self, x, mult, round_rows, mods, bits, out):
        """Ozaki-II residues of one row block in one pass (False: use the generic code)."""
        from ._cuda_kernels import crt_residues_fused  # noqa: PLC0415

        return crt_residues_fused(x, mult, round_rows, mods, bits, out, xp=self.xp)

    def crt_accumulator(self, consts):
        """A fused CRT accumulator (int8 residues, one combine pass), or None."""
        from ._cuda_kernels import CRTFusedAccumulator  # noqa: PLC0415

        if CRTFusedAccumulator.applies(self.xp, consts):
            return CRTFusedAccumulator(self.xp, consts)
        return None

    def map_rows(self, fn, rows, k):
        fn(0, rows)

    def synchronize(self):
        self.xp.cuda.get_current_stream().synchronize()



# Lazy: the factory runs (and imports CuPy / nvmath) only when a cupy array
# reaches the emulation, i.e. only where CuPy is importable.
register_engine("cupy", CublasLtEngine)
