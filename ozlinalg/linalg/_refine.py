"""Refined solves: factor at a reduced count on the INT8 units, refine in FP64.

LAPACK's ``dsgesv`` / ``dsposv`` factor in FP32 and refine in FP64; cuSOLVER's IRS
solvers factor on tensor cores in FP16 / BF16 / TF32. The Ozaki scheme's precision is a
dial instead: the slice count (Ozaki scheme I) or the moduli count (scheme II, ``crt``)
sets the precision of every product of the factorization, from ~18 to ~53 bits on the
same INT8 units. A solve can therefore factor with the cheapest count whose
factorization still refines to FP64 in a few steps, and turn the dial up where the
matrix is too ill-conditioned for it (where an FP32 factorization fails, κ beyond
~1e7).

The algorithm, for one square system ``A X = B`` (float64 / complex128):

1. **Factor** ``A`` (LU with partial pivoting, or Cholesky) with the blocked routines of
   :mod:`ozlinalg.lapack`, every emulated product at the count of a *level* of
   :data:`LADDERS`. A level carries the measured normwise error ``u`` of one product at
   its count, ``|fl(AB) - AB| <= u |A||B|`` (``benchmarks/calibration/refine_levels.py``).
2. **Choose the count from cheap information**: LAPACK ``?gecon`` / ``?pocon`` on the
   factors estimates ``κ_1(A)`` in O(n^2). Where ``κ u`` exceeds :data:`KAPPA_U_MAX`
   the refinement would contract too slowly (or diverge): the matrix is factored again
   at the first level with ``κ u`` below :data:`KAPPA_U_TARGET` (the last level is DGEMM
   level, ``slices="auto"``).
3. **Refine** (classical iterative refinement): ``R = B - A X`` in native FP64 (O(n^2)
   per right-hand side, a BLAS-2 / thin BLAS-3 product), ``D`` from the factors
   (native triangular solves), ``X += D``, until every column's normwise backward error
   ``||r||_inf / (||A||_inf ||x||_inf + ||b||_inf)`` reaches ``eps`` of the output's
   precision, or stops decreasing below ``sqrt(n) eps`` (LAPACK ``dsgesv``'s test).
4. **GMRES-IR** when classical refinement stalls (a correction larger than
   :data:`CONTRACTION_MAX` times the previous one): GMRES on ``A d = r`` left-
   preconditioned by the factors, in FP64 (Carson & Higham's GMRES-based refinement,
   which converges for ``κ u`` far beyond classical refinement's limit).
5. **Raise the count or fall back**: a level whose refinement fails is replaced by the
   first level with ``κ u`` below :data:`KAPPA_U_TARGET` (DGEMM level without an
   estimate); if DGEMM level's refinement fails too, the result is the
   DGEMM-level solve itself (what ``refine=False`` computes), as ``dsgesv`` falls back to
   ``dgesv``.

Every refined system is recorded in :attr:`ozlinalg.Profile.refined` (levels tried,
iterations, GMRES steps, whether it fell back, the final backward error).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .. import lapack
from .._array import row_blocks
from .._exceptions import LinAlgError
from .._profile import RefineRecord, active_profiles, record_refine
from ..lapack.scipy_conventions import lapack_args, quiet
from ._condition import gecon, norm1, pocon

__all__ = ["LADDERS", "KAPPA_U_MAX", "KAPPA_U_TARGET", "CONTRACTION_MAX", "Level", "ladder",
           "refined_solve"]


@dataclass(frozen=True)
class Level:
    """One precision of the factorization: ``method`` at ``slices`` (``"auto"``: DGEMM
    level), each product within ``unit * |A||B|`` (normwise, measured)."""

    method: str
    slices: object
    unit: float


#: Method family -> ``(count, unit)`` of the reduced levels, cheapest first. The units are
#: the largest ``|fl(AB) - AB| / (|A||B|)`` over random products with rows and columns
#: scaled across 2**(+-4) and inner dimensions 128 and 1024, against the exact product,
#: doubled and rounded up to a power of two
#: (``python benchmarks/calibration/refine_levels.py``):
#: hybrid-ef gains ~6.7 bits a slice, crt ~4 bits a modulus.
LADDERS = {
    "hybrid-ef": ((3, 2.0**-15), (4, 2.0**-22), (5, 2.0**-28), (6, 2.0**-35), (7, 2.0**-42)),
    "crt": ((6, 2.0**-19), (7, 2.0**-23), (8, 2.0**-27), (10, 2.0**-35), (12, 2.0**-43)),
}
LADDERS["crt-fast"] = LADDERS["crt"]

#: The level whose factorization is tried first (index into the ladder): κ up to about
#: 1e6 refines from it, the common case; a larger estimate moves straight to the level
#: it needs (one extra factorization). Single-precision results start one level lower.
FIRST_LEVEL = {"hybrid-ef": 1, "crt": 1, "crt-fast": 1}

#: A level's factors are refined when the estimate gives ``κ_1 u`` at most this;
#: beyond it the matrix is factored again at once. The units are worst cases over
#: entries and the 1-norm condition number exceeds the 2-norm one, so refinement
#: converges well beyond ``κ_1 u = 1``: at n = 384 classical refinement took at most 4
#: steps at ``κ_1 u <= 2``, 6 to 8 at 3 to 140, and converged up to ``κ_1 u ~ 240`` on
#: every level (``python benchmarks/calibration/refine_levels.py --refine --n 384``).
#: Trying is cheap (a step is O(n^2)); where it stalls GMRES-IR takes over, and only
#: where that fails too is the count raised.
KAPPA_U_MAX = 32.0

#: A matrix factored again goes to the first level with ``κ_1 u`` at most this (a
#: comfortable margin: a third factorization would cost more than the steps saved).
KAPPA_U_TARGET = 1.0

#: Classical refinement stalls when a correction is larger than this share of the previous
#: one; GMRES-IR takes over.
CONTRACTION_MAX = 0.5

#: The backward error every column is refined to; stopping at ``sqrt(n)`` times ``eps``
#: (LAPACK ``dsgesv``'s test) once the corrections stop contracting.
UNIT_ROUNDOFF = 2.0**-53

#: Steps of classical refinement at most (LAPACK ``dsgesv``'s ITERMAX).
MAX_ITERATIONS = 30

#: GMRES-IR: Krylov dimension per restart, and restarts at most.
GMRES_RESTART = 30
GMRES_RESTARTS = 3


_SINGLE = (np.dtype(np.float32), np.dtype(np.complex64))


def ladder(method, accuracy="dgemm"):
    """The levels a refined solve with ``method`` may use, cheapest first; the last is
    DGEMM level. Only DGEMM level for methods without a reduced ladder and for
    ``accuracy="faithful"`` (every product there is certified: a reduced count is not
    what the caller asked for)."""
    top = Level(method, "auto", 2.0**-53)
    if accuracy == "faithful" or method not in LADDERS:
        return (top,)
    return tuple(Level(method, s, u) for s, u in LADDERS[method]) + (top,)


def _inf_norm(xp, a):
    if not a.size:
        return 0.0
    if xp is np and a.ndim == 2 and a.flags.c_contiguous and a.size > (1 << 16):
        # row blocks through one buffer: no full-size temporary (n = 4096: 87 -> ~20 ms),
        # each row summed as in the one-shot expression, so the same value
        blocks = row_blocks(*a.shape, 1 << 16)
        buf = np.empty((blocks[0][1], a.shape[1]), dtype=np.abs(a[:1]).dtype)
        tops = [np.abs(a[r0:r1], out=buf[:r1 - r0]).sum(axis=1).max() for r0, r1 in blocks]
        return float(np.max(tops))  # NaN propagates as in the one-shot expression
    return float(xp.abs(a).sum(axis=1).max())


class _Factors:
    """A factorization of ``a`` at one level: ``solve(r)`` (native triangular solves),
    ``rcond`` (None on a device), ``failed`` (a zero pivot / not positive definite)."""

    def __init__(self, plan, a, kind, lower, transposed, level, anorm1):
        xp = plan.xp
        self.xp, self.kind, self.lower, self.trans = xp, kind, lower, transposed
        self.level = level
        n = a.shape[0]
        # reduced counts on purpose (the residuals verify them): no count check
        kw = lapack_args(plan.with_counts(level.method, level.slices, count_check=False), n)
        self.plan = kw["plan"]
        self.failed = False
        self.rcond = None
        with quiet():
            if kind == "pos":
                try:
                    self.f = lapack.potrf(a, lower=lower, check_finite=False, **kw)
                except LinAlgError:
                    self.failed = True
                    return
                self.rcond = pocon(xp, self.f, lower, anorm1)
            else:
                self.f, self.piv = lapack.getrf(a, check_finite=False, warn=False, **kw)
                d = xp.diagonal(self.f)
                if bool((d == 0).any()):
                    self.failed = True
                    return
                self.rcond = gecon(xp, self.f, anorm1)
        self._native = n + 1  # min_size above n: the triangular solves run natively

    def solve(self, r):
        with quiet():
            if self.kind == "pos":
                return lapack.potrs(self.f, r, lower=self.lower, check_finite=False,
                                    plan=self.plan, min_size=self._native)
            return lapack.getrs(self.f, self.piv, r, trans=1 if self.trans else 0,
                                check_finite=False, plan=self.plan, min_size=self._native)

    def serves(self):
        """The condition estimate allows refinement from this level (always True where
        there is no estimate: the contraction decides)."""
        if self.failed:
            return False
        if self.rcond is None:
            return True
        if not self.rcond > 0:  # zero or NaN
            return False
        return self.level.unit / self.rcond <= KAPPA_U_MAX


class _Refinement:
    """Iterative refinement of ``a x = b`` (``a`` the operator, already transposed when
    the system is), with normwise backward errors per column."""

    def __init__(self, xp, a, b, out_eps):
        self.xp, self.a, self.b = xp, a, b
        n = a.shape[0]
        self.anorm = _inf_norm(xp, a)
        self.bnorm = xp.abs(b).max(axis=0)
        self.tight = out_eps
        self.loose = 2 * out_eps * math.sqrt(n)
        self.iterations = 0
        self.gmres_steps = 0

    def residual(self, x):
        return self.b - self.a @ x

    def backward(self, x, r):
        xp = self.xp
        den = self.anorm * xp.abs(x).max(axis=0) + self.bnorm
        num = xp.abs(r).max(axis=0)
        eta = xp.where(den > 0, num / xp.where(den > 0, den, 1), xp.where(num > 0, xp.inf, 0))
        return eta

    def classical(self, factors, x):
        """Refine ``x``; returns ``(x, eta, ok)``: ok when every column reached the
        tight bound, or the loose one where it stopped improving."""
        xp = self.xp
        r = self.residual(x)
        eta = self.backward(x, r)
        prev_d = None
        while self.iterations < MAX_ITERATIONS:
            worst = float(eta.max())
            if not math.isfinite(worst):
                return x, eta, False
            if worst <= self.tight:
                return x, eta, True
            d = factors.solve(r)
            dn = xp.abs(d).max(axis=0)
            if prev_d is not None and bool((dn > CONTRACTION_MAX * prev_d).any()):
                # no longer contracting: converged at the attainable accuracy, or stalled
                return x, eta, worst <= self.loose
            x = x + d
            self.iterations += 1
            prev_d = dn
            r = self.residual(x)
            eta = self.backward(x, r)
        worst = float(eta.max())
        return x, eta, worst <= self.loose

    def gmres(self, factors, x):
        """GMRES-IR: corrections from GMRES on ``M^-1 A d = M^-1 r`` (``M`` the
        factors), column by column; returns ``(x, eta, ok)`` as :meth:`classical`."""
        x = x.copy()
        for _restart in range(GMRES_RESTARTS):
            r = self.residual(x)
            eta = self.backward(x, r)
            if float(eta.max()) <= self.loose:
                break
            for j in range(x.shape[1]):
                if float(eta[j]) <= self.tight:
                    continue
                x[:, j] += self._gmres_column(factors, r[:, j])
        r = self.residual(x)
        eta = self.backward(x, r)
        worst = float(eta.max())
        return x, eta, math.isfinite(worst) and worst <= self.loose

    def _gmres_column(self, factors, r):
        """One restart cycle of GMRES for ``A d = r``, preconditioned on the left."""
        xp = self.xp
        n = r.shape[0]
        m = min(GMRES_RESTART, n)
        z = factors.solve(r[:, None])[:, 0]
        beta = float(xp.linalg.norm(z))
        if beta == 0 or not math.isfinite(beta):
            return xp.zeros_like(r)
        dt = np.complex128 if r.dtype.kind == "c" else np.float64
        v = xp.zeros((n, m + 1), dtype=r.dtype)
        h = np.zeros((m + 1, m), dtype=dt)
        v[:, 0] = z / beta
        tol = self.tight * beta
        k = 0
        for k in range(m):
            w = factors.solve((self.a @ v[:, k])[:, None])[:, 0]
            for i in range(k + 1):  # modified Gram-Schmidt
                hik = complex(xp.vdot(v[:, i], w)) if dt is np.complex128 \
                    else float(xp.dot(v[:, i], w))
                h[i, k] = hik
                w = w - hik * v[:, i]
            hn = float(xp.linalg.norm(w))
            h[k + 1, k] = hn
            self.gmres_steps += 1
            e1 = np.zeros(k + 2, dtype=dt)
            e1[0] = beta
            y, *_ = np.linalg.lstsq(h[:k + 2, :k + 1], e1, rcond=None)
            res = float(np.linalg.norm(h[:k + 2, :k + 1] @ y - e1))
            if hn == 0 or res <= tol:
                break
            v[:, k + 1] = w / hn
        y = xp.asarray(y.astype(dt, copy=False))
        return v[:, :k + 1] @ y


def refined_solve(plan, a, b, *, kind, lower, transposed, dtype, a_full=None):
    """Solve one ``(n, n)`` system by a refined solve under the call's `plan` (its
    method's ladder, its accuracy); ``b`` is 2-D.

    ``kind``: ``"gen"`` (LU) or ``"pos"`` (Cholesky of the `lower` / upper triangle;
    ``a_full`` the Hermitian matrix that triangle defines, for the residuals).
    ``dtype``: the result's precision (single precision starts one level lower).
    Returns ``(x, rcond, factors)``, or ``None`` where no level could factor ``a`` at
    all (a zero pivot at DGEMM level, not positive definite): the caller's unrefined
    path then gives SciPy's verdict. ``factors`` is the last factorization (its ``f``
    holds the factor the caller may write into an overwritten ``a``).
    """
    t0 = time.perf_counter()
    xp, method = plan.xp, plan.method.name
    op = a_full if a_full is not None else a
    anorm1 = norm1(xp, op)  # ?gecon / ?pocon estimate kappa_1 of the factored matrix
    op = op.T if transposed else op
    levels = ladder(method, plan.accuracy)
    first = FIRST_LEVEL.get(method, 0) - (np.dtype(dtype) in _SINGLE)
    first = min(max(first, 0), len(levels) - 1)
    # refined to FP64's unit roundoff whatever the result's precision: a single-precision
    # result is then the rounding of an FP64-accurate solution
    work = _Refinement(xp, op, b.astype(a.dtype, copy=False), UNIT_ROUNDOFF)
    tried = []
    fell_back = False
    i = first
    factors = x = eta = None
    ok = False
    while True:
        factors = _Factors(plan, a, kind, lower, transposed, levels[i], anorm1)
        tried.append(levels[i].slices)
        top = i == len(levels) - 1
        if not top and not factors.serves():
            i = _needed(levels, factors, i)
            continue
        if factors.failed:
            _record(op, b, levels, tried, work, False, None, factors, t0, failed=True)
            return None
        x = factors.solve(work.b)
        x, eta, ok = work.classical(factors, x)
        if not ok:
            x, eta, ok = work.gmres(factors, x)
        if ok or top:
            break
        # this level's refinement failed: the level the estimate asks for with a margin
        # (DGEMM level without an estimate)
        i = _needed(levels, factors, i)
    if not ok:
        # DGEMM level did not refine either (κ near 1/eps): its plain solve, as
        # dsgesv falls back to dgesv
        fell_back = True
        x = factors.solve(work.b)
        eta = work.backward(x, work.residual(x))
    _record(op, b, levels, tried, work, fell_back, eta, factors, t0)
    return x, factors.rcond, factors


def _needed(levels, factors, i):
    """The first level above ``i`` whose unit serves the estimated condition number."""
    rc = factors.rcond
    for j in range(i + 1, len(levels) - 1):
        if rc is not None and rc > 0 and levels[j].unit / rc <= KAPPA_U_TARGET \
                and not factors.failed:
            return j
    return len(levels) - 1


def _record(op, b, levels, tried, work, fell_back, eta, factors, t0, failed=False):
    if not active_profiles():
        return
    record_refine(RefineRecord(
        shape=(int(op.shape[0]), int(b.shape[1])),
        method=levels[-1].method,
        counts=tuple(tried),
        count=tried[-1],
        iterations=work.iterations,
        gmres_steps=work.gmres_steps,
        fell_back=fell_back,
        failed=failed,
        backward_error=float(eta.max()) if eta is not None and eta.size else 0.0,
        rcond=factors.rcond,
        time=time.perf_counter() - t0,
    ))
