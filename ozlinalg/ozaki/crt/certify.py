"""Ozaki scheme II's faithful certificate: an output tile rebuilt with a bound of its
reconstruction error, certified within one ulp or bounded in final units
(:mod:`ozlinalg.ozaki.faithful`)."""
from __future__ import annotations

import numpy as np

from ..._array import fp_errstate, to_numpy
from .. import faithful
from .moduli import crt_constants

__all__ = ["TRADE_FRACTION", "certify_tile", "faithful_moduli"]

#: Extra moduli ``moduli="auto"`` keeps in faithful mode whatever the prediction.
MIN_EXTRA = 2
#: The uncertified fraction one modulus must save to be taken. Measured on one core at
#: n = 2048, phi = 0.5: 15 + 3 moduli leave 57504 entries, 15 + 4 leave 3650, and both
#: products cost the same (the exact recomputation of 1.3 % of the entries, Dot2 over
#: k, is one modulus' INT8 GEMM and passes); the threshold keeps a margin of 6.
TRADE_FRACTION = 2e-3


def certify_tile(xp, engine, faith, acc, rows, ints, k, native, tile):
    """``(c, res)`` of the output tile ``tile = (i0, i1, j0, j1)``: C' from the
    accumulator ``acc`` and ``res``, the certified entries (``faith == "certify"``) or
    their error bounds in final units (``"bound"``); the tile's native entries
    (``native``, a mask or None) are never certified (bound ``inf``). ``rows``, ``ints``:
    the block's row vectors and integer plan (:mod:`.block`); ``k``: the inner length."""
    i0, i1, j0, j1 = tile
    vec = faithful.CRTBound(xp, rows.sx[i0:i1], rows.sy[j0:j1], ints.mu[i0:i1],
                            ints.nu[j0:j1], ints.ra[i0:i1], ints.rb[j0:j1], k)
    ea, eb = ints.ea[i0:i1], ints.eb[j0:j1]
    fused = getattr(acc, "faithful_certify", None) if faith == "certify" else None
    if fused is not None:  # the rebuild and the certificate in one pass
        cpr, res = fused(vec, ea, eb, faithful._SLACK)
        if native is not None:
            res &= ~native
        return cpr, res
    cpr, slop = acc.faithful_result()
    if faith == "certify":
        res = faithful.crt_certify(xp, engine, cpr, slop, vec, ea, eb)
        if native is not None:
            res &= ~native
    else:
        for _, _, sl in faithful._blocks(slop):
            slop[sl] = vec.bound(xp, slop, sl)
        res = faithful.scaled_bound(xp, slop, ea, eb)
        if native is not None:
            res[native] = xp.inf
    return cpr, res


def faithful_moduli(xp, a, bt, rows, ints, k, n_auto, n_max):
    """The count of faithful mode's ``moduli="auto"``: between ``n_auto + MIN_EXTRA``
    and ``n_max`` (the shifts ``ints`` are those of ``n_max``), the fewest whose
    predicted uncertified fraction exceeds that of one more modulus by less than
    :data:`TRADE_FRACTION` (its exact recomputation would cost more than the modulus).

    Notes
    -----
    The prediction: :data:`ozlinalg.ozaki.faithful.SAMPLE` rows of A by as many
    columns of B, their products correctly rounded (:mod:`.exactdot`: the same values
    on every engine, so the count does not depend on the engine, the tiling or the
    threads), and each entry's ratio
    of the certificate's bound (:class:`ozlinalg.ozaki.faithful.CRTBound`) to the gap of
    its C' at ``n_max``; a count with ``log2 P`` smaller by ``d`` takes shifts smaller by
    about ``d / 2`` each, hence a bound ``2**(d / 2)`` times larger against C'
    (:func:`ozlinalg.ozaki.faithful.predicted_uncertified`). A cost choice only: every
    count's certificate is rigorous, the entries it leaves are recomputed exactly."""
    from ..exactdot import exact_dots

    lo = min(n_max, n_auto + MIN_EXTRA)
    if lo >= n_max:
        return n_max
    m, p = a.shape[0], bt.shape[0]
    si, sj = faithful.sample_indices(m), faithful.sample_indices(p)
    ri, cj = np.repeat(si, sj.size), np.tile(sj, si.size)
    c = exact_dots(xp, a, bt, ri, cj).reshape(si.size, sj.size)
    h = lambda v, idx: to_numpy(v[xp.asarray(idx)])  # noqa: E731
    vec = faithful.CRTBound(np, h(rows.sx, si).astype(np.float64),
                            h(rows.sy, sj).astype(np.float64), h(ints.mu, si),
                            h(ints.nu, sj), h(ints.ra, si), h(ints.rb, sj), k)
    bound = vec.block(np, (slice(None), slice(None)))
    ea = h(ints.ea, si).astype(np.int64)
    eb = h(ints.eb, sj).astype(np.int64)
    with fp_errstate(np, over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        cp = np.abs(np.ldexp(c, -(ea[:, None] + eb[None, :]).clip(-4000, 4000).astype(
            np.int32)))
        rho = bound / np.spacing(np.where(np.isfinite(cp), cp, 0.0))
    rho = np.where(np.isnan(rho), np.inf, rho)
    top = crt_constants(n_max).log2P
    counts = list(range(lo, n_max + 1))
    ts = [2.0 ** (-(top - crt_constants(n).log2P) / 2.0) for n in counts]
    f = faithful.predicted_uncertified(rho, ts)
    n = n_max
    while n > lo and f[n - 1 - lo] - f[n - lo] < TRADE_FRACTION:
        n -= 1
    return n
