"""Linear systems, inverse, determinant, least squares (``scipy.linalg`` API)."""
from __future__ import annotations

import warnings

import numpy as np

from .. import lapack
from .._array import to_numpy
from .._matmul import matmul
from .._options import resolve
from ..lapack._common import MASKED_UP_TO, band_masks
from ..lapack.scipy_conventions import (
    as_array,
    common_dtype,
    computes_in,
    datacopied,
    deliver,
    eps,
    f2py_int,
    inplace_target,
    lapack_args,
    lapack_dtype,
    normalize_dtype,
    quiet,
    scipy_native,
)
from ._condition import gecon, norm1, numerically_singular, pocon, trcon
from ._decomp_cholesky import _potrf, _potrs
from ._decomp_lu import _getrf, _getrs
from ._decomp_qr import _geqrf, _ormqr
from ._refine import ladder, refined_solve
from ._validation import LinAlgError, LinAlgWarning, batched

__all__ = ["solve", "solve_triangular", "inv", "det", "lstsq", "matmul"]

#: assume_a spellings accepted by scipy.linalg.solve 1.17 -> internal kind
_SOLVE_KINDS = {
    None: None,
    "general": "gen", "gen": "gen",
    "diagonal": "diag",
    "tridiagonal": "tridiag",
    "banded": "banded",
    "upper triangular": "upper", "lower triangular": "lower",
    "pos": "pos", "positive definite": "pos",
    "sym": "sym", "symmetric": "sym",
    "her": "her", "hermitian": "her",
}
_INV_KINDS = {None: None, "general": "gen", "gen": "gen", "diagonal": "diag",
              "upper triangular": "upper", "lower triangular": "lower",
              "pos": "pos", "sym": "sym", "her": "her"}


#: ``refine="auto"`` refines systems of at least this order: below it the factorization
#: is a few panels, and a reduced count saves less than the refinement steps cost.
REFINE_MIN_ORDER = 256


def refines(plan, n, nrhs, a_kept=True):
    """Whether ``refine="auto"`` refines an order-``n`` system with ``nrhs`` right-hand
    sides under the call's `plan`: the order reaches :data:`REFINE_MIN_ORDER` and
    ``plan.min_order``, at most ``n / 4`` right-hand sides (each refinement step costs
    ``O(n^2)`` per column), the method has reduced levels and the accuracy is
    ``"dgemm"`` (:func:`ozlinalg.linalg._refine.ladder`), and ``a`` is not overwritten
    (``a_kept``: the residuals need it)."""
    return (a_kept and n >= max(REFINE_MIN_ORDER, plan.min_order) and 4 * nrhs <= n
            and len(ladder(plan.method.name, plan.accuracy)) > 1)


class _Singular(Exception):
    """A slice with an exactly zero pivot (or, for 'pos', not positive definite)."""


class _Native(Exception):
    """A slice that LAPACK must settle: numerically singular at the call's
    precision (see :mod:`._condition`), or a structure with no BLAS-3 work
    (tridiagonal). The whole call is then SciPy's native function."""


def _any_in(a_h, which, k):
    """``np.tril(a_h, k).any()`` (``which`` "l") or ``np.triu(a_h, k).any()`` ("u") for
    ``k`` in -2, -1 (lower), 1, 2 (upper)."""
    n = a_h.shape[0]
    if n > MASKED_UP_TO or a_h.shape[1] != n:
        return bool((np.tril(a_h, k) if which == "l" else np.triu(a_h, k)).any())
    below, above, below2, above2 = band_masks(n)[:4]
    mask = {-1: below, -2: below2, 1: above, 2: above2}[k]
    return bool(a_h[mask].any())


def _detect(a, tridiagonal=True):
    """SciPy 1.17's structure detection for ``assume_a=None``: 'diag',
    'tridiag' (order > 3; not for ``inv``), 'upper', 'lower', 'sym' (complex
    symmetric), 'auto' (real symmetric or complex Hermitian: Cholesky first,
    the symmetric-indefinite solver if that fails), else 'gen'."""
    a_h = to_numpy(a)
    n = a_h.shape[0]
    if n > 3 and a_h[n - 1, 0] != 0 and a_h[0, n - 1] != 0 and a_h.dtype.kind != "c" \
            and a_h[n - 1, 0] != a_h[0, n - 1]:
        return "gen"  # both corners set (no triangle, no band) and unequal (not symmetric)
    low = _any_in(a_h, "l", -1)
    up = _any_in(a_h, "u", 1)
    if not low and not up:
        return "diag"
    if tridiagonal and low and up and n > 3 and not _any_in(a_h, "l", -2) \
            and not _any_in(a_h, "u", 2):
        return "tridiag"
    if not low:
        return "upper"
    if not up:
        return "lower"
    symmetric = np.array_equal(a_h, a_h.T)
    hermitian = np.iscomplexobj(a_h) and np.array_equal(a_h, a_h.conj().T)
    if not np.iscomplexobj(a_h):
        return "auto" if symmetric else "gen"
    if tridiagonal:  # solve: complex symmetric first (even when also Hermitian)
        return "sym" if symmetric else ("auto" if hermitian else "gen")
    return "auto" if hermitian else ("sym" if symmetric else "gen")  # inv


def _full_from_triangle(xp, a, lower, hermitian):
    """The full matrix from the triangle selected by `lower`: symmetric, or
    Hermitian (conjugate mirror, real diagonal: what ``hetrf``/``potrf`` read)."""
    if hermitian and a.dtype.kind == "c":
        tri = xp.tril(a, -1) if lower else xp.triu(a, 1)
        return tri + tri.conj().T + xp.diag(xp.diagonal(a).real).astype(a.dtype)
    n = a.shape[0]
    if xp is np and n <= MASKED_UP_TO and a.ndim == 2 and a.shape[1] == n:
        # tril(a) + tril(a, -1).T is x + 0.0 everywhere (x the kept entry or its mirror):
        # the same bits, zeros' signs included
        return np.where(band_masks(n)[4 if lower else 5], a, a.T) + 0.0
    return xp.tril(a) + xp.tril(a, -1).T if lower else xp.triu(a) + xp.triu(a, 1).T


def _mirror(xp, c, lower, conj=True):
    """``c``'s `lower` (or upper) triangle mirrored onto the other one (what
    SciPy leaves in an overwritten ``a`` after a Cholesky solve)."""
    tri = xp.tril(c, -1) if lower else xp.triu(c, 1)
    t = tri.conj().T if conj and c.dtype.kind == "c" else tri.T
    return (xp.tril(c) if lower else xp.triu(c)) + t


def _check_verdict(info, rc, dtype, destroyed):
    """LAPACK settles numerically singular slices (:class:`_Native`), unless
    the input was factored in place (its data is gone: the emulated verdict
    stands, an exact zero pivot raising as LAPACK's would)."""
    if not numerically_singular(info, rc, dtype):
        return
    if not destroyed:
        raise _Native
    if info > 0:
        raise _Singular


def _refined_core(plan, a, b, kind, lower, transposed, dtype, a_target):
    """The refined solve of one system (:mod:`._refine`), for the kinds it serves:
    ``(x, rcond)``, or None where the unrefined path must settle the matrix (singular
    at DGEMM level, not positive definite, or another kind)."""
    xp = plan.xp
    her = a.dtype.kind == "c"
    if kind in ("pos", "auto"):
        full = _full_from_triangle(xp, a, lower, True)
        got = refined_solve(plan, a, b, kind="pos", lower=bool(lower), transposed=False,
                            dtype=dtype, a_full=full)
        if got is None:
            return None
        x, rc, f = got
        _check_verdict(0, rc, dtype, False)
        if a_target is not None:
            a_target[...] = _mirror(xp, f.f, lower)
        return x, rc
    if kind in ("sym", "her"):
        a = _full_from_triangle(xp, a, lower, kind == "her" and her)
    elif kind != "gen":
        return None
    got = refined_solve(plan, a, b, kind="gen", lower=False, transposed=transposed,
                        dtype=dtype)
    if got is None:
        return None
    x, rc, f = got
    _check_verdict(0, rc, dtype, False)
    if a_target is not None and kind == "gen":
        a_target[...] = f.f
    return x, rc


def _solve_core(plan, a, b, kind, lower, transposed, dtype, a_target=None, a_private=True,
                refine=False):
    """Solve one (n, n) system with 2-D ``b`` (both float64 / complex128 or
    in ``dtype``): returns ``(x, rcond)`` with ``x`` float64 / complex128.

    ``a_target``: the array that SciPy overwrites with its factorization
    (``overwrite_a``); a float64 / complex128 one is factored in place.
    ``a_private``: ``a_target`` is ozlinalg's own copy (the caller's data
    survives an in-place factorization). ``b`` may be a view of the
    caller's array (a broadcast slice; CuPy's are writable): it is never
    written. Raises :class:`_Singular` (exact zero pivot) or
    :class:`_Native` (LAPACK must decide).
    """
    xp = plan.xp
    if kind is None:
        kind = _detect(a)
    if refine:
        got = _refined_core(plan, a, b, kind, lower, transposed, dtype, a_target)
        if got is not None:
            return got
    n = a.shape[0]
    direct = computes_in(xp, a_target)
    destroyed = direct and not a_private
    if kind == "tridiag":
        raise _Native  # O(n) work: LAPACK gttrf, reading only the band
    if kind == "diag":
        d = xp.diagonal(a)
        if bool((d == 0).any()):
            raise _Singular
        ad = xp.abs(d)
        return b / d[:, None], float(ad.min() / ad.max())
    if kind in ("lower", "upper"):
        low = kind == "lower"
        if bool((xp.diagonal(a) == 0).any()):
            raise _Singular
        with quiet():
            x = lapack.trsm(a, b, lower=low, trans=1 if transposed else 0,
                            check_finite=False, **lapack_args(plan, n))
        return x, trcon(xp, a, low, dtype)
    if kind in ("pos", "auto"):
        her = a.dtype.kind == "c"
        anorm = norm1(xp, _full_from_triangle(xp, a, lower, True))
        in_place = direct and kind == "pos"
        try:
            c = _potrf(plan, a_target if in_place else a, bool(lower), in_place)
        except LinAlgError:
            if kind == "pos":
                raise _Singular from None
            c = None  # not positive definite: the symmetric-indefinite solver
        if c is not None:
            rc = pocon(xp, c, lower, anorm)
            _check_verdict(0, rc, dtype, in_place and not a_private)
            if a_target is not None:
                a_target[...] = _mirror(xp, c, lower)
            return _potrs(plan, c, b, bool(lower), False, own=True), rc
        kind = "her" if her else "sym"
    if kind in ("sym", "her"):
        # No blocked symmetric-indefinite (Bunch-Kaufman) factorization is
        # emulated: LU of the full matrix read from the `lower` triangle.
        full = _full_from_triangle(xp, a, lower, kind == "her")
        lu_, piv, info = _getrf(plan, full)
        rc = gecon(xp, lu_, norm1(xp, full)) if not info else None
        _check_verdict(info, rc, dtype, False)
        return _getrs(plan, lu_, piv, b, own=True), rc
    # 'gen': LU with partial pivoting, in the caller's buffer when allowed
    anorm = norm1(xp, a.T if transposed else a)
    lu_, piv, info = _getrf(plan, a_target if direct else a, direct)
    rc = gecon(xp, lu_, anorm) if not info else None
    _check_verdict(info, rc, dtype, destroyed)
    if a_target is not None and not direct:
        a_target[...] = lu_
    return _getrs(plan, lu_, piv, b, trans=1 if transposed else 0, own=True), rc


def _emit(singular, ill):
    """SciPy 1.17's error / warning texts (``_format_emit_errors_warnings``)."""
    if singular:
        raise LinAlgError(f"A singular matrix detected: slice(s) {singular} are singular.")
    if ill:
        txt = ",".join(f"slice {i} has rcond = {rc}" for i, rc in ill)
        # user -> solve / inv -> _per_slice -> _emit
        warnings.warn(f"An ill-conditioned matrix detected: {txt}.", LinAlgWarning,
                      stacklevel=4)


def _per_slice(batch_shape, core, out, dtype):
    """``out[idx], rcond = core(idx)`` over the batch; then SciPy's error /
    warning for the singular and ill-conditioned slices (as solve / inv do).
    :class:`_Native` from any slice propagates before anything is written
    to the caller's arrays."""
    singular, ill, results = [], [], []
    for i, idx in enumerate(np.ndindex(*batch_shape) if batch_shape else ((),)):
        try:
            xi, rc = core(idx)
        except _Singular:
            singular.append(i)
            continue
        results.append((idx, xi))
        if rc is not None and not rc >= eps(dtype):
            ill.append((i, rc))
    if not singular:
        for idx, xi in results:
            out[idx] = xi
    _emit(singular, ill)


def _readonly(x):
    """True for a NumPy array the caller cannot write to (ozlinalg never
    writes one, even when asked to overwrite it)."""
    return isinstance(x, np.ndarray) and not x.flags.writeable


def _private(xp, arr, original):
    """``arr`` (derived from the caller's ``original``) shares no memory with it (by the
    bounds: where they overlap without sharing, the caller takes a copy it did not need;
    ``np.shares_memory``'s exact answer costs an integer program per call)."""
    if xp is not np or not isinstance(original, np.ndarray):
        return arr is not original and datacopied(arr, original)
    return not np.may_share_memory(arr, original)


def _asarray_validated(a, check_finite=True, argname="a"):
    """:func:`as_array` with SciPy's verdict on object arrays: the functions here whose
    SciPy original validates through ``scipy._lib._util._asarray_validated`` (solve,
    solve_triangular, inv, lstsq) raise its ``ValueError("object arrays are not
    supported")``, where :func:`as_array` raises NumPy's ``TypeError`` (the verdict of
    ``numpy.linalg`` and of SciPy's ``det``)."""
    try:
        return as_array(a, check_finite=check_finite, argname=argname)
    except TypeError:
        dt = a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype
        if dt == np.dtype(object):
            raise ValueError("object arrays are not supported") from None
        raise


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False, *, refine=False):
    """Solve the equation ``a @ x = b`` for ``x``, where `a` is a square matrix.

    If the data matrix is known to be a particular type then supplying the
    corresponding string to ``assume_a`` key chooses the dedicated solver.

    Parameters
    ----------
    a : (..., N, N) array_like
        Square input data (a stack of matrices is solved slice by slice,
        batch axes broadcast against those of `b`).
    b : (..., N, NRHS) array_like
        Input data for the right hand side; a 1-D `b` is one vector.
    lower : bool, default: False
        Ignored unless ``assume_a`` is one of ``'sym'``, ``'her'``, or
        ``'pos'``. If True, the calculation uses only the data in the lower
        triangle of `a`; entries above the diagonal are ignored.
    overwrite_a : bool, default: False
        Allow overwriting data in `a` (may enhance performance).
    overwrite_b : bool, default: False
        Allow overwriting data in `b` (may enhance performance).
    check_finite : bool, default: True
        Whether to check that the input matrices contain only finite numbers.
    assume_a : str, optional
        Valid entries are ``None`` (detect the structure as SciPy does),
        ``'general'``/``'gen'``, ``'diagonal'``, ``'tridiagonal'``,
        ``'banded'``, ``'upper triangular'``, ``'lower triangular'``,
        ``'symmetric'``/``'sym'``, ``'hermitian'``/``'her'``,
        ``'positive definite'``/``'pos'``.
    transposed : bool, default: False
        If True, solve ``a.T @ x == b``. Raises `NotImplementedError`
        for complex `a` (as SciPy).
    refine : {False, True, "auto"}, default: False
        Not in SciPy. ``True``: a refined solve for general, symmetric, Hermitian and
        positive definite matrices: the LU (Cholesky) is factored at a reduced slice
        or moduli count and the solution refined in FP64 to LAPACK-level backward
        error (:mod:`ozlinalg.linalg._refine`; the count rises, or the call falls
        back to the DGEMM-level solve, where refinement does not converge).
        ``"auto"``: the refined solve where it can pay (:func:`refines`: order at
        least :data:`REFINE_MIN_ORDER`, at most ``n / 4`` right-hand sides, a method
        with a reduced ladder, ``accuracy="dgemm"``, `a` not overwritten); else the
        DGEMM-level solve. ``False``: the DGEMM-level LU / Cholesky solve.
        :func:`ozlinalg.solve` defaults to ``"auto"``.

    Returns
    -------
    x : (..., N, NRHS) ndarray
        The solution array (float32 if `a` and `b` are float32, complex64 /
        complex128 if either is complex, else float64).

    Raises
    ------
    ValueError
        If size mismatches detected or input a is not square; ``"object arrays are
        not supported"`` for an object array (SciPy's verdict; other unsupported
        dtypes, such as extended precision, raise ``TypeError``).
    numpy.linalg.LinAlgError
        ``"A singular matrix detected: slice(s) [...] are singular."`` if the
        matrix is singular (or, for ``'pos'``, not positive definite).

    Warns
    -----
    scipy.linalg.LinAlgWarning
        If an ill-conditioned input a is detected (reciprocal condition
        number below machine epsilon; LAPACK ``gecon``/``pocon``/``trcon`` on
        the factors, host arrays only).

    See Also
    --------
    scipy.linalg.solve : the native original.

    Notes
    -----
    General matrices: blocked LU with partial pivoting
    (:func:`ozlinalg.lapack.getrf`) and ``getrs``. Positive definite:
    blocked Cholesky (``potrf``/``potrs``); with ``assume_a=None`` a real
    symmetric or complex Hermitian matrix is tried with Cholesky first and,
    if it is not positive definite, solved as symmetric / Hermitian, as
    SciPy 1.17 does. Symmetric and Hermitian: SciPy uses Bunch-Kaufman
    (``sytrf``/``hetrf``), which has no blocked emulated version here, so
    the matrix completed from the triangle selected by `lower` (mirrored;
    conjugated, with a real diagonal, for ``'her'``) is solved by LU.
    Triangular: blocked ``trsm``. Diagonal: a division. All BLAS-3 work
    runs on the emulated DGEMM (Ozaki scheme); complex input is computed in
    complex128. Tridiagonal and banded matrices (``assume_a``, or a
    tridiagonal matrix detected with ``assume_a=None``) have no BLAS-3 work
    to emulate: they go to :func:`scipy.linalg.solve` (LAPACK ``gttrf`` /
    ``gbsv``), which reads only the band.

    Singular matrices get SciPy's verdict: a slice whose emulated
    factorization has an exactly zero pivot, or a reciprocal condition
    number below the machine epsilon of the call's precision, is numerically
    singular, and there only LAPACK's own rounding decides between
    ``LinAlgError`` (exact zero pivot) and a result with ``LinAlgWarning``;
    the call is then computed by :func:`scipy.linalg.solve` itself
    (see :mod:`ozlinalg.linalg._condition`). An ``a`` factored in place
    (``overwrite_a=True``, Fortran-ordered float64 / complex128) keeps the
    emulated verdict, its data being gone.

    ``overwrite_a`` / ``overwrite_b`` follow SciPy: only unbatched,
    Fortran-contiguous (or 1-D) operands of the computing dtype are
    written (``b`` receives the solution and is returned; ``a`` holds the
    LU or Cholesky factors afterwards, for general and positive definite
    matrices); a read-only array is never written.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import solve
    >>> a = np.array([[3., 2., 0.], [1., -1., 0.], [0., 5., 1.]])
    >>> solve(a, np.array([2., 4., -1.]))
    array([ 2., -2.,  9.])
    """
    def native_call():  # SciPy itself (LAPACK's verdict; tridiagonal, banded)
        return scipy_native("solve")(
            a, b, lower=lower, overwrite_a=overwrite_a and not _readonly(a),
            overwrite_b=overwrite_b and not _readonly(b), check_finite=False,
            assume_a=assume_a, transposed=transposed)

    if refine not in (True, False, "auto"):
        raise ValueError(f"refine must be True, False or 'auto', got {refine!r}")
    if assume_a == "banded":
        if check_finite:
            _asarray_validated(a), _asarray_validated(b, argname="b")
        return native_call()
    if assume_a not in _SOLVE_KINDS:
        raise ValueError(f"{assume_a} is not a recognized matrix structure")
    kind = _SOLVE_KINDS[assume_a]
    xp, a1 = _asarray_validated(a, check_finite=check_finite)
    _, b1 = _asarray_validated(b, check_finite=check_finite, argname="b")
    a1, b1 = xp.atleast_2d(a1), xp.atleast_1d(b1)
    dt = common_dtype(a1, b1)
    a1, b1 = a1.astype(dt, copy=False), b1.astype(dt, copy=False)
    if kind == "her" and dt.kind != "c":
        kind = "sym"  # SciPy: a real Hermitian matrix is symmetric
    if a1.shape[-1] != a1.shape[-2]:
        raise ValueError(f"Expected square matrix, got a1.shape={a1.shape}")
    if transposed and dt.kind == "c":
        raise NotImplementedError("scipy.linalg.solve can currently not solve a^T x = b or "
                                  "a^H x = b for complex matrices.")
    b_is_1d = b1.ndim == 1
    if b_is_1d:
        b1 = b1[:, None]
    a_is_scalar = a1.size == 1
    if b1.shape[-2] != a1.shape[-1] and not a_is_scalar:
        raise ValueError(f"incompatible shapes: a1.shape={a1.shape} and b1.shape={b1.shape}")
    if a1.ndim == 2 and b1.ndim == 2:  # one system (no broadcasting's views to make)
        batch, ab, bb = (), a1, b1
    else:
        batch = np.broadcast_shapes(a1.shape[:-2], b1.shape[:-2])
        ab = xp.broadcast_to(a1, batch + a1.shape[-2:])
        bb = xp.broadcast_to(b1, batch + b1.shape[-2:])
    if ab.size == 0 or bb.size == 0:
        x = xp.empty_like(bb)
        return x[..., 0] if b_is_1d else x
    if a_is_scalar:
        if ab.item() == 0:
            raise LinAlgError("A singular matrix detected.")
        out = bb / ab
        return out[..., 0] if b_is_1d else out
    # SciPy overwrites only unbatched, Fortran-contiguous operands; a holds
    # the factorization afterwards, b the solution
    a_tgt = inplace_target(xp, a1, overwrite_a, dt) if not batch else None
    b_tgt = inplace_target(xp, b1, overwrite_b, dt) if not batch else None
    a_private = _private(xp, a1, a)
    out = b_tgt if b_tgt is not None else xp.empty(batch + b1.shape[-2:], dtype=dt)
    plan = resolve(xp)
    if refine == "auto":
        refine = refines(plan, a1.shape[-1], b1.shape[-1], a_tgt is None)

    def core(idx):
        return _solve_core(plan, ab[idx], bb[idx], kind, lower, transposed, dt, a_tgt,
                           a_private, refine)

    try:
        _per_slice(batch, core, out, dt)
    except _Native:
        return native_call()
    return out[..., 0] if b_is_1d else out


@batched(("a", 2), ("b", "1|2"))
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """Solve the equation ``a x = b`` for `x`, assuming a is a triangular matrix.

    Parameters
    ----------
    a : (M, M) array_like
        A triangular matrix.
    b : (M,) or (M, N) array_like
        Right-hand side matrix in ``a x = b``.
    trans : {0, 1, 2, 'N', 'T', 'C'}, optional
        Type of system to solve: ``a x = b`` (0, 'N'), ``a^T x = b``
        (1, 'T') or ``a^H x = b`` (2, 'C'; the conjugate transpose).
    lower : bool, optional
        Use only data contained in the lower triangle of `a`.
        Default is to use upper triangle.
    unit_diagonal : bool, optional
        If True, diagonal elements of `a` are assumed to be 1 and
        will not be referenced.
    overwrite_b : bool, optional
        Allow overwriting data in `b` (may enhance performance).
    check_finite : bool, optional
        Whether to check that the input matrices contain only finite numbers.

    Returns
    -------
    x : (M,) or (M, N) ndarray
        Solution to the system ``a x = b``. Shape of return matches `b`.

    Raises
    ------
    numpy.linalg.LinAlgError
        ``"singular matrix: resolution failed at diagonal %d"`` (0-based) if
        `a` has a zero on its diagonal.

    See Also
    --------
    scipy.linalg.solve_triangular : the native original.

    Notes
    -----
    Recursive blocked triangular solve (BLAS-3 ``trsm``,
    :func:`ozlinalg.lapack.trsm`): small diagonal blocks natively, the
    couplings ``b2 -= a21 @ x1`` on the emulated DGEMM (Ozaki scheme).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import solve_triangular
    >>> a = np.array([[3., 0, 0, 0], [2, 1, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1]])
    >>> solve_triangular(a, np.array([3., 2., 4., 2.]), lower=True)
    array([ 1.,  0.,  3., -2.])
    """
    xp, a1 = _asarray_validated(a, check_finite=check_finite)
    _, b1 = _asarray_validated(b, check_finite=check_finite, argname="b")
    if a1.ndim != 2 or a1.shape[0] != a1.shape[1]:
        raise ValueError("expected square matrix")
    if a1.shape[0] != b1.shape[0]:
        raise ValueError(f"shapes of a {a1.shape} and b {b1.shape} are incompatible")
    dt = lapack_dtype(a1, b1)
    if b1.size == 0:
        return xp.empty_like(b1, dtype=dt)
    t = {"N": 0, "T": 1, "C": 2}.get(trans, trans)
    if a1.flags.f_contiguous or (not isinstance(t, xp.ndarray) and t == 2):
        t = f2py_int(t, "dtrtrs", "2nd", "trans")
    else:  # SciPy solves with a.T and `trans=not trans` here: any truthy value is 1
        t = 1 if t else 0
    target = inplace_target(xp, b1, overwrite_b or datacopied(b1, b), dt)
    direct = computes_in(xp, target)
    with quiet():
        x = lapack.trsm(a1, target if direct else b1, lower=bool(lower), trans=t,
                        unit_diagonal=bool(unit_diagonal), overwrite_b=direct,
                        check_finite=False, **lapack_args(resolve(xp), a1.shape[0]))
    return deliver(xp, x, target, dt)


def inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    """Compute the inverse of a matrix.

    Parameters
    ----------
    a : (..., M, M) array_like
        Square matrix (or a stack of them) to be inverted.
    overwrite_a : bool, optional
        Discard data in `a` (may improve performance). Default is False.
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.
    assume_a : str, optional
        ``None`` (detect), ``'general'``/``'gen'``, ``'diagonal'``,
        ``'upper triangular'``, ``'lower triangular'``, ``'pos'``, ``'sym'``,
        ``'her'``, as :func:`scipy.linalg.inv` 1.17.
    lower : bool, optional
        Ignored unless `assume_a` is one of 'sym', 'her', or 'pos'. If True,
        only the lower triangle of `a` is read.

    Returns
    -------
    ainv : (..., M, M) ndarray
        Inverse of the matrix `a`.

    Raises
    ------
    numpy.linalg.LinAlgError
        If `a` is singular.
    ValueError
        If `a` is not square, or not 2D.

    Warns
    -----
    scipy.linalg.LinAlgWarning
        For an ill-conditioned `a` (reciprocal condition number below eps).

    See Also
    --------
    scipy.linalg.inv : the native original.

    Notes
    -----
    ``A X = I`` solved with the blocked factorization chosen by `assume_a`
    (LU ``getrf``/``getrs``, Cholesky ``potrf``/``potrs``, or ``trsm``), all
    BLAS-3 work on the emulated DGEMM (Ozaki scheme). As in :func:`solve`,
    numerically singular slices are left to :func:`scipy.linalg.inv`
    (LAPACK's verdict), and with ``overwrite_a`` the inverse is written
    into a Fortran-contiguous unbatched `a` of the computing dtype, as SciPy.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import inv
    >>> inv(np.array([[1., 2.], [3., 4.]]))
    array([[-2. ,  1. ],
           [ 1.5, -0.5]])
    """
    xp, a1 = _asarray_validated(a, check_finite=check_finite)
    if a1.ndim < 2:
        raise ValueError(f"Expected at least ndim=2, got a1.ndim={a1.ndim}")
    if a1.shape[-1] != a1.shape[-2]:
        raise ValueError(f"Expected square matrix, got a1.shape={a1.shape}")
    dt = lapack_dtype(a1)
    if a1.size == 0:
        return xp.empty_like(a1, dtype=dt)
    a1, overwrite_a = normalize_dtype(xp, a1, overwrite_a, dt)
    kind = _INV_KINDS[assume_a]
    # SciPy writes the inverse into a (unbatched, Fortran-contiguous) when
    # allowed; a private dtype-converted copy counts as allowed
    target = inplace_target(xp, a1, overwrite_a and a1.ndim == 2, dt)
    a_private = _private(xp, a1, a)
    out = target if target is not None else xp.empty(a1.shape, dtype=dt)
    n = a1.shape[-1]
    plan = resolve(xp)

    def core(idx):
        m = a1[idx]
        k = _detect(m, tridiagonal=False) if kind is None else kind
        x, rc = _solve_core(plan, m, xp.eye(n, dtype=m.dtype), k, lower, False, dt, target,
                            a_private)
        if k in ("lower", "upper"):
            x = xp.tril(x) if k == "lower" else xp.triu(x)
        return x, rc

    try:
        _per_slice(a1.shape[:-2], core, out, dt)
    except _Native:
        return scipy_native("inv")(a, overwrite_a=overwrite_a and not _readonly(a),
                                   check_finite=False, assume_a=assume_a, lower=lower)
    return out


def det(a, overwrite_a=False, check_finite=True):
    """Compute the determinant of a matrix.

    Parameters
    ----------
    a : (..., M, M) array_like
        Input array to compute determinants for.
    overwrite_a : bool, optional
        Allow overwriting data in a (may enhance performance).
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.

    Returns
    -------
    det : (...) float or complex
        Determinant of `a` (float64, or complex128 for complex input,
        whatever the precision, as SciPy); a NumPy scalar for a single
        matrix.

    See Also
    --------
    scipy.linalg.det : the native original.

    Notes
    -----
    Blocked LU with partial pivoting (:func:`ozlinalg.lapack.getrf`, trailing
    updates on the emulated DGEMM), then the product of U's diagonal times
    the sign of the permutation, as SciPy does with LAPACK ``getrf``.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import det
    >>> round(float(det(np.array([[0., 2., 3.], [4., 5., 6.], [7., 8., 9.]]))), 12)
    3.0
    """
    xp, a1 = as_array(a, check_finite=check_finite)
    if a1.ndim < 2:
        raise ValueError("The input array must be at least two-dimensional.")
    if a1.shape[-1] != a1.shape[-2]:
        raise ValueError("Last 2 dimensions of the array must be square"
                         f" but received shape {a1.shape}.")
    dt = lapack_dtype(a1)
    a1, overwrite_a = normalize_dtype(xp, a1, overwrite_a, dt)
    out_dt = xp.complex128 if dt.kind == "c" else xp.float64
    if min(a1.shape) == 0:
        return out_dt(1.0) if a1.ndim == 2 else xp.ones(a1.shape[:-2], dtype=out_dt)
    if a1.shape[-2:] == (1, 1):
        d = a1[..., 0, 0]
        d = d[()] if d.ndim == 0 else d
        return d if dt in (xp.float64, xp.complex128) else d.astype(out_dt)
    # SciPy factors a C-ordered copy, or `a` itself when overwrite_a allows
    if not datacopied(a1, a) and not overwrite_a:
        a1 = a1.copy(order="C")
    if not (a1.flags.c_contiguous and (xp is not np or a1.flags.writeable)):
        a1 = a1.copy(order="C")

    plan = resolve(xp)

    def one(m):
        # LAPACK sees the C-ordered m as m.T in Fortran order: factor that
        direct = m.dtype in (xp.float64, xp.complex128)
        lu_, piv, _ = _getrf(plan, m.T, direct)
        if not direct:
            m.T[...] = lu_
        sign = -1 if int(np.count_nonzero(to_numpy(piv) != np.arange(piv.size))) % 2 else 1
        return sign * xp.prod(xp.diagonal(lu_))

    if a1.ndim == 2:
        return out_dt(one(a1))
    res = xp.empty(a1.shape[:-2], dtype=out_dt)
    for idx in np.ndindex(*a1.shape[:-2]):
        res[idx] = one(a1[idx])
    return res


def _rank_cutoff(driver, cond, dtype):
    """The relative cutoff ``t`` (singular values ``<= t * s[0]`` count as
    zero) LAPACK applies for ``driver`` and ``cond`` (SciPy passes
    ``cond=None`` as the machine epsilon of ``dtype``): ``?gelsd`` takes the
    unit roundoff (``dlamch('E')``) for ``cond <= 0`` or ``>= 1``; ``?gelss``
    for ``cond < 0`` (0 keeps every non-zero value); ``?gelsy`` estimates
    the rank of a column-pivoted QR against ``cond`` (``<= 0``: full rank)."""
    e = eps(dtype)
    c = e if cond is None else float(cond)
    if driver == "gelsd":
        return e / 2 if (c <= 0 or c >= 1) else c
    if driver == "gelss":
        return e if c < 0 else c
    return max(c, 0.0)


@batched(("a", 2), ("b", "1|2"))
def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True,
          lapack_driver=None):
    """Compute least-squares solution to the equation ``a @ x = b``.

    Compute a vector x such that the 2-norm ``|b - A x|`` is minimized.

    Parameters
    ----------
    a : (M, N) array_like
        Left-hand side array.
    b : (M,) or (M, K) array_like
        Right hand side array.
    cond : float, optional
        Cutoff for 'small' singular values; used to determine effective
        rank of a. Singular values smaller than ``cond * largest_singular_value``
        are considered zero (default: machine epsilon of the computing
        precision). As LAPACK: for 'gelsd', ``cond <= 0`` (or ``>= 1``)
        means the unit roundoff; for 'gelss', ``cond < 0`` does.
    overwrite_a, overwrite_b : bool, optional
        As SciPy: only the 'gelss' driver writes its solution into a
        Fortran-contiguous `b` of the computing dtype (ozlinalg leaves `a`,
        SciPy's scratch space there, untouched).
    check_finite : bool, optional
        Whether to check that the input matrices contain only finite numbers.
    lapack_driver : str, optional
        ``'gelsd'`` (default), ``'gelsy'`` or ``'gelss'``. The full-rank
        solution is always computed through QR (see Notes); the driver only
        selects the return convention (``'gelsy'`` returns ``s = None`` and
        empty residues) and the native routine used for a rank-deficient `a`.

    Returns
    -------
    x : (N,) or (N, K) ndarray
        Least-squares solution.
    residues : (K,) ndarray or float
        Square of the 2-norm for each column in ``b - a x``, if ``M > N`` and
        ``rank(A) == n`` (returns a scalar if ``b`` is 1-D). Otherwise a
        (0,)-shaped array is returned.
    rank : int
        Effective rank of `a`.
    s : (min(M, N),) ndarray or None
        Singular values of `a`. The condition number of ``a`` is
        ``s[0] / s[-1]``.

    Raises
    ------
    numpy.linalg.LinAlgError
        If computation does not converge.
    ValueError
        When parameters are not compatible.

    See Also
    --------
    scipy.linalg.lstsq : the native original.

    Notes
    -----
    Full-rank least squares by blocked Householder QR (LAPACK ``geqrf``,
    ``ormqr``, ``trsm``; all block-reflector and triangular couplings on the
    emulated DGEMM): for ``M >= N``, ``x = R^{-1} (Q^H b)[:N]`` and the
    residues are the squared norms of ``(Q^H b)[N:]``; for ``M < N`` the
    minimum-norm solution ``x = Q R^{-H} b`` from the QR factorization of
    ``a^H`` (``^H``: conjugate transpose, the transpose for real input;
    residues and singular values are real). The singular values (for
    `rank` and `s`) are those of the small triangular factor R, computed
    natively (``min(M,N)^3`` flops beside the emulated ``M N min(M,N)``).
    If `a` is rank deficient by the driver's rule (``s[-1] <= cutoff * s[0]``,
    see `cond`), or numerically so (``s[-1] <= max(M, N) eps s[0]``), the
    call is delegated to :func:`scipy.linalg.lstsq` (native SVD-based
    ``gelsd``, or the chosen driver), whose minimum-norm solution and rank
    decision QR cannot give.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import lstsq
    >>> a = np.array([[1., 1.], [1., 2.], [1., 3.]])
    >>> x, res, rank, s = lstsq(a, np.array([1., 2., 2.]))
    >>> rank, bool(np.allclose(x, [2 / 3, 0.5]))
    (2, True)
    """
    xp, a1 = _asarray_validated(a, check_finite=check_finite)
    _, b1 = _asarray_validated(b, check_finite=check_finite, argname="b")
    if a1.ndim != 2:
        raise ValueError("Input array a should be 2D")
    m, n = a1.shape
    if m != b1.shape[0]:
        raise ValueError("Shape mismatch: a and b should have the same number"
                         f" of rows ({m} != {b1.shape[0]}).")
    if m == 0 or n == 0:
        x = xp.zeros((n,) + b1.shape[1:], dtype=np.common_type(to_numpy(a1[:0]),
                                                                  to_numpy(b1[:0])))
        res = (xp.linalg.norm(b1, axis=0) ** 2) if n == 0 else xp.empty((0,))
        return x, res, 0, xp.empty((0,))
    driver = "gelsd" if lapack_driver is None else lapack_driver
    if driver not in ("gelsd", "gelsy", "gelss"):
        raise ValueError(f'LAPACK driver "{driver}" is not found')
    dt = lapack_dtype(a1, b1)
    rdt = np.finfo(dt).dtype
    k = min(m, n)
    tall = m >= n
    plan = resolve(xp)
    qr_, tau = _geqrf(plan, a1 if tall else (a1.conj().T if a1.dtype.kind == "c" else a1.T))
    r = xp.triu(qr_[:k, :k])
    s = np.linalg.svd(to_numpy(r), compute_uv=False)  # native, k x k
    cut = _rank_cutoff(driver, cond, dt)
    if not (s[-1] > cut * s[0] and s[-1] > max(m, n) * eps(dt) * s[0]):
        # rank deficient, or numerically so at the call's precision: the
        # minimum-norm solution and LAPACK's own rank decision (native SVD)
        res = scipy_native("lstsq")(a, b, cond=cond, check_finite=False,
                                    overwrite_a=overwrite_a and not _readonly(a),
                                    overwrite_b=overwrite_b and not _readonly(b),
                                    lapack_driver=lapack_driver)
        return res if xp is np else tuple(
            xp.asarray(v) if isinstance(v, np.ndarray) else v for v in res)
    # full rank: QR. gelss writes x into b (first N rows) where SciPy's
    # wrapper overwrites b; the other drivers never do.
    vec = b1.ndim == 1
    b2 = b1[:, None] if vec else b1
    wdt = xp.complex128 if dt.kind == "c" else xp.float64
    tgt = None
    if driver == "gelss" and tall:
        tgt = inplace_target(xp, b1, overwrite_b or datacopied(b1, b), dt)
    direct = computes_in(xp, tgt)
    if tall:
        work = (tgt[:, None] if vec else tgt) if direct else xp.array(b2, dtype=wdt, order="F")
        _ormqr_into(plan, qr_, tau, work)
        with quiet():
            lapack.trsm(r, work[:n], lower=False, overwrite_b=True, check_finite=False,
                        **lapack_args(plan, n))
        xfull = deliver(xp, work[:, 0] if vec else work, tgt, dt)
        x = xfull[:n]
        if driver == "gelsy":
            return x, xp.empty((0,), dtype=dt), k, None
        if m > n:
            tail = xfull[n:]
            resid = (xp.abs(tail) ** 2).sum(axis=0)
        else:
            resid = xp.asarray([], dtype=dt)
    else:
        with quiet():
            y = lapack.trsm(r, xp.asarray(b2, dtype=wdt), lower=False, trans=2,
                            check_finite=False, **lapack_args(plan, m))
        ypad = xp.zeros((n, y.shape[1]), dtype=y.dtype, order="F")
        ypad[:m] = y
        x = _ormqr(plan, qr_, tau, ypad, side="L", trans="N")
        x = deliver(xp, x[:, 0] if vec else x, None, dt)
        if driver == "gelsy":
            return x, xp.empty((0,), dtype=dt), k, None
        resid = xp.asarray([], dtype=dt)
    return x, resid, k, xp.asarray(s, dtype=rdt)


def _ormqr_into(plan, qr_, tau, c):
    """``c <- Q^H c`` in place (``c`` float64 / complex128, Fortran-ordered)."""
    with quiet():
        lapack.ormqr(qr_, tau, c, side="L", trans="C", overwrite_c=True, check_finite=False,
                     **lapack_args(plan, qr_.shape[0]))
