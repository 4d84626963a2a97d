"""Ozaki scheme II's moduli and constants: the coprime moduli, the CRT weights cut into
limbs, the residues of integer-valued arrays, and the calibrated ``moduli="auto"`` rule
(:func:`choose_moduli`; how its constants were measured: docs/calibration.md)."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import cache

from ..._exceptions import AccuracyWarning
from ...exact import LIMB_BITS, digit_plan, symmetric_mod
from ..counts.estimate import ModuliRule, dec_log2

__all__ = ["AUTO_HIGH_SLOPE", "AUTO_OFFSET_BITS", "AUTO_REF_MODULI", "AUTO_RHO_KNEE",
           "AUTO_RHO_SLOPE", "CRTConstants", "CRT_INNER_BLOCK", "LIMB_BITS", "MARGIN_BITS",
           "MAX_MODULI", "MODULI", "MODULI_RULE", "choose_moduli", "crt_constants",
           "residues_into", "rho_capacity", "symmetric_mod"]


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

#: Calibrated slope and offsets of the ``moduli="auto"`` rule (bits; :func:`choose_moduli`,
#: docs/calibration.md).
AUTO_RHO_SLOPE = 0.7
AUTO_OFFSET_BITS = {"fast": -9.0, "accurate": -8.75}
#: Extra slope above the knee: wide exponent ranges (phi >= 4) need more than
#: the 0.7 slope fitted on phi <= 2 predicts (benchmarks/calibration/calibrate_crt_auto.py).
AUTO_RHO_KNEE = -60.0
AUTO_HIGH_SLOPE = 0.25

#: The constants above, as :mod:`.decide` takes them.
MODULI_RULE = ModuliRule(rho_slope=AUTO_RHO_SLOPE, rho_knee=AUTO_RHO_KNEE,
                         high_slope=AUTO_HIGH_SLOPE, offset_bits=tuple(AUTO_OFFSET_BITS.items()))

SCALINGS = ("fast", "accurate")


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
    """``v`` cut into ``count`` ``LIMB_BITS``-bit limbs, lowest first (exact floats)."""
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
    """``w / P`` rounded once to float64."""
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

