"""Symmetric / Hermitian eigendecomposition, SVD and polar decomposition on the
emulated GEMM: the cores shared by the SciPy and NumPy namespaces.

(Interface fixed first; the algorithm is being written.)
"""
from __future__ import annotations

import numpy as np

__all__ = ["eigh_core", "svd_core", "polar_core"]


def eigh_core(xp, a, *, vectors=True, lower=True):
    """Eigenvalues ascending (float64) and eigenvectors (a's dtype, float64 or
    complex128) of the Hermitian matrix given by `a`'s ``lower`` (or upper) triangle.
    `a`: 2-D square float64 / complex128 array of xp, finite. Returns ``(w, v)``,
    ``v`` None when not `vectors`. Raises LinAlgError where LAPACK would."""
    w, v = np.linalg.eigh(xp.asarray(a), UPLO="L" if lower else "U")
    return (w, v) if vectors else (w, None)


def svd_core(xp, a, *, vectors=True, full_matrices=True):
    """``(u, s, vh)`` of a 2-D float64 / complex128 array (s descending, float64);
    ``u``, ``vh`` None when not `vectors`."""
    if not vectors:
        return None, np.linalg.svd(a, compute_uv=False), None
    return np.linalg.svd(a, full_matrices=full_matrices)


def polar_core(xp, a, side="right"):
    """``(u, p)``: ``a = u p`` (side right) or ``a = p u`` (left); 2-D float64 /
    complex128 input."""
    import scipy.linalg  # noqa: PLC0415

    return scipy.linalg.polar(a, side=side)
