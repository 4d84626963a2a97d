"""Dask arrays in, dask arrays out: ozlinalg's public in-memory functions send a
call to the function of the same name in :mod:`ozlinalg.dask` when an argument is
a dask array.

The wrapping is done here, at the top, not in :mod:`ozlinalg.linalg`: linalg
and dask are siblings and neither imports the other. The check looks at the
arguments' types only, so ``import ozlinalg`` never imports dask.
"""
from __future__ import annotations

import functools

from .._array import is_dask_collection

__all__ = ["is_dask_collection", "any_dask", "dask_aware", "make_dask_aware", "LINALG_NAMES"]

#: The functions of :mod:`ozlinalg.linalg` that :mod:`ozlinalg.dask` also has
#: (``matmul`` dispatches by itself: :func:`ozlinalg.matmul`).
LINALG_NAMES = ("lu_factor", "lu_solve", "lu", "cho_factor", "cho_solve", "cholesky", "qr",
                "solve", "solve_triangular", "inv", "det", "lstsq")


def any_dask(args, kwargs) -> bool:
    """Whether any argument (or an entry of a tuple / list argument, as in
    ``lu_solve((lu, piv), b)``) is a dask collection."""
    for x in (*args, *kwargs.values()):
        if is_dask_collection(x):
            return True
        if isinstance(x, (tuple, list)) and any(is_dask_collection(y) for y in x):
            return True
    return False


def dask_aware(func):
    """``func``, or the function of the same name in :mod:`ozlinalg.dask` when
    called with a dask array (a lazy result, same signature)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if any_dask(args, kwargs):
            from .. import dask as ozdask

            return getattr(ozdask, func.__name__)(*args, **kwargs)
        return func(*args, **kwargs)

    wrapper._ozlinalg_dask_aware = True
    return wrapper


def make_dask_aware(namespace, names=LINALG_NAMES) -> None:
    """Replace each function `names` of module `namespace` by its
    :func:`dask_aware` wrapper (once: a second call wraps nothing again).

    ``ozlinalg/__init__.py`` calls it on :mod:`ozlinalg.linalg` right after
    importing it, before any module binds those names."""
    for name in names:
        func = getattr(namespace, name)
        if not getattr(func, "_ozlinalg_dask_aware", False):
            setattr(namespace, name, dask_aware(func))
