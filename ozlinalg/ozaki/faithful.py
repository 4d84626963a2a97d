"""``accuracy="faithful"``: every entry of the product within one ulp, certified.

A result ``c`` is a *faithful rounding* of the exact ``x`` when it is one of the
two floats bracketing ``x`` (``x`` itself when representable): then
``|c - x| < ulp(x)``. The emulation certifies it entry by entry with a
deterministic bound, and recomputes the entries it cannot certify exactly
(:mod:`.exactdot`: correctly rounded); nothing is guessed.

Ozaki scheme I with fixed scales (``hybrid-ef``, ``bitmask-ef``)
------------------------------------------------------------------
Rows are normalized and cut into ``s`` slices, ``x = u_0 (sum_t d_t 2**(-w t)) +
R(s)`` (units of the first slice, integer digits ``d_t``, ``|d_t| <= dmax``), with
the residual after ``t`` slices below ``rho_t = kappa 2**(-w (t - 1))`` in those
units (``kappa = 1/2`` for round-to-nearest slices, 1 for truncation: the
residual of a round to nearest on a grid is at most half the grid, and at most
the entry itself). The triangular product ``T = sum_{t + v < s} d_t d_v 2**(-w (t
+ v))`` misses

    N = sum_{t < s} 2**(-w t) d^A_t . R^B(s - t)  +  R^A(s) . y,

and since ``2**(-w t) rho_{s - t} = kappa 2**(-w (s - 1))`` for every t,

    |N_ij| <= kappa 2**(-w (s - 1)) [ sum_t D^A_{t,i} + sum_t 2**(-w t) D^B_{t,j} ]
              + k kappa**2 2**(-2 w (s - 1))

with the digit sums ``D_{t,i} = sum_k |d_{t,ik}|`` (exact integers, a by-product
of the split); the same with A and B swapped also holds, and the smaller is
taken. These are vectors: the bound of every entry costs O(1).

FP64 accumulation. The groups ``g >= 3`` are added with TwoSum into
``(acc, comp)`` (``comp`` collects the exact rounding errors; its own additions
round, by at most ``n**2 u**2 M`` in total for ``n`` additions of terms whose
absolute sum is ``M``, bounded by digit sums: ``M <= dmax sum_t D_t
2**(-w max(3, t)) / (1 - 2**-w)``). The top groups ``g <= 2`` are combined
exactly (integers below 2**53) and added last with TwoSum: ``acc + top = r + e1``
exactly; ``e = fl(e1 + comp)`` (error at most ``u |e|``); the result is
``c = fl(r + e)`` with the exact remainder ``e2`` (TwoSum). So

    |x - c| <= |e2| + u |e| + n**2 u**2 M + |N|,

and ``c`` is certified when this is below the distance from ``c`` to its
nearest neighbouring float (half an ulp below a power of two), with a relative
slack of 2**-40 for the rounding of the bound itself. The final scaling by
powers of two is exact where the result and its ulp are normal numbers
(``|c| >= 2**-968``); other entries (subnormal or overflowing results, and exact
zeros of rows that are not zero) are recomputed.

Ozaki scheme II (``crt``, ``crt-fast``)
---------------------------------------
``C' = A' B'^T`` is exact (CRT) for the integer operands ``A' = rint|trunc(2**mu
X)``; with ``E_A = 2**mu X - A'`` (``|E_A| <= 1/2`` rounded, ``< 1`` truncated),

    2**(mu + nu) x . y - C' = E_A . (2**nu y) + A' . E_B,
    |...| <= rho_A 2**nu |y|_1 + rho_B (2**mu |x|_1 + k rho_A)

(``|x|_1`` from a fixed-point sum: the same float on every engine). ``C'`` is
rebuilt from its limbs with TwoSums into ``r + e``.

Counts. ``slices="auto"`` takes up to :data:`EXTRA_SLICES` more slices than the
DGEMM-level count (``moduli="auto"``: up to :data:`EXTRA_MODULI` more moduli): the
bound is a worst case over signs (about sqrt(k) above the typical error) and a
faithful result needs the last bit, DGEMM level does not. For products of at least
:data:`PREDICT_MIN_SIZE` multiply-adds the extra count (1 or 2 slices, 2 to 4 moduli)
is chosen from a sampled prediction of the fraction each count leaves uncertified
(:func:`ozlinalg.ozaki.gemm.predicted_slices`,
:func:`ozlinalg.ozaki.crt.certify.faithful_moduli`): a cost choice, every count's
certificate being rigorous (docs/guarantees.md has the measured certified
fractions and costs).
"""
from __future__ import annotations

import numpy as np

from .._array import fp_errstate, row_blocks, to_numpy
from .passes import generic, passes_for

__all__ = ["ACCURACIES", "EXTRA_MODULI", "EXTRA_SLICES", "FAITHFUL_METHODS", "certify",
           "check_method", "combine", "digit_sums", "ef_bound", "recompute_uncertified",
           "two_sum_into",
           "validate_accuracy"]

ACCURACIES = ("dgemm", "faithful")

#: Methods with a certified faithful mode (fixed-scale EF splits and Ozaki-II).
FAITHFUL_METHODS = ("hybrid-ef", "bitmask-ef", "crt", "crt-fast")

#: Slices beyond ``slices="auto"``'s DGEMM-level count in faithful mode (at most: large
#: products take 1 or 2, :func:`ozlinalg.ozaki.gemm.predicted_slices`).
EXTRA_SLICES = 2
#: Moduli beyond ``moduli="auto"``'s DGEMM-level count in faithful mode (at most: large
#: products take 2 to 4, :func:`ozlinalg.ozaki.crt.certify.faithful_moduli`).
EXTRA_MODULI = 4

U = 2.0**-53
_SLACK = 2.0**-40
#: Results below this magnitude are recomputed: their ulp must be a normal number
#: for the scaling of the certificate to be exact.
TINY = 2.0**-968
HUGE = 2.0**1023


def validate_accuracy(accuracy):
    """``"dgemm"`` or ``"faithful"``, or ValueError."""
    if accuracy not in ACCURACIES:
        raise ValueError(f"ozlinalg: accuracy must be 'dgemm' or 'faithful', got {accuracy!r}")
    return accuracy


def check_method(meth):
    """ValueError unless ``meth`` (a :class:`~ozlinalg.ozaki.params.Method`) has a
    faithful mode."""
    if meth.name not in FAITHFUL_METHODS:
        raise ValueError(
            f"ozlinalg: accuracy='faithful' needs one of the methods "
            f"{', '.join(FAITHFUL_METHODS)} (fixed-scale error-free accumulation or "
            f"Ozaki scheme II), got method={meth.name!r}")


# -- bounds -----------------------------------------------------------------------------


def digit_sums(xp, engine, d):
    """``D[t, i] = sum_k |d[t, i, k]|`` (float64, exact) of slices ``d`` (s, rows, k)."""
    return passes_for(engine, xp).digit_sums(d)


@generic("digit_sums")
def digit_sums_generic(xp, d):
    """:func:`digit_sums` as array code (the engines' fused pass gives its bits)."""
    s, rows, k = d.shape
    out = xp.empty((s, rows))
    for t in range(s):
        for r0, r1 in row_blocks(rows, k, target=1 << 20):
            blk = d[t, r0:r1]
            out[t, r0:r1] = xp.abs(blk.astype(xp.int32 if blk.dtype.kind == "i" else
                                              xp.float64)).sum(axis=1)
    return out


class EFBound:
    """Vectors of the Ozaki-I bound (module doc), in units of the first slices."""

    def __init__(self, xp, DA, DB, kind, width, s, k, dmax, n_updates):
        kappa = 0.5 if kind in ("hybrid", "rn") else 1.0
        tw = xp.asarray([2.0 ** (-width * t) for t in range(s)])
        gw = xp.asarray([2.0 ** (-width * max(3, t)) for t in range(s)]) / (1.0 - 2.0**-width)
        self.c1 = kappa * 2.0 ** (-width * (s - 1))
        self.c0 = k * kappa * kappa * 2.0 ** (-2 * width * (s - 1))
        self.c2 = n_updates * n_updates * U * U * (1.0 + 2.0**-20)
        self.SA, self.WA, self.MA = DA.sum(axis=0), tw @ DA, float(dmax) * (gw @ DA)
        self.SB, self.WB, self.MB = DB.sum(axis=0), tw @ DB, float(dmax) * (gw @ DB)
        # rows / columns that are zero contribute nothing (not even the residual term)
        self.nzA = self.SA > 0
        self.nzB = self.SB > 0

    def block(self, xp, sl):
        """``delta`` of the entries ``sl`` (a pair of slices: rows, columns)."""
        ri, ci = sl
        sa, wa, ma = self.SA[ri, None], self.WA[ri, None], self.MA[ri, None]
        sb, wb, mb = self.SB[None, ci], self.WB[None, ci], self.MB[None, ci]
        t1 = xp.minimum(sa + wb, sb + wa)
        d = self.c1 * t1 + self.c0 + self.c2 * xp.minimum(ma, mb)
        return xp.where(self.nzA[ri, None] & self.nzB[None, ci], d, 0.0)

    def bound(self, xp, slop, sl):
        return ef_bound_block(xp, self, slop, sl)


def ef_bound(xp, engine, da, db, kind, width, s, k, dmax, n_updates):
    """:class:`EFBound` of slices ``da`` (of A) and ``db`` (of B^T)."""
    return EFBound(xp, digit_sums(xp, engine, da), digit_sums(xp, engine, db), kind, width,
                   s, k, dmax, n_updates)


# -- accumulation ----------------------------------------------------------------------


def add_compensated(xp, engine, alpha, x, acc, comp):
    """``acc + comp += alpha * x`` with TwoSum (``alpha * x`` exact: integers times a
    power of two)."""
    passes_for(engine, xp).axpy_twosum(alpha, x, acc, comp)


@generic("axpy_twosum")
def axpy_twosum_generic(xp, alpha, x, acc, comp):
    """:func:`add_compensated` as array code (the engines' fused pass gives its bits)."""
    two_sum_into(xp, acc, comp, x * alpha if x.dtype == xp.float64 else
                 x.astype(xp.float64) * alpha)


def two_sum_into(xp, acc, comp, x):
    """``acc + comp += x`` with the rounding error of ``acc + x`` kept in ``comp`` (TwoSum)."""
    s = acc + x
    bb = s - acc
    err = (acc - (s - bb)) + (x - bb)
    comp += err
    acc[...] = s


def finish(xp, engine, acc, comp, top, alpha):
    """``acc + comp + alpha * top`` as ``c`` (into ``acc``) and the slop ``|e2| + u |e|``
    (returned; module doc)."""
    return passes_for(engine, xp).finish_twosum(acc, comp, top, alpha)


@generic("finish_twosum")
def finish_generic(xp, acc, comp, top, alpha):
    """:func:`finish` as array code (the engines' fused pass gives its bits)."""
    slop = xp.empty(acc.shape, order="F" if acc.flags.f_contiguous and not
                    acc.flags.c_contiguous else "C")
    for _, _, sl in _blocks(acc):
        a = acc[sl]
        t = top[sl] * alpha
        r = a + t
        bb = r - a
        e1 = (a - (r - bb)) + (t - bb)
        e = e1 + comp[sl]
        r2 = r + e
        bb = r2 - r
        e2 = (r - (r2 - bb)) + (e - bb)
        acc[sl] = r2
        slop[sl] = xp.abs(e2) + (U * (1.0 + 2.0**-20)) * xp.abs(e)
    return slop


def _blocks(x):
    """Slices of row blocks (column blocks for a column-major ``x``)."""
    m, p = x.shape
    if x.flags.f_contiguous and not x.flags.c_contiguous:
        return [(c0, c1, (slice(None), slice(c0, c1))) for c0, c1 in row_blocks(p, m)]
    return [(r0, r1, (slice(r0, r1), slice(None))) for r0, r1 in row_blocks(m, p)]


# -- certification -----------------------------------------------------------------------


def certify_core(xp, r, bnd, ea, eb):
    """True where ``r`` (block units; final value ``r 2**(ea_i + eb_j)``) is certified:
    ``bnd >= |r - exact|`` below the distance to the neighbouring floats (half an ulp
    below a power of two), with the final value's ulp a normal number (exponent of
    the result in ``[-967, 1023]``), or ``r == bnd == 0`` (exact zeros)."""
    ar = xp.abs(r)
    mant, e = xp.frexp(ar)
    E = e + ea[:, None] + eb[None, :]
    gap = xp.ldexp(xp.ones(r.shape), e - 53 - (mant == 0.5))
    ok = (r != 0) & (E >= -967) & (E <= 1023) & (bnd < gap * (1.0 - _SLACK))
    return ok | ((r == 0) & (bnd == 0))


def certify(xp, c, bound):
    """True where ``c`` (final units) is certified faithful: ``bound`` (an upper bound of
    ``|c - exact|``, same units) below the distance to the neighbouring floats; exact
    zeros (bound 0) too. Results outside ``[TINY, HUGE)`` are never certified here."""
    ac = xp.abs(c)
    with fp_errstate(xp, invalid="ignore", over="ignore"):
        sp = xp.spacing(xp.where(xp.isfinite(ac), ac, 1.0))
        mant, _ = xp.frexp(ac)
        gap = xp.where(mant == 0.5, 0.5 * sp, sp)
        ok = (ac >= TINY) & (ac < HUGE) & (bound < gap * (1.0 - _SLACK))
    return ok | ((c == 0) & (bound == 0))


def ef_bound_block(xp, vec, slop, sl):
    """``(slop + delta) (1 + 2**-40)`` of the entries ``sl``: the bound of an EF block."""
    return (slop[sl] + vec.block(xp, sl)) * (1.0 + _SLACK)


@generic("certify")
def certify_generic(xp, r, slop, vec, ea, eb, slack):
    """:func:`certify_core` of a tile with the bound ``vec.bound`` (``slack``: the
    engines' fused ``certify_ef`` / ``certify_crt`` take it; here it is ``_SLACK``, which
    ``vec.bound`` applies): the generic form of those passes."""
    out = xp.empty(r.shape, dtype=bool)
    for _, _, sl in _blocks(r):
        out[sl] = certify_core(xp, r[sl], vec.bound(xp, slop, sl), ea[sl[0]], eb[sl[1]])
    return out


def ef_certify(xp, engine, r, slop, vec, ea, eb):
    """:func:`certify_core` of an EF block."""
    return passes_for(engine, xp).certify_ef(r, slop, vec, ea, eb, _SLACK)


class CRTBound:
    """Vectors of the Ozaki-II bound (module doc), in units of ``C'``."""

    def __init__(self, xp, sx, sy, mu, nu, round_a, round_b, k):
        self.pa = xp.ldexp(sx, mu.astype(xp.int32))
        self.pb = xp.ldexp(sy, nu.astype(xp.int32))
        self.ra = xp.where(round_a, 0.5, 1.0)
        self.rb = xp.where(round_b, 0.5, 1.0)
        self.za, self.zb = sx == 0, sy == 0
        self.k = float(k)

    def block(self, xp, sl):
        ri, ci = sl
        ra, pa = self.ra[ri, None], self.pa[ri, None]
        d = (ra * self.pb[None, ci] + self.rb[None, ci] * (pa + self.k * ra)) * (1.0 + 2.0**-30)
        return xp.where(self.za[ri, None] | self.zb[None, ci], 0.0, d)

    def bound(self, xp, slop, sl):
        return (slop[sl] + self.block(xp, sl)) * (1.0 + _SLACK)


def crt_certify(xp, engine, r, slop, vec, ea, eb):
    """:func:`certify_core` of an Ozaki-II tile."""
    return passes_for(engine, xp).certify_crt(r, slop, vec, ea, eb, _SLACK)


def scaled_bound(xp, bound, ea, eb):
    """``bound * 2**(ea_i + eb_j)``, rounded up (final units)."""
    with fp_errstate(xp, under="ignore", over="ignore"):
        out = xp.ldexp(bound, ea[:, None] + eb[None, :])
    return out * (1.0 + _SLACK) + 2.0**-1074


class combine:
    """Sum of inner blocks ``(c_b, bound_b)`` (final units), certified at the end:
    ``hi + lo`` by TwoSum, the bounds added (and the rounding of ``lo``)."""

    def __init__(self, xp):
        self.xp = xp
        self.hi = self.lo = self.bnd = self.absl = None
        self.n = 0

    def add(self, c, bound):
        xp = self.xp
        self.n += 1
        if self.hi is None:
            self.hi, self.lo, self.bnd = c.copy(), xp.zeros_like(c), bound.copy()
            self.absl = xp.zeros_like(c)
            return
        s = self.hi + c
        bb = s - self.hi
        err = (self.hi - (s - bb)) + (c - bb)
        self.hi = s
        self.lo += err
        self.absl += xp.abs(self.lo)
        self.bnd += bound

    def result(self):
        """``(c, bound)``: the rounded sum and its error bound (final units)."""
        xp = self.xp
        with fp_errstate(xp, invalid="ignore", over="ignore"):
            r = self.hi + self.lo
            bb = r - self.hi
            e = (self.hi - (r - bb)) + (self.lo - bb)
            bnd = (self.bnd + xp.abs(e) + U * self.absl) * (1.0 + _SLACK)
        return r, xp.where(xp.isfinite(bnd), bnd, xp.inf)


# -- Ozaki scheme II ----------------------------------------------------------------------


def recompute(xp, c, a, bt, rows, cols, threads=None, scratch=None, prepared=None):
    """``c[rows, cols] = `` the correctly rounded products (:mod:`.exactdot`, on
    ``threads`` threads and with the ``scratch`` pool: the engine's; ``prepared``: the
    :class:`.exactdot.Rows` of A and B^T holding those rows, or None)."""
    from .exactdot import exact_dots

    if len(rows) == 0:
        return
    vals = exact_dots(xp, a, bt, to_numpy(rows), to_numpy(cols), threads=threads,
                      scratch=scratch, prepared=prepared)
    c[xp.asarray(rows), xp.asarray(cols)] = xp.asarray(vals)


#: Entries per exact recomputation call (:func:`recompute_uncertified`): bounds the index
#: arrays and the gathered rows of one call, whatever the count not certified.
RECOMPUTE_ENTRIES = 1 << 11


def recompute_uncertified(xp, c, ok, a, bt, tiles=None, offset=(0, 0), threads=None,
                          scratch=None):
    """Recompute exactly (:func:`recompute`) the entries of ``c`` where ``ok`` (the
    certificate of ``c[i0:i0 + rows, j0:j0 + cols]``, ``offset = (i0, j0)``) is False;
    returns their count.

    Notes
    -----
    A quarter of an output tile (``tiles``, the driver's; the whole ``ok`` by default)
    on each side and at most :data:`RECOMPUTE_ENTRIES` entries per call, so that the
    index arrays and what a call gathers and expands stay within the tile's operands'
    part of the memory plan (:mod:`.memory`: at least 12 bytes per entry of a tile's
    rows of A and columns of B) however many entries the bound left: the exact path
    holds about 48 bytes per inner entry of each row and column it takes (float64
    rows, four int64 digits; :mod:`.exactdot`). The compiled Dot2 path reads an operand
    that is a C-contiguous NumPy array in place, and gathers the other one strip by
    strip (a quarter of the tile's rows or columns, all the entries of the strip),
    each row once with its scale (:class:`.exactdot.Rows`): not once per quarter tile
    and call. Each entry is correctly rounded on its own: the order and grouping
    change no bit."""
    from . import exactdot

    rows, cols = ok.shape
    mt, pt = tiles or (rows, cols)
    mt, pt = -(-mt // 4), -(-pt // 4)
    i0, j0 = offset
    ii, jj = xp.nonzero(~ok)
    if ii.size == 0:
        return 0
    ii = to_numpy(ii).astype(np.int64)
    jj = to_numpy(jj).astype(np.int64)
    count = int(ii.size)
    ker = exactdot._kernels()
    if ker is None or a.shape[1] > (1 << 17):  # the quarter tiles one call at a time
        for q in _quarters(ii, jj, mt, pt):
            for e0 in range(0, q.size, RECOMPUTE_ENTRIES):
                sel = q[e0:e0 + RECOMPUTE_ENTRIES]
                recompute(xp, c, a, bt, ii[sel] + i0, jj[sel] + j0, threads, scratch)
        return count
    # strips across the operand that is gathered (B^T's rows: the columns of a row-major B)
    by_rows = exactdot.in_place(bt) and not exactdot.in_place(a)
    outer, inner = (ii, jj) if by_rows else (jj, ii)
    ox, ix = (a, bt) if by_rows else (bt, a)
    oo, io = (i0, j0) if by_rows else (j0, i0)
    ow, iw = (mt, pt) if by_rows else (pt, mt)
    whole_o = _whole(xp, ox, outer + oo, scratch, threads)
    whole_i = _whole(xp, ix, inner + io, scratch, threads)
    order = np.lexsort((inner, outer // ow))
    strip = outer[order] // ow
    cuts = np.flatnonzero(np.diff(strip)) + 1
    for ent in np.split(order, cuts):
        o_idx = outer[ent] + oo
        po = whole_o or exactdot.Rows(xp, ox, np.unique(o_idx), scratch, threads)
        sub = inner[ent] // iw
        for q in np.split(ent[np.argsort(sub, kind="stable")],
                          np.flatnonzero(np.diff(np.sort(sub))) + 1):
            i_idx = inner[q] + io
            pi = whole_i or exactdot.Rows(xp, ix, np.unique(i_idx), scratch, threads)
            prep = (pi, po) if not by_rows else (po, pi)
            for e0 in range(0, q.size, RECOMPUTE_ENTRIES):
                sel = q[e0:e0 + RECOMPUTE_ENTRIES]
                recompute(xp, c, a, bt, ii[sel] + i0, jj[sel] + j0, threads, scratch,
                          prep)
            del pi
        del po
    return count


def _whole(xp, x, idx, scratch, threads):
    """:class:`.exactdot.Rows` of the whole ``x`` read in place where it can be and the
    entries take at least half of its rows (their scales: one pass over ``x``), else
    None (gathered strip by strip)."""
    from . import exactdot

    if not exactdot.in_place(x) or 2 * np.unique(idx).size < x.shape[0]:
        return None
    return exactdot.Rows(xp, x, None, scratch, threads)


def _quarters(ii, jj, mt, pt):
    """Index arrays of the entries ``(ii, jj)`` per block of ``mt`` rows and ``pt``
    columns, block row by block row."""
    key = (ii // mt) * (int(jj.max()) // pt + 1) + jj // pt
    order = np.lexsort((jj, ii, key))
    return np.split(order, np.flatnonzero(np.diff(key[order])) + 1)


#: Sampled rows (and columns) of the faithful counts' predictions
#: (:func:`ozlinalg.ozaki.crt.certify.faithful_moduli`,
#: :func:`ozlinalg.ozaki.gemm.predicted_slices`).
SAMPLE = 32
#: Samples above the prediction's threshold below which the tail is extrapolated.
_TAIL = 16
#: Products (m p k) from which faithful mode's automatic counts are predicted; smaller
#: ones take :data:`EXTRA_SLICES` / :data:`EXTRA_MODULI` more.
PREDICT_MIN_SIZE = 1 << 27


def sample_indices(n, count=None):
    """``count`` (default :data:`SAMPLE`) indices spread evenly over ``range(n)`` (all of
    them for small n): the rows and columns of the faithful counts' predictions."""
    count = SAMPLE if count is None else count
    if n <= count:
        return np.arange(n, dtype=np.int64)
    return ((np.arange(count) + 0.5) * (n / count)).astype(np.int64)


def predicted_uncertified(rho, ts):
    """The uncertified fractions predicted for the thresholds ``ts`` from the sampled
    ratios ``rho`` (bound over gap at the largest count: an entry is not certified at a
    count whose bound is ``1 / t`` times larger where ``rho >= t``): the sampled
    fraction where at least ``_TAIL`` samples reach ``t``, else the tail extrapolated
    as ``P(rho >= t) ~ 1 / t`` from the ``_TAIL``-th largest ratio (the entries'
    magnitudes have a density near zero: an entry is left when it is below a
    threshold proportional to its bound)."""
    r = np.sort(rho.ravel())[::-1]
    n = max(r.size, 1)
    out = []
    for t in ts:
        hits = int(np.count_nonzero(r >= t))
        if hits >= _TAIL or r.size < _TAIL:
            out.append(hits / n)
        else:
            lam = float(r[_TAIL - 1])
            out.append(_TAIL / n * (lam / t) if lam > 0 else 0.0)
    return out


def faithful_slices(s_auto, max_slices):
    """The faithful count for ``slices="auto"``: :data:`EXTRA_SLICES` more, within the
    hard limit of 64."""
    return int(min(s_auto + EXTRA_SLICES, max(max_slices, s_auto + EXTRA_SLICES), 64))

