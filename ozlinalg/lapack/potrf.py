"""Blocked Cholesky factorization (``potrf``) and its solver."""
from __future__ import annotations

from . import compiled_steps
from ._common import (
    NATIVE_LIMIT_FROM,
    Runner,
    as_float_matrix,
    check_block_size,
    check_min_size,
    conj_t,
    flops_potrf,
    keep_triangle,
    native_potrf,
    raise_not_pd,
    routine_plan,
    work_copy,
    work_dtype,
)
from .trsm import checked_trsm, solve_left_inplace

__all__ = ["potrf", "potrf_one_level", "potrs", "potrs_one_level"]


def potrf(a, *, lower=False, block_size=None, slices=None, method=None, accuracy=None, plan=None,
          overwrite_a=False, clean=True, check_finite=True, min_size=None, crossover=None):
    """Cholesky factorization of a symmetric (Hermitian) positive definite matrix.

    Computes ``a = L @ L^H`` (`lower` True) or ``a = U^H @ U`` (default);
    ``^H`` is the transpose for real `a`, the conjugate transpose for complex
    `a` (computed in complex128; panels by LAPACK ``zpotrf``, whose
    convention this is).

    Parameters
    ----------
    a : (N, N) array_like
        Symmetric (real) or Hermitian (complex) positive definite matrix.
        Only the triangle selected by `lower` is referenced (and only the
        real part of the diagonal).
    lower : bool, optional
        Return the lower factor ``L`` instead of the upper factor ``U``.
    block_size : int, optional
        Block order ``nb`` of the diagonal blocks factored (and solved with)
        natively: the recursion's leaves (default: the engine's, see
        :func:`getrf`).
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
        Allow the factor to be written into `a` (float64 / complex128 arrays
        only).
    clean : bool, optional
        Zero the other triangle (default, as :func:`scipy.linalg.cholesky`).
        If False it holds the input's entries, as LAPACK leaves it.
    check_finite : bool, optional
        Check that the input contains only finite numbers.
    min_size : int, optional
        Below this order the whole factorization runs in native LAPACK
        (default :data:`ozlinalg.lapack.DEFAULT_MIN_SIZE`; 0 always
        emulates).

    Returns
    -------
    c : (N, N) ndarray of float64 (complex128 for complex `a`)
        The Cholesky factor.

    Raises
    ------
    numpy.linalg.LinAlgError
        ``"%d-th leading minor of the array is not positive definite"`` (1-based,
        as SciPy) when `a` is not positive definite.

    See Also
    --------
    potrs : solve with the factor.
    scipy.linalg.cholesky : native equivalent.

    Notes
    -----
    Recursive Cholesky (Gustavson, *Recursion leads to automatic variable
    blocking for dense linear-algebra algorithms*, IBM J. R&D 1997; LAPACK
    ``dpotrf2``), lower variant; the upper factor is computed as the transpose
    of the lower factor of ``a.T``, through views (for complex Hermitian ``a``,
    ``a.T = conj(a)`` is Hermitian too and ``U = L^T`` still holds). The matrix
    is halved (at a multiple of ``nb``) down to diagonal blocks of order at
    most ``nb``:

    1. factor the leading half recursively (a block of order ``<= nb``:
       natively, LAPACK / host ``potrf``);
    2. ``L21 = A21 L11^{-H}`` by the recursive triangular solve of :func:`trsm`
       (diagonal blocks of order ``nb`` natively, couplings emulated);
    3. ``A22 -= L21 L21^H`` on the lower triangle only, as a recursive SYRK
       whose products all have the leading half's order as inner dimension
       (``n/2`` at the top): the off-diagonal block is one emulated GEMM and
       the two diagonal halves recurse down to blocks of order ``nb``, which
       are emulated as full GEMMs;
    4. factor the trailing half recursively.

    Steps 2-3 carry ``1 - O(nb / n)`` of the ``n^3/3`` flops; the emulated
    products' per-entry passes are paid about ``log2(n / nb)`` times over the
    matrix, not ``n / nb`` times as in the right-looking form. A matrix that is
    not positive definite raises with LAPACK's minor (the first diagonal block
    whose factorization fails, plus its offset). The default ``nb`` is
    :func:`getrf`'s.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.lapack import potrf
    >>> potrf(np.array([[4., 2.], [2., 5.]]), lower=True, min_size=0)
    array([[2., 0.],
           [1., 2.]])
    """
    xp, a = as_float_matrix(a, "potrf", check_finite=check_finite, square=True)
    plan = routine_plan(xp, plan, slices, method, accuracy, "potrf")
    nb = check_block_size(block_size, "potrf", plan.engine, a.shape[0])
    cross = check_min_size(min_size, "potrf", crossover)
    n = a.shape[0]
    c = work_copy(xp, a, overwrite_a)
    if n == 0:
        return c
    saved = None
    if not clean:
        saved = xp.triu(c, 1) if lower else xp.tril(c, -1)

    if n < cross or n <= nb:
        f, info = native_potrf(xp, c, lower, engine=plan.engine)
        Runner.native(flops_potrf(n), "potrf (native: below min_size or one panel)")
        if info > 0:
            raise_not_pd(info)
        c[...] = f
    else:
        potrf_one_level(Runner(plan), c, lower, nb)
    if saved is not None:
        c += saved
    return c


def potrf_one_level(run, c, lower, nb):
    """Overwrite ``c`` (a working copy, order ``n > nb``) with its Cholesky factor, the
    other triangle zeroed: :func:`potrf`'s emulated steps under the Runner ``run``,
    without its checks of arguments a front door checked. A matrix that is not positive
    definite raises LinAlgError (SciPy's message)."""
    # The upper factor of a is the transpose of the lower factor of a.T.
    target = c if lower else c.T
    if not _potrf_compiled(run, target, nb):
        _potrf_lower_inplace(run, target, nb)
    keep_triangle(run.xp, c, lower)
    return c


def _potrf_compiled(run, c, nb):
    """:func:`_potrf_lower_inplace` of the whole ``c`` in one compiled call
    (:mod:`.compiled_steps`) where the recursion is one level (``nb < n <= 2 nb``: a
    native block of order ``nb``, one product, a native block) and its native blocks are
    small: True, or False where it does not apply or the kernel stopped (``c`` then
    holds what it held; a matrix that is not positive definite raises on the Python
    steps)."""
    n = c.shape[0]
    if not (nb < n <= 2 * nb and nb * nb < NATIVE_LIMIT_FROM):
        return False
    r = n - nb
    got = compiled_steps.arguments(run, c, (r, nb, r))
    if got is None:
        return False
    ker, fns, kind, fixed, shift, [(width, thr)] = got
    return compiled_steps.run(ker.potrf_one_level, c, c, nb, kind, width, fixed, thr, shift,
                              fns["dpotrf"], fns["dtrsm"]) is not None


def _potrf_lower_inplace(run, c, nb, c0=0, c1=None):
    """Recursive Cholesky (Gustavson 1997; LAPACK ``dpotrf2``) of ``c[c0:c1, c0:c1]``,
    lower triangle, in place: halve (at a multiple of ``nb``), factor the leading
    half, ``L21 = A21 L11^{-H}`` (:func:`solve_left_inplace`, diagonal blocks of
    order ``nb`` natively), ``A22 -= L21 L21^H`` (:func:`_syrk_lower`: products of
    inner dimension the leading half's order), factor the trailing half. Diagonal
    blocks of order at most ``nb`` are factored natively."""
    xp = run.xp
    c1 = c.shape[0] if c1 is None else c1
    w = c1 - c0
    if w <= nb:
        f, info = native_potrf(xp, c[c0:c1, c0:c1], True, engine=run.engine)
        run.native(flops_potrf(w), "potrf diagonal block")
        if info > 0:
            raise_not_pd(c0 + info)
        c[c0:c1, c0:c1] = f
        return
    s = c0 + max(nb, (w // 2) // nb * nb)  # a multiple of nb: full diagonal blocks
    _potrf_lower_inplace(run, c, nb, c0, s)
    # L21 = A21 L11^{-H}  <=>  conj(L11) L21^T = A21^T  (conj: a copy of L11)
    l11 = c[c0:s, c0:s]
    l11 = l11.conj() if l11.dtype.kind == "c" else l11
    solve_left_inplace(run, l11, c[s:c1, c0:s].T, True, False, nb)
    _syrk_lower(run, c[s:c1, s:c1], c[s:c1, c0:s], nb)
    _potrf_lower_inplace(run, c, nb, s, c1)


def _syrk_lower(run, c, p, nb):
    """``c -= p @ p^H`` on the lower triangle of ``c`` (recursive halving;
    HERK for complex ``p``)."""
    n = c.shape[0]
    if n <= nb:
        # both operands one strided block of the matrix: a row-major copy first
        # (n x k entries) halves the product's splitting passes on the CPU engine
        # (potrf n = 4096, slices=3: 512 x 2048 x 512 leaves 0.078 -> 0.053 s each)
        q = run.xp.ascontiguousarray(p)
        c -= run.gemm(q, conj_t(q), like=c)
        return
    n1 = max(nb, (n // 2) // nb * nb)
    _syrk_lower(run, c[:n1, :n1], p[:n1], nb)
    c[n1:, :n1] -= run.gemm(p[n1:], conj_t(p[:n1]), like=c)
    _syrk_lower(run, c[n1:, n1:], p[n1:], nb)


def potrs_one_level(run, c, x, lower, leaf):
    """Overwrite the 2-D float64 ``x`` with ``a^{-1} x`` for the real Cholesky factor
    ``c`` of ``a`` (the `lower` ``L``, else ``U``): :func:`potrs`' two triangular solves
    (:func:`solve_left_inplace`, leaf order ``leaf``) under the Runner ``run``, without
    its checks of arguments a front door checked (:func:`potrs` with
    ``min_size <= n``, ``block_size=leaf``: the same steps, so the same bits)."""
    if lower:
        solve_left_inplace(run, c, x, True, False, leaf)
        solve_left_inplace(run, c.T, x, False, False, leaf)
    else:
        solve_left_inplace(run, c.T, x, True, False, leaf)
        solve_left_inplace(run, c, x, False, False, leaf)
    return x


def potrs(c, b, *, lower=False, block_size=None, slices=None, method=None, accuracy=None, plan=None,
          overwrite_b=False, check_finite=True, min_size=None, crossover=None):
    """Solve ``a @ x = b`` from the Cholesky factor of :func:`potrf`.

    Parameters
    ----------
    c : (N, N) array_like
        Cholesky factor (``L`` if `lower`, else ``U``).
    b : (N,) or (N, K) array_like
        Right-hand sides.
    lower : bool, optional
        Whether `c` is the lower factor.
    block_size, slices, method, accuracy, plan, min_size : optional
        As in :func:`trsm`.
    overwrite_b : bool, optional
        Allow the solution to be written into `b` (arrays of the result's
        dtype only).
    check_finite : bool, optional
        Check that the inputs contain only finite numbers.

    Returns
    -------
    x : ndarray of float64 (complex128 if `c` or `b` is complex)
        Solution, with the shape of `b`.

    Notes
    -----
    LAPACK ``potrs``: two blocked triangular solves (:func:`trsm`), with
    ``L`` and ``L^H`` (or ``U^H`` and ``U``); a zero on the factor's diagonal
    gives Inf / NaN, as in LAPACK.
    """
    xp, c = as_float_matrix(c, "potrs", "c", check_finite=check_finite, square=True)
    plan = routine_plan(xp, plan, slices, method, accuracy, "potrs")
    _, b = as_float_matrix(b, "potrs", "b", check_finite=check_finite, ndim=(1, 2))
    if b.shape[0] != c.shape[0]:
        raise ValueError(
            f"ozlinalg.lapack.potrs: shapes of c {c.shape} and b {b.shape} are incompatible"
        )
    x = work_copy(xp, b, overwrite_b, work_dtype(c, b))
    if x.size == 0:
        return x
    nb = check_block_size(block_size, "potrs", plan.engine, c.shape[0])
    cross = check_min_size(min_size, "potrs", crossover)

    def solve(x, trans):
        return checked_trsm(plan, c, x, "L", lower, trans, False, nb, cross, True, False)

    if lower:
        return solve(solve(x, 0), 2)
    return solve(solve(x, 2), 0)
