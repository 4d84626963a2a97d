"""Block triangular solves (the graph of :func:`dask.array.linalg.solve_triangular`,
with emulated block products and options carried in the tasks)."""
from __future__ import annotations

from ..lapack import trans_code
from . import _kernels as K
from ._tasks import OzTask, block_keys, capture, new_array, sub, task_name
from ._validate import system

__all__ = ["solve_triangular", "trsm_graph"]


def trsm_graph(dsk, name, tri, rhs, nblocks, ncols, lower, trans, unit, opts):
    """Add the tasks of ``op(T) X = B`` to ``dsk``; return ``{(i, j): key}`` of X.

    ``tri(i, p)`` is the key of the stored block ``T_ip`` (``lower`` tells which
    triangle of T is stored), ``rhs(i, j)`` the key of ``B_ij``. Block ``i`` of
    the solution is ``op(T)_ii^{-1} (B_ij - sum_p op(T)_ip X_pj)`` over the
    blocks already solved, with the products emulated (``oz-trsm-dot``) and
    summed in FP64 before the subtraction (``oz-trsm``), as in
    :func:`dask.array.linalg.solve_triangular`.
    """
    eff_lower = bool(lower) != bool(trans)   # op(T) is lower triangular
    order = range(nblocks) if eff_lower else range(nblocks - 1, -1, -1)
    dot, solve = OzTask(K.product, opts), OzTask(K.trsm_block, opts)
    x = {}
    done = []
    for i in order:
        for j in range(ncols):
            parts = []
            for p in done:
                key = (sub(name, "-dot"), i, p, j)
                stored = tri(p, i) if trans else tri(i, p)
                dsk[key] = (dot, stored, x[p, j], trans)
                parts.append(key)
            x[i, j] = (name, i, j)
            dsk[x[i, j]] = (solve, tri(i, i), bool(lower), trans, bool(unit), rhs(i, j),
                            *parts)
        done.append(i)
    return x


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """Solve ``op(a) x = b`` for dask arrays (:func:`scipy.linalg.solve_triangular`'s API).

    Blocked forward / back substitution: per block of ``x`` one task solves
    the diagonal block (:func:`ozlinalg.linalg.solve_triangular`, emulated
    inside) after subtracting the FP64 sum of the emulated products with the
    blocks already solved. `overwrite_b` is accepted and ignored (dask arrays
    are immutable).
    """
    from dask.base import tokenize

    t = trans_code(trans, "solve_triangular")
    a, b, vec, dt, wt = system(a, b, "ozlinalg.linalg.solve_triangular", check_finite)
    opts = capture(a.shape[0])
    token = tokenize(a, b, t, lower, unit_diagonal, opts)
    name = task_name("trsm", token)
    dsk = {}
    ka, kb = block_keys(a), block_keys(b)
    trsm_graph(dsk, name, lambda i, p: ka[i, p], lambda i, j: kb[i, j], a.numblocks[0],
               b.numblocks[1], lower, t, unit_diagonal, opts)
    x = new_array(dsk, name, [a, b], b.shape, b.chunks, wt)
    if vec:
        x = x[:, 0]
    return x.astype(dt) if dt != wt else x
