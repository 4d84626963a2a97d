"""The emulated DGEMM driver below the front door: shapes, balancing, the memory
plan, output tiles and inner blocks, the Inf / NaN lines and the faithful tiling.

Data flow for ``C = A @ B`` (A is m x n, B is n x p; operands validated and
promoted by :mod:`ozlinalg._matmul`, which also brings the options value and
the engine):

1. stacks and vectors are cut into 2-D products; complex ones are built from
   real ones (:mod:`.complex`); small ones may take the engine's one-call path
   (:mod:`.small`); the inner dimension may be balanced (:mod:`.balance`);
2. the memory plan (:mod:`.memory`) chooses the output tiles, or raises before
   anything is allocated when an explicit limit is below its minimum;
3. rows of A / columns of B holding Inf or NaN are set aside and computed
   natively at the end, so every non-finite entry of C is what native FP64 gives;
4. the inner dimension is cut into blocks (2**17 for the INT8 methods, keeping
   the slice width at 7 bits; 1024 for SplitFP), and each tile and block goes
   through the Ozaki-I core (:mod:`.gemm`) or Ozaki-II (:mod:`.crt`); inner
   blocks are summed with compensation.
"""
from __future__ import annotations

import functools
import time

import numpy as np

from .._array import fp_errstate
from .._profile import CallRecord, Timer, active_profiles, record_call, record_native_flops
from ..engines import get_engine, release_after_oom
from . import faithful, memory, params
from .balance import balance_inner
from .complex import complex_matmul
from .counts.adequacy import (
    count_warning,
    q_floor,
    row_exponents,
    sampled_settles,
    share_windows,
)
from .counts.slices import plan_auto, slice_thresholds
from .gemm import ProductPlan, block_width, emulate_block, faithful_block, predicted_slices
from .native import native_mask
from .passes import passes_for
from .small import small_product

__all__ = ["MEMORY_MODEL", "emulated_matmul", "emulated_matmul_2d", "product_memory_plan",
           "tile_shape", "working_bytes"]

MEMORY_MODEL = memory.MEMORY_MODEL
working_bytes = memory.working_bytes


def emulated_matmul(xp, a, b, meth, slices, opts, min_shift, order="C", engine=None,
                    small=True):
    """``a @ b`` through the emulation, for validated float64 / complex128 operands of at
    least one dimension with NumPy's matmul shape rules (see :func:`ozlinalg.matmul`).

    ``meth``: the :class:`~ozlinalg.ozaki.params.Method`; ``slices``: validated count or
    "auto"; ``opts``: the options value of the call; ``min_shift``: the balancing's
    threshold (:func:`ozlinalg.ozaki.balance.min_shift_for`; None: no balancing);
    ``order``: memory order of a real 2-D result; ``engine``: the engine (None: the one
    ``opts.engine`` names for ``xp``, fetched only where a product needs it);
    ``small``: False where the caller has just tried the one-call small path on these
    2-D real operands (:func:`ozlinalg._matmul.product`), which then is not run again.
    """
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(
            f"ozlinalg.matmul: inner dimensions differ: a has shape {a.shape}, "
            f"b has shape {b.shape} ({a2.shape[-1]} != {b2.shape[-2]})"
        )
    is_complex = a.dtype.kind == "c" or b.dtype.kind == "c"
    if engine is None and min_shift is not None:
        engine = get_engine(xp, opts.engine)

    def real_2d(x, y, order="C", small=True):
        c = (small_product(xp, x, y, meth, slices, opts, min_shift, order=order, engine=engine)
             if small else None)
        if c is not None:
            return c
        held, tops = 0, None
        if min_shift is not None:
            x0, y0 = x, y
            x, y, tops = balance_inner(xp, x, y, min_shift, engine)
            held = _copies_bytes((x, x0), (y, y0))
        return emulated_matmul_2d(xp, x, y, meth, slices, opts, order=order, held=held,
                                  engine=engine, tops=tops)

    def product_2d(x, y):
        if not is_complex:
            return real_2d(x, y)
        if min_shift is not None:
            x, y, _ = balance_inner(xp, x, y, min_shift, engine)
        # faithful: each part of C is ONE real product (4m-fused), so that it is
        # certified itself, not a difference of certified products
        scheme = "4m-fused" if opts.accuracy == "faithful" else opts.complex_scheme
        return complex_matmul(lambda u, v: emulated_matmul_2d(xp, u, v, meth, slices, opts,
                                                              engine=engine),
                              x, y, scheme=scheme)

    if a.ndim == 2 and b.ndim == 2 and not is_complex:
        # the one-call small path comes first in real_2d, before any other set-up: the
        # blocked routines make many small products
        return real_2d(a, b, order, small)
    if a2.ndim == 2 and b2.ndim == 2:
        c = product_2d(a2, b2)
    else:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        ab = xp.broadcast_to(a2, batch + a2.shape[-2:])
        bb = xp.broadcast_to(b2, batch + b2.shape[-2:])
        c = xp.empty(batch + (a2.shape[-2], b2.shape[-1]),
                     dtype=xp.complex128 if is_complex else xp.float64)
        for idx in np.ndindex(*batch):
            c[idx] = product_2d(ab[idx], bb[idx])
    if a.ndim == 1:
        c = c[..., 0, :]
    if b.ndim == 1:
        c = c[..., 0]
    return c


def _copies_bytes(*pairs):
    """Bytes of the operands ``new`` of ``(new, old)`` pairs that are copies (the
    balanced operands): working memory the product's plan must leave room for."""
    return sum(new.nbytes for new, old in pairs if new is not old)


def emulated_matmul_2d(xp, a, b, meth, slices, opts, order="C", held=0, engine=None,
                       tops=None):
    """2-D float64 product through the emulation (arguments already validated).

    ``order``: memory order of the result ("C", or "F" for the column-major
    work arrays of the factorizations, whose updates ``c -= a @ b`` then need
    no transposing pass). The values do not depend on it. ``held``: bytes the
    caller holds for this product beside its own inputs (the balanced copies of
    ``a`` and ``b``), counted in the memory plan. ``engine``: the engine (None:
    the one ``opts.engine`` names for ``xp``). ``tops``: the row maxima of ``a`` and the
    column maxima of ``b`` (``abs_max``'s contract) where the caller has them (the
    balancing reads them with its own), else None: read here.
    """
    m, n = a.shape
    p = b.shape[1]
    if m == 0 or p == 0 or n == 0:
        return xp.zeros((m, p), order=order)
    faith = opts.accuracy == "faithful"
    if min(m, n, p) < opts.min_size and not faith:
        record_native_flops(2.0 * m * n * p, "matmul below min_size")
        return xp.matmul(a, b)

    if engine is None:
        engine = get_engine(xp, opts.engine)
    if order not in engine.output_orders:
        c = emulated_matmul_2d(xp, a, b, meth, slices, opts, held=held, engine=engine,
                               tops=tops)
        return xp.asfortranarray(c) if order == "F" else c
    prof_on = bool(active_profiles())
    sync = engine.synchronize if prof_on else None
    t0 = time.perf_counter()
    timers = {k: Timer(prof_on, sync) for k in ("split", "int8", "acc")}
    counts = {"int8_gemms": 0, "engine_calls": 0, "passes": 0, "slices": []}

    # The memory plan first: a limit below the smallest plan raises before anything
    # is allocated (the Inf / NaN copies are added once they are known, below).
    mem = _MemoryArgs(xp, engine, meth, slices, opts, m, n, p)
    mem.check(mem.plan(held), m, n, p, held)

    # Inf/NaN: those rows of A / columns of B go through native FP64 at the end.
    if tops is None:
        bad_rows, top_a = _nonfinite_lines(xp, engine, a, 1)
        bad_cols, top_b = _nonfinite_lines(xp, engine, b, 0)
    else:
        top_a, top_b = tops
        bad_rows, bad_cols = ~xp.isfinite(top_a), ~xp.isfinite(top_b)
    any_bad_rows = bool(bad_rows.any())
    any_bad_cols = bool(bad_cols.any())
    extra = (held + _nonfinite_bytes(m, n, p, bad_rows, bad_cols, any_bad_rows, any_bad_cols)
             + (8 * m * p if order == "F" and mem.crt else 0))
    mplan = mem.plan(extra)
    mem.check(mplan, m, n, p, held)
    aw = xp.where(bad_rows[:, None], 0.0, a) if any_bad_rows else a
    bw = xp.where(bad_cols[None, :], 0.0, b) if any_bad_cols else b
    bt = bw.T  # columns of B as rows: both operands are sliced row-wise
    # the maxima of the lines set aside are those of zeros now (for the count check)
    if any_bad_rows:
        top_a = xp.where(bad_rows, 0.0, top_a)
    if any_bad_cols:
        top_b = xp.where(bad_cols, 0.0, top_b)

    s_max = mem.s_max
    mt, pt = mplan.tiles
    plan = ProductPlan(xp, engine, meth, slices, opts, timers, counts, order, (mt, pt),
                       mem.block, functools.partial(mem.product_tiles, engine, extra))
    try:
        if mem.explicit:  # kept scratch buffers: within the limit less the plan
            trim_scratch(engine, mem.limit - mplan.need)
        c = _tiled_product(plan, aw, bt, (top_a, top_b), mplan.keep_bounds)
    except MemoryError as exc:  # cupy's OutOfMemoryError is a MemoryError too
        # whatever the pool kept would only make the next attempt fail as well
        released = release_after_oom()
        raise MemoryError(
            f"ozlinalg.matmul: out of {engine.device} memory for a ({m} x {n}) @ ({n} x {p}) "
            f"product with up to {s_max} slices: its {mt} x {pt} output tiles were planned "
            f"at {mplan.need / 2**20:.2f} MiB of working memory besides the inputs and the "
            f"{8 * m * p / 2**20:.2f} MiB result; the scratch pool was released "
            f"({released / 2**20:.0f} MiB of kept buffers freed); lower "
            f"ozlinalg.options(memory_limit=...) (now {mem.limit / 2**20:.2f} MiB) to use "
            f"smaller tiles"
        ) from exc

    # The lines holding Inf / NaN, natively. The BLAS kernels multiply padding and
    # zeros by Inf on some CPUs (invalid) and not on others: those flags say nothing
    # about the inputs, so they are not passed on as warnings.
    if any_bad_rows or any_bad_cols:  # (an errstate costs microseconds: tiny products)
        with fp_errstate(xp, invalid="ignore"):
            if any_bad_rows:
                c[bad_rows] = xp.matmul(a[bad_rows], b)
            if any_bad_cols:
                c[:, bad_cols] = xp.matmul(a, b[:, bad_cols])

    if prof_on:
        engine.synchronize()
        s_used = max(counts["slices"])
        record_call(CallRecord(
            method=meth.name, shape=(m, n, p), slices=s_used,
            int8_gemms=counts["int8_gemms"], engine_calls=counts["engine_calls"],
            accumulation_passes=counts["passes"],
            time_split=timers["split"].total, time_int8=timers["int8"].total,
            time_accumulate=timers["acc"].total, time_total=time.perf_counter() - t0,
            device=engine.device, engine=engine.describe(),
            accuracy=opts.accuracy, certified=counts.get("certified", 0),
            recomputed=counts.get("recomputed", 0),
        ))
    return c


def _nonfinite_lines(xp, engine, x, axis):
    """``(bad, top)``: True for the rows (``axis=1``) or columns (``axis=0``) of ``x``
    holding Inf or NaN, and the lines' maxima of ``|x|`` (non-finite exactly on the bad
    lines), in one pass (the engine's ``abs_max``, :mod:`.passes`)."""
    top = passes_for(engine, xp).abs_max(x, axis)
    return ~xp.isfinite(top), top


def _nonfinite_bytes(m, n, p, bad_rows, bad_cols, any_rows, any_cols):
    """Bytes of the Inf / NaN handling: the operands' copies with those lines zeroed, and
    the native products of the lines (with their gathered operands)."""
    extra = 0
    if any_rows:
        r = int(bad_rows.sum())
        extra += 8 * m * n + 8 * r * (n + p)
    if any_cols:
        c = int(bad_cols.sum())
        extra += 8 * n * p + 8 * c * (m + n)
    return extra


def _tiled_product(plan, aw, bt, row_max=(None, None), keep_bounds=True):
    """The emulated product over output tiles ``plan.tiles`` and inner blocks.

    Tiles bound the working memory only: ``slices="auto"`` chooses one count per
    inner block for the whole product (and Ozaki scheme II plans its count and
    scalings over all tiles), so the result does not depend on the tiles, i.e.
    on ``memory_limit`` or on the engine's slice size. A fixed count is checked
    against auto's (:mod:`.adequacy`; ``row_max``: the maxima of ``|aw|`` and
    ``|bt|`` per row where known), a warning on the side. ``keep_bounds``: Ozaki-II
    keeps its bound products for the whole output (False: recomputes them per tile
    and pass; the memory plan's choice, :mod:`.memory`). In faithful mode the entries
    the bound leaves are recomputed exactly, tile by tile
    (``counts["recomputed"]``).
    """
    xp, meth, slices, opts = plan.xp, plan.meth, plan.slices, plan.opts
    timers, counts, order, block = plan.timers, plan.counts, plan.order, plan.block
    m, n = aw.shape
    p = bt.shape[0]
    mt, pt = plan.tiles
    if meth.split in ("crt", "crt-fast"):
        from .crt import crt_matmul_2d

        c = crt_matmul_2d(xp, plan.engine, aw, bt.T, moduli=slices,
                          max_moduli=min(opts.max_slices, 32),
                          scaling="fast" if meth.split == "crt-fast" else "accurate",
                          profile_counts=counts, timers=timers, tiles=plan.tiles,
                          accuracy=opts.accuracy,
                          check=opts.accuracy != "faithful" and opts.count_check,
                          keep_bounds=keep_bounds, retile=plan.retile, row_max=row_max)
        return xp.asfortranarray(c) if order == "F" else c
    tile_list = [(i0, j0) for i0 in range(0, m, mt) for j0 in range(0, p, pt)]
    if opts.accuracy == "faithful":
        return _tiled_faithful(plan, aw, bt, tile_list)
    if slices != "auto" and opts.count_check:
        with timers["split"]:
            _check_fixed_count(plan, aw, bt, int(slices), tile_list, row_max)
    plans = None
    if slices == "auto" and (len(tile_list) > 1 or _split_products(plan, m, p)):
        plans = _global_plans(plan, aw, bt, tile_list)
    tile_list, plans, (mt, pt) = _product_tiles(plan, plans, tile_list, m, p)
    c = None if len(tile_list) == 1 else xp.empty((m, p), order=order)
    # A's slices carried along a row of tiles (one inner block: with several, each
    # block's would be kept at once, more than the memory plan counts)
    kept, row = ({}, None) if len(tile_list) > 1 and n <= block else (None, None)
    for i0, j0 in tile_list:
        tile = None
        comp = None
        if kept is not None and i0 != row:
            kept.clear()
            row = i0
        for k0 in range(0, n, block):
            part = emulate_block(plan, aw[i0:i0 + mt, k0:k0 + block],
                                 bt[j0:j0 + pt, k0:k0 + block],
                                 None if plans is None else plans(i0, j0, k0), kept)
            if tile is None:
                tile = part
                continue
            # Inner blocks: compensated sum, the block results may cancel.
            with timers["acc"]:
                if comp is None:
                    comp = xp.zeros_like(tile)
                faithful.two_sum_into(xp, tile, comp, part)
            counts["passes"] += 1
        if comp is not None:
            tile += comp
        if c is None:
            c = tile
        else:
            c[i0:i0 + mt, j0:j0 + pt] = tile

    return c


def trim_scratch(engine, keep):
    """Free the oldest buffers the engine's scratch pool keeps until at most ``keep``
    bytes are kept (none kept beside a phase planned up to the limit)."""
    if engine.scratch is not None:
        engine.scratch.trim(max(0, keep))


def _split_products(plan, m, p):
    """Whether the products may need more than one tile where the count's phase takes
    the whole output (its own plan has no slices): then ``slices="auto"`` decides its
    count for the whole product first, so that every tile takes the same."""
    if plan.retile is None:
        return False
    return plan.retile(plan.opts.max_slices, start=False) != (m, p)


def _product_tiles(plan, plans, tile_list, m, p):
    """``(tile_list, plans, tiles)`` of the products: the memory plan's tiles for the
    count chosen (``plan.retile``: planned for the most slices auto may take, and on
    tiles of its own, the count's phase holding no slices), and ``plans(i0, j0, k0)``,
    each tile's ``(s, native)`` with the count's native masks mapped onto it (None for
    a fixed count). The same bits on any tiles: one count per inner block for the
    whole product."""
    xp, tiles = plan.xp, plan.tiles
    by_tile = None
    if plans is not None:
        counts = {k0: s for (_, _, k0), (s, _) in plans.items()}
        natives = {k0: {(i0, j0): native for (i0, j0, kk), (_, native) in plans.items()
                        if kk == k0 and native is not None} for k0 in counts}

        def by_tile(i0, j0, k0):
            return counts[k0], native_mask(xp, natives[k0], i0, min(m, i0 + mt), j0,
                                           min(p, j0 + pt))
    new = None  # one tile whose products fit the most slices (_split_products): it stays
    if plan.retile is not None and (plans is not None or plan.slices != "auto"):
        new = plan.retile(max(counts.values()) if plans is not None else int(plan.slices))
    new = new or tiles
    if new != tiles:
        tile_list = [(i0, j0) for i0 in range(0, m, new[0]) for j0 in range(0, p, new[1])]
    mt, pt = new
    return tile_list, by_tile, new


def _tiled_faithful(plan, aw, bt, tile_list):
    """:func:`_tiled_product` for ``accuracy="faithful"`` (Ozaki-I EF methods): each tile
    and inner block with its certificate (:mod:`.faithful`); the entries not certified
    are recomputed exactly as each tile is done (their indices never held for the
    whole output: the memory plan counts a tile's)."""
    xp, engine, slices, opts = plan.xp, plan.engine, plan.slices, plan.opts
    timers, counts, block = plan.timers, plan.counts, plan.block
    m, n = aw.shape
    p = bt.shape[0]
    mt, pt = plan.tiles
    plans = None
    counts_k = {}
    if slices == "auto":  # the DGEMM-level count, decided for the whole product, plus more
        plans = _global_plans(plan, aw, bt, tile_list)
        for k0 in range(0, n, block):  # one count per inner block, for every tile
            s0 = plans[(tile_list[0][0], tile_list[0][1], k0)][0]
            s = faithful.faithful_slices(s0, opts.max_slices)
            kb = min(n, k0 + block) - k0
            if (m * p * kb >= faithful.PREDICT_MIN_SIZE and s - 1 > s0
                    and all(plans[(i0, j0, k0)][1] is None for i0, j0 in tile_list)):
                with timers["split"]:
                    s = predicted_slices(plan, aw[:, k0:k0 + kb], bt[:, k0:k0 + kb], s)
            counts_k[k0] = s
    c = xp.empty((m, p), order=plan.order)
    certified = recomputed = 0
    for i0, j0 in tile_list:
        parts = None
        for k0 in range(0, n, block):
            if plans is None:
                s, native = int(slices), None
            else:
                native = plans[(i0, j0, k0)][1]
                s = counts_k[k0]
            single = k0 == 0 and k0 + block >= n
            v, bnd = faithful_block(plan, aw[i0:i0 + mt, k0:k0 + block],
                                    bt[j0:j0 + pt, k0:k0 + block], s, native, single)
            if single:
                break
            with timers["acc"]:
                if parts is None:
                    parts = faithful.combine(xp)
                parts.add(v, bnd)
            counts["passes"] += 1
        with timers["acc"]:
            if parts is not None:
                v, bnd = parts.result()
                ok = faithful.certify(xp, v, bnd)
            else:
                ok = bnd
            del parts, bnd
        certified += int(ok.sum())
        c[i0:i0 + v.shape[0], j0:j0 + v.shape[1]] = v
        del v
        with timers["acc"]:
            recomputed += faithful.recompute_uncertified(
                xp, c, ok, aw, bt, offset=(i0, j0), threads=engine.threads,
                scratch=engine.scratch)
        del ok
    counts["certified"] = certified
    counts["recomputed"] = recomputed
    return c


def _global_plans(plan, aw, bt, tile_list):
    """``slices="auto"`` over several output tiles: ``{(i0, j0, k0): (s, native)}``
    with ONE count per inner block, decided for the whole product
    (:func:`ozlinalg.ozaki.counts.slices.plan_auto`: the count one tile would get)."""
    n = aw.shape[1]
    plans = {}
    for k0 in range(0, n, plan.block):
        with plan.timers["split"]:
            s, natives = _block_plan(plan, aw, bt, k0, tile_list, plan.opts.max_slices)
        for i0, j0 in tile_list:
            plans[(i0, j0, k0)] = (s, natives.get((i0, j0)))
    return plans


def _block_plan(plan, aw, bt, k0, tile_list, max_slices):
    """``slices="auto"``'s ``(s, natives)`` for the inner block at ``k0`` of the whole
    product (:func:`ozlinalg.ozaki.counts.slices.plan_auto`, the tiles' normalized rows one at
    a time), with the cap ``max_slices``."""
    xp, engine, block = plan.xp, plan.engine, plan.block
    m, n = aw.shape
    p = bt.shape[0]
    mt, pt = plan.tiles
    normalize = plan.passes.normalize_rows

    def normalized():
        for i0, j0 in tile_list:
            xa, _ = normalize(aw[i0:i0 + mt, k0:k0 + block])
            xb, _ = normalize(bt[j0:j0 + pt, k0:k0 + block])
            yield (i0, j0), i0, j0, xa, xb
            del xa, xb

    width = block_width(plan.meth, min(n, k0 + block) - k0)
    return plan_auto(xp, engine, plan.meth.split, width, normalized(), aw[:, k0:k0 + block],
                     bt[:, k0:k0 + block], max_slices, m * p)


def _check_fixed_count(plan, aw, bt, slices, tile_list, row_max):
    """Warn when the fixed count ``slices`` falls short of what ``slices="auto"`` picks
    for these inputs (:mod:`.adequacy`): the bound of :func:`.adequacy.q_floor` settles
    the common case; otherwise auto's own plan decides, per inner block, with the cap
    raised to ``slices`` if it is above ``max_slices``, unless an estimate over a
    sixteenth of the inner dimension (:func:`.adequacy.sampled_settles`) settles it
    first. Never touches the result."""
    xp, engine, meth, block = plan.xp, plan.engine, plan.meth, plan.block
    m, n = aw.shape
    p = bt.shape[0]
    ea, nz_a = row_exponents(xp, aw, row_max[0])
    eb, nz_b = row_exponents(xp, bt, row_max[1])
    cap = max(plan.opts.max_slices, slices)
    mt, pt = plan.tiles
    row_tiles = [(i0, min(m, i0 + mt)) for i0 in range(0, m, mt)]
    col_tiles = [(j0, min(p, j0 + pt)) for j0 in range(0, p, pt)]
    need, natives, short = 0, 0, False
    for k0 in range(0, n, block):
        k1 = min(n, k0 + block)
        threshold = slice_thresholds(meth.split, block_width(meth, k1 - k0), slices, m * p)[-1]
        if q_floor(xp, aw, ea, nz_a, bt, eb, nz_b, k0, k1) >= threshold:
            continue  # the bound alone: every entry has q_ij >= Q_slices
        if sampled_settles(xp, engine, aw, ea, nz_a, bt, eb, nz_b, share_windows(k0, k1),
                           threshold, row_tiles, col_tiles):
            continue  # an estimate over a sixteenth of the inner dimension shows it
        s, nat = _block_plan(plan, aw, bt, k0, tile_list, cap)
        count = sum(int(mask.sum()) for mask in nat.values())
        if count == m * p:  # plan_auto: no entry left for the emulation
            s = None
        short = short or s is None or s > slices or count > 0
        if need is not None:
            need = None if s is None else max(need, s)
        natives = max(natives, count)
    if short:
        count_warning(slices, need, natives, cap, m * p, False, meth.name)


def tile_shape(m, p, k, s, limit, crt=False, slice_bytes=4, model=None, faithful=False):
    """Largest output tile (mt, pt), halving the longer side, whose plan fits ``limit``
    bytes (:func:`ozlinalg.ozaki.memory.plan`; the smallest plan where none does)."""
    fam = "crt" if crt else "ef"
    return memory.plan(m, p, k, s, limit, fam, slice_bytes, model, faithful).tiles


def product_memory_plan(m, n, p, meth, slices, opts, engine):
    """The memory plan (:class:`~ozlinalg.ozaki.memory.MemoryPlan`) the driver makes for a
    finite ``(m x n) @ (n x p)`` NumPy product with method ``meth``, count ``slices``,
    options value ``opts`` and ``engine`` (the driver's own plan adds the copies that
    Inf / NaN lines need); :func:`ozlinalg._matmul.memory_plan` reads the options."""
    return _MemoryArgs(np, engine, meth, slices, opts, m, n, p).plan(0)


class _MemoryArgs:
    """What the memory plan of one product depends on (:mod:`.memory`)."""

    def __init__(self, xp, engine, meth, slices, opts, m, n, p):
        self.fam = memory.family(meth.split, meth.groupwise)
        self.crt = meth.split.startswith("crt")
        self.faith = opts.accuracy == "faithful"
        s_max = opts.max_slices if slices == "auto" else int(slices)
        if self.faith:
            s_max = min(64, s_max + (faithful.EXTRA_MODULI if self.crt
                                     else faithful.EXTRA_SLICES))
        if self.crt:  # Ozaki-II cuts the inner dimension into equal blocks
            from .crt import CRT_INNER_BLOCK

            s_max = min(s_max, 32)
            blocks = -(-n // CRT_INNER_BLOCK)
            self.block = params.INT8_INNER_BLOCK
            k = -(-n // blocks)
        else:
            self.block = (params.INT8_INNER_BLOCK if meth.engine == "int8"
                          else params.FP16_INNER_BLOCK)
            blocks = -(-n // self.block)
            k = min(n, self.block)
        self.s_max, self.blocks, self.k = s_max, blocks, k
        sbytes = engine.slice_bytes
        if self.fam == "fp":  # SplitFP's slices are float32 on the CPU, float16 on a GPU
            sbytes = max(sbytes, 4 if xp is np else 2)
        self.sbytes = sbytes
        self.model = engine.memory_model
        self.explicit = opts.memory_limit is not None
        self.limit = opts.memory_limit if self.explicit else engine.memory_limit()
        self.method = meth.name
        self.shape = (m, n, p)

    def plan(self, extra):
        """The :class:`~ozlinalg.ozaki.memory.MemoryPlan` with ``extra`` bytes on top."""
        return memory.plan(self.shape[0], self.shape[2], self.k, self.s_max, self.limit,
                           self.fam, self.sbytes, self.model, self.faith, self.blocks, extra)

    def product_tiles(self, engine, extra, s, start=True):
        """The product phase's tiles once the count ``s`` is known, with ``extra`` bytes
        on top (:func:`~ozlinalg.ozaki.memory.product_plan`; None where none fit).
        ``start``: the phase starts on them, so the engine's scratch pool is trimmed to
        the limit less their plan (what the count's phase kept fits few of its
        requests)."""
        if self.faith and self.crt:  # one set of tiles (ozlinalg.ozaki.memory.plan)
            return None
        s = min(int(s), self.s_max)
        m, p = self.shape[0], self.shape[2]
        args = (self.fam, self.sbytes, self.model, self.faith, self.blocks)
        tiles = memory.product_plan(m, p, self.k, s, self.limit, *args, extra)
        if start and tiles is not None:
            trim_scratch(engine, self.limit - memory.product_bytes(m, p, self.k, s, tiles,
                                                                   *args, extra))
        return tiles

    def check(self, mplan, m, n, p, held=0):
        """MemoryError when an explicit limit is below the smallest plan (nothing of the
        product allocated yet; ``held``: the caller's balanced copies, named)."""
        if mplan.fits or not self.explicit:
            return
        mt, pt = mplan.minimum_tiles
        copies = (f", {held / 2**20:.2f} MiB of it the balanced copies of the operands "
                  "(balance=False avoids them)" if held else "")
        raise MemoryError(
            f"ozlinalg.matmul: memory_limit={self.limit} bytes is below the "
            f"{mplan.minimum / 2**20:.2f} MiB this ({m} x {n}) @ ({n} x {p}) product needs "
            f"at least with method {self.method!r} (tiles of {mt} x {pt}, up to "
            f"{self.s_max} slices{copies}); raise the limit")
