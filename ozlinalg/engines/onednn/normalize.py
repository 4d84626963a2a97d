"""The oneDNN engine's normalization passes (kernels: ``k_normalize.c``; generic code:
:func:`ozlinalg.ozaki.split.normalize_rows`, ``ozlinalg.ozaki.balance.abs_max_generic``)."""
from __future__ import annotations

import numpy as np

from ._common import KernelPasses, _col_lines

__all__ = ["NormalizePasses"]


class NormalizePasses(KernelPasses):
    """``normalize_rows``, ``abs_max``, ``abs_max_both``, ``abs_min_nonzero``: the generic
    bits."""

    def normalize_rows(self, a):
        """Fused :func:`ozlinalg.ozaki.split.normalize_rows` (one pass, row-parallel);
        the result follows ``a``'s memory order (column-contiguous stays so); None:
        generic code."""
        ker = self.kernels
        if ker is None or a.dtype != np.float64 or a.ndim != 2:
            return None
        rows, k = a.shape
        e = np.empty(rows, np.int32)
        ker = self._k(a.size)
        # a tile of column-contiguous rows (B^T's rows r0:r1 of a C-ordered B: unit
        # stride down a column, not contiguous as a whole) goes the column way too: read
        # as rows it is a strided gather, 20x slower (the tiles of a product under a
        # memory limit)
        if _col_lines(a):
            xt = self.scratch.empty((k, rows), np.float64)
            ker.normalize_cols(a.T, xt, e)
            return xt.T, e
        x = self.scratch.empty((rows, k), np.float64)
        ker.normalize_rows(a, x, e, np.empty(0))  # (no row sums of squares)
        return x, e

    def _unit_lines(self, x):
        """For the reductions: ``x`` (a non-empty float64 2-D array) or ``x.T``, whichever
        has unit-stride rows (the kernels take any row stride: a block of a larger
        matrix, such as a factorization's panel, needs no copy); None where the kernels
        cannot take it (no kernels, another dtype or shape, no unit stride)."""
        if self.kernels is None or x.dtype != np.float64 or x.ndim != 2 or x.size == 0:
            return None
        if x.strides[1] == x.itemsize:
            return x
        if x.strides[0] == x.itemsize:
            return x.T
        return None

    def abs_min_nonzero(self, x):
        """The smallest nonzero ``|x|`` of a float64 2-D array (inf where there is none)
        in one parallel pass over its contiguous lines
        (``ozlinalg.ozaki.balance.abs_min_nonzero_generic``); None: generic."""
        xx = self._unit_lines(x)
        if xx is None:
            return None
        out = np.empty(xx.shape[0])
        self._k(x.size).abs_min_nonzero_rows(xx, out)
        return float(out.min())

    def abs_max(self, x, axis):
        """``max |x|`` along ``axis`` of a float64 2-D array in one parallel pass
        (``ozlinalg.ozaki.balance.abs_max_generic``: Inf where a line holds Inf or NaN); None:
        generic."""
        xx = self._unit_lines(x)
        if xx is None:
            return None
        rows = (axis == 1) == (xx is x)  # the lines reduced are contiguous
        out = np.empty(xx.shape[0] if rows else xx.shape[1])
        ker = self._k(x.size)
        (ker.abs_max_rows if rows else ker.abs_max_cols)(xx, out)
        return out

    def abs_max_both(self, x):
        """``(abs_max(x, 1), abs_max(x, 0))`` of a float64 2-D array in one parallel read
        (``ozlinalg.ozaki.balance.abs_max_both_generic``); None: generic."""
        xx = self._unit_lines(x)
        if xx is None:
            return None
        rows, cols = np.empty(xx.shape[0]), np.empty(xx.shape[1])
        self._k(x.size).abs_max_both(xx, rows, cols)
        return (rows, cols) if xx is x else (cols, rows)
