"""The routing policy: which calls a shim hands to ozlinalg.

A call is routable when every array argument is a plain ``numpy.ndarray`` (exact
type) or a ``cupy.ndarray`` of a dtype the emulation takes
(:func:`ozlinalg._emulable.emulable`, float16 excluded). The strategy
(``Options.strategy``) then decides: ``"eager"`` emulates every call whose matrix
order is at least ``min_size`` (LU and Cholesky based calls from
``native_order`` on), ``"performant"`` only calls whose order also reaches the
engine's measured crossover for the operation (:data:`OPS`). Every decision is
counted in :attr:`ozlinalg.Profile.routing` while a profile watches.
"""
from __future__ import annotations

import importlib
import weakref

import numpy as np

from .. import _options as _optmod
from .. import _profile
from .._emulable import emulable
from .._profile import Route
from ..engines import base as _engines
from ._state import LOCK as _LOCK
from ._state import MISSING as _MISSING

__all__ = ["OPS", "screen", "decide", "record", "declines", "emulates", "op_of"]

#: function name -> the operation whose crossover decides it under the
#: "performant" strategy (:data:`ozlinalg.engines.base.CROSSOVER_OPS`): the LU
#: family and triangular solves (the blocked TRSM of ``getrs``) count as
#: ``getrf``, the Cholesky family as ``potrf``, QR and least squares as
#: ``geqrf``, products as ``matmul``. Names missing here count as ``matmul``.
OPS = {
    **dict.fromkeys(("solve", "inv", "det", "slogdet", "lu_factor", "lu_solve", "lu",
                     "solve_triangular"), "getrf"),
    **dict.fromkeys(("cholesky", "cho_factor", "cho_solve"), "potrf"),
    **dict.fromkeys(("qr", "lstsq", "tsqr"), "geqrf"),
    "multi_dot": "matmul",
}



def op_of(function) -> str:
    """The operation of :data:`OPS` for `function` (``"module.name"`` or a bare name)."""
    return OPS.get(function.rpartition(".")[2], "matmul")


def _cupy_ndarray():
    import sys

    cp = sys.modules.get("cupy")
    return getattr(cp, "ndarray", None) if cp is not None else None


def screen(args, kwargs):
    """``(routable, order, xp_name)``: are all array arguments plain ndarrays of
    a dtype the emulation takes?

    ``order`` is the largest trailing dimension seen (for ``min_size`` and the
    crossover), ``xp_name`` the array module ("numpy" or "cupy") whose engine
    would run the call. Tuples and lists are searched one level down
    (``lu_solve((lu, piv), b)``, ``multi_dot([a, b, c])``).
    """
    cpnd = _cupy_ndarray()
    found = False
    order = 0
    xp_name = "numpy"
    stack = [(x, 0) for x in args] + [(x, 0) for x in kwargs.values()]
    while stack:
        x, depth = stack.pop()
        t = type(x)
        if t is np.ndarray or (cpnd is not None and t is cpnd):
            if not emulable(x.dtype, half=False):
                return False, 0, None
            found = True
            if t is not np.ndarray:
                xp_name = "cupy"
            if x.ndim:
                order = max(order, min(x.shape[-2:]) if x.ndim >= 2 else x.shape[0])
        elif t in (tuple, list):
            if depth == 0:
                stack.extend((y, 1) for y in x)
        elif x is None or t in (bool, int, float, str):
            continue
        elif hasattr(x, "__array_function__") or hasattr(x, "__array__") \
                or hasattr(x, "__cuda_array_interface__"):
            return False, 0, None  # another array type: its own dispatch decides
    return found, order, xp_name


#: Operations whose calls below ``Options.native_order`` run as the original function
#: under "eager": LU and Cholesky (solves, inverses, determinants, factorizations) are one
#: native LAPACK panel there whatever runs them. Not geqrf: NumPy's own lstsq (gelsd)
#: hangs on Inf / NaN where ozlinalg raises (docs/backend.md, deliberate differences).
_SMALL_NATIVE_OPS = ("getrf", "potrf")


def _limit(opts, xp_name, op):
    """The smallest order emulated for `op` on `xp_name` arrays under `opts`,
    or ``None`` (never); cached on the Options instance."""
    route = opts._route
    key = (xp_name, op)
    lim = route.get(key, _MISSING)
    if lim is not _MISSING:
        return lim
    with _LOCK:  # against a concurrent engine replacement (_forget_thresholds)
        if opts.strategy == "eager":
            lim = int(opts.min_size)
            if op in _SMALL_NATIVE_OPS:  # one native panel anyway
                lim = max(lim, int(opts.native_order))
        else:
            cross = _engine_crossover(xp_name, op)
            lim = None if cross is None else max(int(cross), int(opts.min_size))
        if not route:
            _remember_cache(opts)
        route[key] = lim
        if xp_name == "numpy":
            route[op] = lim  # the shims' fast path looks up NumPy by op alone
    return lim


#: id(Options) -> weak reference, for every Options whose ``_route`` cache
#: holds thresholds: a replaced engine (register_engine) empties them all.
_CACHES: dict = {}


def _remember_cache(opts):
    key = id(opts)
    _CACHES[key] = weakref.ref(opts, lambda _ref, key=key: _CACHES.pop(key, None))


def _forget_thresholds():
    with _LOCK:
        for ref in list(_CACHES.values()):
            opts = ref()
            if opts is not None:
                opts._route.clear()
        _CACHES.clear()


_engines._ON_REGISTER.append(_forget_thresholds)


def _engine_for(xp_name):
    xp = np if xp_name == "numpy" else importlib.import_module(xp_name)
    return _optmod.current_engine(xp)  # the engine options(engine=...) selects


def _engine_crossover(xp_name, op):
    try:
        return _engine_for(xp_name).crossover(op)
    except RuntimeError:  # no engine for these arrays: never emulate
        return None


def decide(opts, xp_name, op, order):
    """``(emulate, reason)`` for a routable call of matrix order `order`."""
    lim = _limit(opts, xp_name, op)
    if opts.strategy == "eager":
        if order >= lim:
            return True, "eager"
        if order >= opts.min_size:
            return False, f"order below native_order {lim} (one native panel)"
        return False, f"below min_size {opts.min_size}"
    if lim is None:
        return False, "no crossover (never faster)"
    if order >= lim:
        return True, f"at or above crossover {lim}"
    if order < opts.min_size:
        return False, f"below min_size {opts.min_size}"
    return False, f"below crossover {lim}"


def record(qualname, op, order, xp_name, emulate, reason):
    try:
        engine = _engine_for(xp_name).name
    except RuntimeError:
        engine = "none"
    # a profile only watches: an order it cannot count (NaN: a dask array of
    # unknown chunk sizes) is recorded as -1, never raised
    order = int(order) if order == order and abs(order) != float("inf") else -1
    _profile.record_route(Route(qualname, op, order, engine, emulate, reason))


def declines(function, reason, *, xp="numpy", op=None) -> None:
    """Count, in :attr:`ozlinalg.Profile.routing`, a call of `function` that a
    shim of the dask route (:mod:`ozlinalg.routing._dask`) hands to the original for
    `reason` (e.g. ``"unknown chunk sizes"``), with order -1."""
    op = op or op_of(function)
    if _profile._ACTIVE.get():
        record(function, op, -1, xp, False, reason)


def emulates(function, order, *, xp="numpy", op=None) -> bool:
    """Whether a routable call of `function` (``"module.name"``) on a matrix of
    order `order` is emulated under the options in force: the strategy's
    decision, counted in :attr:`ozlinalg.Profile.routing`.

    For shims of their own (the dask route's, another library's): call it
    once the call is known to be routable. `op` defaults to :data:`OPS` of the function's
    name; `xp` names the array module whose engine would run it.
    """
    op = op or op_of(function)
    emulate, reason = decide(_optmod.get_options(), xp, op, order)
    if _profile._ACTIVE.get():
        record(function, op, order, xp, emulate, reason)
    return emulate
