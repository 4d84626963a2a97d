"""The oneDNN engine's splits into int8 slices (kernels: ``k_split.c``; generic code:
:mod:`ozlinalg.ozaki.split`)."""
from __future__ import annotations

import numpy as np

from ._common import KernelPasses, _is_cols

__all__ = ["SplitPasses"]


class SplitPasses(KernelPasses):
    """``split_rows``, ``split_raw``: the generic split's slices and scales, bit for bit."""

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
