"""What the oneDNN engine's modules share: its exception, the thread thresholds of its
passes, the kernel access of every pass family (:class:`KernelPasses`)."""
from __future__ import annotations

__all__ = ["EngineUnavailable", "GEMM_PARALLEL_MIN", "KernelPasses", "PARALLEL_MIN"]


class EngineUnavailable(RuntimeError):
    """The oneDNN engine cannot run here (library missing, or not exact)."""


#: Passes over fewer entries than this, and GEMMs of fewer INT8 operations than
#: GEMM_PARALLEL_MIN, run on one thread (about a millisecond of work): a parallel
#: region's barrier costs more than the work when the other cores are busy
#: (measured on the shared 2-core box under load: a 40 x 300 split took 8 ms on
#: two threads and 0.15 ms on one; a 40 x 30 x 300 GEMM 3.5-12 ms against 9 us).
PARALLEL_MIN = 1 << 20
GEMM_PARALLEL_MIN = 1 << 30


class KernelPasses:
    """Base of the pass-family mixins of :class:`~ozlinalg.engines.onednn.OneDNNEngine`.

    The mixins read the engine's ``kernels`` (the compiled kernel module, or None:
    every fused pass then declines and the driver runs the generic code),
    ``threads`` and ``scratch`` (:mod:`ozlinalg.engines._scratch`), set up by
    :class:`~ozlinalg.engines.onednn.engine.OneDNNEngine`.
    """

    def _k(self, work):
        """The kernel module, its thread count set for a pass over ``work`` entries."""
        ker = self.kernels
        ker.set_threads(self.threads if work >= PARALLEL_MIN else 1)
        return ker


def _is_cols(x):
    """True when the columns of the 2-D ``x`` are contiguous and its rows are not."""
    return x.ndim == 2 and x.T.flags.c_contiguous and not x.flags.c_contiguous


def _col_lines(x):
    """True when the 2-D ``x`` is read best a column at a time: :func:`_is_cols`, or a
    tile of such rows (unit stride down each column, a longer one along a row: B^T's
    rows ``r0:r1`` of a C-ordered B), which the column-wise kernels take as it is."""
    return _is_cols(x) or (x.ndim == 2 and x.shape[0] > 1 and x.strides[0] == x.itemsize
                           and x.strides[1] > x.itemsize)
