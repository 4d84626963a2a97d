"""Array-namespace helpers: NumPy or CuPy, chosen from the inputs; dask collections,
sent to :mod:`ozlinalg.dask`.

The algorithms in :mod:`ozlinalg.ozaki` and :mod:`ozlinalg.lapack` are written
once against ``xp`` (``numpy`` or ``cupy``); this module is the only place that
decides which one a call uses, and (:func:`dask_aware`) when a public function hands
a call to its lazy counterpart in :mod:`ozlinalg.dask`.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["array_namespace", "is_cupy_array", "is_dask_collection", "cupy_or_none",
           "to_numpy", "fp_errstate", "row_blocks", "set_block_mask", "any_dask",
           "dask_aware", "set_dask_namespace"]


def cupy_or_none():
    """Return the ``cupy`` module if it is importable, else ``None``.

    CuPy is an optional extra; importing it lazily keeps ``import ozlinalg``
    cheap and working on machines without CUDA.
    """
    try:
        import cupy  # noqa: PLC0415
    except Exception:  # ImportError, or a CUDA runtime that fails to load
        return None
    return cupy


def is_cupy_array(x) -> bool:
    """True if ``x`` is a ``cupy.ndarray`` (without importing CuPy needlessly)."""
    cls = type(x)
    if not cls.__module__.startswith("cupy"):
        return False
    cp = cupy_or_none()
    return cp is not None and isinstance(x, cp.ndarray)


def is_dask_collection(x) -> bool:
    """True for a dask collection (``dask.array.Array``, ...), without importing dask:
    ``import ozlinalg`` must never import it."""
    return type(x).__module__.startswith("dask.") and hasattr(x, "__dask_graph__")


def array_namespace(*arrays):
    """The array module that owns ``arrays``: ``cupy`` if any is a CuPy array.

    Mixing CuPy and NumPy arrays in one call is an error, as in CuPy itself.
    """
    if all(type(a) is np.ndarray for a in arrays):  # the common case, in a few ns per array
        return np
    kinds = {is_cupy_array(a) for a in arrays if a is not None and not np.isscalar(a)}
    if kinds == {True}:
        return cupy_or_none()
    if True in kinds:
        raise TypeError(
            "ozlinalg: cannot mix cupy.ndarray and host arrays in one call; "
            "move them to the same device first (cupy.asarray / cupy.asnumpy)"
        )
    return np


def to_numpy(x):
    """Host copy of ``x`` (a no-op for NumPy arrays)."""
    if is_cupy_array(x):
        return x.get()
    return np.asarray(x)


def fp_errstate(xp, **kinds):
    """``numpy.errstate(**kinds)`` for NumPy; a no-op for CuPy, which never warns."""
    if xp is np:
        return np.errstate(**kinds)
    import contextlib  # noqa: PLC0415

    return contextlib.nullcontext()


def row_blocks(rows, cols, target=1 << 15):
    """``(r0, r1)`` row ranges of about ``target`` entries each.

    Elementwise passes over output-sized arrays (``slices="auto"``'s spread,
    Ozaki-II's scalings) run block by block, so their temporaries stay in
    cache instead of costing a full-size array (and its page faults) per
    NumPy operation; the values are the same.
    """
    step = max(1, int(target) // max(int(cols), 1))
    return [(r0, min(rows, r0 + step)) for r0 in range(0, rows, step)]


def set_block_mask(xp, mask, block, r0, shape):
    """``mask`` with rows ``r0:`` set to the boolean ``block``: allocated (all False)
    on the first block holding a True, else returned as is (``None`` while none)."""
    if bool(block.any()):
        if mask is None:
            mask = xp.zeros(shape, dtype=bool)
        mask[r0:r0 + block.shape[0]] = block
    return mask


# -- dask arrays: sent to ozlinalg.dask -------------------------------------------------
# The public functions that ozlinalg.dask also has (ozlinalg.matmul, the functions of
# ozlinalg.linalg) are defined with dask_aware where they are defined. ozlinalg.dask sits
# above this floor and beside linalg, so neither may import it: ozlinalg/__init__.py, the
# container, registers how it is imported (set_dask_namespace), and the first dask array
# imports it.

_DASK_NAMESPACE = []  # [a function returning the ozlinalg.dask module], once registered


def set_dask_namespace(load):
    """Register ``load()``, which imports and returns :mod:`ozlinalg.dask` (called
    once, by ``ozlinalg/__init__.py``)."""
    _DASK_NAMESPACE[:] = [load]


#: Argument types that are never dask collections: arrays and the flags beside them.
_NOT_DASK = frozenset({np.ndarray, bool, int, float, str, type(None)})


def any_dask(args, kwargs) -> bool:
    """Whether any argument (or an entry of a tuple / list argument, as in
    ``lu_solve((lu, piv), b)``) is a dask collection."""
    for x in (*args, *kwargs.values()):
        if type(x) in _NOT_DASK:  # the common cases, without a look at the module
            continue
        if is_dask_collection(x):
            return True
        if isinstance(x, (tuple, list)) and any(is_dask_collection(y) for y in x):
            return True
    return False


def dask_aware(func):
    """``func``, or the function of the same name in :mod:`ozlinalg.dask` when called
    with a dask array (a lazy result, same signature).

    The check looks at the arguments' types only, so a call without dask arrays never
    imports dask.
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if any_dask(args, kwargs):
            return getattr(_DASK_NAMESPACE[0](), func.__name__)(*args, **kwargs)
        return func(*args, **kwargs)

    return wrapper
