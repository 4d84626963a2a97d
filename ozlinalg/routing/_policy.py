"""The routing policy: which calls a shim hands to ozlinalg.

A call is routable when every array argument is a plain ``numpy.ndarray`` (exact
type) or a ``cupy.ndarray`` of a dtype the emulation takes
(:func:`ozlinalg._emulable.emulable`, float16 excluded). The strategy
(``Options.strategy``) then decides: ``"eager"`` emulates every call whose matrix
order is at least ``min_size`` (LU and Cholesky based calls from
``native_order`` on), ``"performant"`` only calls whose order also reaches the
engine's crossover for the operation (:data:`OPS`): the tuning cache of ``python
-m ozlinalg tune``, the engine's constants, or the tuning model
(:meth:`ozlinalg.engines.base.Engine.tuned`, docs/tuning.md). Under "performant"
an emulated call also runs with the method the tuning found fastest (unless
the options name a method or ask for ``accuracy="faithful"``), and a ``solve``
goes to the refined solve (``refine=True``) where the tuning says
``gesv_refined`` / ``posv_refined`` pays (:func:`plan`). Every decision is
counted in :attr:`ozlinalg.Profile.routing` while a profile watches, with the
source of its numbers.
"""
from __future__ import annotations

import functools
import importlib
import weakref
from typing import NamedTuple

import numpy as np

from .. import _options as _optmod
from .._emulable import emulable
from .._profile import Route, profiles_getter, record_route
from .._tuning import REFINED_OPS, Tuned
from ..engines import base as _engines
from ._state import LOCK as _LOCK
from ._state import MISSING as _MISSING

__all__ = ["OPS", "REFINED", "Plan", "screen", "decide", "plan", "record", "declines",
           "emulates", "op_of", "refined_op", "thresholds", "forget_thresholds"]

#: function name -> the operation whose crossover decides it under the
#: "performant" strategy (:data:`ozlinalg.engines.base.CROSSOVER_OPS`): the LU
#: family and triangular solves (the blocked TRSM of ``getrs``) count as
#: ``getrf``, the Cholesky family as ``potrf``, QR and least squares as
#: ``geqrf``, the symmetric / Hermitian eigensolvers as ``syevd`` (LAPACK's
#: driver their native baseline runs), the SVD and what is computed from it
#: (pseudo-inverse, rank, polar decomposition) as ``gesdd``, products as
#: ``matmul``. Names missing here count as ``matmul``.
OPS = {
    **dict.fromkeys(("solve", "inv", "det", "slogdet", "lu_factor", "lu_solve", "lu",
                     "solve_triangular"), "getrf"),
    **dict.fromkeys(("cholesky", "cho_factor", "cho_solve"), "potrf"),
    **dict.fromkeys(("qr", "lstsq", "tsqr"), "geqrf"),
    **dict.fromkeys(("eigh", "eigvalsh"), "syevd"),
    **dict.fromkeys(("svd", "svdvals", "pinv", "matrix_rank", "polar"), "gesdd"),
    "multi_dot": "matmul",
}

#: function name -> the refined solve tried first under "performant": where the
#: tuning says it pays at the call's order, the call runs as ``solve(..., refine=True)``
#: (``posv_refined`` for SciPy's ``assume_a="pos"``); elsewhere :data:`OPS` decides.
REFINED = {"solve": "gesv_refined"}
_POS = ("pos", "positive definite")
_GENERAL = (None, "gen", "general", "sym", "symmetric", "her", "hermitian")
_TUNED = "tuned"  # thresholds(opts)[(_TUNED, xp_name, op)]: the Tuned behind a threshold
_profiles = profiles_getter()


def refined_op(function, args=(), kwargs=None):
    """The refined solve's operation of a call of `function` (``"module.name"``), or None."""
    op = REFINED.get(function.rpartition(".")[2])
    if op is not None and function.startswith(("scipy.", "cupyx.scipy.")):
        assume = (kwargs or {}).get("assume_a", args[6] if len(args) > 6 else None)
        if assume in _POS:
            return "posv_refined"
        if assume not in _GENERAL:  # banded, triangular, diagonal: no refined solve
            return None
    return op


class Plan(NamedTuple):
    """The decision on one routable call (:func:`plan`)."""

    emulate: bool
    reason: str
    op: str  # the operation that decided (a refined solve's when refine)
    method: str | None  # the method to run it with where it is not the options' one
    refine: bool  # run the target with refine=True
    source: str  # where the threshold came from (Tuned.source; "eager")


def op_of(function) -> str:
    """The operation of :data:`OPS` for `function` (``"module.name"`` or a bare name)."""
    return OPS.get(function.rpartition(".")[2], "matmul")


def _cupy_ndarray():
    import sys

    cp = sys.modules.get("cupy")
    return getattr(cp, "ndarray", None) if cp is not None else None


def screen(args, kwargs):
    """``(routable, order, xp_name)``: are all array arguments plain ndarrays (or
    ``np.matrix``, whose results the targets return in NumPy's and SciPy's types)
    of a dtype the emulation takes?

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
        if t is np.ndarray or t is np.matrix or (cpnd is not None and t is cpnd):
            if not emulable(x.dtype, half=False):
                return False, 0, None
            found = True
            if t is cpnd:
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
#: syevd / gesdd: their refinement is about ten emulated products at every order, each
#: with its fixed per-call cost (milliseconds on the SGEMM engine), for matrices whose
#: LAPACK residual is already a few ulps; client suites make thousands of such calls.
_SMALL_NATIVE_OPS = ("getrf", "potrf", "syevd", "gesdd")


def _limit(opts, xp_name, op):
    """The smallest order emulated for `op` on `xp_name` arrays under `opts`,
    or ``None`` (never); cached in :func:`thresholds`."""
    route = _BY_ID.get(id(opts))  # thresholds(opts), inlined: once per routed call
    if route is None:
        route = _attach(opts)
    key = (xp_name, op)
    lim = route.get(key, _MISSING)
    if lim is not _MISSING:
        return lim
    with _LOCK:  # against a concurrent engine replacement (_forget_all, forget_thresholds)
        if opts.strategy == "eager":
            lim = int(opts.call_min_order)
            if op in _SMALL_NATIVE_OPS:  # see _SMALL_NATIVE_OPS
                lim = max(lim, int(opts.native_order))
            tuned = Tuned(lim, None, "eager")
        else:
            tuned = _engine_tuned(xp_name, op)
            cross = tuned.order
            lim = None if cross is None else max(int(cross), int(opts.call_min_order))
        route[(_TUNED, xp_name, op)] = tuned
        route[key] = lim
        if xp_name == "numpy":
            route[op] = lim  # the shims' fast path looks up NumPy by op alone
    return lim


# The thresholds' caches, one dict per Options instance:
# {(xp_name, op): order or None, (_TUNED, xp_name, op): Tuned, op: NumPy's order}.
# A threshold depends on the Options' fields and on the engines and their tuning (the
# tuning cache file and the environment, read when it is computed): an engine
# registered empties every dict (_forget_all), and each backend() entry empties
# its Options' (forget_thresholds), so a block reads the tuning as it is when it
# starts, as it would with Options of its own. Equal Options do not share a dict for
# that reason: an options() block made later must not see what an earlier one read.
# The shims look their dict up on every call, so the table is keyed by id(Options)
# (a dict look-up; hashing an Options would cost more than the rest of their fast
# path); the weak reference in _REFS drops an entry as its Options goes, before its
# id can be reused.
_BY_ID: dict = {}
_REFS: dict = {}


def thresholds(opts) -> dict:
    """The routing thresholds cached for the Options `opts`: ``{(xp_name, op): order
    or None, ...}``, filled as calls are decided; the shims read
    ``thresholds(opts).get(op)`` for NumPy's."""
    route = _BY_ID.get(id(opts))
    return route if route is not None else _attach(opts)


def forget_thresholds(opts) -> None:
    """Empty the thresholds cached for `opts`: the next call reads the engines' tuning
    again (a ``backend()`` block entered with Options kept from an earlier one)."""
    route = _BY_ID.get(id(opts))
    if route:
        with _LOCK:  # never half of what _limit writes under it
            route.clear()


def _attach(opts) -> dict:
    key = id(opts)
    with _LOCK:
        route = _BY_ID.get(key)
        if route is None:
            route = _BY_ID[key] = {}
            _REFS[key] = weakref.ref(opts, functools.partial(_detach, key))
    return route


def _detach(key, _ref):
    # runs as the Options is freed, maybe inside a collection triggered while this
    # thread holds _LOCK: no lock here (each pop is atomic)
    _BY_ID.pop(key, None)
    _REFS.pop(key, None)


def _forget_all():
    """Empty every thresholds' dict (an engine was registered: its facts changed)."""
    with _LOCK:
        for route in list(_BY_ID.values()):
            route.clear()


_engines.on_register(_forget_all)


def _engine_for(xp_name):
    xp = np if xp_name == "numpy" else importlib.import_module(xp_name)
    return _optmod.current_engine(xp)  # the engine options(engine=...) selects


def _engine_tuned(xp_name, op):
    try:
        return _engine_for(xp_name).tuned(op)
    except RuntimeError:  # no engine for these arrays: never emulate
        return Tuned(None, None, "none (no engine)")


def decide(opts, xp_name, op, order):
    """``(emulate, reason)`` for a routable call of matrix order `order`."""
    lim = _limit(opts, xp_name, op)
    if opts.strategy == "eager":
        if order >= lim:
            return True, "eager"
        if order >= opts.call_min_order:
            why = "one native panel" if op in ("getrf", "potrf") else "per-product cost"
            return False, f"order below native_order {lim} ({why})"
        return False, _below_min_order(opts)
    if lim is None:
        return False, "no crossover (never faster)"
    if order >= lim:
        return True, f"at or above crossover {lim}"
    if order < opts.call_min_order:
        return False, _below_min_order(opts)
    return False, f"below crossover {lim}"


def _below_min_order(opts):
    """The reason of a call below the options' call threshold, by the option's name."""
    if opts.min_order is None:
        return f"below min_size {opts.min_size}"
    return f"below min_order {opts.min_order}"


def _method(opts, tuned):
    """The tuned method to run an emulated call with, or None (the options' own): only
    under "performant", at DGEMM accuracy, where the options name no method."""
    if (tuned is None or tuned.method is None or opts.strategy != "performant"
            or opts.accuracy != "dgemm" or "method" in _optmod.explicit_names(opts)
            or tuned.method == opts.method):
        return None
    return tuned.method


def plan(opts, xp_name, op, order, refined=None, refinable=None) -> Plan:
    """The :class:`Plan` of a routable call of order `order` whose operation is `op`.

    `refined` (:func:`refined_op`): under "performant", the refined solve is chosen
    where its crossover is reached and ``refinable()`` (the target takes
    ``refine=``; None: it does) says it can run; otherwise :func:`decide` on `op`.
    """
    if refined is not None and opts.strategy == "performant":
        lims = {r: _limit(opts, xp_name, r) for r in REFINED_OPS}  # the shims' fast path
        lim = lims[refined]
        if lim is not None and order >= lim and (refinable is None or refinable()):
            # (.get: an engine replaced meanwhile empties the cache, _forget_all)
            tuned = (_BY_ID.get(id(opts), {}).get((_TUNED, xp_name, refined))
                     or Tuned(lim, None, ""))
            return Plan(True, f"at or above crossover {lim} (refined solve)", refined,
                        _method(opts, tuned), True, tuned.source)
    emulate, reason = decide(opts, xp_name, op, order)
    tuned = _BY_ID.get(id(opts), {}).get((_TUNED, xp_name, op))  # _limit attached opts
    return Plan(emulate, reason, op, _method(opts, tuned) if emulate else None, False,
                tuned.source if tuned is not None else "")


def record(qualname, op, order, xp_name, emulate, reason, *, source="", method="",
           refine=False):
    try:
        engine = _engine_for(xp_name).name
    except RuntimeError:
        engine = "none"
    # a profile only watches: an order it cannot count (NaN: a dask array of
    # unknown chunk sizes) is recorded as -1, never raised
    order = int(order) if order == order and abs(order) != float("inf") else -1
    record_route(Route(qualname, op, order, engine, emulate, reason, source,
                                method or "", bool(refine)))


def declines(function, reason, *, xp="numpy", op=None) -> None:
    """Count, in :attr:`ozlinalg.Profile.routing`, a call of `function` that a
    shim of the dask route (:mod:`ozlinalg.routing._dask`) hands to the original for
    `reason` (e.g. ``"unknown chunk sizes"``), with order -1."""
    op = op or op_of(function)
    if _profiles():
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
    opts = _optmod.get_options()
    p = plan(opts, xp, op, order)
    if _profiles():
        record(function, op, order, xp, p.emulate, p.reason, source=p.source,
               method=(p.method or opts.method) if p.emulate else "")
    return p.emulate
