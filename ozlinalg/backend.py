"""``with ozlinalg.backend():`` and ``ozlinalg.install()``: route existing
``numpy.linalg`` / ``scipy.linalg`` (and ``cupy.linalg`` / ``cupyx.scipy.linalg``)
calls to the emulation.

NEP 18 cannot intercept ``np.linalg.solve(ndarray, ndarray)``: exact ndarrays
take NumPy's C fast path and never consult ``__array_function__``. So shims are
installed ONCE (under a lock) on the module attributes listed in
:data:`ROUTES`, by the first :func:`backend` block or by :func:`install`. A
shim routes a call to ozlinalg only when

* routing is active: a :func:`backend` block in the *current context* (a
  :class:`contextvars.ContextVar`, set on enter and reset with its token on
  exit, like :func:`numpy.errstate`), or else the process-wide state of
  :func:`install` (a module global: every thread and task whose context has
  no block of its own, including threads started later, sees it);
* every array argument is a plain ``numpy.ndarray`` (exact type) or a
  ``cupy.ndarray`` of a dtype the emulation takes (float64, float32,
  integers, bool, complex64, complex128; float16, long double and others
  fall through);
* the strategy says so (``Options.strategy``): ``"eager"`` emulates every call
  whose matrix order is at least ``min_size`` (LU and Cholesky based calls from
  ``native_order``, 16, on: below it they are one native LAPACK panel whatever runs
  them, so the original function runs);
  ``"performant"`` (the default of ``backend()`` and ``install()``) only calls
  whose order also reaches the engine's measured crossover for the operation
  (:meth:`ozlinalg.engines.Engine.crossover`, operation from :data:`OPS`);
  the decision is counted in :attr:`ozlinalg.Profile.routing`;
* the call is not already inside an ozlinalg routine (re-entrancy guard:
  ozlinalg's own native panels call ``scipy.linalg`` and must stay native).

Otherwise the saved original runs, unchanged: subclasses and other array
types keep their own ``__array_function__`` dispatch, and functions ozlinalg
lacks are never patched. Each shim carries ``__wrapped__`` (the original);
:func:`installed` lists the patched names.

Installing before the user's imports is what makes names bound at import
(``from scipy.linalg import cholesky``) routable: they are bound to the shim.
The launcher ``python -m ozlinalg run script.py`` (:mod:`ozlinalg._launcher`) does
that for a whole program.
"""
from __future__ import annotations

import contextvars
import functools
import importlib
import sys
import threading
import weakref

import numpy as np

from . import _import_hook, _profile
from . import _options as _optmod
from ._emulable import emulable, original
from ._options import options as _options
from ._profile import Route
from .engines import base as _engines

__all__ = ["backend", "install", "uninstall", "installed", "original", "emulates", "ROUTES",
           "OPS"]

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


class _State:
    """What routing is active with: the options of the block (or of install())."""

    __slots__ = ("options", "process_wide")

    def __init__(self, options, process_wide=False):
        self.options = options
        self.process_wide = process_wide


#: Set inside an ozlinalg routine that a shim called: nested calls run natively.
_SUSPENDED = _State(None)
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("ozlinalg_backend", default=None)
#: The state of install(): what a context without a backend() block sees.
_process_state: _State | None = None
_LOCK = threading.Lock()
_INSTALLED: dict = {}  # "module.name" -> (module, name, original)
_MISSING = object()


# --------------------------------------------------------------------------
# argument screening

def _cupy_ndarray():
    import sys

    cp = sys.modules.get("cupy")
    return getattr(cp, "ndarray", None) if cp is not None else None


def _screen(args, kwargs):
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


# --------------------------------------------------------------------------
# the decision

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
    return _engines.get_engine(xp)


def _engine_crossover(xp_name, op):
    try:
        return _engine_for(xp_name).crossover(op)
    except RuntimeError:  # no engine for these arrays: never emulate
        return None


def _decide(opts, xp_name, op, order):
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


def _record(qualname, op, order, xp_name, emulate, reason):
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
    shim outside this module (the dask route) hands to the original for
    `reason` (e.g. ``"unknown chunk sizes"``), with order -1."""
    op = op or OPS.get(function.rpartition(".")[2], "matmul")
    if _profile._ACTIVE.get():
        _record(function, op, -1, xp, False, reason)


def emulates(function, order, *, xp="numpy", op=None) -> bool:
    """Whether a routable call of `function` (``"module.name"``) on a matrix of
    order `order` is emulated under the options in force: the strategy's
    decision, counted in :attr:`ozlinalg.Profile.routing`.

    For shims outside this module (the dask route): call it once the call is
    known to be routable. `op` defaults to :data:`OPS` of the function's
    name; `xp` names the array module whose engine would run it.
    """
    op = op or OPS.get(function.rpartition(".")[2], "matmul")
    emulate, reason = _decide(_optmod.get_options(), xp, op, order)
    if _profile._ACTIVE.get():
        _record(function, op, order, xp, emulate, reason)
    return emulate


def _make_shim(qualname, original, target, op):
    mod_name, fn_name = target.split(":")
    impl_cache = []

    def impl():
        if not impl_cache:
            impl_cache.append(getattr(importlib.import_module(mod_name), fn_name))
        return impl_cache[0]

    # Locals of the closure: the fast path below reads no module globals but
    # the two process-wide defaults.
    active_get = _ACTIVE.get
    options_get = _optmod._OPTIONS.get
    profiles_get = _profile._ACTIVE.get
    ndarray = np.ndarray
    suspended = _SUSPENDED
    missing = _MISSING

    def routed(args, kwargs, opts):
        ok, order, xp_name = _screen(args, kwargs)
        if not ok:
            return original(*args, **kwargs)
        emulate, reason = _decide(opts, xp_name, op, order)
        if profiles_get():
            _record(qualname, op, order, xp_name, emulate, reason)
        if not emulate:
            return original(*args, **kwargs)
        token = _ACTIVE.set(suspended)
        try:
            return impl()(*args, **kwargs)
        finally:
            _ACTIVE.reset(token)

    @functools.wraps(original)
    def shim(*args, **kwargs):
        state = active_get(_process_state)
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


# --------------------------------------------------------------------------
# installing the shims

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
                setattr(mod, name, _make_shim(key, original, target, OPS.get(name, "matmul")))
                _INSTALLED[key] = (mod, name, original)
        top = sys.modules.get("dask.array")   # dask's linalg and `@` (dask/_route.py)
        if top is None:  # dask imported later (a script importing it after install()
            # or its launcher): a post-import hook installs the routes as it is imported
            _import_hook.add("dask.array", _on_dask_import)
        elif getattr(getattr(top, "__spec__", None), "_initializing", False):
            _after_import_elsewhere()
        else:
            from .dask._route import install as install_dask

            install_dask(_INSTALLED)


def _after_import_elsewhere():
    """Another thread is importing dask.array right now, begun before any hook
    was there: waiting for it here, under the registry's lock, could deadlock
    with that import, so a helper thread waits for the import to finish (the
    import system's module lock) and installs the routes then."""
    def finish():
        try:
            importlib.import_module("dask.array")
        except Exception:  # that import failed: nothing to route
            return
        _on_dask_import(None)

    threading.Thread(target=finish, name="ozlinalg-dask-routes", daemon=True).start()


def _on_dask_import(module):
    """Post-import hook of ``dask.array``: install its routes (see :func:`_install`)."""
    from .dask._route import install as install_dask

    with _LOCK:
        if _import_hook.active("dask.array") or module is None:
            install_dask(_INSTALLED, importing=True)


def installed() -> list:
    """Names of the patched functions (``"numpy.linalg.solve"``, ...), sorted."""
    with _LOCK:
        return sorted(_INSTALLED)


def install(**opts):
    """Route ``numpy.linalg`` / ``scipy.linalg`` calls for the whole program.

    Call it at program start, before the modules that use NumPy/SciPy are
    imported: it installs the shims on the module attributes, so a later
    ``from scipy.linalg import cholesky`` binds the shim, and it makes routing
    active process-wide, as if the whole program, every thread included, ran
    inside ``with ozlinalg.backend(**opts):``. ``python -m ozlinalg run
    script.py`` does this for a script. Calling it again replaces the options.

    Parameters
    ----------
    **opts
        Options as for :func:`ozlinalg.options`; ``strategy`` defaults to
        ``"performant"`` (emulate only where the engine's crossover says it
        pays). They become the process-wide defaults: every context without
        an :func:`ozlinalg.options` or :func:`backend` block of its own,
        including threads started later, sees them; such blocks still
        override them locally.

    Returns
    -------
    Options
        The process-wide options now in force.

    See Also
    --------
    uninstall : the inverse.
    backend : the same routing inside a block.

    Notes
    -----
    Routing state lives in two places: a :class:`contextvars.ContextVar` set
    by :func:`backend` blocks (thread- and task-local), and a module global
    set here, which a shim consults when its context has no value. A new
    thread starts with an empty context, so it sees the process-wide state:
    that is how threads started later are routed. The options work the same
    way (:func:`ozlinalg.get_options` falls back to the process-wide options).

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> _ = ozlinalg.install(strategy="eager", native_order=0)
    >>> from numpy.linalg import solve     # bound after install: the shim
    >>> with ozlinalg.profile() as prof:
    ...     x = solve(np.eye(3) * 2, np.ones(3))
    >>> prof.routed_emulated
    1
    >>> ozlinalg.uninstall()
    """
    global _process_state
    opts.setdefault("strategy", "performant")
    merged = _optmod._DEFAULTS.replace(**_optmod.validate(dict(opts)))
    _install()
    with _LOCK:
        _optmod.set_process_options(merged)
        _process_state = _State(merged, process_wide=True)
    return merged


def uninstall() -> None:
    """Undo :func:`install` and restore the original functions.

    Routing stops process-wide, the process-wide options return to the library
    defaults, and the module attributes get their original functions back.
    Names bound to a shim earlier keep it; a shim with no routing active calls
    the original. Safe only when no other thread is inside a :func:`backend`
    block; the next block (or :func:`install`) installs the shims again.
    """
    global _process_state
    with _LOCK:
        _process_state = None
        _optmod.set_process_options(None)
        _import_hook.remove("dask.array")
        for mod, name, original in _INSTALLED.values():
            if getattr(getattr(mod, name, None), "_ozlinalg_shim", False):
                setattr(mod, name, original)
        _INSTALLED.clear()


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
        _install()
        opts = self._opts
        if "strategy" not in opts and not backend.active():
            opts = dict(opts, strategy="performant")
        opt_cm = _options(**opts)
        merged = opt_cm.__enter__()
        try:
            self._token = _ACTIVE.set(_State(merged))
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
    original = staticmethod(original)
    emulates = staticmethod(emulates)

    @staticmethod
    def active() -> bool:
        """Whether routing is active in the current context (a block, or
        :func:`install`)."""
        state = _ACTIVE.get(_process_state)
        return state is not None and state is not _SUSPENDED
