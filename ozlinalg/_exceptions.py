"""Warnings and errors raised by ozlinalg."""
from __future__ import annotations

from numpy.linalg import LinAlgError
from scipy.linalg import LinAlgWarning

__all__ = ["AccuracyWarning", "LinAlgError", "LinAlgWarning"]


class AccuracyWarning(LinAlgWarning):
    """The emulation could not promise FP64-level accuracy for this input.

    Raised, for example, when ``slices="auto"`` needs more slices than
    ``max_slices`` allows.
    """
