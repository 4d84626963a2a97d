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
    swap_rows,
    swaps_to_rows,
    trans_code,
    work_copy,
    work_dtype,
)
from .trsm import solve_left_inplace, trsm

__all__ = ["getrf", "getrs"]


def getrf(a, *, block_size=None, slices=None, method=None, accuracy=None, overwrite_a=False,
          check_finite=True, min_size=None, crossover=None, warn=True):
    """LU factorization with partial pivoting, ``a = P @ L @ U``.

    Parameters
    ----------
    a : (M, N) array_like
        Matrix to factor (real, converted to float64; or complex, converted
        to complex128: panels by LAPACK ``zgetrf``, updates by the complex
        emulated product).
    block_size : int, optional
        Panel width ``nb`` (default 128): columns factored natively per step.
    slices : int or "auto", optional
        Slice count passed to :func:`ozlinalg.matmul` (default from
        :func:`ozlinalg.options`).
    method : str, optional
        Emulated GEMM method passed to :func:`ozlinalg.matmul`.
    accuracy : {"dgemm", "faithful"}, optional
        Accuracy of the emulated products, passed to :func:`ozlinalg.matmul`
        (``"faithful"``: every product certified within one ulp; the
        factorization's own rounding is LAPACK's).
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
    Right-looking blocked LU (LAPACK ``dgetrf``; Golub & Van Loan, Algorithm
    3.4.2). For each panel of ``nb`` columns:

    1. factor the ``(M - k) x nb`` panel natively with partial pivoting
       (LAPACK ``getrf`` / cuSOLVER);
    2. apply its row interchanges to the columns left and right of it;
    3. ``U12 = L11^{-1} A12`` by the blocked triangular solve of
       :func:`trsm` (diagonal blocks of ``nb/4`` natively, couplings
       emulated);
    4. trailing update ``A22 -= L21 @ U12`` through :func:`ozlinalg.matmul`,
       in column chunks (:data:`TRAILING_CHUNKS`), so that with
       ``overwrite_a`` a Fortran-ordered float64 matrix is factored in its
       own memory without a second matrix-sized temporary.

    Steps 3-4 carry ``1 - O(nb / n)`` of the ``2/3 n^3`` flops. The emulated
    products have DGEMM-level normwise error, so the backward error
    ``||P A - L U|| / ||A||`` is that of LAPACK's (see
    docs/factorizations.md).

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
    nb = check_block_size(block_size, "getrf", xp, min(a.shape))
    cross = check_min_size(min_size, "getrf", crossover)
    m, n = a.shape
    k = min(m, n)
    lu = work_copy(xp, a, overwrite_a)
    if k == 0:
        return lu, xp.zeros(0, dtype=xp.int32)

    if k < cross or k <= nb:
        f, piv, info = native_getrf(xp, lu, overwrite=True)  # in place when lu is F-ordered
        if f is not lu:
            lu[...] = f
        Runner.native(flops_getrf(m, n), "getrf (native: below min_size or one panel)")
        if warn:
            _warn_singular(info)
        return lu, xp.asarray(piv)

    run = Runner(xp, slices, method, accuracy=accuracy)
    leaf = max(8, nb // 4)
    chunk = trailing_chunk(n, nb, in_place=lu is a)
    piv = np.empty(k, dtype=np.int32)
    info = 0
    for j in range(0, k, nb):
        jb = min(nb, k - j)
        j1 = j + jb
        f, p, inf = native_getrf(xp, lu[j:, j:j1])
        lu[j:, j:j1] = f
        run.native(flops_getrf(m - j, jb), "getrf panel")
        if inf and not info:
            info = inf + j
        piv[j:j1] = p + j
        if j > 0:
            swap_rows(xp, lu, p, j, slice(0, j))
        if j1 < n:
            swap_rows(xp, lu, p, j, slice(j1, n))
        if j1 < n:
            # U12 = L11^{-1} A12 (L11 unit lower; its upper part holds U11, unread)
            solve_left_inplace(run, lu[j:j1, j:j1], lu[j:j1, j1:], True, True, leaf)
            if j1 < m:
                _update_trailing(run, lu, j, j1, chunk)
    if warn:
        _warn_singular(info)
    return lu, xp.asarray(piv)


#: The trailing update ``A22 -= L21 @ U12`` is applied in column chunks of
#: ``n / TRAILING_CHUNKS`` columns (a multiple of the panel width), but not
#: narrower than :data:`MIN_CHUNK_COLUMNS_IN_PLACE` when the matrix is
#: factored in the caller's buffer (``overwrite_a`` asks for memory economy)
#: or :data:`MIN_CHUNK_COLUMNS` when ozlinalg works on its own copy (speed
#: first: below n = 4096 one product per panel step, as before). One
#: emulated product holds its result and working buffers, about 40 bytes per
#: output entry, so a chunk's temporaries are about ``5 * chunk / n`` of the
#: matrix: in place 0.31 from n = 4096 up, 0.63 at n = 2048, instead of about
#: 5 in one product. Narrower products cost time on the CPU (per-call
#: splitting and planning): measured on a 4096 x 128 x 4096 update, chunks of
#: 512 columns took 0.7x the time of one product, of 256 1.0x, of 128 2x; at
#: 1024 rows, chunks of 512 1.1x, of 256 2.3x (2 loaded cores).
#: ``python benchmarks/studies/lu_inplace_memory.py`` measures the peak.
TRAILING_CHUNKS = 16
MIN_CHUNK_COLUMNS = 2048
MIN_CHUNK_COLUMNS_IN_PLACE = 256


def trailing_chunk(n, nb, in_place=False):
    """Columns per trailing-update product for an ``n``-column matrix."""
    least = MIN_CHUNK_COLUMNS_IN_PLACE if in_place else MIN_CHUNK_COLUMNS
    return max(nb, max(least, n // TRAILING_CHUNKS) // nb * nb)


def _update_trailing(run, lu, j, j1, chunk):
    """``lu[j1:, j1:] -= lu[j1:, j:j1] @ lu[j:j1, j1:]``, ``chunk`` columns at a time."""
    n = lu.shape[1]
    for c0 in range(j1, n, chunk):
        c1 = min(n, c0 + chunk)
        lu[j1:, c0:c1] -= run.gemm(lu[j1:, j:j1], lu[j:j1, c0:c1], like=lu)


def _warn_singular(info):
    if info > 0:
        warnings.warn(
            f"Diagonal number {info} is exactly zero. Singular matrix.",
            LinAlgWarning,
            stacklevel=3,
        )


def getrs(lu, piv, b, *, trans=0, block_size=None, slices=None, method=None, accuracy=None,
          overwrite_b=False, check_finite=True, min_size=None, crossover=None):
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
    block_size, slices, method, accuracy, min_size : optional
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
    x = work_copy(xp, b, overwrite_b, work_dtype(xp, lu, b))
    if x.size == 0:
        return x
    dst, src = swaps_to_rows(piv_h.astype(np.intp), 0)
    kw = dict(block_size=block_size, slices=slices, method=method, accuracy=accuracy,
              overwrite_b=True,
              check_finite=False, min_size=check_min_size(min_size, "getrs", crossover),
              check_singular=False)
    if not t:
        if dst.size:
            x[dst] = x[src]
        x = trsm(lu, x, lower=True, unit_diagonal=True, **kw)
        x = trsm(lu, x, lower=False, **kw)
    else:
        x = trsm(lu, x, lower=False, trans=t, **kw)
        x = trsm(lu, x, lower=True, unit_diagonal=True, trans=t, **kw)
        if dst.size:
            x[src] = x[dst]
    return x
