"""Decisions that do not depend on the engine: counts and native entries from estimates.

``slices="auto"`` (Ozaki-I) and ``moduli="auto"`` (Ozaki-II) decide from the
magnitudes ``q_ij = sum_k x_ik**2 y_jk**2`` of the normalized operands. The
engines estimate them with fast, inexact GEMMs (float32 SGEMM on the CPU,
BF16 with FP32 accumulation in oneDNN and on GPU tensor cores), whose
rounding depends on the engine, its blocking and its thread count. Read
naively, an entry whose estimate sits next to a threshold could then pick
another count on another engine, and the product would differ in its last
bits.

So the decision is defined on the EXACT quantities, as a function of the
inputs alone:

* each entry has ``r_ij = q_ij w_ij`` (``w = 1`` for Ozaki-I; Ozaki-II divides by
  the square of its predicted error ``num_ij``, a float computed by the same
  IEEE operations everywhere);
* entries with ``0 < r_ij < T_cap`` are computed natively (exactly, in faithful
  mode), entries with ``q_ij = 0`` are structural zeros when no term
  ``a_ik b_kj`` is nonzero and native otherwise (the normalization flushed their
  terms);
* the count is the smallest ``n`` with ``min r_ij >= T_n`` over the other
  entries, for decreasing thresholds ``T_1 > T_2 > ... > T_cap``.

and computed from the estimates with a rigorous error bound: every estimate
obeys ``|q_est - q| <= EST_REL q + k EST_ABS`` (:data:`EST_REL`: a BF16 input
rounding of 2**-8 per operand and an FP32 sum of at most 2**17 nonnegative
terms give at most 2**-6.9; 2**-4 leaves room for accumulation hardware that
rounds toward zero; :data:`EST_ABS` covers products flushed to zero). Each
entry's interval either decides it or, for the few entries within that bound
of a threshold, the entry is evaluated again on the host: first in float64
(relative error below ``(k + 8) 2**-52``), then, if still undecided, exactly
with Python integers. Every engine, tiling and thread count thus reaches the
same decision (tests/ozaki/test_reproducible.py perturbs the estimates within the
bound and checks it).

Ozaki-II's accurate scaling has a cheaper route to the same decision: its bound
products W give a rigorous lower bound of every ``r_ij`` with no further GEMM, and
when that bound and float64 upper bounds of a few entries fall between the same two
thresholds, the count is decided (:meth:`CountPlan.decide_from_lower`,
:func:`ozlinalg.ozaki.counts.moduli._bound_decision`); otherwise the estimates decide.

The thresholds come from the calibrated rules, whose constants their callers pass
(:class:`SliceRule` from :mod:`.auto`, :class:`ModuliRule` from :mod:`.crt`; how
each was measured: docs/calibration.md), and are computed in decimal arithmetic
(``decimal``: correctly rounded logarithms and exponentials), so they are the same
floats on every machine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import cache

import numpy as np

from ..._array import fp_errstate, row_blocks, to_numpy
from ..passes import generic, passes_for
from ..split import normalize_rows

__all__ = ["EST_ABS", "EST_REL", "CountPlan", "ModuliRule", "Operands", "SliceRule",
           "abs_sum_upper", "dec_log2", "estimate", "moduli_table", "robust_floor",
           "slice_table", "sq_norm_from_sums", "sq_norm_upper"]

#: Relative error bound of every engine's magnitude estimate (see module doc).
EST_REL = 2.0**-4
#: Absolute error bound per unit of inner length (products flushed to zero:
#: FP32 / BF16 subnormals, the 2**96 prescale of ``Engine.approx_operand``).
EST_ABS = 2.0**-190
#: Relative slack for the rounding of the interval arithmetic itself.
_SLACK = 2.0**-40
#: At most this many entries are refined entry by entry; more go through float64 GEMMs
#: of the rows and columns involved.
_GATHER_MAX = 4096
#: Bytes the host-side re-evaluation (:class:`Operands`) gathers at once: the rows of A
#: and B^T it takes, their normalized copies and squares, a block of ``q``. A constant,
#: so the chunks (and the values) do not depend on ``memory_limit``, and small: it is
#: part of the memory bound's fixed allowance (:mod:`ozlinalg.ozaki.memory`), whatever
#: the inner dimension.
_GATHER_BYTES = 1 << 20


def _entry_chunk(k):
    """Entries re-evaluated together entry by entry: about 56 bytes per inner entry of
    each (two gathered rows, their normalized copies, the squares' temporaries)."""
    return int(max(1, min(256, _GATHER_BYTES // (56 * max(int(k), 1)))))


def _block_side(k):
    """Rows (and columns) of one block of the many-entries GEMMs: about 32 bytes per
    inner entry of each, and the block of ``q`` at most a quarter of the budget."""
    return int(max(1, min(181, _GATHER_BYTES // (64 * max(int(k), 1)))))


def _blockwise(I, J, side, block):
    """``block(ui, uj)`` (a ``len(ui) x len(uj)`` host array for the distinct rows ``ui``
    and columns ``uj``) evaluated over blocks of ``side`` rows and columns, read at the
    entries ``(I, J)``: no more than one block's rows, columns and values at once."""
    ui, inv_i = np.unique(I, return_inverse=True)
    uj, inv_j = np.unique(J, return_inverse=True)
    bi, bj = inv_i // side, inv_j // side
    order = np.lexsort((bj, bi))
    key = bi[order] * (int(bj.max(initial=0)) + 1) + bj[order]
    cuts = np.flatnonzero(np.diff(key)) + 1
    out = None
    for grp in np.split(order, cuts):
        r0, c0 = int(bi[grp[0]]) * side, int(bj[grp[0]]) * side
        vals = block(ui[r0:r0 + side], uj[c0:c0 + side])
        if out is None:
            out = np.empty(I.size, vals.dtype)
        out[grp] = vals[inv_i[grp] - r0, inv_j[grp] - c0]
    return out if out is not None else np.empty(0)


# -- thresholds, in decimal arithmetic --------------------------------------------------


def dec_log2(x) -> Decimal:
    """log2 of a positive int / float / Decimal to 50 digits (correctly rounded ``ln``)."""
    with localcontext() as ctx:
        ctx.prec = 60
        return Decimal(x).ln() / Decimal(2).ln()


def _pow2(x: Decimal) -> float:
    """``2**x`` as the float nearest to its 60-digit decimal value (inf / 0 at the ends)."""
    with localcontext() as ctx:
        ctx.prec = 60
        if x > 1100:
            return math.inf
        if x < -1200:
            return 0.0
        return float((x * Decimal(2).ln()).exp())


@dataclass(frozen=True)
class SliceRule:
    """The constants of ``slices="auto"``'s count rule (Ozaki-I), owned by its caller
    (:data:`ozlinalg.ozaki.counts.slices.SLICE_RULE`): ``s`` slices of ``w`` bits serve a spread
    ``rho`` when ``w s - log2(s) / 2 - fp64_bits - safety - small >= rho_slope rho +
    high_slope max(0, rho - rho_knee)``, ``small`` the extra bits of outputs below
    ``small_output`` entries.

    Attributes
    ----------
    fp64_bits : int
    safety_bits : tuple of (str, float)
        The offset per split kind (pairs, so the rule is hashable).
    rho_slope, rho_knee, high_slope : float
    small_output : int
    """

    fp64_bits: int
    safety_bits: tuple
    rho_slope: float
    rho_knee: float
    high_slope: float
    small_output: int


@dataclass(frozen=True)
class ModuliRule:
    """The constants of ``moduli="auto"``'s count rule (Ozaki-II), owned by its caller
    (:data:`ozlinalg.ozaki.crt.MODULI_RULE`): ``N`` moduli of product ``P_N`` serve a
    spread ``rho`` when ``(log2 P_N - log2 P_ref) / 2 - offset >= rho_slope (rho + 53) +
    high_slope max(0, rho - rho_knee)``.

    Attributes
    ----------
    rho_slope, rho_knee, high_slope : float
    offset_bits : tuple of (str, float)
        The offset per scaling (pairs, so the rule is hashable).
    """

    rho_slope: float
    rho_knee: float
    high_slope: float
    offset_bits: tuple


@cache
def slice_table(rule, split, width, max_slices, outputs):
    """``(Q_1, ..., Q_max)``: ``s`` slices serve the entries with ``q >= Q_s``
    (the criterion of ``rule``, a :class:`SliceRule`, read as a threshold on
    ``q = 2**(-2 rho)``; ``inf`` where ``s`` slices do not serve even ``rho = 0``)."""
    with localcontext() as ctx:
        ctx.prec = 60
        small = max(Decimal(0), dec_log2(Decimal(rule.small_output) / max(int(outputs), 1)) / 2)
        slope, high = Decimal(repr(rule.rho_slope)), Decimal(repr(rule.high_slope))
        knee = Decimal(repr(rule.rho_knee))
        safety = Decimal(repr(dict(rule.safety_bits)[split]))
        out = []
        for s in range(1, int(max_slices) + 1):
            avail = (Decimal(width * s) - dec_log2(s) / 2 - rule.fp64_bits - safety - small)
            if avail < 0:
                out.append(math.inf)
                continue
            cap = avail / slope if avail <= slope * knee else knee + (avail - slope * knee) / (
                slope + high)
            out.append(_pow2(-2 * cap))
    return tuple(out)


@cache
def moduli_table(rule, scaling, products, log2p_ref):
    """``(R_1, ..., R_max)``: ``N`` moduli serve the entries with ``q / num**2 >= R_N``
    (the criterion of ``rule``, a :class:`ModuliRule`, read as a threshold on
    ``2**(-2 rho)``); ``products``: the moduli products ``P_1, ..., P_max`` (ints)."""
    with localcontext() as ctx:
        ctx.prec = 60
        slope, high = Decimal(repr(rule.rho_slope)), Decimal(repr(rule.high_slope))
        knee = Decimal(repr(rule.rho_knee))
        off = Decimal(repr(dict(rule.offset_bits)[scaling]))
        ref = Decimal(repr(float(log2p_ref)))
        out = []
        for prod in products:
            d = (dec_log2(prod) - ref) / 2 - off
            kslope = slope * (knee + 53)
            cap = d / slope - 53 if d <= kslope else knee + (d - kslope) / (slope + high)
            out.append(_pow2(-2 * cap))
    return tuple(out)


# -- deterministic row statistics -----------------------------------------------------


def _fixed_sum(xp, v):
    """``sum ceil(v * 2**40) * 2**-40`` along rows, exactly (int64; any order gives the
    same integer), for nonnegative ``v <= 1`` and rows of at most 2**17 entries."""
    q = xp.ceil(v * 2.0**40).astype(xp.int64)
    return q.sum(axis=1).astype(xp.float64) * 2.0**-40


def _fixed_sums(xp, x, square, engine):
    """:func:`_fixed_sum` of ``x**2`` or ``|x|`` per row (normalized rows), fused where the
    engine has the pass (the same floats: exact integer sums)."""
    return passes_for(engine, xp).fixed_sums(x, square)


@generic("fixed_sums")
def fixed_sums_generic(xp, x, square):
    """:func:`_fixed_sums` as array code (the engines' fused pass gives its floats)."""
    out = xp.zeros(x.shape[0])
    for r0, r1 in row_blocks(*x.shape, target=1 << 20):
        xb = x[r0:r1]
        out[r0:r1] = _fixed_sum(xp, xb * xb if square else xp.abs(xb))
    return out


def abs_sum_upper(xp, x, engine=None):
    """Upper bound of ``sum_k |x_ik|`` for normalized rows (entries at most 1), the same
    float on every engine (fixed-point sum, relative excess below 2**-22)."""
    if x.shape[1] == 0:
        return xp.zeros(x.shape[0])
    return _fixed_sums(xp, x, False, engine)


def sq_norm_upper(xp, x, engine=None):
    """Upper bound of the row 2-norms of normalized rows, the same float on every engine:
    ``sqrt`` of the fixed-point sum of the squares, times ``1 + 2**-30``."""
    if x.shape[1] == 0:
        return xp.zeros(x.shape[0])
    return sq_norm_from_sums(xp, _fixed_sums(xp, x, True, engine), x.shape[1])


def sq_norm_from_sums(xp, fsq, k):
    """:func:`sq_norm_upper` from the rows' fixed-point sums of squares ``fsq`` (rows of
    ``k`` entries; an engine's ``row_stats`` takes them from the raw rows)."""
    if k == 0:
        return xp.zeros(fsq.shape[0])
    return xp.sqrt(fsq * (1.0 + 2.0**-50)) * (1.0 + 2.0**-30)


def robust_floor(xp, h, v, div=1):
    """``floor((h - log2 v) / div)`` for positive float64 ``v`` (array) and a float ``h``,
    exactly: the float log2 decides wherever it is clear, Decimal arithmetic where the
    value is within 2**-20 of an integer (libm and CUDA log2 differ in the last bit)."""
    with fp_errstate(xp, divide="ignore"):
        t = (h - xp.log2(v)) / div
    f = xp.floor(t)
    near = xp.minimum(t - f, f + 1 - t) < 2.0**-20
    if not bool(near.any()):
        return f
    idx = to_numpy(xp.nonzero(near)[0])
    vals = to_numpy(v)[idx]
    fixed = np.empty(idx.size)
    for n, val in enumerate(vals.tolist()):
        mant, e = math.frexp(val)
        if mant == 0.5:  # a power of two: log2 is an integer, exactly
            lg = Decimal(e - 1)
        else:
            lg = dec_log2(val)
        with localcontext() as ctx:
            ctx.prec = 60
            fixed[n] = float(((Decimal(repr(float(h))) - lg) / div).to_integral_value(
                rounding="ROUND_FLOOR"))
    f = f.copy()
    f[xp.asarray(idx)] = xp.asarray(fixed)
    return f


# -- estimates ------------------------------------------------------------------------


def estimate(xp, engine, xa, xb):
    """``(q_est, scale)``: ``q_est / scale`` estimates ``(X**2) @ (Y**2)^T`` within
    ``EST_REL q + k EST_ABS`` (the engine's fastest form: a scaled float32 BF16 result
    on the oneDNN engine, float64 elsewhere: :mod:`ozlinalg.ozaki.passes`)."""
    return passes_for(engine, xp).estimate(xa, xb)


@generic("square_estimate")
def square_estimate_generic(engine, xa, xb):
    """float64 estimate of ``(xa**2) @ (xb**2).T``: the engine's ``approx_matmul`` of the
    squares (the generic form of its fused ``approx_squares``)."""
    return engine.approx_matmul(xa * xa, xb * xb)


class Operands:
    """Rows of A and of B^T (original, before normalization) for the host-side
    re-evaluation of the few entries an estimate cannot decide."""

    def __init__(self, xp, a, bt):
        self.xp, self.a, self.bt = xp, a, bt
        self.k = a.shape[1]

    def _rows(self, which, idx):
        src = self.a if which == "a" else self.bt
        return src[self.xp.asarray(idx)]

    def pattern(self, I, J):
        """True where some term ``a_ik b_kj`` is nonzero (exact counts: entry by entry,
        or one float32 GEMM of the patterns for many entries)."""
        xp = self.xp
        I = np.asarray(I)
        J = np.asarray(J)
        if I.size > _GATHER_MAX:
            def block(ui, uj):
                pa = (self._rows("a", ui) != 0).astype(xp.float32)
                pb = (self._rows("b", uj) != 0).astype(xp.float32)
                return to_numpy(xp.matmul(pa, pb.T))

            return _blockwise(I, J, _block_side(self.k), block) > 0
        out = np.zeros(I.size, bool)
        step = _entry_chunk(self.k)
        for c0 in range(0, I.size, step):
            ai = self._rows("a", I[c0:c0 + step]) != 0
            bj = self._rows("b", J[c0:c0 + step]) != 0
            out[c0:c0 + step] = to_numpy((ai & bj).any(axis=1))
        return out

    def tight(self, I, J):
        """``(lo, hi)`` of ``q`` in float64: relative ``(k + 8) 2**-52`` and absolute
        ``8 (k + 4) 2**-1074`` (gradual underflow) around a float64 evaluation."""
        xp = self.xp
        I = np.asarray(I)
        J = np.asarray(J)
        if I.size <= _GATHER_MAX:
            q = np.empty(I.size)
            step = _entry_chunk(self.k)
            for c0 in range(0, I.size, step):
                xa, _ = normalize_rows(xp, self._rows("a", I[c0:c0 + step]))
                xb, _ = normalize_rows(xp, self._rows("b", J[c0:c0 + step]))
                with fp_errstate(xp, under="ignore"):
                    q[c0:c0 + step] = to_numpy(((xa * xa) * (xb * xb)).sum(axis=1))
        else:
            def block(ui, uj):
                xa, _ = normalize_rows(xp, self._rows("a", ui))
                xb, _ = normalize_rows(xp, self._rows("b", uj))
                with fp_errstate(xp, under="ignore"):
                    return to_numpy(xp.matmul(xa * xa, (xb * xb).T))

            q = _blockwise(I, J, _block_side(self.k), block)
        rel = (self.k + 8) * 2.0**-52
        absf = 8.0 * (self.k + 4) * 2.0**-1074
        with np.errstate(under="ignore"):
            lo = np.maximum(q - absf, 0.0) / (1.0 + rel) * (1.0 - _SLACK)
            hi = (q + absf) / (1.0 - rel) * (1.0 + _SLACK) + absf
        return lo, hi

    def exact(self, I, J):
        """``q`` exactly (Fractions), from the normalized rows' significands."""
        xp = self.xp
        out = []
        step = _entry_chunk(self.k)
        for c0 in range(0, len(I), step):
            xa, _ = normalize_rows(xp, self._rows("a", I[c0:c0 + step]))
            xb, _ = normalize_rows(xp, self._rows("b", J[c0:c0 + step]))
            xa, xb = to_numpy(xa), to_numpy(xb)
            for r in range(xa.shape[0]):
                out.append(_exact_sq_dot(xa[r], xb[r]))
        return out


def _exact_sq_dot(x, y):
    """``sum x_k**2 y_k**2`` as a Fraction (float64 inputs, exactly)."""
    mx, ex = np.frexp(x)
    my, ey = np.frexp(y)
    total = Fraction(0)
    nz = (mx != 0) & (my != 0)
    if not nz.any():
        return total
    ix = (mx[nz] * 2.0**53).astype(np.int64).tolist()
    iy = (my[nz] * 2.0**53).astype(np.int64).tolist()
    sh = (2 * (ex[nz].astype(np.int64) + ey[nz].astype(np.int64) - 106)).tolist()
    low = min(sh)
    acc = 0
    for p, q, s in zip(ix, iy, sh):
        acc += (p * p * q * q) << (s - low)
    return Fraction(acc) * Fraction(2) ** low


# -- the decision ---------------------------------------------------------------------


class CountPlan:
    """Collects the tiles of a product and decides count and native entries exactly.

    ``thresholds``: decreasing floats ``T_1 > ... > T_N`` (``inf`` allowed); the
    last is the cap below which entries go native. ``weights``: None (Ozaki-I,
    ``r = q``) or a callable ``weights(I, J) -> num`` giving the per-entry divisor
    ``num`` of Ozaki-II (``r = q / num**2``) for global entry indices.
    """

    def __init__(self, xp, thresholds, operands, weights=None):
        self.xp = xp
        self.T = tuple(float(t) for t in thresholds)
        self.cap = self.T[-1]
        self.ops = operands
        self.weights = weights
        self.natives = {}  # tile key -> bool mask (sure natives; resolved ones added)
        self.shapes = {}
        self.L = math.inf  # min lower bound of r over kept entries
        self.H = math.inf  # min upper bound
        self.cands = []  # (I, J, lo, hi) of kept entries with lo < the tile's H
        self.amb = []  # (key, i0, j0, I, J): r undecided against the cap / q unknown

    # ---- per tile

    def add_tile(self, key, i0, j0, q, scale, num=None, engine=None):
        """Classify one tile's estimate ``q / scale`` (rows ``i0..``, columns ``j0..``);
        ``num``: Ozaki-II's divisor for the tile's entries, as ``(ia, nb, na, ib)``
        vectors (``num_ij = ia_i nb_j + na_i ib_j``); ``engine``: one with a fused
        ``classify_estimate`` pass (same bounds, one pass)."""
        m, p = q.shape
        self.shapes[key] = (m, p)
        if m == 0 or p == 0:
            return
        consts = (1.0 / scale, self.ops.k * EST_ABS, (1.0 - _SLACK) / (1.0 + EST_REL),
                  (1.0 + _SLACK) / (1.0 - EST_REL), _SLACK, self.cap)
        passes = passes_for(engine, self.xp)
        classify = passes.classify_estimate  # a route: None where the engine has none
        done = classify(q, consts, num) if classify is not None else None
        if done is not None:
            codes, row_lo, row_hi = done
            if bool((codes == 1).any()):
                self.natives[key] = codes == 1
            amb = codes == 2
            if bool(amb.any()):
                ii, jj = np.nonzero(amb)
                self.amb.append((key, i0, j0, ii, jj))
            tile_L, tile_H = float(row_lo.min()), float(row_hi.min())
            if tile_H < math.inf:
                below = passes.kept_below(q, consts, num, codes, tile_H, row_lo)
                rows = np.flatnonzero(row_lo < tile_H)  # the only rows with candidates
                ii, jj = np.nonzero(below[rows])
                self._candidates(q, consts, num, i0, j0, rows[ii], jj)
        else:
            tile_L, tile_H = self._classify(key, i0, j0, q, consts, num)
        if tile_H < math.inf:
            self.L = min(self.L, tile_L)
            self.H = min(self.H, tile_H)

    def _classify(self, key, i0, j0, q, consts, num):
        """The generic form of the engines' ``classify_estimate`` (row blocks)."""
        xp = self.xp
        m, p = q.shape
        cap = self.cap
        native = None
        blocks = row_blocks(m, p)
        tile_L, tile_H = math.inf, math.inf
        for r0, r1 in blocks:
            w, lo, hi = _interval(xp, q[r0:r1], consts, _block_num(num, r0, r1))
            unsure = (w <= 0) | (lo <= 0)
            nat = (hi < cap) & ~unsure
            amb = (lo < cap) & ~nat | unsure
            kept = ~(nat | amb)
            if bool(nat.any()):
                if native is None:
                    native = xp.zeros((m, p), dtype=bool)
                native[r0:r1] = nat
            if bool(kept.any()):
                tile_L = min(tile_L, float(lo[kept].min()))
                tile_H = min(tile_H, float(hi[kept].min()))
            if bool(amb.any()):
                ii, jj = xp.nonzero(amb)
                self.amb.append((key, i0, j0, to_numpy(ii) + r0, to_numpy(jj)))
        if native is not None:
            self.natives[key] = native
        if tile_H < math.inf:
            for r0, r1 in blocks:
                w, lo, hi = _interval(xp, q[r0:r1], consts, _block_num(num, r0, r1))
                c = (lo < tile_H) & (lo >= cap) & (w > 0) & (lo > 0)
                if bool(c.any()):
                    ii, jj = xp.nonzero(c)
                    self._candidates(q, consts, num, i0, j0, to_numpy(ii) + r0,
                                     to_numpy(jj))
        return tile_L, tile_H

    def _candidates(self, q, consts, num, i0, j0, ii, jj):
        """Record kept entries (tile indices ``ii``, ``jj``) that may hold the smallest r."""
        if ii.size == 0:
            return
        xp = self.xp
        iid, jjd = xp.asarray(ii), xp.asarray(jj)
        sub = None if num is None else tuple(v[ix] for v, ix in zip(num, (iid, jjd, iid, jjd)))
        _, lo, hi = _interval(xp, q[iid, jjd], consts, sub, outer=False)
        self.cands.append((ii + i0, jj + j0, to_numpy(lo), to_numpy(hi)))

    # ---- resolution

    def _r_bounds(self, I, J, lo_q, hi_q):
        if self.weights is None:
            return lo_q, hi_q
        n = to_numpy(self.weights(I, J))
        d = n * n
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            bad = ~((d > 0) & (d < np.inf))
            return (np.where(bad, 0.0, lo_q / d * (1.0 - _SLACK)),
                    np.where(bad, np.inf, hi_q / d * (1.0 + _SLACK)))

    def _r_exact(self, I, J):
        qs = self.ops.exact(I, J)
        if self.weights is None:
            return qs
        n = to_numpy(self.weights(I, J))
        return [q / (Fraction(float(v)) ** 2) for q, v in zip(qs, n.tolist())]

    def _bucket(self, v):
        """Smallest index n with ``v >= T_n`` (len(T) if none)."""
        for n, t in enumerate(self.T):
            if v >= t:
                return n
        return len(self.T)

    def _exact_bucket(self, r):
        for n, t in enumerate(self.T):
            if t != math.inf and r >= Fraction(t):
                return n
        return len(self.T)

    def decide_from_lower(self, low, rows, cols):
        """The count index when ``low`` bounds every entry's ``r`` from below, or None.

        For a caller holding a rigorous lower bound of all the ``r_ij`` (the accurate
        scaling's bound products, :func:`ozlinalg.ozaki.counts.moduli._bound_decision`) and the
        entries ``(rows, cols)`` most likely to hold the smallest: ``low >= cap``
        leaves no entry native and none a structural zero, and the float64 bounds of
        those entries give ``min r <= H``; the threshold interval holding both ``low``
        and ``H`` holds ``min r``, the index :meth:`finish` would return. None when
        ``low`` is below the cap or a threshold lies between them (the caller falls
        back to the estimates)."""
        if not (low >= self.cap and low > 0) or len(rows) == 0:
            return None
        rows, cols = np.asarray(rows), np.asarray(cols)
        _, hi = self._r_bounds(rows, cols, *self.ops.tight(rows, cols))
        high = float(hi.min())
        if self._bucket(high) != self._bucket(low):
            return None
        self.L, self.H = low, high
        return self._bucket(low)

    def finish(self):
        """``(n, natives)``: ``n`` the index of the count (0-based into the thresholds), or
        ``None`` when no entry is kept (``natives`` non-empty: every entry native;
        empty: structural zeros only); ``natives`` maps tile keys to masks."""
        xp = self.xp
        kept_extra = []  # (I, J, lo, hi) of resolved kept entries
        any_native = bool(self.natives)
        for key, i0, j0, ii, jj in self.amb:
            I, J = ii + i0, jj + j0
            pat = self.ops.pattern(I, J)
            I, J, ii, jj = I[pat], J[pat], ii[pat], jj[pat]
            if I.size == 0:
                continue
            lo, hi = self._r_bounds(I, J, *self.ops.tight(I, J))
            nat = hi < self.cap
            und = (lo < self.cap) & ~nat
            if bool(und.any()):
                ex = self._r_exact(I[und], J[und])
                nat[und] = np.array([r < Fraction(self.cap) for r in ex])
                rlo = np.array([_lower_float(r) for r in ex])
                rhi = np.array([_upper_float(r) for r in ex])
                lo[und], hi[und] = rlo, rhi
            if bool(nat.any()):
                mask = self.natives.get(key)
                if mask is None:
                    mask = xp.zeros(self.shapes[key], dtype=bool)
                    self.natives[key] = mask
                mask[xp.asarray(ii[nat]), xp.asarray(jj[nat])] = True
                any_native = True
            keep = ~nat
            if bool(keep.any()):
                kept_extra.append((I[keep], J[keep], lo[keep], hi[keep]))
                self.L = min(self.L, float(lo[keep].min()))
                self.H = min(self.H, float(hi[keep].min()))
        if self.H == math.inf:  # nothing kept
            return None, (self.natives if any_native else {})
        b_lo, b_hi = self._bucket(self.H), self._bucket(self.L)
        if b_lo == b_hi:
            return b_lo, self.natives
        # Some threshold lies between the bounds of the smallest r: the entries that
        # may be the smallest decide, first in float64, then exactly.
        parts = [c for c in self.cands + kept_extra]
        I = np.concatenate([c[0] for c in parts])
        J = np.concatenate([c[1] for c in parts])
        lo = np.concatenate([c[2] for c in parts])
        sel = lo <= self.H
        I, J = I[sel], J[sel]
        lo, hi = self._r_bounds(I, J, *self.ops.tight(I, J))
        H = float(hi.min())
        if self._bucket(H) == self._bucket(float(lo.min())):
            return self._bucket(H), self.natives
        sel = lo <= H
        ex = self._r_exact(I[sel], J[sel])
        return self._exact_bucket(min(ex)), self.natives


def _block_num(num, r0, r1):
    return None if num is None else (num[0][r0:r1], num[1], num[2][r0:r1], num[3])


def _interval(xp, q, consts, num, outer=True):
    """``(w, lo, hi)``: the estimate ``w = q * inv`` and bounds of ``r = q_exact / num**2``
    (``consts`` as in :meth:`CountPlan.add_tile`; ``num`` the vectors ``(ia, nb, na,
    ib)``, combined as an outer sum for a block (``outer``) or entry by entry)."""
    inv, absf, c_lo, c_hi, slack, _ = consts
    w = q.astype(xp.float64) * inv
    with fp_errstate(xp, under="ignore", divide="ignore", invalid="ignore", over="ignore"):
        lo = (w - absf) * c_lo
        hi = (w + absf) * c_hi
        if num is not None:
            ia, nb, na, ib = num
            n = (ia[:, None] * nb[None, :] + na[:, None] * ib[None, :] if outer
                 else ia * nb + na * ib)
            d = n * n
            bad = ~((d > 0) & (d < xp.inf))  # no divisor to bound with: undecided
            lo = xp.where(bad, 0.0, lo / d * (1.0 - slack))
            hi = xp.where(bad, xp.inf, hi / d * (1.0 + slack))
    return w, lo, hi


def _lower_float(r):
    f = float(r)
    return f if Fraction(f) <= r else math.nextafter(f, -math.inf)


def _upper_float(r):
    f = float(r)
    return f if Fraction(f) >= r else math.nextafter(f, math.inf)
