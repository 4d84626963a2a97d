"""``with ozlinalg.backend():``: route existing ``numpy.linalg`` / ``scipy.linalg``
(and ``cupy.linalg`` / ``cupyx.scipy.linalg``) calls to the emulation.

NEP 18 cannot intercept ``np.linalg.solve(ndarray, ndarray)``: exact ndarrays
take NumPy's C fast path and never consult ``__array_function__``. So the first
time a backend block is entered, shims are installed ONCE (under a lock) on
the module attributes listed in :data:`ROUTES`. A shim routes a call to
ozlinalg only when

* a :func:`backend` block is active in the *current context* (a
  :class:`contextvars.ContextVar`, set on enter and reset with its token on
  exit, like :func:`numpy.errstate`: other threads, asyncio tasks and code
  outside the block are unaffected);
* every array argument is a plain ``numpy.ndarray`` (exact type) or a
  ``cupy.ndarray`` of a dtype the emulation takes (float64, float32,
  integers, bool, complex64, complex128; float16, long double and others
  fall through);
* the matrix order is at least the block's ``min_size``;
* the call is not already inside an ozlinalg routine (re-entrancy guard:
  ozlinalg's own native panels call ``scipy.linalg`` and must stay native).

Otherwise the saved original runs, unchanged: subclasses and other array
types keep their own ``__array_function__`` dispatch, and functions ozlinalg
lacks are never patched. Each shim carries ``__wrapped__`` (the original);
:func:`installed` lists the patched names.
"""
from __future__ import annotations

import contextvars
import functools
import importlib
import sys
import threading

import numpy as np

from ._options import get_options
from ._options import options as _options

__all__ = ["backend", "installed", "uninstall", "ROUTES"]

#: module -> {function name: ozlinalg implementation "module:function"}
ROUTES = {
    "numpy.linalg": {n: "ozlinalg.linalg._numpy_api:" + n for n in (
        "solve", "inv", "det", "slogdet", "cholesky", "qr", "lstsq", "multi_dot")},
    "scipy.linalg": {n: "ozlinalg.linalg:" + n for n in (
        "lu_factor", "lu_solve", "lu", "cho_factor", "cho_solve", "cholesky", "qr",
        "solve", "solve_triangular", "inv", "det", "lstsq")},
    "cupy.linalg": {n: "ozlinalg.linalg._numpy_api:" + n for n in (
        "solve", "inv", "det", "slogdet", "cholesky", "qr", "lstsq")},
    "cupyx.scipy.linalg": {n: "ozlinalg.linalg:" + n for n in (
        "lu_factor", "lu_solve", "solve_triangular")},
}

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("ozlinalg_backend", default=None)
_INSIDE: contextvars.ContextVar = contextvars.ContextVar("ozlinalg_backend_inside",
                                                         default=False)
_LOCK = threading.Lock()
_INSTALLED: dict = {}  # "module.name" -> (module, name, original)


# --------------------------------------------------------------------------
# argument screening

def _cupy_ndarray():
    import sys

    cp = sys.modules.get("cupy")
    return getattr(cp, "ndarray", None) if cp is not None else None


def _ok_dtype(dt) -> bool:
    k = dt.kind
    return k in "biu" or (k == "f" and dt.itemsize in (4, 8)) \
        or (k == "c" and dt.itemsize in (8, 16))


def _screen(args, kwargs):
    """``(routable, order)``: are all array arguments plain ndarrays of a dtype
    the emulation takes?

    ``order`` is the largest trailing dimension seen (for ``min_size``).
    Tuples and lists are searched one level down (``lu_solve((lu, piv), b)``,
    ``multi_dot([a, b, c])``).
    """
    cpnd = _cupy_ndarray()
    found = False
    order = 0
    stack = list(args) + list(kwargs.values())
    depth = {id(x): 0 for x in stack}
    while stack:
        x = stack.pop()
        t = type(x)
        if t is np.ndarray or (cpnd is not None and t is cpnd):
            if not _ok_dtype(x.dtype):
                return False, 0
            found = True
            if x.ndim:
                order = max(order, min(x.shape[-2:]) if x.ndim >= 2 else x.shape[0])
        elif t in (tuple, list):
            if depth.get(id(x), 0) >= 1:
                continue
            for y in x:
                depth[id(y)] = depth.get(id(x), 0) + 1
                stack.append(y)
        elif x is None or t in (bool, int, float, str):
            continue
        elif hasattr(x, "__array_function__") or hasattr(x, "__array__") \
                or hasattr(x, "__cuda_array_interface__"):
            return False, 0  # another array type: its own dispatch decides
    return found, order


def _make_shim(qualname, original, target):
    mod_name, fn_name = target.split(":")
    impl_cache = []

    def impl():
        if not impl_cache:
            impl_cache.append(getattr(importlib.import_module(mod_name), fn_name))
        return impl_cache[0]

    @functools.wraps(original)
    def shim(*args, **kwargs):
        state = _ACTIVE.get()
        if state is None or _INSIDE.get():
            return original(*args, **kwargs)
        ok, order = _screen(args, kwargs)
        if not ok or order < get_options().min_size:
            return original(*args, **kwargs)
        token = _INSIDE.set(True)
        try:
            return impl()(*args, **kwargs)
        finally:
            _INSIDE.reset(token)

    shim.__wrapped__ = original
    shim._ozlinalg_shim = True
    shim._ozlinalg_target = target
    shim.__qualname__ = qualname
    return shim


def _install():
    """Patch the module attributes of :data:`ROUTES` (once; thread-safe)."""
    with _LOCK:
        for mod_name, funcs in ROUTES.items():
            try:
                mod = importlib.import_module(mod_name)
            except Exception:  # CuPy absent or without a working CUDA runtime
                continue
            for name, target in funcs.items():
                key = f"{mod_name}.{name}"
                if key in _INSTALLED:
                    continue
                original = getattr(mod, name, None)
                if original is None:
                    continue
                if getattr(original, "_ozlinalg_shim", False):  # e.g. after a reload
                    _INSTALLED[key] = (mod, name, original.__wrapped__)
                    continue
                setattr(mod, name, _make_shim(key, original, target))
                _INSTALLED[key] = (mod, name, original)
        if "dask.array" in sys.modules:  # dask's linalg and `@` (ozlinalg/dask/_route.py)
            from .dask._route import install as install_dask

            install_dask(_INSTALLED)


def installed() -> list:
    """Names of the patched functions (``"numpy.linalg.solve"``, ...), sorted."""
    with _LOCK:
        return sorted(_INSTALLED)


def uninstall() -> None:
    """Restore the original functions (for tests and clean shutdown).

    Safe only when no other thread is inside a :func:`backend` block; the
    next block installs the shims again.
    """
    with _LOCK:
        for mod, name, original in _INSTALLED.values():
            if getattr(getattr(mod, name, None), "_ozlinalg_shim", False):
                setattr(mod, name, original)
        _INSTALLED.clear()


class _State:
    __slots__ = ("overrides", "min_size")

    def __init__(self, overrides, min_size):
        self.overrides = overrides
        self.min_size = min_size


class backend:
    """Route ``numpy.linalg`` / ``scipy.linalg`` (/ CuPy) calls to ozlinalg inside a block.

    A context manager and a decorator. Inside the block, calls such as
    ``np.linalg.solve(a, b)`` or ``scipy.linalg.lu_factor(a)`` on plain real
    or complex ndarrays run on the emulated DGEMM (:mod:`ozlinalg.numpy_linalg`,
    :mod:`ozlinalg.linalg`); everything else runs the original.

    Parameters
    ----------
    **opts
        Options in force inside the block, as :func:`ozlinalg.options`:
        ``method``, ``slices``, ``min_size`` (calls whose matrix order is
        below it run natively; inside ozlinalg it is the order below which a
        factorization runs in native LAPACK), ``max_slices``,
        ``memory_limit``. Unset options are inherited from the enclosing
        context.

    Raises
    ------
    RuntimeError
        When one instance is entered while it is already active.
    TypeError
        For an unknown option name.

    Notes
    -----
    The state lives in a :class:`contextvars.ContextVar` (set on enter,
    reset with its token on exit), so blocks nest (the inner options win
    until it exits), threads and asyncio tasks are isolated, and a worker
    thread started inside a block starts with an empty context (not routed)
    unless it is given ``contextvars.copy_context().run``. See
    docs/backend.md for what can and cannot be routed.

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> a = np.array([[4., 1.], [1., 3.]]); b = np.array([1., 2.])
    >>> with ozlinalg.backend(min_size=0), ozlinalg.profile() as prof:
    ...     x = np.linalg.solve(a, b)
    >>> prof.emulated_gemm_calls > 0
    True
    """

    def __init__(self, **opts):
        _options(**opts)  # validate names and values now
        self._opts = opts
        self._token = None
        self._opt_cm = None

    def __enter__(self):
        if self._token is not None:
            raise RuntimeError("this ozlinalg.backend() instance is already active")
        _install()
        opt_cm = _options(**self._opts)
        merged = opt_cm.__enter__()
        try:
            overrides = {k: getattr(merged, k) for k in
                         ("method", "slices", "min_size", "max_slices", "memory_limit")}
            self._token = _ACTIVE.set(_State(overrides, int(merged.min_size)))
        except BaseException:
            opt_cm.__exit__(None, None, None)
            raise
        self._opt_cm = opt_cm
        return self

    def __exit__(self, *exc):
        _ACTIVE.reset(self._token)
        self._token = None
        cm, self._opt_cm = self._opt_cm, None
        cm.__exit__(*exc)
        return False

    def __call__(self, func):
        opts = self._opts

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with backend(**opts):
                return func(*args, **kwargs)

        return wrapper

    # module-level helpers, reachable as ``ozlinalg.backend.installed()``
    installed = staticmethod(installed)
    uninstall = staticmethod(uninstall)

    @staticmethod
    def active() -> bool:
        """Whether a backend block is active in the current context."""
        return _ACTIVE.get() is not None
