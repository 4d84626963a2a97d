"""SciPy's conventions around its LAPACK calls, kept by :mod:`ozlinalg.linalg` and
:mod:`ozlinalg.dask` alike: how inputs are validated, which dtype a call computes
in, when the caller's array receives the result, what comes back.

:mod:`scipy.linalg` reaches LAPACK through f2py wrappers (``intent(in,out,copy)``
arrays) and, for ``solve`` and ``inv``, through its own batched C loops. What a
caller observes of them is mechanical, and this module states it once:

* **which inputs are taken** (:func:`as_array`: SciPy's ``_asarray_validated``,
  with ``check_finite``) and **the native function** behind a routed one
  (:func:`scipy_native`);
* **the dtype a call computes in** (:func:`lapack_dtype`, :func:`common_dtype`):
  single precision for float32 and for bool, 8/16-bit integers and float16;
  double for wider integers; complex64 / complex128; complex128 when complex64
  meets a double;
* **when the caller's array receives the result** (:func:`inplace_target`):
  only when ``overwrite_*`` is true *and* the array already has that dtype and
  is Fortran-contiguous (a contiguous 1-D array qualifies), aligned and in
  native byte order; otherwise the wrapper works on a private copy and the
  caller's array is left untouched (C-ordered, strided, negative-stride or
  broadcast arrays, other dtypes);
* **what comes back** (:func:`deliver`): the caller's array itself when it was
  written, else a new Fortran-ordered array (f2py's layout; ``solve`` and
  ``inv`` return C-ordered ones);
* **what the blocked routines of** :mod:`ozlinalg.lapack` **are called with**
  (:func:`lapack_args`: the call's plan, resolved once at its front door, every
  product inside emulated) and **how quietly** (:func:`quiet`: Inf / NaN
  propagate without warnings, as through LAPACK).

ozlinalg computes in float64 / complex128 whatever the input precision; a
float32 / complex64 result is rounded once and lands in the caller's buffer
exactly where SciPy's would. One deliberate difference: f2py writes into a
read-only array when asked to overwrite it; ozlinalg treats a read-only array
as if ``overwrite_*`` were false (docs/backend.md).

The rules were established by experiment against SciPy 1.17; the side-by-side
tests in ``tests/routing/test_fidelity.py`` re-establish them on every run.
"""
from __future__ import annotations

import functools

import numpy as np

from .._array import array_namespace
from .._emulable import emulable, original
from ._common import DEFAULT_BLOCK_SIZE

__all__ = ["as_array", "scipy_native", "lapack_dtype", "common_dtype", "normalize_dtype",
           "datacopied", "f2py_int", "inplace_target", "c_inplace_target", "computes_in",
           "deliver", "eps", "lapack_args", "quiet"]

#: SciPy's ``find_best_lapack_type`` scores (scipy/linalg/blas.py): 1 -> s,
#: 2 -> d, 3 -> c, 4 -> z; any other dtype scores 5 and falls back to d.
_SCORE = {**dict.fromkeys("?bBhHef", 1), **dict.fromkeys("iIlLqQdg", 2),
          "F": 3, "D": 4, "G": 4}
_BY_SCORE = {1: np.float32, 2: np.float64, 3: np.complex64, 4: np.complex128}


def lapack_dtype(*arrays):
    """The dtype of the LAPACK routine SciPy picks for ``arrays``
    (``get_lapack_funcs``): the widest of them, where bool, 8/16-bit integers
    and float16 count as float32, wider integers as float64, and complex64
    with a double becomes complex128."""
    scores = [_SCORE.get(a.dtype.char, 5) for a in arrays]
    best = max(scores)
    if best == 3 and 2 in scores:
        best = 4
    return np.dtype(_BY_SCORE.get(best, np.float64))


_FLOAT64 = np.dtype(np.float64)


def common_dtype(*arrays):
    """The dtype ``scipy.linalg.solve`` casts both operands to
    (``_ensure_dtype_cdsz``): float64 for integer / bool inputs, else their
    common float or complex type at single (<= 32 bits) or double precision."""
    for a in arrays:  # the common case, all float64, without np.result_type
        if a.dtype is not _FLOAT64:
            break
    else:
        return _FLOAT64
    dt = np.result_type(*[a.dtype for a in arrays])
    if dt == np.float64:  # without np.finfo
        return dt
    if dt.kind not in "fc":
        return np.dtype(np.float64)
    single = np.finfo(dt).bits <= 32
    if dt.kind == "c":
        return np.dtype(np.complex64 if single else np.complex128)
    return np.dtype(np.float32 if single else np.float64)


def normalize_dtype(xp, a, overwrite, dtype):
    """``(a, overwrite)`` as SciPy's ``_normalize_lapack_dtype``: ``a`` cast to
    ``dtype`` (a private copy, which the call is then free to overwrite)."""
    if a.dtype == dtype:
        return a, overwrite
    return a.astype(dtype), True


def datacopied(arr, original):
    """SciPy's ``_datacopied``: ``arr`` (``asarray(original)``) is a private copy."""
    if arr is original:
        return False
    if not isinstance(original, np.ndarray) and hasattr(original, "__array__"):
        return False
    return arr.base is None


def _writable_here(xp, arr):
    if xp is not np:
        return True
    f = arr.flags
    return f.writeable and f.aligned and arr.dtype.isnative


def inplace_target(xp, arr, overwrite, dtype):
    """``arr`` when SciPy's wrapper writes its result into it, else None.

    That is: ``overwrite`` is true and ``arr`` is an array of ``dtype`` that is
    Fortran-contiguous (or contiguous 1-D), aligned, in native byte order and
    (ozlinalg's own rule) writeable.
    """
    if not overwrite or not isinstance(arr, xp.ndarray) or arr.ndim == 0 \
            or arr.dtype != dtype or not arr.flags.f_contiguous:
        return None
    return arr if _writable_here(xp, arr) else None


def c_inplace_target(xp, arr, overwrite, dtype):
    """As :func:`inplace_target` for SciPy's C-ordered kernels (``lu``): the
    array must be C-contiguous."""
    if not overwrite or not isinstance(arr, xp.ndarray) or arr.dtype != dtype \
            or not arr.flags.c_contiguous:
        return None
    return arr if _writable_here(xp, arr) else None


def computes_in(xp, target):
    """True when ozlinalg can compute directly in ``target`` (float64 or
    complex128: no second copy of the matrix)."""
    return target is not None and target.dtype in (xp.float64, xp.complex128)


def deliver(xp, result, target, dtype, order="F"):
    """What SciPy's wrapper returns: ``target`` holding ``result`` when it
    works in place, else ``result`` in ``dtype`` with the wrapper's ``order``
    (no copy when it already is)."""
    if target is not None:
        if result is not target:
            target[...] = result
        return target
    if result.dtype == dtype and result.ndim >= 2 and (
            result.flags.f_contiguous if order == "F" else result.flags.c_contiguous):
        return result
    return xp.asarray(result, dtype=dtype, order=order) if result.ndim >= 2 else \
        xp.ascontiguousarray(result, dtype=dtype)


def eps(dtype):
    """Machine epsilon of the precision a LAPACK routine of ``dtype`` works in
    (SciPy's threshold for its ill-conditioning warnings)."""
    return _eps(np.dtype(dtype))


@functools.lru_cache(maxsize=16)
def _eps(dtype):
    return float(np.finfo(dtype).eps)


def _f2py_error():
    try:
        from scipy.linalg import _flapack  # noqa: PLC0415

        return vars(_flapack).get("__flapack_error", ValueError)
    except ImportError:  # pragma: no cover
        return ValueError


#: The exception type f2py raises when an argument fails its range check.
F2PY_ERROR = _f2py_error()


def f2py_int(value, routine, position, name, default=0, lo=0, hi=2):
    """An integer argument as f2py converts and checks it: None is the
    default, numbers and numeric strings go through ``int()``; anything else
    raises ``ValueError``, a value outside ``[lo, hi]`` f2py's own error."""
    if value is None:
        return default
    try:
        v = int(value)
    except (TypeError, ValueError):
        if hasattr(value, "__getitem__") and not isinstance(value, (str, bytes)) \
                and len(value):  # f2py takes a sequence's first item
            return f2py_int(value[0], routine, position, name, default, lo, hi)
        raise ValueError(f"_flapack.{routine}() {position} keyword ({name}) can't be "
                         "converted to int") from None
    if not lo <= v <= hi:
        raise F2PY_ERROR(f"({name}>={lo} && {name} <={hi}) failed for {position} keyword "
                         f"{name}: {routine}")
    return v


# --------------------------------------------------------------------------
# the calls of ozlinalg.lapack


def lapack_args(plan, n):
    """Keyword arguments for an :mod:`ozlinalg.lapack` call on order ``n`` made by a
    function whose front door resolved `plan` (:func:`ozlinalg._options.resolve`).

    * ``plan``: ``plan.inside``: the call was emulated because its order reached
      ``plan.min_order``, so every product in it is, however narrow;
    * ``min_size``: ``plan.min_order`` (below it the routine runs in native LAPACK;
      the library default 0 emulates at every size);
    * ``block_size``: ``min(128, ceil(n / 2))`` for small orders, so that every
      order from 2 up has at least one emulated update (with the lapack default
      of 128, orders up to 128 would be factored natively in one panel); from
      ``n = 256`` on the lapack default, i.e. the engine's (512-wide panels on
      the CPU INT8 engine for large orders, docs/performance.md).
    """
    half = (int(n) + 1) // 2
    return dict(
        plan=plan.inside,
        min_size=plan.min_order,
        block_size=max(1, min(DEFAULT_BLOCK_SIZE, half)) if half < DEFAULT_BLOCK_SIZE else None,
    )


def quiet():
    """Inf / NaN propagate through the factorizations without RuntimeWarnings, as
    through LAPACK (``check_finite=False`` inputs)."""
    return np.errstate(all="ignore")


# --------------------------------------------------------------------------
# SciPy's input validation


def as_array(a, *, check_finite=True, fname="ozlinalg.linalg", argname="a",
             finite_msg="array must not contain infs or NaNs"):
    """Validate ``a`` and return ``(xp, arr)`` with ``arr`` in its own dtype.

    Raises ``ValueError`` (SciPy's message) for non-finite entries when
    `check_finite`, ``TypeError`` for extended-precision or non-numeric dtypes.
    Complex input (complex64, complex128) is accepted: the factorizations
    compute in complex128 from real emulated products.
    """
    if type(a) is np.ndarray and a.dtype.char in "dD":  # the common case, checked at once
        if check_finite and a.size and not bool(np.isfinite(a).all()):
            raise ValueError(finite_msg)
        return np, a
    xp = array_namespace(a)
    if xp is np and type(a) is not np.ndarray:
        # SciPy's _asarray_validated: masked arrays refused, other subclasses
        # (np.matrix, whose * is a matrix product) taken as plain ndarrays
        if np.ma.isMaskedArray(a):
            raise ValueError("masked arrays are not supported")
        arr = np.asarray(a)
    else:
        arr = a if (hasattr(a, "dtype") and hasattr(a, "ndim") and isinstance(a, xp.ndarray)) \
            else xp.asarray(a)
    kind = arr.dtype.kind
    if not emulable(arr.dtype):
        raise TypeError(f"{fname}: {argname} has unsupported dtype {arr.dtype}")
    if check_finite and arr.size and kind in "fc" and not bool(xp.isfinite(arr).all()):
        raise ValueError(finite_msg)
    return xp, arr


def scipy_native(name):
    """The native ``scipy.linalg.<name>``, whatever the backend has installed."""
    import scipy.linalg  # noqa: PLC0415

    return original(getattr(scipy.linalg, name))
