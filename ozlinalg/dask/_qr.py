"""Householder QR of dask arrays: TSQR for one column of blocks, blocked
Householder over block columns otherwise."""
from __future__ import annotations

from . import _kernels as K
from ._tasks import (
    OzTask,
    block_keys,
    capture,
    chunk_namespace,
    filled,
    getitem,
    new_arrays,
    offsets,
    sub,
    task_name,
)
from ._validate import as_dask, check_dtype, finite, result_dtype, work_dtype

__all__ = ["qr", "tsqr"]


def tsqr(a, opts, want_q=True):
    """``(q, r)`` of a dask array with one column of blocks (``r`` is ``k x n``,
    ``k = min(m, n)``, one block; ``q`` has the row chunks of ``a``).

    The graph of :func:`dask.array.linalg.tsqr` (Benson, Gleich & Demmel
    2013), one level: ``oz-tsqr-block`` factors every row block (emulated QR),
    ``oz-tsqr-top`` factors the stacked ``R_i`` in one task, and
    ``oz-tsqr-q`` forms ``Q_i Q2_i`` (one emulated product per block).
    """
    from dask.base import tokenize

    m, n = a.shape
    token = tokenize(a, opts, want_q)
    name = task_name("tsqr", token)
    qt = OzTask(K.qr_block, opts)
    ka = block_keys(a)
    nr = a.numblocks[0]
    heights = [min(h, n) for h in a.chunks[0]]   # rows of each R_i
    dsk = {}
    for i in range(nr):
        dsk[sub(name, "-block"), i] = (qt, ka[i, 0])
        dsk[sub(name, "-r"), i] = (getitem, (sub(name, "-block"), i), 1)
    dsk[sub(name, "-top")] = (qt, (K.stack, *[(sub(name, "-r"), i) for i in range(nr)]))
    k = min(m, n)
    r_out = (sub(name, "-R"), (k, n), ((k,), (n,)), a.dtype)
    dsk[r_out[0], 0, 0] = (getitem, sub(name, "-top"), 1)
    if not want_q:
        (r,) = new_arrays(dsk, name, [r_out], [a])
        return None, r
    prod = OzTask(K.product, opts)
    off = offsets(heights)
    q_name = sub(name, "-q")
    for i in range(nr):
        q2 = (sub(name, "-q2"), i)
        dsk[q2] = (K.rows, (getitem, sub(name, "-top"), 0), off[i], off[i + 1])
        dsk[q_name, i, 0] = (prod, (getitem, (sub(name, "-block"), i), 0), q2)
    q, r = new_arrays(dsk, name, [(q_name, (m, k), (a.chunks[0], (k,)), a.dtype), r_out], [a])
    return q, r


def householder_graph(a, opts, q_cols):
    """Blocked Householder QR over block columns of ``a`` (square blocks).

    Step ``k``: ``oz-qr-panel`` gathers block column ``k`` from the diagonal
    down and factors it in one task (ozlinalg's blocked ``geqrf``), giving
    ``R_kk`` and the compact-WY reflector ``I - V T V^H``; each trailing block
    column ``j`` is updated with ``W_j = T^H sum_i V_i^H A_ij`` (``-proj``:
    emulated products, summed in FP64 in ``-w``) and ``A_ij -= V_i W_j``
    (``-update``). ``Q`` (``q_cols`` columns, or none) is formed as LAPACK's
    ``orgqr``: the reflectors applied to the identity from the last to the first.
    Returns ``(dsk, name, r_name, q_name)`` (``name``: the family's).
    """
    from dask.base import tokenize

    token = tokenize(a, opts, q_cols)
    name = task_name("qr", token)
    xp = chunk_namespace(a)
    rows_ = a.chunks[0]
    nbr, nbc = a.numblocks
    nk = min(nbr, nbc)
    cur = dict(block_keys(a))
    panel_t, proj_t, w_t, upd_t = (OzTask(K.qr_panel, opts), OzTask(K.product, opts),
                                   OzTask(K.reflector_w, opts), OzTask(K.reflector_update, opts))
    dsk = {}
    voff = {}
    for k in range(nk):
        panel = (sub(name, "-panel"), k)
        dsk[panel] = (panel_t, *[cur[i, k] for i in range(k, nbr)])
        v = (sub(name, "-v"), k)
        dsk[v] = (getitem, panel, 1)
        t = (sub(name, "-t"), k)
        dsk[t] = (getitem, panel, 2)
        voff[k] = offsets(rows_[k:])
        for i in range(k, nbr):
            dsk[sub(name, "-vblock"), i, k] = (K.rows, v, voff[k][i - k], voff[k][i - k + 1])
        cur[k, k] = (sub(name, "-rkk"), k)
        dsk[cur[k, k]] = (getitem, panel, 0)
        for i in range(k + 1, nbr):
            cur[i, k] = None   # below the diagonal: zero in R
        for j in range(k + 1, nbc):
            _apply_reflector(dsk, name, k, j, cur, nbr, proj_t, w_t, upd_t, 2)
    r_name = sub(name, "-r")
    for (i, j), key in cur.items():
        dsk[r_name, i, j] = key if key is not None else (K.zeros_block, rows_[i],
                                                         a.chunks[1][j], a.dtype, xp)
    q_name = None
    if q_cols:
        q_name = sub(name, "-q")
        qchunks = q_cols
        qoff, roff = offsets(qchunks), offsets(rows_)
        qcur = {(i, j): (sub(name, "-eye"), i, j) for i in range(nbr) for j in range(len(qchunks))}
        for (i, j), key in qcur.items():
            dsk[key] = (K.eye_block, rows_[i], qchunks[j], roff[i], qoff[j], a.dtype, xp)
        for k in range(nk - 1, -1, -1):
            for j in range(k, len(qchunks)):
                _apply_reflector(dsk, sub(name, "-form"), k, j, qcur, nbr, proj_t, w_t, upd_t, 0,
                                 vname=name)
        for (i, j), key in qcur.items():
            dsk[q_name, i, j] = key
    return dsk, name, r_name, q_name


def _apply_reflector(dsk, name, k, j, cur, nbr, proj_t, w_t, upd_t, trans, vname=None):
    """Tasks for ``C <- (I - V T V^H) C`` (trans 0) or ``(I - V T^H V^H) C`` (trans 2)
    on block column ``j``, rows from block ``k`` down."""
    vname = vname or name
    parts = []
    for i in range(k, nbr):
        key = (sub(name, "-proj"), k, i, j)
        dsk[key] = (proj_t, (sub(vname, "-vblock"), i, k), cur[i, j], 2, 0)
        parts.append(key)
    w = (sub(name, "-w"), k, j)
    dsk[w] = (w_t, (sub(vname, "-t"), k), trans, *parts)
    for i in range(k, nbr):
        key = (sub(name, "-update"), k, i, j)
        dsk[key] = (upd_t, cur[i, j], (sub(vname, "-vblock"), i, k), w)
        cur[i, j] = key


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """QR of a dask array (:func:`scipy.linalg.qr`'s API, modes 'full',
    'economic' and 'r'; no pivoting).

    One column of blocks (tall and skinny): TSQR (:func:`tsqr`). Otherwise
    the matrix is rechunked to square blocks of its first row chunk's height
    and factored by blocked Householder over block columns
    (:func:`householder_graph`). ``mode='full'`` of a tall matrix forms the
    ``M x M`` Q (``M^2`` entries): prefer 'economic'.
    """
    (a,) = as_dask(a)
    check_dtype(a, "ozlinalg.linalg.qr")
    if pivoting:
        raise NotImplementedError("ozlinalg.linalg.qr: pivoting is not available for dask arrays")
    if mode not in ("full", "economic", "r"):
        raise ValueError("Mode argument should be one of ['full', 'r', 'economic'] "
                         "(mode='raw' is not available for dask arrays)")
    if a.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {a.shape}")
    dt, wt = result_dtype(a), work_dtype(a)
    a = finite(a, check_finite).astype(wt)
    m, n = a.shape
    opts = capture(min(m, n))
    if a.numblocks[1] == 1 and (mode != "full" or m <= n):
        q, r = tsqr(a, opts, want_q=mode != "r")
    else:
        nb = a.chunks[0][0]
        a = a.rechunk((nb, nb))
        k = min(m, n)
        qcols = None
        if mode != "r":
            total = m if mode == "full" else k
            qcols = tuple(min(nb, total - s) for s in range(0, total, nb))
        dsk, name, r_name, q_name = householder_graph(a, opts, qcols)
        outs = [(r_name, a.shape, a.chunks, wt)]
        if q_name is not None:
            outs.append((q_name, (m, sum(qcols)), (a.chunks[0], qcols), wt))
        r, *q = new_arrays(dsk, name, outs, [a])
        q = q[0] if q else None
        if mode == "economic":
            r = r[:k]
    if mode != "economic" and m > r.shape[0]:   # SciPy: R is M x N
        import dask.array as da

        pad = filled("zeros", (m - r.shape[0], n), ((m - r.shape[0],), r.chunks[1]), wt, a,
                     "qr-zeros")
        r = da.concatenate([r, pad])
    if dt != wt:
        r = r.astype(dt)
        q = None if q is None else q.astype(dt)
    return (r,) if mode == "r" else (q, r)
