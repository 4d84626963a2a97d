"""Ozaki scheme II's scaling: the shifts that keep ``sum |A'||B'| < P / 2`` (fast:
Cauchy-Schwarz; accurate: from the bound products W), W's operands, and the residues
of the scaled, integerized operands."""
from __future__ import annotations

from ..._array import fp_errstate, row_blocks
from ..counts.estimate import robust_floor
from ..passes import generic, passes_for
from .moduli import MARGIN_BITS, residues_into

__all__ = ["block_shifts"]


def quiet_fp(xp):
    """Floating-point warnings off (the bounds handle zeros and infinities)."""
    return fp_errstate(xp, divide="ignore", invalid="ignore", over="ignore", under="ignore")


def _fast_shifts(xp, na, nb, log2P):
    """Shifts of the fast scaling (Cauchy-Schwarz): ``floor(H - log2 ||x_i||)`` with
    ``H = (log2(P / 2) - margin) / 2``, 0 for zero rows."""
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
    all tiles and the floors exact (:func:`ozlinalg.ozaki.counts.estimate.robust_floor`), so the
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



def bound_operand(xp, engine, x, operand):
    """``-ceil(128 |x|)`` in the engine's slice storage, shape (1, rows, k)."""
    rows, k = x.shape
    passes = passes_for(engine, xp)
    out = passes.slice_storage(x, 1, "crt", operand)
    bound = passes.crt_bound

    def block(r0, r1):
        bound(x[r0:r1], out[0, r0:r1])

    engine.map_rows(block, rows, k)
    return out


@generic("crt_bound")
def bound_generic(xp, x, out):
    """``out = -ceil(128 |x|)``: the generic form of an engine's ``crt_bound``."""
    out[...] = -xp.ceil(xp.abs(x) * 128.0)


@generic("row_stats")
def row_stats_generic(xp, engine, a, out, top=None):
    """``(exps, fsq, dsum)`` of the raw rows ``a``: the exponents of ``normalize_rows``,
    the fixed-point sums of the normalized rows' squares (``fixed_sums``) and, where
    ``out`` (int8, ``a``'s shape) is given, the bound operand ``out = -ceil(128 |x|)``
    (``crt_bound``) and its digit sums (``digit_sums``; None without ``out``): the
    generic form of an engine's ``row_stats``, which takes them with no normalized
    copy of ``a``. ``top``: the rows' maxima of ``|a|`` where the caller has them
    (finite rows), which an engine may take instead of reading them again; the
    values do not depend on it."""
    passes = passes_for(engine, xp)
    x, e = passes.normalize_rows(a)
    fsq = passes.fixed_sums(x, True) if x.shape[1] else xp.zeros(x.shape[0])
    if out is None:
        return e, fsq, None
    passes.crt_bound(x, out)
    return e, fsq, passes.digit_sums(out[None])[0]


def integerize_into(xp, engine, x, shift, round_rows, mods, bits, out):
    """Residues of ``A' = rint|trunc(2**shift x)`` for every modulus into ``out``."""
    rows, k = x.shape
    mult = xp.ldexp(xp.ones(shift.shape), shift.astype(xp.int32))
    residues = passes_for(engine, xp).crt_residues

    def block(r0, r1):
        residues(x[r0:r1], mult[r0:r1], round_rows[r0:r1], mods, bits, out[:, r0:r1])

    engine.map_rows(block, rows, k)


@generic("crt_residues")
def residues_generic(xp, x, mult, round_rows, mods, bits, out):
    """Residues of ``rint|trunc(x * mult[:, None])`` (``round_rows``) for every modulus
    into ``out``: the generic form of an engine's ``crt_residues``."""
    v = x * mult[:, None]
    vi = xp.where(round_rows[:, None], xp.rint(v), xp.trunc(v))
    residues_into(xp, vi, mods, bits, out)



class RecomputedBounds:
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



def block_shifts(blk, rows, bounds, log2P):
    """``(mu, nu)`` of an inner block (:mod:`.block`) for ``P = 2**log2P``: from the row
    norms (fast scaling) or from the bound products W (accurate)."""
    if blk.scaling == "fast":
        return _fast_shifts(blk.xp, rows.na, rows.nb, log2P)
    return _accurate_shifts(blk.xp, bounds.tiles, log2P, blk.m, blk.p, bounds.planner)
