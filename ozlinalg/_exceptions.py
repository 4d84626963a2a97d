"""Warnings and errors raised by ozlinalg."""
from __future__ import annotations

from numpy.linalg import LinAlgError
from scipy.linalg import LinAlgWarning

__all__ = ["AccuracyWarning", "LinAlgError", "LinAlgWarning", "PerformanceWarning"]


class AccuracyWarning(LinAlgWarning):
    """The emulation could not promise FP64-level accuracy for this input.

    Raised, for example, when ``slices="auto"`` needs more slices than
    ``max_slices`` allows.
    """


class PerformanceWarning(UserWarning):
    """ozlinalg runs a slower route than it could (the results are the same).

    Raised once per process, for example, when the CPU INT8 engine runs without its
    compiled kernels (ozlinalg installed without a C compiler): the generic NumPy
    passes give the same bits, more slowly.
    """
