"""Blocked Householder QR (``geqrf``), forming Q (``orgqr``) and applying it
(``ormqr``), with compact-WY block reflectors on the emulated GEMM."""
from __future__ import annotations

import numpy as np
from scipy.linalg import lapack as _lapack

from ._common import (
    Runner,
    _lwork,
    as_float_matrix,
    check_block_size,
    check_crossover,
    check_side,
    check_trans,
    flops_geqrf,
    native_geqrf,
    work_copy,
)

__all__ = ["geqrf", "orgqr", "ormqr"]


def geqrf(a, *, block_size=None, slices=None, method=None, overwrite_a=False,
          check_finite=True, crossover=None):
    """Householder QR factorization ``a = Q @ R`` in LAPACK's compact form.

    Parameters
    ----------
    a : (M, N) array_like
        Matrix to factor (tall, square or wide).
    block_size : int, optional
        Panel width ``nb`` (default 128): reflectors computed natively per
        step and aggregated into one block reflector.
    slices : int or "auto", optional
        Slice count passed to :func:`ozlinalg.matmul`.
    method : str, optional
        Emulated GEMM method passed to :func:`ozlinalg.matmul`.
    overwrite_a : bool, optional
        Allow the result to be written into `a` (float64 arrays only).
    check_finite : bool, optional
        Check that the input contains only finite numbers.
    crossover : int, optional
        If ``min(M, N)`` is below this, the whole factorization runs in
        native LAPACK (default :data:`ozlinalg.lapack.DEFAULT_CROSSOVER`; 0
        always emulates the block-reflector updates).

    Returns
    -------
    qr : (M, N) ndarray of float64
        ``R`` on and above the diagonal; below it, the Householder vectors
        ``v_i`` (with implicit ``v_i[i] = 1``), exactly as LAPACK ``geqrf``
        (and ``scipy.linalg.qr(mode='raw')``, transposed back) store them.
    tau : (min(M, N),) ndarray of float64
        Scalar factors: ``Q = H_0 H_1 ... H_{k-1}``, ``H_i = I - tau_i v_i v_i^T``.

    See Also
    --------
    orgqr : form ``Q`` explicitly.
    ormqr : apply ``Q`` or ``Q^T`` to a matrix.

    Notes
    -----
    Blocked Householder QR with the compact WY representation (Schreiber &
    Van Loan 1989; LAPACK ``dgeqrf``/``dlarft``/``dlarfb``). For each panel of
    ``nb`` columns:

    1. factor the ``(M - k) x nb`` panel natively (LAPACK / cuSOLVER
       ``geqrf``);
    2. form the triangular factor ``T`` with ``H_k ... H_{k+nb-1} = I - V T V^T``:
       ``G = V^T V`` is one emulated GEMM, then the ``dlarft`` recurrence
       ``T[:i, i] = -tau_i T[:i, :i] G[:i, i]`` (``O(nb^3)``, native);
    3. update the trailing columns ``C <- (I - V T^T V^T) C`` with three
       emulated GEMMs: ``W = V^T C``, ``W = T^T W``, ``C -= V W``.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.lapack import geqrf, orgqr
    >>> a = np.random.default_rng(0).standard_normal((5, 3))
    >>> qr, tau = geqrf(a, block_size=2, crossover=0)
    >>> q = orgqr(qr, tau, block_size=2, crossover=0)
    >>> bool(np.allclose(q @ np.triu(qr[:3]), a))
    True
    """
    xp, a = as_float_matrix(a, "geqrf", check_finite=check_finite)
    nb = check_block_size(block_size, "geqrf")
    cross = check_crossover(crossover, "geqrf")
    m, n = a.shape
    k = min(m, n)
    qr = work_copy(xp, a, overwrite_a)
    if k == 0:
        return qr, xp.zeros(0)
    if k < cross or k <= nb:
        f, tau = native_geqrf(xp, qr)
        qr[...] = f
        Runner.native(flops_geqrf(m, n), "geqrf (native, below crossover)")
        return qr, tau

    run = Runner(xp, slices, method)
    tau = xp.zeros(k)
    for j in range(0, k, nb):
        j1 = min(k, j + nb)
        f, t = native_geqrf(xp, qr[j:, j:j1])
        qr[j:, j:j1] = f
        tau[j:j1] = t
        run.native(flops_geqrf(m - j, j1 - j), "geqrf panel")
        if j1 < n:
            v = _unit_lower(xp, f)
            tt = _larft(run, v, t)
            _larfb(run, v, tt, qr[j:, j1:], "L", True)
    return qr, tau


def _unit_lower(xp, f):
    """Explicit V (unit lower trapezoidal) from a factored panel."""
    v = xp.tril(f, -1)
    b = f.shape[1]
    v[xp.arange(b), xp.arange(b)] = 1.0
    return v


def _larft(run, v, tau):
    """Upper triangular T with ``H_0 ... H_{b-1} = I - V T V^T`` (forward, columnwise)."""
    xp = run.xp
    b = v.shape[1]
    g = run.gemm(v.T, v)
    t = xp.zeros((b, b))
    for i in range(b):
        t[i, i] = tau[i]
        if i:
            t[:i, i] = -tau[i] * (t[:i, :i] @ g[:i, i])
    run.native(b ** 3 / 3.0, "larft recurrence")
    return t


def _larfb(run, v, t, c, side, trans):
    """Apply the block reflector ``H = I - V T V^T`` (or ``H^T``) to ``c`` in place."""
    if c.size == 0:
        return
    tt = t.T if trans else t
    if side == "L":
        w = run.gemm(v.T, c)          # b x N
        w = run.gemm(tt, w)
        c -= run.gemm(v, w)
    else:
        w = run.gemm(c, v)            # M x b
        w = run.gemm(w, tt)
        c -= run.gemm(w, v.T)


def _blocks(k, nb, reverse):
    starts = list(range(0, k, nb))
    return reversed(starts) if reverse else starts


def orgqr(qr, tau, *, block_size=None, slices=None, method=None, overwrite_a=False,
          check_finite=True, crossover=None):
    """Form the M x N matrix Q with orthonormal columns from :func:`geqrf` output.

    Parameters
    ----------
    qr : (M, N) array_like, M >= N
        Householder vectors below the diagonal of the first ``K`` columns
        (as returned by :func:`geqrf`; for a wide factorization pass
        ``qr[:, :M]``, for the full Q of a tall one pad ``qr`` to M x M, as
        :func:`scipy.linalg.qr` does).
    tau : (K,) array_like, K <= N
        Scalar factors from :func:`geqrf`.
    block_size, slices, method, crossover : optional
        As in :func:`geqrf`.
    overwrite_a : bool, optional
        Allow Q to be written into `qr` (float64 arrays only).
    check_finite : bool, optional
        Check that the inputs contain only finite numbers.

    Returns
    -------
    q : (M, N) ndarray of float64
        The first N columns of ``H_0 H_1 ... H_{K-1}``.

    Notes
    -----
    LAPACK ``dorgqr``: starting from the first N columns of the identity, the
    block reflectors are applied from the last block to the first, each to
    the trailing ``(M - k) x (N - k)`` part only (the rest is already final),
    with the three emulated GEMMs of the compact WY form.
    """
    xp, qr = as_float_matrix(qr, "orgqr", "qr", check_finite=check_finite)
    _, tau = as_float_matrix(tau, "orgqr", "tau", check_finite=check_finite, ndim=(1,))
    nb = check_block_size(block_size, "orgqr")
    cross = check_crossover(crossover, "orgqr")
    m, n = qr.shape
    k = tau.shape[0]
    if n > m:
        raise ValueError(f"ozlinalg.lapack.orgqr: need M >= N, got qr of shape {qr.shape}")
    if k > n:
        raise ValueError(
            f"ozlinalg.lapack.orgqr: tau has {k} entries, more than the {n} columns of qr"
        )
    tau = tau.astype(xp.float64, copy=False)
    if m == 0 or n == 0:
        return work_copy(xp, qr, overwrite_a)
    if xp is np and (k < cross or k <= nb):
        a = work_copy(xp, qr, overwrite_a)
        q, _, info = _lapack.dorgqr(a, tau, lwork=_lwork(_lapack.dorgqr, a, tau))
        if info < 0:
            raise ValueError(f"illegal value in argument {-info} of internal orgqr")
        Runner.native(_flops_orgqr(m, n, k), "orgqr (native, below crossover)")
        a[...] = q
        return a
    run = Runner(xp, slices, method, emulate=not (k < cross or k <= nb))
    vsrc = qr.astype(xp.float64, copy=False)
    if overwrite_a and vsrc is qr:
        vsrc = xp.array(qr[:, :k], copy=True)   # the reflectors are read while q is written
    q = work_copy(xp, qr, overwrite_a)
    q[...] = 0.0
    idx = xp.arange(n)
    q[idx, idx] = 1.0
    for j in _blocks(k, nb, reverse=True):
        j1 = min(k, j + nb)
        v = _unit_lower(xp, vsrc[j:, j:j1])
        t = _larft(run, v, tau[j:j1])
        _larfb(run, v, t, q[j:, j:], "L", False)
    return q


def _flops_orgqr(m, n, k):
    return 4.0 * m * n * k - 2.0 * (m + n) * k * k + 4.0 * k ** 3 / 3.0


def ormqr(qr, tau, c, *, side="L", trans="T", block_size=None, slices=None, method=None,
          overwrite_c=False, check_finite=True, crossover=None):
    """Multiply ``c`` by ``Q`` or ``Q^T`` from :func:`geqrf` output.

    Computes ``Q^T c`` (side 'L', trans 'T', the default), ``Q c`` (side 'L',
    trans 'N'), ``c Q`` (side 'R', trans 'N') or ``c Q^T`` (side 'R', trans
    'T'), with ``Q = H_0 H_1 ... H_{K-1}`` never formed.

    Parameters
    ----------
    qr : (NQ, >= K) array_like
        Householder vectors from :func:`geqrf` (only the first ``K`` columns,
        below the diagonal, are read). ``NQ`` is the order of ``Q``: the rows
        of `c` for side 'L', its columns for side 'R'.
    tau : (K,) array_like
        Scalar factors from :func:`geqrf`.
    c : (M, N) array_like, or (NQ,) for a single vector
        Matrix to multiply.
    side : {'L', 'R'}, optional
        Apply ``Q`` from the left (default) or the right.
    trans : {'N', 'T', 'C', 0, 1, 2}, optional
        Apply ``Q`` ('N') or ``Q^T`` ('T', the default; 'C' is 'T' for real).
    block_size, slices, method, crossover : optional
        As in :func:`geqrf`.
    overwrite_c : bool, optional
        Allow the result to be written into `c` (float64 arrays only).
    check_finite : bool, optional
        Check that the inputs contain only finite numbers.

    Returns
    -------
    cq : ndarray of float64
        The product, with the shape of `c`.

    Notes
    -----
    LAPACK ``dormqr``: the reflectors are applied ``nb`` at a time as block
    reflectors ``I - V T V^T`` (``T`` from ``dlarft``), each with three
    emulated GEMMs, in the order the product requires.
    """
    xp, qr = as_float_matrix(qr, "ormqr", "qr", check_finite=check_finite)
    _, tau = as_float_matrix(tau, "ormqr", "tau", check_finite=check_finite, ndim=(1,))
    _, c = as_float_matrix(c, "ormqr", "c", check_finite=check_finite, ndim=(1, 2))
    side = check_side(side, "ormqr")
    t = check_trans(trans, "ormqr")
    nb = check_block_size(block_size, "ormqr")
    cross = check_crossover(crossover, "ormqr")
    k = tau.shape[0]
    out = work_copy(xp, c, overwrite_c)
    cm = out[:, None] if (out.ndim == 1 and side == "L") else (
        out[None, :] if out.ndim == 1 else out)
    nq = cm.shape[0] if side == "L" else cm.shape[1]
    if qr.shape[0] != nq:
        raise ValueError(
            f"ozlinalg.lapack.ormqr: qr has {qr.shape[0]} rows but Q must be of order {nq} "
            f"for c of shape {c.shape} and side={side!r}"
        )
    if k > qr.shape[1] or k > nq:
        raise ValueError(
            f"ozlinalg.lapack.ormqr: tau has {k} entries; qr of shape {qr.shape} holds fewer "
            "reflectors"
        )
    if cm.size == 0 or k == 0:
        return out
    tau = tau.astype(xp.float64, copy=False)
    qr = qr.astype(xp.float64, copy=False)
    if xp is np and (k < cross or k <= nb):
        res, _, info = _lapack.dormqr(side, "T" if t else "N", qr[:, :k], tau, cm,
                                      lwork=_lwork(_lapack.dormqr, side, "T" if t else "N",
                                                   qr[:, :k], tau, cm))
        if info < 0:
            raise ValueError(f"illegal value in argument {-info} of internal ormqr")
        rows, cols = cm.shape
        other = cols if side == "L" else rows
        Runner.native(4.0 * rows * cols * k - 2.0 * other * k * k,
                      "ormqr (native, below crossover)")
        cm[...] = res
        return out
    run = Runner(xp, slices, method, emulate=not (k < cross or k <= nb))
    # Q^T C and C Q walk the reflectors forward, Q C and C Q^T backward.
    forward = (side == "L") == t
    for j in _blocks(k, nb, reverse=not forward):
        j1 = min(k, j + nb)
        v = _unit_lower(xp, qr[j:, j:j1])
        tt = _larft(run, v, tau[j:j1])
        target = cm[j:, :] if side == "L" else cm[:, j:]
        _larfb(run, v, tt, target, side, t)
    return out
