"""Cholesky decomposition: ``cholesky``, ``cho_factor``, ``cho_solve`` (``scipy.linalg`` API)."""
from __future__ import annotations

import numpy as np

from .. import lapack
from .._options import resolve
from ..lapack import Runner, work_dtype
from ..lapack._common import work_copy
from ..lapack.potrf import potrf_one_level, potrs_one_level
from ..lapack.scipy_conventions import (
    as_array,
    computes_in,
    datacopied,
    deliver,
    f2py_int,
    inplace_target,
    lapack_args,
    lapack_dtype,
    quiet,
)
from ._decomp_lu import _one_level_panel
from ._validation import batched

__all__ = ["cholesky", "cho_factor", "cho_solve"]


def _potrf(plan, a, lower, overwrite_a=False, clean=True):
    """float64 (complex128) Cholesky factor of a 2-D array under the call's `plan`;
    raises LinAlgError (SciPy's message). A real float64 matrix of a one-level order,
    not overwritten, its other triangle zeroed, runs
    :func:`~ozlinalg.lapack.potrf.potrf_one_level` without :func:`ozlinalg.lapack.potrf`'s
    checks of arguments the front door checked."""
    nb = (None if overwrite_a or not clean or a.dtype.char != "d"
          else _one_level_panel(plan, a.shape[0]))
    if nb is not None:
        c = work_copy(np, a, False)
        with quiet():
            return potrf_one_level(Runner(plan.inside), c, lower, nb)
    with quiet():
        return lapack.potrf(a, lower=lower, overwrite_a=overwrite_a, clean=clean,
                            check_finite=False, **lapack_args(plan, a.shape[0]))


def _potrs(plan, c, b, lower, overwrite_b=False, own=False):
    """:func:`ozlinalg.lapack.potrs` under the call's `plan`. ``own``: ``c`` is
    :func:`_potrf`'s own factor (not the caller's, so not checked again): a real factor
    of a one-level order then runs :func:`~ozlinalg.lapack.potrf.potrs_one_level`
    directly: potrs' and its two triangular solves' checks of arguments the front door
    checked were 5-15 us of the 73-76 us of an SPD solve by name at n = 8 (a Zen 5
    core, ``benchmarks/studies/tiny_calls.py --more``)."""
    real = own and b.size and c.dtype.char == "d" and work_dtype(c, b) == np.float64
    nb = _one_level_panel(plan, c.shape[0]) if real else None
    if nb is not None:
        x = work_copy(np, b, overwrite_b, np.float64)
        with quiet():
            potrs_one_level(Runner(plan.inside), c, x[:, None] if x.ndim == 1 else x,
                            lower, nb)
        return x
    with quiet():
        return lapack.potrs(c, b, lower=lower, overwrite_b=overwrite_b, check_finite=False,
                            **lapack_args(plan, c.shape[0]))


def _cholesky(a, lower, overwrite_a, clean, check_finite):
    xp, a1 = as_array(a, check_finite=check_finite)
    if a1.ndim < 2:
        a1 = xp.atleast_2d(a1)
    if a1.ndim != 2:
        raise ValueError(f"Input array needs to be 2D but received a {a1.ndim}d-array.")
    if a1.shape[0] != a1.shape[1]:
        raise ValueError("Input array is expected to be square but has "
                         f"the shape: {a1.shape}.")
    dt = lapack_dtype(a1)
    if a1.size == 0:
        return xp.empty_like(a1, dtype=dt), lower
    target = inplace_target(xp, a1, overwrite_a or datacopied(a1, a), dt)
    direct = computes_in(xp, target)
    c = _potrf(resolve(xp), target if direct else a1, bool(lower), direct, clean)
    return deliver(xp, c, target, dt), lower


@batched(("a", 2))
def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """Compute the Cholesky decomposition of a matrix.

    Returns the Cholesky decomposition, ``A = L L^*`` or ``A = U^* U`` of a
    Hermitian positive-definite matrix A (``^*`` is the conjugate transpose;
    the transpose for a real symmetric A).

    Parameters
    ----------
    a : (M, M) array_like
        Matrix to be decomposed (a stack of matrices is factored slice by slice).
    lower : bool, optional
        Whether to compute the upper- or lower-triangular Cholesky
        factorization. Default is upper-triangular.
    overwrite_a : bool, optional
        Whether to overwrite data in `a` (may improve performance).
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.

    Returns
    -------
    c : (M, M) ndarray
        Upper- or lower-triangular Cholesky factor of `a` (float32 for
        float32 input, complex64 / complex128 for complex input, float64
        otherwise).

    Raises
    ------
    numpy.linalg.LinAlgError
        ``"%d-th leading minor of the array is not positive definite"`` if
        decomposition fails.

    See Also
    --------
    scipy.linalg.cholesky : the native original.

    Notes
    -----
    Right-looking blocked Cholesky (LAPACK ``potrf``,
    :func:`ozlinalg.lapack.potrf`): diagonal blocks natively, the panel
    triangular solve and the recursive SYRK trailing update on the emulated
    DGEMM (Ozaki scheme). Only the triangle selected by `lower` is read.
    Complex Hermitian input: ``zpotrf`` diagonal blocks, HERK-style update
    ``A22 -= L21 L21^H`` on the complex emulated GEMM.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import cholesky
    >>> cholesky(np.array([[4., 2.], [2., 5.]]), lower=True)
    array([[2., 0.],
           [1., 2.]])
    """
    c, _ = _cholesky(a, lower, overwrite_a, True, check_finite)
    return c


@batched(("a", 2))
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """Compute the Cholesky decomposition of a matrix, to use in cho_solve.

    Parameters
    ----------
    a : (M, M) array_like
        Matrix to be decomposed.
    lower : bool, optional
        Whether to compute the upper or lower triangular Cholesky
        factorization. During decomposition, only the selected half of the
        matrix is referenced. (Default: upper-triangular)
    overwrite_a : bool, optional
        Whether to overwrite data in a (may improve performance).
    check_finite : bool, optional
        Whether to check that the input matrix contains only finite numbers.

    Returns
    -------
    c : (M, M) ndarray
        Matrix whose upper or lower triangle contains the Cholesky factor of
        `a`. The other triangle holds the input's entries (as LAPACK and SciPy
        leave it: not to be relied on).
    lower : bool
        Flag indicating whether the factor is in the lower or upper triangle.

    Raises
    ------
    numpy.linalg.LinAlgError
        Raised if decomposition fails.

    See Also
    --------
    cho_solve : Solve a linear set equations using the factorization.
    scipy.linalg.cho_factor : the native original.

    Notes
    -----
    Blocked Cholesky (LAPACK ``potrf``) with emulated trailing updates, see
    :func:`cholesky`.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import cho_factor, cho_solve
    >>> a = np.array([[9., 3., 1., 5.], [3., 7., 5., 1.], [1., 5., 9., 2.], [5., 1., 2., 6.]])
    >>> c, low = cho_factor(a)
    >>> bool(np.allclose(a @ cho_solve((c, low), [1., 1., 1., 1.]), 1.0))
    True
    """
    return _cholesky(a, lower, overwrite_a, False, check_finite)


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve the linear equations A x = b, given the Cholesky factorization of A.

    Parameters
    ----------
    c_and_lower : tuple, (array, bool)
        Cholesky factorization of a, as given by cho_factor.
    b : array
        Right-hand side.
    overwrite_b : bool, optional
        Whether to overwrite data in b (may improve performance): as in
        SciPy, the solution is written into `b` when it is a
        Fortran-contiguous (or contiguous 1-D) array of the routine's dtype.
    check_finite : bool, optional
        Whether to check that the input matrices contain only finite numbers.

    Returns
    -------
    x : array
        The solution to the system A x = b (stacked `c` and `b` broadcast
        over their batch axes, as in SciPy 1.17).

    See Also
    --------
    cho_factor : Cholesky factorization of a matrix.
    scipy.linalg.cho_solve : the native original.

    Notes
    -----
    LAPACK ``potrs``: two blocked triangular solves whose couplings are
    emulated DGEMMs (:func:`ozlinalg.lapack.potrs`).

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import cho_factor, cho_solve
    >>> a = np.array([[4., 2.], [2., 5.]])
    >>> cho_solve(cho_factor(a), np.array([6., 7.]))
    array([1., 1.])
    """
    c, lower = c_and_lower
    return _cho_solve(c, b, lower, overwrite_b=overwrite_b, check_finite=check_finite)


@batched(("c", 2), ("b", "1|2"))
def _cho_solve(c, b, lower, overwrite_b, check_finite):
    xp, b1 = as_array(b, check_finite=check_finite, argname="b")
    _, c1 = as_array(c, check_finite=check_finite, argname="c")
    if c1.ndim != 2 or c1.shape[0] != c1.shape[1]:
        raise ValueError("The factored matrix c is not square.")
    if c1.shape[1] != b1.shape[0]:
        raise ValueError(f"incompatible dimensions ({c1.shape} and {b1.shape})")
    dt = lapack_dtype(c1, b1)
    if b1.size == 0:
        return xp.empty_like(b1, dtype=dt)
    target = inplace_target(xp, b1, overwrite_b or datacopied(b1, b), dt)
    direct = computes_in(xp, target)
    low = bool(f2py_int(lower, "dpotrs", "1st", "lower", lo=-2**31, hi=2**31 - 1))
    x = _potrs(resolve(xp), c1, target if direct else b1, low, direct)
    return deliver(xp, x, target, dt)
