"""Existing dask code, one change: ``with ozlinalg.backend():`` around the code
that builds the graph.

Inside a backend block, :func:`ozlinalg.backend` (and :func:`ozlinalg.install`)
also patches, once, the dask functions registered here (with
:func:`~ozlinalg.routing._registry.implements`, in the one registry
:data:`ozlinalg.routing.ROUTES`): at once when dask.array is imported, else when
it is first imported (a post-import hook, :mod:`ozlinalg.routing._import_hook`).
A patched function builds ozlinalg's graph (:mod:`ozlinalg.dask`) when

* a backend block is active in the current context (graph construction runs
  in the caller's thread, so the ContextVar is visible there; the options in
  force are captured into the tasks, which is what makes it safe for the
  workers, which never see the context);
* every array argument is a dask array with NumPy chunks (or a NumPy
  array), or every one a dask array with CuPy chunks (or a CuPy array), of a
  dtype the emulation takes (``@`` / matmul: float32/64, complex64/128 only,
  so integer products stay exact integers as in NumPy); with CuPy chunks the
  block products run on the GPU engine of the worker holding the blocks;
* the backend's strategy selects it (:func:`ozlinalg.backend.emulates`: the
  matrix order is at least the block's ``min_size`` and, under the default
  "performant" strategy, the engine's crossover for the operation);

and otherwise calls dask's original (with routing suspended while it runs;
arrays of unknown chunk sizes and block structures dask rejects go there
too, the reason counted in ``profile()``). Results keep dask's conventions (what
dask's own function returns: ``lu`` gives ``p, l, u``, ``qr`` the reduced
``q, r``, ``lstsq`` its four arrays, ``@`` NumPy's result dtype), dtypes
included (dask's, read from its own function on 2 x 2 stand-ins: they differ from
SciPy's, which ``ozlinalg.linalg`` follows).

Why this route and not the others the issue names: Dask's array-backend
entry points (``dask.config.set({"array.backend": ...})``, ``to_backend``)
choose how chunks are CREATED (``da.ones``, ``da.random``); ``da.linalg.solve``
and ``@`` build the same graph whatever the backend. A chunk conversion to an
emulating chunk type would run dask's own graphs with emulated block
products, but dask's ``lu`` pivots only inside diagonal blocks (not partial
pivoting across block rows), its scipy calls on blocks (``lu``,
``cholesky``, ``solve_triangular``) would stay native, and chunks of a foreign
type leak into every result. The ``with`` block replaces the whole graph by
ozlinalg's (real partial pivoting, readable task names, options in every
task) and changes nothing else: the arrays keep their chunk type (NumPy, or
CuPy on GPU workers).
"""
from __future__ import annotations

import functools
import importlib
import warnings

import numpy as np

from .._array import is_cupy_array, is_dask_collection
from .._emulable import emulable
from . import _policy, _state
from ._registry import ROUTES, implements, is_adapter

__all__ = ["install"]


def _ozd():
    from .. import dask as ozd  # imports dask: only once a dask function is called

    return ozd


def is_dask_array(x) -> bool:
    """True for a ``dask.array.Array`` (checked without importing dask)."""
    return is_dask_collection(x) and hasattr(x, "chunks")


# Dask's own functions reject some block structures that ozlinalg's graphs
# rechunk and factor (chunks of several sizes, non-square chunks, QR over
# blocks in both dimensions). Under the backend a call behaves as it does
# without it: those calls go to dask's original, which raises its own error.

def _uniform_square(a) -> bool:
    """What ``dask.array.linalg.lu`` / ``cholesky`` accept: a square 2-D
    array whose chunks all have one size."""
    return (a.ndim == 2 and a.shape[0] == a.shape[1]
            and len(set(a.chunks[0] + a.chunks[1])) == 1)


def _both_ways(a) -> bool:
    """Whether ``a`` is chunked along both dimensions (dask's ``qr``:
    NotImplementedError)."""
    return a.ndim == 2 and a.numblocks[0] > 1 and a.numblocks[1] > 1


_REJECTED = "dask rejects this block structure"


def _checked(check):
    """Attach ``check`` (the adapter's signature; returns a reason, or None
    when dask takes the arguments) to an adapter: the shim runs it before the
    strategy's decision, so a call handed back to dask is counted in
    ``profile()`` with that reason, not as emulated."""
    def attach(adapter):
        adapter.declines = check
        return adapter
    return attach


def _square_check(a, *args, **kwargs):
    return None if _uniform_square(a) else _REJECTED


def _qr_check(a, *args, **kwargs):
    return _REJECTED if a.ndim != 2 or _both_ways(a) else None


def _solve_check(a, b, sym_pos=None, assume_a="gen"):
    if not _uniform_square(a):
        return _REJECTED
    if (assume_a == "pos" or sym_pos) and (b.ndim not in (1, 2) or b.chunks[0] != a.chunks[1]):
        return _REJECTED   # dask's solve_triangular(l, b) needs b's row chunks to match
    return None


def _triangular_check(a, b, lower=False):
    if (a.ndim != 2 or b.ndim not in (1, 2) or a.shape[1] != b.shape[0]
            or a.chunks[1] != b.chunks[0]):
        return _REJECTED
    return None


@implements("dask.array.linalg.solve")
@_checked(_solve_check)
def _solve(a, b, sym_pos=None, assume_a="gen"):
    if sym_pos is not None:
        warnings.warn("The sym_pos keyword is deprecated and should be replaced by using "
                      "``assume_a = 'pos'``.``sym_pos`` will be removed in a future version.",
                      category=FutureWarning, stacklevel=3)
        if sym_pos:
            assume_a = "pos"
    if assume_a not in ("gen", "pos"):
        return None
    return _ozd().solve(a, b, assume_a=assume_a, check_finite=False)


@implements("dask.array.linalg.lu")
@_checked(_square_check)
def _lu(a):
    return _ozd().lu(a, check_finite=False)


@implements("dask.array.linalg.cholesky")
@_checked(_square_check)
def _cholesky(a, lower=False):
    return _ozd().cholesky(a, lower=lower, check_finite=False)


@implements("dask.array.linalg.qr")
@_checked(_qr_check)
def _qr(a):
    q, r = _ozd().qr(a, mode="economic", check_finite=False)
    if a.numblocks[0] == 1 and r.chunks[1] != a.chunks[1]:
        # short and fat: dask's r keeps the column chunks of ``a`` (ozlinalg's
        # Householder graph works on square blocks)
        r = r.rechunk((r.chunks[0], a.chunks[1]))
    return q, r


@implements("dask.array.linalg.tsqr")
def _tsqr(data, compute_svd=False, _max_vchunk_size=None):
    if compute_svd or data.ndim != 2 or data.numblocks[1] != 1:
        return None
    return _ozd().qr(data, mode="economic", check_finite=False)


@implements("dask.array.linalg.solve_triangular")
@_checked(_triangular_check)
def _solve_triangular(a, b, lower=False):
    return _ozd().solve_triangular(a, b, lower=lower, check_finite=False)


@implements("dask.array.linalg.inv")
@_checked(_square_check)
def _inv(a):
    return _ozd().inv(a, check_finite=False)


@implements("dask.array.linalg.lstsq")
@_checked(_qr_check)
def _lstsq(a, b):
    ozd = _ozd()
    x, _, rank, s = ozd.lstsq(a, b, check_finite=False)
    r = b - ozd.matmul(a, x)
    residuals = (abs(r) ** 2).sum(axis=0, keepdims=b.ndim == 1)
    return x, residuals, rank, s


# ``a @ b`` and ``np.matmul`` look it up in dask.array.routines
@implements("dask.array.routines.matmul", "dask.array.matmul")
def _matmul(a, b):
    dt = np.result_type(a.dtype, b.dtype)
    if dt.kind not in "fc" or dt.itemsize not in (4, 8, 16):
        return None
    return _ozd().matmul(a, b).astype(dt)


_matmul.gives_dask_dtypes = True  # NumPy's result type, as dask's: no probe needed


_DASK_MODULES = ("dask.array.linalg", "dask.array.routines", "dask.array")


def _chunk_kind(x):
    """``"numpy"`` / ``"cupy"`` for a dask array with NumPy / CuPy chunks or a
    NumPy / CuPy array, ``None`` for anything else."""
    inner = x._meta if is_dask_array(x) else x
    if type(inner) is np.ndarray:
        return "numpy"
    return "cupy" if is_cupy_array(inner) else None


def _routable(arrays):
    """``"numpy"`` / ``"cupy"`` when every array argument is of that kind
    (NumPy or CuPy chunks, or such arrays) and of an emulable dtype, else None."""
    kinds = {_chunk_kind(x) for x in arrays}
    if len(kinds) != 1 or None in kinds or not all(emulable(x.dtype, half=False)
                                                   for x in arrays):
        return None
    return kinds.pop()


def _unknown_chunks(x) -> bool:
    """Whether dask array (or array) ``x`` has a chunk of unknown size (NaN)."""
    chunks = getattr(x, "chunks", None)
    if not isinstance(chunks, tuple):
        return False
    return any(c != c for dim in chunks for c in dim)


def _native_dtypes(original, args, kwargs):
    """The dtypes dask's own function gives for these argument dtypes (its rules
    differ from SciPy's, e.g. ``inv`` of float32 is float64): read from its lazy
    result on 2 x 2 stand-ins of the arguments (a graph of a few tasks, nothing
    computed)."""
    import dask.array as da

    def tiny(x):
        if not is_dask_array(x):
            return x
        return da.zeros((2,) * x.ndim, dtype=x.dtype, chunks=2)  # NumPy chunks: same rules

    with _state.suspended():  # dask's meta probes call np.linalg: not routed
        ref = original(*[tiny(x) for x in args], **{k: tiny(v) for k, v in kwargs.items()})
    return [getattr(x, "dtype", None) for x in ref] if isinstance(ref, tuple) \
        else getattr(ref, "dtype", None)


def _with_dtypes(out, dtypes):
    """``out`` (an array or a tuple of them) cast to ``dtypes`` where they differ."""
    def cast(x, dt):
        return x.astype(dt) if dt is not None and hasattr(x, "dtype") and x.dtype != dt else x

    if isinstance(out, tuple):
        return tuple(cast(x, dt) for x, dt in zip(out, dtypes))
    return cast(out, dtypes)


def _unrouted(original, args, kwargs):
    """Dask's own function, with routing suspended while it runs: dask's
    functions call each other through the patched module attributes
    (``tsqr`` calls ``tsqr`` on the stacked R factors, ``solve`` calls
    ``lu``), and an inner call routed to ozlinalg would get a partial graph
    of dask's making, which dask only completes after that call returns."""
    with _state.suspended():
        return original(*args, **kwargs)


def _make_shim(qualname, original, adapter):
    @functools.wraps(original)
    def shim(*args, **kwargs):
        if not _state.active():
            return original(*args, **kwargs)

        def native():
            return _unrouted(original, args, kwargs)

        values = (*args, *kwargs.values())
        arrays = [x for x in values if hasattr(x, "dtype")]
        plain = all(hasattr(x, "dtype") or x is None or isinstance(x, (bool, int, float, str))
                    for x in values)
        kind = _routable(arrays) if plain and any(is_dask_array(x) for x in arrays) else None
        if kind is None:
            return native()
        if any(_unknown_chunks(x) for x in arrays):
            # NaN chunks (after boolean indexing): ozlinalg's graphs need the
            # block sizes when they are built; dask's own functions handle
            # (or reject) them as dask does
            _policy.declines(qualname, "unknown chunk sizes", xp=kind)
            return native()
        check = getattr(adapter, "declines", None)
        reason = check(*args, **kwargs) if check is not None else None
        if reason is not None:
            _policy.declines(qualname, reason, xp=kind)
            return native()
        order = max((min(x.shape[-2:]) if x.ndim >= 2 else x.shape[0] for x in arrays
                     if x.ndim), default=0)
        # the strategy (min_size; the crossover of the engine the blocks would run on)
        if not _policy.emulates(qualname, order, xp=kind):
            return native()
        # (ozlinalg's graph builders call no patched dask function; dask's own
        # functions run unrouted: native())
        out = adapter(*args, **kwargs)
        if out is None:
            return native()
        if getattr(adapter, "gives_dask_dtypes", False):
            return out
        return _with_dtypes(out, _native_dtypes(original, args, kwargs))

    shim.__wrapped__ = original
    shim._ozlinalg_shim = True
    shim._ozlinalg_target = f"ozlinalg.routing._dask:{adapter.__name__}"
    shim._ozlinalg_op = _policy.op_of(qualname)
    shim.__qualname__ = qualname
    return shim


def install(installed, importing=False):
    """Patch the dask attributes of :data:`ROUTES` not yet in ``installed`` (the
    registry of installed shims, ``"module.name" -> (module, name, original)``; the
    caller holds its lock). Does nothing unless dask.array is imported:
    fully, or (``importing``, from the post-import hook) just executed. A
    dask.array still being imported by another thread is left to that
    thread's hook, so this never waits on an import lock while holding the
    registry's."""
    import sys

    top = sys.modules.get("dask.array")
    if top is None:
        return
    if not importing and getattr(getattr(top, "__spec__", None), "_initializing", False):
        return
    for mod_name in _DASK_MODULES:
        mod = sys.modules.get(mod_name) or importlib.import_module(mod_name)
        for name, adapter in ROUTES[mod_name].items():
            if not is_adapter(adapter):
                continue
            key = f"{mod_name}.{name}"
            if key in installed:
                continue
            original = getattr(mod, name, None)
            if original is None:
                continue
            if getattr(original, "_ozlinalg_shim", False):
                installed[key] = (mod, name, original.__wrapped__)
                continue
            setattr(mod, name, _make_shim(key, original, adapter))
            installed[key] = (mod, name, original)
