"""Fused CUDA kernels (CuPy) for the memory-bound passes of the emulation.

.. warning::
   NOT YET RUN ON A GPU. ``tests/engines/test_gpu.py`` compares each kernel with the
   generic array code it replaces; run it first on a GPU machine. Every CI
   run compiles the RawKernel sources for the host (tests/host_cuda.py: a
   C++ shim for the grid and the ``__d*_rn`` intrinsics) and checks them
   bit for bit against the generic code (tests/engines/test_engine_cublaslt.py), and
   compiles them for sm_90 with nvcc where a CUDA toolkit is installed.

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
* :func:`crt_residues_fused`, :class:`CRTFusedAccumulator` -- Ozaki scheme II:
  all N residues of an operand in one pass; each INT32 product reduced to
  int8 residues; the CRT rebuild (quotient, 40-bit limbs, carries) of all N
  residues of an entry in registers, in one pass (see the section below).

CuPy is imported lazily; kernels are compiled on first use and cached.
"""
from __future__ import annotations

from ..exact import LIMB_BITS, digit_plan, residual_grid

__all__ = ["AXPY_BODY", "CRTFusedAccumulator", "axpy_into", "crt_residues_fused",
           "hybrid_split_fused"]

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
    const int s, const double unit, const long long st, const long long sr)
{
    // out: slice t, row i, column j at out[t * st + i * sr + j] (st < 0: slices stored
    // in reverse, the GPU engine's layout for B).
    const long long total = rows * k;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / k;
        const long long o = i * sr + (idx - i * k);
        double y = __dmul_rn(x[idx], inv_base[i]);
        for (int t = 0; t < s; ++t) {
            const double r = rint(y);
            out[(long long)t * st + o] = (signed char)r;
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
    dtypes, a non-contiguous ``x`` or strided rows of ``out``; ``out`` may be the
    GPU engine's grouped slice storage), so the caller can fall back to the
    generic :func:`ozlinalg.ozaki.split.split_rows`. Writes ``scales[t] =
    base * 2**(-width t)`` like the generic code; ``x`` is left unchanged (the
    generic code leaves the residual there; the driver never reads it).
    """
    cp = xp or _cp()
    rows, k = x.shape
    if (
        x.dtype != cp.float64 or out.dtype != cp.int8
        or not x.flags.c_contiguous or out.strides[2:] != (1,)
        or out.shape != (s, rows, k) or s < 1
    ):
        return False
    base = residual_grid(cp, x, width)  # per-row grid, exactly as the generic code
    inv_base = cp.ascontiguousarray(1.0 / base)
    total = rows * k
    if total:
        threads = 256
        blocks = int(min(65535 * 8, -(-total // threads)))
        _hybrid_kernel(cp)(
            (blocks,), (threads,),
            (x, inv_base, out, cp.int64(rows), cp.int64(k), cp.int32(s),
             cp.float64(2.0**width), cp.int64(out.strides[0]), cp.int64(out.strides[1])),
        )
    for t in range(s):
        scales[t] = base * 2.0 ** (-width * t)
    return True


# -- Ozaki scheme II (CRT) --------------------------------------------------------------
#
# The generic CRT code makes ~8 FP64 passes per modulus over each operand and
# 2 + L per modulus over the output; on a GPU those passes, not the INT8 GEMMs,
# would dominate. Three kernels replace them, each bit-identical to the generic
# code (residues are unique integers; the FP64 accumulations do the generic
# operations in the generic order):
#
# * ozlinalg_crt_residues: one read of a normalized row block, all N residues
#   of A' = rint|trunc(2**mu x) written as int8 (the digits of A' as in
#   ozaki/crt/moduli.py::residues_into, reduced with an exact reciprocal-and-correct
#   step instead of a division);
# * ozlinalg_crt_reduce: the INT32 product of modulus t -> its symmetric
#   residue, stored as int8 (5 bytes moved per entry instead of ~100);
# * ozlinalg_crt_combine: all N residues of an entry -> quotient and 40-bit
#   limbs in registers -> C' (CRTAccumulator.add/result in one pass).

_CRT_SRC = r"""
__device__ __forceinline__ double ozl_symmod(double x, const double p, const double invp,
                                             const double h)
{
    // x: an integer, |x| < 2**52. q may be off by one; r = x - q p is exact.
    const double q = floor(__dmul_rn(x, invp));
    double r = __dsub_rn(x, __dmul_rn(q, p));
    if (r < 0.0) r = __dadd_rn(r, p);
    if (r >= p) r = __dsub_rn(r, p);
    // [0, p) -> [-h, p - 1 - h]
    if (r > p - 1.0 - h) r = __dsub_rn(r, p);
    return r;
}

extern "C" __global__ void ozlinalg_crt_residues(
    const double* __restrict__ x, const double* __restrict__ mult,
    const signed char* __restrict__ round_rows, const double* __restrict__ moduli,
    const double* __restrict__ invmods, const double* __restrict__ coefs,
    signed char* __restrict__ out,
    const long long rows, const long long k, const int nmod, const int count,
    const double unit, const long long st, const long long sr)
{
    // out: modulus m, row i, column j at out[m * st + i * sr + j] (the GPU engine's
    // padded slice storage; st < 0 for B's reversed slices).
    const long long total = rows * k;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / k;
        const long long o = i * sr + (idx - i * k);
        double v = __dmul_rn(x[idx], mult[i]);
        v = round_rows[i] ? rint(v) : trunc(v);
        double dig[8];
        double scale = 1.0;
        for (int t = 1; t < count; ++t) scale = __dmul_rn(scale, unit);
        double rest = v;
        for (int t = count - 1; t > 0; --t) {      // top digit first, as the generic code
            const double top = trunc(__dmul_rn(rest, 1.0 / scale));
            dig[t] = top;
            rest = __dsub_rn(rest, __dmul_rn(top, scale));
            scale = __dmul_rn(scale, 1.0 / unit);
        }
        dig[0] = rest;
        for (int m = 0; m < nmod; ++m) {
            const double p = moduli[m];
            double acc = 0.0;
            for (int t = 0; t < count; ++t)          // exact: integers below 2**52
                acc = __dadd_rn(acc, __dmul_rn(dig[t], coefs[m * count + t]));
            const double r = ozl_symmod(acc, p, invmods[m], floor(0.5 * p));
            out[(long long)m * st + o] = (signed char)r;
        }
    }
}

extern "C" __global__ void ozlinalg_crt_reduce(
    const int* __restrict__ prod, const long long ld, signed char* __restrict__ out,
    const long long rows, const long long cols, const double p)
{
    const long long total = rows * cols;
    const double invp = 1.0 / p, h = floor(0.5 * p);
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / cols, j = idx - i * cols;
        out[idx] = (signed char)ozl_symmod((double)prod[i * ld + j], p, invp, h);
    }
}

extern "C" __global__ void ozlinalg_crt_combine(
    const signed char* __restrict__ res, const double* __restrict__ frac,
    const double* __restrict__ wlimbs, const double* __restrict__ plimbs,
    double* __restrict__ out, const long long total, const int nmod, const int nl,
    const double unit)
{
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        double quot = 0.0;
        double limbs[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        for (int t = 0; t < nmod; ++t) {
            const double c = (double)res[(long long)t * total + idx];
            quot = __dadd_rn(quot, __dmul_rn(frac[t], c));
            for (int l = 0; l < nl; ++l) {
                const double w = wlimbs[t * nl + l];
                if (w != 0.0) limbs[l] = __dadd_rn(limbs[l], __dmul_rn(w, c));
            }
        }
        const double q = rint(quot);
        for (int l = 0; l < nl; ++l)
            if (plimbs[l] != 0.0) limbs[l] = __dsub_rn(limbs[l], __dmul_rn(q, plimbs[l]));
        for (int l = 0; l < nl - 1; ++l) {
            const double carry = rint(__dmul_rn(limbs[l], 1.0 / unit));
            limbs[l] = __dsub_rn(limbs[l], __dmul_rn(carry, unit));
            limbs[l + 1] = __dadd_rn(limbs[l + 1], carry);
        }
        double r = limbs[nl - 1];
        for (int l = nl - 2; l >= 0; --l) r = __dadd_rn(__dmul_rn(r, unit), limbs[l]);
        out[idx] = r;
    }
}
"""

#: Most digits / limbs the CRT kernels hold in registers.
_CRT_MAX_DIGITS = 8


def _crt_kernel(cp, name):
    key = ("crt", name, cp.__name__)
    k = _KERNELS.get(key)
    if k is None:
        k = cp.RawKernel(_CRT_SRC, name)
        _KERNELS[key] = k
    return k


def _grid(total, threads=256):
    return (int(max(1, min(65535 * 8, -(-total // threads)))),), (threads,)


def crt_residues_fused(x, mult, round_rows, mods, bits, out, xp=None):
    """Fused :func:`ozlinalg.ozaki.crt.shifts.integerize_into` for one row block.

    ``out[t] = symmetric residue of rint|trunc(x * mult[:, None]) mod mods[t]``
    (int8), one pass over ``x``; ``out`` may have strided slices and rows (the
    GPU engine's padded slice storage). Returns False (nothing done) where it
    does not apply, so the caller falls back to the generic code.
    """
    cp = xp or _cp()
    rows, k = x.shape
    nmod = len(mods)
    d, count = digit_plan(bits)
    if (x.dtype != cp.float64 or out.dtype != cp.int8
            or out.strides[2:] != (1,) or out.shape != (nmod, rows, k)
            or count > _CRT_MAX_DIGITS):
        return False
    x = cp.ascontiguousarray(x)  # a tile of an operand's rows (a normalized copy is)
    total = rows * k
    if total == 0:
        return True
    coefs = cp.asarray([[float(pow(2, d * t, p)) for t in range(count)] for p in mods],
                       dtype=cp.float64)
    grid, block = _grid(total)
    _crt_kernel(cp, "ozlinalg_crt_residues")(grid, block, (
        x, cp.ascontiguousarray(mult, dtype=cp.float64),
        cp.ascontiguousarray(round_rows.astype(cp.int8)),
        cp.asarray([float(p) for p in mods], dtype=cp.float64),
        cp.asarray([1.0 / float(p) for p in mods], dtype=cp.float64), coefs, out,
        cp.int64(rows), cp.int64(k), cp.int32(nmod), cp.int32(count), cp.float64(2.0**d),
        cp.int64(out.strides[0]), cp.int64(out.strides[1])))
    return True


class CRTFusedAccumulator:
    """:class:`ozlinalg.ozaki.crt.CRTAccumulator` with int8 residues and one combine pass.

    ``add(t, prod)`` stores the symmetric residue of the INT32 product of
    modulus t (one kernel, 5 bytes per entry); ``result()`` rebuilds C' from
    all residues in registers (quotient, 40-bit limbs, carries, top-down
    combination: the generic operations in the generic order, so the result
    is bit-identical). Products the kernel cannot take (not INT32) go through
    a generic accumulator, whose partial sums are merged by the same rule.
    """

    def __init__(self, xp, consts):
        self.cp, self.consts = xp, consts
        self.res = None
        self.unit = 2.0**LIMB_BITS

    @staticmethod
    def applies(xp, consts):
        return len(consts.P_limbs) <= _CRT_MAX_DIGITS

    def add(self, t, prod):
        cp = self.cp
        rows, cols = prod.shape
        if prod.dtype != cp.int32 or prod.strides[1] != 4:
            prod = cp.ascontiguousarray(prod.astype(cp.int32))  # |prod| < 2**31 (CRT bound)
        if self.res is None:
            self.res = cp.empty((len(self.consts.moduli), rows, cols), dtype=cp.int8)
        total = rows * cols
        if total:
            grid, block = _grid(total)
            _crt_kernel(cp, "ozlinalg_crt_reduce")(grid, block, (
                prod, cp.int64(prod.strides[0] // 4), self.res[t], cp.int64(rows),
                cp.int64(cols), cp.float64(float(self.consts.moduli[t]))))

    def result(self):
        cp, consts = self.cp, self.consts
        nmod, rows, cols = self.res.shape
        out = cp.empty((rows, cols), dtype=cp.float64)
        total = rows * cols
        if total:
            nl = len(consts.P_limbs)
            grid, block = _grid(total)
            _crt_kernel(cp, "ozlinalg_crt_combine")(grid, block, (
                self.res, cp.asarray(consts.frac, dtype=cp.float64),
                cp.asarray(consts.weight_limbs, dtype=cp.float64).reshape(-1),
                cp.asarray(consts.P_limbs, dtype=cp.float64), out, cp.int64(total),
                cp.int32(nmod), cp.int32(nl), cp.float64(self.unit)))
        self.res = None
        return out
