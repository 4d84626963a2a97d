"""The one registry of routed functions: NumPy, SciPy, CuPy and dask.

:data:`ROUTES` maps a module to ``{function name: target}``. A target is either
``"module:function"``, the ozlinalg implementation of an in-memory function
(imported on the first routed call), or an adapter with the routed function's
own signature (the dask routes, :mod:`ozlinalg.routing._dask`), registered
with :func:`implements`, as ``cupyx.scipy.linalg`` registers its SciPy
overrides. Only the names listed here are ever patched.
"""
from __future__ import annotations

__all__ = ["ROUTES", "implements", "is_adapter"]

_NUMPY_API = "ozlinalg.numpy_linalg:"
_SCIPY_API = "ozlinalg.linalg:"

#: module -> {function name: ``"module:function"`` or an adapter}
ROUTES: dict = {
    "numpy.linalg": {n: _NUMPY_API + n for n in (
        "solve", "inv", "det", "slogdet", "cholesky", "qr", "lstsq", "multi_dot",
        "eigh", "eigvalsh", "svd", "pinv", "matrix_rank")},
    "scipy.linalg": {n: _SCIPY_API + n for n in (
        "lu_factor", "lu_solve", "lu", "cho_factor", "cho_solve", "cholesky", "qr",
        "solve", "solve_triangular", "inv", "det", "lstsq",
        "eigh", "eigvalsh", "svd", "svdvals", "pinv", "polar")},
    "cupy.linalg": {n: _NUMPY_API + n for n in (
        "solve", "inv", "det", "slogdet", "cholesky", "qr", "lstsq",
        "eigh", "eigvalsh", "svd", "pinv", "matrix_rank")},
    "cupyx.scipy.linalg": {n: _SCIPY_API + n for n in (
        "lu_factor", "lu_solve", "solve_triangular")},
}


def implements(*qualnames):
    """Register the decorated adapter as the route of each ``"module.name"``.

    Examples
    --------
    >>> @implements("somelib.linalg.solve")    # doctest: +SKIP
    ... def _solve(a, b): ...
    """
    def register(adapter):
        for qualname in qualnames:
            mod, _, name = qualname.rpartition(".")
            ROUTES.setdefault(mod, {})[name] = adapter
        return adapter

    return register


def is_adapter(target) -> bool:
    """Whether `target` is an adapter (a dask route), not ``"module:function"``."""
    return not isinstance(target, str)
