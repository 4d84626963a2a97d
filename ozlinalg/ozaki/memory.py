"""Working-memory plans of one emulated product (``options(memory_limit=...)``).

The *working memory* of a product is what it holds beside its inputs and its
result: normalized copies, slices or residues, accumulators, the engine's
output buffers, Ozaki scheme II's bound products ``W``, the faithful mode's
certificates. The driver plans it before allocating anything: it picks the
largest output tile (halving the longer side, down to :data:`MIN_TILE`) whose
plan fits the limit, and raises :class:`MemoryError` when even the smallest
plan does not (an explicit ``memory_limit`` only: the engine's default budget
is a guess about the machine, and a product beyond it is tiled as far as it
goes and attempted).

The inner block never shrinks for a limit: where the inner dimension is cut
decides the slice widths, the counts and the order of the FP64 sums, so the
result would depend on the limit. Its share of the plan (``c_in (mt + pt) k``
and the slices) is what makes the smallest plan grow with ``k``.

The plan, :func:`plan_bytes`, is linear in four measures of the product::

    need = c_in (mt + pt) k  +  b s (mt' + pt') k'  +  c_out mt pt
           + c_tile tiles  +  c_glob m p  +  extra

* ``c_in (mt + pt) k``: normalized copies of a tile's rows of A and B^T (and
  their temporaries) over one inner block of length ``k``;
* ``b s (mt' + pt') k'``: ``s`` slices (residues) of ``b`` bytes per entry
  (the engine's ``slice_bytes``; float32 for SplitFP), rows padded to 4 and
  ``k`` to 16 as the GPU engine stores them;
* ``c_out mt pt``: the tile's accumulators, the engine's INT32/FP64 result,
  the estimate, group accumulators; more for several inner blocks (the
  compensated sum of the blocks), the faithful mode (compensation, slop,
  bounds, certificate), and per modulus for Ozaki scheme II;
* ``c_tile`` per tile: the Python objects of a tile (index tuples, the count
  plan's candidates) -- why tiles do not shrink without end;
* ``c_glob m p``: what lives for the whole output: Ozaki scheme II's bound
  products ``W`` when they are kept (:func:`plan`), the faithful Ozaki-II
  certificate (and, with several inner blocks, the compensated sum of the
  blocks over the whole output);
* ``extra``: what the driver knows on top (copies of operands with Inf / NaN
  lines, the native products of those lines, a column-major copy).

A product runs in two phases that never overlap: the count's (normalized rows and
estimates; for Ozaki scheme II also the rows' exponents and norms and the bound
products W) holds no slices or residues, and the products' (each tile's slices or
residues and accumulators) starts once the count is chosen (and W dropped). The two
take tiles of their own (:func:`count_bytes`, :func:`product_plan`: the products'
for the count chosen, the plan's for the most slices ``slices="auto"`` may take), and
the plan is the larger phase. SplitFP and the faithful mode keep one set of tiles and
the sum of both phases (in faithful mode the exact recomputation of the entries left
uncertified follows the products, a strip of tile rows at a time).

The coefficients are per engine (``Engine.memory_model``, falling back to
:data:`MEMORY_MODEL` key by key) and were fitted so that the plan bounds the
measured peak (``benchmarks/studies/memory_bound.py``: tracemalloc, which sees
NumPy's buffers and the scratch pool's, and the process's resident-set peak,
which also sees what oneDNN and the compiled kernels allocate natively).

The bound. Within :data:`SLACK_FRACTION` of the limit plus :data:`SLACK_BYTES`,
the working memory of one real product stays below ``memory_limit``::

    peak - inputs - result <= memory_limit (1 + SLACK_FRACTION) + SLACK_BYTES

The allowance covers what no coefficient follows: vectors of length m, p or
k (exponents, norms, shifts, digit sums), per-thread row buffers of the
compiled kernels (a few rows of k or p doubles each), oneDNN's packing
buffers and the allocator's per-thread arenas (which tracemalloc does not see:
with 2 threads the resident set was up to 3.7 MiB above the traced peak, and
up to 3.4 MiB above the limit, at the smallest tiles after earlier products,
1.2-2 MiB alone; oneDNN's buffers are per thread, so more threads may need
more) and Python's own objects. Counted in the plan as held bytes: the
balanced copies of both operands (``balance=True``, made before the product;
the balancing's own transients, vectors of length k and for complex operands
one real or imaginary part while a copy is scaled, are not measured). Not covered: the complex
schemes' real and
imaginary parts (each real product is bounded itself), the column-major copy
of the result on engines that accumulate row-major only (the factorizations'
updates on the float32 SGEMM engine). Within the allowance by
construction: the count's host refinement of the few entries an estimate
cannot decide (:class:`.decide.Operands`, at most 1 MiB of gathered rows at a
time) and the faithful mode's exact recomputation (:func:`.faithful.
recompute_uncertified`: quarter tiles, 2048 entries a call; the limbs of
:mod:`.exactdot`'s NumPy path a piece of the inner dimension at a time).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

__all__ = ["MEMORY_MODEL", "MIN_TILE", "SLACK_BYTES", "SLACK_FRACTION", "MemoryPlan",
           "count_bytes", "family", "plan", "plan_bytes", "product_bytes", "product_plan",
           "working_bytes"]

#: The smallest output tile side the planner goes down to.
MIN_TILE = 8
#: Fixed allowance of the bound (bytes): small temporaries no coefficient follows.
SLACK_BYTES = 4 << 20
#: Relative allowance of the bound.
SLACK_FRACTION = 0.05

#: Coefficients of :func:`plan_bytes` for the generic passes (bytes per tile input
#: entry ``(mt + pt) k``, per tile output entry ``mt pt``, per output entry ``m p``,
#: per tile); an engine with fused passes brings its own (``Engine.memory_model``,
#: any key it lacks taken from here). Families: ``ef`` (``hybrid-ef``,
#: ``bitmask-ef``), ``product`` (``bitmask``, ``rn``: one FP64 pass per product),
#: ``fp`` (``splitfp``), ``crt`` and ``crt-fast`` (Ozaki scheme II).
MEMORY_MODEL = {
    "input": 16, "output": 40,
    "product_input": 16, "product_output": 72,
    "fp_input": 24, "fp_output": 72,
    "crt_input": 64, "crt_output": 80, "crt_output_per_modulus": 0,
    # Ozaki-II's product phase (the residues' products, once the count is known): per
    # tile input entry, what beside the residues a tile's rows hold while their
    # residues are made (:func:`product_plan`)
    "crt_product_input": 64,
    # Ozaki-II's bound products W per output entry (float64 copies of the tiles;
    # kept for the whole output, or one tile's when recomputed per pass)
    "bounds": 8,
    # several inner blocks: the tile's compensated sum (Ozaki-I) per output entry
    "blocks_output": 24,
    # faithful mode, per tile output entry: compensation, slop, bound, certificate
    "faithful_output": 56, "faithful_crt_output": 64,
    # faithful Ozaki-II for the whole output: the certificate (1 byte), and with
    # several inner blocks (n > 130048) the compensated sum of the blocks and their
    # bounds (hi, lo, bound, |lo| sums; a block's values and bounds; the TwoSum's
    # temporaries): counted from the code, not measured (inputs of 1 GB and more)
    "faithful_crt_global": 1, "faithful_crt_blocks_global": 72,
    "tile": 1024,
}


def coefficient(model, key):
    """``model[key]``, or the generic coefficient where the engine has none."""
    if model is not None and key in model:
        return model[key]
    return MEMORY_MODEL[key]


def family(split, groupwise):
    """The coefficients' family of a method (``Method.split``, ``Method.groupwise``)."""
    if split in ("crt", "crt-fast"):
        return split
    if split == "fp":
        return "fp"
    return "ef" if groupwise else "product"


def _prefix(fam):
    return {"ef": "", "product": "product_", "fp": "fp_", "crt": "crt_",
            "crt-fast": "crt_"}[fam]


def working_bytes(mt, pt, k, s, crt=False, slice_bytes=4, model=None, faithful=False, *,
                  fam=None, blocks=1, bounds=False, phase="all"):
    """Planned working memory (bytes) of ONE output tile (mt, pt) over an inner block
    of length ``k`` with up to ``s`` slices (moduli): :func:`plan_bytes` without the
    per-tile and whole-output terms. ``bounds``: Ozaki-II's W of this tile (when it
    is recomputed per pass instead of kept for the whole output). ``phase``:
    ``"count"`` (the count's phase: normalized rows and estimates, for Ozaki-II also
    the row vectors and W; no slices or residues), ``"product"`` (Ozaki-II's residues'
    products: no W, ``crt_product_input`` for the rows) or ``"all"`` (both at once:
    Ozaki-I's products, which also hold the normalized rows)."""
    fam = fam or ("crt" if crt else "ef")
    pre = _prefix(fam)
    slices = slice_bytes * s * (-(-mt // 4) * 4 + -(-pt // 4) * 4) * (-(-k // 16) * 16)
    out = coefficient(model, pre + "output")
    inp = coefficient(model, pre + "input")
    if fam in ("crt", "crt-fast"):
        if phase == "product":
            inp = coefficient(model, "crt_product_input")
            bounds = False
        elif phase == "count":
            slices = 0
        out += coefficient(model, "crt_output_per_modulus") * s
        if faithful:
            out += coefficient(model, "faithful_crt_output")
        if bounds:
            out += coefficient(model, "bounds")
    elif phase == "count":  # Ozaki-I's count: normalized rows and estimates, no slices
        slices = 0
    else:
        if faithful:
            out += coefficient(model, "faithful_output")
        if blocks > 1:
            out += coefficient(model, "blocks_output")
    return int(inp * (mt + pt) * k + slices + out * mt * pt)


def global_bytes(m, p, fam, model=None, faithful=False, blocks=1, keep_bounds=False):
    """Planned working memory (bytes) that lives for the whole m x p output."""
    per = 0
    if fam == "crt" and keep_bounds:
        per += coefficient(model, "bounds")
    if faithful and fam in ("crt", "crt-fast"):
        per += coefficient(model, "faithful_crt_global")
        if blocks > 1:
            per += coefficient(model, "faithful_crt_blocks_global")
    return int(per * m * p)


def plan_bytes(m, p, k, s, tiles, fam, slice_bytes, model=None, faithful=False, blocks=1,
               keep_bounds=True, extra=0):
    """The plan's bytes for output tiles ``tiles = (mt, pt)`` (module doc)."""
    if fam in ("crt", "crt-fast") and not faithful:  # the larger phase (module doc)
        return max(count_bytes(m, p, k, s, tiles, fam, slice_bytes, model, faithful, blocks,
                               keep_bounds, extra),
                   _product_total(m, p, k, s, tiles, fam, slice_bytes, model, faithful,
                                  blocks, extra))
    mt, pt = tiles
    count = -(-m // mt) * -(-p // pt)
    return (working_bytes(mt, pt, k, s, slice_bytes=slice_bytes, model=model,
                          faithful=faithful, fam=fam, blocks=blocks,
                          bounds=fam == "crt" and not keep_bounds)
            + int(coefficient(model, "tile")) * count + int(extra)
            + global_bytes(m, p, fam, model, faithful, blocks, keep_bounds))


def count_bytes(m, p, k, s, tiles, fam, slice_bytes, model=None, faithful=False, blocks=1,
                keep_bounds=True, extra=0):
    """The count's phase on tiles ``tiles``: the normalized rows and the estimates (for
    Ozaki-II also the rows' vectors and W, kept for the whole output or one tile's per
    pass); no slices or residues."""
    mt, pt = tiles
    count = -(-m // mt) * -(-p // pt)
    return (working_bytes(mt, pt, k, s, slice_bytes=slice_bytes, model=model,
                          faithful=faithful, fam=fam, blocks=blocks,
                          bounds=fam == "crt" and not keep_bounds, phase="count")
            + global_bytes(m, p, fam, model, faithful, blocks, keep_bounds)
            + int(coefficient(model, "tile")) * count + int(extra))


@dataclass(frozen=True)
class MemoryPlan:
    """A product's tiles and planned bytes.

    Attributes
    ----------
    tiles : (int, int)
        Output tile shape (mt, pt).
    need : int
        Planned working memory of the product with these tiles (bytes).
    keep_bounds : bool
        Ozaki-II (accurate scaling): the bound products W are kept for the whole
        output between the planning passes (False: recomputed tile by tile in each
        pass that reads them; the same values, one bound GEMM more per tile and pass).
    minimum : int
        The smallest plan's bytes (its tiles: ``minimum_tiles``).
    limit : int
        The budget planned for.
    """

    tiles: tuple
    need: int
    keep_bounds: bool
    limit: int
    #: ``() -> (bytes, tiles)`` of the smallest plan, computed when first asked (a
    #: product whose first tiles fit never needs it: tens of microseconds a call)
    lowest: object = field(repr=False, compare=False, default=None)

    @property
    def fits(self):
        return self.need <= self.limit

    @cached_property
    def _low(self):
        return self.lowest()

    @property
    def minimum(self):
        return self._low[0]

    @property
    def minimum_tiles(self):
        return self._low[1]


def _halvings(m, p):
    """Tile shapes from (m, p) down, halving the longer side, to :data:`MIN_TILE`."""
    mt, pt = max(m, 1), max(p, 1)
    yield mt, pt
    while max(mt, pt) > MIN_TILE:
        if mt >= pt:
            mt = max(MIN_TILE, -(-mt // 2)) if mt > MIN_TILE else mt
        else:
            pt = max(MIN_TILE, -(-pt // 2)) if pt > MIN_TILE else pt
        yield mt, pt


def plan(m, p, k, s, limit, fam, slice_bytes, model=None, faithful=False, blocks=1,
         extra=0):
    """The largest tiles whose plan fits ``limit`` (:class:`MemoryPlan`).

    The tiles of the count's phase (:func:`count_bytes`; SplitFP and faithful mode: one
    set of tiles for both phases); the products take their own (:func:`product_plan`,
    here for ``s`` slices or moduli, the most the count may take), and the plan's
    bytes are the larger phase's. Ozaki-II with the accurate scaling keeps W for the
    whole output when a plan with it fits, unless recomputing W per tile and pass
    allows tiles :data:`KEEP_W_AREA` times larger (then, and where no plan with W fits,
    it recomputes). Where no plan fits, the smallest one is returned
    (``fits`` False): the driver raises for an explicit limit and attempts it for the
    engine's default.

    Notes
    -----
    The smallest plan is not always the smallest tile: each tile costs
    ``coefficient("tile")`` bytes of Python objects, so below a few rows the count of
    tiles, not their size, decides.
    """
    keeps = (True, False) if fam == "crt" else (True,)
    if _phased(fam, faithful):
        # the two phases take tiles of their own: the count's are chosen here, the
        # products' once the count is known (product_plan), for the most slices here
        tiles = product_plan(m, p, k, s, limit, fam, slice_bytes, model, faithful, blocks,
                             extra)
        products = None if tiles is None else product_bytes(
            m, p, k, s, tiles, fam, slice_bytes, model, faithful, blocks, extra)

        def need(keep, tiles):
            return max(products, count_bytes(m, p, k, s, tiles, fam, slice_bytes, model,
                                             faithful, blocks, keep, extra))

        def lowest():
            least = min(product_bytes(m, p, k, s, t, fam, slice_bytes, model, faithful,
                                      blocks, extra) for t in _halvings(m, p))
            return min(((max(least, count_bytes(m, p, k, s, t, fam, slice_bytes, model,
                                                 faithful, blocks, keep, extra)), t, keep)
                        for keep in keeps for t in _halvings(m, p)), key=lambda c: c[0])
    else:
        def need(keep, tiles):
            return plan_bytes(m, p, k, s, tiles, fam, slice_bytes, model, faithful, blocks,
                              keep, extra)

        def lowest():
            return min(((need(keep, t), t, keep) for keep in keeps for t in _halvings(m, p)),
                       key=lambda c: c[0])

    best = {}  # keep -> the largest fitting (keep, tiles, need): halvings come largest first
    if not _phased(fam, faithful) or products is not None:
        for keep in keeps:
            for t in _halvings(m, p):
                b = need(keep, t)
                if b <= limit:
                    best[keep] = (keep, t, b)
                    break
    kept, recomputed = best.get(True), best.get(False)
    chosen = kept
    if recomputed is not None and (kept is None or _area(recomputed) >= KEEP_W_AREA * _area(kept)):
        chosen = recomputed

    if chosen is not None:  # (the plan computes its smallest once, when asked)
        return MemoryPlan(chosen[1], chosen[2], chosen[0], limit, lambda: lowest()[:2])
    b, t, keep = lowest()
    return MemoryPlan(t, b, keep, limit, lambda: (b, t))


def product_bytes(m, p, k, s, tiles, fam, slice_bytes, model=None, faithful=False, blocks=1,
                  extra=0):
    """The planned bytes of the product phase on tiles ``tiles`` (:func:`product_plan`)."""
    if fam in ("crt", "crt-fast") and not faithful:
        return _product_total(m, p, k, s, tiles, fam, slice_bytes, model, faithful, blocks,
                              extra)
    return plan_bytes(m, p, k, s, tiles, fam, slice_bytes, model, faithful, blocks, True,
                      extra)


def product_plan(m, p, k, s, limit, fam, slice_bytes, model=None, faithful=False,
                 blocks=1, extra=0):
    """The largest tiles for the product phase of a count ``s`` already chosen, or None
    where no tiles fit ``limit``.

    Ozaki-I (``fam`` "ef", "product", "fp"): the normalized rows, the slices and the
    accumulators of a tile (:func:`plan_bytes`). Ozaki-II: the phases that choose the
    count and the shifts (row vectors, the bound products W, the estimates) are over
    by then, and what lives is the tile's residues, its accumulators, and what an
    operand tile's rows hold beside their residues while these are made
    (``crt_product_input``: the generic passes' temporaries; the compiled residue kernel
    scales the operand's rows itself, with no normalized copy); W is gone. The driver
    asks with the count chosen (one per inner block, for the whole product);
    :func:`plan` with the most ``slices="auto"`` may take.
    """
    return next((tiles for tiles in _halvings(m, p)
                 if product_bytes(m, p, k, s, tiles, fam, slice_bytes, model, faithful,
                                  blocks, extra) <= limit), None)


def _phased(fam, faithful):
    """Whether the count's phase and the products' take tiles of their own: every family
    but SplitFP (one inner block of 1024, its count per block) and faithful mode (one
    set of tiles and the sum of both phases, which also covers the exact
    recomputation that follows)."""
    return fam != "fp" and not faithful


def _product_total(m, p, k, s, tiles, fam, slice_bytes, model, faithful, blocks, extra):
    """Ozaki-II's product phase on tiles ``tiles``: one tile's residues' products, what
    lives for the whole output but W, the per-tile and extra terms."""
    mt, pt = tiles
    count = -(-m // mt) * -(-p // pt)
    return (working_bytes(mt, pt, k, s, slice_bytes=slice_bytes, model=model,
                          faithful=faithful, fam=fam, blocks=blocks, phase="product")
            + global_bytes(m, p, fam, model, faithful, blocks, False)
            + int(coefficient(model, "tile")) * count + int(extra))


def _area(cand):
    return cand[1][0] * cand[1][1]


#: Ozaki-II keeps W for the whole output unless recomputing it per pass allows tiles
#: at least this many times larger. Keeping saves a bound GEMM per tile and planning
#: pass (about a fifth of the modulus GEMMs); a larger tile saves the passes over the
#: other operand's tiles, repeated once per row tile, and engine calls. Measured at
#: n = 2048 under 64 MiB on the 2-core Zen 2: the AVX2 engine took 2.24 s keeping W
#: (256 x 256 tiles) against 2.55 s recomputing it (256 x 512); the SGEMM engine 44 s
#: keeping W (32 x 64) against 29 s recomputing it (64 x 128).
KEEP_W_AREA = 4
