"""Undoing the power-of-two scalings of an emulated product, exactly.

Shared by the Ozaki-I driver (:mod:`.gemm`) and Ozaki scheme II (:mod:`.crt`).
"""
from __future__ import annotations

from .._array import fp_errstate
from .passes import generic, passes_for

__all__ = ["apply_exponents", "exponent_factors", "log2_pow2"]


def log2_pow2(xp, v):
    """Exact integer log2 of an array of powers of two."""
    _, e = xp.frexp(v)
    return (e - 1).astype(xp.int32)


_SAFE = 1000  # stay this far inside the float64 exponent range (+-1022)


def exponent_factors(xp, ea, eb, lo, hi):
    """``(2**ea, 2**eb)`` when multiplying by them (first the rows, then the columns)
    is exact for magnitudes ``2**lo .. 2**hi``: no intermediate leaves the normal
    range; None otherwise (:func:`apply_exponents` then rounds once with ``ldexp``)."""
    if ea.size == 0 or eb.size == 0:
        return None
    ea_min, ea_max = int(ea.min()), int(ea.max())
    eb_min, eb_max = int(eb.min()), int(eb.max())
    safe = (
        ea_max + hi < _SAFE and ea_min + lo > -_SAFE
        and ea_max + eb_max + hi < _SAFE and ea_min + eb_min + lo > -_SAFE
        and -_SAFE < eb_min and eb_max < _SAFE
    )
    if not safe:
        return None
    return xp.ldexp(xp.ones(ea.shape), ea), xp.ldexp(xp.ones(eb.shape), eb)


def apply_exponents(xp, acc, ea, eb, lo, hi, engine=None):
    """``acc *= 2**ea[:, None] * 2**eb[None, :]`` exactly, in place.

    ``lo``/``hi`` bound log2 of the non-zero magnitudes of ``acc``. Two
    multiplications by power-of-two vectors are exact while no intermediate
    leaves the normal range; otherwise one ``ldexp`` with the summed exponent
    rounds once, like native FP64 (subnormal and overflowing results).
    ``engine``: one whose fused ``scale_outer`` does the two multiplications in
    one pass.
    """
    if acc.size == 0:
        return
    factors = exponent_factors(xp, ea, eb, lo, hi)
    if factors is not None:
        passes_for(engine, xp).scale_outer(acc, *factors)
    else:
        # Overflow to inf and gradual underflow are the intended FP64 results here.
        with fp_errstate(xp, over="ignore", under="ignore"):
            acc[...] = xp.ldexp(acc, ea[:, None] + eb[None, :])


@generic("scale_outer")
def scale_outer_generic(acc, fa, fb):
    """``acc *= fa[:, None]; acc *= fb[None, :]`` (two roundings, each exact in
    :func:`apply_exponents`' safe case): the generic form of an engine's ``scale_outer``."""
    acc *= fa[:, None]
    acc *= fb[None, :]


@generic("axpy_outer")
def axpy_outer_generic(xp, x, fa, fb, acc):
    """``acc += (x * fa[:, None]) * fb[None, :]``, products in that order: the generic
    form of an engine's ``axpy_outer``. A float64 ``x`` (the engine's product buffer,
    dead after this) is scaled in place, without a temporary."""
    if x.dtype == xp.float64:
        x *= fa[:, None]
        x *= fb[None, :]
        acc += x
    else:
        acc += (x * fa[:, None]) * fb[None, :]
