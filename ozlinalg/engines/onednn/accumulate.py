"""The oneDNN engine's FP64 accumulation of the INT32 products (kernels:
``k_accumulate.c``; generic code: the driver's ``acc += alpha * x``,
:mod:`ozlinalg.ozaki.scaling`)."""
from __future__ import annotations

import numpy as np

from ._common import KernelPasses

__all__ = ["AccumulatePasses"]


class AccumulatePasses(KernelPasses):
    """``axpy``, ``axpy_outer``, ``finish_ef``, ``scale_outer``: the generic operations
    in the generic order, one pass each."""

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
