"""Polar decomposition: ``polar`` (``scipy.linalg`` API) by QDWH on the emulated
QR, Cholesky and GEMM."""
from __future__ import annotations

import math

import numpy as np

from .. import lapack
from .._matmul import product
from .._options import resolve
from .._profile import record_native_flops
from ..lapack.scipy_conventions import as_array, lapack_args, lapack_dtype, quiet, scipy_native
from ._decomp_cholesky import _potrf
from ._decomp_qr import _geqrf, _orgqr
from ._spectral import _scale_exponent, _scaled, svd_core
from ._validation import batched

__all__ = ["polar"]

#: QDWH iterations at most: six reach convergence for condition numbers up to 1e16
#: (Nakatsukasa and Higham); the rest is margin.
QDWH_STEPS = 10
_U = 2.0**-53


def _ct(x):
    return x.conj().T if x.dtype.kind == "c" else x.T


def _lower_bound(xp, x):
    """A lower bound estimate of sigma_min(x) (||x||_2 <= 1): single-precision
    singular values, less their error bound, never below u. QDWH converges from
    any positive bound; a low one costs an iteration or two."""
    m, n = x.shape
    record_native_flops(4.0 * m * n * n, "sgesdd")
    s32 = xp.linalg.svd(x.astype(xp.complex64 if x.dtype.kind == "c" else xp.float32),
                        compute_uv=False)
    smin = float(s32[-1]) - 4.0 * max(m, n) * 2.0**-24 * float(s32[0])
    return min(1.0, max(0.9 * smin, _U))


def _weights(ell):
    """(a, b, c) of the dynamically weighted Halley step for lower bound ``ell``."""
    ell2 = ell * ell
    d = (4.0 * (1.0 - ell2) / (ell2 * ell2)) ** (1.0 / 3.0)
    sd = math.sqrt(1.0 + d)
    a = sd + 0.5 * math.sqrt(8.0 - 4.0 * d + 8.0 * (2.0 - ell2) / (ell2 * sd))
    b = (a - 1.0) ** 2 / 4.0
    return a, b, a + b - 1.0


def _qr_step(plan, x, a, b, c):
    """``X (b/c) + (a - b/c) / sqrt(c) Q1 Q2^H`` from the emulated QR of [sqrt(c) X; I]."""
    xp = plan.xp
    m, n = x.shape
    z = xp.empty((m + n, n), dtype=x.dtype, order="F")
    z[:m] = math.sqrt(c) * x
    z[m:] = xp.eye(n, dtype=x.dtype)
    qr_, tau = _geqrf(plan, z, True)
    q = _orgqr(plan, qr_, tau, n, overwrite=True)
    return (b / c) * x + ((a - b / c) / math.sqrt(c)) * product(plan.inside, q[:m], _ct(q[m:]))


def _chol_step(plan, x, a, b, c):
    """``X (b/c) + (a - b/c) X (I + c X^H X)^-1`` by the emulated Cholesky."""
    xp = plan.xp
    n = x.shape[1]
    z = xp.eye(n, dtype=x.dtype) + c * product(plan.inside, _ct(x), x)
    z = (z + _ct(z)) / 2
    w = _potrf(plan, xp.asfortranarray(z), False)  # Z = W^H W, W upper
    with quiet():
        kw = lapack_args(plan, n)
        y = lapack.trsm(w, x, side="R", lower=False, trans=0, check_finite=False, **kw)
        y = lapack.trsm(w, y, side="R", lower=False, trans="C", check_finite=False, **kw)
    return (b / c) * x + (a - b / c) * y


def qdwh(plan, a):
    """The unitary polar factor of a tall (m >= n) float64 / complex128 matrix by the
    QR-based dynamically weighted Halley iteration (Cholesky-based once the weight
    ``c`` drops below 100). Returns ``(u, converged)``."""
    xp = plan.xp
    alpha = float(xp.linalg.norm(a))
    if alpha == 0.0:
        return None, False
    x = a / alpha
    ell = _lower_bound(xp, x)
    tol = (5.0 * _U) ** (1.0 / 3.0)
    with quiet():
        for _ in range(QDWH_STEPS):
            wa, wb, wc = _weights(ell)
            step = _qr_step if wc > 100.0 else _chol_step
            x_new = step(plan, x, wa, wb, wc)
            diff = float(xp.linalg.norm(x_new - x))
            x = x_new
            ell = min(1.0, ell * (wa + wb * ell * ell) / (1.0 + wc * ell * ell))
            if diff <= tol and abs(1.0 - ell) <= 10.0 * _U:
                return x, True
    return x, False


def _unitary_factor(plan, a):
    """The polar factor of any float64 / complex128 matrix: QDWH on its tall
    orientation; where QDWH leaves it short of unitary (a rank-deficient matrix,
    whose polar factor is not unique), from the refined SVD (U V^H, as SciPy)."""
    xp = plan.xp
    m, n = a.shape
    tall = a if m >= n else _ct(a)
    # the polar factor of 2**-e a is a's: a power of two keeps ||a||_F finite and
    # nonzero for huge and subnormal matrices alike
    tall = _scaled(tall, -_scale_exponent(xp, tall))
    u, ok = qdwh(plan, tall)
    if ok:
        k = tall.shape[1]
        g = product(plan, _ct(u), u) - xp.eye(k, dtype=u.dtype)
        ok = float(xp.abs(g).max()) <= 64.0 * k * _U
    if not ok:
        w, _, vh = svd_core(plan, tall, vectors=True, full_matrices=False)
        u = product(plan, w, vh)
    return u if m >= n else _ct(u)


@batched(("a", 2))
def polar(a, side="right"):
    """Compute the polar decomposition.

    Returns the factors of the polar decomposition [1]_ `u` and `p` such
    that ``a = up`` (if `side` is "right") or ``a = pu`` (if `side` is
    "left"), where `p` is positive semidefinite. Depending on the shape
    of `a`, either the rows or columns of `u` are orthonormal. When `a`
    is a square array, `u` is a square unitary array. When `a` is not
    square, the "canonical polar decomposition" [2]_ is computed.

    Parameters
    ----------
    a : (m, n) array_like
        The array to be factored.
    side : {'left', 'right'}, optional
        Determines whether a right or left polar decomposition is computed.
        If `side` is "right", then ``a = up``.  If `side` is "left",  then
        ``a = pu``.  The default is "right".

    Returns
    -------
    u : (m, n) ndarray
        If `a` is square, then `u` is unitary. If m > n, then the columns
        of `a` are orthonormal, and if m < n, then the rows of `u` are
        orthonormal.
    p : ndarray
        `p` is Hermitian positive semidefinite. If `side` is "right", its
        shape is (n, n). If `side` is "left", its shape is (m, m).

    Raises
    ------
    ValueError
        For an unknown `side`, a non-2-D `a`, or non-finite entries.

    See Also
    --------
    scipy.linalg.polar : the native original (from the SVD).

    Notes
    -----
    QDWH, the QR-based dynamically weighted Halley iteration (Nakatsukasa, Bai and
    Gygi; Nakatsukasa and Higham): ``X0 = A / ||A||_F``, a lower bound ``l`` on
    ``sigma_min(X0)`` from single-precision singular values, then
    ``[sqrt(c) X; I] = [Q1; Q2] R``, ``X <- (b/c) X + (a - b/c)/sqrt(c) Q1 Q2^H``
    with weights ``(a, b, c)`` from ``l``, a Cholesky-based step once ``c <= 100``;
    at most six steps for condition numbers up to 1e16. Every O(n^3) step is an
    emulated QR, Cholesky, triangular solve or GEMM. ``p = u^H a`` (right) or
    ``a u^H`` (left), symmetrized. A rank-deficient `a` (no unique polar factor;
    QDWH leaves it short of unitary) takes ``u = U V^H`` from :func:`svd`, as SciPy.

    References
    ----------
    .. [1] R. A. Horn and C. R. Johnson, "Matrix Analysis", Cambridge
           University Press, 1985.
    .. [2] N. J. Higham, "Functions of Matrices: Theory and Computation",
           SIAM, 2008.

    Examples
    --------
    >>> import numpy as np
    >>> from ozlinalg.linalg import polar
    >>> a = np.array([[1, -1], [2, 4]])
    >>> u, p = polar(a)
    >>> bool(np.allclose(u @ p, a)), bool(np.allclose(u.T @ u, np.eye(2)))
    (True, True)
    """
    if side not in ["right", "left"]:
        raise ValueError("`side` must be either 'right' or 'left'")
    xp, a1 = as_array(a, check_finite=False)
    if a1.ndim != 2:
        raise ValueError("`a` must be a 2-D array.")
    if a1.size == 0 or not bool(xp.isfinite(a1).all()):
        if xp is np:
            return scipy_native("polar")(a, side=side)
        from .._array import to_numpy  # noqa: PLC0415

        return tuple(xp.asarray(r) for r in scipy_native("polar")(to_numpy(a1), side=side))
    dt = lapack_dtype(a1)
    work = a1.astype(xp.complex128 if a1.dtype.kind == "c" else xp.float64)
    plan = resolve(xp)
    u = _unitary_factor(plan, work)
    p = product(plan, _ct(u), work) if side == "right" else product(plan, work, _ct(u))
    p = (p + _ct(p)) / 2
    return (xp.ascontiguousarray(u.astype(dt, copy=False)),
            xp.ascontiguousarray(p.astype(dt, copy=False)))
