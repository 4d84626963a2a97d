"""The shims of the in-memory routes (NumPy, SciPy, CuPy): a shim replaces the
module attribute and hands a call to ozlinalg only when routing is active, the
arguments are routable and the strategy says so (:mod:`ozlinalg.routing._policy`);
otherwise the saved original runs, unchanged.

NEP 18 cannot intercept ``np.linalg.solve(ndarray, ndarray)``: exact ndarrays
take NumPy's C fast path and never consult ``__array_function__``; hence
patched module attributes.
"""
from __future__ import annotations

import functools
import importlib

import numpy as np

from .. import _options as _optmod
from .. import _profile
from . import _state
from ._policy import decide, record, screen
from ._state import ACTIVE, MISSING, SUSPENDED

__all__ = ["make_shim"]


def make_shim(qualname, original, target, op):
    mod_name, fn_name = target.split(":")
    impl_cache = []

    def impl():
        if not impl_cache:
            impl_cache.append(getattr(importlib.import_module(mod_name), fn_name))
        return impl_cache[0]

    # Locals of the closure: the fast path below reads no module globals but
    # the two process-wide defaults (the routing state and the options).
    active_get = ACTIVE.get
    options_get = _optmod._OPTIONS.get
    profiles_get = _profile._ACTIVE.get
    ndarray = np.ndarray
    suspended = SUSPENDED
    missing = MISSING

    def routed(args, kwargs, opts):
        ok, order, xp_name = screen(args, kwargs)
        if not ok:
            return original(*args, **kwargs)
        emulate, reason = decide(opts, xp_name, op, order)
        if profiles_get():
            record(qualname, op, order, xp_name, emulate, reason)
        if not emulate:
            return original(*args, **kwargs)
        token = ACTIVE.set(suspended)
        try:
            return impl()(*args, **kwargs)
        finally:
            ACTIVE.reset(token)

    @functools.wraps(original)
    def shim(*args, **kwargs):
        state = active_get(_state.process)
        if state is None or state is suspended:
            return original(*args, **kwargs)
        opts = options_get(_optmod._process_options)
        # Fast path (the common call on the host): the op never pays on the
        # NumPy engine under these options and the first argument is an
        # ndarray (or a tuple / list starting with one: lu_solve((lu, piv), b),
        # multi_dot([a, b])), so nothing else needs looking at.
        if args and opts._route.get(op, missing) is None and not profiles_get():
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
