"""Block functions: what one task computes on a worker.

Each function takes and returns blocks of the chunks' array type (NumPy, or
CuPy on GPU workers: the same code, the namespace taken from the blocks), is
pure (no state, no side effects: Dask may run it twice, or again on another
worker after a failure), and does its BLAS-3 work through ozlinalg's
single-node routines under the options that
:class:`~ozlinalg.dask._tasks.OzTask` puts in force; with CuPy blocks those
run on the GPU engine of the worker's current device.

Functions that make a block from nothing (identity, zeros, permutation,
pivots) take the chunks' namespace by name (``xp``: ``"numpy"`` or
``"cupy"``, :func:`namespace`), so their results live where the other
blocks do. Row interchanges travel as small host index arrays and are moved to
the device where a block is indexed with them.
"""
from __future__ import annotations

import importlib
import operator
import warnings
from functools import reduce

import numpy as np

from .._array import array_namespace, to_numpy
from .._exceptions import LinAlgError, LinAlgWarning
from .._matmul import matmul
from .._options import resolve
from ..lapack import (
    Runner,
    conj_t,
    first_zero_diagonal,
    geqrf,
    getrf,
    larft,
    orgqr,
    potrf,
    swaps_to_rows,
    trsm,
    unit_lower,
)
from ..lapack.scipy_conventions import (
    computes_in,
    datacopied,
    deliver,
    inplace_target,
    lapack_args,
    lapack_dtype,
    quiet,
)


def _lapack_args(n, like=None):
    """:func:`~ozlinalg.lapack.scipy_conventions.lapack_args` for one task's call of
    :mod:`ozlinalg.lapack` on order ``n``: the plan of the options the task runs
    under (:class:`~ozlinalg.dask._tasks.OzTask`), resolved for the blocks' namespace."""
    xp = np if like is None else array_namespace(like)
    return lapack_args(resolve(xp), n)


# --------------------------------------------------------------------------
# the chunks' namespace


def namespace(name):
    """The array module named ``name`` (``"numpy"``, ``"cupy"``): the namespace
    of a graph's chunks, recorded by name when the graph is built (a module
    does not travel in a task; its name does)."""
    return np if name == "numpy" else importlib.import_module(name)


def _index(xp, idx):
    """A host index array where blocks of ``xp`` can be indexed with it."""
    return idx if xp is np else xp.asarray(idx)


def to_namespace(x, xp):
    """Host array ``x`` as an array of namespace ``xp`` (by name)."""
    mod = namespace(xp)
    return x if mod is np else mod.asarray(x)


# --------------------------------------------------------------------------
# products


def op(x, t):
    """``x`` (t = 0), ``x.T`` (1) or ``x^H`` (2)."""
    if t == 0:
        return x
    return conj_t(x) if t == 2 else x.T


def product(x, y, tx=0, ty=0):
    """Emulated ``op(x) @ op(y)`` of two blocks."""
    return matmul(op(x, tx), op(y, ty))


def matmul_block(x, y):
    """Emulated block product in the layout of dask's blockwise matmul: the
    contracted block axis is kept as a length-1 axis before the last one."""
    return matmul(x, y)[..., None, :]


def sum_blocks(parts, axis=None, keepdims=False, dtype=None):
    """FP64 sum of the partial block products (``dask.array.reduction``'s
    chunk and aggregate step, without concatenation)."""
    out = reduce(operator.add, parts) if isinstance(parts, list) else parts
    return out if keepdims else out.squeeze(axis[0])


def minus_sum(target, *parts):
    """``target - (p_0 + p_1 + ...)``: the partial products summed in FP64 first."""
    if not parts:
        return target
    return target - reduce(operator.add, parts)


# --------------------------------------------------------------------------
# validation and assembly


def check_finite_block(x):
    """The block itself, or SciPy's ValueError for Inf / NaN entries."""
    xp = array_namespace(x)
    if x.size and x.dtype.kind in "fc" and not bool(xp.isfinite(x).all()):
        raise ValueError("array must not contain infs or NaNs")
    return x


def rows(x, r0, r1):
    return x[r0:r1]


def stack(*blocks):
    xp = array_namespace(*blocks)
    return xp.concatenate(blocks, axis=0)


def eye_block(rows_, cols, r0, c0, dtype, xp="numpy"):
    """Block ``[r0:r0+rows, c0:c0+cols]`` of the identity."""
    mod = namespace(xp)
    out = mod.zeros((rows_, cols), dtype=dtype)
    d = mod.arange(max(r0, c0), min(r0 + rows_, c0 + cols))
    out[d - r0, d - c0] = 1
    return out


def zeros_block(rows_, cols, dtype, xp="numpy"):
    return namespace(xp).zeros((rows_, cols), dtype=dtype)


def tril_block(x, k=0, unit=False):
    xp = array_namespace(x)
    out = xp.tril(x, k)
    if unit:
        n = min(out.shape)
        out[xp.arange(n), xp.arange(n)] = 1
    return out


def triu_block(x, k=0):
    return array_namespace(x).triu(x, k)


def astype(x, dtype):
    return x.astype(dtype, copy=False)


# --------------------------------------------------------------------------
# LU with partial pivoting over a whole column panel


def lu_panel(offset, on_zero, *blocks):
    """Factor the column panel (the blocks of one block column from the
    diagonal down, stacked) with partial pivoting over all its rows.

    Returns ``(lu, moves, piv)``: the factored panel in LAPACK's format, the
    row interchanges as ``(dst, src)`` index arrays relative to the panel's
    first row (``rows[dst] = rows[src]``), and LAPACK's pivots (relative). A
    zero pivot (1-based global index) raises :class:`LinAlgError` when ``on_zero == "raise"`` (as
    :func:`scipy.linalg.solve`), warns when ``"warn"`` (as
    :func:`scipy.linalg.lu_factor`), passes when ``"ignore"`` (``det``).
    """
    panel = stack(*blocks) if len(blocks) > 1 else blocks[0]
    b = panel.shape[1]
    with quiet():
        lu, piv = getrf(panel, warn=False, check_finite=False, **_lapack_args(b, panel))
    xp = array_namespace(lu)
    z = first_zero_diagonal(xp, lu[:b, :b])
    if z >= 0 and on_zero != "ignore":
        if on_zero == "raise":
            raise LinAlgError("Matrix is singular.")
        warnings.warn(f"Diagonal number {offset + z + 1} is exactly zero. Singular matrix.",
                      LinAlgWarning, stacklevel=2)
    piv = to_numpy(piv)
    return lu, swaps_to_rows(piv, 0), piv


def moves_from_piv(piv, offset):
    """``(dst, src)`` of one block of a global 0-based pivot vector (LAPACK's
    ``ipiv``, as :func:`scipy.linalg.lu_factor` returns it), relative to ``offset``."""
    return swaps_to_rows(to_numpy(piv).astype(np.intp) - offset, 0)


def inverse_moves(moves):
    dst, src = moves
    return src, dst


def rows_to_top(moves, block, lo):
    """The rows of ``block`` (panel rows ``lo ...``) that move into the top
    block: ``(positions in the top block, rows)``. Usually few or none (a row
    of a lower block can only move into the top block, see :func:`rows_from_top`)."""
    dst, src = moves
    sel = (src >= lo) & (src < lo + block.shape[0])
    return dst[sel], block[_index(array_namespace(block), src[sel] - lo)]


def top_after(moves, top, *picks):
    """The top block after the interchanges: its own rows, and those picked
    from the blocks below by :func:`rows_to_top`."""
    dst, src = moves
    xp = array_namespace(top)
    nt = top.shape[0]
    out = top.copy()
    own = (dst < nt) & (src < nt)
    out[_index(xp, dst[own])] = top[_index(xp, src[own])]
    for pos, vals in picks:
        if len(pos):
            out[_index(xp, pos)] = vals
    return out


def rows_from_top(moves, top, lo, size):
    """The rows of the top block that move into the block of panel rows
    ``lo .. lo+size``: ``(positions in that block, rows)``.

    A block below the top one can only receive rows of the top block: LAPACK's
    interchanges ``i <-> piv[i]`` with ``piv[i] >= i`` carry into a lower row
    only what sits in row ``i`` of the top block at that moment, which by
    induction came from the top block. So these few rows are all a lower block
    needs from the top one.
    """
    dst, src = moves
    sel = (dst >= lo) & (dst < lo + size)
    if bool((src[sel] >= top.shape[0]).any()):  # pragma: no cover - invariant above
        raise AssertionError("ozlinalg.dask: row interchange outside the top block")
    return dst[sel] - lo, top[_index(array_namespace(top), src[sel])]


def lower_after(block, drop):
    """A block below the top one after the interchanges (``drop``: what
    :func:`rows_from_top` gave for it)."""
    pos, vals = drop
    if not len(pos):
        return block
    out = block.copy()
    out[_index(array_namespace(block), pos)] = vals
    return out


def lu_trsm(diag, moves, top, *picks):
    """``U_kj = L_kk^{-1} (P A)_kj``: the top block after the interchanges,
    solved with the unit lower triangle of the factored diagonal block."""
    rhs = top_after(moves, top, *picks)
    with quiet():
        return trsm(diag, rhs, lower=True, unit_diagonal=True, check_finite=False,
                    **_lapack_args(diag.shape[0], diag))


def lu_update(block, drop, left, upper):
    """Trailing update ``(P A)_ij - L_ik U_kj`` (one emulated product)."""
    return lower_after(block, drop) - matmul(left, upper)


def perm_from_moves(n, *moves_and_offsets):
    """Global row order ``perm`` (``(P^T A) = A[perm]``) from every step's moves."""
    perm = np.arange(n)
    for off, (dst, src) in zip(moves_and_offsets[::2], moves_and_offsets[1::2]):
        perm[off + dst] = perm[off + src]
    return perm


def perm_block(perm, r0, r1, c0, c1, dtype, xp="numpy"):
    """Block of the permutation matrix ``P`` with ``A = P L U`` (``perm``: host)."""
    out = np.zeros((r1 - r0, c1 - c0), dtype=dtype)
    cols = np.arange(c0, c1)
    rws = perm[cols]
    sel = (rws >= r0) & (rws < r1)
    out[rws[sel] - r0, cols[sel] - c0] = 1
    return to_namespace(out, xp)


def perm_indices(perm, xp="numpy"):
    """SciPy's ``p_indices`` (``a == l[p] @ u``): the inverse of the row order."""
    return to_namespace(np.argsort(perm), xp)


# --------------------------------------------------------------------------
# triangular solves


def trsm_block(diag, lower, trans, unit, target, *parts):
    """``op(T_ii)^{-1} (target - sum(parts))`` for one block of the solution."""
    rhs = minus_sum(target, *parts)
    with quiet():
        return trsm(diag, rhs, lower=lower, trans=trans, unit_diagonal=unit,
                    check_finite=False, **_lapack_args(diag.shape[0], diag))


# --------------------------------------------------------------------------
# Cholesky


def hermitian_from(x, lower):
    """The Hermitian matrix whose ``lower`` (or upper) triangle ``x`` holds."""
    xp = array_namespace(x)
    t = xp.tril(x, -1) if lower else xp.triu(x, 1)
    d = xp.diagonal(x).real if x.dtype.kind == "c" else xp.diagonal(x)
    return t + conj_t(t) + xp.diag(d).astype(x.dtype, copy=False)


def chol_diag(offset, lower, a_ii, *parts):
    """``L_ii = chol(A_ii - sum_p L_ip L_ip^H)``, from the stored triangle of ``A_ii``."""
    target = minus_sum(hermitian_from(a_ii, lower), *parts)
    try:
        with quiet():
            return potrf(target, lower=True, check_finite=False,
                         **_lapack_args(target.shape[0], target))
    except LinAlgError as exc:
        minor = str(exc).split("-th")[0]
        if not minor.isdigit():  # pragma: no cover
            raise
        raise LinAlgError(f"{int(minor) + offset}-th leading minor of the array is not "
                          "positive definite") from None


def chol_offdiag(l_jj, a_ij, transposed, *parts):
    """``L_ij = (A_ij - sum_p L_ip L_jp^H) L_jj^{-H}``; ``transposed``: the
    block is read from the upper triangle (``A_ij = A_ji^H``)."""
    target = minus_sum(conj_t(a_ij) if transposed else a_ij, *parts)
    # x L_jj^H = t  <=>  L_jj x^H = t^H
    with quiet():
        xh = trsm(l_jj, conj_t(target), lower=True, check_finite=False,
                  **_lapack_args(l_jj.shape[0], l_jj))
    return conj_t(xh)


# --------------------------------------------------------------------------
# QR


def qr_block(x):
    """Economic Householder QR of one block: ``(q, r)``, as
    ``scipy.linalg.qr(x, mode="economic")`` gives them (``geqrf``, then Q
    formed in the factor's own columns by ``orgqr``)."""
    if x.size == 0:
        return _native_qr(x)
    xp = array_namespace(x)
    m, n = x.shape
    k = min(m, n)
    dt = lapack_dtype(x)
    a = x if isinstance(x, xp.ndarray) else xp.asarray(x)
    target = inplace_target(xp, a, datacopied(a, x), dt)
    direct = computes_in(xp, target)
    with quiet():
        f, tau = geqrf(target if direct else a, overwrite_a=direct, check_finite=False,
                       **_lapack_args(k, a))
    f_out = deliver(xp, f, target, dt)
    r = xp.triu(f_out if m < n else f_out[:n, :])
    with quiet():
        q = orgqr(f[:, :k], tau[:k], overwrite_a=True, check_finite=False,
                  **_lapack_args(k, f))
    return deliver(xp, q, f_out[:, :m] if m < n else f_out, dt), r


def _native_qr(x):
    """SciPy's own QR of an empty block (nothing to factor)."""
    import scipy.linalg

    from .._emulable import original

    q, r = original(scipy.linalg.qr)(to_numpy(x), mode="economic", check_finite=False)
    xp = array_namespace(x)
    return xp.asarray(q), xp.asarray(r)


def qr_panel(*blocks):
    """Householder QR of a column panel: ``(r_top, v, t)``: the panel's top
    block of R and its reflectors ``H = I - V T V^H`` (compact WY, LAPACK
    ``geqrf`` + ``larft``)."""
    panel = stack(*blocks) if len(blocks) > 1 else blocks[0]
    top = blocks[0].shape[0]
    xp = array_namespace(panel)
    b = panel.shape[1]
    k = min(panel.shape)
    with quiet():
        f, tau = geqrf(panel, check_finite=False, **_lapack_args(k, panel))
    v = unit_lower(xp, f[:, :k])
    t = larft(Runner(resolve(xp)), v, tau)
    return xp.triu(f[:top, :b]), v, t


def reflector_w(t, trans, *parts):
    """``op(T) @ (V^H C)`` with the projections ``V_i^H C_ij`` summed in FP64."""
    return matmul(op(t, trans), reduce(operator.add, parts))


def reflector_update(c, v, w):
    """``C_ij - V_i W_j`` (one emulated product)."""
    return c - matmul(v, w)


def item(pair, i, dtype=None):
    """Entry ``i`` of a task's tuple result (an array of the chunks' namespace)."""
    out = pair[i]
    return out if dtype is None else out.astype(dtype)


def lstsq_rank_s(r):
    """``(rank, s)`` of ``R`` (so of ``A``): singular values and the rank at
    LAPACK's default threshold, natively (``R`` is n x n); both arrays of
    ``R``'s namespace (``rank`` 0-d), as dask's own ``lstsq`` gives them."""
    xp = array_namespace(r)
    s = xp.linalg.svd(r, compute_uv=False)
    tol = (s[0] if s.size else 0) * max(r.shape) * np.finfo(float).eps
    return xp.asarray((s > tol).sum()), s



def global_piv(piv, offset, xp="numpy"):
    """A panel's 0-based pivots (host) made global (LAPACK's ``ipiv``, as SciPy
    returns it), in the chunks' namespace (as ``cupyx.scipy.linalg.lu_factor``)."""
    return to_namespace((piv + offset).astype(np.int32), xp)


def det_from_lu(diag_blocks, pivs):
    """``det(a)`` from the diagonal blocks of the factors: the product of U's
    diagonal, its sign flipped once per row interchange (LAPACK's ``getrf``
    convention, as :func:`scipy.linalg.det`)."""
    xp = array_namespace(*diag_blocks)
    d = xp.prod(xp.concatenate([xp.diagonal(b) for b in diag_blocks]))
    piv = np.concatenate([to_numpy(p) for p in pivs])
    swaps = int((piv != np.arange(piv.size)).sum())
    return -d if swaps % 2 else d
