"""Ozaki scheme II's driver: :func:`crt_matmul_2d` cuts the inner dimension into blocks
of at most :data:`CRT_INNER_BLOCK` and runs :func:`.block.crt_block` on each (faithful
mode: certifies the sum of the blocks, recomputing the entries left uncertified)."""
from __future__ import annotations

from ..._array import to_numpy
from .. import faithful
from ..counts.moduli import warn_short
from .block import crt_block
from .moduli import CRT_INNER_BLOCK, MAX_MODULI, SCALINGS

__all__ = ["CRT_INNER_BLOCK", "crt_matmul_2d"]


def crt_matmul_2d(xp, engine, a, b, moduli="auto", scaling="accurate", max_moduli=20,
                  profile_counts=None, timers=None, tiles=None, accuracy="dgemm",
                  recompute=True, check=False, keep_bounds=True, retile=None, row_max=None):
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
        smallest count predicted to reach DGEMM-level accuracy (package doc),
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
        ``moduli="auto"`` taking up to ``faithful.EXTRA_MODULI`` more moduli (2 to 4
        from a sampled prediction on large products, :func:`.certify.faithful_moduli`); the
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
    retile : callable, optional
        ``retile(nmod)``: the tiles of the product phase once the count is known (the
        memory plan's :func:`ozlinalg.ozaki.memory.product_plan`: W and the count's
        passes are over by then), or None; without it (or None) the products take
        ``tiles``. Same result.
    row_max : (array, array), optional
        The maxima of ``|a|``'s rows and ``|b|``'s columns (finite), where the caller
        has them: the count's statistics then need not read them again (one inner
        block only). Same result.

    Returns
    -------
    c : array float64 (m, p)
    """
    if scaling not in SCALINGS:
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
            c, res = crt_block(xp, engine, a[:, k0:k1], bt[:, k0:k1], moduli, scaling,
                                max_moduli, counts, timers, tiles, None,
                                "certify" if parts is None else "bound",
                                keep_bounds=keep_bounds, retile=retile)
            if parts is not None:
                parts.add(c, res)
        if parts is not None:
            c, bnd = parts.result()
            ok = faithful.certify(xp, c, bnd)
        else:
            ok = res
        counts["certified"] = int(ok.sum())
        if recompute:  # a strip of tile rows at a time: its indices, not the output's
            mt = (tiles or (m, p))[0]
            counts["recomputed"] = sum(
                faithful.recompute_uncertified(xp, c, ok[i0:i0 + mt], a, bt, tiles,
                                               offset=(i0, 0), threads=engine.threads,
                                               scratch=engine.scratch)
                for i0 in range(0, m, mt))
        else:
            counts["uncertified"] = tuple(to_numpy(v) for v in xp.nonzero(~ok))
        return c
    verdicts = [] if check and moduli != "auto" else None
    whole = (row_max if nblocks == 1 and row_max is not None
             and all(v is not None for v in row_max) else None)
    for k0 in range(0, n, step):
        k1 = min(n, k0 + step)
        part = crt_block(xp, engine, a[:, k0:k1], bt[:, k0:k1], moduli, scaling,
                          max_moduli, counts, timers, tiles, c, verdicts=verdicts,
                          keep_bounds=keep_bounds, retile=retile, row_max=whole)
        if c is None:
            c = part
    if verdicts:
        warn_short(verdicts, moduli, max_moduli, m * p, scaling)
    return c

