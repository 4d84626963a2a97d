"""``with ozlinalg.backend():``: route ``numpy.linalg`` / ``scipy.linalg`` (and
``cupy.linalg`` / ``cupyx.scipy.linalg``, and dask's linear algebra) calls to the
emulation inside a block.

A shim routes a call to ozlinalg only when

* routing is active: a :class:`backend` block in the *current context* (a
  :class:`contextvars.ContextVar`, set on enter and reset with its token on
  exit, like :func:`numpy.errstate`), or else the process-wide state of
  :func:`~ozlinalg.install` (a module global: every thread and task whose context has
  no block of its own, including threads started later, sees it);
* every array argument is a plain ``numpy.ndarray`` (exact type; or an
  ``np.matrix``, whose results come back in the originals' types) or a
  ``cupy.ndarray`` of a dtype the emulation takes (float64, float32,
  integers, bool, complex64, complex128; float16, long double and others
  fall through);
* the strategy says so (``Options.strategy``, :mod:`ozlinalg.routing._policy`);
  the decision is counted in :attr:`ozlinalg.Profile.routing`;
* the call is not already inside an ozlinalg routine (re-entrancy guard:
  ozlinalg's own native panels call ``scipy.linalg`` and must stay native).

Otherwise the saved original runs, unchanged: other subclasses and array
types keep their own ``__array_function__`` dispatch, and functions ozlinalg
lacks are never patched.
"""
from __future__ import annotations

import functools

from .._emulable import original
from .._options import options as _options
from . import _state
from ._install import install_shims, installed, uninstall
from ._policy import emulates
from ._state import ACTIVE, State

__all__ = ["backend"]


class backend:
    """Route ``numpy.linalg`` / ``scipy.linalg`` (/ CuPy) calls to ozlinalg inside a block.

    A context manager and a decorator. Inside the block, calls such as
    ``np.linalg.solve(a, b)`` or ``scipy.linalg.lu_factor(a)`` on plain real
    or complex ndarrays are screened: by default ("performant") they run on the
    emulated DGEMM (:mod:`ozlinalg.numpy_linalg`, :mod:`ozlinalg.linalg`) only
    where the engine's measured crossover says emulation is at least as fast
    as native FP64, and natively otherwise; ``strategy="eager"`` emulates every
    call of order at least ``min_size``. Everything else runs the original.

    Parameters
    ----------
    **opts
        Options in force inside the block, as :func:`ozlinalg.options`:
        ``strategy`` (``"performant"`` unless given or inherited from an
        enclosing block or :func:`install`; ``"eager"`` for tests and accuracy
        studies), ``method``, ``slices``, ``min_size`` (calls whose matrix order
        is below it run natively; inside ozlinalg it is the order below which
        a factorization runs in native LAPACK), ``max_slices``,
        ``memory_limit``, ... Unset options are inherited from the enclosing
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
    thread started inside a block starts with an empty context (not routed,
    unless :func:`install` routes the whole process) unless it is given
    ``contextvars.copy_context().run``. Names bound before the shims were
    installed (``from scipy.linalg import cholesky`` before the first block)
    are not routed: use :func:`install` at program start or ``python -m
    ozlinalg run``. See docs/backend.md.

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> a = np.array([[4., 1.], [1., 3.]]); b = np.array([1., 2.])
    >>> with ozlinalg.backend(strategy="eager", native_order=0), ozlinalg.profile() as prof:
    ...     x = np.linalg.solve(a, b)    # native_order=0: even order 2 is emulated
    >>> prof.emulated_gemm_calls > 0
    True
    >>> with ozlinalg.backend(), ozlinalg.profile() as prof:  # performant: 2x2 never pays
    ...     x = np.linalg.solve(a, b)
    >>> prof.routed_native, prof.emulated_gemm_calls
    (1, 0)
    """

    def __init__(self, **opts):
        _options(**opts)  # validate names and values now
        self._opts = opts
        self._token = None
        self._opt_cm = None

    def __enter__(self):
        if self._token is not None:
            raise RuntimeError("this ozlinalg.backend() instance is already active")
        install_shims()
        opts = self._opts
        if "strategy" not in opts and not backend.active():
            opts = dict(opts, strategy="performant")
        opt_cm = _options(**opts)
        merged = opt_cm.__enter__()
        try:
            self._token = ACTIVE.set(State(merged))
        except BaseException:
            opt_cm.__exit__(None, None, None)
            raise
        self._opt_cm = opt_cm
        return self

    def __exit__(self, *exc):
        ACTIVE.reset(self._token)
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
    original = staticmethod(original)
    emulates = staticmethod(emulates)

    @staticmethod
    def active() -> bool:
        """Whether routing is active in the current context (a block, or
        :func:`install`)."""
        return _state.active()
