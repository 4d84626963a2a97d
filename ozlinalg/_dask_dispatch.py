"""Dask arrays in, dask arrays out: the hook that sends ozlinalg's public
functions to :mod:`ozlinalg.dask` when an argument is a dask array.

Kept apart from :mod:`ozlinalg.dask` so that ``import ozlinalg`` never imports
dask: the check looks at the argument's type only.
"""
from __future__ import annotations

import functools

__all__ = ["is_dask_collection", "any_dask", "dask_aware"]


def is_dask_collection(x) -> bool:
    """True for a dask collection (``dask.array.Array``, ...), without importing dask."""
    return type(x).__module__.startswith("dask.") and hasattr(x, "__dask_graph__")


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
            from . import dask as ozdask

            return getattr(ozdask, func.__name__)(*args, **kwargs)
        return func(*args, **kwargs)

    return wrapper
