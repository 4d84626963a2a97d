"""The INT8 engines' magnitude estimates (``slices="auto"`` / ``moduli="auto"``): BF16
GEMMs (oneDNN, where the CPU has BF16 units) or FP32 SGEMMs of squared operands and the
decisions' interval pass (kernels: ``k_estimate.c``;
generic code: :mod:`ozlinalg.ozaki.counts.estimate`, :mod:`ozlinalg.ozaki.counts.adequacy`). The
estimates need not give the generic bits, only rigorous bounds."""
from __future__ import annotations

import numpy as np

from ..base import APPROX_PRESCALE
from ._common import GEMM_PARALLEL_MIN, KernelPasses, _is_cols

__all__ = ["EstimatePasses"]

#: Scale of the estimate operands (squares in [0, 1)): keeps tiny squares out of
#: BF16 / FP32 subnormals (which oneDNN may flush); the products stay below 2**113.
_EST_SCALE = APPROX_PRESCALE


class EstimatePasses(KernelPasses):
    """``approx_matmul``, ``approx_squares``, ``scaled_estimate``, ``classify_estimate``,
    ``kept_below``."""

    def approx_matmul(self, a, b):
        """``a @ b.T`` of nonnegative float32 data to a few bits, on BF16
        (``dnnl_gemm_bf16bf16f32``, FP32 accumulation), as float64.

        Inputs are scaled by 2**48 (exact) so that no product is flushed as a
        subnormal; relative error per entry below 2**-7 (0.01 bit in log2).
        """
        if self.bf16_gemm is None:
            return super().approx_matmul(a, b)
        return self._bf16_products(_to_bf16(self.approx_operand(a)), False,
                                   _to_bf16(self.approx_operand(b)), False)

    def approx_squares(self, xa, xb):
        """``(xa**2) @ (xb**2).T`` to a few bits (``slices="auto"``'s estimate):
        squares written as BF16 in one fused pass per operand, one BF16 GEMM."""
        if self.bf16_gemm is None or self.kernels is None:
            return None
        (a16, ta), (b16, tb) = self._squares(xa), self._squares(xb)
        return self._bf16_products(a16, ta, b16, tb)

    def _squares(self, x, dtype=np.uint16):
        """``x**2 * 2**48`` in ``x``'s memory order, as bf16 bits (``uint16``) or float32:
        ``(array, transposed)``, ``array`` the rows of ``x.T`` where ``transposed``."""
        cols = _is_cols(x)
        x = x.T if cols else np.ascontiguousarray(x)
        out = self.scratch.empty(x.shape, dtype)
        kernel = "squares_f32" if dtype == np.float32 else "squares_bf16"
        getattr(self._k(x.size), kernel)(x, _EST_SCALE, out)
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
                self.bf16_gemm(b"T" if ta else b"N", b"N" if tb else b"T", m, p, k,
                               a16.ctypes.data, max(a16.shape[1], 1), b16.ctypes.data,
                               max(b16.shape[1], 1), c.ctypes.data, max(p, 1),
                               self.threads if 2 * m * p * k >= GEMM_PARALLEL_MIN else 1)
            else:
                c.fill(0)
        return c

    def scaled_estimate(self, xa, xb):
        """``(q32, scale)``: the estimate of ``xa**2 @ xb**2.T`` times ``scale`` (2**96),
        float32, never converted, for the fused classification pass; None without the
        compiled kernels.

        On oneDNN's BF16 GEMM where the CPU multiplies BF16 natively (:attr:`bf16_gemm`),
        else on FP32 SGEMM: the squares written as float32 in one compiled pass (the
        bits of :meth:`approx_operand` of the squares), one BLAS SGEMM. Both are
        within the decisions' bound (ozlinalg.ozaki.counts.estimate), so either gives
        the same counts.
        """
        if self.kernels is None:
            return None
        if self.bf16_gemm is not None:
            (a16, ta), (b16, tb) = self._squares(xa), self._squares(xb)
            return self._bf16_scaled(a16, ta, b16, tb), _EST_SCALE**2
        # xa's and xb's shapes again, as views where stored transposed: BLAS takes either
        qa, qb = (q.T if t else q for q, t in (self._squares(xa, np.float32),
                                               self._squares(xb, np.float32)))
        c = self.scratch.empty((qa.shape[0], qb.shape[0]), np.float32)
        if c.size:
            np.matmul(qa, qb.T, out=c)
        return c, _EST_SCALE**2

    def classify_estimate(self, q, consts, num):
        """One pass of ``ozlinalg.ozaki.counts.estimate.CountPlan.add_tile``: ``(codes, row_lo,
        row_hi)`` (0 kept, 1 native, 2 undecided; per row the smallest bounds of the kept
        entries); None where the generic code must run (a float64 estimate among them)."""
        if (self.kernels is None or q.ndim != 2 or not q.flags.c_contiguous
                or q.dtype != np.float32):
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
        if (self.kernels is None or q.ndim != 2 or not q.flags.c_contiguous
                or q.dtype != np.float32):
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


def _to_bf16(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (u >> np.uint32(16)).astype(np.uint16)
