"""Reciprocal condition numbers and LAPACK's singularity verdict.

SciPy decides from LAPACK's own arithmetic whether a matrix is singular (an
exactly zero pivot: ``LinAlgError``) or ill-conditioned (reciprocal condition
number below the machine epsilon of the routine's precision: a
``LinAlgWarning`` from ``solve`` and ``inv``). The emulated factorization
rounds differently, so on a matrix that is singular to working precision its
pivot can come out tiny where LAPACK's is exactly zero, or the other way
round. ozlinalg therefore settles such matrices with LAPACK itself: when the
emulated factors are *numerically singular* at the call's precision
(:func:`numerically_singular`), the slice is recomputed natively in the
dtype SciPy would use, and the verdict, the warning and the result are
LAPACK's. On every other matrix the emulated result stands (its rcond is
estimated with LAPACK ``?gecon`` / ``?pocon`` / ``?trcon``, O(n^2)).
"""
from __future__ import annotations

import functools

import numpy as np

from .._array import to_numpy
from ..lapack.scipy_conventions import eps

__all__ = ["norm1", "gecon", "pocon", "trcon", "native_routine", "numerically_singular"]


@functools.lru_cache(maxsize=64)
def _routine(name, char):
    from scipy.linalg import lapack as _lp  # noqa: PLC0415

    return getattr(_lp, {"f": "s", "d": "d", "F": "c", "D": "z"}[char] + name)


def native_routine(name, dtype):
    """The LAPACK routine ``name`` (``'getrf'``, ...) of ``dtype``'s precision."""
    return _routine(name, np.dtype(dtype).char)


def norm1(xp, a):
    """The 1-norm (largest absolute column sum) of ``a``, as a float; taken
    over column blocks, so that no temporary of a's size is needed."""
    if a.size == 0:
        return 0.0
    step = max(1, (1 << 20) // a.shape[0])
    if step >= a.shape[1]:
        return float(xp.abs(a).sum(axis=0).max())
    return max(float(xp.abs(a[:, j:j + step]).sum(axis=0).max())
               for j in range(0, a.shape[1], step))


def _host(a):
    if type(a) is np.ndarray and a.dtype.char in "dD":  # the common case, as it is
        return a
    a = to_numpy(a)
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64, copy=False)


def gecon(xp, lu, anorm):
    """rcond of the matrix whose (float64 / complex128) LU factors are ``lu``;
    None on a device (no condition estimator there)."""
    if xp is not np:
        return None
    lu = _host(lu)
    rc, _ = native_routine("gecon", lu.dtype)(lu, anorm, norm="1")
    return float(rc)


def pocon(xp, c, lower, anorm):
    """rcond from a Cholesky factor ``c`` (None on a device)."""
    if xp is not np:
        return None
    c = _host(c)
    rc, _ = native_routine("pocon", c.dtype)(c, anorm, uplo="L" if lower else "U")
    return float(rc)


def trcon(xp, a, lower, dtype=None):
    """rcond of the triangular ``a`` (1-norm), in ``dtype``'s precision
    (default float64 / complex128); None on a device."""
    if xp is not np:
        return None
    a = to_numpy(a)
    a = a.astype(dtype if dtype is not None else _host(a[:0, :0]).dtype, copy=False)
    rc, _ = native_routine("trcon", a.dtype)(a, norm="1", uplo="L" if lower else "U",
                                            diag="N")
    return float(rc)


def numerically_singular(info, rcond, dtype):
    """An exactly zero pivot (``info > 0``), or an rcond below the machine
    epsilon of ``dtype`` (NaN included): LAPACK, not the emulation, decides."""
    return info > 0 or (rcond is not None and not rcond >= eps(dtype))
