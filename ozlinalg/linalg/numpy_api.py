"""The ``numpy.linalg``-compatible functions of :mod:`ozlinalg.numpy_linalg` (their
public face, which documents their semantics): ``solve``, ``inv``, ``det``, ``slogdet``,
``cholesky``, ``qr``, ``lstsq``, ``matmul``, ``multi_dot`` here; ``eigh``, ``eigvalsh``,
``svd``, ``pinv`` and ``matrix_rank`` from :mod:`._numpy_spectral`.
"""
from __future__ import annotations

import numpy as np

from .._array import to_numpy
from .._emulable import emulable
from .._matmul import matmul as _emulated_matmul
from .._options import resolve
from ._basic import _rank_cutoff, refines
from ._condition import gecon, norm1, numerically_singular, pocon
from ._decomp_cholesky import _potrf
from ._decomp_lu import _getrf, _getrs
from ._decomp_qr import _geqrf, _orgqr
from ._numpy_spectral import eigh, eigvalsh, matrix_rank, pinv, svd
from ._refine import refined_solve
from ._validation import (
    LinAlgError,
    batch_loop,
    numpy_asarrays,
    numpy_native,
    numpy_real_t,
    numpy_result_t,
    numpy_wraps,
)

__all__ = ["solve", "inv", "det", "slogdet", "cholesky", "qr", "lstsq", "matmul",
           "multi_dot", "eigh", "eigvalsh", "svd", "pinv", "matrix_rank", "LinAlgError"]

_F8 = np.dtype(np.float64)  # NumPy's linalg computes in double whatever the input


class _Native(Exception):
    """A matrix NumPy's LAPACK must settle (numerically singular in double,
    or not positive definite): the whole call goes to the native function."""


def _lu_ornumpy_native(plan, am):
    """Emulated LU of one matrix; :class:`_Native` when it is numerically
    singular (exact zero pivot or rcond below eps), where only LAPACK's own
    arithmetic can say whether NumPy raises "Singular matrix"."""
    xp = plan.xp
    lu_, piv, info = _getrf(plan, am)
    rc = gecon(xp, lu_, norm1(xp, am)) if not info else None
    if numerically_singular(info, rc, _F8):
        raise _Native
    return lu_, piv


def _emulable(*arrays):
    """True when every input is a non-empty array of a dtype the emulation takes
    (bool, integers, float32/64, complex64/128)."""
    for a in arrays:
        if not emulable(a.dtype, half=False) or a.size == 0:
            return False
    return True


def _emulable_real(*arrays):
    """:func:`_emulable` and real (``matmul`` / ``multi_dot`` keep complex native)."""
    return _emulable(*arrays) and not any(a.dtype.kind == "c" for a in arrays)


def _stacked_square(*arrays):
    for a in arrays:
        if a.ndim < 2:
            raise LinAlgError(f"{a.ndim}-dimensional array given. Array must be at least "
                              "two-dimensional")
        if a.shape[-1] != a.shape[-2]:
            raise LinAlgError("Last 2 dimensions of the array must be square")


@numpy_wraps("b")
def solve(a, b, *, refine=False):
    """Solve a linear matrix equation, or system of linear scalar equations.

    Parameters
    ----------
    a : (..., M, M) array_like
        Coefficient matrix.
    b : {(M,), (..., M, K)}, array_like
        Ordinate or "dependent variable" values (NumPy 2.x: `b` is a vector
        only when it is 1-D).
    refine : {False, True, "auto"}, default: False
        Not in NumPy: the refined solve of :func:`ozlinalg.linalg.solve` (LU at a
        reduced count, refined in FP64) for each matrix of the stack; ``"auto"`` where
        :func:`ozlinalg.linalg._basic.refines` says it can pay. The backend passes
        ``True`` where the tuning says the refined solve pays (docs/tuning.md).

    Returns
    -------
    x : {(..., M,), (..., M, K)} ndarray
        Solution to the system a x = b.

    Raises
    ------
    numpy.linalg.LinAlgError
        If `a` is singular or not square.

    See Also
    --------
    numpy.linalg.solve : the native original.

    Notes
    -----
    Blocked LU with partial pivoting (:func:`ozlinalg.lapack.getrf`) and
    ``getrs`` for each matrix of the broadcast stack, trailing updates and
    triangular couplings on the emulated DGEMM (Ozaki scheme). NumPy calls
    LAPACK ``gesv``, which raises for an exactly zero pivot; so does this.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> la.solve(np.array([[1., 2.], [3., 5.]]), np.array([1., 2.]))
    array([-1.,  1.])
    """
    xp, (a, b) = numpy_asarrays(a, b)
    _stacked_square(a)
    if not _emulable(a, b):
        return numpy_native(xp, "solve")(a, b)
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    if b2.shape[-2] != a.shape[-1]:
        return numpy_native(xp, "solve")(a, b)  # NumPy's own shape error
    rt = numpy_result_t(xp, a, b)
    if refine not in (True, False, "auto"):
        raise ValueError(f"refine must be True, False or 'auto', got {refine!r}")
    plan = resolve(xp)
    if refine == "auto":
        refine = refines(plan, a.shape[-1], b2.shape[-1])

    def one(am, bm):
        if refine:
            got = refined_solve(plan, am, bm, kind="gen", lower=False, transposed=False,
                                dtype=np.dtype(rt))
            if got is not None:  # else: a zero pivot at DGEMM level, NumPy's error below
                return got[0]
        lu_, piv = _lu_ornumpy_native(plan, am)
        return _getrs(plan, lu_, piv, bm, overwrite_b=True, own=True)

    try:
        x = batch_loop(xp, one, [a, b2], [2, 2])
    except _Native:
        return numpy_native(xp, "solve")(a, b)
    x = x.astype(rt, copy=False)
    return x[..., 0] if vec else x


@numpy_wraps("a")
def inv(a):
    """Compute the inverse of a matrix (or of each matrix of a stack).

    Parameters
    ----------
    a : (..., M, M) array_like
        Matrix to be inverted.

    Returns
    -------
    ainv : (..., M, M) ndarray
        Inverse of the matrix `a`.

    Raises
    ------
    numpy.linalg.LinAlgError
        If `a` is not square or inversion fails (``"Singular matrix"``).

    See Also
    --------
    numpy.linalg.inv : the native original.

    Notes
    -----
    Blocked LU (``getrf``) and ``getrs`` on the identity, BLAS-3 work on the
    emulated DGEMM (Ozaki scheme).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> la.inv(np.array([[1., 2.], [3., 4.]]))
    array([[-2. ,  1. ],
           [ 1.5, -0.5]])
    """
    xp, (a,) = numpy_asarrays(a)
    _stacked_square(a)
    if not _emulable(a):
        return numpy_native(xp, "inv")(a)
    n = a.shape[-1]
    plan = resolve(xp)

    def one(am):
        lu_, piv = _lu_ornumpy_native(plan, am)
        return _getrs(plan, lu_, piv, xp.eye(n, dtype=lu_.dtype), overwrite_b=True,
                      own=True)

    try:
        return batch_loop(xp, one, [a], [2]).astype(numpy_result_t(xp, a), copy=False)
    except _Native:
        return numpy_native(xp, "inv")(a)


def _lu_sign_logdet(plan, am):
    xp = plan.xp
    lu_, piv, _ = _getrf(plan, am)
    d = xp.diagonal(lu_)
    piv_h = to_numpy(piv)
    sign = -1.0 if int(np.count_nonzero(piv_h != np.arange(piv_h.size))) % 2 else 1.0
    if d.dtype.kind == "c":  # sign: a complex number of modulus 1 (or 0)
        ad = xp.abs(d)
        if bool((ad == 0).any()):
            return xp.asarray(0j), xp.asarray(-np.inf)
        return xp.asarray(sign * complex(xp.prod(d / ad))), xp.sum(xp.log(ad))
    sign = sign * float(xp.prod(xp.sign(d)))
    if sign == 0:
        return xp.asarray(0.0), xp.asarray(-np.inf)
    return xp.asarray(sign), xp.sum(xp.log(xp.abs(d)))


def slogdet(a):
    """Compute the sign and (natural) logarithm of the determinant of an array.

    Parameters
    ----------
    a : (..., M, M) array_like
        Input array, has to be a square 2-D array (or a stack).

    Returns
    -------
    A namedtuple with the following attributes:

    sign : (...) array_like
        A number representing the sign of the determinant: 1, 0 or -1 for
        real input; for complex input a complex number of absolute value 1
        (or 0).
    logabsdet : (...) array_like
        The natural log of the absolute value of the determinant (``-inf``
        when the sign is 0).

    See Also
    --------
    numpy.linalg.slogdet : the native original.

    Notes
    -----
    Blocked LU with partial pivoting (``getrf``, emulated trailing updates);
    the sign from the pivots and U's diagonal, the log from the sum of
    ``log|u_ii|`` (no overflow), as NumPy.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> sign, logdet = la.slogdet(np.array([[1., 2.], [3., 4.]]))
    >>> float(sign), bool(np.isclose(logdet, np.log(2.0)))
    (-1.0, True)
    """
    xp, (a,) = numpy_asarrays(a)
    _stacked_square(a)
    if not _emulable(a):
        return numpy_native(xp, "slogdet")(a)
    rt = numpy_result_t(xp, a)
    plan = resolve(xp)
    sign, logdet = batch_loop(xp, lambda m: _lu_sign_logdet(plan, m), [a], [2])
    sign, logdet = sign.astype(rt), logdet.astype(numpy_real_t(xp, rt))
    if sign.ndim == 0 and xp is np:
        sign, logdet = sign[()], logdet[()]
    from numpy.linalg._linalg import SlogdetResult  # noqa: PLC0415

    return SlogdetResult(sign, logdet)


def det(a):
    """Compute the determinant of an array.

    Parameters
    ----------
    a : (..., M, M) array_like
        Input array to compute determinants for.

    Returns
    -------
    det : (...) array_like
        Determinant of `a` (float32 for float32 input, as NumPy).

    See Also
    --------
    numpy.linalg.det : the native original.

    Notes
    -----
    Blocked LU with partial pivoting (``getrf``, emulated trailing updates),
    then the product of U's diagonal and the sign of the permutation.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> float(la.det(np.array([[1., 2.], [3., 4.]])))
    -2.0
    """
    xp, (a,) = numpy_asarrays(a)
    _stacked_square(a)
    if not _emulable(a):
        return numpy_native(xp, "det")(a)
    rt = numpy_result_t(xp, a)
    plan = resolve(xp)

    def one(am):
        lu_, piv, _ = _getrf(plan, am)
        piv_h = to_numpy(piv)
        sign = -1.0 if int(np.count_nonzero(piv_h != np.arange(piv_h.size))) % 2 else 1.0
        return sign * xp.prod(xp.diagonal(lu_))

    d = batch_loop(xp, one, [a], [2]).astype(rt)
    return d[()] if (d.ndim == 0 and xp is np) else d


@numpy_wraps("a")
def cholesky(a, /, *, upper=False):
    """Cholesky decomposition (NumPy 2.x signature).

    Return the lower or upper Cholesky decomposition, ``L * L.H`` or
    ``U.H * U``, of the square matrix ``a`` (real symmetric or complex
    Hermitian).

    Parameters
    ----------
    a : (..., M, M) array_like
        Symmetric positive-definite input matrix. Only the lower triangle
        (or the upper one, with `upper`) is read.
    upper : bool
        If ``True``, the result is the upper-triangular Cholesky factor.
        If ``False`` (default), the lower-triangular one.

    Returns
    -------
    L : (..., M, M) array_like
        Lower or upper-triangular Cholesky factor of `a`.

    Raises
    ------
    numpy.linalg.LinAlgError
        ``"Matrix is not positive definite"`` if the decomposition fails.

    See Also
    --------
    numpy.linalg.cholesky : the native original.

    Notes
    -----
    Blocked right-looking Cholesky (:func:`ozlinalg.lapack.potrf`): diagonal
    blocks natively, panel solve and SYRK trailing update on the emulated
    DGEMM (Ozaki scheme).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> la.cholesky(np.array([[4., 2.], [2., 5.]]))
    array([[2., 0.],
           [1., 2.]])
    """
    xp, (a,) = numpy_asarrays(a)
    _stacked_square(a)
    if not _emulable(a):
        return numpy_native(xp, "cholesky")(a, upper=upper)
    plan = resolve(xp)

    def one(am):
        try:
            c = _potrf(plan, am, not upper)
        except LinAlgError:
            raise _Native from None
        full = xp.tril(am) + xp.tril(am, -1).conj().T if not upper else \
            xp.triu(am) + xp.triu(am, 1).conj().T
        if numerically_singular(0, pocon(xp, c, not upper, norm1(xp, full)), _F8):
            raise _Native
        return c

    try:
        return batch_loop(xp, one, [a], [2]).astype(numpy_result_t(xp, a), copy=False)
    except _Native:  # not positive definite (or nearly): LAPACK's verdict
        return numpy_native(xp, "cholesky")(a, upper=upper)



def _qr_wrapped(result):
    """The results NumPy's qr wraps: R alone, h of 'raw' (not tau), Q and R."""
    if not isinstance(result, tuple):
        return None
    return (0,) if type(result) is tuple else (0, 1)


@numpy_wraps("a", _qr_wrapped)
def qr(a, mode="reduced"):
    """Compute the qr factorization of a matrix (or a stack), NumPy's modes.

    Parameters
    ----------
    a : array_like, shape (..., M, N)
        An array-like object with the dimensionality of at least 2.
    mode : {'reduced', 'complete', 'r', 'raw'}, optional, default: 'reduced'
        If K = min(M, N), then 'reduced' returns Q, R with dimensions
        (..., M, K), (..., K, N); 'complete' returns Q, R with dimensions
        (..., M, M), (..., M, N); 'r' returns R only with dimensions
        (..., K, N); 'raw' returns h, tau with dimensions (..., N, M), (..., K,).
        The deprecated 'full'/'economic' spellings go to native NumPy.

    Returns
    -------
    QRResult(Q, R), or R (mode 'r'), or (h, tau) (mode 'raw').

    Raises
    ------
    numpy.linalg.LinAlgError
        For a 0- or 1-dimensional `a`.

    See Also
    --------
    numpy.linalg.qr : the native original.

    Notes
    -----
    Blocked Householder QR (LAPACK ``geqrf``, :func:`ozlinalg.lapack.geqrf`)
    with compact-WY block reflectors applied through the emulated DGEMM;
    Q formed by ``orgqr`` the same way. ``'raw'`` returns LAPACK's compact
    form transposed, as NumPy does.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> a = np.random.default_rng(0).standard_normal((5, 3))
    >>> q, r = la.qr(a)
    >>> bool(np.allclose(q @ r, a)), q.shape
    (True, (5, 3))
    """
    xp, (a,) = numpy_asarrays(a)
    if mode not in ("reduced", "complete", "r", "raw"):
        return numpy_native(xp, "qr")(a, mode=mode)
    if a.ndim < 2:
        raise LinAlgError(f"{a.ndim}-dimensional array given. Array must be at least "
                          "two-dimensional")
    if not _emulable(a):
        return numpy_native(xp, "qr")(a, mode=mode)
    rt = numpy_result_t(xp, a)
    m, n = a.shape[-2:]
    k = min(m, n)
    mc = m if (mode == "complete" and m > n) else k
    plan = resolve(xp)

    def one(am):
        h, tau = _geqrf(plan, am)
        if mode in ("raw", "r"):
            return h, tau
        return h, tau, _orgqr(plan, h, tau, mc)

    out = batch_loop(xp, one, [a], [2])
    # NumPy factors a copy ``a.astype(t, copy=True)`` (a's own memory order)
    # in place; R (and raw mode's factor) are views / triu of that copy, so
    # their memory layout follows the input's
    h = a.astype(xp.complex128 if out[0].dtype.kind == "c" else xp.float64, copy=True)
    h[...] = out[0]
    if mode == "raw":
        return xp.swapaxes(h, -1, -2).astype(rt, copy=False), out[1].astype(rt, copy=False)
    r = xp.triu(h[..., :k if mode == "r" else mc, :]).astype(rt, copy=False)
    if mode == "r":
        return r
    from numpy.linalg._linalg import QRResult  # noqa: PLC0415

    return QRResult(out[2].astype(rt, copy=False), r)


@numpy_wraps("b", lambda result: (0, 1))
def lstsq(a, b, rcond=None):
    """Return the least-squares solution to a linear matrix equation.

    Parameters
    ----------
    a : (M, N) array_like
        "Coefficient" matrix.
    b : {(M,), (M, K)} array_like
        Ordinate or "dependent variable" values.
    rcond : float, optional
        Cut-off ratio for small singular values of `a`; ``None`` (NumPy 2.x
        default) is ``eps * max(M, N)``.

    Returns
    -------
    x : {(N,), (N, K)} ndarray
        Least-squares solution.
    residuals : {(1,), (K,), (0,)} ndarray
        Sums of squared residuals (real also for complex input); empty if
        the rank of `a` is < N or M <= N.
    rank : int
        Rank of matrix `a`.
    s : (min(M, N),) ndarray
        Singular values of `a`.

    Raises
    ------
    numpy.linalg.LinAlgError
        For non-2-D inputs or incompatible dimensions.

    See Also
    --------
    numpy.linalg.lstsq : the native original.

    Notes
    -----
    Full rank: blocked Householder QR (``geqrf``, ``ormqr``, ``trsm``, all
    couplings emulated), ``x = R^{-1} (Q^T b)[:N]`` for M >= N and the
    minimum-norm ``x = Q R^{-T} b`` from the QR of ``a^T`` for M < N; the
    singular values (``s``, ``rank``) are those of the small triangular R,
    computed natively. Rank-deficient `a` (``s[-1] <= rcond * s[0]``): the
    native SVD-based :func:`numpy.linalg.lstsq` (``gelsd``).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> a = np.array([[0., 1.], [1., 1.], [2., 1.], [3., 1.]])
    >>> x, res, rank, s = la.lstsq(a, np.array([-1., 0.2, 0.9, 2.1]))
    >>> bool(np.allclose(x, [1.0, -0.95])), int(rank)
    (True, 2)
    """
    from ._basic import lstsq as _sp_lstsq  # noqa: PLC0415

    xp, (a, b) = numpy_asarrays(a, b)
    native = numpy_native(xp, "lstsq")
    if a.ndim != 2 or b.ndim not in (1, 2) or not _emulable(a, b) \
            or (b.ndim == 2 and b.shape[1] == 0):
        return native(a, b, rcond=rcond)
    m, n = a.shape
    if m != b.shape[0]:
        raise LinAlgError("Incompatible dimensions")
    rc = _F8.type(np.finfo(_F8).eps * max(m, n)) if rcond is None else rcond
    # the gelsd rule NumPy's LAPACK applies (rcond <= 0 or >= 1: unit
    # roundoff), with the scipy layer's lapack_driver='gelsd'; cond=0.5 is
    # within (0, 1), so pass the cutoff itself
    cut = _rank_cutoff("gelsd", rc, _F8)
    a8 = a.astype(np.complex128 if a.dtype.kind == "c" or b.dtype.kind == "c" else np.float64)
    x, res, rank, s = _sp_lstsq(a8, b.astype(a8.dtype) if b.dtype != a8.dtype else b,
                                cond=cut, check_finite=False)
    rt = numpy_result_t(xp, a, b)
    if rank < min(m, n):  # the scipy layer fell back to SVD; use NumPy's own for NumPy's output
        return native(a, b, rcond=rcond)
    rrt = numpy_real_t(xp, rt)
    if rank != n or m <= n:
        res = xp.empty((0,), dtype=rrt)
    else:
        res = xp.atleast_1d(xp.asarray(res)).astype(rrt)
    x = xp.ascontiguousarray(x).astype(rt, copy=False)
    return x, res, np.int32(rank), xp.asarray(s).astype(rrt, copy=False)


def matmul(x1, x2, /):
    """Matrix product of two arrays (``numpy.linalg.matmul``), emulated for floats.

    Parameters
    ----------
    x1, x2 : array_like
        Input arrays (NumPy's matmul shape rules: 1-D, 2-D or stacked).

    Returns
    -------
    out : ndarray
        The product; float32 for two float32 operands, float64 otherwise.

    See Also
    --------
    numpy.linalg.matmul : the native original.
    ozlinalg.matmul : the emulated DGEMM.

    Notes
    -----
    :func:`ozlinalg.matmul` (Ozaki scheme, INT8 slices) for floating
    operands; integer and boolean products are exact natively and stay
    native (NumPy's integer result dtype and wrap-around are kept).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> la.matmul(np.array([[1., 2.]]), np.array([[3.], [4.]]))
    array([[11.]])
    """
    xp, (x1, x2) = numpy_asarrays(x1, x2)
    if not (x1.dtype.kind == "f" or x2.dtype.kind == "f") or not _emulable_real(x1, x2) \
            or x1.ndim == 0 or x2.ndim == 0:
        return xp.matmul(x1, x2)
    rt = numpy_result_t(xp, x1, x2)
    return _emulated_matmul(x1, x2).astype(rt, copy=False)


def _chain_order(dims):
    """NumPy's multi_dot dynamic programme: split points of the cheapest order."""
    n = len(dims) - 1
    m = np.zeros((n, n), dtype=np.float64)
    s = np.empty((n, n), dtype=np.intp)
    for ln in range(1, n):
        for i in range(n - ln):
            j = i + ln
            m[i, j] = np.inf
            for k in range(i, j):
                q = m[i, k] + m[k + 1, j] + dims[i] * dims[k + 1] * dims[j + 1]
                if q < m[i, j]:
                    m[i, j] = q
                    s[i, j] = k
    return s


def multi_dot(arrays, *, out=None):
    """Compute the dot product of two or more arrays in a single function call.

    Parameters
    ----------
    arrays : sequence of array_like
        If the first argument is 1-D it is treated as a row vector. If the
        last argument is 1-D it is treated as a column vector. The other
        arguments must be 2-D.
    out : ndarray, optional
        Output argument (C-contiguous, of the result's shape and dtype).

    Returns
    -------
    output : ndarray
        Returns the dot product of the supplied arrays.

    See Also
    --------
    numpy.linalg.multi_dot : the native original.

    Notes
    -----
    The cheapest parenthesization (NumPy's dynamic programme on the
    dimensions), each product an emulated DGEMM (:func:`ozlinalg.matmul`).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> a = np.ones((3, 4)); b = np.ones((4, 5)); c = np.ones((5, 2))
    >>> la.multi_dot([a, b, c])[0, 0]
    np.float64(20.0)
    """
    n = len(arrays)
    if n < 2:
        raise ValueError("Expecting at least two arrays.")
    xp, arrs = numpy_asarrays(*arrays)
    native = numpy_native(xp, "multi_dot")
    if not _emulable_real(*arrs) or not any(a.dtype.kind == "f" for a in arrs) \
            or any(type(a) is not np.ndarray and isinstance(a, np.ndarray) for a in arrays):
        # (subclasses: NumPy's dot on them decides the result's type)
        return native(arrays, out=out)
    ndim_first, ndim_last = arrs[0].ndim, arrs[-1].ndim
    if ndim_first == 1:
        arrs[0] = arrs[0][None, :]
    if ndim_last == 1:
        arrs[-1] = arrs[-1][:, None]
    if any(a.ndim != 2 for a in arrs):
        return native(arrays, out=out)  # NumPy's error
    rt = numpy_result_t(xp, *arrs)
    dims = [a.shape[0] for a in arrs] + [arrs[-1].shape[1]]
    if any(dims[i + 1] != arrs[i + 1].shape[0] for i in range(n - 1)):
        return native(arrays, out=out)  # NumPy's shape error
    order = _chain_order(dims)

    def prod(i, j):
        if i == j:
            return arrs[i]
        k = order[i, j]
        return _emulated_matmul(prod(i, k), prod(k + 1, j))

    res = prod(0, n - 1).astype(rt, copy=False)
    if ndim_first == 1 and ndim_last == 1:
        res = res[0, 0]
    elif ndim_first == 1:
        res = res[0]
    elif ndim_last == 1:
        res = res[:, 0]
    if out is not None:
        out[...] = res
        return out
    return res

