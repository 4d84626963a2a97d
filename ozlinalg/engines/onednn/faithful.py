"""The oneDNN engine's passes of the faithful mode and the engine-independent decisions'
exact sums (kernels: ``k_faithful.c``; generic code: :mod:`ozlinalg.ozaki.faithful`,
:mod:`ozlinalg.ozaki.counts.estimate`)."""
from __future__ import annotations

import numpy as np

from ._common import KernelPasses

__all__ = ["FaithfulPasses"]


class FaithfulPasses(KernelPasses):
    """``axpy_twosum``, ``finish_twosum``, ``fixed_sums``, ``digit_sums``, ``certify_ef``,
    ``certify_crt``: the generic operations in one pass each."""

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
        """``ozlinalg.ozaki.counts.estimate._fixed_sum`` of ``x**2`` (``square``) or ``|x|``
        per row, the same floats (exact integer sums), in one pass; None: generic."""
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
