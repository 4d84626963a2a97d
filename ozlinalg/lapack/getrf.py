"""Blocked LU factorization with partial pivoting (``getrf``) and its solver."""
from __future__ import annotations

import warnings

import numpy as np

from .._exceptions import LinAlgWarning
from ._common import (
    Runner,
    as_float_matrix,
    check_block_size,
    check_min_size,
    flops_getrf,
    native_getrf,
    routine_plan,
    swap_rows,
    swaps_to_rows,
    trans_code,
    work_copy,
    work_dtype,
)
from .lu_one_level import getrf_one_level, getrs_one_level, one_level
from .trsm import checked_trsm, solve_left_inplace

__all__ = ["getrf", "getrs"]


def getrf(a, *, block_size=None, slices=None, method=None, accuracy=None, plan=None,
          overwrite_a=False,
          check_finite=True, min_size=None, crossover=None, warn=True):
    """LU factorization with partial pivoting, ``a = P @ L @ U``.

    Parameters
    ----------
    a : (M, N) array_like
        Matrix to factor (real, converted to float64; or complex, converted
        to complex128: panels by LAPACK ``zgetrf``, updates by the complex
        emulated product).
    block_size : int, optional
        Panel width ``nb``: the recursion's leaves, factored natively (default:
        the engine's, see Notes).
    slices : int or "auto", optional
        Slice count passed to :func:`ozlinalg.matmul` (default from
        :func:`ozlinalg.options`).
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
        Allow the factors to be written into `a` (float64 / complex128
        arrays only).
    check_finite : bool, optional
        Check that the input contains only finite numbers.
    min_size : int, optional
        If ``min(M, N)`` is below this, the whole factorization runs in native
        LAPACK (default :data:`ozlinalg.lapack.DEFAULT_MIN_SIZE`; 0 always
        emulates the trailing updates).
    warn : bool, optional
        Warn (``LinAlgWarning``) on an exactly zero pivot (default). Callers
        that check the pivots themselves pass False: a thread-safe alternative
        to filtering the warning.

    Returns
    -------
    lu : (M, N) ndarray of float64 (complex128 for complex `a`)
        ``U`` in the upper triangle, the multipliers of ``L`` (unit diagonal
        not stored) below it, as LAPACK ``getrf`` and
        :func:`scipy.linalg.lu_factor` return them.
    piv : (min(M, N),) ndarray of int32
        0-based pivot indices: row ``i`` was interchanged with row
        ``piv[i]``, in order.

    Warns
    -----
    scipy.linalg.LinAlgWarning
        If a pivot is exactly zero (the factorization is completed, as in
        LAPACK, but ``U`` is singular).

    See Also
    --------
    getrs : solve with the factors.
    scipy.linalg.lu_factor : native equivalent.

    Notes
    -----
    Recursive LU (Toledo, *Locality of reference in LU decomposition with
    partial pivoting*, SIMAX 1997; LAPACK ``dgetrf2``), whose updates are few
    large products instead of one rank-``nb`` product per panel. The columns
    are halved (at a multiple of ``nb``) down to panels of at most ``nb``:

    1. factor the left half recursively (a panel of ``<= nb`` columns: natively
       with partial pivoting, LAPACK ``getrf`` / cuSOLVER);
    2. apply its row interchanges to the right half;
    3. ``U12 = L11^{-1} A12`` by the recursive triangular solve of
       :func:`trsm` (diagonal blocks of order ``nb`` natively, couplings
       emulated);
    4. ``A22 -= L21 @ U12`` through :func:`ozlinalg.matmul`: inner dimension
       the left half's width (``n/2`` at the top), in column chunks
       (:data:`TRAILING_CHUNKS`) when the matrix is factored in the caller's
       buffer;
    5. factor the right half recursively and apply its interchanges to the
       left half.

    The pivots are those of partial pivoting, in LAPACK's format. Each level of
    the recursion costs the emulated products' per-entry passes once over
    about half the matrix, ``log2(n / nb)`` levels in all (the right-looking
    form paid them ``n / nb`` times). Steps 3-4 carry ``1 - O(nb / n)`` of the
    ``2/3 n^3`` flops. The emulated products have DGEMM-level normwise error,
    so the backward error ``||P A - L U|| / ||A||`` is that of LAPACK's (see
    docs/factorizations.md). The default ``nb``: the engine's ``block_size``
    (512 on the CPU engines) capped at a quarter of ``min(M, N)``, but at
    least 128. On the 2-core CPU where it was measured (``python
    benchmarks/studies/factorization_split.py --n 2048 4096 --threads 1 --clock
    cpu [--method crt] [--slices 3] [--block-size 128]``; docs/performance.md,
    "Factorizations: where the time goes") getrf with crt at n = 4096 costs
    2.2x LAPACK, the single 4096^3 product's own ratio (right-looking: 3.3x);
    wider leaves are faster there (native flops are cheaper than emulated ones
    on a CPU), narrower ones keep more flops emulated (nb = 128: 95 % at 4096).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.lapack import getrf
    >>> a = np.array([[1., 2.], [3., 4.]])
    >>> lu, piv = getrf(a, min_size=0)
    >>> piv
    array([1, 1], dtype=int32)
    """
    xp, a = as_float_matrix(a, "getrf", check_finite=check_finite)
    plan = routine_plan(xp, plan, slices, method, accuracy, "getrf")
    nb = check_block_size(block_size, "getrf", plan.engine, min(a.shape))
    cross = check_min_size(min_size, "getrf", crossover)
    m, n = a.shape
    k = min(m, n)
    lu = work_copy(xp, a, overwrite_a)
    if k == 0:
        return lu, xp.zeros(0, dtype=xp.int32)

    if k < cross or k <= nb:
        # in place when lu is F-ordered
        f, piv, info = native_getrf(xp, lu, overwrite=True, engine=plan.engine)
        if f is not lu:
            lu[...] = f
        Runner.native(flops_getrf(m, n), "getrf (native: below min_size or one panel)")
        if warn:
            _warn_singular(info)
        return lu, xp.asarray(piv)

    run = Runner(plan)
    piv = np.empty(k, dtype=np.int32)
    if xp is np and one_level(m, n, nb):
        info = getrf_one_level(run, lu, nb, piv)
        if warn:
            _warn_singular(info)
        return lu, piv
    in_place = lu is a
    lu_rec = _Recursive(run, lu, nb, piv, trailing_chunk(n, nb, in_place=in_place),
                        inner_limit(k, nb) if in_place else None)
    info = lu_rec.factor(0, k)
    if k < n:
        # wide: the columns right of the square part get its interchanges and L11^{-1}
        swap_rows(xp, lu, piv, 0, slice(k, n), engine=plan.engine)
        solve_left_inplace(run, lu[:k, :k], lu[:k, k:], True, True, lu_rec.leaf)
    if warn:
        _warn_singular(info)
    return lu, xp.asarray(piv)


#: The trailing updates ``A22 -= L21 @ U12`` are applied in column chunks of
#: ``n / TRAILING_CHUNKS`` columns (a multiple of the panel width), but not
#: narrower than :data:`MIN_CHUNK_COLUMNS_IN_PLACE` when the matrix is
#: factored in the caller's buffer (``overwrite_a`` asks for memory economy)
#: or :data:`MIN_CHUNK_COLUMNS` when ozlinalg works on its own copy (speed
#: first: below n = 4096 one product per update). On ozlinalg's own copy a
#: chunk is never narrower than the update's inner dimension k either
#: (:meth:`_Recursive.update`: each chunk splits the whole ``L21`` again,
#: ``m x k`` entries; at chunk >= k that re-splitting costs at most what the
#: chunk's own output passes cost); in the caller's buffer k is cut instead, in
#: pieces of at most ``n / INNER_PIECES_IN_PLACE`` (the recursion's top update
#: has k = n/2, and a product holds the slices / residues of its operands beside
#: its result and working buffers, about 40 bytes per output entry). Peak during
#: an in-place crt LU (docs/factorizations.md): 1.45x the matrix at n = 2048,
#: 1.50x at 4096. ``python benchmarks/studies/lu_inplace_memory.py`` measures it.
TRAILING_CHUNKS = 16
INNER_PIECES_IN_PLACE = 4
MIN_CHUNK_COLUMNS = 2048
MIN_CHUNK_COLUMNS_IN_PLACE = 256


def inner_limit(n, nb):
    """The largest inner dimension of an in-place update of an ``n``-column LU:
    ``n / INNER_PIECES_IN_PLACE``, a multiple of ``nb``, at least ``nb``."""
    return max(nb, n // INNER_PIECES_IN_PLACE // nb * nb)


def trailing_chunk(n, nb, in_place=False):
    """Least columns per trailing-update product for an ``n``-column matrix."""
    least = MIN_CHUNK_COLUMNS_IN_PLACE if in_place else MIN_CHUNK_COLUMNS
    return max(nb, max(least, n // TRAILING_CHUNKS) // nb * nb)


class _Recursive:
    """Recursive LU with partial pivoting (LAPACK ``dgetrf2``; Toledo 1997) of the
    columns of ``lu`` down to panels of at most ``nb`` columns factored natively.

    ``factor(c0, c1)`` factors ``lu[c0:, c0:c1]`` (the rows from the diagonal
    down), writes its interchanges into ``piv[c0:c1]`` (0-based absolute rows)
    and applies them to the columns ``c0:c1`` only; the caller applies them to
    the columns left and right. Rows are swapped on the whole matrix's column
    blocks (Fortran-contiguous: LAPACK ``laswp``).
    """

    __slots__ = ("run", "xp", "lu", "nb", "piv", "chunk", "inner", "leaf")

    def __init__(self, run, lu, nb, piv, chunk, inner=None):
        self.run, self.xp, self.lu, self.nb, self.piv = run, run.xp, lu, nb, piv
        self.chunk = chunk
        #: the updates' largest inner dimension (None: unlimited)
        self.inner = inner
        #: order of the triangular solves' natively solved diagonal blocks: nb too
        #: (at nb / 4, as the right-looking code had, getrf took 1.2x the time at
        #: n = 2048, crt: more, narrower products)
        self.leaf = nb

    def factor(self, c0, c1):
        """Factor ``lu[c0:, c0:c1]``; returns LAPACK's info (1-based absolute index of
        the first exactly zero pivot, or 0)."""
        xp, lu, run = self.xp, self.lu, self.run
        m = lu.shape[0]
        w = c1 - c0
        if w <= self.nb:
            f, p, inf = native_getrf(xp, lu[c0:, c0:c1], engine=run.engine)
            lu[c0:, c0:c1] = f
            run.native(flops_getrf(m - c0, w), "getrf panel")
            self.piv[c0:c1] = p + c0
            return inf + c0 if inf else 0
        # split at a multiple of nb, so that the panels are full
        s = c0 + max(self.nb, (w // 2) // self.nb * self.nb)
        info = self.factor(c0, s)
        swap_rows(xp, lu, self.piv[c0:s] - c0, c0, slice(s, c1), engine=run.engine)
        # U12 = L11^{-1} A12 (L11 unit lower; its upper part holds U11, unread)
        solve_left_inplace(run, lu[c0:s, c0:s], lu[c0:s, s:c1], True, True, self.leaf)
        if s < m:
            self.update(c0, s, c1)
        info2 = self.factor(s, c1)
        swap_rows(xp, lu, self.piv[s:c1] - s, s, slice(c0, s), engine=run.engine)
        return info or info2

    def update(self, c0, s, c1):
        """``lu[s:, s:c1] -= lu[s:, c0:s] @ lu[c0:s, s:c1]`` (inner dimension ``s - c0``).

        On ozlinalg's own copy: column chunks of at least ``max(chunk, s - c0)``
        columns (each chunk splits the whole ``L21`` again: at chunk >= k that costs
        at most what the chunk's own output passes cost). In the caller's buffer
        (``inner`` set): chunks of ``chunk`` columns and pieces of at most ``inner``
        of the inner dimension, so that no product's operands or output approach
        the matrix's size (:data:`TRAILING_CHUNKS`)."""
        lu, run = self.lu, self.run
        width = c1 - s
        k = s - c0
        step = self.chunk if self.inner else max(self.chunk, k)
        parts = max(1, width // step)
        bounds = [s + (width * i) // parts for i in range(parts + 1)]
        pieces = 1 if not self.inner else max(1, -(-k // self.inner))
        inner = [c0 + (k * i) // pieces for i in range(pieces + 1)]
        for k0, k1 in zip(inner[:-1], inner[1:]):
            l21 = lu[s:, k0:k1]
            for a, b in zip(bounds[:-1], bounds[1:]):
                lu[s:, a:b] -= run.gemm(l21, lu[k0:k1, a:b], like=lu)


def _warn_singular(info):
    if info > 0:
        warnings.warn(
            f"Diagonal number {info} is exactly zero. Singular matrix.",
            LinAlgWarning,
            stacklevel=3,
        )


def getrs(lu, piv, b, *, trans=0, block_size=None, slices=None, method=None, accuracy=None,
          plan=None, overwrite_b=False, check_finite=True, min_size=None, crossover=None):
    """Solve ``a @ x = b`` (``a.T``, ``a^H``) from the output of :func:`getrf`.

    Parameters
    ----------
    lu : (N, N) array_like
        Factors from :func:`getrf`.
    piv : (N,) array_like of int
        0-based pivot indices from :func:`getrf`.
    b : (N,) or (N, K) array_like
        Right-hand sides.
    trans : {0, 1, 2, 'N', 'T', 'C'}, optional
        Solve ``a x = b`` (0/'N'), ``a^T x = b`` (1/'T') or ``a^H x = b``
        (2/'C', the conjugate transpose; the same as 1 for real `lu`).
    block_size, slices, method, accuracy, plan, min_size : optional
        As in :func:`trsm` (used for both triangular solves).
    overwrite_b : bool, optional
        Allow the solution to be written into `b` (arrays of the result's
        dtype only).
    check_finite : bool, optional
        Check that the inputs contain only finite numbers.

    Returns
    -------
    x : ndarray of float64 (complex128 if `lu` or `b` is complex)
        Solution, with the shape of `b`.

    Notes
    -----
    LAPACK ``getrs``: the row interchanges, then two blocked triangular
    solves (:func:`trsm`) whose off-diagonal updates are emulated GEMMs. As
    in LAPACK, an exactly zero pivot in `lu` gives Inf / NaN, not an error.
    """
    xp, lu = as_float_matrix(lu, "getrs", "lu", check_finite=check_finite, square=True)
    plan = routine_plan(xp, plan, slices, method, accuracy, "getrs")
    _, b = as_float_matrix(b, "getrs", "b", check_finite=check_finite, ndim=(1, 2))
    n = lu.shape[0]
    piv_h = np.asarray(piv.get() if hasattr(piv, "get") else piv)
    if piv_h.shape != (n,):
        raise ValueError(f"ozlinalg.lapack.getrs: piv must have shape ({n},), got {piv_h.shape}")
    if b.shape[0] != n:
        raise ValueError(
            f"ozlinalg.lapack.getrs: shapes of lu {lu.shape} and b {b.shape} are incompatible"
        )
    if n and (piv_h.min() < 0 or piv_h.max() >= n):
        raise ValueError("ozlinalg.lapack.getrs: pivot indices out of range")
    t = trans_code(trans, "getrs")
    x = work_copy(xp, b, overwrite_b, work_dtype(lu, b))
    if x.size == 0:
        return x
    dst, src = swaps_to_rows(piv_h.astype(np.intp), 0)
    nb = check_block_size(block_size, "getrs", plan.engine, n)
    cross = check_min_size(min_size, "getrs", crossover)

    def solve(x, lower, unit, trans):
        return checked_trsm(plan, lu, x, "L", lower, trans, unit, nb, cross, True, False)

    if not t:
        if dst.size:
            x[dst] = x[src]
        if xp is np and n >= cross and one_level(n, n, nb):
            getrs_one_level(Runner(plan), lu.astype(work_dtype(lu), copy=False),
                            x[:, None] if x.ndim == 1 else x, nb)
            return x
        x = solve(x, True, True, 0)
        x = solve(x, False, False, 0)
    else:
        x = solve(x, False, False, t)
        x = solve(x, True, True, t)
        if dst.size:
            x[src] = x[dst]
    return x
