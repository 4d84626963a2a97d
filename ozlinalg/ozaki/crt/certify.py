"""Ozaki scheme II's faithful certificate: an output tile rebuilt with a bound of its
reconstruction error, certified within one ulp or bounded in final units
(:mod:`ozlinalg.ozaki.faithful`)."""
from __future__ import annotations

from .. import faithful

__all__ = ["certify_tile"]


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
