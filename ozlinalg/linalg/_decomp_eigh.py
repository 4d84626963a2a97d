"""Symmetric / Hermitian eigenvalue problems: ``eigh``, ``eigvalsh`` (``scipy.linalg`` API)."""
from __future__ import annotations

import math

import numpy as np

from .._options import resolve
from ..lapack.scipy_conventions import as_array, deliver, lapack_dtype, scipy_native
from ._spectral import eigh_core
from ._validation import batched

__all__ = ["eigh", "eigvalsh"]

_DRIVERS = ("ev", "evd", "evr", "evx", "gv", "gvd", "gvx")


def _check_args(n, b1, type, subset_by_index, subset_by_value, driver):
    """SciPy's argument checks, in SciPy's order and words; returns the selection
    ``("I", lo, hi)``, ``("V", lo, hi)`` or None."""
    if b1 is not None:
        if b1.ndim != 2 or b1.shape[0] != b1.shape[1]:
            raise ValueError('expected square "b" matrix')
        if b1.shape != (n, n):
            raise ValueError(f"wrong b dimensions {b1.shape}, should be {(n, n)}")
        if type not in [1, 2, 3]:
            raise ValueError('"type" keyword only accepts 1, 2, and 3.')
    subset = (subset_by_index is not None) or (subset_by_value is not None)
    if subset_by_index and subset_by_value:
        raise ValueError("Either index or value subset can be requested.")
    select = None
    if subset_by_index:
        lo, hi = (int(x) for x in subset_by_index)
        if not (0 <= lo <= hi < n):
            raise ValueError("Requested eigenvalue indices are not valid. "
                             f"Valid range is [0, {n-1}] and start <= end, but "
                             f"start={lo}, end={hi} is given")
        select = ("I", lo, hi)
    if subset_by_value:
        lo, hi = subset_by_value
        if not (-math.inf <= lo < hi <= math.inf):
            raise ValueError("Requested eigenvalue bounds are not valid. "
                             "Valid range is (-inf, inf) and low < high, but "
                             f"low={lo}, high={hi} is given")
        select = ("V", lo, hi)
    if driver:
        if b1 is None and driver in ("gv", "gvd", "gvx"):
            raise ValueError(f"{driver} requires input b array to be supplied "
                             "for generalized eigenvalue problems.")
        if b1 is not None and driver in ("ev", "evd", "evr", "evx"):
            raise ValueError(f'"{driver}" does not accept input b array '
                             "for standard eigenvalue problems.")
        if subset and driver in ("ev", "evd", "gv", "gvd"):
            raise ValueError(f'"{driver}" cannot compute subsets of eigenvalues')
    return select


def _select(xp, w, v, select):
    if select is None:
        return w, v
    kind, lo, hi = select
    if kind == "I":
        return w[lo:hi + 1], (None if v is None else v[:, lo:hi + 1])
    keep = xp.nonzero((w > lo) & (w <= hi))[0]  # LAPACK's range 'V': (vl, vu]
    return w[keep], (None if v is None else v[:, keep])


def _generalized(plan, a1, b1, lower, type, vectors):
    """``A x = lam B x`` (type 1), ``A B x = lam x`` (2), ``B A x = lam x`` (3) by the
    emulated Cholesky ``B = L L^H`` and triangular solves, as LAPACK's ``sygvd``:
    ``C = L^-1 A L^-H`` (type 1) or ``L^H A L`` (2, 3), ``C = W diag(lam) W^H``,
    ``x = L^-H W`` (1, 2) or ``L W`` (3). None when B is not numerically positive
    definite, so that SciPy's own routine gives its verdict."""
    from .._matmul import product  # noqa: PLC0415
    from ..lapack import trsm as _trsm  # noqa: PLC0415
    from ..lapack.scipy_conventions import lapack_args, quiet  # noqa: PLC0415
    from ._decomp_cholesky import _potrf  # noqa: PLC0415
    from ._spectral import _hermitian  # noqa: PLC0415

    xp, inner = plan.xp, plan.inside

    def trsm(t, rhs, **kw):
        with quiet():
            return _trsm(t, rhs, check_finite=False, **kw, **lapack_args(plan, t.shape[0]))

    dt = xp.complex128 if (a1.dtype.kind == "c" or b1.dtype.kind == "c") else xp.float64
    a2 = _hermitian(xp, a1.astype(dt), lower)
    b2 = _hermitian(xp, b1.astype(dt), lower)
    try:
        el = _potrf(plan, xp.asfortranarray(b2), True)
    except np.linalg.LinAlgError:
        return None
    elh = el.conj().T
    if type == 1:
        c = trsm(el, trsm(el, a2, lower=True, side="L"), lower=True, side="R", trans="C")
    else:
        c = product(inner, elh, product(inner, a2, el))
    w, wv = eigh_core(plan, c, vectors=vectors)
    if not vectors:
        return w, None
    if type == 3:
        return w, product(inner, el, wv)
    return w, trsm(el, wv, lower=True, side="L", trans="C")


@batched(("a", 2), ("b", 2))
def eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False,
         overwrite_b=False, type=1, check_finite=True, subset_by_index=None,
         subset_by_value=None, driver=None):
    """Solve a standard or generalized eigenvalue problem for a complex
    Hermitian or real symmetric matrix.

    Find eigenvalues array ``w`` and optionally eigenvectors array ``v`` of
    array ``a``, where ``b`` is positive definite such that for every
    eigenvalue ``w[i]`` and its eigenvector ``v[:, i]``::

        a @ v[:, i] = w[i] * b @ v[:, i]     (type 1; 2: a @ b @ v, 3: b @ a @ v)

    Parameters
    ----------
    a : (M, M) array_like
        A complex Hermitian or real symmetric matrix whose eigenvalues and
        eigenvectors will be computed (only its `lower` or upper triangle is read).
    b : (M, M) array_like, optional
        A complex Hermitian or real symmetric positive definite matrix. If
        omitted, the identity matrix is assumed.
    lower : bool, optional
        Whether the pertinent array data is taken from the lower or upper
        triangle of ``a`` and, if applicable, ``b``. (Default: lower)
    eigvals_only : bool, optional
        Whether to calculate only eigenvalues and no eigenvectors.
    overwrite_a, overwrite_b : bool, optional
        Accepted for compatibility; the inputs are never written.
    type : int, optional
        The type of the generalized problem (1, 2 or 3; see above).
    check_finite : bool, optional
        Whether to check that the input matrices contain only finite numbers.
    subset_by_index : iterable, optional
        Two-element ``[lo, hi]``: the eigenvalues (and vectors) of ascending
        indices ``lo`` .. ``hi`` only.
    subset_by_value : iterable, optional
        Two-element ``(lo, hi]``: the eigenvalues in this half-open interval only.
    driver : str, optional
        The LAPACK driver SciPy would use ("ev", "evd", "evr", "evx", "gv", "gvd",
        "gvx"): checked as SciPy checks it; every driver computes the same
        decomposition here (see Notes).

    Returns
    -------
    w : (N,) ndarray
        The N (N <= M) selected eigenvalues, in ascending order, each repeated
        according to its multiplicity (float32 for single-precision input).
    v : (M, N) ndarray
        The normalized eigenvector corresponding to the eigenvalue ``w[i]`` is the
        column ``v[:, i]`` (``v^H b v = I`` for the generalized problem). Only
        returned if ``eigvals_only=False``.

    Raises
    ------
    LinAlgError
        If ``b`` is not positive definite (SciPy's own message).
    ValueError
        For non-square matrices, invalid subsets or drivers, or non-finite entries
        under `check_finite`.

    See Also
    --------
    scipy.linalg.eigh : the native original.
    eigvalsh : eigenvalues only.

    Notes
    -----
    A single-precision LAPACK start (``ssyevd`` / ``cheevd``) on an exactly scaled
    copy, refined by Ogita and Aishima's iteration, whose every O(n^3) step is a
    product on the emulated GEMM (``R = I - X^H X``, ``S = X^H (A X)``, ``X + X E``);
    eigenvalues closer than the iteration can separate are settled as a cluster by
    Rayleigh-Ritz in their subspace (:mod:`ozlinalg.linalg._spectral`). Two steps
    reach FP64 level on separated spectra, three or four on clustered or graded
    ones; residual and orthogonality are at least as small as LAPACK ``dsyevd``'s
    (docs/eigen.md). Eigenvector signs (phases) may differ from LAPACK's.
    The generalized problem reduces to the standard one with the emulated
    Cholesky of ``b`` and triangular solves (LAPACK ``sygvd``'s reduction).
    Subsets are selected from the full decomposition. Orders below
    ``options(min_size=...)`` run in native LAPACK.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import eigh
    >>> a = np.array([[6., 3., 1., 5.], [3., 0., 5., 1.], [1., 5., 6., 2.], [5., 1., 2., 2.]])
    >>> w, v = eigh(a)
    >>> bool(np.allclose(a @ v - v @ np.diag(w), np.zeros((4, 4))))
    True
    """
    if driver is not None and driver not in _DRIVERS:
        raise ValueError('"{}" is unknown. Possible values are "None", "{}".'
                         "".format(driver, '", "'.join(_DRIVERS)))
    xp, a1 = as_array(a, check_finite=check_finite)
    if a1.ndim != 2 or a1.shape[0] != a1.shape[1]:
        raise ValueError('expected square "a" matrix')
    b1 = None if b is None else as_array(b, check_finite=check_finite, argname="b")[1]
    n = a1.shape[0]
    kw = dict(lower=lower, eigvals_only=eigvals_only, type=type,
              subset_by_index=subset_by_index, subset_by_value=subset_by_value,
              driver=driver)

    def native():
        if xp is np:
            return scipy_native("eigh")(a, b, check_finite=False, **kw)
        from .._array import to_numpy  # noqa: PLC0415

        res = scipy_native("eigh")(to_numpy(a1), None if b1 is None else to_numpy(b1),
                                   check_finite=False, **kw)
        return tuple(xp.asarray(r) for r in res) if isinstance(res, tuple) else xp.asarray(res)

    plan = resolve(xp)
    if a1.size == 0 or n < plan.min_order:
        return native()
    select = _check_args(n, b1, type, subset_by_index, subset_by_value, driver)
    if not (bool(xp.isfinite(a1).all()) and (b1 is None or bool(xp.isfinite(b1).all()))):
        return native()  # NaN / Inf without check_finite: LAPACK's own outcome
    dt = lapack_dtype(a1) if b1 is None else lapack_dtype(a1, b1)
    if b1 is None:
        work = a1.astype(xp.complex128 if a1.dtype.kind == "c" else xp.float64)
        w, v = eigh_core(plan, work, vectors=not eigvals_only, lower=bool(lower))
    else:
        res = _generalized(plan, a1, b1, bool(lower), type, not eigvals_only)
        if res is None:
            return native()
        w, v = res
    w, v = _select(xp, w, v, select)
    w = w.astype(np.float32 if np.dtype(dt).char in "fF" else np.float64)
    if eigvals_only:
        return w
    return w, deliver(xp, v, None, dt)


def eigvalsh(a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1,
             check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """Solve a standard or generalized eigenvalue problem for a complex
    Hermitian or real symmetric matrix, eigenvalues only.

    :func:`eigh` with ``eigvals_only=True``: the same parameters, the same
    algorithm (the refinement needs the eigenvectors; only ``w`` is returned).

    Returns
    -------
    w : (N,) ndarray
        The N (N <= M) selected eigenvalues, in ascending order.

    See Also
    --------
    scipy.linalg.eigvalsh : the native original.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import eigvalsh
    >>> eigvalsh(np.array([[2., 1.], [1., 2.]]))
    array([1., 3.])
    """
    return eigh(a, b=b, lower=lower, eigvals_only=True, overwrite_a=overwrite_a,
                overwrite_b=overwrite_b, type=type, check_finite=check_finite,
                subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                driver=driver)
