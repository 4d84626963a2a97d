"""``numpy.linalg``'s spectral functions on the emulated DGEMM (part of
``ozlinalg.numpy_linalg``): ``eigh``, ``eigvalsh``, ``svd``, ``pinv``, ``matrix_rank``.

NumPy 2.x semantics: stacked inputs ``(..., M, N)``, float32 in -> float32 out,
complex64 -> complex64, other real inputs -> float64, the named tuples
``EighResult`` / ``SVDResult`` (NumPy's own classes), C-contiguous results as
NumPy's gufuncs give, ``pinv``'s ``rcond`` / ``rtol`` and ``matrix_rank``'s
``tol`` / ``rtol`` rules. Each matrix of the stack is decomposed by
:func:`ozlinalg.linalg._spectral.eigh_core` / :func:`~ozlinalg.linalg._spectral.svd_core`
(refinement on the emulated GEMM) in float64 / complex128; ``pinv``'s product
``V diag(1/s) U^H`` is an emulated :func:`ozlinalg.matmul`.

Inputs the emulation does not take are passed to the native NumPy (or CuPy)
function, so that results and errors are exactly NumPy's there: orders below
``Options.min_size`` (0 by default), fewer than two dimensions, non-square matrices
for ``eigh`` / ``eigvalsh`` / ``hermitian=True``, empty matrices, float16 / long
double / object dtypes, and non-finite entries (NumPy's ``eigh`` and ``svd`` do not
check finiteness: its LAPACK decides what NaN / Inf give). A core that raises
``LinAlgError`` (no convergence) hands the call to the native function too, whose
verdict is LAPACK's.
"""
from __future__ import annotations

import numpy as np

from .._emulable import emulable
from .._matmul import product
from .._options import resolve
from ..lapack import work_dtype
from ._spectral import eigh_core, svd_core
from ._validation import (
    LinAlgError,
    batch_loop,
    numpy_asarrays,
    numpy_native,
    numpy_real_t,
    numpy_result_t,
    numpy_wraps,
)

try:  # NumPy 2.x: its own result classes
    from numpy.linalg._linalg import EighResult, SVDResult
except ImportError:  # pragma: no cover (NumPy 1.x has no such classes)
    from typing import Any, NamedTuple

    class EighResult(NamedTuple):
        eigenvalues: Any
        eigenvectors: Any

    class SVDResult(NamedTuple):
        U: Any
        S: Any
        Vh: Any

__all__ = ["eigh", "eigvalsh", "svd", "pinv", "matrix_rank", "EighResult", "SVDResult"]

_NoValue = np._NoValue  # NumPy's "not given" (pinv's rtol default)

def _native(xp, name, *args, **kwargs):
    """The native ``xp.linalg.<name>`` (the original behind a backend shim) called on
    the caller's arguments; CuPy, whose functions lack NumPy 2.x's newer keywords,
    gets only the keywords not at NumPy's defaults."""
    fn = numpy_native(xp, name)
    if xp is not np:
        kwargs = {k: v for k, v in kwargs.items()
                  if not any(v is d for d in _DEFAULTS.get(k, ()))}
    return fn(*args, **kwargs)


#: keyword -> its default values in NumPy's signatures (dropped for CuPy)
_DEFAULTS = {"hermitian": (False,), "rtol": (None, _NoValue), "tol": (None,),
             "rcond": (None,), "full_matrices": (True,), "compute_uv": (True,)}


def _emulates(xp, a, square):
    """The call's plan when the call on `a` is computed here, else None: at least 2-D,
    square where asked, non-empty, of a dtype the emulation takes (not float16), of
    order at least the plan's ``min_order`` (as the SciPy namespace), and finite."""
    if a.ndim < 2 or a.size == 0 or not emulable(a.dtype, half=False):
        return None
    if square and a.shape[-1] != a.shape[-2]:
        return None
    plan = resolve(xp)
    if min(a.shape[-2:]) < plan.min_order:
        return None
    return plan if a.dtype.kind not in "fc" or bool(xp.isfinite(a).all()) else None


def _upper(uplo):
    """``UPLO.upper()`` where it is 'L' or 'U', else None (NumPy's error is NumPy's)."""
    try:
        u = uplo.upper()
    except AttributeError:
        return None
    return u if u in ("L", "U") else None


# -- the stacked cores, in float64 / complex128 ----------------------------------------

def _eigh_work(plan, a, lower, vectors):
    """``(w, v)`` of every matrix of the stack (``v`` None without `vectors`)."""
    xp = plan.xp
    wt = work_dtype(a)

    def one(am):
        return eigh_core(plan, am.astype(wt, copy=True), vectors=vectors, lower=lower)

    return batch_loop(xp, one, [a], [2])


def _svd_work(plan, a, full_matrices, vectors):
    """``(u, s, vh)`` of every matrix of the stack (``u``, ``vh`` None without `vectors`)."""
    xp = plan.xp
    wt = work_dtype(a)

    def one(am):
        return svd_core(plan, am.astype(wt, copy=True), vectors=vectors,
                        full_matrices=full_matrices)

    return batch_loop(xp, one, [a], [2])


def _svd_hermitian(xp, w, v):
    """NumPy's ``svd(hermitian=True)`` from an eigendecomposition (its own steps):
    ``s = |w|`` descending, the signs moved into ``vh``."""
    if v is None:
        return xp.sort(xp.abs(w), axis=-1)[..., ::-1]
    sgn = xp.copysign(1.0, w)  # avoid zero sign
    s = xp.abs(w)
    sidx = xp.argsort(s, axis=-1)[..., ::-1]
    sgn = xp.take_along_axis(sgn, sidx, axis=-1)
    s = xp.take_along_axis(s, sidx, axis=-1)
    u = xp.take_along_axis(v, sidx[..., None, :], axis=-1)
    vt = xp.swapaxes(u * sgn[..., None, :], -1, -2).conjugate()
    return u, s, vt


# -- the public functions ---------------------------------------------------------------

@numpy_wraps("a", lambda result: (1,))
def eigh(a, UPLO="L"):  # noqa: N803 (NumPy's name)
    """Return the eigenvalues and eigenvectors of a complex Hermitian (conjugate
    symmetric) or a real symmetric matrix (or of each matrix of a stack).

    Parameters
    ----------
    a : (..., M, M) array_like
        Hermitian or real symmetric matrices whose eigenvalues and eigenvectors
        are to be computed. Only the triangle `UPLO` names is read.
    UPLO : {'L', 'U'}, optional
        Whether the calculation is done with the lower triangular part of `a`
        ('L', default) or the upper triangular part ('U'); the imaginary part of
        the diagonal is always ignored.

    Returns
    -------
    A namedtuple (``numpy.linalg.EighResult``) with the following attributes:

    eigenvalues : (..., M) ndarray
        The eigenvalues in ascending order, each repeated according to its
        multiplicity (float32 for float32 / complex64 input, else float64).
    eigenvectors : (..., M, M) ndarray
        The column ``eigenvectors[..., :, i]`` is the normalized eigenvector
        corresponding to the eigenvalue ``eigenvalues[..., i]``.

    Raises
    ------
    numpy.linalg.LinAlgError
        If `a` is not square or has fewer than two dimensions, or the
        decomposition does not converge (NumPy's own function decides).

    See Also
    --------
    numpy.linalg.eigh : the native original.
    ozlinalg.linalg.eigh : SciPy's signature.

    Notes
    -----
    Each matrix of the stack is decomposed in FP64 (complex128) by
    :func:`ozlinalg.linalg._spectral.eigh_core`, whose n^3 work is emulated DGEMMs
    (Ozaki scheme); single-precision input is computed in double and rounded.
    Eigenvectors are unique only up to a sign (a phase for complex input): they
    may differ from NumPy's by one.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> w, v = la.eigh(np.array([[2., 1.], [1., 2.]]))
    >>> w
    array([1., 3.])
    >>> bool(np.allclose(np.abs(v), np.sqrt(0.5)))
    True
    """
    xp, (a,) = numpy_asarrays(a)
    up = _upper(UPLO)
    plan = None if up is None else _emulates(xp, a, square=True)
    if plan is None:
        return _native(xp, "eigh", a, UPLO=UPLO)
    try:
        w, v = _eigh_work(plan, a, up == "L", True)
    except LinAlgError:  # no convergence: LAPACK's verdict
        return _native(xp, "eigh", a, UPLO=UPLO)
    rt = numpy_result_t(xp, a)
    return EighResult(w.astype(numpy_real_t(xp, rt), copy=False), v.astype(rt, copy=False))


def eigvalsh(a, UPLO="L"):  # noqa: N803 (NumPy's name)
    """Compute the eigenvalues of a complex Hermitian or real symmetric matrix.

    Parameters
    ----------
    a : (..., M, M) array_like
        A complex- or real-valued matrix (or stack) whose eigenvalues are to be
        computed. Only the triangle `UPLO` names is read.
    UPLO : {'L', 'U'}, optional
        The lower ('L', default) or upper ('U') triangular part of `a`.

    Returns
    -------
    w : (..., M) ndarray
        The eigenvalues in ascending order (float32 for float32 / complex64
        input, else float64).

    Raises
    ------
    numpy.linalg.LinAlgError
        If `a` is not square or has fewer than two dimensions, or the
        decomposition does not converge (NumPy's own function decides).

    See Also
    --------
    numpy.linalg.eigvalsh : the native original.

    Notes
    -----
    :func:`ozlinalg.linalg._spectral.eigh_core` without vectors, per matrix.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> la.eigvalsh(np.array([[2., 1.], [1., 2.]]))
    array([1., 3.])
    """
    xp, (a,) = numpy_asarrays(a)
    up = _upper(UPLO)
    plan = None if up is None else _emulates(xp, a, square=True)
    if plan is None:
        return _native(xp, "eigvalsh", a, UPLO=UPLO)
    try:
        w, _ = _eigh_work(plan, a, up == "L", False)
    except LinAlgError:
        return _native(xp, "eigvalsh", a, UPLO=UPLO)
    return w.astype(numpy_real_t(xp, numpy_result_t(xp, a)), copy=False)


@numpy_wraps("a", lambda result: (0, 2) if isinstance(result, tuple) else ())
def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """Singular Value Decomposition (of a matrix or of each matrix of a stack).

    Parameters
    ----------
    a : (..., M, N) array_like
        A real or complex array with ``a.ndim >= 2``.
    full_matrices : bool, optional
        If True (default), `u` and `vh` have the shapes ``(..., M, M)`` and
        ``(..., N, N)``; otherwise ``(..., M, K)`` and ``(..., K, N)``,
        ``K = min(M, N)``.
    compute_uv : bool, optional
        Whether to compute `u` and `vh` in addition to `s` (default True).
    hermitian : bool, optional
        If True, `a` is assumed to be Hermitian (symmetric if real-valued):
        the decomposition comes from :func:`eigh`, as NumPy's.

    Returns
    -------
    When `compute_uv` is True, a namedtuple (``numpy.linalg.SVDResult``):

    U : { (..., M, M), (..., M, K) } ndarray
        Unitary array(s).
    S : (..., K) ndarray
        The singular values, sorted in descending order.
    Vh : { (..., N, N), (..., K, N) } ndarray
        Unitary array(s).

    When `compute_uv` is False, `S` alone.

    Raises
    ------
    numpy.linalg.LinAlgError
        If `a` has fewer than two dimensions (or is not square with
        `hermitian`), or the SVD does not converge (NumPy's own function decides).

    See Also
    --------
    numpy.linalg.svd : the native original.
    ozlinalg.linalg.svd : SciPy's signature.

    Notes
    -----
    Each matrix is decomposed in FP64 (complex128) by
    :func:`ozlinalg.linalg._spectral.svd_core` (emulated DGEMMs). Singular vectors
    are unique up to a sign (phase), and the trailing columns of a full `u` (rows
    of `vh`) only up to a basis of their subspace: they may differ from NumPy's.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> a = np.array([[3., 0.], [0., -2.], [0., 0.]])
    >>> la.svd(a, compute_uv=False)
    array([3., 2.])
    >>> u, s, vh = la.svd(a, full_matrices=False)
    >>> bool(np.allclose(u * s @ vh, a))
    True
    """
    xp, (a,) = numpy_asarrays(a)
    plan = _emulates(xp, a, square=bool(hermitian))
    if plan is None:
        return _native(xp, "svd", a, full_matrices=full_matrices, compute_uv=compute_uv,
                       hermitian=hermitian)
    rt = numpy_result_t(xp, a)
    if hermitian:  # NumPy's steps on eigh's results, in the result type as NumPy
        if compute_uv:
            w, v = eigh(a)
            return SVDResult(*_svd_hermitian(xp, w, v))
        return _svd_hermitian(xp, eigvalsh(a), None)
    try:
        u, s, vh = _svd_work(plan, a, bool(full_matrices), bool(compute_uv))
    except LinAlgError:  # no convergence: LAPACK's verdict
        return _native(xp, "svd", a, full_matrices=full_matrices, compute_uv=compute_uv,
                       hermitian=hermitian)
    s = s.astype(numpy_real_t(xp, rt), copy=False)
    if not compute_uv:
        return s
    return SVDResult(u.astype(rt, copy=False), s, vh.astype(rt, copy=False))


def _pinv_one(plan, vh, sinv, u):
    """``V diag(sinv) U^H`` of one matrix, over the kept singular values, as one
    emulated product."""
    xp = plan.xp
    keep = sinv != 0
    r = int(xp.count_nonzero(keep))
    if r == 0:
        return xp.zeros((vh.shape[-1], u.shape[-2]), dtype=u.dtype)
    left = vh[keep].conj().T * sinv[keep]
    return product(plan, left, u[:, keep].conj().T)


@numpy_wraps("a")
def pinv(a, rcond=None, hermitian=False, *, rtol=_NoValue):
    """Compute the (Moore-Penrose) pseudo-inverse of a matrix (or of a stack).

    Parameters
    ----------
    a : (..., M, N) array_like
        Matrix or stack of matrices to be pseudo-inverted.
    rcond : (...) array_like of float, optional
        Cutoff for small singular values: those less than or equal to
        ``rcond * largest_singular_value`` are set to zero. Broadcasts against
        the stack. Default: ``1e-15`` (NumPy 2.x, where `rtol` is not given).
    hermitian : bool, optional
        If True, `a` is assumed to be Hermitian (symmetric if real-valued): the
        singular values come from :func:`eigh`, as NumPy's.
    rtol : (...) array_like of float, optional
        Same as `rcond` (the array API's name); not both. ``None`` means
        ``max(M, N) * eps`` of `a`'s dtype.

    Returns
    -------
    B : (..., N, M) ndarray
        The pseudo-inverse of `a` (float32 for float32 input, as NumPy).

    Raises
    ------
    numpy.linalg.LinAlgError
        If the SVD computation does not converge (NumPy's own function decides).
    ValueError
        If both `rcond` and `rtol` are given.

    See Also
    --------
    numpy.linalg.pinv : the native original.
    ozlinalg.linalg.pinv : SciPy's signature.

    Notes
    -----
    The SVD of each matrix (:func:`svd`), NumPy's cutoff rule, then
    ``B = V diag(1/s) U^H`` over the kept singular values as one emulated
    :func:`ozlinalg.matmul` (in FP64 / complex128, rounded once to the result type).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> a = np.array([[1., 2.], [3., 4.], [5., 6.]])
    >>> bool(np.allclose(la.pinv(a) @ a, np.eye(2)))
    True
    """
    xp, (a,) = numpy_asarrays(a)

    def native():
        return _native(xp, "pinv", a, rcond=rcond0, hermitian=hermitian, rtol=rtol)

    rcond0 = rcond
    plan = _emulates(xp, a, square=bool(hermitian))
    if plan is None:
        return native()
    if rcond is None:  # NumPy 2.x's rules, in its order
        if rtol is _NoValue:
            rcond = 1e-15
        elif rtol is None:
            rcond = max(a.shape[-2:]) * np.finfo(a.dtype).eps
        else:
            rcond = rtol
    elif rtol is not _NoValue:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    rcond = xp.asarray(rcond)
    rt = numpy_result_t(xp, a)
    try:
        if hermitian:  # NumPy: the Hermitian SVD of conj(a) (its lower triangle), and
            # B = vt^T diag(1/s) u^T; _pinv_one forms vh^H diag(1/s) u^H: conjugate both
            u, s, vt = _svd_hermitian(xp, *_eigh_work(plan, a.conjugate(), True, True))
            u, vh = u.conjugate(), vt.conjugate()
        else:
            u, s, vh = _svd_work(plan, a, False, True)
    except LinAlgError:  # no convergence: LAPACK's verdict
        return native()
    cutoff = rcond[..., None] * xp.max(s, axis=-1, keepdims=True)
    large = s > cutoff
    if large.shape != s.shape:  # an rcond that does not broadcast into the stack
        return native()
    sinv = xp.where(large, 1.0 / xp.where(large, s, 1.0), 0.0)
    out = batch_loop(xp, lambda vm, sm, um: _pinv_one(plan, vm, sm, um), [vh, sinv, u],
                     [2, 1, 2])
    return out.astype(rt, copy=False)


def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):  # noqa: N803 (NumPy's name)
    """Return matrix rank of array using SVD method (NumPy 2.x).

    Rank of the array is the number of singular values of the array that are
    greater than `tol`.

    Parameters
    ----------
    A : {(M,), (..., M, N)} array_like
        Input vector or stack of matrices.
    tol : (...) array_like, float, optional
        Threshold below which SVD values are considered zero. Default:
        ``S.max() * max(M, N) * eps`` (eps of the singular values' dtype).
    hermitian : bool, optional
        If True, `A` is assumed to be Hermitian (symmetric if real-valued).
    rtol : (...) array_like, float, optional
        Relative tolerance (``rtol * S.max()``); not together with `tol`.

    Returns
    -------
    rank : (...) array_like
        Rank of A.

    See Also
    --------
    numpy.linalg.matrix_rank : the native original.

    Notes
    -----
    The singular values from :func:`svd` (``compute_uv=False``), then NumPy's
    own threshold and count.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg import numpy_linalg as la
    >>> int(la.matrix_rank(np.eye(4))), int(la.matrix_rank(np.ones((3, 3))))
    (4, 1)
    """
    if rtol is not None and tol is not None:
        raise ValueError("`tol` and `rtol` can't be both set.")
    xp, (A,) = numpy_asarrays(A)  # noqa: N806
    if A.ndim < 2:
        return int(not bool(xp.all(A == 0)))
    if _emulates(xp, A, square=bool(hermitian)) is None:
        return _native(xp, "matrix_rank", A, tol=tol, hermitian=hermitian, rtol=rtol)
    S = svd(A, compute_uv=False, hermitian=hermitian)  # noqa: N806
    if tol is None:
        if rtol is None:
            rtol = max(A.shape[-2:]) * np.finfo(S.dtype).eps
        else:
            rtol = xp.asarray(rtol)[..., None]
        tol = S.max(axis=-1, keepdims=True) * rtol  # (NumPy's initial=0: S is not empty)
    else:
        tol = xp.asarray(tol)[..., None]
    return xp.count_nonzero(S > tol, axis=-1)
