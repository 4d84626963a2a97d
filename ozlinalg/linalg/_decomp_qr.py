"""QR decomposition: ``qr`` (``scipy.linalg`` API)."""
from __future__ import annotations

from .. import lapack
from .._options import resolve
from ..lapack.scipy_conventions import (
    as_array,
    computes_in,
    datacopied,
    deliver,
    inplace_target,
    lapack_args,
    lapack_dtype,
    quiet,
    scipy_native,
)
from ._validation import batched

__all__ = ["qr"]

_MODES = ("full", "qr", "r", "economic", "raw")


def _geqrf(plan, a, overwrite_a=False):
    with quiet():
        return lapack.geqrf(a, overwrite_a=overwrite_a, check_finite=False,
                            **lapack_args(plan, min(a.shape)))


def _orgqr(plan, qr_, tau, ncols, overwrite=False):
    """First ``ncols`` columns of Q (``ncols`` <= M) from ``geqrf`` output;
    with `overwrite`, Q is formed in ``qr_`` itself when ``ncols <= N``."""
    m, n = qr_.shape
    k = tau.shape[0]
    if ncols <= n:
        v = qr_[:, :ncols]
    else:  # full Q of a tall matrix: pad the reflectors with zero columns
        v = plan.xp.zeros((m, ncols), dtype=qr_.dtype, order="F")
        v[:, :n] = qr_
        overwrite = True
    with quiet():
        return lapack.orgqr(v, tau[:min(k, ncols)], overwrite_a=overwrite, check_finite=False,
                            **lapack_args(plan, ncols))


def _ormqr(plan, qr_, tau, c, side="L", trans="T"):
    with quiet():
        return lapack.ormqr(qr_, tau, c, side=side, trans=trans, check_finite=False,
                            **lapack_args(plan, qr_.shape[0]))


@batched(("a", 2))
def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """Compute QR decomposition of a matrix.

    Calculate the decomposition ``A = Q R`` where Q is orthogonal (unitary
    for complex `a`) and R upper triangular.

    Parameters
    ----------
    a : (M, N) array_like
        Matrix to be decomposed (real or complex; a stack is decomposed slice
        by slice).
    overwrite_a : bool, optional
        Whether data in `a` is overwritten (may improve performance if
        `overwrite_a` is set to True by reusing the existing input data
        structure rather than creating a new one.)
    lwork : int, optional
        Work array size (accepted for compatibility; the blocked routines
        size their own workspace).
    mode : {'full', 'r', 'economic', 'raw'}, optional
        Determines what information is to be returned: either both Q and R
        ('full', default; the legacy spelling 'qr' too), only R ('r') or
        both Q and R but computed in economy-size ('economic', see Notes).
        The final option 'raw' makes the function return two matrices
        (Q, TAU) in the internal format used by LAPACK.
    pivoting : bool, optional
        Whether or not factorization should include pivoting for
        rank-revealing qr decomposition (see Notes: delegated to SciPy).
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.

    Returns
    -------
    Q : float or complex ndarray
        Of shape (M, M), or (M, K) for ``mode='economic'``. Not returned if
        ``mode='r'``. Replaced by tuple ``(Q, TAU)`` if ``mode='raw'``.
    R : float or complex ndarray
        Of shape (M, N), or (K, N) for ``mode in ['economic', 'raw']``.
        ``K = min(M, N)``.
    P : int ndarray
        Of shape (N,) for ``pivoting=True``. Not returned if
        ``pivoting=False``.

    Raises
    ------
    ValueError
        For an unknown `mode` or a non-2-D `a`.

    See Also
    --------
    scipy.linalg.qr : the native original.

    Notes
    -----
    Blocked Householder QR (LAPACK ``geqrf``, :func:`ozlinalg.lapack.geqrf`):
    panels of reflectors are computed natively and applied to the trailing
    matrix as compact-WY block reflectors ``I - V T V^T`` through the
    emulated DGEMM (Ozaki scheme); Q is formed the same way (``orgqr``).
    Complex input: ``zgeqrf`` panels, reflectors ``I - V T V^H``, products
    on the complex emulated GEMM, ``Q`` from ``ungqr`` (as SciPy).
    As in SciPy, ``mode='r'`` returns a one-element tuple ``(R,)``.

    ``pivoting=True`` (column-pivoted, rank-revealing QR, LAPACK ``geqp3``)
    has no blocked emulated version here: it is delegated to
    :func:`scipy.linalg.qr` and runs in native FP64.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import qr
    >>> a = np.random.default_rng(0).standard_normal((9, 6))
    >>> q, r = qr(a)
    >>> bool(np.allclose(a, q @ r))
    True
    >>> q.shape, r.shape
    ((9, 9), (9, 6))
    """
    if mode not in _MODES:
        raise ValueError("Mode argument should be one of ['full', 'r', "
                         "'economic', 'raw']")
    xp, a1 = as_array(a, check_finite=check_finite)
    if a1.ndim != 2:
        raise ValueError("expected a 2-D array")
    if pivoting or a1.size == 0:
        if xp.__name__ == "numpy":
            ro = isinstance(a, xp.ndarray) and not a.flags.writeable
            return scipy_native("qr")(a, overwrite_a=overwrite_a and not ro, lwork=lwork,
                                      mode=mode, pivoting=pivoting, check_finite=False)
        from .._array import to_numpy  # noqa: PLC0415

        return _to_xp(xp, scipy_native("qr")(to_numpy(a1), lwork=lwork, mode=mode,
                                             pivoting=pivoting, check_finite=False))
    # SciPy's steps: geqrf writes into `a` when overwrite_a allows it, and
    # Q is then formed in that same buffer where SciPy forms it there.
    m, n = a1.shape
    k = min(m, n)
    dt = lapack_dtype(a1)
    target = inplace_target(xp, a1, overwrite_a or datacopied(a1, a), dt)
    direct = computes_in(xp, target)
    plan = resolve(xp)
    qr_, tau = _geqrf(plan, target if direct else a1, direct)
    qr_out = deliver(xp, qr_, target, dt)
    if mode not in ("economic", "raw") or m < n:
        r = xp.triu(qr_out)
    else:
        r = xp.triu(qr_out[:n, :])
    if mode == "r":
        return (r,)
    if mode == "raw":
        return (qr_out, deliver(xp, tau, None, dt)), r
    if m < n or mode == "economic":  # Q formed in the factor's own columns
        q = _orgqr(plan, qr_, tau, m if m < n else k, overwrite=True)
        return deliver(xp, q, qr_out[:, :m] if m < n else qr_out, dt), r
    q = _orgqr(plan, qr_, tau, m)
    return deliver(xp, q, None, dt), r


def _to_xp(xp, obj):
    if isinstance(obj, tuple):
        return tuple(_to_xp(xp, o) for o in obj)
    return xp.asarray(obj)
