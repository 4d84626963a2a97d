"""Singular value decomposition: ``svd``, ``svdvals``, ``pinv`` (``scipy.linalg`` API)."""
from __future__ import annotations

import numpy as np

from .._matmul import product
from .._options import resolve
from ..lapack.scipy_conventions import as_array, deliver, lapack_dtype, scipy_native
from ._spectral import svd_core
from ._validation import batched

__all__ = ["svd", "svdvals", "pinv"]


def _native_svd(xp, a, a1, **kw):
    if xp is np:
        return scipy_native("svd")(a, check_finite=False, **kw)
    from .._array import to_numpy  # noqa: PLC0415

    res = scipy_native("svd")(to_numpy(a1), check_finite=False, **kw)
    return tuple(xp.asarray(r) for r in res) if isinstance(res, tuple) else xp.asarray(res)


def _check_int32_indexing(m, n, full_matrices):
    """SciPy's refusal, before any work, of factors that LAPACK's int32 indices
    cannot address (SciPy's words)."""
    big = np.iinfo(np.int32).max
    max_mn, min_mn = (m, n) if m > n else (n, m)
    if full_matrices:
        if max_mn * max_mn > big:
            raise ValueError(f"Indexing a matrix size {max_mn} x {max_mn} "
                             "would incur integer overflow in LAPACK. "
                             "Try using numpy.linalg.svd instead.")
    elif max(m * min_mn, n * min_mn) > big:
        sz = max(m * min_mn, n * min_mn)
        raise ValueError(f"Indexing a matrix of {sz} elements would "
                         "incur an in integer overflow in LAPACK. "
                         "Try using numpy.linalg.svd instead.")


@batched(("a", 2))
def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd"):
    """Singular Value Decomposition.

    Factorizes the matrix `a` into two unitary matrices ``U`` and ``Vh``, and
    a 1-D array ``s`` of singular values (real, non-negative) such that
    ``a == U @ S @ Vh``, where ``S`` is a suitably shaped matrix of zeros with
    main diagonal ``s``.

    Parameters
    ----------
    a : (M, N) array_like
        Matrix to decompose (a stack is decomposed slice by slice).
    full_matrices : bool, optional
        If True (default), `U` and `Vh` are of shape ``(M, M)``, ``(N, N)``.
        If False, the shapes are ``(M, K)`` and ``(K, N)``, where ``K = min(M, N)``.
    compute_uv : bool, optional
        Whether to compute also ``U`` and ``Vh`` in addition to ``s``.
    overwrite_a : bool, optional
        Accepted for compatibility; `a` is never written.
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.
    lapack_driver : {'gesdd', 'gesvd'}, optional
        Checked as SciPy checks it; both give the same decomposition here.

    Returns
    -------
    U : ndarray
        Unitary matrix having left singular vectors as columns (only when `compute_uv`).
    s : ndarray
        The singular values, sorted in non-increasing order (float32 for
        single-precision input).
    Vh : ndarray
        Unitary matrix having right singular vectors as rows (only when `compute_uv`).

    Raises
    ------
    LinAlgError
        If LAPACK's SVD does not converge (non-finite input without `check_finite`).
    ValueError
        For a non-2-D `a`, an unknown driver, or non-finite entries under `check_finite`.

    See Also
    --------
    scipy.linalg.svd : the native original.

    Notes
    -----
    A single-precision LAPACK start (``sgesdd`` / ``cgesdd``) on an exactly scaled
    copy, refined by Ogita and Aishima's SVD iteration, every O(n^3) step a product
    on the emulated GEMM (``U^H (A V)``, ``I - U^H U``, ``I - V^H V``, ``U + U F``,
    ``V + V G``); clusters of singular values (zeros of a rank-deficient matrix
    among them) are settled by a small SVD of their block. A rectangular matrix
    is first reduced to a square one by the emulated QR (``A = Q R``). Residual
    and orthogonality are at least as small as LAPACK ``dgesdd``'s (docs/eigen.md).
    Singular vector signs (phases) may differ from LAPACK's.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import svd
    >>> a = np.random.default_rng(0).standard_normal((9, 6))
    >>> u, s, vh = svd(a, full_matrices=False)
    >>> bool(np.allclose(a, (u * s) @ vh))
    True
    """
    xp, a1 = as_array(a, check_finite=check_finite)
    if a1.ndim != 2:
        raise ValueError("expected matrix")
    if not isinstance(lapack_driver, str):
        raise TypeError("lapack_driver must be a string")
    if lapack_driver not in ("gesdd", "gesvd"):
        raise ValueError(f'lapack_driver must be "gesdd" or "gesvd", not "{lapack_driver}"')
    return _svd(resolve(xp), a, a1, full_matrices, compute_uv, lapack_driver)


def _svd(plan, a, a1, full_matrices, compute_uv, lapack_driver):
    """:func:`svd` of the validated 2-D `a1` (`a`: the caller's array) under `plan`."""
    xp = plan.xp
    if compute_uv and a1.size and xp is np:
        _check_int32_indexing(*a1.shape, full_matrices)
    kw = dict(full_matrices=full_matrices, compute_uv=compute_uv, lapack_driver=lapack_driver)
    if a1.size == 0 or min(a1.shape) < plan.min_order \
            or not bool(xp.isfinite(a1).all()):
        return _native_svd(xp, a, a1, **kw)
    dt = lapack_dtype(a1)
    work = a1.astype(xp.complex128 if a1.dtype.kind == "c" else xp.float64)
    u, s, vh = svd_core(plan, work, vectors=bool(compute_uv), full_matrices=bool(full_matrices))
    s = s.astype(np.float32 if np.dtype(dt).char in "fF" else np.float64)
    if not compute_uv:
        return s
    return deliver(xp, u, None, dt), s, deliver(xp, vh, None, dt)


@batched(("a", 2))
def svdvals(a, overwrite_a=False, check_finite=True):
    """Compute singular values of a matrix.

    Parameters
    ----------
    a : (M, N) array_like
        Matrix to decompose.
    overwrite_a : bool, optional
        Accepted for compatibility; `a` is never written.
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.

    Returns
    -------
    s : (min(M, N),) ndarray
        The singular values, sorted in decreasing order.

    See Also
    --------
    scipy.linalg.svdvals : the native original.

    Notes
    -----
    :func:`svd` with ``compute_uv=False``: the same refinement (it needs the
    singular vectors), only ``s`` is returned.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import svdvals
    >>> svdvals(np.array([[3., 0.], [0., -4.]]))
    array([4., 3.])
    """
    return svd(a, compute_uv=0, overwrite_a=overwrite_a, check_finite=check_finite)


@batched(("a", 2))
def pinv(a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    """Compute the (Moore-Penrose) pseudo-inverse of a matrix.

    Calculate a generalized inverse of a matrix using its singular-value
    decomposition ``U @ S @ V`` in the economy mode and picking up only the
    columns/rows that are associated with significant singular values.

    Parameters
    ----------
    a : (M, N) array_like
        Matrix to be pseudo-inverted.
    atol : float, optional
        Absolute threshold term, default value is 0.
    rtol : float, optional
        Relative threshold term, default value is ``max(M, N) * eps`` where
        ``eps`` is the machine precision value of the datatype of ``a``.
    return_rank : bool, optional
        If True, return the effective rank of the matrix.
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.

    Returns
    -------
    B : (N, M) ndarray
        The pseudo-inverse of matrix `a`.
    rank : int
        The effective rank of the matrix. Returned if `return_rank` is True.

    Raises
    ------
    LinAlgError
        If SVD computation does not converge.
    ValueError
        For negative `atol` / `rtol`, or non-finite entries under `check_finite`.

    See Also
    --------
    scipy.linalg.pinv : the native original.

    Notes
    -----
    SciPy's algorithm on :func:`svd` (economy mode); the product
    ``V diag(1/s) U^H`` runs on the emulated GEMM.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import pinv
    >>> a = np.random.default_rng(0).standard_normal((9, 6))
    >>> bool(np.allclose(a @ pinv(a) @ a, a))
    True
    """
    xp, a1 = as_array(a, check_finite=check_finite)
    if a1.ndim != 2:
        raise ValueError("expected matrix")
    plan = resolve(xp)
    u, s, vh = _svd(plan, a1, a1, False, True, "gesdd")
    t = u.dtype.char.lower()
    max_s = float(s.max()) if s.size else 0.0
    atol = 0. if atol is None else atol
    rtol = max(a1.shape) * np.finfo(t).eps if (rtol is None) else rtol
    if (atol < 0.) or (rtol < 0.):
        raise ValueError("atol and rtol values must be positive.")
    val = atol + max_s * rtol
    kept = (s > val).sum()  # SciPy returns NumPy's integer
    rank = int(kept)
    u = u[:, :rank] / s[:rank]
    if u.size and vh.size and min(u.shape[0], vh.shape[1]) >= plan.options.min_size:
        b = product(plan, u, vh[:rank]).astype(u.dtype, copy=False).conj().T
    else:
        b = (u @ vh[:rank]).conj().T
    if return_rank:
        return b, kept
    return b
