"""Symmetric / Hermitian eigendecomposition and SVD on the emulated GEMM: the cores
shared by the SciPy and NumPy namespaces.

Both start from LAPACK in single precision (``ssyevd`` / ``cheevd``, ``sgesdd`` /
``cgesdd``; cuSOLVER on the GPU) on a power-of-two scaled copy, then refine with
Ogita and Aishima's iteration (JJIAM 2018; clustered eigenvalues, 2019; the SVD
form, JCAM 2020): every O(n^3) step is a matrix product, run on the emulated GEMM
(:func:`ozlinalg.matmul`, the ambient options: DGEMM level by default, faithful under
``options(accuracy="faithful")``). Convergence is quadratic: two steps from single
precision reach FP64 level on well separated spectra.

One step, for Hermitian ``A`` and an approximate eigenvector matrix ``X``:

* ``R = I - X^H X``, ``S = X^H (A X)`` (three products);
* ``lam_i = s_ii / (1 - r_ii)``;
* ``delta = 2 (||S - diag(lam)||_F + ||A||_2 ||R||_F)``: eigenvalues closer than
  ``delta`` form a cluster;
* separated pairs: ``e_ij = (s_ij + lam_j r_ij) / (lam_j - lam_i)``; ``e_ii = r_ii / 2``;
* a cluster ``J`` is settled by Rayleigh-Ritz in its own subspace: the Loewdin
  orthonormalised block ``T = (I + R_JJ / 2)^H S_JJ (I + R_JJ / 2)``, shifted by its
  mean, is diagonalised (``T = W diag(theta) W^H``: LAPACK for small clusters, this
  same routine for large ones), ``E_JJ = (I + R_JJ / 2) W - I`` and the cluster's
  columns of ``E`` outside it are rotated by ``W``;
* ``X <- X + X E`` (one product).

The SVD step for a square ``A`` with approximate ``U``, ``V``: ``R = I - U^H U``,
``S = I - V^H V``, ``T = U^H (A V)``; ``sigma_i = re(t_ii) / (1 - (r_ii + s_ii) / 2)``;
for separated pairs the two-by-two system of the first-order conditions
(``F + F^H = R``, ``G + G^H = S``, ``T + F^H Sigma + Sigma G`` diagonal) gives
``f_ij = (alpha sigma_j + beta sigma_i) / (sigma_j^2 - sigma_i^2)``,
``g_ij = (alpha sigma_i + beta sigma_j) / (sigma_j^2 - sigma_i^2)`` with
``alpha = t_ij + sigma_j r_ij``, ``beta = conj(t_ji) + sigma_j s_ij``; clusters
(zero singular values of a rank-deficient matrix among them) by a small SVD of
their block; ``U <- U + U F``, ``V <- V + V G``. A rectangular matrix is reduced
to a square one by the emulated QR first (``A = Q R``, ``U = Q U_R``), as LAPACK's
``gesdd`` does for tall matrices.

Where the iteration does not reach FP64 level within its step limit (it has not
happened on the test matrices; a start too poor for the iteration would do it),
the result is LAPACK's double-precision one, so that no call fails where LAPACK
succeeds.
"""
from __future__ import annotations

import math

import numpy as np

from .._matmul import product
from .._profile import record_native_flops
from ..lapack.scipy_conventions import quiet

__all__ = ["eigh_core", "svd_core", "STEP_LIMIT", "CONVERGED", "FALLBACK"]

#: The profile's name (``Profile.native_calls``) of a decomposition that fell back
#: to LAPACK's double precision because the refinement did not converge.
FALLBACK = "lapack fallback"

#: Refinement steps at most (two suffice from single precision on separated spectra;
#: clusters and graded spectra take one or two more).
STEP_LIMIT = 8
#: The first-order quantities' size below which one more update leaves only
#: second-order terms (``CONVERGED**2`` is below double's unit roundoff).
CONVERGED = 2.0**-30
#: Clusters of at least this order are diagonalised by this module itself, not LAPACK.
RECURSE_MIN = 192


# --------------------------------------------------------------------------
# helpers


def _ct(x):
    return x.conj().T if x.dtype.kind == "c" else x.T


def _start_dtype(xp, dt):
    return xp.complex64 if dt.kind == "c" else xp.float32


def _scale_exponent(xp, a):
    """e with max|a| * 2**-e in [0.5, 1) (0 for a zero matrix): the exact scaling
    that keeps the single-precision start inside float32's range."""
    m = float(xp.abs(a).max()) if a.size else 0.0
    if m == 0.0 or not math.isfinite(m):
        return 0
    return math.frexp(m)[1]


def _scaled(x, e):
    """``x * 2**e``, exact (in two power-of-two factors: ``2**e`` alone may
    overflow or underflow for subnormal or huge matrices)."""
    if not e:
        return x
    h = e // 2
    return (x * math.ldexp(1.0, h)) * math.ldexp(1.0, e - h)


def _hermitian(xp, a, lower):
    """The full Hermitian matrix of `a`'s lower (or upper) triangle, real diagonal."""
    t = xp.tril(a, -1) if lower else xp.triu(a, 1)
    h = t + _ct(t)
    d = xp.diagonal(a)
    h[xp.arange(a.shape[0]), xp.arange(a.shape[0])] = d.real if a.dtype.kind == "c" else d
    return h


def _host(xp, x):
    return xp.asnumpy(x) if hasattr(xp, "asnumpy") else np.asarray(x)


def _clusters(lam, delta):
    """Runs of ``lam`` (sorted) whose neighbours are within ``delta``: a list of
    (start, stop) of the runs of two or more."""
    if lam.shape[0] < 2:
        return []
    close = np.abs(np.diff(lam)) <= delta
    runs, start = [], None
    for i, c in enumerate(close):
        if c and start is None:
            start = i
        elif not c and start is not None:
            runs.append((start, i + 1))
            start = None
    if start is not None:
        runs.append((start, lam.shape[0]))
    return runs


def _separated_mask(xp, runs, n):
    """Boolean (n, n): True where i and j are in different clusters (or i == j is not)."""
    mask = xp.ones((n, n), dtype=bool)
    for lo, hi in runs:
        mask[lo:hi, lo:hi] = False
    idx = xp.arange(n)
    mask[idx, idx] = False
    return mask


# --------------------------------------------------------------------------
# Hermitian eigendecomposition


def _eigh_small(xp, t):
    """LAPACK's double eigendecomposition of a small Hermitian block (native)."""
    n = t.shape[0]
    record_native_flops(9.0 * n**3, "syevd")
    return xp.linalg.eigh(t)


def _eigh_of_cluster(plan, t):
    """(theta, W) of the Hermitian cluster block ``t``, shifted by its mean
    diagonal so that its spread, not its magnitude, sets the precision."""
    xp = plan.xp
    k = t.shape[0]
    mu = float(xp.mean(xp.diagonal(t).real))
    ts = t - mu * xp.eye(k, dtype=t.dtype)
    ts = (ts + _ct(ts)) / 2
    if k >= RECURSE_MIN:
        theta, w, ok = _eigh_refined(plan, ts)
        if not ok:
            theta, w = _eigh_small(xp, ts)
    else:
        theta, w = _eigh_small(xp, ts)
    return theta + mu, _orthonormalised(plan, w)


def _orthonormalised(plan, w):
    """``w (I + (I - w^H w) / 2)``: one Newton-Schulz step takes a LAPACK basis's
    orthogonality error (about ``k u``) to its square, below the rounding of ``w``."""
    k = w.shape[1]
    return w + _pmm(plan, w, (plan.xp.eye(k, dtype=w.dtype) - _pmm(plan, _ct(w), w)) / 2)


#: A cluster block whose off-diagonal entries are below this times ||A|| is left
#: unrotated: its columns are Ritz vectors to a rounding of the eigenvalues.
_ROUNDING = 2.0**-52


def _update(plan, x, e, rotated):
    """``x @ e`` for ``x + x e``. A cluster's rotation makes ``e`` of order one, and a
    DGEMM-level product then leaves ``||X^H X - I||`` at LAPACK's level (about
    ``n u``): the faithful product keeps it at the rounding of ``x``'s entries."""
    if rotated and plan.accuracy == "dgemm":
        return product(plan.faithful, x, e)
    return product(plan, x, e)


def _noise(n, norm_a):
    """A generous bound on the error of the step's products (DGEMM level: each
    entry within about ``n u`` of the magnitudes it sums) relative to ``||A||``."""
    return 8.0 * n * 2.0**-53 * norm_a


def _eigh_step(plan, a, x, norm_a):
    """One refinement step. Returns ``(x_new, lam, eps, norm_a)``: eps is the size of
    the first-order corrections the step applied, the products' noise left out."""
    xp = plan.xp
    n = a.shape[0]
    eye = xp.eye(n, dtype=x.dtype)
    xh = _ct(x)
    s = product(plan, xh, product(plan, a, x))
    s = (s + _ct(s)) / 2
    r = eye - product(plan, xh, x)
    r = (r + _ct(r)) / 2
    lam = xp.diagonal(s).real / (1.0 - xp.diagonal(r).real)
    order = xp.argsort(lam)
    if bool((order != xp.arange(n)).any()):
        x, s, r, lam = x[:, order], s[order][:, order], r[order][:, order], lam[order]
    norm_a = max(norm_a, float(xp.abs(lam).max()))
    noise = _noise(n, norm_a)
    off = s - xp.diag(lam).astype(s.dtype)
    # Clusters: closer than the first-order error (Ogita-Aishima's delta), or than
    # sqrt(noise ||A||), where the noise / gap of a computed correction would leave
    # second-order terms above the products' own noise.
    delta = max(2.0 * (float(xp.linalg.norm(off)) + norm_a * float(xp.linalg.norm(r))),
                2.0 * math.sqrt(noise * norm_a))
    runs = _clusters(_host(xp, lam), delta)
    rotated = False
    sep = _separated_mask(xp, runs, n)
    gap = xp.where(sep, lam[None, :] - lam[:, None], 1.0)
    num = s + lam[None, :] * r
    e = xp.where(sep, num / gap, r / 2)
    eps = float(xp.abs(r).max())
    if bool(sep.any()):
        excess = xp.where(sep, xp.maximum(xp.abs(num) - noise, 0.0) / xp.abs(gap), 0.0)
        eps = max(eps, float(excess.max()))
    for lo, hi in runs:
        k = hi - lo
        c = eye[:k, :k] + r[lo:hi, lo:hi] / 2
        t = _pmm(plan, _pmm(plan, _ct(c), s[lo:hi, lo:hi]), c)
        d = xp.diagonal(t).real
        if float(xp.abs(t - xp.diag(d).astype(t.dtype)).max()) <= _ROUNDING * norm_a:
            # already Ritz vectors to the products' noise (an exact multiple eigenvalue,
            # or a cluster rotated by the step before): a rotation would only add
            # its own rounding to the orthogonality
            e[lo:hi, lo:hi] = c - eye[:k, :k]
            lam[lo:hi] = d
            continue
        theta, w = _eigh_of_cluster(plan, t)
        e[:, lo:hi] = _pmm(plan, e[:, lo:hi], w)
        e[lo:hi, lo:hi] = _pmm(plan, c, w) - eye[:k, :k]
        lam[lo:hi] = theta
        rotated = True
    x = x + _update(plan, x, e, rotated)
    return x, lam, eps, norm_a


def _eigh_refined(plan, a):
    """(w, v, converged) of the full Hermitian float64 / complex128 matrix `a`."""
    xp = plan.xp
    n = a.shape[0]
    e = _scale_exponent(xp, a)
    a_s = _scaled(a, -e)
    record_native_flops(9.0 * n**3 / 2, "ssyevd")
    w32, v32 = xp.linalg.eigh(a_s.astype(_start_dtype(xp, a.dtype)))
    x = v32.astype(a.dtype)
    norm_a = float(xp.abs(w32).max()) if n else 0.0
    lam, converged = None, False
    for _ in range(STEP_LIMIT):
        x, lam, eps, norm_a = _eigh_step(plan, a_s, x, norm_a)
        if eps <= CONVERGED:
            converged = True
            break
    order = xp.argsort(lam)
    return _scaled(lam[order], e), x[:, order], converged


def eigh_core(plan, a, *, vectors=True, lower=True):
    """Eigenvalues ascending (float64) and eigenvectors (a's dtype, float64 or
    complex128) of the Hermitian matrix given by `a`'s ``lower`` (or upper)
    triangle, under the call's `plan` (every product emulated). `a`: 2-D square
    float64 / complex128 array of ``plan.xp``, finite.
    Returns ``(w, v)``, ``v`` None when not `vectors`."""
    xp = plan.xp
    n = a.shape[0]
    h = _hermitian(xp, a, lower)
    if n <= 1:
        w = h.real.reshape(n).astype(xp.float64)
        return w, (xp.ones((n, n), dtype=a.dtype) if vectors else None)
    with quiet():
        w, v, ok = _eigh_refined(plan.inside, h)
    if not ok:
        record_native_flops(9.0 * n**3, FALLBACK)
        w, v = xp.linalg.eigh(h)
    return w, (v if vectors else None)


# --------------------------------------------------------------------------
# singular value decomposition


def _pmm(plan, x, y):
    """A product of the cluster step: emulated from order 32 (a cluster's rotation
    of n x k columns can be a large share of the work), native below."""
    return product(plan, x, y) if min(x.shape[0], x.shape[1], y.shape[1]) >= 32 else x @ y


def _svd_small(xp, t):
    k = t.shape[0]
    record_native_flops(22.0 * k**3, "gesdd")
    return xp.linalg.svd(t)


def _svd_step(plan, a, u, v, norm_a):
    xp = plan.xp
    n = a.shape[0]
    eye = xp.eye(n, dtype=u.dtype)
    uh = _ct(u)
    t = product(plan, uh, product(plan, a, v))
    r = eye - product(plan, uh, u)
    sg = eye - product(plan, _ct(v), v)
    sig = xp.diagonal(t).real / (1.0 - (xp.diagonal(r).real + xp.diagonal(sg).real) / 2)
    neg = sig < 0  # a column pair of opposite signs: flip u's column
    if bool(neg.any()):
        flip = xp.where(neg, -1.0, 1.0).astype(u.dtype)
        u, t, r = u * flip, t * flip[:, None], r * flip[:, None] * flip[None, :]
        sig = xp.abs(sig)
    order = xp.argsort(-sig)
    if bool((order != xp.arange(n)).any()):
        u, v, sig = u[:, order], v[:, order], sig[order]
        t, r, sg = t[order][:, order], r[order][:, order], sg[order][:, order]
    norm_a = max(norm_a, float(sig.max()))
    noise = _noise(n, norm_a)
    off = t - xp.diag(sig).astype(t.dtype)
    delta = max(2.0 * (float(xp.linalg.norm(off))
                       + norm_a * (float(xp.linalg.norm(r)) + float(xp.linalg.norm(sg)))),
                2.0 * math.sqrt(noise * norm_a))
    runs = _clusters(_host(xp, sig), delta)
    rotated = False
    sep = _separated_mask(xp, runs, n)
    si, sj = sig[:, None], sig[None, :]
    den = xp.where(sep, sj * sj - si * si, 1.0)
    alpha = t + sj * r
    beta = _ct(t) + sj * sg
    f = xp.where(sep, (alpha * sj + beta * si) / den, r / 2)
    g = xp.where(sep, (alpha * si + beta * sj) / den, sg / 2)
    if u.dtype.kind == "c":  # the diagonal's phase: t_ii made real
        ph = xp.diagonal(t).imag / xp.where(sig > 0, 2 * sig, 1.0)
        ph = xp.where(sig > 0, ph, 0.0)
        idx = xp.arange(n)
        f[idx, idx] += 1j * ph
        g[idx, idx] -= 1j * ph
    eps = max(float(xp.abs(r).max()), float(xp.abs(sg).max()))
    if bool(sep.any()):  # sigma_j^2 - sigma_i^2 over sigma_i + sigma_j: the gap
        excess = xp.maximum(xp.maximum(xp.abs(alpha), xp.abs(beta)) - noise, 0.0)
        eps = max(eps, float(xp.where(sep, excess * (si + sj) / xp.abs(den), 0.0).max()))
    for lo, hi in runs:
        k = hi - lo
        cu = eye[:k, :k] + r[lo:hi, lo:hi] / 2
        cv = eye[:k, :k] + sg[lo:hi, lo:hi] / 2
        tb = _pmm(plan, _pmm(plan, _ct(cu), t[lo:hi, lo:hi]), cv)
        d = xp.diagonal(tb)
        if float(xp.abs(tb - xp.diag(d)).max()) <= _ROUNDING * norm_a \
                and bool((d.real >= 0).all()):
            f[lo:hi, lo:hi] = cu - eye[:k, :k]  # as in the eigen step: no rotation needed
            g[lo:hi, lo:hi] = cv - eye[:k, :k]
            sig[lo:hi] = xp.abs(d)
            continue
        p, sv, qh = _svd_small(xp, tb)
        p, q = _orthonormalised(plan, p), _orthonormalised(plan, _ct(qh))
        f[:, lo:hi] = _pmm(plan, f[:, lo:hi], p)
        g[:, lo:hi] = _pmm(plan, g[:, lo:hi], q)
        f[lo:hi, lo:hi] = _pmm(plan, cu, p) - eye[:k, :k]
        g[lo:hi, lo:hi] = _pmm(plan, cv, q) - eye[:k, :k]
        sig[lo:hi] = sv
        rotated = True
    u = u + _update(plan, u, f, rotated)
    v = v + _update(plan, v, g, rotated)
    return u, v, sig, eps, norm_a


def _svd_refined(plan, a):
    """(u, s, v, converged) of a square float64 / complex128 matrix (v, not v^H)."""
    xp = plan.xp
    n = a.shape[0]
    e = _scale_exponent(xp, a)
    a_s = _scaled(a, -e)
    record_native_flops(22.0 * n**3, "sgesdd")
    u32, s32, vh32 = xp.linalg.svd(a_s.astype(_start_dtype(xp, a.dtype)))
    u, v = u32.astype(a.dtype), _ct(vh32).astype(a.dtype)
    norm_a = float(s32.max()) if n else 0.0
    sig, converged = None, False
    for _ in range(STEP_LIMIT):
        u, v, sig, eps, norm_a = _svd_step(plan, a_s, u, v, norm_a)
        if eps <= CONVERGED:
            converged = True
            break
    order = xp.argsort(-sig)
    return u[:, order], _scaled(sig[order], e), v[:, order], converged


def _qr_reduce(plan, a, full):
    """``a = q r`` by the emulated QR: q (m, m) when `full` else (m, n); r (n, n)."""
    from ._decomp_qr import _geqrf, _orgqr  # noqa: PLC0415

    xp = plan.xp
    m, n = a.shape
    qr_, tau = _geqrf(plan, xp.asfortranarray(a), True)
    r = xp.triu(qr_[:n, :])
    q = _orgqr(plan, qr_, tau, m if full else n)
    return q, r


def svd_core(plan, a, *, vectors=True, full_matrices=True):
    """``(u, s, vh)`` of a 2-D float64 / complex128 array (s descending, float64)
    under the call's `plan` (every product emulated); ``u``, ``vh`` None when not
    `vectors`. `a` finite."""
    xp = plan.xp
    m, n = a.shape
    if m < n:
        u, s, vh = svd_core(plan, _ct(a), vectors=vectors, full_matrices=full_matrices)
        return (_ct(vh), s, _ct(u)) if vectors else (None, s, None)
    if n == 0:
        k = m if full_matrices else 0
        return ((xp.eye(m, k, dtype=a.dtype), xp.zeros(0), xp.zeros((0, 0), dtype=a.dtype))
                if vectors else (None, xp.zeros(0), None))
    inner = plan.inside
    with quiet():
        q = None
        sq = a
        if m > n:
            q, sq = _qr_reduce(plan, a, vectors and full_matrices)
        if n == 1:
            val = sq[0, 0]
            s = xp.abs(sq).reshape(1).astype(xp.float64)
            ph = val / abs(val) if abs(val) > 0 else 1.0
            ur = xp.asarray([[ph]], dtype=a.dtype)
            v = xp.ones((1, 1), dtype=a.dtype)
            ok = True
        else:
            ur, s, v, ok = _svd_refined(inner, sq)
        if not ok:
            record_native_flops(22.0 * n**3, FALLBACK)
            ur, s, vh = xp.linalg.svd(sq)
            v = _ct(vh)
        if not vectors:
            return None, s, None
        if q is None:
            return ur, s, _ct(v)
        u = product(inner, q[:, :n], ur)
        if full_matrices and m > n:
            u = xp.concatenate([u, q[:, n:]], axis=1)
        return u, s, _ct(v)
