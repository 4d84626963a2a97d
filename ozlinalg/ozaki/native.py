"""Entries of an emulated product that are computed in native FP64 instead.

``slices="auto"`` / ``moduli="auto"`` hand over the entries whose exponent
spread no count up to the cap serves (or whose magnitude even float64 loses):
they are computed natively, never silently wrong. Shared by the Ozaki-I
driver (:mod:`.gemm`) and Ozaki scheme II (:mod:`.crt`).
"""
from __future__ import annotations

from .._array import fp_errstate
from .._profile import record_native_flops

__all__ = ["native_entries", "native_mask"]


def native_mask(xp, natives, i0, i1, j0, j1):
    """The entries of the tile ``[i0:i1, j0:j1]`` left to native arithmetic (None: none),
    from masks made over other tiles (``{(r0, c0): mask}``: the count's tiles, when the
    products take tiles of their own)."""
    if not natives:
        return None
    mask = natives.get((i0, j0))
    if mask is not None and mask.shape == (i1 - i0, j1 - j0):
        return mask
    mask = None
    for (a0, b0), part in natives.items():
        r0, r1 = max(a0, i0), min(a0 + part.shape[0], i1)
        c0, c1 = max(b0, j0), min(b0 + part.shape[1], j1)
        if r0 < r1 and c0 < c1:
            if mask is None:
                mask = xp.zeros((i1 - i0, j1 - j0), dtype=bool)
            mask[r0 - i0:r1 - i0, c0 - j0:c1 - j0] = part[r0 - a0:r1 - a0, c0 - b0:c1 - b0]
    return mask


def native_entries(xp, c, a, bt, mask):
    """``c[i, j] = a[i] . bt[j]`` in native FP64 where ``mask`` (entries ``auto``
    cannot serve within max_slices; see :func:`ozlinalg.ozaki.counts.slices.plan_slices`).

    Always the gathered sum ``(a[i] * bt[j]).sum()``, a fixed order given ``k``
    (never a BLAS GEMM, whose order depends on its threads and on the tile it
    is given): the same bits for every tile plan, engine and thread count on one
    array library (docs/guarantees.md). Where native arithmetic overflows on the
    way (``inf - inf``: NaN from finite inputs, which the emulation never gives),
    the entry is recomputed with row i and column j scaled to maxima below 1 (no
    term can overflow) and scaled back.
    """
    rows, cols = xp.nonzero(mask)
    count, k = int(rows.size), a.shape[1]
    flops = 2.0 * count * k
    step = max(1, (1 << 22) // max(k, 1))  # gathered blocks of at most 32 MiB
    with fp_errstate(xp, over="ignore", invalid="ignore", under="ignore"):
        vals = xp.empty(count)
        for e0 in range(0, count, step):
            r, q = rows[e0:e0 + step], cols[e0:e0 + step]
            vals[e0:e0 + step] = (a[r] * bt[q]).sum(axis=1)
        bad = ~xp.isfinite(vals)
        if bool(bad.any()):
            r, q = rows[bad], cols[bad]
            ea = xp.frexp(xp.abs(a[r]).max(axis=1))[1]
            eb = xp.frexp(xp.abs(bt[q]).max(axis=1))[1]
            dots = (xp.ldexp(a[r], -ea[:, None]) * xp.ldexp(bt[q], -eb[:, None])).sum(axis=1)
            vals[bad] = xp.ldexp(dots, ea + eb)
    c[rows, cols] = vals
    record_native_flops(flops, "auto: entries beyond max_slices")
