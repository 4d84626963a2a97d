"""Exact power-of-two balancing of a product's inner dimension.

The emulation splits every row of ``a`` and column of ``b`` against its own
largest entry, so a term ``a_ik b_kj`` in which a large ``a_ik`` meets a small
``b_kj`` (or the reverse) keeps fewer bits than the slice count suggests:
``slices="auto"`` then needs more slices (an inner dimension scaled by
``2**(+-20)`` takes 14 instead of 9), and past ~80 bits of imbalance no count
reaches FP64 accuracy. Scaling column k of ``a`` by ``2**-f_k`` and row k of
``b`` by ``2**f_k`` leaves the product unchanged, exactly, and with
``f_k = floor((e(max|a_:k|) - e(max|b_k:|)) / 2)`` makes the column maxima of
``a`` and the row maxima of ``b`` equal within a factor 2.

Blocked factorizations of badly scaled matrices produce such products (in a
triangular solve with ``A = D S D``, ``l_ik ~ d_i / d_k`` meets
``x_k ~ 1 / d_k``); they balance every product (docs/factorizations.md).
``ozlinalg.matmul`` balances by default only when some ``|f_k|`` reaches
:data:`AUTO_MIN_SHIFT` (``options(balance="auto")``), so products of
comparably scaled operands, the calibrated case of ``slices="auto"``, keep
their results bit for bit (maxima over very few entries, say p = 3 at
phi = 4, can reach it; ``calibrate_auto.py --small`` still finds no
under-pick there).
"""
from __future__ import annotations

import numpy as np

from .._array import row_blocks
from .passes import generic, passes_for

__all__ = ["AUTO_MIN_SHIFT", "balance_inner", "min_shift_for"]

#: ``balance="auto"`` acts when some |f_k| reaches this many bits (a 2**24 ratio
#: between a column maximum of ``a`` and the matching row maximum of ``b``). The
#: papers' inputs at their sizes reach |f_k| <= 9 (phi = 4, 64 x 16384 x 64), so
#: they are left as they are; an inner dimension scaled by 2**(+-20) or more is
#: balanced.
AUTO_MIN_SHIFT = 12

_LIMIT = 900  # keep every scaled value this far inside the normal range


def min_shift_for(mode):
    """The ``min_shift`` of :func:`balance_inner` for ``balance=mode`` (None: never)."""
    if mode is True:
        return 1
    if mode is False:
        return None
    if mode == "auto":
        return AUTO_MIN_SHIFT
    raise ValueError(f"ozlinalg: balance must be 'auto', True or False, got {mode!r}")


def balance_inner(xp, a, b, min_shift=1, engine=None):
    """``(a D^-1, D b, tops)`` with ``D = diag(2**f_k)`` (module doc), or ``(a, b, tops)``
    unchanged.

    Unchanged when no ``|f_k|`` reaches ``min_shift``, when an operand holds
    Inf/NaN, or when a scaled entry would leave the normal range. ``engine``: one
    whose fused ``abs_max_both`` pass takes the maxima. ``tops``: where the operands
    come back unchanged, the row maxima of ``a`` and the column maxima of ``b``
    (``abs_max``'s contract), read in the same pass as the maxima the balancing needs,
    so that the product's Inf / NaN check need not read the operands again; None where
    they were scaled (or empty).
    """
    if a.size == 0 or b.size == 0:
        return a, b, None
    passes = passes_for(engine, xp)
    ra, ca = passes.abs_max_both(a)
    rb, cb = passes.abs_max_both(b)
    tops = (ra, cb)
    if not (bool(xp.isfinite(ca).all()) and bool(xp.isfinite(rb).all())):
        return a, b, tops
    ok = (ca > 0) & (rb > 0)
    ea = xp.frexp(xp.where(ok, ca, 1.0))[1]
    eb = xp.frexp(xp.where(ok, rb, 1.0))[1]
    f = (ea - eb) // 2
    fmax, fmin = int(f.max()), int(f.min())
    if max(fmax, -fmin) < max(1, int(min_shift)):
        return a, b, tops
    lo_a = _log2_min_nonzero(xp, a, passes.abs_min_nonzero)
    lo_b = _log2_min_nonzero(xp, b, passes.abs_min_nonzero)
    hi_a = int(xp.frexp(ca.max())[1])
    hi_b = int(xp.frexp(rb.max())[1])
    if (lo_a - fmax < -_LIMIT or hi_a - fmin > _LIMIT
            or lo_b + fmin < -_LIMIT or hi_b + fmax > _LIMIT):
        return a, b, tops
    f = f.astype(xp.int32)
    if a.dtype.kind == "f" and b.dtype.kind == "f" and -1022 <= fmin and fmax <= 1022:
        # one multiplication by an exact power of two: the correctly rounded 2**f x, as
        # ldexp's, at a fraction of libm ldexp's cost per entry
        s = xp.exp2(f.astype(xp.float64))
        return a * (1.0 / s)[None, :], b * s[:, None], None
    return _ldexp(xp, a, -f[None, :]), _ldexp(xp, b, f[:, None]), None


@generic("abs_max")
def abs_max_generic(xp, x, axis):
    """``abs(x).max(axis)`` (0 for empty lines); for floating ``x`` without the full-size
    temporary (30 % faster at n = 4096; NaN propagates alike, and a zero's sign does not
    matter here). The generic form of an engine's fused ``abs_max`` (one parallel pass),
    which may give Inf for NaN: only finite maxima are used."""
    if x.shape[axis] == 0:
        return xp.zeros(x.shape[1 - axis])
    if x.dtype.kind != "f":  # complex moduli; integers, whose negation may wrap
        return xp.abs(x).max(axis=axis)
    return xp.maximum(x.max(axis=axis), -x.min(axis=axis))


@generic("abs_max_both")
def abs_max_both_generic(xp, x):
    """``(abs_max(x, 1), abs_max(x, 0))``: the generic form of an engine's fused
    ``abs_max_both`` (both in one read)."""
    return abs_max_generic(xp, x, 1), abs_max_generic(xp, x, 0)


def _ldexp(xp, x, e):
    """``x * 2**e`` exactly; complex ``x`` part by part."""
    if x.dtype.kind != "c":
        return xp.ldexp(x, e)
    out = xp.empty(np.broadcast_shapes(x.shape, e.shape), dtype=x.dtype)
    out.real = xp.ldexp(x.real, e)
    out.imag = xp.ldexp(x.imag, e)
    return out


@generic("abs_min_nonzero")
def abs_min_nonzero_generic(xp, x):
    """The smallest nonzero ``|x|`` of a real array, as a float (inf where there is none;
    NaN is passed over): the generic form of an engine's fused ``abs_min_nonzero``."""
    if xp is np and x.ndim == 2:
        # row blocks of about 2**16 entries (in cache), no full-size temporaries
        m = np.inf
        for r0, r1 in row_blocks(*x.shape, 1 << 16):
            ax = np.abs(x[r0:r1])
            m = min(m, float(ax.min(initial=np.inf, where=ax > 0)))
        return m
    ax = xp.abs(x)
    return float(xp.where(ax > 0, ax, xp.inf).min()) if x.size else float("inf")


def _log2_min_nonzero(xp, x, min_nonzero):
    if x.dtype.kind == "c":  # the smallest nonzero real or imaginary part
        return min(_log2_min_nonzero(xp, x.real, min_nonzero),
                   _log2_min_nonzero(xp, x.imag, min_nonzero))
    m = min_nonzero(x)
    return -2000 if m == float("inf") else int(np.frexp(m)[1]) - 1
