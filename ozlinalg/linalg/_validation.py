"""The one validation helper shared by :mod:`ozlinalg.linalg` (SciPy API) and
:mod:`ozlinalg.linalg.numpy_api` (NumPy API).

It decides, for every public function:

* which array module a call uses (NumPy or CuPy, from the inputs);
* which dtypes are accepted (real: bool, integers, float16/32/64; complex:
  complex64/128; others raise ``TypeError``) and which dtype a result is
  returned in (SciPy's and NumPy's rule: float32 stays float32, complex64
  stays complex64, other real inputs become float64 and other complex ones
  complex128; the computation itself is always FP64 / complex128);
* (the keyword arguments passed to :mod:`ozlinalg.lapack` are
  :func:`ozlinalg.lapack.scipy_conventions.lapack_args` of the call's plan, shared with
  :mod:`ozlinalg.dask`; the computing dtype is :func:`ozlinalg.lapack.work_dtype`);
* batching over leading ("stacked") dimensions.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .._array import array_namespace
from .._emulable import original
from .._exceptions import LinAlgError, LinAlgWarning

__all__ = [
    "batch_loop",
    "LinAlgError",
    "LinAlgWarning",
    "numpy_asarrays",
    "numpy_native",
    "numpy_real_t",
    "numpy_result_t",
    "numpy_wraps",
]


def numpy_asarrays(*args):
    """``(xp, [arrays])``: the NumPy API's inputs as plain arrays of their module
    (``np.matrix`` and other subclasses as ``ndarray``, as NumPy's ``_makearray``)."""
    xp = array_namespace(*args)
    return xp, [xp.asarray(a) for a in args]


def numpy_native(xp, name):
    """The native ``xp.linalg.<name>`` (``xp.<name>`` where linalg lacks it), the
    original behind a backend shim."""
    return original(getattr(xp.linalg, name) if hasattr(xp.linalg, name) else getattr(xp, name))


def numpy_result_t(xp, *arrays):
    """NumPy's linalg result type: single if every input is float32 / complex64,
    complex if any is complex."""
    single = all(a.dtype in (xp.float32, xp.complex64) for a in arrays)
    if any(a.dtype.kind == "c" for a in arrays):
        return xp.complex64 if single else xp.complex128
    return xp.float32 if single else xp.float64


def numpy_real_t(xp, dt):
    """The real type of NumPy result type `dt` (eigenvalues, singular values)."""
    return xp.float32 if dt in (xp.float32, xp.complex64) else xp.float64


def _whole(result):
    return None


def numpy_wraps(argname, positions=_whole):
    """Decorator: NumPy's ``wrap`` of a ``numpy.linalg`` function's results.

    NumPy takes ``wrap`` from argument `argname` (``_makearray``) and passes the
    results it names through it, so a subclass input (``np.matrix``) gets those
    results back in its own type (``eigh``'s vectors, not its values).
    ``positions(result)`` gives the indices of a tuple result to wrap, ``None``
    for the whole result, ``()`` for none. Plain ndarrays and other modules'
    arrays pass untouched, at the cost of one type check.
    """

    def deco(func):
        import inspect  # noqa: PLC0415

        index = list(inspect.signature(func).parameters).index(argname)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            result = func(*args, **kwargs)
            src = args[index] if len(args) > index else kwargs.get(argname)
            if type(src) is np.ndarray or not isinstance(src, np.ndarray):
                return result
            wrap = src.__array_wrap__
            where = positions(result)
            if where is None:
                return wrap(result)
            if not where:
                return result
            parts = list(result)
            for i in where:
                parts[i] = wrap(parts[i])
            return type(result)(parts) if type(result) is tuple else type(result)(*parts)

        return wrapper

    return deco


def batch_loop(xp, func, arrays, core_ndims, batch_shape=None):
    """Apply ``func`` to each core slice of ``arrays`` over broadcast batch axes.

    ``core_ndims`` gives the number of core axes per array. ``func`` returns
    an array or a tuple of arrays/scalars; results are stacked with the
    batch shape prepended, in new C-contiguous arrays (the layout of
    NumPy's gufunc results), whatever the layout of the slices.
    """
    if xp is np and not batch_shape and all(type(a) is np.ndarray and a.ndim == c
                                            for a, c in zip(arrays, core_ndims)):
        # one core problem: read-only views, as broadcast_to's, without its set-up (``func``
        # may be told to overwrite what it is given: a read-only view it copies)
        batch_shape, views = (), []
        for a in arrays:
            v = a.view()
            v.flags.writeable = False
            views.append(v)
        arrays = views
    else:
        if batch_shape is None:
            batch_shape = np.broadcast_shapes(*[a.shape[:a.ndim - c] for a, c in
                                                zip(arrays, core_ndims)])
        arrays = [xp.broadcast_to(a, tuple(batch_shape) + a.shape[a.ndim - c:])
                  for a, c in zip(arrays, core_ndims)]
    outs = None
    for idx in np.ndindex(*batch_shape) if batch_shape else ((),):
        res = func(*[a[idx] for a in arrays])
        single = not isinstance(res, tuple)
        res = (res,) if single else res
        if outs is None:
            outs = [[] for _ in res]
        for lst, r in zip(outs, res):
            lst.append(r)
    if outs is None:
        return None
    stacked = []
    for lst in outs:
        if lst[0] is None:
            stacked.append(None)
            continue
        first = xp.asarray(lst[0])
        st = xp.empty((len(lst),) + first.shape, dtype=first.dtype)
        for i, r in enumerate(lst):
            st[i] = r
        stacked.append(st.reshape(tuple(batch_shape) + st.shape[1:]))
    return stacked[0] if single else tuple(stacked)


def batched(*core):
    """Decorator: apply a 2-D implementation over leading batch axes, exactly as
    SciPy's ``_apply_over_batch``. ``core`` lists ``(argname, ndim)`` of the
    batched arguments; ``ndim`` may be ``"1|2"``.

    As in SciPy: the batch axes broadcast; a zero-size batch raises
    ``ValueError``; results are stacked, and returned as one array when the
    implementation returns one value (or a one-element tuple, e.g. ``qr``'s
    ``(R,)``), else as a list. An argument that needs no broadcasting is
    sliced directly (SciPy slices a broadcast view of the same memory), so
    ``overwrite_*`` reaches the caller's array slice by slice as in SciPy.
    """

    def deco(func):
        import inspect

        sig = inspect.signature(func)
        names = [n for n, _ in core]

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            vals, dims = [], []
            for name, nd in core:
                v = bound.arguments.get(name)
                if v is None:
                    vals.append(None)
                    dims.append(0)
                    continue
                xp = array_namespace(v)
                v = v if isinstance(v, xp.ndarray) else xp.asarray(v)
                if nd == "1|2":  # SciPy's rule (solve_triangular, lstsq)
                    nd = 2 if v.ndim >= 2 else 1
                vals.append(v)
                dims.append(nd)
            present = [(v, d) for v, d in zip(vals, dims) if v is not None]
            bshapes = [v.shape[:v.ndim - d] if d else v.shape for v, d in present]
            if not any(bshapes):
                return func(*args, **kwargs)
            xp = array_namespace(*[v for v, _ in present])
            bshape = np.broadcast_shapes(*bshapes)
            if math.prod(bshape) == 0:
                raise ValueError(f"`{func.__name__}` does not support zero-size batches.")
            full = []
            for v, d in zip(vals, dims):
                if v is None:
                    full.append(None)
                    continue
                shape = tuple(bshape) + (v.shape[v.ndim - d:] if d else ())
                full.append(v if v.shape == shape else xp.broadcast_to(v, shape))
            rest = {k: v for k, v in bound.arguments.items() if k not in names}
            results = []
            for idx in np.ndindex(*bshape):
                kw = dict(rest)
                kw.update({n: (None if v is None else v[idx]) for n, v in zip(names, full)})
                res = func(**kw)
                results.append(res if isinstance(res, tuple) else (res,))
            out = []
            for parts in zip(*results):
                st = xp.stack(parts)
                out.append(st.reshape(tuple(bshape) + st.shape[1:]))
            return out[0] if len(out) == 1 else out

        return wrapper

    return deco
