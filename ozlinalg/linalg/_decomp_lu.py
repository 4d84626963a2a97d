"""LU decomposition: ``lu_factor``, ``lu_solve``, ``lu`` (``scipy.linalg`` API)."""
from __future__ import annotations

import warnings

import numpy as np

from .. import lapack
from .._options import resolve
from ..lapack import Runner, first_zero_diagonal, work_dtype
from ..lapack._common import work_copy
from ..lapack.lu_one_level import getrf_one_level, getrs_one_level, one_level
from ..lapack.scipy_conventions import (
    as_array,
    c_inplace_target,
    computes_in,
    datacopied,
    deliver,
    f2py_int,
    inplace_target,
    lapack_args,
    lapack_dtype,
    normalize_dtype,
    quiet,
)
from ._condition import gecon, native_routine, norm1, numerically_singular
from ._validation import LinAlgWarning, batched

__all__ = ["lu_factor", "lu_solve", "lu"]


def _one_level_panel(plan, n):
    """The panel width of the LU that :func:`ozlinalg.lapack.getrf` takes in one level
    (:func:`~ozlinalg.lapack.lu_one_level.one_level`) for an order-``n`` NumPy matrix
    under a front door's `plan` (:func:`lapack_args`), or None where it takes another
    route (native below ``plan.min_order``, recursive from 256 on, a device)."""
    if plan.xp is not np:
        return None
    args = lapack_args(plan, n)
    nb = args["block_size"]
    if nb is None or n < args["min_size"] or not one_level(n, n, nb):
        return None
    return nb


def _getrf(plan, a, overwrite_a=False):
    """float64 (complex128) LU of a 2-D array under the call's `plan`:
    ``(lu, piv, info)``, never warns.

    ``info`` is LAPACK's: 1-based index of the first exactly-zero pivot, 0 if none.
    A square matrix of a one-level order (below 256) that is not overwritten runs
    :func:`~ozlinalg.lapack.lu_one_level.getrf_one_level` without
    :func:`ozlinalg.lapack.getrf`'s checks of arguments the front door checked: at
    n = 8 those checks were a fifth of the call.
    """
    nb = None if overwrite_a or a.shape[0] != a.shape[1] else _one_level_panel(plan, a.shape[0])
    if nb is not None:
        lu_ = work_copy(np, a, False)
        piv = np.empty(a.shape[0], dtype=np.int32)
        with quiet():
            info = getrf_one_level(Runner(plan.inside), lu_, nb, piv)
        return lu_, piv, info
    with quiet():
        lu_, piv = lapack.getrf(a, overwrite_a=overwrite_a, check_finite=False, warn=False,
                                **lapack_args(plan, min(a.shape)))
    k = min(lu_.shape)
    z = first_zero_diagonal(plan.xp, lu_[:k, :k]) if k else -1
    return lu_, piv, z + 1


def _getrs(plan, lu_, piv, b, trans=0, overwrite_b=False, own=False):
    """:func:`ozlinalg.lapack.getrs` under the call's `plan`. ``own``: ``lu_`` and
    ``piv`` are :func:`_getrf`'s own output (not the caller's, so not checked again):
    a one-level order then runs
    :func:`~ozlinalg.lapack.lu_one_level.getrs_one_level` directly."""
    nb = _one_level_panel(plan, lu_.shape[0]) if own and not trans and b.size else None
    if nb is not None:
        x = work_copy(np, b, overwrite_b, work_dtype(lu_, b))
        with quiet():
            getrs_one_level(Runner(plan.inside), lu_, x[:, None] if x.ndim == 1 else x, nb,
                            piv)
        return x
    with quiet():
        return lapack.getrs(lu_, piv, b, trans=trans, overwrite_b=overwrite_b,
                            check_finite=False, **lapack_args(plan, lu_.shape[0]))


def _getrf_lapack_verdict(plan, a, dtype, target=None):
    """LU of the 2-D ``a`` whose singular / not singular verdict is LAPACK's.

    The factorization is emulated, in ``target`` when given (the caller's
    float64 / complex128 buffer), else in a copy. When the factors are
    numerically singular at ``dtype``'s precision (an exact zero pivot, or a
    square matrix whose rcond is below ``eps(dtype)``), the factorization is
    redone by native LAPACK ``?getrf`` in ``dtype``, as SciPy computes it,
    unless ``a`` was factored in place (its data is gone; the emulated
    factors stand). Returns ``(lu, piv, info)``; ``lu`` is float64 /
    complex128, or ``dtype`` after a native redo.
    """
    xp = plan.xp
    if target is not None:
        return _getrf(plan, target, True)
    anorm = norm1(xp, a) if a.shape[0] == a.shape[1] and xp is np else None
    lu_, piv, info = _getrf(plan, a)
    rc = gecon(xp, lu_, anorm) if anorm is not None and not info else None
    if numerically_singular(info, rc, dtype) and xp is np:
        lu_, piv, info = native_routine("getrf", dtype)(np.asarray(a, dtype=dtype))
        piv = piv.astype(np.int32, copy=False)
    return lu_, piv, int(info)


@batched(("a", 2))
def lu_factor(a, overwrite_a=False, check_finite=True):
    """Compute the pivoted LU decomposition of a matrix.

    The decomposition is ``A = P L U`` where P is a permutation matrix, L
    lower triangular with unit diagonal elements, and U upper triangular.

    Parameters
    ----------
    a : (M, N) array_like
        Matrix to decompose (real or complex; a stack of matrices is factored
        slice by slice, as in SciPy).
    overwrite_a : bool, optional
        Whether to overwrite data in A (may increase performance). As in
        SciPy, the factors are written into `a` (and `lu` is `a`) when it is
        a Fortran-contiguous array of the routine's dtype; a float64 /
        complex128 `a` is then factored in place, without a second copy.
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.

    Returns
    -------
    lu : (M, N) ndarray
        Matrix containing U in its upper triangle, and L in its lower
        triangle. The unit diagonal elements of L are not stored. float32 for
        float32 input, complex64 for complex64, complex128 for other complex
        input, float64 otherwise.
    piv : (K,) ndarray of int32
        Pivot indices representing the permutation matrix P: row i of
        matrix was interchanged with row piv[i]. Of shape ``(K,)``, with
        ``K = min(M, N)``.

    Warns
    -----
    scipy.linalg.LinAlgWarning
        ``"Diagonal number %d is exactly zero. Singular matrix."`` when a
        pivot is exactly zero (as SciPy).

    See Also
    --------
    scipy.linalg.lu_factor : the native original.
    ozlinalg.lapack.getrf : the blocked routine underneath.

    Notes
    -----
    Right-looking blocked LU with partial pivoting (LAPACK ``getrf``): panels
    are factored natively, the triangular-solve couplings and trailing updates
    ``A22 -= L21 U12`` run on the emulated DGEMM (Ozaki scheme, INT8 slices),
    with ``slices`` / ``method`` from :func:`ozlinalg.get_options`. The
    computation is in float64 whatever the input dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import lu_factor
    >>> lu, piv = lu_factor(np.array([[2., 5., 8.], [5., 2., 2.], [7., 5., 6.]]))
    >>> piv
    array([2, 2, 2], dtype=int32)
    """
    xp, a1 = as_array(a, check_finite=check_finite)
    if a1.size == 0:
        return xp.empty_like(a1), xp.arange(0, dtype=xp.int32)
    if a1.ndim == 1:  # LAPACK's wrapper takes a vector as one column
        lu_, piv = lu_factor(a1[:, None], overwrite_a=overwrite_a, check_finite=False)
        return lu_[:, 0], piv
    dt = lapack_dtype(a1)
    target = inplace_target(xp, a1, overwrite_a or datacopied(a1, a), dt)
    lu_, piv, info = _getrf_lapack_verdict(
        resolve(xp), a1, dt, target if computes_in(xp, target) else None)
    if info > 0:
        warnings.warn(f"Diagonal number {info} is exactly zero. Singular matrix.",
                      LinAlgWarning, stacklevel=2)
    return deliver(xp, lu_, target, dt), xp.asarray(piv)


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve an equation system, a x = b, given the LU factorization of a.

    Parameters
    ----------
    lu_and_piv : (lu, piv)
        Factorization of the coefficient matrix a, as given by lu_factor.
    b : array
        Right-hand side.
    trans : {0, 1, 2}, optional
        Type of system to solve: 0 ``a x = b``, 1 ``a^T x = b``, 2 ``a^H x = b``
        (the conjugate transpose; the same as 1 for real matrices). Converted
        as SciPy's LAPACK wrapper does (``True`` is 1, None is 0; 'N' and
        values outside 0..2 are rejected).
    overwrite_b : bool, optional
        Whether to overwrite data in b (may increase performance): as in
        SciPy, the solution is written into `b` when it is a
        Fortran-contiguous (or contiguous 1-D) array of the routine's dtype.
    check_finite : bool, optional
        Whether to check that the input matrices contain only finite numbers.

    Returns
    -------
    x : array
        Solution to the system (float32 if both `lu` and `b` are float32,
        complex if either is complex, as SciPy).

    See Also
    --------
    scipy.linalg.lu_solve : the native original.

    Notes
    -----
    LAPACK ``getrs``: the row interchanges, then two blocked triangular solves
    (:func:`ozlinalg.lapack.trsm`) whose off-diagonal couplings are emulated
    DGEMMs (Ozaki scheme). As LAPACK, a zero pivot in `lu` gives Inf / NaN
    in the solution, not an error. Stacked `lu`, `piv` and `b` broadcast
    over their batch axes as in SciPy 1.17.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import lu_factor, lu_solve
    >>> a = np.array([[2., 5., 8.], [5., 2., 2.], [7., 5., 6.]])
    >>> x = lu_solve(lu_factor(a), np.array([1., 1., 1.]))
    >>> bool(np.allclose(a @ x, 1.0))
    True
    """
    lu_, piv = lu_and_piv
    return _lu_solve(lu_, piv, b, trans=trans, overwrite_b=overwrite_b,
                     check_finite=check_finite)


@batched(("lu", 2), ("piv", 1), ("b", "1|2"))
def _lu_solve(lu, piv, b, trans, overwrite_b, check_finite):
    xp, b1 = as_array(b, check_finite=check_finite, argname="b")
    lu1 = xp.asarray(lu)
    if lu1.shape[0] != b1.shape[0]:
        raise ValueError(f"Shapes of lu {lu1.shape} and b {b1.shape} are incompatible")
    dt = lapack_dtype(lu1, b1)
    if b1.size == 0:
        return xp.empty_like(b1, dtype=dt)
    t = f2py_int(trans, "dgetrs", "1st", "trans")
    target = inplace_target(xp, b1, overwrite_b or datacopied(b1, b), dt)
    direct = computes_in(xp, target)
    x = _getrs(resolve(xp), lu1, piv, target if direct else b1, trans=t, overwrite_b=direct)
    return deliver(xp, x, target, dt)


def _perm_from_piv(piv, m):
    """Row order ``perm`` with ``A[perm] = L U`` from LAPACK's interchanges."""
    perm = np.arange(m)
    for i, p in enumerate(np.asarray(piv)):
        if p != i:
            perm[i], perm[p] = perm[p], perm[i]
    return perm


def lu(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    """Compute LU decomposition of a matrix with partial pivoting.

    The decomposition satisfies ``A = P @ L @ U``.

    Parameters
    ----------
    a : (..., M, N) array_like
        Array to decompose.
    permute_l : bool, optional
        Perform the multiplication P*L (Default: do not permute).
    overwrite_a : bool, optional
        Whether to overwrite data in a (may improve performance).
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.
    p_indices : bool, optional
        If ``True`` the permutation information is returned as row indices.

    Returns
    -------
    (p, l, u) or (pl, u)
        As :func:`scipy.linalg.lu`: ``p`` (M, M) permutation matrix (or (M,)
        int32 row indices with `p_indices`), ``l`` (M, K) unit lower
        triangular or trapezoidal, ``u`` (K, N) upper triangular or
        trapezoidal, ``pl`` = ``p @ l``; ``K = min(M, N)``.

    See Also
    --------
    scipy.linalg.lu : the native original.

    Notes
    -----
    The factors come from :func:`ozlinalg.lapack.getrf` (blocked LU with
    partial pivoting, trailing updates on the emulated DGEMM) and are
    unpacked as LAPACK-based :func:`scipy.linalg.lu` does.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import lu
    >>> a = np.array([[2., 5., 8., 7.], [5., 2., 2., 8.], [7., 5., 6., 6.], [5., 4., 4., 8.]])
    >>> p, l, u = lu(a)
    >>> bool(np.allclose(a, p @ l @ u))
    True
    """
    xp, a1 = as_array(a, check_finite=check_finite)
    if a1.ndim < 2:
        raise ValueError("The input array must be at least two-dimensional.")
    # SciPy's own steps, kept exactly (dtypes, layouts and which array is
    # written): the factor of a's shape is computed in a C-ordered array,
    # ``a`` itself when overwrite_a allows it.
    dt = lapack_dtype(a1)
    a1, overwrite_a = normalize_dtype(xp, a1, overwrite_a, dt)
    *nd, m, n = a1.shape
    k = min(m, n)
    real_dt = xp.float32 if dt in (xp.float32, xp.complex64) else xp.float64
    if min(a1.shape) == 0:  # SciPy's test: any axis, batch axes included
        if permute_l:
            return (xp.empty((*nd, m, k), dtype=a1.dtype),
                    xp.empty((*nd, k, n), dtype=a1.dtype))
        p = (xp.empty((*nd, 0), dtype=xp.int32) if p_indices
             else xp.empty((*nd, 0, 0), dtype=real_dt))
        return p, xp.empty((*nd, m, k), dtype=a1.dtype), xp.empty((*nd, k, n), dtype=a1.dtype)
    if (m, n) == (1, 1):
        u = a1 if overwrite_a else a1.copy()
        if permute_l:
            return xp.ones_like(a1), u
        p = xp.zeros((*nd, m), dtype=int) if p_indices else xp.ones_like(a1)
        return p, xp.ones_like(a1), u
    if not datacopied(a1, a) and not overwrite_a:
        a1 = a1.copy(order="C")
    if c_inplace_target(xp, a1, True, a1.dtype) is None:
        a1 = a1.copy(order="C")
    # a1 receives L (m > n) or U (m <= n); the other factor is k x k
    small = xp.zeros((*nd, k, k), dtype=a1.dtype)
    perm = np.empty((*nd, m), dtype=np.int32)
    plan = resolve(xp)
    for idx in np.ndindex(*nd):
        big_f, small_f, perm[idx] = _lu2d(plan, a1[idx], dt, permute_l)
        a1[idx] = big_f
        small[idx] = small_f
    low, up = (a1, small) if m > n else (small, a1)
    if permute_l:
        return low, up
    p = xp.asarray(perm)
    if not p_indices:  # a = p @ l @ u with p[i, perm[i]] = 1 (real, as SciPy's)
        pa = xp.zeros((*nd, m, m), dtype=real_dt)
        pa[tuple(xp.asarray(i) for i in (*np.ix_(*[np.arange(x) for x in nd], np.arange(m)),
                                          perm))] = 1
        p = pa
    return p, low, up


def _lu2d(plan, a, dtype, permute_l):
    """The factors of the 2-D ``a``: ``(big, small, perm)`` where ``big`` has
    a's shape (L for a tall ``a``, else U; P @ L with `permute_l`), ``small``
    is k x k, and ``a = P @ L @ U`` with ``P[i, perm[i]] = 1``."""
    m, n = a.shape
    k = min(m, n)
    xp = plan.xp
    lu_, piv, _ = _getrf_lapack_verdict(plan, a, dtype)
    rows = _perm_from_piv(piv.get() if hasattr(piv, "get") else piv, m)  # a[rows] = l @ u
    inv = np.empty(m, dtype=np.int32)
    inv[rows] = np.arange(m, dtype=np.int32)
    low = xp.tril(lu_[:, :k], -1) + xp.eye(m, k, dtype=lu_.dtype)
    up = xp.triu(lu_[:k, :])
    if permute_l:
        low = low[xp.asarray(inv)]
    return (low, up, inv) if m > n else (up, low, inv)
