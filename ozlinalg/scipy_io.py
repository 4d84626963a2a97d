"""SciPy's input / output contract around its LAPACK calls, kept by
:mod:`ozlinalg.linalg` and :mod:`ozlinalg.dask` alike.

:mod:`scipy.linalg` reaches LAPACK through f2py wrappers (``intent(in,out,copy)``
arrays) and, for ``solve`` and ``inv``, through its own batched C loops. What a
caller observes of them is mechanical, and this module states it once:

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
  (:func:`lapack_kw`: the options in force, ``min_size`` passed on) and
  **inside** (:func:`emulating`: every product of a factorization emulated).

ozlinalg computes in float64 / complex128 whatever the input precision; a
float32 / complex64 result is rounded once and lands in the caller's buffer
exactly where SciPy's would. One deliberate difference: f2py writes into a
read-only array when asked to overwrite it; ozlinalg treats a read-only array
as if ``overwrite_*`` were false (docs/backend.md).

The rules were established by experiment against SciPy 1.17; the side-by-side
tests in ``tests/routing/test_fidelity.py`` re-establish them on every run.
"""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from ._options import get_options, options
from .lapack import DEFAULT_BLOCK_SIZE

__all__ = ["lapack_dtype", "common_dtype", "normalize_dtype", "datacopied", "f2py_int",
           "inplace_target", "c_inplace_target", "computes_in", "deliver", "eps",
           "lapack_kw", "emulating"]

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


def common_dtype(*arrays):
    """The dtype ``scipy.linalg.solve`` casts both operands to
    (``_ensure_dtype_cdsz``): float64 for integer / bool inputs, else their
    common float or complex type at single (<= 32 bits) or double precision."""
    dt = np.result_type(*[a.dtype for a in arrays])
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
    return float(np.finfo(np.dtype(dtype)).eps)


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

#: ``Options.min_size`` of the caller while :func:`emulating` has set it to 0
_OUTER_MIN_SIZE: contextvars.ContextVar = contextvars.ContextVar(
    "ozlinalg_linalg_outer_min_size", default=None)


def lapack_kw(n):
    """Keyword arguments for an :mod:`ozlinalg.lapack` call on order ``n``.

    * ``slices`` / ``method``: from :func:`ozlinalg.get_options`;
    * ``min_size``: ``Options.min_size`` (below it the routine runs in
      native LAPACK; the library default 0 emulates at every size);
    * ``block_size``: ``min(128, ceil(n / 2))`` for small orders, so that every
      order from 2 up has at least one emulated update (with the lapack default
      of 128, orders up to 128 would be factored natively in one panel); from
      ``n = 256`` on the lapack default, i.e. the engine's (512-wide panels on
      the CPU INT8 engine for large orders, docs/performance.md).
    """
    opts = get_options()
    outer = _OUTER_MIN_SIZE.get()
    half = (int(n) + 1) // 2
    return dict(
        slices=opts.slices,
        method=opts.method,
        min_size=int(opts.min_size if outer is None else outer),
        block_size=max(1, min(DEFAULT_BLOCK_SIZE, half)) if half < DEFAULT_BLOCK_SIZE else None,
    )


@contextlib.contextmanager
def emulating():
    """Run the blocked routines' GEMMs emulated whatever their inner dimension.

    ``Options.min_size`` is applied to the order of the user's matrix (as the
    lapack routines' min_size); inside a factorization every product is emulated, so
    a trailing update with a panel width below ``min_size`` is not silently
    native. Inf / NaN propagate through the factorizations without
    RuntimeWarnings, as through LAPACK (``check_finite=False`` inputs).
    """
    min_size = get_options().min_size
    with np.errstate(all="ignore"):
        if min_size == 0 or _OUTER_MIN_SIZE.get() is not None:
            yield
            return
        token = _OUTER_MIN_SIZE.set(min_size)
        try:
            with options(min_size=0):
                yield
        finally:
            _OUTER_MIN_SIZE.reset(token)
