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
    check_min_size,
    check_side,
    conj_t,
    flops_geqrf,
    native_geqrf,
    routine_plan,
    trans_code,
    work_copy,
    work_dtype,
)

__all__ = ["geqrf", "orgqr", "ormqr", "larft", "unit_lower"]


def geqrf(a, *, block_size=None, slices=None, method=None, accuracy=None, plan=None,
          overwrite_a=False,
          check_finite=True, min_size=None, crossover=None):
    """Householder QR factorization ``a = Q @ R`` in LAPACK's compact form.

    Parameters
    ----------
    a : (M, N) array_like
        Matrix to factor (tall, square or wide; real, or complex computed in
        complex128 with LAPACK ``zgeqrf`` panels).
    block_size : int, optional
        Panel width ``nb`` (default 128): reflectors computed natively per
        step and aggregated into one block reflector.
    slices : int or "auto", optional
        Slice count passed to :func:`ozlinalg.matmul`.
    method : str, optional
        Emulated GEMM method passed to :func:`ozlinalg.matmul`.
    accuracy : {"dgemm", "faithful"}, optional
        Accuracy of the emulated products, passed to :func:`ozlinalg.matmul`
        (``"faithful"``: every product certified within one ulp; the
        factorization's own rounding is LAPACK's).
    plan : Plan, optional
        The configuration resolved by the calling front door
        (:class:`ozlinalg._options.Plan`), instead of `slices`, `method` and
        `accuracy` (default: the options in force with those arguments).
    overwrite_a : bool, optional
        Allow the result to be written into `a` (float64 / complex128 arrays
        only).
    check_finite : bool, optional
        Check that the input contains only finite numbers.
    min_size : int, optional
        If ``min(M, N)`` is below this, the whole factorization runs in
        native LAPACK (default :data:`ozlinalg.lapack.DEFAULT_MIN_SIZE`; 0
        always emulates the block-reflector updates).

    Returns
    -------
    qr : (M, N) ndarray of float64 (complex128 for complex `a`)
        ``R`` on and above the diagonal; below it, the Householder vectors
        ``v_i`` (with implicit ``v_i[i] = 1``), exactly as LAPACK ``geqrf``
        (and ``scipy.linalg.qr(mode='raw')``, transposed back) store them.
    tau : (min(M, N),) ndarray of float64 (complex128 for complex `a`)
        Scalar factors: ``Q = H_0 H_1 ... H_{k-1}``, ``H_i = I - tau_i v_i v_i^H``
        (``v_i^H`` is ``v_i^T`` for real `a`).

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
    2. form the triangular factor ``T`` with ``H_k ... H_{k+nb-1} = I - V T V^H``:
       ``G = V^H V`` is one emulated GEMM, then the ``larft`` recurrence
       ``T[:i, i] = -tau_i T[:i, :i] G[:i, i]`` (``O(nb^3)``, native);
    3. update the trailing columns ``C <- (I - V T^H V^H) C`` with three
       emulated GEMMs: ``W = V^H C``, ``W = T^H W``, ``C -= V W``.

    ``^H`` is the conjugate transpose (the transpose for real input).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.lapack import geqrf, orgqr
    >>> a = np.random.default_rng(0).standard_normal((5, 3))
    >>> qr, tau = geqrf(a, block_size=2, min_size=0)
    >>> q = orgqr(qr, tau, block_size=2, min_size=0)
    >>> bool(np.allclose(q @ np.triu(qr[:3]), a))
    True
    """
    xp, a = as_float_matrix(a, "geqrf", check_finite=check_finite)
    plan = routine_plan(xp, plan, slices, method, accuracy, "geqrf")
    nb = check_block_size(block_size, "geqrf", plan.engine, min(a.shape))
    cross = check_min_size(min_size, "geqrf", crossover)
    m, n = a.shape
    k = min(m, n)
    qr = work_copy(xp, a, overwrite_a)
    if k == 0:
        return qr, xp.zeros(0, dtype=qr.dtype)
    if k < cross or k <= nb:
        f, tau = native_geqrf(xp, qr, engine=plan.engine)
        qr[...] = f
        Runner.native(flops_geqrf(m, n), "geqrf (native: below min_size or one panel)")
        return qr, tau

    run = Runner(plan)
    tau = xp.zeros(k, dtype=qr.dtype)
    for j in range(0, k, nb):
        j1 = min(k, j + nb)
        f, t = native_geqrf(xp, qr[j:, j:j1], engine=plan.engine)
        qr[j:, j:j1] = f
        tau[j:j1] = t
        run.native(flops_geqrf(m - j, j1 - j), "geqrf panel")
        if j1 < n:
            v = unit_lower(xp, f)
            tt = larft(run, v, t)
            _larfb(run, v, tt, qr[j:, j1:], "L", True)
    return qr, tau


def unit_lower(xp, f):
    """Explicit V (unit lower trapezoidal) from a factored panel.

    Parameters
    ----------
    xp : module
        The array namespace of `f` (NumPy or CuPy).
    f : (M, b) array
        A panel as ``geqrf`` leaves it: the reflectors below the diagonal.

    Returns
    -------
    array
        V: `f`'s strictly lower part with a unit diagonal (a new array).
    """
    v = xp.tril(f, -1)
    b = f.shape[1]
    v[xp.arange(b), xp.arange(b)] = 1.0
    return v


def larft(run, v, tau):
    """Upper triangular T with ``H_0 ... H_{b-1} = I - V T V^H`` (LAPACK
    ``larft``: forward, columnwise).

    Parameters
    ----------
    run : Runner
        Runs the product ``V^H V`` (emulated, or native FP64) and counts the
        native flops of the recurrence.
    v : (M, b) array
        The reflectors, unit lower trapezoidal (:func:`unit_lower`).
    tau : (b,) array
        Their scalar factors, as ``geqrf`` returns them.

    Returns
    -------
    (b, b) array
        T.
    """
    xp = run.xp
    b = v.shape[1]
    g = run.gemm(conj_t(v), v)
    t = xp.zeros((b, b), dtype=g.dtype)
    for i in range(b):
        t[i, i] = tau[i]
        if i:
            t[:i, i] = -tau[i] * (t[:i, :i] @ g[:i, i])
    run.native(b ** 3 / 3.0, "larft recurrence")
    return t


def _larfb(run, v, t, c, side, trans):
    """Apply the block reflector ``H = I - V T V^H`` (or ``H^H``) to ``c`` in place."""
    if c.size == 0:
        return
    tt = conj_t(t) if trans else t
    if side == "L":
        w = run.gemm(conj_t(v), c)    # b x N
        w = run.gemm(tt, w)
        c -= run.gemm(v, w, like=c)
    else:
        w = run.gemm(c, v)            # M x b
        w = run.gemm(w, tt)
        c -= run.gemm(w, conj_t(v), like=c)


def _blocks(k, nb, reverse):
    starts = list(range(0, k, nb))
    return reversed(starts) if reverse else starts


def orgqr(qr, tau, *, block_size=None, slices=None, method=None, accuracy=None, plan=None,
          overwrite_a=False,
          check_finite=True, min_size=None, crossover=None):
    """Form the M x N matrix Q with orthonormal (unitary) columns from :func:`geqrf` output.

    Parameters
    ----------
    qr : (M, N) array_like, M >= N
        Householder vectors below the diagonal of the first ``K`` columns
        (as returned by :func:`geqrf`; for a wide factorization pass
        ``qr[:, :M]``, for the full Q of a tall one pad ``qr`` to M x M, as
        :func:`scipy.linalg.qr` does).
    tau : (K,) array_like, K <= N
        Scalar factors from :func:`geqrf`.
    block_size, slices, method, accuracy, min_size : optional
        As in :func:`geqrf`.
    overwrite_a : bool, optional
        Allow Q to be written into `qr` (float64 / complex128 arrays only).
    check_finite : bool, optional
        Check that the inputs contain only finite numbers.

    Returns
    -------
    q : (M, N) ndarray of float64 (complex128 if `qr` or `tau` is complex)
        The first N columns of ``H_0 H_1 ... H_{K-1}``.

    Notes
    -----
    LAPACK ``dorgqr`` / ``zungqr``: starting from the first N columns of the identity, the
    block reflectors are applied from the last block to the first, each to
    the trailing ``(M - k) x (N - k)`` part only (the rest is already final),
    with the three emulated GEMMs of the compact WY form.
    """
    xp, qr = as_float_matrix(qr, "orgqr", "qr", check_finite=check_finite)
    plan = routine_plan(xp, plan, slices, method, accuracy, "orgqr")
    _, tau = as_float_matrix(tau, "orgqr", "tau", check_finite=check_finite, ndim=(1,))
    nb = check_block_size(block_size, "orgqr", plan.engine, min(qr.shape))
    cross = check_min_size(min_size, "orgqr", crossover)
    m, n = qr.shape
    k = tau.shape[0]
    if n > m:
        raise ValueError(f"ozlinalg.lapack.orgqr: need M >= N, got qr of shape {qr.shape}")
    if k > n:
        raise ValueError(
            f"ozlinalg.lapack.orgqr: tau has {k} entries, more than the {n} columns of qr"
        )
    dt = work_dtype(qr, tau)
    tau = tau.astype(dt, copy=False)
    if m == 0 or n == 0:
        return work_copy(xp, qr, overwrite_a, dt)
    if xp is np and (k < cross or k <= nb):
        a = work_copy(xp, qr, overwrite_a, dt)
        orgqr_ = _lapack.zungqr if dt == np.complex128 else _lapack.dorgqr
        q, _, info = orgqr_(a, tau, lwork=_lwork(orgqr_, a, tau))
        if info < 0:
            raise ValueError(f"illegal value in argument {-info} of internal orgqr")
        Runner.native(_flops_orgqr(m, n, k), "orgqr (native: below min_size or one panel)")
        a[...] = q
        return a
    run = Runner(plan, emulate=not (k < cross or k <= nb))
    vsrc = qr.astype(dt, copy=False)
    if overwrite_a and vsrc is qr:
        vsrc = xp.array(qr[:, :k], copy=True)   # the reflectors are read while q is written
    q = work_copy(xp, qr, overwrite_a, dt)
    q[...] = 0.0
    idx = xp.arange(n)
    q[idx, idx] = 1.0
    for j in _blocks(k, nb, reverse=True):
        j1 = min(k, j + nb)
        v = unit_lower(xp, vsrc[j:, j:j1])
        t = larft(run, v, tau[j:j1])
        _larfb(run, v, t, q[j:, j:], "L", False)
    return q


def _flops_orgqr(m, n, k):
    return 4.0 * m * n * k - 2.0 * (m + n) * k * k + 4.0 * k ** 3 / 3.0


def ormqr(qr, tau, c, *, side="L", trans="T", block_size=None, slices=None, method=None,
          accuracy=None, plan=None,
          overwrite_c=False, check_finite=True, min_size=None, crossover=None):
    """Multiply ``c`` by ``Q`` or ``Q^T`` (``Q^H``) from :func:`geqrf` output.

    Computes ``Q^T c`` (side 'L', trans 'T', the default), ``Q c`` (side 'L',
    trans 'N'), ``c Q`` (side 'R', trans 'N') or ``c Q^T`` (side 'R', trans
    'T'), with ``Q = H_0 H_1 ... H_{K-1}`` never formed. For a complex ``Q``
    (complex `qr` or `tau`) trans is 'N' or 'C' (``Q^H``), as LAPACK
    ``zunmqr``.

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
        Apply ``Q`` ('N') or ``Q^T`` ('T', the default; 'C' is 'T' for real
        ``Q``). For complex ``Q``: ``Q^H`` ('C'); 'T' raises ValueError.
    block_size, slices, method, accuracy, min_size : optional
        As in :func:`geqrf`.
    overwrite_c : bool, optional
        Allow the result to be written into `c` (arrays of the result's dtype
        only).
    check_finite : bool, optional
        Check that the inputs contain only finite numbers.

    Returns
    -------
    cq : ndarray of float64 (complex128 if any input is complex)
        The product, with the shape of `c`.

    Notes
    -----
    LAPACK ``dormqr`` / ``zunmqr``: the reflectors are applied ``nb`` at a
    time as block reflectors ``I - V T V^H`` (``T`` from ``dlarft``), each with three
    emulated GEMMs, in the order the product requires.
    """
    xp, qr = as_float_matrix(qr, "ormqr", "qr", check_finite=check_finite)
    plan = routine_plan(xp, plan, slices, method, accuracy, "ormqr")
    _, tau = as_float_matrix(tau, "ormqr", "tau", check_finite=check_finite, ndim=(1,))
    _, c = as_float_matrix(c, "ormqr", "c", check_finite=check_finite, ndim=(1, 2))
    side = check_side(side, "ormqr")
    tc = trans_code(trans, "ormqr")
    qdt = work_dtype(qr, tau)
    if tc == 1 and qdt == xp.complex128:
        raise ValueError("ozlinalg.lapack.ormqr: trans='T' is not supported for complex Q; "
                         "use 'C' (Q^H), as LAPACK zunmqr")
    t = tc != 0
    nb = check_block_size(block_size, "ormqr", plan.engine, tau.shape[0])
    cross = check_min_size(min_size, "ormqr", crossover)
    k = tau.shape[0]
    out = work_copy(xp, c, overwrite_c, work_dtype(qr, tau, c))
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
    tau = tau.astype(out.dtype, copy=False)
    qr = qr.astype(out.dtype, copy=False)
    if xp is np and (k < cross or k <= nb):
        if out.dtype == np.complex128:
            ormqr_, tr = _lapack.zunmqr, "C" if t else "N"
        else:
            ormqr_, tr = _lapack.dormqr, "T" if t else "N"
        res, _, info = ormqr_(side, tr, qr[:, :k], tau, cm,
                              lwork=_lwork(ormqr_, side, tr, qr[:, :k], tau, cm))
        if info < 0:
            raise ValueError(f"illegal value in argument {-info} of internal ormqr")
        rows, cols = cm.shape
        other = cols if side == "L" else rows
        Runner.native(4.0 * rows * cols * k - 2.0 * other * k * k,
                      "ormqr (native, below min_size)")
        cm[...] = res
        return out
    run = Runner(plan, emulate=not (k < cross or k <= nb))
    # Q^T C and C Q walk the reflectors forward, Q C and C Q^T backward.
    forward = (side == "L") == t
    for j in _blocks(k, nb, reverse=not forward):
        j1 = min(k, j + nb)
        v = unit_lower(xp, qr[j:, j:j1])
        tt = larft(run, v, tau[j:j1])
        target = cm[j:, :] if side == "L" else cm[:, j:]
        _larfb(run, v, tt, target, side, t)
    return out
