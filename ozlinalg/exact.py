"""Exact float64 arithmetic on integers and powers of two, shared by the
emulation (:mod:`ozlinalg.ozaki`) and the engines' fused kernels
(:mod:`ozlinalg.engines`).

Both layers must produce the same bits, so the few primitives whose exact
definition matters to both live here, below both: ``engines/`` never imports
``ozaki/`` (``ozaki/`` imports ``engines/``). Everything is written against
the array namespace ``xp`` (NumPy or CuPy).
"""
from __future__ import annotations

__all__ = [
    "LIMB_BITS",
    "MIN_GRID_EXP",
    "digit_plan",
    "pow2_ceil_exponent",
    "residual_grid",
    "symmetric_mod",
]

#: Grids never go below 2**MIN_GRID_EXP (normalized units): a residual that small
#: (an entry ~2**-1000 below its row maximum) is far beyond any slice count, and
#: a smaller grid would make ``1 / mu`` overflow.
MIN_GRID_EXP = -1000

#: Limbs of the exact CRT accumulation (Ozaki scheme II) hold this many bits.
LIMB_BITS = 40


def pow2_ceil_exponent(xp, m):
    """``ceil(log2 m)`` for positive m (0 where m == 0), exactly, via frexp."""
    f, e = xp.frexp(m)
    # m = f * 2**e with f in [0.5, 1): ceil(log2 m) = e, except e - 1 when f == 0.5.
    return xp.where(f == 0.5, e - 1, e).astype(xp.int32)


def residual_grid(xp, x, width):
    """Per-row grid ``2**ceil(log2 max|x|) * 2**(1 - width)``; 1 for zero rows."""
    m = xp.abs(x).max(axis=1)
    e = xp.maximum(pow2_ceil_exponent(xp, m) + (1 - width), MIN_GRID_EXP)
    mu = xp.ldexp(xp.ones(m.shape), e)
    return xp.where(m > 0, mu, 1.0)


def symmetric_mod(xp, x, p, out=None):
    """Residue of integer-valued float64 ``x`` (|x| <= 2**52) modulo p, in
    ``[-floor(p/2), p - 1 - floor(p/2)]`` (``[-128, 127]`` for 256), exactly."""
    h = float(p // 2)
    pf = float(p)
    q = xp.floor(x / pf)  # may be off by one: r below lies in [-p, 2p)
    r = x - q * pf
    # |r + h| < 3p: the correctly rounded quotient of such small integers
    # floors exactly (a multiplication by 1/p would not: 253 * fl(1/253) < 1).
    q = xp.floor((r + h) / pf)
    r -= q * pf
    if out is not None:
        out[...] = r
        return out
    return r


def digit_plan(bits):
    """Digit width D and count so that ``count * 2**(D + 8) <= 2**52``: an integer
    of ``bits`` bits cut into ``count`` signed digits of D bits, each digit times a
    residue below 2**8, summed, stays an exact float64 integer."""
    bits = max(int(bits), 1)
    for count in range(1, 8):
        d = -(-bits // count)
        if count * 2.0 ** (d + 8) <= 2.0**52:
            return d, count
    raise ValueError(f"ozlinalg: integers of {bits} bits are too wide for the CRT split")
