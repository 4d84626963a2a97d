"""The shims of the in-memory routes (NumPy, SciPy, CuPy): a shim replaces the
module attribute and hands a call to ozlinalg only when routing is active, the
arguments are routable and the strategy says so (:mod:`ozlinalg.routing._policy`);
otherwise the saved original runs, unchanged.

NEP 18 cannot intercept ``np.linalg.solve(ndarray, ndarray)``: exact ndarrays
take NumPy's C fast path and never consult ``__array_function__``; hence
patched module attributes.

What a shim does with the policy's :class:`~ozlinalg.routing._policy.Plan`: a tuned
method runs as ``options(method=...)`` around the target, and a refined solve as
``target(..., refine=True)``; the latter only where the target's signature takes
``refine`` (checked once per target function), so a tree whose ``solve`` has no
``refine=`` keeps the plain route.
"""
from __future__ import annotations

import functools
import importlib
import inspect

import numpy as np

from .._options import options as _options
from .._options import options_getter
from .._profile import profiles_getter
from . import _state
from ._policy import _BY_ID, REFINED, plan, record, refined_op, screen, thresholds
from ._state import ACTIVE, MISSING, SUSPENDED

__all__ = ["make_shim"]


@functools.cache
def accepts_refine(fn) -> bool:
    """Whether `fn` takes a ``refine`` keyword (its signature, read once)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "refine" in params


def make_shim(qualname, original, target, op):
    mod_name, fn_name = target.split(":")
    mod_cache = []

    def impl():
        if not mod_cache:
            mod_cache.append(importlib.import_module(mod_name))
        return getattr(mod_cache[0], fn_name)  # looked up per call: replaceable

    def refinable():
        return accepts_refine(impl())

    refines = REFINED.get(fn_name) is not None

    # Locals of the closure: the fast path below reads no module global but the
    # process-wide routing state, and calls no Python function of ozlinalg's.
    active_get = ACTIVE.get
    options_get = options_getter()
    profiles_get = profiles_getter()
    thresholds_get = _BY_ID.get  # thresholds(opts) without its call: opts seen before
    ndarray = np.ndarray
    suspended = SUSPENDED
    missing = MISSING

    def routed(args, kwargs, opts):
        ok, order, xp_name = screen(args, kwargs)
        if not ok:
            return original(*args, **kwargs)
        p = plan(opts, xp_name, op, order,
                 refined_op(qualname, args, kwargs) if refines else None, refinable)
        if profiles_get():
            record(qualname, p.op, order, xp_name, p.emulate, p.reason, source=p.source,
                   method=(p.method or opts.method) if p.emulate else "", refine=p.refine)
        if not p.emulate:
            return original(*args, **kwargs)
        if p.refine:
            kwargs = {**kwargs, "refine": True}
        token = ACTIVE.set(suspended)
        try:
            if p.method is None:
                return impl()(*args, **kwargs)
            with _options(method=p.method):
                return impl()(*args, **kwargs)
        finally:
            ACTIVE.reset(token)

    @functools.wraps(original)
    def shim(*args, **kwargs):
        state = active_get(_state.process)
        if state is None or state is suspended:
            return original(*args, **kwargs)
        # get_options() without its frame: the options of the context, else the
        # process-wide ones, which are state.options where routing is process-wide
        # (install() sets both together) and are not asked for where a backend()
        # block routes (it sets the context's options with its state)
        opts = options_get(state.options)
        # Fast path (the common call on the host): the op never pays on the
        # NumPy engine under these options and the first argument is an
        # ndarray (or a tuple / list starting with one: lu_solve((lu, piv), b),
        # multi_dot([a, b])), so nothing else needs looking at.
        route = thresholds_get(id(opts))
        if route is None:
            route = thresholds(opts)
        if (args and route.get(op, missing) is None and not profiles_get()
                and (not refines or (route.get("gesv_refined", missing) is None
                                     and route.get("posv_refined", missing) is None))):
            a0 = args[0]
            t = type(a0)
            if t is ndarray or ((t is tuple or t is list) and a0 and type(a0[0]) is ndarray):
                return original(*args, **kwargs)
        return routed(args, kwargs, opts)

    shim.__wrapped__ = original
    shim._ozlinalg_shim = True
    shim._ozlinalg_target = target
    shim._ozlinalg_op = op
    shim.__qualname__ = qualname
    return shim
