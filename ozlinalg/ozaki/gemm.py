"""The Ozaki-I core of the emulated DGEMM: slicing, exact low-precision products
and FP64 accumulation, one output tile and inner block at a time.

For one block of ``C = A @ B`` (A's rows and B's columns as rows ``bt``):

1. normalize rows of A and of B^T by powers of two, choose the slice count,
   split both into slices (:mod:`.split`);
2. form the slice products on the engine: one exact product per pair
   (per-product methods) or one exact INT32-style sum per group of pairs with
   equal ``i + j`` (EF methods), and accumulate them in FP64 from the smallest
   group to the largest;
3. undo the power-of-two scalings (exactly, with ``ldexp`` when the
   exponents leave the safe range).

The tiles, the inner blocks, the memory plan and the Inf / NaN lines are the
driver's (:mod:`.tiling`); the options and the engine come in as arguments
(:class:`ProductPlan`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import faithful, params
from .counts.slices import plan_slices
from .native import native_entries
from .passes import passes_for
from .scaling import apply_exponents, exponent_factors, log2_pow2
from .split import normalize_rows, slice_layout, split_operand, split_rows

__all__ = ["TOP_BLOCKS_FROM", "TOP_GROUPS", "ProductPlan"]

#: Groups (g = i + j < TOP_GROUPS) combined exactly before joining the rest.
TOP_GROUPS = 3

#: Outputs from this many entries compute the top groups in blocks of rows (see
#: ``_finish_top_groups``): 4 MiB per INT32 buffer saved.
TOP_BLOCKS_FROM = 1 << 20


@dataclass(frozen=True)
class ProductPlan:
    """What every tile and inner block of one emulated product shares.

    Attributes
    ----------
    xp : module
        The array namespace (NumPy or CuPy).
    engine : ozlinalg.engines.Engine
        The engine that forms the exact products.
    meth : ozlinalg.ozaki.params.Method
        The method.
    slices : int or "auto"
        The slice count asked for.
    opts : ozlinalg.Options
        The options value of the call (accuracy, ``max_slices``, ...).
    timers, counts : dict
        The profile's timers and counters, filled as the product runs.
    order : {"C", "F"}
        Memory order of the result.
    tiles : tuple of int
        Output tile shape ``(mt, pt)`` of the memory plan.
    block : int
        Length of the inner blocks.
    retile : callable or None
        ``retile(s, start=True)``: the memory plan's tiles for the product phase once
        the count ``s`` is known (:func:`ozlinalg.ozaki.memory.product_plan`; None where
        none fit); ``start``: the phase starts on them (the scratch pool is trimmed to
        the limit less their plan). None: the tiles stay.
    """

    xp: object
    engine: object
    meth: object
    slices: object
    opts: object
    timers: dict
    counts: dict
    order: str = "C"
    tiles: tuple = (0, 0)
    block: int = 0
    retile: object = None

    @property
    def passes(self):
        """The engine's passes, fused where it offers them (:mod:`.passes`)."""
        return passes_for(self.engine, self.xp)


@dataclass(frozen=True)
class _Layout:
    """The slicing of one inner block: exponent step per group (None: per-row scales),
    slice bound, width, inner length ``k`` and slice count ``s``."""

    step: object
    bound: int
    width: int
    k: int
    s: int


def block_width(meth, kb):
    """The slice width of an inner block of length ``kb``."""
    return params.slice_width(kb) if meth.engine == "int8" else params.fp_slice_width(kb)


def emulate_block(plan, a, bt, block_plan=None, kept=None):
    """Emulated ``a @ bt.T`` for one inner block (k <= the engine's limit); ``block_plan``:
    ``(s, native)`` chosen for the whole product (tiled ``slices="auto"``).

    ``kept``: a dict that carries A's slices from one output tile to the next tile of
    the same rows (the driver hands the same dict along a row of tiles): with the count
    fixed for the whole product, they are the same slices, and splitting them once per
    row of tiles instead of once per tile saves the passes over A (the tiles of a
    product under ``memory_limit``). They are alive during their tile anyway, so the
    memory plan's per-tile peak still holds."""
    xp, slices = plan.xp, plan.slices
    m, k = a.shape
    p = bt.shape[0]
    kind = plan.meth.split
    width = block_width(plan.meth, k)
    step, bound = slice_layout(kind, width)
    fixed = block_plan is None and slices != "auto"  # no estimate: no normalized copies
    # the count before any estimate of this block (None: this block's estimate decides)
    known = int(slices) if fixed else block_plan[0] if block_plan is not None else None
    ops_a = kept.get(known) if kept is not None and known is not None else None

    with plan.timers["split"]:
        if fixed:
            s = known
            split_raw = plan.passes.split_raw
            if ops_a is None:
                ops_a = split_raw(kind, a, s, width, "a")
            ops_b = split_raw(kind, bt, s, width, "b")
            plan.counts["slices"].append(s)
            native = None
        else:
            ops_a, ops_b, s, native = _prepare(plan, a, bt, kind, width, block_plan, ops_a)
            if ops_a is None:
                c = xp.empty((m, p), order=plan.order)
                native_entries(xp, c, a, bt, native)
                return c
    if kept is not None and known is not None:
        kept.clear()
        kept[s] = ops_a

    return _products(plan, _Layout(step, bound, width, k, s), ops_a, ops_b, native, a, bt)


def _prepare(plan, a, bt, kind, width, block_plan, ops_a=None):
    """Normalize both operands, choose the count, split: ``((da, sa, ea), (db, sb, eb),
    s, native)``; the operands None when every entry goes native. ``ops_a``: A's
    slices for ``block_plan``'s count, already split (then A is not read)."""
    xp, engine, counts = plan.xp, plan.engine, plan.counts
    m, p = a.shape[0], bt.shape[0]
    normalize = plan.passes.normalize_rows
    xa, ea = normalize(a) if ops_a is None else (None, None)
    xb, eb = normalize(bt)
    native = None
    if block_plan is not None:
        s, native = block_plan
    elif plan.slices == "auto":  # (ops_a comes with a block_plan only)
        s, native = plan_slices(xp, engine, kind, width, xa, xb, a, bt,
                                plan.opts.max_slices, outputs=m * p)
    else:
        s = int(plan.slices)
    if native is not None and bool(native.all()):
        # No entry is within reach of max_slices slices: native FP64 throughout
        # (profile: 0 slices).
        counts["slices"].append(0)
        return None, None, 0, native
    counts["slices"].append(s)
    if ops_a is None:
        da, sa = split_operand(xp, engine, kind, xa, s, width, "a")
        del xa  # the residual: free it before splitting B
        ops_a = (da, sa, ea)
    db, sb = split_operand(xp, engine, kind, xb, s, width, "b")
    del xb
    return ops_a, (db, sb, eb), s, native


def group_products(plan, da, db, groups, r, bound, ws):
    """The exact INT8 products of each EF group, at most ``r`` pairs per engine call (the
    INT32 bound): yields ``(g, prod)``, ``prod`` valid until the next step (the workspace)."""
    timers, counts = plan.timers, plan.counts
    for group in groups:
        g = group[0][0] + group[0][1]
        for c0 in range(0, len(group), r):
            chunk = group[c0:c0 + r]
            with timers["int8"]:
                prod, calls = plan.engine.int_matmul_sum(da, db, chunk, bound, bound, ws=ws)
            counts["int8_gemms"] += len(chunk)
            counts["engine_calls"] += calls
            yield g, prod


def _products(plan, lay, ops_a, ops_b, native, a, bt):
    """The slice products and their FP64 accumulation (see :func:`emulate_block`)."""
    xp, engine, meth, order = plan.xp, plan.engine, plan.meth, plan.order
    timers, counts = plan.timers, plan.counts
    step, bound, width, k, s = lay.step, lay.bound, lay.width, lay.k, lay.s
    da, sa, ea = ops_a
    db, sb, eb = ops_b
    m, p = a.shape[0], bt.shape[0]
    acc = xp.zeros((m, p), order=order)
    ws = engine.workspace(m, p) if order == "C" else engine.workspace(m, p, order=order)
    groups = params.pairs_by_group(s)
    # Unit of slice t relative to slice 0, per row (powers of two).
    ra = sa / sa[0]
    rb = sb / sb[0]
    # The three largest groups (g <= 2) are combined before they meet the
    # rest: their sum decides the result to within the truncation error of two
    # slices, and adding them one by one would round the partial sums at the
    # size of the first slice's truncation error (~2**-7 of the largest
    # product), a floor above native DGEMM's on entries with heavy
    # cancellation. With fixed scales the combination is EXACT:
    # top = G_0 2**(2w) + G_1 2**w + G_2 stays below 2**53 (integers); with
    # per-row scales it is a compensated (TwoSum) accumulation.
    r = params.group_limit(k, width)
    # An engine with a fused finish computes the top groups last, a block of rows
    # at a time into thirds of the one INT32 workspace, and combines them, the
    # rest and the scaling in one pass (same operations): no FP64 top buffer.
    fused = plan.passes.finish_ef  # a route: None where the engine has none
    tops = {} if (fused is not None and meth.groupwise and step is not None
                  and s >= TOP_GROUPS and r >= TOP_GROUPS) else None
    top = None if tops is not None else xp.zeros((m, p), order=order)
    comp = None if step is not None else xp.zeros((m, p), order=order)

    def add_group(g, gsum, scale):
        """acc += scale * gsum for the group g = i + j (scale: 2**-step*g, or 1)."""
        if g > TOP_GROUPS - 1:
            engine.axpy(scale, gsum, acc)
        elif step is not None:
            engine.axpy(2.0 ** (step * (TOP_GROUPS - 1 - g)), gsum, top)
        else:
            faithful.two_sum_into(xp, top, comp, gsum if scale == 1.0 else scale * gsum)

    if meth.groupwise:
        if tops is not None:  # at the end (_finish_top_groups)
            tops.update((sum(grp[0]), grp) for grp in groups if sum(grp[0]) < TOP_GROUPS)
            groups = [grp for grp in groups if sum(grp[0]) >= TOP_GROUPS]
        for g, prod in group_products(plan, da, db, groups, r, bound, ws):
            with timers["acc"]:
                add_group(g, prod, 2.0 ** (-step * g))
            counts["passes"] += 1
    else:
        # One FP64 convert-scale-add pass per product, as in ozIMMU, into a
        # per-group accumulator: the products of one group share (nearly) one
        # power-of-two scale, so their FP64 sum is exact or nearly so, and
        # rounding happens once per group when it joins the result.
        gacc = xp.empty((m, p), order=order)
        axpy_outer = plan.passes.axpy_outer
        for group in groups:
            g = group[0][0] + group[0][1]
            gacc.fill(0.0)
            for i, j in group:
                with timers["int8"]:
                    if meth.engine == "int8":
                        prod, calls = engine.int_matmul_sum(da, db, [(i, j)], bound, bound,
                                                            ws=ws)
                    else:
                        prod, calls = engine.float_matmul(da[i], db[j]), 1
                counts["int8_gemms"] += 1
                counts["engine_calls"] += calls
                with timers["acc"]:
                    if step is not None:
                        engine.axpy(1.0, prod, gacc)  # integers: exact
                    else:  # (prod * ra[i][:, None]) * rb[j][None, :]
                        axpy_outer(prod, ra[i], rb[j], gacc)
                counts["passes"] += 1
            with timers["acc"]:
                add_group(g, gacc, 2.0 ** (-step * g) if step is not None else 1.0)
            counts["passes"] += 1
    with timers["acc"]:
        # C = diag(2**ea * sa[0]) acc diag(2**eb * sb[0]), all powers of two.
        ea = ea + log2_pow2(xp, sa[0])
        eb = eb + log2_pow2(xp, sb[0])
        lo = _log2_min(xp, ra) + _log2_min(xp, rb) - 2 * (width + 1) * s
        hi = math.log2(k) + 2 * width + math.log2(s * s + 1) + 2
        if tops is not None:
            factors = exponent_factors(xp, ea, eb, lo, hi)
            _finish_top_groups(plan, acc, ws, da, db, tops, step, bound, factors)
            if factors is None:
                apply_exponents(xp, acc, ea, eb, lo, hi, engine)
        else:
            if step is not None:
                engine.axpy(2.0 ** (-step * (TOP_GROUPS - 1)), top, acc)
            else:
                top += comp
                acc += top
            apply_exponents(xp, acc, ea, eb, lo, hi, engine)
    if native is not None:
        native_entries(xp, acc, a, bt, native)
    return acc


def _finish_top_groups(plan, acc, ws, da, db, tops, step, bound, factors):
    """The top groups' products and the engine's one-pass finish, a block of rows (of
    columns for a column-major ``acc``) at a time: ``top = G_2 + 2**w G_1 +
    2**(2w) G_0`` (exact integers), ``acc += 2**(-2w) top`` and the scaling where
    ``factors`` makes it exact, the generic operations in the generic order. The
    three INT32 products of a block live in thirds of the one workspace, so no
    buffer beyond it is needed."""
    engine, timers, counts = plan.engine, plan.timers, plan.counts
    m, p = acc.shape
    cols = plan.order == "F"  # blocks that stay contiguous in acc's order
    n = p if cols else m
    # Blocks only where the two INT32 buffers they save are large (a GEMM per group
    # and block instead of one per group).
    size = n // TOP_GROUPS if (n >= 4 * TOP_GROUPS and m * p >= TOP_BLOCKS_FROM) else n
    flat = ws["out"].ravel(order="F" if cols else "C") if size < n else None
    order_groups = range(TOP_GROUPS - 1, -1, -1)  # g = 2, 1, 0: the generic order
    weights = [2.0 ** (step * (TOP_GROUPS - 1 - g)) for g in order_groups]
    for r0 in range(0, n, size):
        r1 = min(n, r0 + size)
        shape = (m, r1 - r0) if cols else (r1 - r0, p)
        prods = []
        for t, g in enumerate(order_groups):
            if flat is None:  # tiny outputs: separate buffers
                part = engine.workspace(*shape, order="F") if cols else engine.workspace(*shape)
            else:
                part = {"out": flat[t * size * (m if cols else p):][:shape[0] * shape[1]]
                        .reshape(shape, order="F" if cols else "C")}
            a_blk, b_blk = (da, db[:, r0:r1]) if cols else (da[:, r0:r1], db)
            with timers["int8"]:
                prod, calls = engine.int_matmul_sum(a_blk, b_blk, tops[g], bound, bound, ws=part)
            if r0 == 0:  # the products, counted once; the launches, all
                counts["int8_gemms"] += len(tops[g])
            counts["engine_calls"] += calls
            prods.append(prod)
        blk = acc[:, r0:r1] if cols else acc[r0:r1]
        fac = None
        if factors is not None:
            fac = (factors[0], factors[1][r0:r1]) if cols else (factors[0][r0:r1], factors[1])
        with timers["acc"]:
            plan.passes.finish_ef(blk, prods, weights, 2.0 ** (-step * (TOP_GROUPS - 1)), fac)
    counts["passes"] += 1


def faithful_block(plan, a, bt, s, native, single):
    """One tile and inner block in faithful mode: ``(c, certified)`` (``single``: the only
    inner block) or ``(c, bound)`` in final units, the entries ``auto`` left to native
    arithmetic never certified (bound ``inf``): they are recomputed exactly."""
    xp, engine, timers, counts, order = (plan.xp, plan.engine, plan.timers, plan.counts,
                                         plan.order)
    m, k = a.shape
    p = bt.shape[0]
    kind = plan.meth.split
    width = params.slice_width(k)
    step, dmax = slice_layout(kind, width)
    counts["slices"].append(s)
    with timers["split"]:
        split_raw = plan.passes.split_raw
        da, sa, ea = split_raw(kind, a, s, width, "a")
        db, sb, eb = split_raw(kind, bt, s, width, "b")
    acc = xp.zeros((m, p), order=order)
    comp = xp.zeros((m, p), order=order)
    top = xp.zeros((m, p), order=order)
    ws = engine.workspace(m, p) if order == "C" else engine.workspace(m, p, order=order)
    r = params.group_limit(k, width)
    updates = 0
    for g, prod in group_products(plan, da, db, params.pairs_by_group(s), r, dmax, ws):
        with timers["acc"]:
            if g >= TOP_GROUPS:
                faithful.add_compensated(xp, engine, 2.0 ** (-step * g), prod, acc, comp)
                updates += 1
            else:  # integers below 2**53: exact
                engine.axpy(2.0 ** (step * (TOP_GROUPS - 1 - g)), prod, top)
        counts["passes"] += 1
    with timers["acc"]:
        slop = faithful.finish(xp, engine, acc, comp, top, 2.0 ** (-step * (TOP_GROUPS - 1)))
        del comp, top
        vec = faithful.ef_bound(xp, engine, da, db, kind, width, s, k, dmax, updates)
        ea = ea + log2_pow2(xp, sa[0])
        eb = eb + log2_pow2(xp, sb[0])
        if single:
            out = faithful.ef_certify(xp, engine, acc, slop, vec, ea, eb)
            if native is not None:
                out &= ~native
        else:
            for _, _, sl in faithful._blocks(slop):
                slop[sl] = faithful.ef_bound_block(xp, vec, slop, sl)
            out = faithful.scaled_bound(xp, slop, ea, eb)
            if native is not None:
                out[native] = xp.inf
        lo = -2 * (width + 1) * s
        hi = math.log2(k) + 2 * width + math.log2(s * s + 1) + 2
        apply_exponents(xp, acc, ea, eb, lo, hi, engine)
    counts["passes"] += 1
    return acc, out


#: The uncertified fraction one slice must save to be taken in faithful mode
#: (:func:`predicted_slices`): a slice is ``s`` of the ``s (s + 1) / 2`` slice products
#: (15 % of the INT8 work at 12 slices, 0.4 s at n = 2048 on one core), the exact
#: recomputation of an entry 1 to 4 us there: 4 % of the entries; a margin of 4.
TRADE_FRACTION_SLICES = 1e-2


def _sample_ratios(plan, a, bt, si, sj, c, s):
    """The ratios of the faithful certificate's bound (:class:`.faithful.EFBound`, its
    slop left out) to the gap of each sampled entry ``c`` (correctly rounded values of
    the rows ``si`` of A by ``sj`` of B^T) at ``s`` slices: the generic split of the
    sampled rows on the host (the same digits as every engine's)."""
    from .._array import to_numpy
    from ..engines.base import Engine

    gen = Engine()
    k = a.shape[1]
    kind = plan.meth.split
    width = params.slice_width(k)
    _, dmax = slice_layout(kind, width)
    ha = np.ascontiguousarray(to_numpy(a[plan.xp.asarray(si)]), np.float64)
    hb = np.ascontiguousarray(to_numpy(bt[plan.xp.asarray(sj)]), np.float64)
    xa, ea = normalize_rows(np, ha)
    da, sa = np.empty((s,) + xa.shape), np.empty((s, xa.shape[0]))
    split_rows(np, kind, xa, s, width, da, sa)
    xb, eb = normalize_rows(np, hb)
    db, sb = np.empty((s,) + xb.shape), np.empty((s, xb.shape[0]))
    split_rows(np, kind, xb, s, width, db, sb)
    updates = sum(g + 1 for g in range(TOP_GROUPS, s))  # at least the TwoSum updates
    vec = faithful.ef_bound(np, gen, da, db, kind, width, s, k, dmax, updates)
    bound = vec.block(np, (slice(None), slice(None)))
    eat = (np.asarray(ea, np.int64) + log2_pow2(np, sa[0])).astype(np.int64)
    ebt = (np.asarray(eb, np.int64) + log2_pow2(np, sb[0])).astype(np.int64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        cb = np.abs(np.ldexp(c, -(eat[:, None] + ebt[None, :]).clip(-4000, 4000).astype(
            np.int32)))
        rho = bound / np.spacing(np.where(np.isfinite(cb), cb, 0.0))
    return np.where(np.isnan(rho), np.inf, rho)


def predicted_slices(plan, a, bt, s_max):
    """Faithful mode's ``slices="auto"`` for the inner block ``a``, ``bt`` of a large
    product: ``s_max`` (:data:`.faithful.EXTRA_SLICES` above the DGEMM-level count), or
    one slice fewer where the fraction of entries the certificate would leave for exact
    recomputation grows by less than :data:`TRADE_FRACTION_SLICES`: predicted from
    :data:`.faithful.SAMPLE` rows of A by as many columns of B, correctly rounded
    (:mod:`.exactdot`: the same values on every engine, so the count depends neither on
    the engine nor on the tiling), with each entry's bound at both counts
    (:func:`_sample_ratios`, :func:`.faithful.predicted_uncertified`). A cost choice:
    every count's certificate is rigorous."""
    from .exactdot import exact_dots

    m, p = a.shape[0], bt.shape[0]
    si, sj = faithful.sample_indices(m), faithful.sample_indices(p)
    c = exact_dots(plan.xp, a, bt, np.repeat(si, sj.size), np.tile(sj, si.size))
    c = c.reshape(si.size, sj.size)
    f = [faithful.predicted_uncertified(_sample_ratios(plan, a, bt, si, sj, c, s), [1.0])[0]
         for s in (s_max - 1, s_max)]
    return s_max - 1 if f[0] - f[1] < TRADE_FRACTION_SLICES else s_max


def _log2_min(xp, r):
    return math.log2(float(r.min())) if r.size else 0.0
