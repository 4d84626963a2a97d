"""Ozaki scheme II: FP64 products from one exact INT8 GEMM per modulus (CRT).

Ozaki, Uchino & Imamura (2025), GEMMul8 (arXiv 2504.08009). For ``C = A B``
(A is m x k, B is k x p) with pairwise coprime moduli ``p_1 .. p_N <= 256``
and ``P = p_1 ... p_N``:

1. **Normalize** rows of A and columns of B by powers of two (max in
   [0.5, 1)), as the Ozaki-I driver does; X, Y are the normalized A and B^T.
2. **Scale** row i of X by ``2**mu_i`` and row j of Y by ``2**nu_j`` and round
   to integers ``A' = rint(2**mu X)``, ``B' = rint(2**nu Y)`` (``trunc`` for
   rows whose shift is too small for the rounding margin) so that
   ``sum_k |A'_ik| |B'_jk| < P / 2`` for every (i, j): then ``C' = A' B'^T``
   is determined by its residues modulo P.

   * ``scaling="fast"``: Cauchy-Schwarz, ``|A'_i . B'_j| <= ||A'_i|| ||B'_j||``:
     ``mu_i = floor(H - log2 ||X_i||)`` with ``H = (log2(P / 2) - margin) / 2``,
     the same for ``nu_j``. No extra GEMM.
   * ``scaling="accurate"``: one extra exact INT8 GEMM of upper bounds
     ``W = ceil(128 |X|) ceil(128 |Y|)^T >= 2**14 |X| |Y|^T`` (stored as the
     negative values in [-128, 0], which INT8 holds, and whose products are the
     same). With ``L_ij = log2(P / 2) + 14 - log2 W_ij - margin``:
     ``mu_i = floor(min_j L_ij / 2)``, then ``nu_j = floor(min_i (L_ij - mu_i))``
     (>= ``floor(min_i L_ij / 2)``, so never worse than the symmetric split).
     The bound follows the magnitudes of the actual products instead of
     ``sqrt(k) * max``, which pays off when exponents spread (phi >= 2).

   ``margin = 0.05`` bits covers round-to-nearest (``|A'| <= 2**mu |X| + 1/2``),
   hence rows with ``mu_i >= 12`` (accurate) or ``mu_i >= 6 + log2(k) / 2``
   (fast) are rounded to nearest, the others truncated; it also keeps ``C'``
   at least ``0.017 P`` away from ``+-P/2``, which the reconstruction needs.
3. **Residues.** For each modulus the symmetric residues of A' and B' (in
   [-128, 127]) are computed exactly in FP64: A' (up to ~2**180) is cut into
   integer digits of D <= 44 bits, ``A' mod p = sum_t digit_t (2**(D t) mod p)``
   reduced twice with ``x - p floor(x / p)`` (every intermediate an integer
   of at most 2**52).
4. **One exact INT8 GEMM per modulus** through the engine
   (``engine.int_matmul_sum(ra, rb, [(t, t)], 128, 128)``), reduced mod p_t to
   ``c_t`` with ``|c_t| <= 128``.
5. **CRT in FP64 limbs.** With ``w_t = (P / p_t) * ((P / p_t)^-1 mod p_t)``
   the sum ``S = sum_t w_t c_t`` is congruent to C' mod P, and
   ``C' = S - P * rint(S / P)``. ``rint(S / P) = rint(sum_t (w_t / P) c_t)`` is
   one FP64 accumulation (error < 2**-38, far from the 0.017 margin), and S
   is accumulated EXACTLY as integers in 40-bit limbs
   (``|limb_tl * c_t| <= 2**47``, N <= 32 terms: below 2**53), then ``q P`` is
   subtracted limb-wise, carries are propagated to balanced digits and the
   limbs are combined top-down: C' to a few ulps, exactly 0 when C' = 0. This
   is GEMMul8's sum of double-double weights, made exact. Cost: ``1 + L``
   axpy passes per modulus (L = ceil(log2 P / 40): 3 for N <= 15, 4 for N <= 20).
6. **Unscale** by ``2**(e_i - mu_i)`` and ``2**(f_j - nu_j)`` (exact, or one
   rounding near the ends of the FP64 range), as the Ozaki-I driver does.

Everything is written against the array namespace ``xp`` (NumPy or CuPy) and
the engine interface of :mod:`ozlinalg.engines.base`; the inner dimension is
cut into blocks of at most ``CRT_INNER_BLOCK`` (``k 128**2 < 2**31``).

Choosing the moduli count (``moduli="auto"``)
---------------------------------------------
The error of C'_ij comes from rounding A and B to integers:
``|dC'_ij| ~ (||B'_j|| + ||A'_i||) / sqrt(12)`` for random signs, i.e. in
normalized units ``2**-mu_i ||Y_j|| + 2**-nu_j ||X_i||``. Native DGEMM's error
in the same entry scales with ``u sqrt(sum_k (x_ik y_jk)**2)``. With
``Q = (X**2)(Y**2)^T`` (one float32 GEMM of the squared operands, as Ozaki-I's
``auto`` uses) the predicted ratio is

    E_ij = (2**-mu_i ||Y_j|| + 2**-nu_j ||X_i||) / sqrt(Q_ij)

and each extra bit of log2 P adds half a bit to mu and nu. The scaling is
computed once for a reference count (``P_ref``: 20 moduli, whatever the cap
``max_moduli``), ``rho = max_ij log2 E_ij`` is taken over the entries with
``Q_ij > 0`` (underflow-safe, :func:`ozlinalg.ozaki.auto.squared_products`;
``rho = inf`` beyond float64's range), and the count chosen is the smallest N
with

    log2 P_N >= log2 P_ref + 2 (0.7 (rho + 53) + c_scaling + 0.25 max(0, rho + 60))

``c_fast = -9.0``, ``c_accurate = -8.75`` bits. The slope 0.7 < 1 (as in
Ozaki-I's ``auto``, 0.85 there): the entry with the worst predicted ratio is
rarely the one whose cancellation decides the max relative error. Slope and
offsets were fitted against the exact reference (python-flint) on the papers'
inputs, (m, n, p) in {(32, 64, 24), (64, 512, 64), (128, 2048, 96),
(200, 4096, 160)}, phi in {0.5, 1, 2, 4}, two seeds, both scalings (64
cases), with 0.25 bit of slack. A wider check
(``benchmarks/calibrate_crt_auto.py``: six shapes, phi up to 8, three seeds,
216 cases) found 40 under-picks, all but one at phi >= 4: wide exponent
ranges need more than the 0.7 slope predicts. The knee term (0.25 extra slope
above rho = -60, where no phi <= 2 case lies, so their counts are unchanged)
left 2 under-picks by one modulus (32 x 64 x 24 at phi = 4, accurate;
200 x 4096 x 160 at phi = 1, fast), each with a max error 2.4x native's,
for 1.2 extra moduli on average at phi >= 4. Rerun on another machine (2026-12-01,
oneDNN engine, the same picks): 3 under-picks by one modulus, max errors 2.36x,
1.00x and 1.47x native's (32 x 64 x 24 at phi = 4, accurate; 40 x 300 x 30 and
200 x 4096 x 160 at phi = 0.5, fast): "needed" moves with the machine's native
DGEMM. Raising the offsets until all three go takes 3 bits and turns 207 of the
216 picks into over-picks. Measured, not proven; the
deterministic part is the bound ``sum |A'||B'| < P/2`` (the result is the
exact CRT value of the rounded operands).
Entries whose predicted spread no count up to ``max_moduli`` serves (or
whose magnitude even float64 loses) are computed in native FP64, and the
count is chosen for the rest (:func:`rho_capacity`); :func:`choose_moduli`
alone clips at ``max_moduli`` with an :class:`~ozlinalg.AccuracyWarning`.
Cost of ``auto``: with ``scaling="accurate"``, usually none beyond the bound GEMM W
the scaling needs anyway: W bounds every ``q_ij`` from below (Cauchy-Schwarz on
``|X||Y|^T``), and when that bound and a float64 evaluation of the 16 entries with the
smallest bound fall between the same two thresholds, the count is decided
(:func:`_bound_decision`; dense operands with a narrow exponent range, phi <= 0.5).
Otherwise, and with ``scaling="fast"``, one estimate GEMM of the squares (BF16 on
the oneDNN engine and tensor cores, float32 elsewhere). Both routes reach the
same count: the decision is a function of the exact ``q`` (:mod:`.decide`).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import cache

import numpy as np

from .._array import fp_errstate, row_blocks, to_numpy
from .._exceptions import AccuracyWarning
from ..exact import LIMB_BITS, digit_plan, symmetric_mod
from . import faithful
from .adequacy import count_warning, q_floor, sampled_settles, share_windows
from .decide import (
    CountPlan,
    ModuliRule,
    Operands,
    abs_sum_upper,
    dec_log2,
    estimate,
    moduli_table,
    robust_floor,
    sq_norm_upper,
)
from .native import native_entries
from .scaling import apply_exponents
from .split import normalize_rows, slice_storage

__all__ = [
    "LIMB_BITS",
    "MODULI",
    "MAX_MODULI",
    "rho_capacity",
    "CRT_INNER_BLOCK",
    "AUTO_HIGH_SLOPE",
    "AUTO_OFFSET_BITS",
    "AUTO_REF_MODULI",
    "AUTO_RHO_KNEE",
    "AUTO_RHO_SLOPE",
    "CRTConstants",
    "MODULI_RULE",
    "crt_thresholds",
    "crt_constants",
    "crt_matmul_2d",
    "choose_moduli",
    "symmetric_mod",
    "residues_into",
    "crt_reconstruct",
    "CRTAccumulator",
]


def _coprime_moduli(count=32, top=256):
    """Greedy pairwise coprime integers from ``top`` downwards."""
    out = []
    for c in range(top, 1, -1):
        if all(math.gcd(c, d) == 1 for d in out):
            out.append(c)
            if len(out) == count:
                break
    return tuple(out)


#: The moduli, largest first: 256, 255, 253, 251, 247, 241, 239, 233, 229,
#: 227, 223, 217, 211, 199, 197, 193, 191, 181, 179, 173, ... (pairwise coprime).
MODULI = _coprime_moduli(32)

#: Most moduli the exact limb accumulation supports (N * 2**(40 + 7) < 2**53).
MAX_MODULI = 32

#: Longest inner block: k * 128 * 128 must stay below 2**31 (INT32).
CRT_INNER_BLOCK = (1 << 17) - 1024

#: Bits of slack in ``sum |A'||B'| < P / 2`` (rounding of A', B', float logs).
MARGIN_BITS = 0.05

#: The reference count ``P_ref`` of the ``moduli="auto"`` rule: fixed (not the
#: caller's cap), so the count chosen does not depend on ``max_moduli``, which
#: only clips it (with a warning).
AUTO_REF_MODULI = 20

#: Calibrated slope and offsets of the ``moduli="auto"`` rule (bits; module doc).
AUTO_RHO_SLOPE = 0.7
AUTO_OFFSET_BITS = {"fast": -9.0, "accurate": -8.75}
#: Extra slope above the knee: wide exponent ranges (phi >= 4) need more than
#: the 0.7 slope fitted on phi <= 2 predicts (benchmarks/calibrate_crt_auto.py).
AUTO_RHO_KNEE = -60.0
AUTO_HIGH_SLOPE = 0.25

#: The constants above, as :mod:`.decide` takes them.
MODULI_RULE = ModuliRule(rho_slope=AUTO_RHO_SLOPE, rho_knee=AUTO_RHO_KNEE,
                         high_slope=AUTO_HIGH_SLOPE, offset_bits=tuple(AUTO_OFFSET_BITS.items()))

_SCALINGS = ("fast", "accurate")


@dataclass(frozen=True)
class CRTConstants:
    """Precomputed constants for the first N moduli.

    Attributes
    ----------
    moduli : tuple of int
    P : int
        Product of the moduli.
    log2P : float
    frac : tuple of float
        ``w_t / P`` rounded to float64 (for the quotient ``rint(S / P)``).
    weight_limbs : tuple of tuple of float
        ``w_t`` cut into ``LIMB_BITS``-bit limbs, lowest first (exact floats).
    P_limbs : tuple of float
        P cut the same way.
    """

    moduli: tuple
    P: int
    log2P: float
    frac: tuple
    weight_limbs: tuple
    P_limbs: tuple


def _limbs(v, count):
    mask = (1 << LIMB_BITS) - 1
    return tuple(float((v >> (LIMB_BITS * l)) & mask) for l in range(count))


@cache
def crt_constants(n_moduli: int) -> CRTConstants:
    """CRT constants for the first ``n_moduli`` entries of :data:`MODULI`."""
    n = int(n_moduli)
    if not 1 <= n <= MAX_MODULI:
        raise ValueError(f"ozlinalg: moduli count must be between 1 and {MAX_MODULI}, got {n}")
    mods = MODULI[:n]
    P = math.prod(mods)
    nl = max(1, -(-P.bit_length() // LIMB_BITS))
    weights = []
    for p in mods:
        Mt = P // p
        weights.append(Mt * pow(Mt, -1, p) % P)
    frac = tuple(_ratio(w, P) for w in weights)
    return CRTConstants(
        moduli=mods, P=P, log2P=float(dec_log2(P)), frac=frac,
        weight_limbs=tuple(_limbs(w, nl) for w in weights), P_limbs=_limbs(P, nl),
    )


def _ratio(w, P):
    from fractions import Fraction

    return float(Fraction(w, P))


def residues_into(xp, v, mods, bits, out):
    """Write ``v mod p_t`` (symmetric) into ``out[t]`` for integer-valued ``v``.

    ``v`` is float64 with integer values, ``|v| < 2**bits``; it is cut into
    ``count`` signed digits of D bits (exact: each is a truncation of v's
    significand), so ``v mod p = sum_t digit_t (2**(D t) mod p) mod p`` with
    every partial sum an integer of at most 2**52.
    """
    d, count = digit_plan(bits)
    digits = []
    rest = v
    for t in range(count - 1, 0, -1):
        scale = 2.0 ** (d * t)
        top = xp.trunc(rest * (1.0 / scale))
        digits.append((t, top))
        rest = rest - top * scale
    digits.append((0, rest))
    for idx, p in enumerate(mods):
        acc = None
        for t, dig in digits:
            coef = float(pow(2, d * t, p))
            if coef == 0.0:
                continue
            term = dig if coef == 1.0 else dig * coef
            acc = term if acc is None else acc + term
        if acc is None:
            out[idx] = 0
        else:
            out[idx] = symmetric_mod(xp, acc, p)


def _ceil_log2_safe(xp, v):
    """log2 of positive entries, +inf where v == 0."""
    with _quiet(xp):
        return xp.where(v > 0, xp.log2(xp.where(v > 0, v, 1.0)), xp.inf)


def _quiet(xp):
    return fp_errstate(xp, divide="ignore", invalid="ignore", over="ignore", under="ignore")


def _fast_shifts(xp, na, nb, log2P):
    h = (log2P - 1.0 - MARGIN_BITS) / 2.0
    mu = xp.where(na > 0, robust_floor(xp, h, xp.where(na > 0, na, 1.0)), 0.0)
    nu = xp.where(nb > 0, robust_floor(xp, h, xp.where(nb > 0, nb, 1.0)), 0.0)
    return mu, nu


def _accurate_shifts(xp, w_tiles, log2P, m, p, planner=None):
    """Shifts from the bound products ``W`` (integers), given as output tiles
    ``(i0, i1, j0, j1, w_t)`` or summarized by the engine (``planner``, from
    ``crt_bound_shifts``: the same exact maxima without a float pass over W):
    ``mu_i = floor((c - log2 max_j W_ij) / 2)`` and ``nu_j = floor(c - log2 max_i W_ij
    2**mu_i)`` (``c = log2(P / 2) + 14 - margin``), the row and column maxima exact over
    all tiles and the floors exact (:func:`ozlinalg.ozaki.decide.robust_floor`), so the
    shifts depend neither on the tiling nor on the engine's ``log2``."""
    c = log2P - 1.0 + 14.0 - MARGIN_BITS
    if planner is not None:
        rmax = planner.row_max()
    else:
        rmax = xp.zeros(m)
        for i0, i1, _, _, w in w_tiles:
            if w.shape[1]:
                xp.maximum(rmax[i0:i1], w.max(axis=1), out=rmax[i0:i1])
    pos = rmax > 0
    mu = xp.where(pos, robust_floor(xp, c, xp.where(pos, rmax, 1.0), div=2), 0.0)
    if planner is not None:
        cmax = planner.col_max_scaled(mu)
    else:
        scale = xp.ldexp(xp.ones(m), mu.astype(xp.int32))
        cmax = xp.zeros(p)
        for i0, _, j0, j1, w in w_tiles:
            for r0, r1 in row_blocks(*w.shape):
                t = w[r0:r1] * scale[i0 + r0:i0 + r1, None]  # exact: W < 2**31
                xp.maximum(cmax[j0:j1], t.max(axis=0), out=cmax[j0:j1])
    pos = cmax > 0
    nu = xp.where(pos, robust_floor(xp, c, xp.where(pos, cmax, 1.0)), 0.0)
    return mu, nu


#: Entries (the smallest lower bounds) evaluated in float64 to bound auto's smallest r
#: from above in :func:`_bound_decision`.
_BOUND_PROBES = 16


def _bound_decision(xp, engine, plan, w_tiles, ca, cb, num, k):
    """``moduli="auto"``'s count index decided from the accurate scaling's bound
    products W alone, or None (the estimate GEMM decides, as before).

    The decision (:class:`ozlinalg.ozaki.decide.CountPlan`) is a function of the exact
    ``r_ij = q_ij / num_ij**2``, ``q = (X**2)(Y**2)^T``, through its smallest value. W
    bounds it from below with no further GEMM: ``ceil(128 |x|) < 128 |x| + 1`` gives
    ``W_ij - ca_i - cb_j < 2**14 S_ij`` (``S = |X| |Y|^T``, ``ca_i = sum_k ceil(128
    |x_ik|)``, exact integers), and Cauchy-Schwarz ``q_ij >= S_ij**2 / k``. So
    ``r_ij >= L_ij = max(W_ij - ca_i - cb_j, 0)**2 / (2**28 k num_ij**2)`` (rounded
    down). When every ``L_ij`` is at least the native cap (no entry native, none a
    structural zero) and the float64 evaluation of the entries with the smallest
    ``L`` (upper bounds of ``min r``) falls in the same threshold interval as
    ``min L``, that interval holds ``min r``: the count is the one the estimate
    route would reach, bit for bit. Typical of dense operands with a narrow exponent
    range (phi <= 0.5: ``min L`` about 4x below ``min r``, the thresholds 2**11
    apart); wide ranges make ``W``'s rounding slack dominate and fall back."""
    ia, nb, na, ib = num
    # (d * d) * inv_k / (num * num): four roundings and num's own (the same IEEE
    # operations as the plan's weights), far inside the 2**-40 taken off
    inv_k = 2.0**-28 / k * (1.0 - 2.0**-40)
    low = math.inf
    probes = []
    for i0, i1, j0, j1, w in w_tiles:
        if w.size == 0:
            continue
        rmin, rarg = _bound_r_min(xp, engine, w, ca[i0:i1], cb[j0:j1],
                                  (ia[i0:i1], nb[j0:j1], na[i0:i1], ib[j0:j1]), inv_k)
        rmin, rarg = to_numpy(rmin), to_numpy(rarg)
        tile_low = float(rmin.min())
        if not (tile_low >= plan.cap and tile_low > 0):
            return None
        low = min(low, tile_low)
        sel = np.argsort(rmin, kind="stable")[:_BOUND_PROBES]
        probes.append((rmin[sel], sel + i0, rarg[sel] + j0))
    if not probes:
        return None
    vals = np.concatenate([v[0] for v in probes])
    order = np.argsort(vals, kind="stable")[:_BOUND_PROBES]
    rows = np.concatenate([v[1] for v in probes])[order]
    cols = np.concatenate([v[2] for v in probes])[order]
    return plan.decide_from_lower(low, rows, cols)


def _bound_r_min(xp, engine, w, ca, cb, num, inv_k):
    """``(rmin, rarg)`` per row of a W tile: the smallest lower bound ``L_ij`` of
    :func:`_bound_decision` and its first column (0 where ``L_ij`` has no positive
    value: no divisor in float64's normal range, or no positive ``W_ij - ca_i -
    cb_j``)."""
    fused = engine.bound_r_min if engine is not None else None
    done = fused(w, ca, cb, num, inv_k) if fused is not None else None
    if done is not None:
        return done
    ia, nb, na, ib = num
    rows = w.shape[0]
    rmin = xp.empty(rows)
    rarg = xp.empty(rows, dtype=xp.int64)
    for r0, r1 in row_blocks(*w.shape):
        with _quiet(xp):
            d = w[r0:r1].astype(xp.float64) - ca[r0:r1, None] - cb[None, :]
            n = ia[r0:r1, None] * nb[None, :] + na[r0:r1, None] * ib[None, :]
            nn = n * n
            ok = (d > 0) & (nn >= 2.0**-1000) & (nn < xp.inf)
            v = xp.where(ok, (d * d) * inv_k / xp.where(ok, nn, 1.0), 0.0)
        arg = xp.argmin(v, axis=1)
        rarg[r0:r1] = arg
        rmin[r0:r1] = xp.take_along_axis(v, arg[:, None], axis=1)[:, 0]
    return rmin, rarg


def _bound_operand(xp, engine, x, operand):
    """``-ceil(128 |x|)`` in the engine's slice storage, shape (1, rows, k)."""
    rows, k = x.shape
    out = slice_storage(engine, x, 1, "crt", operand)
    fused = engine.crt_bound  # one-pass kernel where the engine has one

    def block(r0, r1):
        if fused is None or not fused(x[r0:r1], out[0, r0:r1]):
            out[0, r0:r1] = -xp.ceil(xp.abs(x[r0:r1]) * 128.0)

    engine.map_rows(block, rows, k)
    return out


def _integerize_into(xp, engine, x, shift, round_rows, mods, bits, out):
    """Residues of ``A' = rint|trunc(2**shift x)`` for every modulus into ``out``."""
    rows, k = x.shape
    mult = xp.ldexp(xp.ones(shift.shape), shift.astype(xp.int32))
    fused = engine.crt_residues  # one-pass kernel where the engine has one

    def block(r0, r1):
        if fused is not None and fused(x[r0:r1], mult[r0:r1], round_rows[r0:r1], mods, bits,
                                       out[:, r0:r1]):
            return
        v = x[r0:r1] * mult[r0:r1, None]
        vi = xp.where(round_rows[r0:r1, None], xp.rint(v), xp.trunc(v))
        residues_into(xp, vi, mods, bits, out[:, r0:r1])

    engine.map_rows(block, rows, k)


def _fixed_short(scaling, moduli, cap, entries, checks, decide):
    """``(need, natives)`` when the fixed count ``moduli`` falls short of
    ``moduli="auto"``'s decision for this inner block, else None (:mod:`.adequacy`).

    auto's decision is that of the exact ``r_ij = q_ij / num_ij**2``, ``num`` from the
    shifts for the reference count: ``moduli`` serves every entry when ``min r >=
    R_moduli``. ``checks``, cheapest first, each show that from bounds
    (``check(R_moduli)`` True); only when none does does ``decide`` (auto's own
    decision, with the cap ``cap``) run. ``need`` is auto's count (None when every
    entry is native), ``natives`` the number of native entries."""
    threshold = crt_thresholds(scaling, cap, crt_constants(AUTO_REF_MODULI).log2P)[moduli - 1]
    if any(check(threshold) for check in checks):
        return None
    n_idx, natives, _ = decide(cap, False)
    count = sum(int(mask.sum()) for mask in natives.values())
    if n_idx is None:
        return (None, entries) if natives else None
    if n_idx + 1 <= moduli and count == 0:
        return None
    return n_idx + 1, count


def _fixed_checks(xp, engine, a, bt, ea, eb, na, nb, mu, nu, log2p, scaling, w_tiles, rtiles,
                  ctiles):
    """The bounds that may show a fixed count enough, cheapest first (each a callable
    of the threshold, True when it does): :func:`_r_floor` (no GEMM), :func:`_w_floor`
    (the accurate scaling: a pass over W) and :func:`.adequacy.sampled_settles` (an
    estimate GEMM over a sixteenth of the inner dimension)."""
    k = a.shape[1]
    checks = [lambda t: _r_floor(xp, a, bt, ea, eb, na, nb, mu, nu, log2p, scaling) >= t]
    if scaling == "accurate":
        checks.append(lambda t: _w_floor(xp, engine, w_tiles, na, nb, mu, nu, log2p, k) >= t)
    checks.append(lambda t: sampled_settles(
        xp, engine, a, ea.astype(xp.int32), na > 0, bt, eb.astype(xp.int32), nb > 0,
        share_windows(0, k), t, rtiles, ctiles,
        _ref_divisors(xp, mu, nu, na, nb, log2p, scaling)))
    return checks


def _ref_divisors(xp, mu, nu, na, nb, log2p, scaling):
    """``(ia, nb, na, ib)``: the vectors of auto's divisors ``num_ij = ia_i nb_j +
    na_i ib_j``, ``ia``, ``ib`` upper bounds from the fixed count's shifts
    (:func:`_ref_offsets`), so ``num`` is bounded from above entry by entry."""
    dmu, dnu = _ref_offsets(log2p, scaling)
    ia = xp.ldexp(xp.ones(mu.shape), (-(mu + dmu)).astype(xp.int32))
    ib = xp.ldexp(xp.ones(nu.shape), (-(nu + dnu)).astype(xp.int32))
    return ia, nb, na, ib


#: Slack for the float differences of the shift offsets in :func:`_r_floor`.
_HAIR = 2.0**-20


def _ref_offsets(log2p, scaling):
    """``(dmu, dnu)`` with ``mu' >= mu + dmu`` and ``nu' >= nu + dnu`` for the shifts
    ``mu'``, ``nu'`` of the reference count and ``mu``, ``nu`` of ``P = 2**log2p``
    (:func:`_r_floor`)."""
    ref = crt_constants(AUTO_REF_MODULI).log2P
    if scaling == "fast":
        d = (ref - 1.0 - MARGIN_BITS) / 2.0 - (log2p - 1.0 - MARGIN_BITS) / 2.0
        return math.floor(d - _HAIR), math.floor(d - _HAIR)
    d = (ref - 1.0 + 14.0 - MARGIN_BITS) - (log2p - 1.0 + 14.0 - MARGIN_BITS)
    return (math.floor((d - _HAIR) / 2.0),
            math.floor(d - _HAIR - math.ceil((d + _HAIR) / 2.0)))


def _w_floor(xp, engine, w_tiles, na, nb, mu, nu, log2p, k):
    """A lower bound of ``min r_ij`` from the accurate scaling's bound products W (no
    GEMM; 0 where it has none), as :func:`_bound_decision` bounds it, with upper bounds
    in place of what the fixed count did not compute: ``sum_k ceil(128 |x_ik|) <= 128
    sqrt(k) na_i + k`` (Cauchy-Schwarz) for the digit sums and the shifts of
    :func:`_ref_offsets` for those of the reference count. Rows and columns that are
    zero hold structural zeros only: their slack is ``-inf`` (no bound from them)."""
    root = math.sqrt(k) * (1.0 + 2.0**-40)
    ca = xp.where(na > 0, (128.0 * root) * na * (1.0 + 2.0**-40) + (k + 1.0), -xp.inf)
    cb = xp.where(nb > 0, (128.0 * root) * nb * (1.0 + 2.0**-40) + (k + 1.0), -xp.inf)
    ia, _, _, ib = _ref_divisors(xp, mu, nu, na, nb, log2p, "accurate")
    inv_k = 2.0**-28 / k * (1.0 - 2.0**-40)
    low = math.inf
    for i0, i1, j0, j1, w in w_tiles:
        if w.size == 0:
            continue
        rmin, _ = _bound_r_min(xp, engine, w, ca[i0:i1], cb[j0:j1],
                               (ia[i0:i1], nb[j0:j1], na[i0:i1], ib[j0:j1]), inv_k)
        keep = na[i0:i1] > 0
        if bool(keep.any()):
            low = min(low, float(rmin[keep].min()))
    return low


def _r_floor(xp, a, bt, ea, eb, na, nb, mu, nu, log2p, scaling):
    """A lower bound of ``min r_ij`` over the entries that are not structural zeros
    (``inf`` if all are), from :func:`.adequacy.q_floor` and the fixed count's shifts.

    ``r_ij = q_ij / num_ij**2`` with ``num_ij = 2**-mu'_i nb_j + na_i 2**-nu'_j`` at the
    reference count ``P_ref`` (``mu'``, ``nu'``; ``na``, ``nb`` the row norms). The
    magnitudes are measured against ``2**g_i``, ``g_i >= 0`` the least with
    ``na_i < 2**g_i`` or 0 (row i normalized once more, by about its norm; any
    ``g_i >= 0`` is sound, this one is tight), so that the levels of ``q_floor`` give
    ``q_ij >= 2**(2 g_i + 2 g_j) Lq``, hence ``r_ij >= Lq (2**(g_i + g_j) / num_ij)**2``
    and ``num_ij 2**-(g_i + g_j) <= max(2**-mu'_i - g_i) max(nb_j 2**-g_j) +
    max(na_i 2**-g_i) max(2**-nu'_j - g_j)`` over the rows that are not zero (zero
    rows only make structural zeros): a bound that follows the norms of the rows.
    The shifts ``mu``, ``nu`` for ``P = 2**log2p`` bound ``mu'``, ``nu'``: with ``d``
    the change of the shifts' offset (``log2(P_ref / P)`` for the accurate scaling,
    half of it for the fast one), ``floor(x + d) >= floor(x) + floor(d)`` gives ``mu'
    >= mu + floor(d')`` (``d' = d / 2`` accurate, ``d`` fast) and, the column maxima
    of the accurate scaling growing by at most ``2**ceil(d / 2)``, ``nu' >= nu +
    floor(d - ceil(d / 2))``."""
    nz_a, nz_b = na > 0, nb > 0
    ga = xp.maximum(xp.frexp(na)[1], 0).astype(xp.int32)  # na 2**-g < 1, exactly
    gb = xp.maximum(xp.frexp(nb)[1], 0).astype(xp.int32)
    q = q_floor(xp, a, ea.astype(xp.int32) + ga, nz_a, bt, eb.astype(xp.int32) + gb, nz_b,
                0, a.shape[1])
    if not 0 < q < math.inf:
        return q
    dmu, dnu = _ref_offsets(log2p, scaling)
    # the factors: powers of two, and norms scaled by powers of two (exact)
    a1 = math.ldexp(1.0, -int(float((mu + ga)[nz_a].min())) - dmu)
    b2 = math.ldexp(1.0, -int(float((nu + gb)[nz_b].min())) - dnu)
    b1 = float(xp.ldexp(nb, -gb).max())
    a2 = float(xp.ldexp(na, -ga).max())
    num = (a1 * b1 + a2 * b2) * (1.0 + 2.0**-40)
    with fp_errstate(np, under="ignore", over="ignore"):
        return q / (num * num) * (1.0 - 2.0**-40)


def crt_thresholds(scaling, max_moduli, log2p_ref):
    """``(R_1, ..., R_max)``: ``N`` moduli serve the entries with ``q / num**2 >= R_N``
    (:func:`choose_moduli` read as a threshold on ``2**(-2 rho)``;
    :func:`.decide.moduli_table`)."""
    products = tuple(crt_constants(n).P for n in range(1, int(max_moduli) + 1))
    return moduli_table(MODULI_RULE, scaling, products, log2p_ref)


def choose_moduli(rho, scaling, max_moduli, log2p_max):
    """Smallest N with ``log2 P_N >= log2 P_ref + 2 (0.7 (rho + 53) + offset
    + 0.25 max(0, rho + 60))`` (module doc)."""
    need = log2p_max + 2.0 * (AUTO_RHO_SLOPE * (rho + 53.0) + AUTO_OFFSET_BITS[scaling]
                              + AUTO_HIGH_SLOPE * max(0.0, rho - AUTO_RHO_KNEE))
    for n in range(1, max_moduli + 1):
        if crt_constants(n).log2P >= need:
            return n
    warnings.warn(
        f"ozlinalg: moduli='auto' needs more than max_moduli={max_moduli} moduli for this "
        f"input ({scaling} scaling); using {max_moduli}, so the result may be less "
        "accurate than FP64",
        AccuracyWarning,
        stacklevel=4,
    )
    return max_moduli


def rho_capacity(scaling, max_moduli, log2p_ref):
    """The largest predicted spread ``rho`` that ``max_moduli`` moduli serve (the
    inverse of :func:`choose_moduli`' rule)."""
    d = (crt_constants(max_moduli).log2P - log2p_ref) / 2.0 - AUTO_OFFSET_BITS[scaling]
    knee = AUTO_RHO_SLOPE * (AUTO_RHO_KNEE + 53.0)
    if d <= knee:
        cap = d / AUTO_RHO_SLOPE - 53.0
    else:
        cap = AUTO_RHO_KNEE + (d - knee) / (AUTO_RHO_SLOPE + AUTO_HIGH_SLOPE)
    return cap - 1e-9  # a hair inside, so choose_moduli(cap) never tips over


class CRTAccumulator:
    """Streaming CRT reconstruction of C' from the per-modulus products.

    ``add(t, prod)`` takes the exact product of the residues for modulus t
    (float64 integers, |prod| < 2**53), reduces it mod p_t and accumulates
    ``sum_t w_t c_t`` exactly in 40-bit limbs plus ``sum_t (w_t / P) c_t`` in
    FP64 (the quotient). ``result()`` subtracts ``rint(quotient) * P`` limb-wise,
    carries to balanced limbs and combines them from the top.
    """

    def __init__(self, xp, engine, consts):
        self.xp, self.engine, self.consts = xp, engine, consts
        self.quot = None
        self.limbs = None

    def add(self, t, prod):
        xp, consts = self.xp, self.consts
        c = symmetric_mod(xp, prod, consts.moduli[t])
        if self.quot is None:
            self.quot = xp.zeros(c.shape)
            self.limbs = [xp.zeros(c.shape) for _ in consts.P_limbs]
        self.engine.axpy(consts.frac[t], c, self.quot)
        for l, wl in enumerate(consts.weight_limbs[t]):
            if wl != 0.0:
                self.engine.axpy(wl, c, self.limbs[l])

    def _limbs_balanced(self):
        """The limbs of C' after ``- q P`` and carry propagation (balanced digits)."""
        xp, consts = self.xp, self.consts
        limbs = self.limbs
        nl = len(limbs)
        q = xp.rint(self.quot)
        self.quot = None
        unit = 2.0**LIMB_BITS
        for l in range(nl):
            if consts.P_limbs[l] != 0.0:
                limbs[l] -= q * consts.P_limbs[l]
        for l in range(nl - 1):
            carry = xp.rint(limbs[l] * (1.0 / unit))
            limbs[l] -= carry * unit
            limbs[l + 1] += carry
        self.limbs = None
        return limbs

    def faithful_result(self):
        """``(c, slop)``: C' rebuilt from its limbs with TwoSums, top limb first, and a
        bound ``slop`` of ``|C' - c|`` (faithful mode, :mod:`.faithful`)."""
        xp = self.xp
        limbs = self._limbs_balanced()
        nl = len(limbs)
        unit = 2.0**LIMB_BITS
        s = limbs[nl - 1] * unit ** (nl - 1)
        e = xp.zeros(s.shape)
        eb = xp.zeros(s.shape)
        for l in range(nl - 2, -1, -1):
            t = limbs[l] * unit**l
            r = s + t
            bb = r - s
            err = (s - (r - bb)) + (t - bb)
            s = r
            e = e + err
            eb = eb + xp.abs(e)
        r2 = s + e
        bb = r2 - s
        e2 = (s - (r2 - bb)) + (e - bb)
        return r2, xp.abs(e2) + (2.0**-53 * (1.0 + 2.0**-20)) * eb

    def result(self):
        limbs = self._limbs_balanced()
        nl = len(limbs)
        unit = 2.0**LIMB_BITS
        out = limbs[nl - 1]
        for l in range(nl - 2, -1, -1):
            out *= unit
            out += limbs[l]
        return out


def crt_reconstruct(xp, engine, products, consts):
    """C' from an iterable of ``(t, exact product of the residues mod p_t)``."""
    acc = CRTAccumulator(xp, engine, consts)
    for t, prod in products:
        acc.add(t, prod)
    return acc.result()


def crt_matmul_2d(xp, engine, a, b, moduli="auto", scaling="accurate", max_moduli=20,
                  profile_counts=None, timers=None, tiles=None, accuracy="dgemm",
                  recompute=True, check=False, keep_bounds=True):
    """``a @ b`` for finite float64 2-D arrays by Ozaki scheme II.

    Parameters
    ----------
    xp : module
        ``numpy`` or ``cupy``.
    engine : ozlinalg.engines.base.Engine
        Exact INT8 engine (``int_matmul_sum``, ``empty_slices``, ``approx_matmul``
        for ``moduli="auto"``, ``axpy``, ``map_rows``).
    a, b : arrays, float64, shapes (m, k) and (k, p), all entries finite
    moduli : int or "auto"
        Number N of moduli (1 .. :data:`MAX_MODULI`), or ``"auto"``: the
        smallest count predicted to reach DGEMM-level accuracy (module doc),
        at most ``max_moduli``.
    scaling : {"accurate", "fast"}
        ``"accurate"``: one extra INT8 GEMM bounding ``|A||B|`` (GEMMul8's
        accurate mode); ``"fast"``: Cauchy-Schwarz bounds from row/column norms.
    max_moduli : int
        Cap for ``"auto"``.
    profile_counts : dict, optional
        Updated in place: ``int8_gemms`` (+N per inner block, +1 per block
        for the accurate bound), ``engine_calls``, ``passes`` (CRT
        accumulation passes, one per modulus and block), ``slices`` (list; N
        appended per block), ``bound_gemms``, ``float_gemms``.
    timers : dict, optional
        ``{"split": ctx, "int8": ctx, "acc": ctx}`` context managers (the
        driver's ``Timer`` objects) to attribute time.
    tiles : (mt, pt), optional
        Output tile shape bounding the working memory (default: one tile).
        The count, the scalings and the native entries are planned for the
        WHOLE product (row and column minima over all tiles), so the result
        does not depend on the tiles, nor on which engine chose them.
    accuracy : {"dgemm", "faithful"}
        ``"faithful"``: every entry certified within one ulp (:mod:`.faithful`),
        ``moduli="auto"`` taking ``faithful.EXTRA_MODULI`` more moduli; the
        entries not certified are recomputed exactly (``recompute=False``: left
        in ``profile_counts["uncertified"]`` as ``(rows, cols)`` instead).
    check : bool
        With a fixed ``moduli`` (and ``accuracy="dgemm"``): emit an
        :class:`~ozlinalg.AccuracyWarning` when ``moduli="auto"`` would pick more
        for these inputs, or compute entries natively (:mod:`.adequacy`; the
        driver's setting). The result is the same either way.
    keep_bounds : bool
        The accurate scaling's bound products W, kept for the whole output while
        the count and the shifts are planned (the default), or recomputed tile by
        tile in each pass that reads them (the driver's choice when W does not fit
        ``memory_limit``; one more bound GEMM per tile and pass). Same result.

    Returns
    -------
    c : array float64 (m, p)
    """
    if scaling not in _SCALINGS:
        raise ValueError(f"ozlinalg: scaling must be 'fast' or 'accurate', got {scaling!r}")
    if isinstance(moduli, str):
        if moduli != "auto":
            raise ValueError(f"ozlinalg: moduli must be 'auto' or an integer, got {moduli!r}")
    else:
        moduli = int(moduli)
        if not 1 <= moduli <= MAX_MODULI:
            raise ValueError(f"ozlinalg: moduli must be between 1 and {MAX_MODULI}, got {moduli}")
    max_moduli = int(max(1, min(int(max_moduli), MAX_MODULI)))
    counts = profile_counts if profile_counts is not None else {}
    for key in ("int8_gemms", "engine_calls", "passes", "bound_gemms", "float_gemms"):
        counts.setdefault(key, 0)
    counts.setdefault("slices", [])
    timers = timers or {}
    m, n = a.shape
    p = b.shape[1]
    if m == 0 or p == 0 or n == 0:
        return xp.zeros((m, p))
    bt = b.T
    nblocks = -(-n // CRT_INNER_BLOCK)
    step = -(-n // nblocks)
    c = None
    if accuracy == "faithful":
        parts = faithful.combine(xp) if nblocks > 1 else None
        for k0 in range(0, n, step):
            k1 = min(n, k0 + step)
            c, res = _crt_block(xp, engine, a[:, k0:k1], bt[:, k0:k1], moduli, scaling,
                                max_moduli, counts, timers, tiles, None,
                                "certify" if parts is None else "bound",
                                keep_bounds=keep_bounds)
            if parts is not None:
                parts.add(c, res)
        if parts is not None:
            c, bnd = parts.result()
            ok = faithful.certify(xp, c, bnd)
        else:
            ok = res
        counts["certified"] = int(ok.sum())
        if recompute:  # tile by tile: the indices of one tile at a time
            counts["recomputed"] = faithful.recompute_uncertified(
                xp, c, ok, a, bt, tiles, threads=engine.threads,
                scratch=engine.scratch)
        else:
            counts["uncertified"] = tuple(to_numpy(v) for v in xp.nonzero(~ok))
        return c
    verdicts = [] if check and moduli != "auto" else None
    for k0 in range(0, n, step):
        k1 = min(n, k0 + step)
        part = _crt_block(xp, engine, a[:, k0:k1], bt[:, k0:k1], moduli, scaling,
                          max_moduli, counts, timers, tiles, c, verdicts=verdicts,
                          keep_bounds=keep_bounds)
        if c is None:
            c = part
    if verdicts:
        _warn_short(verdicts, moduli, max_moduli, m * p, scaling)
    return c


def _warn_short(verdicts, moduli, max_moduli, entries, scaling):
    """One warning for the inner blocks whose check found ``moduli`` short:
    ``verdicts`` holds ``(need, natives)`` per such block (``need`` None: every entry
    native)."""
    need = 0
    for n, _ in verdicts:
        need = None if need is None or n is None else max(need, n)
    natives = max(v for _, v in verdicts)
    count_warning(moduli, need, natives, max(max_moduli, moduli), entries, True,
                  "crt-fast" if scaling == "fast" else "crt")


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _timer(timers, key):
    return timers.get(key) or _Null()


def _crt_block(xp, engine, a, bt, moduli, scaling, max_moduli, counts, timers, tiles=None,
               out=None, faith=False, verdicts=None, keep_bounds=True):
    """One inner block over all output tiles; returns the block's product, or adds it
    to ``out`` (a previous block's result) tile by tile. Faithful mode (``faith``
    "certify" or "bound"): returns ``(c, certified)`` or ``(c, bound)`` (final units),
    the entries left to native arithmetic never certified (bound ``inf``).
    ``verdicts``: a list, for a fixed ``moduli``, to which ``(need, natives)`` is
    appended when the count falls short of auto's (:func:`_fixed_short`).
    ``keep_bounds`` (accurate scaling): W kept for the whole output while the plan is
    made (False: recomputed per pass, :class:`_Recomputed`; the memory plan's choice)."""
    m, k = a.shape
    p = bt.shape[0]
    mt, pt = tiles or (m, p)
    rtiles = [(i0, min(m, i0 + mt)) for i0 in range(0, m, mt)]
    ctiles = [(j0, min(p, j0 + pt)) for j0 in range(0, p, pt)]
    single = len(rtiles) == 1 and len(ctiles) == 1
    kept = {}  # one tile: the normalized operands live through all phases

    def operand(which, r0, r1):
        """``(x, e, norms)``: normalized rows r0:r1 of A ("a") or B^T ("b")."""
        key = (which, r0)
        if key not in kept:
            x, e = normalize_rows(xp, (a if which == "a" else bt)[r0:r1], engine)
            # the row norms from fixed-point sums, the same floats on every engine (the
            # shifts depend on them)
            val = (x, e, sq_norm_upper(xp, x, engine),
                   abs_sum_upper(xp, x, engine) if faith else None)
            if not single:
                return val
            kept[key] = val
        return kept[key]

    # One workspace per tile shape for every product of this block: an engine keeps
    # its output buffer (and any padded copy of the operands) there instead of
    # remaking them per modulus.
    spaces = {}

    def workspace(mm, pp):
        if (mm, pp) not in spaces:
            spaces[(mm, pp)] = engine.workspace(mm, pp)
        return spaces[(mm, pp)]

    with _timer(timers, "split"):
        # the vectors only: a tile's normalized rows are dropped as soon as they are
        # summarized (all tiles' at once would be a copy of both operands)
        parts_a = [operand("a", i0, i1)[1:] for i0, i1 in rtiles]
        parts_b = [operand("b", j0, j1)[1:] for j0, j1 in ctiles]
        ea = xp.concatenate([v[0] for v in parts_a]) if len(rtiles) > 1 else parts_a[0][0]
        eb = xp.concatenate([v[0] for v in parts_b]) if len(ctiles) > 1 else parts_b[0][0]
        na = xp.concatenate([v[1] for v in parts_a]) if len(rtiles) > 1 else parts_a[0][1]
        nb = xp.concatenate([v[1] for v in parts_b]) if len(ctiles) > 1 else parts_b[0][1]
        if faith:
            sx = xp.concatenate([v[2] for v in parts_a]) if len(rtiles) > 1 else parts_a[0][2]
            sy = xp.concatenate([v[2] for v in parts_b]) if len(ctiles) > 1 else parts_b[0][2]
        del parts_a, parts_b
        w_tiles = []
        planner = engine.crt_bound_shifts  # W summarized, no log2 W
        planner = planner(m, p) if planner is not None and scaling == "accurate" else None
    if scaling == "accurate":
        # sum_k ceil(128 |x_ik|) per row (exact integers): the slack of W against
        # 2**14 |X| |Y|^T, for auto's decision from W alone (_bound_decision)
        ca, cb = xp.zeros(m), xp.zeros(p)

        def bound_tiles(first=False, own=False):
            """W tile by tile (one bound GEMM each); the first pass also takes the digit
            sums; ``own``: each tile in a buffer of its own (kept by the engine's
            summary), else in the block's shared workspace (valid until the next)."""
            for i0, i1 in rtiles:
                with _timer(timers, "split"):
                    ba = _bound_operand(xp, engine, operand("a", i0, i1)[0], "a")
                    if first and moduli == "auto":
                        ca[i0:i1] = faithful.digit_sums(xp, engine, ba)[0]
                for j0, j1 in ctiles:
                    with _timer(timers, "split"):
                        bb = _bound_operand(xp, engine, operand("b", j0, j1)[0], "b")
                        if first and moduli == "auto" and i0 == 0:
                            cb[j0:j1] = faithful.digit_sums(xp, engine, bb)[0]
                    with _timer(timers, "int8"):
                        ws = (engine.workspace(i1 - i0, j1 - j0) if own
                              else workspace(i1 - i0, j1 - j0))
                        w, calls = engine.int_matmul_sum(ba, bb, [(0, 0)], 128, 128, ws=ws)
                        del ws, bb
                    counts["int8_gemms"] += 1
                    counts["bound_gemms"] += 1
                    counts["engine_calls"] += calls
                    yield i0, i1, j0, j1, w
                    del w
                del ba

        if keep_bounds:  # W kept for the whole output until the shifts are known
            for tile in bound_tiles(True, planner is not None):
                with _timer(timers, "split"):
                    if planner is None:
                        w_tiles.append(tile[:4] + (tile[4].copy(),))  # W is reused
                    else:
                        planner.add(*tile)
                del tile
        else:
            # W does not fit the memory plan: the first pass keeps only its row maxima
            # (the engine's summary) and the digit sums; each later pass over W (column
            # maxima for each count's shifts, auto's decision from W, the fixed count's
            # check) recomputes it tile by tile: the same integers, so the same shifts
            if planner is not None:
                for tile in bound_tiles(True):
                    with _timer(timers, "split"):
                        planner.add(*tile, keep=False)
                    del tile
            elif moduli == "auto":
                for i0, i1 in rtiles:
                    ba = _bound_operand(xp, engine, operand("a", i0, i1)[0], "a")
                    ca[i0:i1] = faithful.digit_sums(xp, engine, ba)[0]
                    del ba
                for j0, j1 in ctiles:
                    bb = _bound_operand(xp, engine, operand("b", j0, j1)[0], "b")
                    cb[j0:j1] = faithful.digit_sums(xp, engine, bb)[0]
                    del bb
            w_tiles = _Recomputed(bound_tiles)
            if planner is not None:
                planner.stream(w_tiles)

    def shifts(log2P):
        if scaling == "fast":
            return _fast_shifts(xp, na, nb, log2P)
        return _accurate_shifts(xp, w_tiles, log2P, m, p, planner)

    def decide(cap, from_bounds):
        """``moduli="auto"``'s ``(n_idx, natives, plan)`` with the cap ``cap``
        (``from_bounds``: try :func:`_bound_decision` first, which needs ``ca``,
        ``cb``)."""
        ref = crt_constants(AUTO_REF_MODULI).log2P
        mu, nu = shifts(ref)
        ia = xp.ldexp(xp.ones(mu.shape), (-mu).astype(xp.int32))
        ib = xp.ldexp(xp.ones(nu.shape), (-nu).astype(xp.int32))

        def num(I, J):  # the predicted error's divisor of the entries (I, J)
            I, J = xp.asarray(I), xp.asarray(J)
            return ia[I] * nb[J] + na[I] * ib[J]

        # One count for the whole product, decided exactly from the estimates
        # (ozlinalg.ozaki.decide): entries no count up to the cap serves (or whose
        # terms normalization lost) are computed natively.
        plan = CountPlan(xp, crt_thresholds(scaling, cap, ref), Operands(xp, a, bt),
                         weights=num)
        n_idx = None
        if from_bounds:  # W often decides alone: no estimate GEMM
            n_idx = _bound_decision(xp, engine, plan, planner.tiles if planner is not
                                    None else w_tiles, ca, cb, (ia, nb, na, ib), k)
        if n_idx is not None:
            counts["bound_decided"] = counts.get("bound_decided", 0) + 1
            return n_idx, {}, plan
        for i0, i1 in rtiles:
            xa = operand("a", i0, i1)[0]
            for j0, j1 in ctiles:
                xb = operand("b", j0, j1)[0]
                q, scale = estimate(xp, engine, xa, xb)
                plan.add_tile((i0, j0), i0, j0, q, scale, engine=engine,
                              num=(ia[i0:i1], nb[j0:j1], na[i0:i1], ib[j0:j1]))
                del q
                counts["float_gemms"] += 1
        return (*plan.finish(), plan)

    natives = {}
    with _timer(timers, "split"):
        if moduli == "auto":
            n_idx, natives, plan = decide(max_moduli, scaling == "accurate")
            if n_idx is None and natives and faith:  # every entry exactly, later
                counts["slices"].append(0)
                return xp.zeros((m, p)), (xp.zeros((m, p), dtype=bool) if faith == "certify"
                                          else xp.full((m, p), xp.inf))
            if n_idx is None and natives:
                counts["slices"].append(0)
                counts.setdefault("crt_rho", []).append(math.inf)
                c = xp.empty((m, p)) if out is None else out
                for i0, i1 in rtiles:
                    for j0, j1 in ctiles:
                        t = xp.empty((i1 - i0, j1 - j0))
                        native_entries(xp, t, a[i0:i1], bt[j0:j1],
                                       xp.ones(t.shape, dtype=bool))
                        _store(xp, c, t, i0, j0, out is not None, timers)
                return c
            # the predicted spread, for profiles and calibration (the decision is above)
            counts.setdefault("crt_rho", []).append(
                -0.5 * math.log2(plan.H) if 0 < plan.H < math.inf else -math.inf)
            nmod = 1 if n_idx is None else n_idx + 1
            if faith:
                nmod = min(nmod + faithful.EXTRA_MODULI, MAX_MODULI)
        else:
            nmod = moduli
        consts = crt_constants(nmod)
        mu, nu = shifts(consts.log2P)
        if verdicts is not None and moduli != "auto":
            short = _fixed_short(scaling, moduli, max(max_moduli, moduli), m * p,
                                 _fixed_checks(xp, engine, a, bt, ea, eb, na, nb, mu, nu,
                                               consts.log2P, scaling, planner.tiles if
                                               planner is not None else w_tiles, rtiles,
                                               ctiles), decide)
            if short is not None:
                verdicts.append(short)
        w_tiles.clear()  # the bound matrix is no longer needed
        planner = None
        counts["slices"].append(nmod)

        if scaling == "fast":
            thr = 6.0 + 0.5 * math.log2(max(k, 1))
            ra, rb = mu >= thr, nu >= thr
        else:
            ra, rb = mu >= 12.0, nu >= 12.0
        bits_a = int(float(mu.max())) + 2 if mu.size else 1
        bits_b = int(float(nu.max())) + 2 if nu.size else 1
        ea = ea.astype(xp.int32) - mu.astype(xp.int32)
        eb = eb.astype(xp.int32) - nu.astype(xp.int32)

    c = out
    res_all = (xp.empty((m, p), dtype=bool if faith == "certify" else xp.float64)
               if faith else None)
    make = engine.crt_accumulator  # fused residues + one combine pass
    for i0, i1 in rtiles:
        with _timer(timers, "split"):
            xa = operand("a", i0, i1)[0]
            # The engine's layout for products ("a"/"b"): on the GPU the residues are
            # stored padded once, so no modulus's GEMM copies them.
            da = slice_storage(engine, xa, nmod, "crt", "a")
            _integerize_into(xp, engine, xa, mu[i0:i1], ra[i0:i1], consts.moduli, bits_a, da)
            del xa
        for j0, j1 in ctiles:
            with _timer(timers, "split"):
                xb = operand("b", j0, j1)[0]
                db = slice_storage(engine, xb, nmod, "crt", "b")
                _integerize_into(xp, engine, xb, nu[j0:j1], rb[j0:j1], consts.moduli, bits_b,
                                 db)
                del xb
                kept.clear()
            acc = (make(consts) if make is not None else None)
            if acc is None or (faith and not hasattr(acc, "faithful_result")):
                acc = CRTAccumulator(xp, engine, consts)
            if hasattr(acc, "recycle"):  # db[t] is dead after product t: room for its result
                acc.recycle(db)
            for t in range(nmod):
                with _timer(timers, "int8"):
                    prod, calls = engine.int_matmul_sum(da, db, [(t, t)], 128, 128,
                                                        ws=workspace(i1 - i0, j1 - j0))
                counts["int8_gemms"] += 1
                counts["engine_calls"] += calls
                with _timer(timers, "acc"):
                    acc.add(t, prod)
                counts["passes"] += 1
                del prod
            del db
            with _timer(timers, "acc"):
                if faith:
                    cpr, slop = acc.faithful_result()
                    vec = faithful.CRTBound(xp, sx[i0:i1], sy[j0:j1], mu[i0:i1], nu[j0:j1],
                                            ra[i0:i1], rb[j0:j1], k)
                    native = natives.get((i0, j0))
                    if faith == "certify":
                        res = faithful.crt_certify(xp, engine, cpr, slop, vec, ea[i0:i1],
                                                   eb[j0:j1])
                        if native is not None:
                            res &= ~native
                    else:
                        for _, _, sl in faithful._blocks(slop):
                            slop[sl] = vec.bound(xp, slop, sl)
                        res = faithful.scaled_bound(xp, slop, ea[i0:i1], eb[j0:j1])
                        if native is not None:
                            res[native] = xp.inf
                else:
                    cpr = acc.result()
                apply_exponents(xp, cpr, ea[i0:i1], eb[j0:j1], 0.0, consts.log2P + 1.0,
                                engine)
                if faith:
                    res_all[i0:i1, j0:j1] = res
                    if c is None:
                        c = xp.empty((m, p))
                    c[i0:i1, j0:j1] = cpr
                    continue
            native = natives.get((i0, j0))
            if native is not None:
                native_entries(xp, cpr, a[i0:i1], bt[j0:j1], native)
            if single and c is None:
                return cpr
            if c is None:
                c = xp.empty((m, p))
            _store(xp, c, cpr, i0, j0, out is not None, timers)
        del da
    return (c, res_all) if faith else c


class _Recomputed:
    """Ozaki-II's bound products W as an iterable of output tiles ``(i0, i1, j0, j1,
    w)`` that recomputes them on each pass (``make()``: a fresh generator of the bound
    GEMMs): what the planning passes read when W for the whole output does not fit
    the memory plan. Each tile is valid until the next one is taken."""

    def __init__(self, make):
        self.make = make

    def __iter__(self):
        return self.make()

    def clear(self):
        """Nothing kept, nothing to free (the list of kept tiles has the same method)."""


def _store(xp, c, tile, i0, j0, add, timers):
    """``c[tile] = tile`` (the first inner block) or ``c[tile] += tile`` (the others)."""
    view = c[i0:i0 + tile.shape[0], j0:j0 + tile.shape[1]]
    if add:
        with _timer(timers, "acc"):
            view += tile
    else:
        view[...] = tile
