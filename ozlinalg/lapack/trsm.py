"""Blocked triangular solve with many right-hand sides (BLAS-3 ``trsm``)."""
from __future__ import annotations

from .._exceptions import LinAlgError
from . import compiled_steps
from ._common import (
    NATIVE_LIMIT_FROM,
    Runner,
    as_float_matrix,
    check_block_size,
    check_min_size,
    check_side,
    first_zero_diagonal,
    flops_trsm,
    native_trsm_left,
    routine_plan,
    trans_code,
    work_copy,
    work_dtype,
)

__all__ = ["trsm", "checked_trsm"]


def trsm(a, b, *, side="L", lower=False, trans=0, unit_diagonal=False, block_size=None,
         slices=None, method=None, accuracy=None, plan=None,
          overwrite_b=False, check_finite=True,
         min_size=None, crossover=None, check_singular=True):
    """Solve a triangular system with many right-hand sides.

    Solves ``op(a) @ x = b`` (``side='L'``) or ``x @ op(a) = b``
    (``side='R'``) for ``x``, where ``op(a)`` is ``a``, ``a.T`` or ``a^H``
    (``a.conj().T``). Real or complex input (complex64 / complex128 are
    computed in complex128).

    Parameters
    ----------
    a : (n, n) array_like
        Triangular matrix. Only the triangle selected by `lower` is
        referenced (and not its diagonal when `unit_diagonal` is True).
    b : (n, k) or (n,) array_like for side 'L'; (k, n) or (n,) for side 'R'
        Right-hand sides.
    side : {'L', 'R'}, optional
        Whether ``op(a)`` is applied from the left or from the right.
    lower : bool, optional
        Use the lower triangle of `a` (default: the upper one).
    trans : {0, 1, 2, 'N', 'T', 'C'}, optional
        ``op(a)``: 0/'N' is ``a``, 1/'T' is ``a.T``, 2/'C' is ``a^H`` (the
        conjugate transpose, as :func:`scipy.linalg.solve_triangular`;
        the same as ``a.T`` for real `a`).
    unit_diagonal : bool, optional
        Assume the diagonal of `a` is all ones (it is not read).
    block_size : int, optional
        Order of the diagonal blocks solved natively (default 128).
    slices : int or "auto", optional
        Slice count passed to :func:`ozlinalg.matmul` for the off-diagonal
        updates (default from :func:`ozlinalg.options`).
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
    overwrite_b : bool, optional
        Allow the solution to be written into `b` (arrays of the result's
        dtype only).
    check_finite : bool, optional
        Check that the inputs contain only finite numbers.
    min_size : int, optional
        Below this order of `a` the whole solve runs natively
        (default :data:`ozlinalg.lapack.DEFAULT_MIN_SIZE`; 0 always emulates).
    check_singular : bool, optional
        Raise on a zero diagonal entry (default, as LAPACK ``trtrs``). If
        False, a zero on the diagonal gives Inf / NaN in the solution, as
        LAPACK ``getrs`` / ``potrs`` (BLAS ``trsm``) do.

    Returns
    -------
    x : ndarray of float64 (complex128 if `a` or `b` is complex)
        The solution, with the shape of `b`.

    Raises
    ------
    numpy.linalg.LinAlgError
        If `a` has a zero on the diagonal (and neither `unit_diagonal` nor
        ``check_singular=False``).
    ValueError
        For inconsistent shapes or invalid arguments.

    See Also
    --------
    scipy.linalg.solve_triangular : the same for one side, natively.

    Notes
    -----
    Recursive blocked substitution (the BLAS-3 TRSM of Elmroth, Gustavson,
    Jonsson and Kagstrom, *Recursive blocked algorithms and hybrid data
    structures for dense matrix library software*, SIAM Review 2004): the
    triangle is halved, the two halves are solved recursively and the
    off-diagonal coupling ``b2 -= a21 @ x1`` is one emulated GEMM. Diagonal
    blocks of order at most `block_size` are solved natively (LAPACK
    ``trtrs`` / cuBLAS ``trsm``); they account for ``block_size / n`` of the
    flops. The right-side and transposed variants are reduced to the
    left-side one with transposed views, without copies of `a`.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.lapack import trsm
    >>> a = np.array([[2., 0.], [1., 4.]])
    >>> trsm(a, np.array([2., 9.]), lower=True, min_size=0)
    array([1., 2.])
    """
    xp, a = as_float_matrix(a, "trsm", "a", check_finite=check_finite, square=True)
    plan = routine_plan(xp, plan, slices, method, accuracy, "trsm")
    xp2, b = as_float_matrix(b, "trsm", "b", check_finite=check_finite, ndim=(1, 2))
    if xp2 is not xp:
        raise TypeError("ozlinalg.lapack.trsm: a and b must be on the same device")
    side = check_side(side, "trsm")
    t = trans_code(trans, "trsm")
    nb = check_block_size(block_size, "trsm", plan.engine, a.shape[0])
    cross = check_min_size(min_size, "trsm", crossover)
    return checked_trsm(plan, a, b, side, lower, t, unit_diagonal, nb, cross, overwrite_b,
                        check_singular)


def checked_trsm(plan, a, b, side, lower, t, unit_diagonal, nb, cross, overwrite_b,
                 check_singular):
    """:func:`trsm` on validated arguments (for :func:`getrs` / :func:`potrs`, whose
    own checks cover them): `a` square, `b` 1-D or 2-D of a matching size on the same
    device, `side` "L" / "R", `t` a :func:`trans_code`, `nb` the leaf order, `cross`
    the order below which the solve is native."""
    xp = plan.xp
    n = a.shape[0]
    vec = b.ndim == 1
    dim = b.shape[0] if (vec or side == "L") else b.shape[1]
    if dim != n:
        raise ValueError(
            f"ozlinalg.lapack.trsm: shapes of a {a.shape} and b {b.shape} are incompatible "
            f"for side={side!r}"
        )
    x = work_copy(xp, b, overwrite_b, work_dtype(a, b))
    if x.size == 0:
        return x
    if check_singular and not unit_diagonal:
        z = first_zero_diagonal(xp, a)
        if z >= 0:
            raise LinAlgError(f"singular matrix: resolution failed at diagonal {z}")
    a = a.astype(work_dtype(a), copy=False)

    if t == 2 and a.dtype.kind == "c":
        op = a.conj().T  # one O(n^2) copy; the recursion then reads views only
    else:
        op = a.T if t else a
    low = bool(lower) != bool(t)
    if side == "R":
        # x op(a) = b  <=>  op(a)^T x^T = b^T
        op = op.T
        low = not low
        xm = x[:, None] if vec else x.T
    else:
        xm = x[:, None] if vec else x
    run = Runner(plan)
    solve_left_inplace(run, op, xm, low, bool(unit_diagonal), n if n < cross else nb)
    return x


def _solve_compiled(run, m, x, lower, unit, leaf):
    """:func:`solve_left_inplace` at one level (``leaf < n <= 2 leaf``: two native
    diagonal blocks and one product) in one compiled call (:mod:`.compiled_steps`):
    True, or False where it does not apply or the kernel stopped (``x`` then holds what
    it held)."""
    n, k = m.shape[0], x.shape[1]
    n1 = leaf  # the recursion's split, max(leaf, (n // 2) // leaf * leaf), at this level
    if leaf * k >= NATIVE_LIMIT_FROM or m.dtype.char != "d":
        return False
    n2 = n - n1
    got = compiled_steps.arguments(run, x, (n2, n1, k) if lower else (n1, n2, k))
    if got is None:
        return False
    ker, fns, kind, fixed, shift, [(width, thr)] = got
    return compiled_steps.run(ker.trsm_one_level, x, m, x, n1, bool(lower), bool(unit), kind,
                              width, fixed, thr, shift, fns["dtrsm"]) is not None


def solve_left_inplace(run, m, x, lower, unit, leaf):
    """Overwrite ``x`` with ``m^{-1} x`` for a triangular (view) ``m``.

    Only the `lower` (or upper) triangle of ``m`` is read. Recursive halving
    down to blocks of order ``<= leaf``, solved natively; the couplings go
    through ``run.gemm``.
    """
    n = m.shape[0]
    if n == 0 or x.shape[1] == 0:
        return
    if leaf < n <= 2 * leaf and _solve_compiled(run, m, x, lower, unit, leaf):
        return
    if n <= leaf:
        x[...] = native_trsm_left(run.xp, m, x, lower, unit, engine=run.engine)
        run.native(flops_trsm(n, x.shape[1]), "trsm diagonal block")
        return
    # Split at a multiple of the leaf size so the leaves are full blocks.
    n1 = max(leaf, (n // 2) // leaf * leaf)
    if lower:
        solve_left_inplace(run, m[:n1, :n1], x[:n1], lower, unit, leaf)
        x[n1:] -= run.gemm(m[n1:, :n1], x[:n1], like=x)
        solve_left_inplace(run, m[n1:, n1:], x[n1:], lower, unit, leaf)
    else:
        solve_left_inplace(run, m[n1:, n1:], x[n1:], lower, unit, leaf)
        x[:n1] -= run.gemm(m[:n1, n1:], x[n1:], like=x)
        solve_left_inplace(run, m[:n1, :n1], x[:n1], lower, unit, leaf)
