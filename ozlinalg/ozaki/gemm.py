"""The emulated DGEMM driver: validation, special values, blocking, slicing,
exact low-precision products and FP64 accumulation.

Data flow for ``C = A @ B`` (A is m x n, B is n x p):

1. validate and promote to float64; rows of A / columns of B holding Inf or
   NaN are set aside and computed natively at the end, so every non-finite
   entry of C is what native FP64 gives;
2. cut the inner dimension into blocks (2**17 for the INT8 methods, keeping
   the slice width at 7 bits; 1024 for SplitFP) and for each block
3. normalize rows of A and of B^T by powers of two, choose the slice count,
   split both into slices (:mod:`.split`);
4. form the slice products on the engine: one exact product per pair
   (per-product methods) or one exact INT32-style sum per group of pairs with
   equal ``i + j`` (EF methods), and accumulate them in FP64 from the smallest
   group to the largest;
5. undo the power-of-two scalings (exactly, with ``ldexp`` when the
   exponents leave the safe range).
"""
from __future__ import annotations

import math
import time

import numpy as np

from .._array import array_namespace
from .._dask_dispatch import is_dask_collection
from .._options import get_options
from .._profile import CallRecord, Timer, active_profiles, record_call, record_native_flops
from ..engines import get_engine
from ..engines._scratch import release_after_oom
from . import faithful, memory, params
from .adequacy import count_warning, q_floor, row_exponents, sampled_settles, share_windows
from .auto import plan_auto, plan_slices, slice_thresholds
from .balance import balance_inner, min_shift_for
from .complex import complex_matmul
from .native import native_entries
from .scaling import apply_exponents, exponent_factors, log2_pow2
from .small import small_product
from .split import normalize_rows, slice_layout, slice_storage, split_rows

__all__ = ["MEMORY_MODEL", "matmul", "matmul_ordered", "emulated_matmul_2d", "memory_plan",
           "tile_shape", "working_bytes"]

MEMORY_MODEL = memory.MEMORY_MODEL
working_bytes = memory.working_bytes


def _as_float64(xp, x, name):
    """float64 (complex128 for complex input) view or copy of ``x``, or TypeError."""
    x = xp.asarray(x)
    kind = x.dtype.kind
    if kind not in "biufc":
        raise TypeError(f"ozlinalg.matmul: {name} has unsupported dtype {x.dtype}")
    if (kind == "f" and x.dtype.itemsize > 8) or (kind == "c" and x.dtype.itemsize > 16):
        raise TypeError(
            f"ozlinalg.matmul: {name} has dtype {x.dtype}; the emulation computes in "
            "float64 / complex128 only (convert explicitly if that is what you want)"
        )
    return x.astype(xp.complex128 if kind == "c" else xp.float64, copy=False)


def matmul(a, b, *, slices=None, method=None, balance=None, accuracy=None):
    """Matrix product ``a @ b`` in FP64 accuracy from exact INT8 products.

    Parameters
    ----------
    a, b : array_like (NumPy or CuPy)
        Operands with NumPy's matmul shape rules: 2-D matrices, 1-D vectors
        (promoted to a row / column and squeezed back), or stacks of matrices
        broadcast over the leading axes. Integer, boolean and lower-precision
        float inputs are converted to float64, complex ones to complex128
        (built from real emulated products, ``options(complex_scheme=...)``,
        see :mod:`ozlinalg.ozaki.complex`). Inputs are never modified.
    slices : int or "auto", optional
        Number of slices per operand. ``"auto"`` (the default, from
        :func:`ozlinalg.options`) picks the smallest count whose error is at
        DGEMM level for the given inputs (see :mod:`ozlinalg.ozaki.auto`). A
        fixed count is used as given; when it is below what ``"auto"`` would
        pick for the inputs (or ``"auto"`` would compute some entries in
        native FP64), the product warns with an
        :class:`~ozlinalg.AccuracyWarning` naming auto's count. The check
        never changes the result; it is a bound from a sample of the inputs,
        and auto's own plan only when that bound cannot settle it
        (:mod:`ozlinalg.ozaki.adequacy`). ``accuracy="faithful"`` does not
        warn: it recomputes what it cannot certify.
    method : str, optional
        Ozaki scheme I: ``"hybrid-ef"`` (default), ``"bitmask-ef"``,
        ``"bitmask"``, ``"rn"``, ``"splitfp"``; Ozaki scheme II: ``"crt"``
        (accurate scaling), ``"crt-fast"``; or a peer alias (``"ozimmu_h"``,
        ``"ozimmu_ef"``, ``"ozimmu"``, ``"ootomo"``, ``"gemmul8"``). For the
        ``crt`` methods ``slices`` counts moduli.
    balance : {"auto", True, False}, optional
        Exact power-of-two balancing of the inner dimension (column k of ``a``
        against row k of ``b``) before splitting; ``"auto"`` (the default, from
        :func:`ozlinalg.options`) balances only strongly imbalanced products
        (see :mod:`ozlinalg.ozaki.balance`), which keeps ``slices="auto"`` at
        its calibrated counts for them.
    accuracy : {"dgemm", "faithful"}, optional
        ``"dgemm"`` (the default, from :func:`ozlinalg.options`): the count
        ``slices="auto"`` picks reaches native DGEMM's max error on the
        calibrated inputs. ``"faithful"``: every finite entry is a faithful
        rounding of the exact product (one of the two floats around it),
        certified entry by entry by a deterministic bound; entries the bound
        cannot certify are recomputed exactly (:mod:`ozlinalg.ozaki.faithful`;
        methods ``hybrid-ef``, ``bitmask-ef``, ``crt``, ``crt-fast``). Whatever
        the accuracy, the result has the same bits on every engine, memory
        limit and thread count (docs/guarantees.md).

    Returns
    -------
    c : ndarray of float64 (complex128 for complex input)
        The product, on the device of the inputs; a lazy dask array when `a`
        or `b` is one (:func:`ozlinalg.dask.matmul`).

    Notes
    -----
    The Ozaki scheme (Ozaki et al.; Ootomo, Ozaki & Yokota 2024; Uchino,
    Ozaki & Imamura 2024): each row of ``a`` and column of ``b`` is scaled by
    a power of two and cut into ``s`` slices of ``beta = 7`` bits held in
    INT8; only the ``s (s + 1) / 2`` slice products with ``i + j <= s + 1``
    are formed, each exactly (INT32 accumulation), and summed in FP64. The
    EF methods first sum a whole group of equal ``i + j`` exactly in integer
    arithmetic, so FP64 work drops from ``s (s + 1) / 2`` passes to ``s``.
    Rows of ``a`` or columns of ``b`` holding Inf or NaN are multiplied
    natively so that non-finite entries match FP64 exactly.

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> rng = np.random.default_rng(0)
    >>> a, b = rng.standard_normal((3, 50)), rng.standard_normal((50, 2))
    >>> bool(np.allclose(ozlinalg.matmul(a, b), a @ b, rtol=1e-14, atol=1e-14))
    True
    """
    if is_dask_collection(a) or is_dask_collection(b):  # lazy: ozlinalg.dask builds the graph
        from ..dask import matmul as dask_matmul

        return dask_matmul(a, b, slices=slices, method=method, balance=balance,
                           accuracy=accuracy)
    return matmul_ordered(a, b, slices=slices, method=method, balance=balance,
                          accuracy=accuracy)


def matmul_ordered(a, b, *, slices=None, method=None, balance=None, accuracy=None, order="C"):
    """:func:`matmul` with the memory order of a real 2-D result chosen: "C" (what
    :func:`matmul` returns, as NumPy does) or "F" (the blocked factorizations
    update column-major work arrays). Same values either way."""
    xp = array_namespace(a, b)
    a = _as_float64(xp, a, "a")
    b = _as_float64(xp, b, "b")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("ozlinalg.matmul: operands must be at least 1-D (use * for scalars)")
    opts = get_options()
    meth = params.METHODS[params.validate_method(opts.method if method is None else method)]
    slices = opts.slices if slices is None else slices
    params.validate_slices(slices)
    min_shift = min_shift_for(opts.balance if balance is None else balance)
    if accuracy is not None and accuracy != opts.accuracy:
        opts = opts.replace(accuracy=faithful.validate_accuracy(accuracy))
    if opts.accuracy == "faithful":
        faithful.check_method(meth)

    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(
            f"ozlinalg.matmul: inner dimensions differ: a has shape {a.shape}, "
            f"b has shape {b.shape} ({a2.shape[-1]} != {b2.shape[-2]})"
        )
    is_complex = a.dtype.kind == "c" or b.dtype.kind == "c"

    bal_engine = get_engine(xp) if min_shift is not None else None

    def product_2d(x, y):
        if not is_complex:
            c = small_product(xp, x, y, meth, slices, opts, min_shift)
            if c is not None:
                return c
        held = 0
        if min_shift is not None:
            x0, y0 = x, y
            x, y = balance_inner(xp, x, y, min_shift, bal_engine)
            held = _copies_bytes((x, x0), (y, y0))
        if is_complex:
            # faithful: each part of C is ONE real product (4m-fused), so that it is
            # certified itself, not a difference of certified products
            scheme = "4m-fused" if opts.accuracy == "faithful" else opts.complex_scheme
            return complex_matmul(lambda u, v: emulated_matmul_2d(xp, u, v, meth, slices, opts),
                                  x, y, scheme=scheme)
        return emulated_matmul_2d(xp, x, y, meth, slices, opts, held=held)

    if a2.ndim == 2 and b2.ndim == 2:
        if order == "F" and not is_complex and a.ndim == 2 and b.ndim == 2:
            c = small_product(xp, a2, b2, meth, slices, opts, min_shift, order="F")
            if c is not None:
                return c
            held = 0
            if min_shift is not None:
                a0, b0 = a2, b2
                a2, b2 = balance_inner(xp, a2, b2, min_shift, bal_engine)
                held = _copies_bytes((a2, a0), (b2, b0))
            return emulated_matmul_2d(xp, a2, b2, meth, slices, opts, order="F", held=held)
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


def emulated_matmul_2d(xp, a, b, meth, slices, opts, order="C", held=0):
    """2-D float64 product through the emulation (arguments already validated).

    ``order``: memory order of the result ("C", or "F" for the column-major
    work arrays of the factorizations, whose updates ``c -= a @ b`` then need
    no transposing pass). The values do not depend on it. ``held``: bytes the
    caller holds for this product beside its own inputs (the balanced copies of
    ``a`` and ``b``), counted in the memory plan.
    """
    m, n = a.shape
    p = b.shape[1]
    if m == 0 or p == 0 or n == 0:
        return xp.zeros((m, p), order=order)
    faith = opts.accuracy == "faithful"
    if min(m, n, p) < opts.min_size and not faith:
        record_native_flops(2.0 * m * n * p, "matmul below min_size")
        return xp.matmul(a, b)

    engine = get_engine(xp)
    if order not in getattr(engine, "output_orders", ("C",)):
        c = emulated_matmul_2d(xp, a, b, meth, slices, opts, held=held)
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
    bad_rows, top_a = _nonfinite_lines(xp, engine, a, 1)
    bad_cols, top_b = _nonfinite_lines(xp, engine, b, 0)
    any_bad_rows = bool(bad_rows.any())
    any_bad_cols = bool(bad_cols.any())
    mplan = mem.plan(held + _nonfinite_bytes(m, n, p, bad_rows, bad_cols, any_bad_rows,
                                             any_bad_cols)
                     + (8 * m * p if order == "F" and mem.crt else 0))
    mem.check(mplan, m, n, p, held)
    aw = xp.where(bad_rows[:, None], 0.0, a) if any_bad_rows else a
    bw = xp.where(bad_cols[None, :], 0.0, b) if any_bad_cols else b
    bt = bw.T  # columns of B as rows: both operands are sliced row-wise
    # the maxima of the lines set aside are those of zeros now (for the count check)
    if top_a is not None and any_bad_rows:
        top_a = xp.where(bad_rows, 0.0, top_a)
    if top_b is not None and any_bad_cols:
        top_b = xp.where(bad_cols, 0.0, top_b)

    block = mem.block
    s_max = mem.s_max
    mt, pt = mplan.tiles
    try:
        c = _tiled_product(xp, engine, aw, bt, meth, slices, opts, timers, counts,
                           (mt, pt), block, order, (top_a, top_b), mplan.keep_bounds)
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
    holding Inf or NaN, and the lines' maxima of ``|x|`` where the engine's fused
    ``abs_max`` pass found them on the way (non-finite exactly on the bad lines;
    None without that pass)."""
    fused = getattr(engine, "abs_max", None)
    top = fused(x, axis) if fused is not None else None
    if top is not None:
        return ~xp.isfinite(top), top
    return ~xp.isfinite(x).all(axis=axis), None


def _tiled_product(xp, engine, aw, bt, meth, slices, opts, timers, counts, tiles, block,
                   order="C", row_max=(None, None), keep_bounds=True):
    """The emulated product over output tiles (mt, pt) and inner blocks.

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
    m, n = aw.shape
    p = bt.shape[0]
    mt, pt = tiles
    if meth.split in ("crt", "crt-fast"):
        from .crt import crt_matmul_2d

        c = crt_matmul_2d(xp, engine, aw, bt.T, moduli=slices,
                          max_moduli=min(opts.max_slices, 32),
                          scaling="fast" if meth.split == "crt-fast" else "accurate",
                          profile_counts=counts, timers=timers, tiles=tiles,
                          accuracy=opts.accuracy, check=opts.accuracy != "faithful",
                          keep_bounds=keep_bounds)
        return xp.asfortranarray(c) if order == "F" else c
    tile_list = [(i0, j0) for i0 in range(0, m, mt) for j0 in range(0, p, pt)]
    if opts.accuracy == "faithful":
        return _tiled_faithful(xp, engine, aw, bt, meth, slices, opts, timers, counts,
                               tiles, block, tile_list, order)
    if slices != "auto":
        with timers["split"]:
            _check_fixed_count(xp, engine, aw, bt, meth, int(slices), opts, tile_list, tiles,
                               block, row_max)
    plans = None
    if slices == "auto" and len(tile_list) > 1:
        plans = _global_plans(xp, engine, aw, bt, meth, opts, timers, tile_list, tiles, block)
    c = None if len(tile_list) == 1 else xp.empty((m, p), order=order)
    for i0, j0 in tile_list:
        tile = None
        comp = None
        for k0 in range(0, n, block):
            part = _emulate_block(xp, engine, aw[i0:i0 + mt, k0:k0 + block],
                                  bt[j0:j0 + pt, k0:k0 + block], meth, slices,
                                  opts, timers, counts,
                                  plan=None if plans is None else plans[(i0, j0, k0)],
                                  order=order)
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


def _tiled_faithful(xp, engine, aw, bt, meth, slices, opts, timers, counts, tiles, block,
                    tile_list, order):
    """:func:`_tiled_product` for ``accuracy="faithful"`` (Ozaki-I EF methods): each tile
    and inner block with its certificate (:mod:`.faithful`); the entries not certified
    are recomputed exactly as each tile is done (their indices never held for the
    whole output: the memory plan counts a tile's)."""
    m, n = aw.shape
    p = bt.shape[0]
    mt, pt = tiles
    plans = None
    if slices == "auto":  # the DGEMM-level count, decided for the whole product, plus more
        plans = _global_plans(xp, engine, aw, bt, meth, opts, timers, tile_list, tiles, block)
    c = xp.empty((m, p), order=order)
    certified = recomputed = 0
    for i0, j0 in tile_list:
        parts = None
        for k0 in range(0, n, block):
            if plans is None:
                s, native = int(slices), None
            else:
                s, native = plans[(i0, j0, k0)]
                s = faithful.faithful_slices(s, opts.max_slices)
            single = k0 == 0 and k0 + block >= n
            v, bnd = _faithful_block(xp, engine, aw[i0:i0 + mt, k0:k0 + block],
                                     bt[j0:j0 + pt, k0:k0 + block], meth, s, native, timers,
                                     counts, order, single)
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
                xp, c, ok, aw, bt, offset=(i0, j0), threads=getattr(engine, "threads", None),
                scratch=getattr(engine, "scratch", None))
        del ok
    counts["certified"] = certified
    counts["recomputed"] = recomputed
    return c


def _faithful_block(xp, engine, a, bt, meth, s, native, timers, counts, order, single):
    """One tile and inner block in faithful mode: ``(c, certified)`` (``single``: the only
    inner block) or ``(c, bound)`` in final units, the entries ``auto`` left to native
    arithmetic never certified (bound ``inf``): they are recomputed exactly."""
    m, k = a.shape
    p = bt.shape[0]
    kind = meth.split
    width = params.slice_width(k)
    step, dmax = slice_layout(kind, width)
    counts["slices"].append(s)
    with timers["split"]:
        split_raw = getattr(engine, "split_raw", None)
        raw = split_raw and split_raw(kind, a, s, width, "a")
        raw = raw and (raw, split_raw(kind, bt, s, width, "b"))
        if raw:
            (da, sa, ea), (db, sb, eb) = raw
        else:
            xa, ea = normalize_rows(xp, a, engine)
            da, sa = _split_operand(xp, engine, kind, xa, s, width, "a")
            del xa
            xb, eb = normalize_rows(xp, bt, engine)
            db, sb = _split_operand(xp, engine, kind, xb, s, width, "b")
            del xb
    acc = xp.zeros((m, p), order=order)
    comp = xp.zeros((m, p), order=order)
    top = xp.zeros((m, p), order=order)
    ws = engine.workspace(m, p) if order == "C" else engine.workspace(m, p, order=order)
    r = params.group_limit(k, width)
    updates = 0
    for g, prod in _group_products(engine, da, db, params.pairs_by_group(s), r, dmax, ws,
                                   timers, counts):
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


def _global_plans(xp, engine, aw, bt, meth, opts, timers, tile_list, tiles, block):
    """``slices="auto"`` over several output tiles: ``{(i0, j0, k0): (s, native)}``
    with ONE count per inner block, decided for the whole product
    (:func:`ozlinalg.ozaki.auto.plan_auto`: the count one tile would get)."""
    n = aw.shape[1]
    plans = {}
    for k0 in range(0, n, block):
        with timers["split"]:
            s, natives = _block_plan(xp, engine, aw, bt, meth, k0, block, tile_list, tiles,
                                     opts.max_slices)
        for i0, j0 in tile_list:
            plans[(i0, j0, k0)] = (s, natives.get((i0, j0)))
    return plans


def _block_width(meth, kb):
    """The slice width of an inner block of length ``kb``."""
    return params.slice_width(kb) if meth.engine == "int8" else params.fp_slice_width(kb)


def _block_plan(xp, engine, aw, bt, meth, k0, block, tile_list, tiles, max_slices):
    """``slices="auto"``'s ``(s, natives)`` for the inner block at ``k0`` of the whole
    product (:func:`ozlinalg.ozaki.auto.plan_auto`, the tiles' normalized rows one at
    a time), with the cap ``max_slices``."""
    m, n = aw.shape
    p = bt.shape[0]
    mt, pt = tiles

    def normalized():
        for i0, j0 in tile_list:
            xa, _ = normalize_rows(xp, aw[i0:i0 + mt, k0:k0 + block], engine)
            xb, _ = normalize_rows(xp, bt[j0:j0 + pt, k0:k0 + block], engine)
            yield (i0, j0), i0, j0, xa, xb
            del xa, xb

    width = _block_width(meth, min(n, k0 + block) - k0)
    return plan_auto(xp, engine, meth.split, width, normalized(), aw[:, k0:k0 + block],
                     bt[:, k0:k0 + block], max_slices, m * p)


def _check_fixed_count(xp, engine, aw, bt, meth, slices, opts, tile_list, tiles, block,
                       row_max):
    """Warn when the fixed count ``slices`` falls short of what ``slices="auto"`` picks
    for these inputs (:mod:`.adequacy`): the bound of :func:`.adequacy.q_floor` settles
    the common case; otherwise auto's own plan decides, per inner block, with the cap
    raised to ``slices`` if it is above ``max_slices``, unless an estimate over a
    sixteenth of the inner dimension (:func:`.adequacy.sampled_settles`) settles it
    first. Never touches the result."""
    m, n = aw.shape
    p = bt.shape[0]
    ea, nz_a = row_exponents(xp, aw, row_max[0])
    eb, nz_b = row_exponents(xp, bt, row_max[1])
    cap = max(opts.max_slices, slices)
    mt, pt = tiles
    row_tiles = [(i0, min(m, i0 + mt)) for i0 in range(0, m, mt)]
    col_tiles = [(j0, min(p, j0 + pt)) for j0 in range(0, p, pt)]
    need, natives, short = 0, 0, False
    for k0 in range(0, n, block):
        k1 = min(n, k0 + block)
        threshold = slice_thresholds(meth.split, _block_width(meth, k1 - k0), slices, m * p)[-1]
        if q_floor(xp, aw, ea, nz_a, bt, eb, nz_b, k0, k1) >= threshold:
            continue  # the bound alone: every entry has q_ij >= Q_slices
        if sampled_settles(xp, engine, aw, ea, nz_a, bt, eb, nz_b, share_windows(k0, k1),
                           threshold, row_tiles, col_tiles):
            continue  # an estimate over a sixteenth of the inner dimension shows it
        s, nat = _block_plan(xp, engine, aw, bt, meth, k0, block, tile_list, tiles, cap)
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
        sbytes = getattr(engine, "slice_bytes", 4)
        if self.fam == "fp":  # SplitFP's slices are float32 on the CPU, float16 on a GPU
            sbytes = max(sbytes, 4 if xp is np else 2)
        self.sbytes = sbytes
        self.model = getattr(engine, "memory_model", None)
        self.explicit = opts.memory_limit is not None
        self.limit = opts.memory_limit if self.explicit else engine.memory_limit()
        self.method = meth.name
        self.shape = (m, n, p)

    def plan(self, extra):
        """The :class:`~ozlinalg.ozaki.memory.MemoryPlan` with ``extra`` bytes on top."""
        return memory.plan(self.shape[0], self.shape[2], self.k, self.s_max, self.limit,
                           self.fam, self.sbytes, self.model, self.faith, self.blocks, extra)

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


def memory_plan(m, n, p, method=None, slices=None, accuracy=None, limit=None, engine=None):
    """The memory plan (:class:`~ozlinalg.ozaki.memory.MemoryPlan`) the driver makes for a
    finite ``(m x n) @ (n x p)`` product under the options in force (``method``,
    ``slices``, ``accuracy``, ``limit`` in bytes override them; ``engine``: the NumPy
    engine's by default). For benchmarks and tests: the driver's own plan adds the
    copies that Inf / NaN lines need."""
    opts = get_options()
    meth = params.METHODS[params.validate_method(opts.method if method is None else method)]
    opts = opts.replace(accuracy=opts.accuracy if accuracy is None else accuracy,
                        memory_limit=opts.memory_limit if limit is None else limit)
    engine = engine or get_engine(np)
    mem = _MemoryArgs(np, engine, meth, opts.slices if slices is None else slices, opts,
                      m, n, p)
    return mem.plan(0)


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


def _emulate_block(xp, engine, a, bt, meth, slices, opts, timers, counts, plan=None,
                   order="C"):
    """Emulated ``a @ bt.T`` for one inner block (k <= the engine's limit); ``plan``:
    ``(s, native)`` chosen for the whole product (tiled ``slices="auto"``); ``order``:
    the memory order of the result (see :func:`emulated_matmul_2d`)."""
    m, k = a.shape
    p = bt.shape[0]
    kind = meth.split
    width = params.slice_width(k) if meth.engine == "int8" else params.fp_slice_width(k)
    step, bound = slice_layout(kind, width)

    with timers["split"]:
        raw = None
        if plan is None and slices != "auto":  # no estimate: split without normalized copies
            split_raw = getattr(engine, "split_raw", None)
            raw = split_raw and split_raw(kind, a, int(slices), width, "a")
            raw = raw and (raw, split_raw(kind, bt, int(slices), width, "b"))
        if raw:
            (da, sa, ea), (db, sb, eb) = raw
            counts["slices"].append(int(slices))
            s = int(slices)
            native = None
        else:
            da, sa, ea, db, sb, eb, s, native = _prepare(
                xp, engine, a, bt, kind, width, slices, plan, opts, counts)
            if da is None:
                c = xp.empty((m, p), order=order)
                native_entries(xp, c, a, bt, native)
                return c

    return _products(xp, engine, meth, step, bound, width, k, s, da, sa, ea, db, sb, eb,
                     native, a, bt, order, timers, counts)


def _prepare(xp, engine, a, bt, kind, width, slices, plan, opts, counts):
    """Normalize both operands, choose the count, split: ``(da, sa, ea, db, sb, eb, s,
    native)``; ``da`` None when every entry goes native."""
    m, p = a.shape[0], bt.shape[0]
    xa, ea = normalize_rows(xp, a, engine)
    xb, eb = normalize_rows(xp, bt, engine)
    native = None
    if plan is not None:
        s, native = plan
    elif slices == "auto":
        s, native = plan_slices(xp, engine, kind, width, xa, xb, a, bt, opts.max_slices,
                                outputs=m * p)
    else:
        s = int(slices)
    if native is not None and bool(native.all()):
        # No entry is within reach of max_slices slices: native FP64 throughout
        # (profile: 0 slices).
        counts["slices"].append(0)
        return None, None, None, None, None, None, 0, native
    counts["slices"].append(s)
    da, sa = _split_operand(xp, engine, kind, xa, s, width, "a")
    del xa  # the residual: free it before splitting B
    db, sb = _split_operand(xp, engine, kind, xb, s, width, "b")
    del xb
    return da, sa, ea, db, sb, eb, s, native


def _group_products(engine, da, db, groups, r, bound, ws, timers, counts):
    """The exact INT8 products of each EF group, at most ``r`` pairs per engine call (the
    INT32 bound): yields ``(g, prod)``, ``prod`` valid until the next step (the workspace)."""
    for group in groups:
        g = group[0][0] + group[0][1]
        for c0 in range(0, len(group), r):
            chunk = group[c0:c0 + r]
            with timers["int8"]:
                prod, calls = engine.int_matmul_sum(da, db, chunk, bound, bound, ws=ws)
            counts["int8_gemms"] += len(chunk)
            counts["engine_calls"] += calls
            yield g, prod


def _products(xp, engine, meth, step, bound, width, k, s, da, sa, ea, db, sb, eb, native,
               a, bt, order, timers, counts):
    """The slice products and their FP64 accumulation (see :func:`_emulate_block`)."""
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
    fused = getattr(engine, "finish_ef", None)
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
        for g, prod in _group_products(engine, da, db, groups, r, bound, ws, timers, counts):
            with timers["acc"]:
                add_group(g, prod, 2.0 ** (-step * g))
            counts["passes"] += 1
    else:
        # One FP64 convert-scale-add pass per product, as in ozIMMU, into a
        # per-group accumulator: the products of one group share (nearly) one
        # power-of-two scale, so their FP64 sum is exact or nearly so, and
        # rounding happens once per group when it joins the result.
        gacc = xp.empty((m, p), order=order)
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
                    outer = getattr(engine, "axpy_outer", None)
                    if step is not None:
                        engine.axpy(1.0, prod, gacc)  # integers: exact
                    elif outer is not None and outer(prod, ra[i], rb[j], gacc):
                        pass  # (prod * ra[i][:, None]) * rb[j][None, :] added in one pass
                    elif prod.dtype == xp.float64:  # the engine's buffer: scale in place
                        prod *= ra[i][:, None]
                        prod *= rb[j][None, :]
                        gacc += prod
                    else:
                        gacc += (prod * ra[i][:, None]) * rb[j][None, :]
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
            _finish_top_groups(engine, acc, ws, da, db, tops, step, bound, factors, order,
                               timers, counts)
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


#: Groups (g = i + j < TOP_GROUPS) combined exactly before joining the rest.
TOP_GROUPS = 3

#: Outputs from this many entries compute the top groups in blocks of rows (see
#: ``_finish_top_groups``): 4 MiB per INT32 buffer saved.
TOP_BLOCKS_FROM = 1 << 20


def _finish_top_groups(engine, acc, ws, da, db, tops, step, bound, factors, order, timers,
                       counts):
    """The top groups' products and the engine's one-pass finish, a block of rows (of
    columns for a column-major ``acc``) at a time: ``top = G_2 + 2**w G_1 +
    2**(2w) G_0`` (exact integers), ``acc += 2**(-2w) top`` and the scaling where
    ``factors`` makes it exact, the generic operations in the generic order. The
    three INT32 products of a block live in thirds of the one workspace, so no
    buffer beyond it is needed."""
    m, p = acc.shape
    cols = order == "F"  # blocks that stay contiguous in acc's order
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
            engine.finish_ef(blk, prods, weights, 2.0 ** (-step * (TOP_GROUPS - 1)), fac)
    counts["passes"] += 1


def _split_operand(xp, engine, kind, x, s, width, operand):
    """Slices (s, rows, k) and their units (s, rows) of normalized rows ``x`` (consumed).

    ``operand`` ("a" or "b") lets the engine lay the slices out for its products
    (the GPU engine stores them so that a whole EF group is one GEMM).
    """
    rows, k = x.shape
    data = slice_storage(engine, x, s, kind, operand)
    scales = xp.empty((s, rows))

    # An engine may bring a fused split (one pass for all slices); it must give the
    # generic split's slices bit for bit (tests/test_gpu.py, test_engine_onednn.py),
    # and returns False where it does not apply.
    fused = getattr(engine, "split_rows", None)

    def block(r0, r1):
        args = (kind, x[r0:r1], s, width, data[:, r0:r1], scales[:, r0:r1])
        if fused is None or fused(*args) is False:
            split_rows(xp, *args)

    engine.map_rows(block, rows, k)
    return data, scales


def _log2_min(xp, r):
    return math.log2(float(r.min())) if r.size else 0.0
