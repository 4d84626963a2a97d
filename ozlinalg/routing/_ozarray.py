"""A wrapper array type that carries the emulation with it, without a context.

``x = ozlinalg.asarray(a)`` wraps a NumPy (or CuPy) array in :class:`OzArray`.
Through NEP 13 (``__array_ufunc__``) and NEP 18 (``__array_function__``):

* ``x @ y``, ``np.matmul(x, y)`` and ``np.dot(x, y)`` (1-D/2-D) run on
  :func:`ozlinalg.matmul`;
* ``np.linalg.solve/inv/det/slogdet/cholesky/qr/lstsq/multi_dot(x, ...)`` and
  ``np.linalg.eigh/eigvalsh/svd/pinv/matrix_rank(x, ...)`` run on
  :mod:`ozlinalg.numpy_linalg`;

and return :class:`OzArray` (so chains stay emulated). Every other NumPy
function or ufunc unwraps its arguments and calls NumPy: ufunc results
(``x + 1``, ``np.sqrt(x)``) are wrapped again, other functions' results
(``np.sum(x)``, ``np.concatenate``) are returned as plain arrays. This is
the one way to route ``@`` on host arrays: NumPy's ``ndarray.__matmul__``
cannot be patched.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

__all__ = ["OzArray", "asarray"]


def _unwrap(x):
    if isinstance(x, OzArray):
        return x.data
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(y) for y in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _wrap(x):
    from .._array import is_cupy_array

    if isinstance(x, np.ndarray) or is_cupy_array(x):
        return OzArray(x)
    if isinstance(x, tuple):
        wrapped = [_wrap(y) for y in x]
        return type(x)(*wrapped) if hasattr(x, "_fields") else tuple(wrapped)
    return x


def _routes():
    from .. import numpy_linalg as nl

    def dot(a, b, out=None):
        if out is None and a.ndim <= 2 and b.ndim <= 2 and a.ndim and b.ndim:
            return nl.matmul(a, b)
        return np.dot(a, b, out=out)

    return {
        np.dot: dot,
        np.linalg.solve: nl.solve,
        np.linalg.inv: nl.inv,
        np.linalg.det: nl.det,
        np.linalg.slogdet: nl.slogdet,
        np.linalg.cholesky: nl.cholesky,
        np.linalg.qr: nl.qr,
        np.linalg.lstsq: nl.lstsq,
        np.linalg.multi_dot: nl.multi_dot,
        np.linalg.eigh: nl.eigh,
        np.linalg.eigvalsh: nl.eigvalsh,
        np.linalg.svd: nl.svd,
        np.linalg.pinv: nl.pinv,
        np.linalg.matrix_rank: nl.matrix_rank,
    }


_ROUTES_CACHE: dict = {}


def _route_for(func):
    if not _ROUTES_CACHE:
        for k, v in _routes().items():
            _ROUTES_CACHE[getattr(k, "__wrapped__", k) if getattr(
                k, "_ozlinalg_shim", False) else k] = v
    # a backend shim on numpy.linalg is a different object from NumPy's function
    key = func.__wrapped__ if getattr(func, "_ozlinalg_shim", False) else func
    return _ROUTES_CACHE.get(key)


class OzArray(NDArrayOperatorsMixin):
    """An array whose products and solves run on the emulated DGEMM.

    Parameters
    ----------
    data : array_like
        The wrapped array (NumPy or CuPy); not copied when already an array.

    Attributes
    ----------
    data : ndarray
        The wrapped array (``np.asarray(x)`` gives it too).

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> x = ozlinalg.asarray(np.eye(2))
    >>> with ozlinalg.profile() as prof:
    ...     y = x @ np.ones((2, 2))
    >>> type(y).__name__, prof.emulated_gemm_calls
    ('OzArray', 1)
    """

    __slots__ = ("data",)

    def __init__(self, data):
        from .._array import array_namespace

        if isinstance(data, OzArray):
            data = data.data
        xp = array_namespace(data)
        self.data = data if isinstance(data, xp.ndarray) else xp.asarray(data)

    # -- the array protocol ------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        a = self.data
        if hasattr(a, "get"):
            a = a.get()
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        return np.array(a, copy=True) if copy else a

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc is np.matmul and method == "__call__" and "out" not in kwargs \
                and not kwargs.get("axes") and not kwargs.get("axis"):
            from ..numpy_linalg import matmul

            a, b = (_unwrap(x) for x in inputs)
            if kwargs.get("dtype") is None:
                return OzArray(matmul(a, b))
        args = _unwrap(inputs)
        kw = _unwrap(kwargs)
        out = getattr(ufunc, method)(*args, **kw)
        if method == "at":
            return None
        return _wrap(out)

    def __array_function__(self, func, types, args, kwargs):
        route = _route_for(func)
        if route is not None:
            try:
                return _wrap(route(*_unwrap(args), **_unwrap(kwargs)))
            except TypeError:
                pass  # e.g. complex input: NumPy's own function below
        impl = getattr(func, "__wrapped__", None) if getattr(func, "_ozlinalg_shim", False) \
            else None
        return (impl or func)(*_unwrap(args), **_unwrap(kwargs))

    # -- conveniences ------------------------------------------------------
    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    @property
    def T(self):  # noqa: N802
        return OzArray(self.data.T)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, key):
        r = self.data[_unwrap(key)]
        return OzArray(r) if hasattr(r, "ndim") and r.ndim else r

    def __setitem__(self, key, value):
        self.data[_unwrap(key)] = _unwrap(value)

    def __repr__(self):
        return f"OzArray({self.data!r})"

    def unwrap(self):
        """The wrapped array."""
        return self.data


def asarray(a):
    """Wrap ``a`` so that ``@``, ``np.matmul``, ``np.dot`` and ``np.linalg.solve`` & co.
    run on the emulation (see :class:`OzArray`).

    Parameters
    ----------
    a : array_like
        NumPy or CuPy array (not copied), or anything ``numpy.asarray`` takes.

    Returns
    -------
    OzArray

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> x = ozlinalg.asarray(np.array([[2., 0.], [0., 4.]]))
    >>> np.linalg.solve(x, np.array([2., 4.]))
    OzArray(array([1., 1.]))
    """
    return OzArray(a)
