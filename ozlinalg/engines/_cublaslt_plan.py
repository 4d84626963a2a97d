"""cuBLASLt's side of the GPU engine (:mod:`ozlinalg.engines.cublaslt`): the bindings,
the enum values, the declared pointer alignments and the cached matmul plans
(descriptor, layouts, heuristic) of the exact INT8 GEMM. Like the engine, it imports
without CuPy or nvmath-python: the bindings load at the engine's first product."""
from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_ALIGNMENT", "WORKSPACE_BYTES", "pointer_alignment"]

WORKSPACE_BYTES = 32 * 1024 * 1024

#: cuBLASLt's alignment assumption (bytes) for A, B, C and D when the preference
#: does not declare one (cublasLt.h); also the largest alignment worth declaring.
DEFAULT_ALIGNMENT = 256


# cublasComputeType_t / cudaDataType_t / cublasOperation_t values (cublas_api.h,
# library_types.h), used only if nvmath's enums lack a name.
_COMPUTE_32I = 72
_COMPUTE_32F = 68
_COMPUTE_32F_FAST_16BF = 75
_CUDA_R_8I = 3
_CUDA_R_32I = 10
_CUDA_R_16F = 2
_CUDA_R_32F = 0
_OP_N = 0
_OP_T = 1
_GEMM_DEFAULT = -1


def pointer_alignment(ptr):
    """The largest power of two, at most :data:`DEFAULT_ALIGNMENT`, dividing ``ptr``."""
    ptr = int(ptr)
    return DEFAULT_ALIGNMENT if ptr % DEFAULT_ALIGNMENT == 0 else ptr & -ptr


def _enum(mod, cls, name, fallback):
    try:
        return int(getattr(getattr(mod, cls), name))
    except Exception:
        return fallback


class _LtPlan:
    """Descriptor, layouts and heuristic for (M, N, K) = (p_pad, m, inner length) with
    leading dimensions ``ld_l`` (our B slices) and ``ld_r`` (our A slices), for
    pointers with the alignments ``align`` = (L, R, C, D) in bytes (cuBLASLt's A,
    B, C, D): the heuristic only returns algorithms that work with them."""

    def __init__(self, eng, M, N, K, ld_l, ld_r, align):
        lt = eng._lt
        self.lt = lt
        self.desc = lt.matmul_desc_create(eng._compute_32i, eng._r_32i)
        self.layouts = []
        try:
            eng._set_attr(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype,
                          self.desc, lt.MatmulDescAttribute.TRANSA, eng._op_t)
            eng._set_attr(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype,
                          self.desc, lt.MatmulDescAttribute.TRANSB, eng._op_n)
            # Column-major (the default order): L is K x p (ld_l), R is K x m (ld_r),
            # C = D is p x m (ld M).
            self.l_layout = lt.matrix_layout_create(eng._r_8i, K, M, ld_l)
            self.layouts.append(self.l_layout)
            self.r_layout = lt.matrix_layout_create(eng._r_8i, K, N, ld_r)
            self.layouts.append(self.r_layout)
            self.c_layout = lt.matrix_layout_create(eng._r_32i, M, N, M)
            self.layouts.append(self.c_layout)
            pref = lt.matmul_preference_create()
            try:
                eng._set_attr(lt.matmul_preference_set_attribute,
                              lt.get_matmul_preference_attribute_dtype, pref,
                              lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, WORKSPACE_BYTES)
                attrs = lt.MatmulPreferenceAttribute
                for attr, nbytes in zip((attrs.MIN_ALIGNMENT_A_BYTES, attrs.MIN_ALIGNMENT_B_BYTES,
                                         attrs.MIN_ALIGNMENT_C_BYTES, attrs.MIN_ALIGNMENT_D_BYTES),
                                        align):
                    eng._set_attr(lt.matmul_preference_set_attribute,
                                  lt.get_matmul_preference_attribute_dtype, pref, attr, nbytes)
                self.heur = lt.MatmulHeuristicResult(4)
                count = np.zeros(1, dtype=np.int32)
                lt.matmul_algo_get_heuristic(
                    eng.handle, self.desc, self.l_layout, self.r_layout, self.c_layout,
                    self.c_layout, pref, 4, self.heur.ptr, count.ctypes.data)
            finally:
                lt.matmul_preference_destroy(pref)
            if int(count[0]) < 1:
                raise RuntimeError(
                    f"ozlinalg: cuBLASLt found no INT8 (IMMA) algorithm for M={M}, N={N}, K={K}, "
                    f"pointer alignments {align} bytes")
            # The algo struct is the first member of cublasLtMatmulHeuristicResult_t.
            self.algo_ptr = int(self.heur.ptr) + eng._algo_offset
        except Exception:
            self.destroy()
            raise

    def destroy(self):
        lt = self.lt
        for lay in self.layouts:
            try:
                lt.matrix_layout_destroy(lay)
            except Exception:
                pass
        self.layouts = []
        if self.desc is not None:
            try:
                lt.matmul_desc_destroy(self.desc)
            except Exception:
                pass
            self.desc = None


def _load_bindings():
    """nvmath-python's cuBLASLt and cuBLAS bindings and its CudaDataType enum."""
    try:
        from nvmath.bindings import cublas  # noqa: PLC0415
        from nvmath.bindings import cublasLt as lt  # noqa: PLC0415
    except Exception as exc:  # pragma: no cover - needs nvmath
        raise ImportError(
            "ozlinalg: the GPU engine needs nvmath-python (>= 1.0) for the exact INT8 "
            "GEMM through cuBLASLt (pip install nvmath-python[cu13]); CuPy's int8 "
            "matmul is not exact (it wraps modulo 256)"
        ) from exc
    try:
        from nvmath import CudaDataType  # noqa: PLC0415
    except Exception:  # pragma: no cover
        CudaDataType = None
    return lt, cublas, CudaDataType
