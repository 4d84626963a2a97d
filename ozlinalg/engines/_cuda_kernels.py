"""Fused CUDA kernels (CuPy) for the memory-bound passes of the emulation.

.. warning::
   NOT YET RUN ON A GPU. ``tests/test_gpu.py`` compares each kernel with the
   generic array code it replaces; run it first on a GPU machine.

* :func:`axpy_into` -- the EF accumulation: one INT32 (or int64) group product,
  converted to FP64, scaled by a power of two and added to the FP64
  accumulator in ONE pass (the generic code ``acc += alpha * x`` makes a
  temporary FP64 array and two passes).
* :func:`hybrid_split_fused` -- the hybrid split: one pass over normalized
  rows writing all ``s`` INT8 slices (the generic code makes ~4 passes per
  slice over an FP64 array). Bit-identical to
  :func:`ozlinalg.ozaki.split._split_hybrid`: the same IEEE operations
  (``y = x * (1/base)``; ``r = rint(y)``; ``y = (y - r) * 2**width``) in the
  same order, ``rint`` rounding half to even in both.

CuPy is imported lazily; kernels are compiled on first use and cached.
"""
from __future__ import annotations

__all__ = ["axpy_into", "hybrid_split_fused"]

_KERNELS: dict = {}


def _cp():
    import cupy  # noqa: PLC0415

    return cupy


#: The EF accumulation, one element: separately rounded product and sum.
AXPY_BODY = "acc = __dadd_rn(acc, __dmul_rn(alpha, (double)x))"


def _axpy_kernel(cp):
    k = _KERNELS.get(("axpy", cp.__name__))
    if k is None:
        k = cp.ElementwiseKernel(
            "T x, float64 alpha",
            "float64 acc",
            AXPY_BODY,
            "ozlinalg_axpy_f64",
        )
        _KERNELS[("axpy", cp.__name__)] = k
    return k


def axpy_into(alpha, x, acc, xp=None):
    """``acc += alpha * x`` in FP64, in place, in one pass (``x`` any real dtype).

    ``x`` broadcasts against ``acc`` (strided views, e.g. the ``[:, :p]`` view
    of a padded INT32 result, are fine). The product and the sum are rounded
    separately (``__dmul_rn``/``__dadd_rn``: never contracted into an FMA), so
    the result is bit-identical to the generic ``acc += alpha * x``.
    """
    cp = xp or _cp()
    if acc.dtype != cp.float64:
        raise TypeError(f"ozlinalg: axpy accumulates into float64, got {acc.dtype}")
    _axpy_kernel(cp)(x, float(alpha), acc)


_HYBRID_SRC = r"""
extern "C" __global__ void ozlinalg_hybrid_split(
    const double* __restrict__ x, const double* __restrict__ inv_base,
    signed char* __restrict__ out, const long long rows, const long long k,
    const int s, const double unit)
{
    const long long total = rows * k;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / k;
        double y = __dmul_rn(x[idx], inv_base[i]);
        for (int t = 0; t < s; ++t) {
            const double r = rint(y);
            out[(long long)t * total + idx] = (signed char)r;
            y = __dmul_rn(__dsub_rn(y, r), unit);
        }
    }
}
"""


def _hybrid_kernel(cp):
    k = _KERNELS.get(("hybrid", cp.__name__))
    if k is None:
        # No fast-math: every operation must be the IEEE one the generic code does.
        k = cp.RawKernel(_HYBRID_SRC, "ozlinalg_hybrid_split")
        _KERNELS[("hybrid", cp.__name__)] = k
    return k


def hybrid_split_fused(x, s, width, out, scales, xp=None):
    """The hybrid split of normalized rows ``x`` into int8 ``out`` (s, rows, k) in one pass.

    Returns False (doing nothing) when the fused path does not apply (wrong
    dtypes or non-contiguous arrays), so the caller can fall back to the
    generic :func:`ozlinalg.ozaki.split.split_rows`. Writes ``scales[t] =
    base * 2**(-width t)`` like the generic code; ``x`` is left unchanged (the
    generic code leaves the residual there; the driver never reads it).
    """
    cp = xp or _cp()
    rows, k = x.shape
    if (
        x.dtype != cp.float64 or out.dtype != cp.int8
        or not x.flags.c_contiguous or not out.flags.c_contiguous
        or out.shape != (s, rows, k) or s < 1
    ):
        return False
    from ..ozaki.split import _residual_grid  # noqa: PLC0415

    base = _residual_grid(cp, x, width)  # per-row grid, exactly as the generic code
    inv_base = cp.ascontiguousarray(1.0 / base)
    total = rows * k
    if total:
        threads = 256
        blocks = int(min(65535 * 8, -(-total // threads)))
        _hybrid_kernel(cp)(
            (blocks,), (threads,),
            (x, inv_base, out, cp.int64(rows), cp.int64(k), cp.int32(s),
             cp.float64(2.0**width)),
        )
    for t in range(s):
        scales[t] = base * 2.0 ** (-width * t)
    return True
