"""Blocked Cholesky on dask arrays (the graph of :func:`dask.array.linalg.cholesky`)."""
from __future__ import annotations

from . import _kernels as K
from ._tasks import OzTask, block_keys, capture, chunk_namespace, new_array, sub, task_name
from ._triangular import trsm_graph
from ._validate import as_dask, check_dtype, finite, result_dtype, square_blocks, system, work_dtype

__all__ = ["cholesky", "cho_factor", "cho_solve", "potrf_graph"]


def potrf_graph(a, lower, opts):
    """``(dsk, name)`` of the lower Cholesky factor ``L`` blocks ``(name, i, j)``, i >= j.

    Left-looking, as :func:`dask.array.linalg.cholesky`: block ``(i, j)``
    needs the emulated products ``L_ip L_jp^H`` (``oz-chol-dot``) over
    ``p < j``, summed in FP64 and subtracted from ``A_ij``; then
    ``oz-chol-diag`` factors a diagonal block (ozlinalg's blocked ``potrf``,
    emulated inside) or ``oz-chol-trsm`` solves ``L_ij L_jj^H = ...``. Only the
    triangle of ``a`` named by `lower` is read (SciPy's rule).
    """
    from dask.base import tokenize

    token = tokenize(a, lower, opts)
    name = task_name("chol", token)
    ka = block_keys(a)
    off = [sum(a.chunks[0][:i]) for i in range(a.numblocks[0])]
    dot, diag, offd = (OzTask(K.product, opts), OzTask(K.chol_diag, opts),
                       OzTask(K.chol_offdiag, opts))
    dsk = {}
    for i in range(a.numblocks[0]):
        for j in range(i + 1):
            parts = []
            for p in range(j):
                key = (sub(name, "-dot"), i, p, j)
                dsk[key] = (dot, (name, i, p), (name, j, p), 0, 2)
                parts.append(key)
            if i == j:
                dsk[name, i, i] = (diag, off[i], bool(lower), ka[i, i], *parts)
            else:
                src = ka[i, j] if lower else ka[j, i]
                dsk[name, i, j] = (offd, (name, j, j), src, not lower, *parts)
    return dsk, name


def _factor(a, lower, check_finite, fname):
    (a,) = as_dask(a)
    check_dtype(a, fname)
    a = square_blocks(a, fname)
    dt, wt = result_dtype(a), work_dtype(a)
    a = finite(a, check_finite).astype(wt)
    opts = capture(a.shape[0])
    dsk, name = potrf_graph(a, lower, opts)
    out = name + ("-lower" if lower else "-upper")
    xp = chunk_namespace(a)
    for i in range(a.numblocks[0]):
        for j in range(a.numblocks[0]):
            r, c = a.chunks[0][i], a.chunks[0][j]
            li, lj = (i, j) if lower else (j, i)    # the block of L behind this one
            if li < lj:
                dsk[out, i, j] = (K.zeros_block, r, c, wt, xp)
            else:
                blk = (K.tril_block, (name, li, lj)) if i == j else (name, li, lj)
                dsk[out, i, j] = blk if lower else (K.op, blk, 2)
    c = new_array(dsk, out, [a], a.shape, a.chunks, wt)
    return (c.astype(dt) if dt != wt else c), opts


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """Cholesky factor of a Hermitian positive definite dask array
    (:func:`scipy.linalg.cholesky`'s API; `overwrite_a` is ignored).

    Raises ``LinAlgError`` ("%d-th leading minor of the array is not positive
    definite", 1-based over the whole matrix) when the failing task runs.
    """
    return _factor(a, lower, check_finite, "ozlinalg.linalg.cholesky")[0]


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)`` for :func:`cho_solve` (:func:`scipy.linalg.cho_factor`'s API);
    the other triangle of ``c`` is zero."""
    return _factor(a, lower, check_finite, "ozlinalg.linalg.cho_factor")[0], lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` from :func:`cho_factor`'s output: two block triangular solves."""

    c, lower = c_and_lower
    c, b, vec, dt, wt = system(c, b, "ozlinalg.linalg.cho_solve", check_finite, "c")
    x = _potrs(c, bool(lower), b, capture(c.shape[0]))
    x = x[:, 0] if vec else x
    return x.astype(dt) if dt != wt else x


def _potrs(c, lower, b, opts):
    """``x`` with ``(L L^H) x = b`` (``lower``) or ``(U^H U) x = b`` (2-D ``b``
    with the row chunks of ``c``)."""
    from dask.base import tokenize

    name = task_name("cho-solve", tokenize(c, lower, b, opts))
    kc = block_keys(c)
    kb = block_keys(b)
    dsk = {}
    nb, nc = c.numblocks[0], b.numblocks[1]
    tri = lambda i, p: kc[i, p]  # noqa: E731
    # lower: L y = b, L^H x = y;  upper: U^H y = b, U x = y
    y = trsm_graph(dsk, sub(name, "-1"), tri, lambda i, j: kb[i, j], nb, nc, lower,
                   0 if lower else 2, False, opts)
    x = trsm_graph(dsk, sub(name, "-2"), tri, lambda i, j: y[i, j], nb, nc, lower,
                   2 if lower else 0, False, opts)
    for (i, j), key in x.items():
        dsk[name, i, j] = key
    return new_array(dsk, name, [c, b], b.shape, b.chunks, c.dtype)
