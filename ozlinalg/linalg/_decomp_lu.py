"""LU decomposition: ``lu_factor``, ``lu_solve``, ``lu`` (``scipy.linalg`` API)."""
from __future__ import annotations

import warnings

import numpy as np

from .. import lapack
from ..lapack._common import first_zero_diagonal
from ._validation import (
    LinAlgWarning,
    as_array,
    batch_loop,
    batched,
    cast,
    emulating,
    lapack_kw,
    real_dtype,
    result_dtype,
)

__all__ = ["lu_factor", "lu_solve", "lu"]


def _getrf(xp, a, overwrite_a=False):
    """float64 (complex128) LU of a 2-D array: ``(lu, piv, info)``, never warns.

    ``info`` is LAPACK's: 1-based index of the first exactly-zero pivot, 0 if none.
    """
    with emulating():
        lu_, piv = lapack.getrf(a, overwrite_a=overwrite_a, check_finite=False, warn=False,
                                **lapack_kw(min(a.shape)))
    k = min(lu_.shape)
    z = first_zero_diagonal(xp, lu_[:k, :k]) if k else -1
    return lu_, piv, z + 1


def _getrs(lu_, piv, b, trans=0, overwrite_b=False):
    with emulating():
        return lapack.getrs(lu_, piv, b, trans=trans, overwrite_b=overwrite_b,
                            check_finite=False, **lapack_kw(lu_.shape[0]))


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
        Whether to overwrite data in A (may increase performance; float64
        arrays only).
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
    if a1.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {a1.shape}")
    dt = result_dtype(xp, a1)
    if a1.size == 0:
        return xp.empty_like(a1, dtype=dt), xp.arange(0, dtype=xp.int32)
    lu_, piv, info = _getrf(xp, a1, overwrite_a and a1 is a)
    if info > 0:
        warnings.warn(f"Diagonal number {info} is exactly zero. Singular matrix.",
                      LinAlgWarning, stacklevel=2)
    return cast(lu_, dt), piv


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
        (the conjugate transpose; the same as 1 for real matrices).
    overwrite_b : bool, optional
        Whether to overwrite data in b (may increase performance).
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
    DGEMMs (Ozaki scheme).

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
    xp, lu1 = as_array(lu_, check_finite=check_finite, argname="lu")
    _, b1 = as_array(b, check_finite=check_finite, argname="b")
    if lu1.ndim != 2 or lu1.shape[0] != lu1.shape[1] or b1.ndim == 0 \
            or lu1.shape[0] != b1.shape[0]:
        raise ValueError(f"Shapes of lu {lu1.shape} and b {b1.shape} are incompatible")
    if trans not in (0, 1, 2, "N", "T", "C"):
        raise ValueError(f"trans must be 0, 1 or 2, got {trans!r}")
    dt = result_dtype(xp, lu1, b1)
    if b1.size == 0:
        return xp.empty_like(b1, dtype=dt)
    core = b1 if b1.ndim <= 2 else b1.reshape(b1.shape[0], -1)
    x = _getrs(lu1, piv, core, trans=trans, overwrite_b=overwrite_b and core is b)
    return cast(x.reshape(b1.shape), dt)


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
    *nd, m, n = a1.shape
    k = min(m, n)
    dt = result_dtype(xp, a1)
    a1 = cast(a1, dt)
    # SciPy's special cases, kept exactly (dtypes included)
    if min(m, n) == 0:
        if permute_l:
            return (xp.empty((*nd, m, k), dtype=a1.dtype),
                    xp.empty((*nd, k, n), dtype=a1.dtype))
        p = (xp.empty((*nd, 0), dtype=xp.int32) if p_indices
             else xp.empty((*nd, 0, 0), dtype=dt))
        return p, xp.empty((*nd, m, k), dtype=a1.dtype), xp.empty((*nd, k, n), dtype=a1.dtype)
    if (m, n) == (1, 1):
        u = a1 if overwrite_a else a1.copy()
        if permute_l:
            return xp.ones_like(a1), u
        p = xp.zeros((*nd, m), dtype=int) if p_indices else xp.ones_like(a1)
        return p, xp.ones_like(a1), u
    if nd:
        return batch_loop(xp, lambda s_: _lu2d(xp, s_, permute_l, False, p_indices, dt),
                          [a1], [2])
    return _lu2d(xp, a1, permute_l, overwrite_a and a1 is a, p_indices, dt)


def _lu2d(xp, a1, permute_l, overwrite_a, p_indices, dt):
    m, n = a1.shape
    k = min(m, n)
    lu_, piv, _ = _getrf(xp, a1, overwrite_a)
    piv_h = piv.get() if hasattr(piv, "get") else piv
    perm = _perm_from_piv(piv_h, m)  # a[perm] = l @ u
    low = xp.tril(lu_[:, :k], -1) + xp.eye(m, k)
    up = xp.triu(lu_[:k, :])
    low, up = cast(low, dt), cast(up, dt)
    if permute_l:
        pl = xp.empty_like(low)
        pl[xp.asarray(perm)] = low
        return pl, up
    if p_indices:  # a = l[p] @ u: the inverse permutation
        inv = np.empty(m, dtype=np.int32)
        inv[perm] = np.arange(m, dtype=np.int32)
        return xp.asarray(inv), low, up
    p = xp.zeros((m, m), dtype=real_dtype(xp, dt))  # real, as SciPy's
    p[xp.asarray(perm), xp.arange(m)] = 1
    return p, low, up
