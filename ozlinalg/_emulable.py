"""The ground floor every layer may stand on: which dtypes the emulation takes,
and the original function behind a routing shim.

Imports nothing, so ``ozlinalg.lapack``, ``ozlinalg.linalg``,
``ozlinalg.dask`` and ``ozlinalg.routing`` can all ask the same question the same way.
"""
from __future__ import annotations

__all__ = ["emulable", "original"]


def emulable(dtype, *, half=True) -> bool:
    """Whether the emulation takes arrays of `dtype`.

    Bool, integers, float16/32/64 and complex64/128 are taken (computed in
    float64 / complex128); long double and its complex, and every non-numeric
    kind, are not.

    Parameters
    ----------
    dtype : numpy.dtype
        The dtype asked about (anything with ``kind`` and ``itemsize``).
    half : bool, optional
        Whether float16 counts. The functions of :mod:`ozlinalg.linalg` and
        :mod:`ozlinalg.lapack` take it (converted up, as SciPy does); the
        routing shims and the NumPy-compatible functions do not, because
        NumPy's own ``linalg`` rejects float16, and a routed call must fail
        as the original does.

    Returns
    -------
    bool
    """
    k = dtype.kind
    if k in "biu":
        return True
    if k == "f":
        return dtype.itemsize in ((2, 4, 8) if half else (4, 8))
    return k == "c" and dtype.itemsize in (8, 16)


def original(fn):
    """`fn` itself, or the original function behind it when it is a shim
    (``ozlinalg.backend.original(np.linalg.solve)`` is NumPy's ``solve``)."""
    while getattr(fn, "_ozlinalg_shim", False):
        fn = fn.__wrapped__
    return fn
