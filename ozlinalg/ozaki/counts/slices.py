"""``slices="auto"``: the smallest slice count that reaches DGEMM-level accuracy.

What decides it
---------------
Rows of A and columns of B are first normalized by powers of two
(``max |x_i| in [0.5, 1)``, see :func:`..split.normalize_rows`). After s
slices of w bits every residual is below ``2**(-w s)`` and each product skipped
by the triangular rule (``i + j > s + 1``) is bounded by the same quantity, so
the emulation's error in ``C_ij`` is at most about

    (s + 1) * 2**(-w s) * 2**(e_i + f_j) * k                  (worst case)
    sqrt(s) * 2**(-w s) * 2**(e_i + f_j) * sqrt(k)            (random signs)

with ``2**e_i``, ``2**f_j`` the power-of-two maxima of row i of A and column j
of B. Native DGEMM's error in the same entry scales with the size of the
terms actually summed, ``sqrt(sum_k a_ik**2 b_kj**2)``. The ratio of the two is
the *exponent spread* of the pair, and its worst case over the matrix is

    rho = max_ij log2( 2**(e_i + f_j) / sqrt(sum_k a_ik**2 b_kj**2) )
        = max_ij -0.5 * log2( (X**2 @ Y**2)_ij )

(X, Y the normalized A and B^T), computed with ONE float32 GEMM of the
squared normalized operands (BF16 tensor cores on a GPU: a few bits are
enough). Entries whose terms are all zero are exactly zero and are skipped.
Wide-exponent rows (phi = 4 in the papers' generator) raise rho by up to ~30
bits.

Huge exponent ranges: an entry whose true ``(X**2 @ Y**2)_ij`` is positive but
below float32's range comes out as 0 and would be skipped like a structural
zero although it needs MORE slices (with the inner dimension scaled by
``2**(+-40)`` that gave 9 slices and 100% errors: the silent failure of
adaptive slice counts, docs/accuracy.md "Huge exponent ranges"). So zeros of the estimate are
checked against a GEMM of the nonzero patterns (exact counts); where an entry
is not structurally zero it is recomputed in float64, and where even float64
underflows (rows spanning more than ~500 bits) the entry is lost to the
emulation: it is computed in native FP64 (:func:`plan_slices`), never a silent
guess (:func:`squared_products`).

The count chosen is the smallest s with

    w s - 0.5 log2(s) >= 53 + c_method + 0.85 * rho + 0.15 * max(0, rho - 32)

with the offsets ``c_method`` (1.5 bits for the round-to-nearest splits, 3.5 for
truncation, which wastes leading bits) and the slope 0.85, below the model's 1
because the entry with the worst spread is rarely the entry with the worst
cancellation, which decides the max relative error. Above ``rho = 32`` (beyond the
papers' inputs: such spreads are structural, shared by every entry) the slope is
the model's 1. Small outputs need a little more: the max relative error is a
maximum over the m p entries, and native DGEMM's is smaller when there are few of
them, so outputs of fewer than 2**14 entries get ``0.5 log2(2**14 / (m p))`` extra
bits (4 bits for 8 x 8, 7 bits for 1 x 1): one more slice at most. The constants
are measured: what measured each, and the runs, are in docs/calibration.md.

What it guarantees
------------------
Measured, not proven: on the papers' test families (and the adversarial
families of the test suite) the max relative error against the exact product
is at or below native DGEMM's. The deterministic part is the bound above: with
the chosen s each entry's error is below ``(s+1) 2**(-w s) k 2**(e_i+f_j)``.
Entries whose spread needs more than ``max_slices`` slices (or whose
magnitude even float64 loses) are computed in native FP64 by the driver
(:func:`plan_slices`); the count is chosen for the others.
:func:`choose_slices` alone, asked for more than ``max_slices``, returns
``max_slices`` with an :class:`~ozlinalg.AccuracyWarning`. The cost is one
float32 GEMM (on the CPU about 1/s**2 of the emulation's INT8 work), two more
(a pattern count and a float64 GEMM) only when the first underflows.
"""
from __future__ import annotations

import math
import warnings
from functools import cache

from ..._exceptions import AccuracyWarning
from ..passes import passes_for
from .estimate import CountPlan, Operands, SliceRule, estimate, slice_table

__all__ = ["choose_slices", "HIGH_SLOPE", "plan_auto", "plan_slices", "rho_capacity", "RHO_KNEE",
           "RHO_SLOPE", "SAFETY_BITS", "SLICE_RULE", "slice_thresholds", "spread_bits",
           "squared_products"]

#: Offset per split kind, in bits (measured: docs/calibration.md).
SAFETY_BITS = {"bitmask": 3.5, "rn": 1.5, "hybrid": 1.5, "fp": 1.5}

#: Weight of the exponent spread rho (measured: docs/calibration.md).
RHO_SLOPE = 0.85

#: Above this spread (beyond the papers' inputs: phi = 4 reaches ~30 bits) the
#: slope is the model's 1: such spreads are structural (an inner dimension
#: scaled by 2**(+-30) and more), every entry shares them.
RHO_KNEE = 32.0
HIGH_SLOPE = 1.0 - RHO_SLOPE

FP64_BITS = 53

#: Outputs below this count get extra bits (see module doc). 2**16 gave 3 bits to a
#: 32 x 32 output, and two slices over the needed count on some phi = 4 inputs there;
#: 2**14 picks fewer over on both calibration grids with no more under-picks
#: (docs/calibration.md).
SMALL_OUTPUT = 1 << 14

#: The constants above, as :mod:`.decide` takes them.
SLICE_RULE = SliceRule(fp64_bits=FP64_BITS, safety_bits=tuple(SAFETY_BITS.items()),
                       rho_slope=RHO_SLOPE, rho_knee=RHO_KNEE, high_slope=HIGH_SLOPE,
                       small_output=SMALL_OUTPUT)


@cache
def slice_thresholds(split, width, max_slices, outputs):
    """``(Q_1, ..., Q_max)``: ``s`` slices serve the entries with ``q >= Q_s``
    (:func:`choose_slices`' criterion read as a threshold on ``q = 2**(-2 rho)``;
    ``inf`` where ``s`` slices do not serve even ``rho = 0``; :func:`.decide.slice_table`)."""
    return slice_table(SLICE_RULE, split, width, max_slices, outputs)


def squared_products(xp, engine, xa, xb, a=None, b=None):
    """``Q = (X**2) @ (Y**2)^T`` to a few bits, no entry lost to underflow.

    Returns ``(q, lost)``: ``q`` (float32 or float64) is positive wherever some
    term ``x_ik y_jk`` is nonzero, except where even float64 underflows: those
    entries are ``lost``, a boolean mask (``None`` when there are none). One fast
    GEMM (``engine.approx_matmul`` of the squares: the engine scales them in
    float64 before its float32 cast, so that a flush-to-zero GPU and the CPU
    see the same numbers); if it has zeros, one
    more of the nonzero patterns (exact counts) tells structural zeros from
    underflow, and only then a float64 GEMM
    recomputes the underflowed entries. ``a``, ``b``: the operands before
    normalization (rows of ``b`` as for ``xb``), whose patterns count: an entry
    that normalization itself flushed to zero (a subnormal in a row whose
    maximum is large) is lost, not absent.
    """
    q = passes_for(engine, xp).square_estimate(xa, xb)  # fused: fewer passes
    if q.size == 0 or float(q.min()) > 0:  # one reduction, no full-size temporary
        return q, None
    zero = q <= 0
    pa = xa if a is None else a
    pb = xb if b is None else b
    count = engine.approx_matmul((pa != 0).astype(xp.float32), (pb != 0).astype(xp.float32))
    under = zero & (count > 0)
    if not bool(under.any()):
        return q, None
    q64 = xp.matmul(xa * xa, (xb * xb).T)
    lost = under & (q64 <= 0)
    return xp.where(under, q64, q.astype(xp.float64)), (lost if bool(lost.any()) else None)


def spread_bits(xp, engine, xa, xb, a=None, b=None):
    """``rho = max_ij -0.5 log2((X**2 @ Y**2)_ij)`` over the non-zero entries (0 if none;
    ``inf`` if the range of an entry is beyond float64's, see :func:`squared_products`)."""
    if xa.shape[0] == 0 or xb.shape[0] == 0 or xa.shape[1] == 0:
        return 0.0
    q, lost = squared_products(xp, engine, xa, xb, a, b)
    if lost is not None:
        return math.inf
    pos = q > 0
    if not bool(pos.any()):
        return 0.0
    return max(0.0, -0.5 * math.log2(float(q[pos].min())))


def rho_capacity(split, width, max_slices, outputs=SMALL_OUTPUT):
    """The largest spread ``rho`` that ``max_slices`` slices serve (the inverse of
    :func:`choose_slices`' criterion); ``-inf`` if not even ``rho = 0`` fits."""
    avail = (width * max_slices - 0.5 * math.log2(max_slices) - FP64_BITS - SAFETY_BITS[split]
             - 0.5 * max(0.0, math.log2(SMALL_OUTPUT / max(outputs, 1))))
    if avail < 0:
        return -math.inf
    knee = RHO_SLOPE * RHO_KNEE
    cap = avail / RHO_SLOPE if avail <= knee else RHO_KNEE + (avail - knee) / (RHO_SLOPE
                                                                               + HIGH_SLOPE)
    return cap - 1e-9  # a hair inside, so choose_slices(cap) never tips over


def plan_auto(xp, engine, split, width, tiles, a, bt, max_slices, outputs):
    """``(s, natives)`` of ``slices="auto"`` for a whole product, decided exactly.

    ``tiles`` yields ``(key, i0, j0, xa, xb)``: the normalized rows of each output
    tile's operands (the caller may free them after the next item); ``a``, ``bt``:
    the operands' rows (A, and B^T) before normalization, for the few entries the
    estimate cannot decide (:class:`ozlinalg.ozaki.counts.estimate.CountPlan`: the decision
    is that of the exact ``q_ij``, the same on every engine, tiling and thread
    count). ``natives`` maps tile keys to the boolean masks of the entries no count
    up to ``max_slices`` serves (or whose terms normalization lost): the driver
    computes them natively (exactly, in faithful mode). Every entry native:
    ``s = max_slices`` and all-True masks; structural zeros only: ``s = 1``.
    """
    thr = slice_thresholds(split, width, max_slices, outputs)
    plan = CountPlan(xp, thr, Operands(xp, a, bt))
    for key, i0, j0, xa, xb in tiles:
        q, scale = estimate(xp, engine, xa, xb)
        plan.add_tile(key, i0, j0, q, scale, engine=engine)
        del q
    n, natives = plan.finish()
    if n is None:
        if natives:  # no entry left for the emulation (structural zeros are exact)
            return max_slices, {key: xp.ones(shape, dtype=bool)
                                for key, shape in plan.shapes.items()}
        return 1, {}
    return n + 1, natives


def plan_slices(xp, engine, split, width, xa, xb, a, b, max_slices, outputs):
    """``(s, native)``: :func:`plan_auto` for one tile (``native``: mask or None)."""
    s, natives = plan_auto(xp, engine, split, width, [(0, 0, 0, xa, xb)], a, b, max_slices,
                           outputs)
    return s, natives.get(0)


def choose_slices(split, width, rho, max_slices, outputs=SMALL_OUTPUT):
    """Smallest slice count meeting the calibrated criterion of the module doc."""
    need = FP64_BITS + SAFETY_BITS[split] + RHO_SLOPE * rho + HIGH_SLOPE * max(0.0, rho - RHO_KNEE)
    need += 0.5 * max(0.0, math.log2(SMALL_OUTPUT / max(outputs, 1)))
    for s in range(1, max_slices + 1):
        if width * s - 0.5 * math.log2(s) >= need:
            return s
    warnings.warn(
        f"ozlinalg: slices='auto' needs more than max_slices={max_slices} slices of "
        f"{width} bits for this input (exponent spread {rho:.1f} bits); using "
        f"{max_slices}, so the result may be less accurate than FP64",
        AccuracyWarning,
        stacklevel=5,
    )
    return max_slices
