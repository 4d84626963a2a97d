"""Argument checks for dask inputs, done when the graph is built (shapes, dtypes)
or inside the tasks (values: finiteness), never by computing anything early."""
from __future__ import annotations

import numpy as np

from .._emulable import emulable
from ..lapack import work_dtype
from ..lapack.scipy_conventions import lapack_dtype
from . import _kernels as K
from ._tasks import chunk_namespace

__all__ = ["is_dask_array", "as_dask", "check_dtype", "work_dtype", "result_dtype",
           "finite", "square_blocks", "system"]


def is_dask_array(x) -> bool:
    """True for a ``dask.array.Array`` (checked without importing dask)."""
    return type(x).__module__.startswith("dask.") and hasattr(x, "__dask_graph__") \
        and hasattr(x, "chunks")


def as_dask(*arrays):
    """Dask arrays for ``arrays``; non-dask operands (NumPy or CuPy arrays,
    array_likes) become one-chunk dask arrays (their chunks are matched to the
    other operand's by the caller). All must have chunks of one namespace
    (NumPy or CuPy: ``TypeError`` otherwise, at build time)."""
    import dask.array as da

    from .._array import is_cupy_array

    out = tuple(x if is_dask_array(x) else
                da.from_array(x if is_cupy_array(x) else np.asarray(x), chunks=-1)
                for x in arrays)
    chunk_namespace(*out)
    return out


def check_dtype(x, fname, argname="a"):
    if not emulable(x.dtype):
        raise TypeError(f"{fname}: {argname} has unsupported dtype {x.dtype}")


def result_dtype(*arrays):
    """The dtype SciPy's LAPACK-backed functions return for ``arrays``
    (:func:`ozlinalg.lapack.scipy_conventions.lapack_dtype`: bool and 8/16-bit integers
    give float32, as in the in-memory functions)."""
    return lapack_dtype(*arrays)


def finite(x, check_finite):
    """``x``, with every block checked for Inf / NaN when its task runs."""
    from dask.base import tokenize

    if not check_finite or x.dtype.kind not in "fc":
        return x
    return x.map_blocks(K.check_finite_block, dtype=x.dtype,
                        name=f"oz-check-finite-{tokenize(x)}")


def square_blocks(a, fname):
    """``a`` (square) with equal row and column chunks, so diagonal blocks are square."""
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{fname}: expected a square matrix, got shape {a.shape}")
    if a.chunks[1] != a.chunks[0]:
        a = a.rechunk({1: a.chunks[0]})
    return a


def system(a, b, fname, check_finite, argname="a"):
    """Validate a square ``a`` and a right-hand side ``b`` (1-D or 2-D) of a
    solve; returns ``(a, b2, vec, dt, wt)``: both in the computing dtype ``wt``
    (finiteness checked in the tasks), ``b2`` 2-D with the row chunks of ``a``,
    ``vec`` whether ``b`` was 1-D, ``dt`` the result dtype."""
    a, b = as_dask(a, b)
    check_dtype(a, fname, argname)
    check_dtype(b, fname, "b")
    a = square_blocks(a, fname)
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ValueError(f"shapes of {argname} {a.shape} and b {b.shape} are incompatible")
    dt, wt = result_dtype(a, b), work_dtype(a, b)
    a = finite(a, check_finite).astype(wt)
    b = finite(b, check_finite).astype(wt)
    vec = b.ndim == 1
    b2 = (b[:, None] if vec else b).rechunk({0: a.chunks[0]})
    return a, b2, vec, dt, wt
