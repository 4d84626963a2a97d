"""Ozaki scheme II's block product: one inner block over all output tiles, in phases.

:func:`crt_block` runs them in order: the rows' exponents and norms
(:func:`_row_vectors`), the accurate scaling's bound products W
(:func:`_bound_products`), the count (:func:`.count.decide_auto` or the caller's,
:func:`_all_native` when no entry is left to the emulation), the shifts and
rounding of the operands (:func:`_integer_plan`), and per output tile the residues'
exact products and their reconstruction (:func:`_accumulate`), certified in faithful
mode (:func:`.certify.certify_tile`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

from .. import faithful
from ..counts.estimate import abs_sum_upper, sq_norm_from_sums, sq_norm_upper
from ..counts.moduli import check_fixed, decide_auto
from ..native import native_entries, native_mask
from ..passes import passes_for
from ..scaling import apply_exponents
from .certify import certify_tile, faithful_moduli
from .moduli import MAX_MODULI, crt_constants
from .shifts import RecomputedBounds, block_shifts, bound_operand, integerize_into


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _timer(timers, key):
    """The driver's timer ``key`` (a context manager), or one that does nothing."""
    return timers.get(key) or _Null()


@dataclass
class _Block:
    """One inner block's operands and what its phases share: the output tiles, the
    normalized operands of a single tile (kept through all phases), the workspaces
    per tile shape, the profile counts and timers. ``faith``: False, "certify" or
    "bound" (:func:`crt_block`)."""

    xp: object
    engine: object
    a: object
    bt: object
    moduli: object
    scaling: str
    counts: dict
    timers: dict
    faith: object
    rtiles: list
    ctiles: list
    kept: dict = field(default_factory=dict)
    bounds: dict = field(default_factory=dict)
    spaces: dict = field(default_factory=dict)
    #: the maxima of |A|'s and |B^T|'s rows over the whole inner block, where the
    #: caller has them (``row_stats`` then need not read them again), else None
    row_max: tuple = (None, None)

    @property
    def m(self):
        return self.a.shape[0]

    @property
    def k(self):
        return self.a.shape[1]

    @property
    def p(self):
        return self.bt.shape[0]

    @property
    def single(self):
        return len(self.rtiles) == 1 and len(self.ctiles) == 1

    @property
    def from_stats(self):
        """The rows' statistics are taken from the operands themselves (the engine's
        compiled ``row_stats``: no normalized copy), with the accurate scaling's bound
        operand: its count is decided from W, and the products' residues come from the
        rows too. The fast scaling's estimates and faithful mode's absolute sums read
        the normalized rows, which are then kept instead, as on engines without the
        pass."""
        return (self.scaling == "accurate" and not self.faith
                and getattr(self.engine, "row_stats", None) is not None)

    def rows(self, which, r0, r1):
        """Rows r0:r1 of A ("a") or B^T ("b") as the caller gave them."""
        return (self.a if which == "a" else self.bt)[r0:r1]

    def operand(self, which, r0, r1):
        """``(x, e, norms, abs_sums)`` of rows r0:r1 of A ("a") or B^T ("b"): ``x`` their
        normalized copy (None where :attr:`from_stats`: :meth:`normalized` makes it),
        ``e`` their exponents."""
        key = (which, r0)
        if key not in self.kept:
            xp, engine = self.xp, self.engine
            # the row norms from fixed-point sums, the same floats on every engine (the
            # shifts depend on them)
            if self.from_stats:
                e, fsq, bound = self._stats(which, r0, r1, self.single)
                if bound is not None:  # one tile: for the bound GEMM
                    self.bounds[key] = bound
                val = (None, e, sq_norm_from_sums(xp, fsq, self.k), None)
            else:
                x, e = passes_for(engine, xp).normalize_rows(self.rows(which, r0, r1))
                val = (x, e, sq_norm_upper(xp, x, engine),
                       abs_sum_upper(xp, x, engine) if self.faith else None)
            if not self.single:
                return val
            self.kept[key] = val
        return self.kept[key]

    def _stats(self, which, r0, r1, bound):
        """``(e, fsq, bound)`` of rows r0:r1 (``row_stats``); ``bound``: also the bound
        operand, ``(storage (1, rows, k), digit sums)``, else None."""
        rows = self.rows(which, r0, r1)
        passes = passes_for(self.engine, self.xp)
        out = passes.slice_storage(rows, 1, "crt", which) if bound else None
        top = self.row_max[0 if which == "a" else 1]
        e, fsq, dsum = passes.row_stats(rows, None if out is None else out[0],
                                        None if top is None else top[r0:r1])
        return e, fsq, (None if out is None else (out, dsum))

    def normalized(self, which, r0, r1):
        """The normalized rows r0:r1 (the estimates' operands)."""
        x = self.operand(which, r0, r1)[0]
        if x is None:
            x = passes_for(self.engine, self.xp).normalize_rows(self.rows(which, r0, r1))[0]
        return x

    def bound_operand(self, which, r0, r1, sums):
        """``(bound operand (1, rows, k), its digit sums or None)`` of rows r0:r1 (the
        digit sums where ``sums``): :meth:`operand`'s where it kept them (once), else
        made here."""
        got = self.bounds.pop((which, r0), None)
        if got is None and self.from_stats:
            got = self._stats(which, r0, r1, True)[2]
        if got is None:
            x = self.operand(which, r0, r1)[0]
            out = bound_operand(self.xp, self.engine, x, which)
            got = (out, faithful.digit_sums(self.xp, self.engine, out)[0] if sums else None)
        return got

    def workspace(self, mm, pp):
        """The engine's workspace for (mm, pp) tiles, one per shape for every product of
        the block: the engine keeps its output buffer (and any padded copy of the
        operands) there instead of remaking them per modulus."""
        if (mm, pp) not in self.spaces:
            self.spaces[(mm, pp)] = self.engine.workspace(mm, pp)
        return self.spaces[(mm, pp)]


@dataclass
class _Rows:
    """The rows' binary exponents ``ea``, ``eb``, norm bounds ``na``, ``nb`` and (faithful
    mode) absolute-sum bounds ``sx``, ``sy`` of the normalized A and B^T."""

    ea: object
    eb: object
    na: object
    nb: object
    sx: object = None
    sy: object = None


@dataclass
class _Bounds:
    """The accurate scaling's bound products W: ``tiles`` (a list of kept tiles, or a
    :class:`.shifts.RecomputedBounds`), ``planner`` (the engine's summary, or None) and the
    digit sums ``ca``, ``cb`` (``moduli="auto"``)."""

    tiles: object
    planner: object = None
    ca: object = None
    cb: object = None

    def view(self):
        """W's tiles as the planning passes read them."""
        return self.planner.tiles if self.planner is not None else self.tiles

    def release(self):
        """Drop W: the plan is made."""
        self.tiles.clear()
        self.planner = None


@dataclass
class _Integers:
    """The shifts ``mu``, ``nu`` of the chosen count, the rows rounded to nearest
    (``ra``, ``rb``; the others truncated), the integers' bit bounds and the final
    exponents ``ea``, ``eb`` (the rows' less their shifts)."""

    mu: object
    nu: object
    ra: object
    rb: object
    bits_a: int
    bits_b: int
    ea: object
    eb: object


def _row_vectors(blk):
    """The :class:`_Rows` of the whole block, tile by tile: a tile's normalized rows are
    dropped as soon as they are summarized (all tiles' at once would be a copy of both
    operands)."""
    xp = blk.xp
    parts_a = [blk.operand("a", i0, i1)[1:] for i0, i1 in blk.rtiles]
    parts_b = [blk.operand("b", j0, j1)[1:] for j0, j1 in blk.ctiles]

    def join(parts, idx, many):
        return xp.concatenate([v[idx] for v in parts]) if many else parts[0][idx]

    ma, mb = len(blk.rtiles) > 1, len(blk.ctiles) > 1
    rows = _Rows(join(parts_a, 0, ma), join(parts_b, 0, mb), join(parts_a, 1, ma),
                 join(parts_b, 1, mb))
    if blk.faith:
        rows.sx, rows.sy = join(parts_a, 2, ma), join(parts_b, 2, mb)
    return rows


def _bound_gemms(blk, ca, cb, first=False, own=False):
    """W tile by tile (one bound GEMM each); the first pass also takes the digit sums;
    ``own``: each tile in a buffer of its own (kept by the engine's summary), else in
    the block's shared workspace (valid until the next)."""
    engine, timers, counts = blk.engine, blk.timers, blk.counts
    for i0, i1 in blk.rtiles:
        with _timer(timers, "split"):
            sums = first and blk.moduli == "auto"
            ba, da = blk.bound_operand("a", i0, i1, sums)
            if sums:
                ca[i0:i1] = da
        for j0, j1 in blk.ctiles:
            with _timer(timers, "split"):
                sums = first and blk.moduli == "auto" and i0 == 0
                bb, db = blk.bound_operand("b", j0, j1, sums)
                if sums:
                    cb[j0:j1] = db
            with _timer(timers, "int8"):
                ws = (engine.workspace(i1 - i0, j1 - j0) if own
                      else blk.workspace(i1 - i0, j1 - j0))
                w, calls = engine.int_matmul_sum(ba, bb, [(0, 0)], 128, 128, ws=ws)
                del ws, bb
            counts["int8_gemms"] += 1
            counts["bound_gemms"] += 1
            counts["engine_calls"] += calls
            yield i0, i1, j0, j1, w
            del w
        del ba, da


def _bound_products(blk, keep_bounds):
    """The :class:`_Bounds` of the block (empty for the fast scaling). ``keep_bounds``:
    W kept for the whole output until the shifts are known, else recomputed per pass
    (:class:`.shifts.RecomputedBounds`)."""
    xp, engine, timers = blk.xp, blk.engine, blk.timers
    with _timer(timers, "split"):
        planner = passes_for(engine, xp).crt_bound_shifts  # a route: W as int32 maxima
        planner = (planner(blk.m, blk.p) if planner is not None and blk.scaling == "accurate"
                   else None)
    bounds = _Bounds([], planner)
    if blk.scaling != "accurate":
        return bounds
    # sum_k ceil(128 |x_ik|) per row (exact integers): the slack of W against
    # 2**14 |X| |Y|^T, for auto's decision from W alone (count._bound_decision)
    ca, cb = bounds.ca, bounds.cb = xp.zeros(blk.m), xp.zeros(blk.p)
    if keep_bounds:
        for tile in _bound_gemms(blk, ca, cb, True, planner is not None):
            with _timer(timers, "split"):
                if planner is None:
                    bounds.tiles.append(tile[:4] + (tile[4].copy(),))  # W is reused
                else:
                    planner.add(*tile)
            del tile
        return bounds
    # W does not fit the memory plan: the first pass keeps only its row maxima (the
    # engine's summary) and the digit sums; each later pass over W (column maxima for
    # each count's shifts, auto's decision from W, the fixed count's check) recomputes
    # it tile by tile: the same integers, so the same shifts
    if planner is not None:
        for tile in _bound_gemms(blk, ca, cb, True):
            with _timer(timers, "split"):
                planner.add(*tile, keep=False)
            del tile
    elif blk.moduli == "auto":
        for i0, i1 in blk.rtiles:
            ca[i0:i1] = blk.bound_operand("a", i0, i1, True)[1]
        for j0, j1 in blk.ctiles:
            cb[j0:j1] = blk.bound_operand("b", j0, j1, True)[1]
    bounds.tiles = RecomputedBounds(partial(_bound_gemms, blk, ca, cb))
    if planner is not None:
        planner.stream(bounds.tiles)
    return bounds


def _all_native(blk, out):
    """The block's result when ``moduli="auto"`` leaves no entry to the emulation:
    every entry native (faithful mode: zeros, every entry computed exactly later)."""
    xp, counts, m, p = blk.xp, blk.counts, blk.m, blk.p
    counts["slices"].append(0)
    if blk.faith:
        return xp.zeros((m, p)), (xp.zeros((m, p), dtype=bool) if blk.faith == "certify"
                                  else xp.full((m, p), xp.inf))
    counts.setdefault("crt_rho", []).append(math.inf)
    c = xp.empty((m, p)) if out is None else out
    for i0, i1 in blk.rtiles:
        for j0, j1 in blk.ctiles:
            t = xp.empty((i1 - i0, j1 - j0))
            native_entries(xp, t, blk.a[i0:i1], blk.bt[j0:j1], xp.ones(t.shape, dtype=bool))
            _store(xp, c, t, i0, j0, out is not None, blk.timers)
    return c


def _integer_plan(blk, rows, mu, nu):
    """The :class:`_Integers` of the shifts ``mu``, ``nu``: rows whose shift leaves room
    for the rounding margin are rounded to nearest, the others truncated."""
    xp = blk.xp
    if blk.scaling == "fast":
        thr = 6.0 + 0.5 * math.log2(max(blk.k, 1))
        ra, rb = mu >= thr, nu >= thr
    else:
        ra, rb = mu >= 12.0, nu >= 12.0
    bits_a = int(float(mu.max())) + 2 if mu.size else 1
    bits_b = int(float(nu.max())) + 2 if nu.size else 1
    ea = rows.ea.astype(xp.int32) - mu.astype(xp.int32)
    eb = rows.eb.astype(xp.int32) - nu.astype(xp.int32)
    return _Integers(mu, nu, ra, rb, bits_a, bits_b, ea, eb)


def _residues(blk, which, r0, r1, ints, consts, nmod):
    """The residues of the integerized rows r0:r1 of A ("a") or B^T ("b") for the
    first ``nmod`` moduli, in the engine's layout for products: on the GPU they are
    stored padded once, so no modulus's GEMM copies them.

    Where the count's phase kept the tile's normalized rows (one tile) they are used;
    otherwise the residues are taken from the operand's rows themselves, scaled by
    ``2**-e`` with ``e`` the rows' final exponents (:class:`_Integers`), with no
    normalized copy (:func:`_scaled_residues`)."""
    xp, engine = blk.xp, blk.engine
    if which == "a":
        shift, rnd, bits, ef = ints.mu[r0:r1], ints.ra[r0:r1], ints.bits_a, ints.ea[r0:r1]
    else:
        shift, rnd, bits, ef = ints.nu[r0:r1], ints.rb[r0:r1], ints.bits_b, ints.eb[r0:r1]
    kept = blk.kept.get((which, r0))
    if kept is not None and kept[0] is not None and kept[0].shape[0] == r1 - r0:
        x = kept[0]  # one tile: the count's normalized rows
        out = passes_for(engine, xp).slice_storage(x, nmod, "crt", which)
        integerize_into(xp, engine, x, shift, rnd, consts.moduli, bits, out)
        return out
    rows = (blk.a if which == "a" else blk.bt)[r0:r1]
    out = passes_for(engine, xp).slice_storage(rows, nmod, "crt", which)
    _scaled_residues(blk, rows, shift, ef, rnd, consts.moduli, bits, out)
    return out


#: Rows of the operand normalized at a time where a row's scale is out of a float's
#: range (:func:`_scaled_residues`): a bounded copy, within the memory plan's allowance.
_NORMALIZE_BLOCK_BYTES = 1 << 20


def _scaled_residues(blk, rows, shift, ef, rnd, mods, bits, out):
    """The residues of ``rint|trunc(2**shift x)``, ``x`` the normalized ``rows``, from
    ``rows`` themselves: ``2**shift x = rows * 2**-ef`` (``ef`` = the rows' exponents less
    their shifts), one exact scaling where the value is at least a half (the only
    values that round or truncate to a nonzero integer: they and their normalized
    ``x`` are normal numbers), so the same residues as the normalized path, without
    its float64 copy of the tile (a pass over it, and its memory under a limit).
    Rows whose ``2**-ef`` is not a float (exponents beyond +-1022: rows of subnormals or
    near overflow) take the normalized path, a block of rows at a time."""
    xp, engine = blk.xp, blk.engine
    n, k = rows.shape
    scale = -ef.astype(xp.int64)
    if not n or bool(((scale >= -1022) & (scale <= 1023)).all()):
        integerize_into(xp, engine, rows, scale, rnd, mods, bits, out)
        return
    step = max(1, _NORMALIZE_BLOCK_BYTES // (8 * max(k, 1)))
    for i0 in range(0, n, step):
        i1 = min(n, i0 + step)
        x = passes_for(engine, xp).normalize_rows(rows[i0:i1])[0]
        integerize_into(xp, engine, x, shift[i0:i1], rnd[i0:i1], mods, bits, out[:, i0:i1])
        del x


def _accumulate(blk, da, db, consts, nmod, tile_shape):
    """The accumulator of one output tile after the exact products of its residues
    ``da``, ``db`` for each of the ``nmod`` moduli (the engine's fused one where it has
    one and, in faithful mode, it rebuilds with a bound)."""
    xp, engine, timers, counts = blk.xp, blk.engine, blk.timers, blk.counts
    acc = passes_for(engine, xp).crt_accumulator(consts, bool(blk.faith))
    if hasattr(acc, "recycle"):  # db[t] is dead after product t: room for its result
        acc.recycle(db)
    fused = getattr(acc, "product", None)
    for t in range(nmod):
        with _timer(timers, "int8"):
            # the engine's GEMM that reduces as it goes, where it has one
            done = fused is not None and fused(t, da, db)
            if not done:
                prod, calls = engine.int_matmul_sum(da, db, [(t, t)], 128, 128,
                                                    ws=blk.workspace(*tile_shape))
        counts["int8_gemms"] += 1
        if done:
            counts["engine_calls"] += 1
            counts["passes"] += 1
            continue
        counts["engine_calls"] += calls
        with _timer(timers, "acc"):
            acc.add(t, prod)
        counts["passes"] += 1
        del prod
    return acc


def crt_block(xp, engine, a, bt, moduli, scaling, max_moduli, counts, timers, tiles=None,
               out=None, faith=False, verdicts=None, keep_bounds=True, retile=None,
               row_max=None):
    """One inner block over all output tiles; returns the block's product, or adds it
    to ``out`` (a previous block's result) tile by tile. Faithful mode (``faith``
    "certify" or "bound"): returns ``(c, certified)`` or ``(c, bound)`` (final units),
    the entries left to native arithmetic never certified (bound ``inf``).
    ``verdicts``: a list, for a fixed ``moduli``, to which ``(need, natives)`` is
    appended when the count falls short of auto's (:func:`.count._fixed_short`).
    ``keep_bounds`` (accurate scaling): W kept for the whole output while the plan is
    made (False: recomputed per pass, :class:`.shifts.RecomputedBounds`; the memory plan's
    choice). ``retile``: the product phase's tiles for the count chosen
    (:func:`.product.crt_matmul_2d`). ``row_max``: ``(A's, B^T's)`` row maxima of
    ``|x|`` over this block's inner indices, or None."""
    m, k = a.shape
    p = bt.shape[0]
    mt, pt = tiles or (m, p)
    blk = _Block(xp, engine, a, bt, moduli, scaling, counts, timers, faith,
                 [(i0, min(m, i0 + mt)) for i0 in range(0, m, mt)],
                 [(j0, min(p, j0 + pt)) for j0 in range(0, p, pt)],
                 row_max=row_max or (None, None))
    with _timer(timers, "split"):
        rows = _row_vectors(blk)
    bounds = _bound_products(blk, keep_bounds)
    blk.bounds.clear()  # (the bound GEMMs took them)

    natives = {}
    with _timer(timers, "split"):
        if moduli == "auto":
            n_idx, natives, plan = decide_auto(blk, rows, bounds, max_moduli,
                                               scaling == "accurate")
            if n_idx is None and natives:
                return _all_native(blk, out)
            # the predicted spread, for profiles and calibration (the decision is above)
            counts.setdefault("crt_rho", []).append(
                -0.5 * math.log2(plan.H) if 0 < plan.H < math.inf else -math.inf)
            nmod = n_auto = 1 if n_idx is None else n_idx + 1
            if faith:
                nmod = min(nmod + faithful.EXTRA_MODULI, MAX_MODULI)
        else:
            nmod = moduli
        consts = crt_constants(nmod)
        mu, nu = block_shifts(blk, rows, bounds, consts.log2P)
        if faith and moduli == "auto" and _predicts(blk, natives):
            fewer = faithful_moduli(xp, a, bt, rows, _integer_plan(blk, rows, mu, nu), k,
                                    n_auto, nmod)
            if fewer < nmod:  # the shifts of the count taken
                nmod = fewer
                consts = crt_constants(nmod)
                mu, nu = block_shifts(blk, rows, bounds, consts.log2P)
        if verdicts is not None and moduli != "auto":
            check_fixed(blk, rows, bounds, mu, nu, consts.log2P, max_moduli, verdicts)
        bounds.release()  # the bound matrix is no longer needed
        counts["slices"].append(nmod)
        ints = _integer_plan(blk, rows, mu, nu)

    c = out
    res_all = (xp.empty((m, p), dtype=bool if faith == "certify" else xp.float64)
               if faith else None)
    rtiles, ctiles = _product_tiles(blk, retile, nmod)
    single = len(rtiles) == 1 and len(ctiles) == 1
    for i0, i1 in rtiles:
        with _timer(timers, "split"):
            da = _residues(blk, "a", i0, i1, ints, consts, nmod)
        for j0, j1 in ctiles:
            with _timer(timers, "split"):
                db = _residues(blk, "b", j0, j1, ints, consts, nmod)
                blk.kept.clear()
            native = native_mask(xp, natives, i0, i1, j0, j1)
            acc = _accumulate(blk, da, db, consts, nmod, (i1 - i0, j1 - j0))
            del db
            with _timer(timers, "acc"):
                if faith:
                    cpr, res = certify_tile(xp, engine, faith, acc, rows, ints, k, native,
                                            (i0, i1, j0, j1))
                else:
                    cpr = acc.result()
                apply_exponents(xp, cpr, ints.ea[i0:i1], ints.eb[j0:j1], 0.0,
                                consts.log2P + 1.0, engine)
                if faith:
                    res_all[i0:i1, j0:j1] = res
                    if c is None:
                        c = xp.empty((m, p))
                    c[i0:i1, j0:j1] = cpr
                    continue
            if native is not None:
                native_entries(xp, cpr, a[i0:i1], bt[j0:j1], native)
            if single and c is None:
                return cpr
            if c is None:
                c = xp.empty((m, p))
            _store(xp, c, cpr, i0, j0, out is not None, timers)
        del da
    return (c, res_all) if faith else c


def _product_tiles(blk, retile, nmod):
    """The row and column tiles of the product phase: the memory plan's for ``nmod``
    moduli (``retile``; W and the count's passes are over), else the count's."""
    new = retile(nmod) if retile is not None else None
    m, p = blk.m, blk.p
    if new is None or new == (blk.rtiles[0][1], blk.ctiles[0][1]):
        return blk.rtiles, blk.ctiles
    blk.kept.clear()  # its one tile's normalized rows: not the products' tiles
    return ([(i0, min(m, i0 + new[0])) for i0 in range(0, m, new[0])],
            [(j0, min(p, j0 + new[1])) for j0 in range(0, p, new[1])])


def _predicts(blk, natives):
    """Whether faithful mode's count is chosen from a prediction: a large product with
    no native entries (a property of the product, not of its tiles or memory plan: where
    W is recomputed per pass, the second count's shifts take one more pass of bound
    GEMMs, cheaper than the modulus saved)."""
    return blk.m * blk.p * blk.k >= faithful.PREDICT_MIN_SIZE and not natives


def _store(xp, c, tile, i0, j0, add, timers):
    """``c[tile] = tile`` (the first inner block) or ``c[tile] += tile`` (the others)."""
    view = c[i0:i0 + tile.shape[0], j0:j0 + tile.shape[1]]
    if add:
        with _timer(timers, "acc"):
            view += tile
    else:
        view[...] = tile
