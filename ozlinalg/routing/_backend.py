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

import dataclasses
import functools

from .._emulable import original
from .._options import Options, get_options, restore_options, use_options, validate
from .._options import options as _options
from . import _state
from ._install import install_shims, installed, uninstall
from ._policy import emulates, forget_thresholds
from ._state import ACTIVE, State

__all__ = ["backend"]

_FIELDS = frozenset(f.name for f in dataclasses.fields(Options))

# Entering a block costs at most a few microseconds: ``with backend(...)`` makes a new
# instance each time (so does the decorator, per call), and validating its options
# and merging them into those in force (Options.replace) would cost several times
# that. Both depend only on their inputs, so they are kept:
#
# _PREPARED: the block's keywords -> (validated overrides, the same with the default
#   strategy "performant" added, or None where a strategy is given);
# _MERGED: (id(options in force), keywords, performant?) -> (options in force, merged,
#   State(merged)). The options in force are identified by identity, not equality:
#   equal Options may differ in which names were set explicitly. An entry holds them,
#   so their id is not reused while the entry exists.
#
# The keys carry the values' types: equal values of other types (``slices=8`` and
# ``numpy.int64(8)``) are kept apart. Keywords that cannot be hashed are validated and
# merged anew each time. Each table is emptied when full.
_PREPARED: dict = {}
_MERGED: dict = {}
_MAX_ENTRIES = 256


def _prepare(opts):
    """``(key, overrides, performant)`` of a block's keywords `opts`, validated as
    :func:`ozlinalg.options` does (raising its TypeError / ValueError); `key` is None
    where they cannot be hashed."""
    key = (tuple(opts.items()), tuple(map(type, opts.values())))
    try:
        hit = _PREPARED.get(key)
    except TypeError:
        key = hit = None
    if hit is not None:
        return key, hit[0], hit[1]
    overrides = validate(dict(opts))
    if not _FIELDS.issuperset(overrides):
        _options(**opts)  # raises the TypeError naming the unknown options
    performant = None if "strategy" in overrides else dict(overrides, strategy="performant")
    if key is not None:
        if len(_PREPARED) >= _MAX_ENTRIES:
            _PREPARED.clear()
        _PREPARED[key] = (overrides, performant)
    return key, overrides, performant


def _merge(base, overrides, key):
    """``(merged Options, its State)``: `base` with `overrides`, as ``options()`` does;
    `key`: what identifies `overrides` (None: not kept)."""
    if key is None:
        merged = base.replace(**overrides)
        return merged, State(merged)
    entry = (id(base), key)
    hit = _MERGED.get(entry)
    if hit is not None and hit[0] is base:
        return hit[1], hit[2]
    merged = base.replace(**overrides)
    state = State(merged)
    if len(_MERGED) >= _MAX_ENTRIES:
        _MERGED.clear()
    _MERGED[entry] = (base, merged, state)
    return merged, state


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
        # names and values are validated now, as options() would
        self._key, self._overrides, self._performant = _prepare(opts)
        self._opts = opts
        self._token = None
        self._opt_token = None

    def __enter__(self):
        if self._token is not None:
            raise RuntimeError("this ozlinalg.backend() instance is already active")
        install_shims()
        key = self._key
        if self._performant is not None and not _state.active():
            # no strategy given, and no block or install() to inherit one from
            merged, state = _merge(get_options(), self._performant,
                                   None if key is None else (key, "performant"))
        else:
            merged, state = _merge(get_options(), self._overrides, key)
        forget_thresholds(merged)  # kept Options: the block reads the tuning afresh
        opt_token = use_options(merged)
        try:
            self._token = ACTIVE.set(state)
        except BaseException:
            restore_options(opt_token)
            raise
        self._opt_token = opt_token
        return self

    def __exit__(self, *exc):
        ACTIVE.reset(self._token)
        self._token = None
        opt_token, self._opt_token = self._opt_token, None
        restore_options(opt_token)
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
