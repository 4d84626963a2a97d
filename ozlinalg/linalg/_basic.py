"""Linear systems, inverse, determinant, least squares (``scipy.linalg`` API)."""
from __future__ import annotations

import warnings

import numpy as np

from .. import lapack
from .._array import to_numpy
from ..ozaki.gemm import matmul
from ._decomp_cholesky import _potrf, _potrs
from ._decomp_lu import _getrf, _getrs
from ._decomp_qr import _geqrf, _ormqr
from ._validation import (
    LinAlgError,
    LinAlgWarning,
    as_array,
    batch_loop,
    batched,
    cast,
    emulating,
    lapack_kw,
    real_dtype,
    result_dtype,
    work_dtype,
)

__all__ = ["solve", "solve_triangular", "inv", "det", "lstsq", "matmul"]

_EPS = float(np.finfo(np.float64).eps)

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
    "her": "her", "hermitian": "her",  # real input: Hermitian is symmetric
}
_INV_KINDS = {None: None, "general": "gen", "gen": "gen", "diagonal": "diag",
              "upper triangular": "upper", "lower triangular": "lower",
              "pos": "pos", "sym": "sym", "her": "her"}


class _Singular(Exception):
    pass


def _detect(a):
    """SciPy's structure detection (``_find_matrix_structure``); complex
    Hermitian matrices are detected before symmetric ones, as SciPy does."""
    a_h = to_numpy(a)
    n = a_h.shape[0]
    low = bool(np.any(np.tril(a_h, -1)))
    up = bool(np.any(np.triu(a_h, 1)))
    if not low and not up:
        return "diag"
    if not up:
        return "lower"
    if not low:
        return "upper"
    if n > 3 and not np.any(np.tril(a_h, -2)) and not np.any(np.triu(a_h, 2)):
        return "tridiag"
    if np.iscomplexobj(a_h) and np.array_equal(a_h, a_h.conj().T):
        return "her"
    if np.array_equal(a_h, a_h.T):
        return "sym"
    return "gen"


def _norm1(xp, a):
    return float(xp.abs(a).sum(axis=0).max()) if a.size else 0.0


def _lapack_con(name, a):
    """``(func, a)``: the d or z LAPACK condition estimator for ``a``."""
    from scipy.linalg import lapack as _lp  # noqa: PLC0415

    if a.dtype.kind == "c":
        return getattr(_lp, "z" + name), np.asarray(a, dtype=np.complex128)
    return getattr(_lp, "d" + name), np.asarray(a, dtype=np.float64)


def _rcond_lu(xp, lu_, anorm):
    if xp is not np:
        return None  # CuPy: no gecon on the device; no warning
    gecon, lu_ = _lapack_con("gecon", lu_)
    rc, info = gecon(lu_, anorm, norm="1")
    return float(rc)


def _rcond_chol(xp, c, lower, anorm):
    if xp is not np:
        return None
    pocon, c = _lapack_con("pocon", c)
    rc, info = pocon(c, anorm, uplo="L" if lower else "U")
    return float(rc)


def _rcond_tri(xp, a, lower, unit=False):
    if xp is not np:
        return None
    trcon, a = _lapack_con("trcon", a)
    rc, info = trcon(a, norm="1", uplo="L" if lower else "U", diag="U" if unit else "N")
    return float(rc)


def _full_from_triangle(xp, a, lower, hermitian):
    """The full matrix from the triangle selected by `lower`: symmetric, or
    Hermitian (conjugate mirror, real diagonal: what ``hetrf``/``potrf`` read)."""
    if hermitian and a.dtype.kind == "c":
        tri = xp.tril(a, -1) if lower else xp.triu(a, 1)
        return tri + tri.conj().T + xp.diag(xp.diagonal(a).real).astype(a.dtype)
    return xp.tril(a) + xp.tril(a, -1).T if lower else xp.triu(a) + xp.triu(a, 1).T


def _solve_core(xp, a, b, kind, lower, transposed):
    """Solve one (n, n) system with 2-D ``b``: returns ``(x, rcond)``.

    Raises :class:`_Singular` for an exactly singular matrix (or, for
    ``'pos'``, one that is not positive definite, which SciPy reports the
    same way).
    """
    if kind is None:
        kind = _detect(a)
    n = a.shape[0]
    if kind == "diag":
        d = xp.diagonal(a).astype(work_dtype(xp, a))
        if bool((d == 0).any()):
            raise _Singular
        ad = xp.abs(d)
        return b / d[:, None], float(ad.min() / ad.max())
    if kind in ("lower", "upper"):
        low = kind == "lower"
        if bool((xp.diagonal(a) == 0).any()):
            raise _Singular
        with emulating():
            x = lapack.trsm(a, b, lower=low, trans=1 if transposed else 0,
                            check_finite=False, **lapack_kw(n))
        return x, _rcond_tri(xp, a, low)
    if kind == "pos":
        try:
            c = _potrf(xp, a, bool(lower))
        except LinAlgError:
            raise _Singular from None
        full = _full_from_triangle(xp, a, lower, True)
        # b may be a view of the caller's array (a broadcast): never overwritten
        # (NumPy's read-only broadcast views are copied anyway; CuPy's are writable)
        return _potrs(c, b, bool(lower), False), _rcond_chol(xp, c, lower, _norm1(xp, full))
    # 'gen', 'sym', 'her', 'tridiag': LU with partial pivoting (see solve's Notes)
    if kind in ("sym", "her"):
        a = _full_from_triangle(xp, a, lower, kind == "her")
    lu_, piv, info = _getrf(xp, a)
    if info > 0:
        raise _Singular
    rc = _rcond_lu(xp, lu_, _norm1(xp, a.T if transposed else a))
    if rc == 0:
        raise _Singular
    return _getrs(lu_, piv, b, trans=1 if transposed else 0, overwrite_b=False), rc


def _emit(singular, ill):
    """SciPy 1.17's error / warning texts (``_format_emit_errors_warnings``)."""
    if singular:
        raise LinAlgError(f"A singular matrix detected: slice(s) {singular} are singular.")
    if ill:
        txt = ",".join(f"slice {i} has rcond = {rc}" for i, rc in ill)
        # user -> solve / inv -> _per_slice -> _emit
        warnings.warn(f"An ill-conditioned matrix detected: {txt}.", LinAlgWarning,
                      stacklevel=4)


def _per_slice(batch_shape, core, out):
    """``out[idx], rcond = core(idx)`` over the batch; then SciPy's error /
    warning for the singular and ill-conditioned slices (as solve / inv do)."""
    singular, ill = [], []
    for i, idx in enumerate(np.ndindex(*batch_shape)):
        try:
            xi, rc = core(idx)
        except _Singular:
            singular.append(i)
            continue
        out[idx] = xi
        if rc is not None and not rc >= _EPS:
            ill.append((i, rc))
    _emit(singular, ill)


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False):
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

    Returns
    -------
    x : (..., N, NRHS) ndarray
        The solution array (float32 if `a` and `b` are float32, complex64 /
        complex128 if either is complex, else float64).

    Raises
    ------
    ValueError
        If size mismatches detected or input a is not square.
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
    General, symmetric, Hermitian and tridiagonal matrices: blocked LU with
    partial pivoting (:func:`ozlinalg.lapack.getrf`) and ``getrs``; SciPy uses
    Bunch-Kaufman (``sytrf``/``hetrf``) for symmetric and Hermitian matrices,
    which has no blocked emulated version here, so the matrix completed from
    the triangle selected by `lower` (mirrored; conjugated, with a real
    diagonal, for ``'her'``) is solved by LU. Complex input is computed in
    complex128 (complex emulated products, ``z`` LAPACK panels). Positive definite: blocked Cholesky
    (``potrf``/``potrs``). Triangular: blocked ``trsm``. Diagonal: a division.
    All BLAS-3 work runs on the emulated DGEMM (Ozaki scheme). ``'banded'`` is
    delegated to :func:`scipy.linalg.solve` (native; no BLAS-3 work to emulate).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import solve
    >>> a = np.array([[3., 2., 0.], [1., -1., 0.], [0., 5., 1.]])
    >>> solve(a, np.array([2., 4., -1.]))
    array([ 2., -2.,  9.])
    """
    if assume_a not in _SOLVE_KINDS:
        raise ValueError(f"{assume_a} is not a recognized matrix structure")
    kind = _SOLVE_KINDS[assume_a]
    if kind == "banded":
        import scipy.linalg  # noqa: PLC0415

        orig = getattr(scipy.linalg.solve, "__wrapped__", scipy.linalg.solve)
        return orig(a, b, lower=lower, overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                    check_finite=check_finite, assume_a=assume_a, transposed=transposed)
    xp, a1 = as_array(a, check_finite=check_finite)
    _, b1 = as_array(b, check_finite=check_finite, argname="b")
    if a1.ndim < 2:
        a1 = a1.reshape((1,) * (2 - a1.ndim) + a1.shape)
    if b1.ndim == 0:
        b1 = b1.reshape(1)
    if a1.shape[-1] != a1.shape[-2]:
        raise ValueError(f"Expected square matrix, got a1.shape={a1.shape}")
    dt = result_dtype(xp, a1, b1)
    if transposed and xp.dtype(dt).kind == "c":
        raise NotImplementedError("scipy.linalg.solve can currently not solve a^T x = b or "
                                  "a^H x = b for complex matrices.")
    b_is_1d = b1.ndim == 1
    if b_is_1d:
        b1 = b1[:, None]
    a_is_scalar = a1.size == 1
    if b1.shape[-2] != a1.shape[-1] and not a_is_scalar:
        raise ValueError(f"incompatible shapes: a1.shape={a1.shape} and b1.shape={b1.shape}")
    batch = np.broadcast_shapes(a1.shape[:-2], b1.shape[:-2])
    a1 = xp.broadcast_to(a1, batch + a1.shape[-2:])
    b1 = xp.broadcast_to(b1, batch + b1.shape[-2:])
    if a1.size == 0 or b1.size == 0:
        x = xp.empty(b1.shape, dtype=dt)
        return x[..., 0] if b_is_1d else x
    if a_is_scalar:
        if bool(a1.reshape(()) == 0):
            raise LinAlgError("A singular matrix detected.")
        out = cast(b1 / a1, dt)
        return out[..., 0] if b_is_1d else out
    x = xp.empty(b1.shape, dtype=work_dtype(xp, a1, b1))
    _per_slice(batch, lambda idx: _solve_core(xp, a1[idx], b1[idx], kind, lower, transposed),
               x)
    x = cast(x, dt)
    return x[..., 0] if b_is_1d else x


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
    xp, a1 = as_array(a, check_finite=check_finite)
    _, b1 = as_array(b, check_finite=check_finite, argname="b")
    if a1.ndim != 2 or a1.shape[0] != a1.shape[1]:
        raise ValueError("expected square matrix")
    if b1.ndim == 0 or a1.shape[0] != b1.shape[0]:
        raise ValueError(f"shapes of a {a1.shape} and b {b1.shape} are incompatible")
    dt = result_dtype(xp, a1, b1)
    if b1.size == 0:
        return xp.empty_like(b1, dtype=dt)
    t = {"N": 0, "T": 1, "C": 2}.get(trans, trans)
    if t not in (0, 1, 2):
        raise ValueError(f"trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    with emulating():
        x = lapack.trsm(a1, b1, lower=bool(lower), trans=t, unit_diagonal=bool(unit_diagonal),
                        overwrite_b=overwrite_b and b1 is b, check_finite=False,
                        **lapack_kw(a1.shape[0]))
    return cast(x, dt)


def _inv_core(xp, a, kind, lower):
    n = a.shape[0]
    if kind is None:
        kind = _detect(a)
        if kind == "tridiag":
            kind = "gen"
    eye = xp.eye(n)
    if kind in ("diag", "lower", "upper", "pos", "sym", "her", "gen"):
        if kind in ("sym", "her") and n:  # complete the triangle SciPy reads
            a = _full_from_triangle(xp, a, lower, kind == "her")
        x, rc = _solve_core(xp, a, eye, "gen" if kind in ("sym", "her") else kind, lower,
                            False)
        if kind in ("lower", "upper"):
            x = xp.tril(x) if kind == "lower" else xp.triu(x)
        return x, rc
    raise AssertionError(kind)


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
    BLAS-3 work on the emulated DGEMM (Ozaki scheme).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import inv
    >>> inv(np.array([[1., 2.], [3., 4.]]))
    array([[-2. ,  1. ],
           [ 1.5, -0.5]])
    """
    xp, a1 = as_array(a, check_finite=check_finite)
    if a1.ndim < 2:
        raise ValueError(f"Expected at least ndim=2, got a1.ndim={a1.ndim}")
    if a1.shape[-1] != a1.shape[-2]:
        raise ValueError(f"Expected square matrix, got a1.shape={a1.shape}")
    if assume_a not in _INV_KINDS:
        raise KeyError(assume_a)
    kind = _INV_KINDS[assume_a]
    dt = result_dtype(xp, a1)
    if a1.size == 0:
        return xp.empty_like(a1, dtype=dt)
    out = xp.empty(a1.shape, dtype=work_dtype(xp, a1))
    _per_slice(a1.shape[:-2], lambda idx: _inv_core(xp, a1[idx], kind, lower), out)
    return cast(out, dt)


def _det_core(xp, a):
    lu_, piv, _ = _getrf(xp, a)
    piv_h = to_numpy(piv)
    sign = -1.0 if int(np.count_nonzero(piv_h != np.arange(piv_h.size))) % 2 else 1.0
    return sign * xp.prod(xp.diagonal(lu_))


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
    batch = a1.shape[:-2]
    wdt = work_dtype(xp, a1)
    if a1.shape[-1] == 0:
        out = xp.ones(batch, dtype=wdt)
    elif not batch:
        out = _det_core(xp, a1)
    elif 0 in batch:
        out = xp.empty(batch, dtype=wdt)
    else:
        out = batch_loop(xp, lambda m: _det_core(xp, m), [a1], [2])
    if xp is np and out.ndim == 0:
        return np.complex128(out) if wdt == np.complex128 else np.float64(out)
    return out


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
        are considered zero (default: machine epsilon).
    overwrite_a, overwrite_b : bool, optional
        Accepted for compatibility (the inputs are never modified).
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
    natively (``min(M,N)^3`` flops beside the emulated ``M N min(M,N)``). If `a` is rank deficient
    (``s[-1] <= cond * s[0]``) the call is delegated to
    :func:`scipy.linalg.lstsq` (native SVD-based ``gelsd``, or the chosen
    driver), whose minimum-norm solution QR cannot give.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import lstsq
    >>> a = np.array([[1., 1.], [1., 2.], [1., 3.]])
    >>> x, res, rank, s = lstsq(a, np.array([1., 2., 2.]))
    >>> rank, bool(np.allclose(x, [2 / 3, 0.5]))
    (2, True)
    """
    xp, a1 = as_array(a, check_finite=check_finite)
    _, b1 = as_array(b, check_finite=check_finite, argname="b")
    if a1.ndim != 2:
        raise ValueError("Input array a should be 2D")
    m, n = a1.shape
    if b1.ndim == 0 or m != b1.shape[0]:
        raise ValueError("Shape mismatch: a and b should have the same number"
                         f" of rows ({m} != {b1.shape[0] if b1.ndim else 1}).")
    driver = "gelsd" if lapack_driver is None else lapack_driver
    if driver not in ("gelsd", "gelsy", "gelss"):
        raise ValueError(f'LAPACK driver "{driver}" is not found')
    dt = result_dtype(xp, a1, b1)
    rdt = real_dtype(xp, dt)
    wdt = work_dtype(xp, a1, b1)
    if m == 0 or n == 0:
        x = xp.zeros((n,) + b1.shape[1:], dtype=dt)
        res = (xp.linalg.norm(b1, axis=0) ** 2) if n == 0 else xp.empty((0,))
        return x, res, 0, xp.empty((0,))
    k = min(m, n)
    vec = b1.ndim == 1
    b2 = b1[:, None] if vec else b1
    tall = m >= n
    qr_, tau = _geqrf(a1 if tall else (a1.conj().T if a1.dtype.kind == "c" else a1.T))
    r = xp.triu(qr_[:k, :k])
    s = np.linalg.svd(to_numpy(r), compute_uv=False)  # native, k x k
    rcond = _EPS if cond is None or cond < 0 else float(cond)
    rank = int(np.count_nonzero(s > rcond * s[0])) if s[0] > 0 else 0
    if rank < k:
        import scipy.linalg  # noqa: PLC0415

        orig = getattr(scipy.linalg.lstsq, "__wrapped__", scipy.linalg.lstsq)
        res = orig(to_numpy(a1), to_numpy(b1), cond=cond, check_finite=False,
                   lapack_driver=lapack_driver)
        return res if xp is np else tuple(
            xp.asarray(v) if isinstance(v, np.ndarray) else v for v in res)
    if tall:
        qtb = _ormqr(qr_, tau, xp.asarray(b2, dtype=wdt), side="L", trans="C")
        with emulating():
            x = lapack.trsm(r, qtb[:n], lower=False, check_finite=False, **lapack_kw(n))
        if m > n and driver != "gelsy":
            tail = qtb[n:]
            resid = ((tail.real ** 2 + tail.imag ** 2) if tail.dtype.kind == "c"
                     else tail ** 2).sum(axis=0)
        else:
            resid = xp.empty((0,), dtype=dt)  # SciPy: empty residues in x's dtype
    else:
        with emulating():
            y = lapack.trsm(r, xp.asarray(b2, dtype=wdt), lower=False, trans=2,
                            check_finite=False, **lapack_kw(m))
        ypad = xp.zeros((n, y.shape[1]), dtype=y.dtype)
        ypad[:m] = y
        x = _ormqr(qr_, tau, ypad, side="L", trans="N")
        resid = xp.empty((0,), dtype=dt)  # SciPy: empty residues in x's dtype
    x = cast(x[:, 0] if vec else x, dt)
    if resid.size:
        resid = cast(resid, rdt)
        if vec:
            resid = resid[0]
    s_out = None if driver == "gelsy" else cast(xp.asarray(s), rdt)
    return x, resid, rank, s_out

