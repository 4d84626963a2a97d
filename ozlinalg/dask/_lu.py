"""LU with partial pivoting over whole column panels, on dask arrays."""
from __future__ import annotations

import numpy as np

from ..lapack import trans_code
from . import _kernels as K
from ._tasks import (
    OzTask,
    block_keys,
    capture,
    chunk_namespace,
    getitem,
    new_array,
    new_arrays,
    offsets,
    sub,
    task_name,
)
from ._triangular import trsm_graph
from ._validate import as_dask, check_dtype, finite, result_dtype, square_blocks, system, work_dtype

__all__ = ["lu_factor", "lu_solve", "lu", "getrf_graph", "getrf_arrays", "swap_column"]


def swap_column(dsk, name, k, j, cur, moves, lo, heights, top_task=None, lower_task=None):
    """Tasks applying step ``k``'s row interchanges (``moves``, relative to
    block row ``k``) to block column ``j``; updates ``cur`` to the new keys.

    ``lo[i]`` is the offset of block row ``i`` relative to block row ``k``,
    ``heights[i]`` its number of rows. Rows of a block below ``k`` can only be
    exchanged with rows of block ``k`` (:func:`~ozlinalg.dask._kernels.rows_from_top`),
    so only those rows travel: each lower block sends the rows that move up
    (``-pick``) and receives the rows of block ``k`` that move down into it
    (``-drop``), usually none or a handful each; block ``k`` gathers the picks.
    ``top_task(top, picks)`` and ``lower_task(i, block, drop)`` (optional)
    return the key of a task that does more than the swap (LU's ``U_kj``
    solve and trailing update).
    """
    nblocks = len(heights)
    picks = []
    for i in range(k + 1, nblocks):
        key = (sub(name, "-pick"), k, i, j)
        dsk[key] = (K.rows_to_top, moves, cur[i, j], lo[i])
        picks.append(key)
    top_old = cur[k, j]
    if top_task is None:
        top = (sub(name, "-swap"), k, k, j)
        dsk[top] = (K.top_after, moves, top_old, *picks)
    else:
        top = top_task(top_old, picks)
    for i in range(k + 1, nblocks):
        drop = (sub(name, "-drop"), k, i, j)
        dsk[drop] = (K.rows_from_top, moves, top_old, lo[i], heights[i])
        if lower_task is None:
            key = (sub(name, "-swap"), k, i, j)
            dsk[key] = (K.lower_after, cur[i, j], drop)
        else:
            key = lower_task(i, cur[i, j], drop)
        cur[i, j] = key
    cur[k, j] = top


def getrf_graph(a, opts, on_zero):
    """Right-looking blocked LU with partial pivoting.

    Returns ``(dsk, factors, piv, perm)``: the tasks, the key prefixes of the
    factor blocks ``(factors, i, j)`` (LAPACK's format) and of the global
    pivot blocks ``(piv, k)``, and the key of the row order ``perm``.

    Step ``k``: (1) ``oz-lu-panel``: the whole column panel (block rows
    ``k..N-1`` of block column ``k``) is gathered into one task and factored
    with partial pivoting over all its rows (ozlinalg's blocked ``getrf``,
    emulated inside); (2) its row interchanges are applied to every other
    block column (``-pick`` / ``-swap`` tasks, left columns included, so the
    result has LAPACK's format); (3) ``oz-lu-u``: ``U_kj = L_kk^{-1} (P A)_kj``;
    (4) ``oz-lu-update``: ``A_ij -= L_ik U_kj``, one emulated product each.
    """
    from dask.base import tokenize

    token = tokenize(a, opts, on_zero)
    name = task_name("lu", token)
    off = offsets(a.chunks[0])
    nb = a.numblocks[0]
    cur = dict(block_keys(a))
    dsk = {}
    panel_t, trsm_t, update_t = (OzTask(K.lu_panel, opts), OzTask(K.lu_trsm, opts),
                                 OzTask(K.lu_update, opts))
    move_keys = []
    for k in range(nb):
        panel = (sub(name, "-panel"), k)
        dsk[panel] = (panel_t, off[k], on_zero, *[cur[i, k] for i in range(k, nb)])
        moves = (sub(name, "-moves"), k)
        dsk[moves] = (getitem, panel, 1)
        move_keys.append(moves)
        factored = (sub(name, "-factors-of-panel"), k)
        dsk[factored] = (getitem, panel, 0)
        lo = {i: off[i] - off[k] for i in range(k, nb)}
        for i in range(k, nb):
            key = (sub(name, "-l"), i, k)
            dsk[key] = (K.rows, factored, lo[i], lo[i] + a.chunks[0][i])
            cur[i, k] = key
        diag = cur[k, k]
        for j in range(nb):
            if j < k:
                swap_column(dsk, name, k, j, cur, moves, lo, a.chunks[0])
            elif j > k:
                def u_task(top_old, picks, j=j, k=k, diag=diag, moves=moves):
                    key = (sub(name, "-u"), k, j)
                    dsk[key] = (trsm_t, diag, moves, top_old, *picks)
                    return key

                def update_task(i, block, drop, j=j, k=k):
                    key = (sub(name, "-update"), k, i, j)
                    dsk[key] = (update_t, block, drop, cur[i, k], (sub(name, "-u"), k, j))
                    return key

                swap_column(dsk, name, k, j, cur, moves, lo, a.chunks[0], u_task, update_task)
    perm = (sub(name, "-perm"),)
    dsk[perm] = (K.perm_from_moves, a.shape[0],
                 *[x for k in range(nb) for x in (off[k], move_keys[k])])
    final = sub(name, "-factors")
    for (i, j), key in cur.items():
        dsk[final, i, j] = key
    piv = sub(name, "-piv")
    xp = chunk_namespace(a)
    for k in range(nb):
        dsk[piv, k] = (K.global_piv, (getitem, (sub(name, "-panel"), k), 2), off[k], xp)
    return dsk, final, piv, perm


def getrf_arrays(a, opts, on_zero, wt):
    """``(lu, piv, perm)`` of :func:`getrf_graph`: the factors and the global
    pivots as dask arrays (layers of their own over the shared factorization
    layer) and the key of the row order, which lives in that shared layer.
    Every caller splits the tasks the same way, so graphs of one ``a`` built
    by different callers (``lu_factor`` and ``lu``) merge without a key in
    two layers."""
    dsk, final, piv, perm = getrf_graph(a, opts, on_zero)
    base = final.replace("-factors-", "-", 1)
    lu_, p = new_arrays(dsk, base, [(final, a.shape, a.chunks, wt),
                                    (piv, (a.shape[0],), (a.chunks[0],), np.int32)], [a])
    return lu_, p, perm


def _prepare(a, fname, check_finite):
    (a,) = as_dask(a)
    check_dtype(a, fname)
    a = square_blocks(a, fname)
    wt = work_dtype(a)
    return finite(a, check_finite).astype(wt), result_dtype(a), wt


def lu_factor(a, overwrite_a=False, check_finite=True):
    """LU with partial pivoting of a square dask array (:func:`scipy.linalg.lu_factor`'s API).

    Returns
    -------
    lu : dask.array.Array
        ``L`` (unit diagonal not stored) and ``U`` in one matrix, LAPACK's
        format, with the chunks of `a` (columns rechunked to the row chunks).
    piv : dask.array.Array of int32
        0-based pivot indices: row ``i`` was interchanged with row ``piv[i]``.

    Notes
    -----
    Partial pivoting is real, across block rows: each panel is factored over
    ALL rows from the diagonal down (see :func:`getrf_graph`), which gives the
    same pivot sequence as LAPACK's blocked ``dgetrf`` up to ties. A zero
    pivot warns (``LinAlgWarning``) in the task, as SciPy does.
    `overwrite_a` is accepted and ignored (dask arrays are immutable).
    """
    a, dt, wt = _prepare(a, "ozlinalg.linalg.lu_factor", check_finite)
    opts = capture(a.shape[0])
    lu_, p, _ = getrf_arrays(a, opts, "warn", wt)
    return (lu_.astype(dt) if dt != wt else lu_), p


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` (``a^T``, ``a^H``) from :func:`lu_factor`'s dask output.

    The interchanges are applied step by step with the same ``-pick`` /
    ``-swap`` tasks as in the factorization, then two block triangular solves
    (:func:`~ozlinalg.dask._triangular.trsm_graph`).
    """
    from dask.base import tokenize

    lu_, piv = lu_and_piv
    t = trans_code(trans, "lu_solve")
    lu_, b, vec, dt, wt = system(lu_, b, "ozlinalg.linalg.lu_solve", check_finite, "lu")
    (piv,) = as_dask(piv)
    if piv.shape != (lu_.shape[0],):
        raise ValueError(f"piv must have shape ({lu_.shape[0]},), got {piv.shape}")
    piv = piv.rechunk(lu_.chunks[0])
    opts = capture(lu_.shape[0])
    x = getrs_graph(lu_, piv, b, t, opts, tokenize(lu_, piv, b, t, opts))
    if vec:
        x = x[:, 0]
    return x.astype(dt) if dt != wt else x


def getrs_graph(lu_, piv, b, t, opts, token):
    """``x`` (dask array) with ``op(P L U) x = b``."""
    name = task_name("lu-solve", token)
    off = offsets(lu_.chunks[0])
    nb, nc = lu_.numblocks[0], b.numblocks[1]
    kl, kp = block_keys(lu_), block_keys(piv)
    cur = dict(block_keys(b))
    dsk = {}

    def moves(k, inverse):
        key = (sub(name, "-inverse" if inverse else "-moves"), k)
        dsk[key] = (K.moves_from_piv, kp[(k,)], off[k])
        if inverse:
            dsk[key] = (K.inverse_moves, dsk[key])
        return key

    def permute(inverse):
        steps = range(nb - 1, -1, -1) if inverse else range(nb)
        for k in steps:
            mv = moves(k, inverse)
            lo = {i: off[i] - off[k] for i in range(k, nb)}
            for j in range(nc):
                swap_column(dsk, sub(name, "-inv") if inverse else name, k, j, cur, mv, lo,
                            lu_.chunks[0])

    tri = lambda i, p: kl[i, p]  # noqa: E731
    if t == 0:
        permute(False)
        y = trsm_graph(dsk, sub(name, "-l"), tri, lambda i, j: cur[i, j], nb, nc, True, 0, True,
                       opts)
        x = trsm_graph(dsk, sub(name, "-u"), tri, lambda i, j: y[i, j], nb, nc, False, 0, False,
                       opts)
    else:
        y = trsm_graph(dsk, sub(name, "-u"), tri, lambda i, j: cur[i, j], nb, nc, False, t, False,
                       opts)
        x = trsm_graph(dsk, sub(name, "-l"), tri, lambda i, j: y[i, j], nb, nc, True, t, True,
                       opts)
        cur = dict(x)
        permute(True)
        x = cur
    out = sub(name, "-x")
    for (i, j), key in x.items():
        dsk[out, i, j] = key
    return new_array(dsk, out, [lu_, piv, b], b.shape, b.chunks, lu_.dtype)


def lu(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    """``p, l, u`` (or ``pl, u``) of a square dask array (:func:`scipy.linalg.lu`'s API).

    From :func:`lu_factor`'s graph: ``L`` and ``U`` are the triangles of the
    factored blocks, ``P`` (or the row indices ``perm`` with ``a[perm] = l @ u``
    when `p_indices`) is built from the interchanges of every step.
    """
    from dask.base import tokenize

    a, dt, wt = _prepare(a, "ozlinalg.linalg.lu", check_finite)
    opts = capture(a.shape[0])
    lu_, piv, perm = getrf_arrays(a, opts, "warn", wt)
    token = tokenize(lu_, permute_l, p_indices)
    off = offsets(a.chunks[0])
    nb = a.numblocks[0]
    xp = chunk_namespace(a)
    dsk2 = {}
    ln, un, pn = (task_name(s, token) for s in ("lu-lower", "lu-upper", "lu-p"))
    for i in range(nb):
        for j in range(nb):
            src = (lu_.name, i, j)
            ri, cj = a.chunks[0][i], a.chunks[0][j]
            if i > j:
                dsk2[ln, i, j] = src
                dsk2[un, i, j] = (K.zeros_block, ri, cj, wt, xp)
            elif i == j:
                dsk2[ln, i, j] = (K.tril_block, src, -1, True)
                dsk2[un, i, j] = (K.triu_block, src)
            else:
                dsk2[ln, i, j] = (K.zeros_block, ri, cj, wt, xp)
                dsk2[un, i, j] = src
            dsk2[pn, i, j] = (K.perm_block, perm, off[i], off[i + 1], off[j], off[j + 1],
                              wt if permute_l else dt, xp)
    outs = [(ln, a.shape, a.chunks, wt), (un, a.shape, a.chunks, wt)]
    if p_indices and not permute_l:   # SciPy's: a == l[p] @ u, the inverse of the row order
        pn = task_name("lu-perm", token)
        dsk2[pn, 0] = (K.perm_indices, perm, xp)
        outs.append((pn, (a.shape[0],), ((a.shape[0],),), np.intp))
    else:
        outs.append((pn, a.shape, a.chunks, wt if permute_l else dt))
    # the layers read the factors (lu_'s layer) and the row order (the factor layer)
    l_, u, p = new_arrays(dsk2, task_name("lu-triangles", token), outs, [lu_])
    l_, u = (l_.astype(dt), u.astype(dt)) if dt != wt else (l_, u)
    if permute_l:
        from ._matmul import matmul

        # P L: P is a permutation matrix, so the emulated product is exact.
        pl = matmul(p, l_)
        return (pl.astype(dt) if dt != wt else pl), u
    return p, l_, u
