"""``solve``, ``inv`` and ``lstsq`` of dask arrays from the blocked factorizations."""
from __future__ import annotations

import numpy as np

from ..lapack.scipy_conventions import common_dtype
from . import _kernels as K
from ._cholesky import cho_factor, cho_solve
from ._lu import getrf_arrays, getrs_graph
from ._qr import qr
from ._tasks import capture, filled, meta_like, new_array, task_name
from ._triangular import solve_triangular
from ._validate import (
    as_dask,
    check_dtype,
    finite,
    result_dtype,
    square_blocks,
    system,
    work_dtype,
)

__all__ = ["solve", "inv", "det", "lstsq"]

_LU_KINDS = {"gen", "general", "sym", "symmetric", "her", "hermitian", "diagonal",
             "tridiagonal", "banded"}
_KINDS = _LU_KINDS | {"pos", "positive definite", "upper triangular", "lower triangular"}


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False, *, refine=False):
    """Solve ``a x = b`` for dask arrays (:func:`scipy.linalg.solve`'s API).

    ``assume_a``: ``'pos'`` uses the blocked Cholesky, the triangular kinds
    the block triangular solve, every other kind (and ``None``: SciPy's
    structure detection would need the values, so nothing is detected) the
    blocked LU with partial pivoting over whole column panels; ``'sym'`` /
    ``'her'`` first complete the matrix from the triangle named by `lower`.
    A singular matrix (an exactly zero pivot) raises ``LinAlgError`` when the
    failing task runs; no condition estimate is made (no ill-conditioning
    warning). `overwrite_a` / `overwrite_b` are ignored (dask arrays are
    immutable). ``refine``: ``False`` and ``"auto"`` give the DGEMM-level blocked
    solve (the graph has no refined form: its residual steps would each be a pass
    over the whole distributed matrix); ``True`` raises ``NotImplementedError``.
    """
    from dask.base import tokenize

    if refine is True:
        raise NotImplementedError(
            "ozlinalg.dask.solve: refine=True is not available for dask arrays (the "
            "blocked graph solves at DGEMM level); pass refine=False or 'auto'")
    if refine not in (False, "auto"):
        raise ValueError(f"refine must be True, False or 'auto', got {refine!r}")

    a, b = as_dask(a, b)
    kind = "gen" if assume_a is None else assume_a
    if kind not in _KINDS:
        raise ValueError(f"{assume_a} is not a recognized matrix structure")
    if b.ndim not in (1, 2) or a.ndim != 2 or b.shape[0] != a.shape[0]:
        raise ValueError("Input b has to have same number of rows as input a")
    if transposed and (a.dtype.kind == "c" or b.dtype.kind == "c"):
        raise NotImplementedError("scipy.linalg.solve can currently not solve a^T x = b or "
                                  "a^H x = b for complex matrices.")
    dt = common_dtype(a, b)  # scipy.linalg.solve's own rule (integers: float64)
    a, b, vec, _, wt = system(a, b, "ozlinalg.linalg.solve", check_finite)
    if kind in ("upper triangular", "lower triangular"):
        x = solve_triangular(a, b, trans=1 if transposed else 0,
                             lower=kind == "lower triangular", check_finite=False)
    elif kind in ("pos", "positive definite"):
        x = cho_solve(cho_factor(a, lower=lower, check_finite=False), b, check_finite=False)
    else:
        if kind in ("sym", "symmetric", "her", "hermitian"):
            a = _complete(a, lower, hermitian=kind in ("her", "hermitian"))
        opts = capture(a.shape[0])
        lu_, p, _ = getrf_arrays(a, opts, "raise", wt)
        t = 1 if transposed else 0
        x = getrs_graph(lu_, p, b, t, opts, tokenize(lu_, p, b, t, opts))
    x = x[:, 0] if vec else x
    return x.astype(dt) if dt != wt else x


def _complete(a, lower, hermitian):
    """The full symmetric (Hermitian) matrix from the triangle of ``a`` named by `lower`."""
    import dask.array as da

    t = da.tril(a, -1) if lower else da.triu(a, 1)
    d = da.diagonal(a)
    if hermitian:
        d = d.real.astype(a.dtype)
    return (t + (t.conj().T if hermitian else t.T) + da.diag(d)).rechunk(a.chunks)


def inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    """Inverse of a square dask array (:func:`scipy.linalg.inv`'s API): :func:`solve`
    with the identity (chunked like `a`) as right-hand side."""
    (a,) = as_dask(a)
    check_dtype(a, "ozlinalg.linalg.inv")
    a = square_blocks(a, "ozlinalg.linalg.inv")
    eye = filled("eye", a.shape, a.chunks, a.dtype, a, "eye")
    kind = assume_a if assume_a in ("pos", "positive definite", "upper triangular",
                                    "lower triangular") else "gen"
    x = solve(a, eye, lower=lower, check_finite=check_finite, assume_a=kind)
    dt = result_dtype(a)  # LAPACK's rule, not solve's
    return x.astype(dt) if x.dtype != dt else x


def det(a, overwrite_a=False, check_finite=True):
    """Determinant of a square dask array (:func:`scipy.linalg.det`'s API), a
    0-d dask array, from the blocked LU (one task gathers the diagonal blocks)."""
    from dask.base import tokenize

    (a,) = as_dask(a)
    check_dtype(a, "ozlinalg.linalg.det")
    a = square_blocks(a, "ozlinalg.linalg.det")
    wt = work_dtype(a)  # also det's result dtype, as SciPy's (float64 / complex128)
    a = finite(a, check_finite).astype(wt)
    opts = capture(a.shape[0])
    lu_, p, _ = getrf_arrays(a, opts, "ignore", wt)
    name = task_name("det", tokenize(lu_, p))
    nb = p.numblocks[0]
    d = {(name,): (K.det_from_lu, [(lu_.name, k, k) for k in range(nb)],
                   [(p.name, k) for k in range(nb)])}
    return new_array(d, name, [lu_, p], (), (), wt)


def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True,
          lapack_driver=None):
    """Full-rank least squares for dask arrays (:func:`scipy.linalg.lstsq`'s API).

    ``M >= N``: ``x = R^{-1} Q^H b`` from :func:`~ozlinalg.dask._qr.qr`
    (economic); ``M < N``: the minimum-norm ``x = Q R^{-H} b`` from the QR of
    ``a^H``. Returns ``(x, residues, rank, s)``, all lazy: ``residues`` (the
    squared norms of ``b - a x``, for ``M > N``; else empty), ``rank`` (a 0-d
    dask array) and ``s`` (singular values of ``R``, those of ``a``) from one
    native task on the small ``R``. There is no rank-deficient fallback: a
    rank-deficient `a` gives a meaningless ``x`` (check ``rank``).
    """
    import dask.array as da
    from dask.base import tokenize

    from ._matmul import matmul

    if lapack_driver not in (None, "gelsd", "gelsy", "gelss"):
        raise ValueError(f'LAPACK driver "{lapack_driver}" is not found')
    a, b = as_dask(a, b)
    check_dtype(a, "ozlinalg.linalg.lstsq")
    check_dtype(b, "ozlinalg.linalg.lstsq", "b")
    if a.ndim != 2:
        raise ValueError("Input array a should be 2D")
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ValueError(f"Shape mismatch: a and b should have the same number of rows "
                         f"({a.shape[0]} != {b.shape[0]}).")
    dt, wt = result_dtype(a, b), work_dtype(a, b)
    a = finite(a, check_finite).astype(wt)
    b = finite(b, check_finite).astype(wt)
    m, n = a.shape
    b = b.rechunk({0: a.chunks[0]})
    if m >= n:
        q, r = qr(a, mode="economic", check_finite=False)
        x = solve_triangular(r, matmul(q.conj().T, b), check_finite=False)
    else:
        q, r = qr(a.conj().T, mode="economic", check_finite=False)
        y = solve_triangular(r, b.rechunk({0: r.chunks[0]}), trans=2, check_finite=False)
        x = matmul(q, y)
    rs = r.rechunk(-1).map_blocks(K.lstsq_rank_s, dtype=object, meta=np.empty((), object),
                                  drop_axis=[0, 1],
                                  name=task_name("lstsq-rank-s", tokenize(r)))
    rank = rs.map_blocks(K.item, 0, dtype=np.intp, meta=meta_like(a, 0, np.intp))
    rdt = np.dtype(np.float32 if dt in (np.float32, np.complex64) else np.float64)
    s = da.map_blocks(K.item, rs, 1, rdt, dtype=rdt, new_axis=0,
                      chunks=((min(m, n),),), meta=meta_like(a, 1, rdt))
    if m > n:
        res = b - matmul(a, x)
        residues = (abs(res) ** 2).sum(axis=0).astype(rdt)
    else:
        residues = da.empty((0,), dtype=rdt, meta=meta_like(a, 1, rdt))
    return x.astype(dt), residues, rank, s
