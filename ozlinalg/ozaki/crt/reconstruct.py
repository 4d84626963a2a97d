"""Ozaki scheme II's reconstruction: C' from its residues' products, exactly, in FP64
limbs (the CRT weights of :func:`.moduli.crt_constants`)."""
from __future__ import annotations

from ...exact import LIMB_BITS, symmetric_mod
from ..passes import generic

__all__ = ["CRTAccumulator", "crt_reconstruct"]


@generic("crt_accumulator")
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
        """Accumulate the exact product ``prod`` of the residues for modulus ``t``."""
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
        """C' rebuilt from its limbs, top limb first."""
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

