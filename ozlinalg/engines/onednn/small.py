"""The oneDNN engine's one-call path for small EF products (kernel: ``k_small.c``; the
driver's bits: :func:`ozlinalg.ozaki.small.small_product`)."""
from __future__ import annotations

import numpy as np

from ._common import KernelPasses

__all__ = ["SmallPasses"]


class SmallPasses(KernelPasses):
    """``small_product``."""

    def small_product(self, a, bt, out, kind, width, slices, thresholds, min_shift,
                      times=None):
        """A whole small EF product ``out = a @ bt.T`` in one compiled call, with the
        driver's bits (:func:`ozlinalg.ozaki.small.small_product`); returns ``(slices
        used, auto's count)``, or None where the driver must run (no kernels, Inf / NaN,
        native entries, an undecided count). ``thresholds``: ``slices="auto"``'s, for
        up to ``max(max_slices, slices)`` slices. ``times``: a list that receives the
        seconds spent splitting, in the products and accumulating."""
        ker = self.kernels
        if ker is None or kind not in ("hybrid", "bitmask"):
            return None
        info = np.zeros(6 if times is not None else 3, np.int64)
        ker.small_ef_product(a, bt, out, kind == "bitmask", width,
                             0 if slices == "auto" else int(slices), thresholds,
                             0 if min_shift is None else int(min_shift), info)
        if info[1] != 0:  # the driver runs (SMALL_NOMEM too: it raises MemoryError
            return None   # itself if memory is short for it as well)
        if times is not None:
            times[:] = (info[3:] * 1e-9).tolist()
        return int(info[0]), int(info[2])
