"""``a @ b`` on dask arrays: one emulated product per block triple, FP64 sums."""
from __future__ import annotations

from .._options import get_options
from ..ozaki.params import count_from_moduli
from . import _kernels as K
from ._tasks import OzTask, capture, meta_like, task_name
from ._validate import as_dask, check_dtype, work_dtype

__all__ = ["matmul"]


def matmul(a, b, *, slices=None, method=None, balance=None, accuracy=None, moduli=None):
    """Lazy emulated ``a @ b`` of dask arrays (NumPy's matmul shape rules).

    Parameters
    ----------
    a, b : dask.array.Array or array_like
        Operands; NumPy arrays are wrapped with the chunks of the other
        operand's matching axis.
    slices, method, balance, accuracy, moduli : optional
        As in :func:`ozlinalg.matmul`; unset ones come from
        :func:`ozlinalg.options` as in force NOW (when the graph is built).
        ``accuracy="faithful"`` makes the inner dimension one chunk: a sum of
        faithful block products would not be faithful.

    Returns
    -------
    c : dask.array.Array of float64 (complex128 for complex input)
        Nothing is computed until ``c.compute()`` (or ``persist``). Its
        chunks have the type of the operands' (NumPy, or CuPy: then every
        block product runs on the GPU engine of the worker holding it).

    Notes
    -----
    The graph has the shape of :func:`dask.array.matmul`: one task
    ``oz-matmul`` per block triple ``(i, k, j)`` computing the emulated
    product ``A_ik @ B_kj`` (:func:`ozlinalg.matmul` under the captured
    options), then a tree reduction ``oz-matmul-sum`` that adds the ``k``
    partial products in FP64 (no concatenation). The error of an entry is
    therefore that of the single-node emulation of each block product plus the
    FP64 rounding of the sum over the inner blocks; with one inner chunk (always
    in faithful mode) an entry has the bits ``ozlinalg.matmul`` gives it, for a
    fixed count (``slices="auto"`` decides per block).

    Examples
    --------
    >>> import dask.array as da, numpy as np, ozlinalg
    >>> a = da.from_array(np.arange(16.).reshape(4, 4), chunks=2)
    >>> c = ozlinalg.matmul(a, a)        # lazy
    >>> bool(np.array_equal(c.compute(), a.compute() @ a.compute()))
    True
    """
    import dask.array as da
    from dask.base import tokenize

    a, b = as_dask(a, b)
    check_dtype(a, "ozlinalg.matmul", "a")
    check_dtype(b, "ozlinalg.matmul", "b")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("ozlinalg.matmul: operands must be at least 1-D (use * for scalars)")
    dt = work_dtype(a, b)
    a, b = a.astype(dt), b.astype(dt)
    a_1d, b_1d = a.ndim == 1, b.ndim == 1
    if a_1d:
        a = a[None, :]
    if b_1d:
        b = b[:, None]
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"ozlinalg.matmul: inner dimensions differ: a has shape {a.shape}, "
            f"b has shape {b.shape} ({a.shape[-1]} != {b.shape[-2]})")
    if a.ndim < b.ndim:
        a = a[(b.ndim - a.ndim) * (None,)]
    elif a.ndim > b.ndim:
        b = b[(a.ndim - b.ndim) * (None,)]
    if a.chunks[-1] != b.chunks[-2]:
        b = b.rechunk({b.ndim - 2: a.chunks[-1]})

    slices = count_from_moduli(get_options().method if method is None else method, slices,
                               moduli, "ozlinalg.dask.matmul")
    opts = capture(min(a.shape[-2], a.shape[-1], b.shape[-1]), slices=slices, method=method,
                   balance=balance, accuracy=accuracy)
    if opts.accuracy == "faithful" and len(a.chunks[-1]) > 1:
        a = a.rechunk({a.ndim - 1: -1})
        b = b.rechunk({b.ndim - 2: -1})
    token = tokenize(a, b, opts)
    # Indices as in dask.array.matmul: the contracted axis stays in the output
    # (length-1 blocks) so that the sum over it is a separate reduction.
    out_ind = tuple(range(a.ndim + 1))
    lhs_ind = tuple(range(a.ndim))
    rhs_ind = tuple(range(a.ndim - 2)) + (lhs_ind[-1], a.ndim)
    parts = da.blockwise(OzTask(K.matmul_block, opts), out_ind, a, lhs_ind, b, rhs_ind,
                         adjust_chunks={lhs_ind[-1]: 1}, dtype=dt, concatenate=False,
                         name=task_name("matmul", token), meta=meta_like(a, a.ndim + 1, dt))
    if parts.shape[-2] == 1:
        out = parts.squeeze(-2)
    else:
        out = da.reduction(parts, K.sum_blocks, K.sum_blocks, axis=-2, dtype=dt,
                           concatenate=False, name=task_name("matmul-sum", token),
                           meta=meta_like(a, a.ndim, dt))
    if a_1d:
        out = out.squeeze(-2)
    if b_1d:
        out = out.squeeze(-1)
    return out
