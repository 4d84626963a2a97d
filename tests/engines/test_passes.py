"""Every fused pass a CPU engine offers gives the bits of its generic form.

:func:`ozlinalg.ozaki.passes.passes_for` pairs each pass an engine offers with the
generic array code (the ``fused`` and ``generic`` attributes of a :class:`Passes`
callable); here both run on the same inputs (random, with zeros, subnormals and huge
rows, Inf / NaN where the driver lets them reach the pass, odd shapes, both memory
orders) and must agree bit for bit. A pass an engine offers without a case here
fails :func:`test_every_offered_pass_has_a_case`. The routes (``finish_ef``,
``crt_bound_shifts``, ``classify_estimate`` / ``kept_below``) and the estimates are
compared with their generic counterparts in tests/engines/test_engine_onednn.py.
"""
import numpy as np
import pytest
from conftest import cpu_engine_or_skip

from ozlinalg.engines.base import Engine
from ozlinalg.ozaki import faithful
from ozlinalg.ozaki.crt import MODULI, CRTAccumulator, crt_constants
from ozlinalg.ozaki.passes import FUSED, passes_for
from ozlinalg.testing import random_matrix

ENGINES = ["sgemm", "avx2", "onednn"]
SHAPES = [(1, 1), (1, 300), (40, 1), (9, 7), (33, 517), (130, 65)]


@pytest.fixture(params=ENGINES)
def engine(request):
    return cpu_engine_or_skip(request.param)


def _order(x, order):
    return np.asfortranarray(x) if order == "F" else np.ascontiguousarray(x)


def _matrix(rng, shape, order, nonfinite=False):
    rows, k = shape
    a = random_matrix(rng, rows, k, 4.0)
    a[0, 0] = 5e-324
    if rows > 3:
        a[1] = 0.0
        a[2] *= 2.0**-1040  # a subnormal row
        a[3] *= 2.0**1000
    if nonfinite and rows > 6 and k > 2:
        a[4, 1], a[5, 0], a[6, 2] = np.inf, -np.inf, np.nan
    return _order(a, order)


def _normalized(rng, shape, order):
    x, _ = passes_for(None, np).normalize_rows(_matrix(rng, shape, order))
    return x


def _equal(got, want):
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _equal(g, w)
    elif want is None or isinstance(want, (bool, float, int)):
        pass  # a done flag: the fused pass says True, the generic code returns nothing
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _outputs(args, idx):
    """The arguments ``args`` (a tuple of arrays) the pass writes into: ``idx``."""
    return tuple(args[i] for i in idx)


def _copy(args):
    return tuple(a.copy(order="K") if isinstance(a, np.ndarray) else a for a in args)


# Each case: (arguments for one call, indices of the arguments written in place).


def _cases(name, engine, rng, shape, order):
    rows, k = shape
    passes = passes_for(engine)
    if name == "normalize_rows":
        yield (_matrix(rng, shape, order),), ()
    elif name == "split_rows":
        for kind, s, width in (("hybrid", 9, 7), ("bitmask", 5, 7), ("rn", 6, 6)):
            x = _normalized(rng, shape, order)
            out = passes.slice_storage(x, s, kind, "b")
            yield (kind, x, s, width, out, np.empty((s, rows))), (4, 5)
    elif name == "split_raw":
        for kind, operand in (("hybrid", "a"), ("hybrid", "b"), ("bitmask", "a")):
            yield (kind, _matrix(rng, shape, order), 8, 7, operand), ()
    elif name == "empty_slices_like":
        return  # storage: its layout, not bits (every other case writes into it)
    elif name == "abs_max":
        for axis in (0, 1):
            yield (_matrix(rng, shape, order, nonfinite=True), axis), ()
    elif name == "abs_max_both":
        yield (_matrix(rng, shape, order, nonfinite=True),), ()
        x = _matrix(rng, (rows + 2, k + 3), order)
        yield (x[1:-1, 2:-1],), ()  # a block of a larger matrix: unit-stride lines
    elif name == "abs_min_nonzero":
        x = _matrix(rng, shape, order)
        x[0] = 0.0  # a zero row
        if rows > 1 and k > 1:
            x[1, 1] = -5e-324  # the smallest subnormal, negative
        yield (x,), ()
        yield (_matrix(rng, shape, order, nonfinite=True),), ()
        yield (_order(np.zeros(shape), order),), ()  # none nonzero: inf
    elif name == "fixed_sums":
        for square in (False, True):
            x = _normalized(rng, shape, order)
            x[0, :3] = 2.0**-600  # squares underflow
            yield (x, square), ()
    elif name == "digit_sums":
        d = rng.integers(-128, 128, (3, rows, k)).astype(np.int8)
        d[0, 0] = -128
        if order == "F":
            d = np.ascontiguousarray(d.transpose(0, 2, 1)).transpose(0, 2, 1)
        yield (d,), ()
    elif name == "bound_r_min":
        w = rng.integers(0, 2**31 - 1, (rows, k)).astype(np.int32)
        ca = rng.integers(0, 129 * 400, rows).astype(np.float64)
        cb = rng.integers(0, 129 * 400, k).astype(np.float64)
        num = [np.ldexp(1.0, -rng.integers(0, 40, n)) * rng.random(n) for n in (rows, k, rows, k)]
        num[0][0] = 0.0
        yield (w, ca, cb, num, 2.0**-28 / 400 * (1 - 2.0**-40)), ()
    elif name == "crt_residues":
        x = _normalized(rng, shape, order)
        shift = rng.integers(10, 90, rows).astype(float)
        mult = np.ldexp(np.ones(rows), shift.astype(np.int32))
        mods = MODULI[:12]
        for operand in (None, "a", "b"):
            out = passes.slice_storage(x, len(mods), "crt", operand)
            yield (x, mult, shift >= 30, mods, int(shift.max()) + 2, out), (5,)
    elif name == "crt_bound":
        x = _normalized(rng, shape, order)
        yield (x, passes.slice_storage(x, 1, "crt", "a")[0]), (1,)
    elif name == "row_stats":
        a = _matrix(rng, shape, order)
        yield (a, None), ()
        for operand in ("a", "b"):
            yield (a, passes.slice_storage(a, 1, "crt", operand)[0]), (1,)
        big = _matrix(rng, (rows + 2, k + 3), order)
        yield (big[1:-1, 2:-1], None), ()  # a block of a larger matrix
        # rows r0:r1 of B^T for a C-ordered B: unit stride down each column only
        tile = _matrix(rng, (k, rows + 2), "C").T[1:-1]
        yield (tile, passes.slice_storage(tile, 1, "crt", "b")[0]), (1,)
        if k:  # the rows' maxima given (as the product's Inf / NaN check reads them)
            yield (a, passes.slice_storage(a, 1, "crt", "b")[0], np.abs(a).max(axis=1)), (1,)
            yield (tile, None, np.abs(tile).max(axis=1)), ()
    elif name == "crt_accumulator":
        return  # an object: compared by test_crt_accumulator
    elif name == "scale_outer":
        acc = _order(rng.standard_normal(shape) * 2.0 ** rng.integers(-60, 60, shape), order)
        fa = np.ldexp(1.0, rng.integers(-400, 400, rows).astype(np.int32))
        fb = np.ldexp(1.0, rng.integers(-400, 400, k).astype(np.int32))
        yield (acc, fa, fb), (0,)
    elif name == "axpy_outer":
        fa = np.ldexp(rng.random(rows) + 0.5, rng.integers(-40, 40, rows).astype(np.int32))
        fb = np.ldexp(rng.random(k) + 0.5, rng.integers(-40, 40, k).astype(np.int32))
        for dtype in (np.int32,):  # the INT8 engines' products
            x = rng.integers(-(2**31) + 1, 2**31, shape).astype(dtype)
            yield (x, fa, fb, _order(rng.standard_normal(shape), order)), (3,)
    elif name == "axpy_twosum":
        for dtype in (np.int32, np.int64, np.float64):
            x = rng.integers(-(2**31) + 1, 2**31, shape).astype(dtype)
            acc = _order(rng.standard_normal(shape) * 2.0**20, order)
            comp = _order(rng.standard_normal(shape) * 2.0**-40, order)
            yield (2.0**-14, x, acc, comp), (2, 3)
    elif name == "finish_twosum":
        acc = _order(rng.standard_normal(shape), order)
        acc.flat[0] = 2.0**1000  # (no Inf reaches the accumulators: set aside before)
        comp = _order(rng.standard_normal(shape) * 2.0**-53, order)
        top = _order(rng.integers(-(2**40), 2**40, shape).astype(np.float64), order)
        yield (acc, comp, top, 2.0**-44), (0,)
    elif name in ("certify_ef", "certify_crt"):
        m, p = shape
        e = rng.integers(-1074, 1024, shape).astype(np.int32)
        r = _order(np.ldexp(rng.uniform(0.5, 1.0, shape), e), order)
        r *= np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        r[rng.random(shape) < 0.05] = 0.0
        r.flat[0] = np.inf
        slop = np.abs(r) * 2.0**-54 * rng.uniform(0.0, 2.5, shape)
        slop[~np.isfinite(slop)] = 0.0
        ea, eb = rng.integers(-600, 600, m), rng.integers(-600, 600, p)
        if name == "certify_ef":
            vec = faithful.EFBound(np, rng.integers(0, 2, (3, m)) * 2.0**-80,
                                   rng.integers(0, 2, (3, p)) * 2.0**-80, "hybrid", 7, 3, 100,
                                   63, 5)
        else:
            sx, sy = rng.integers(0, 2, m) * 2.0**-70, rng.integers(0, 2, p) * 2.0**-70
            vec = faithful.CRTBound(np, sx, sy, np.zeros(m), np.zeros(p), rng.random(m) < 0.5,
                                    rng.random(p) < 0.5, 3.0)
        yield (r, slop, vec, ea, eb, faithful._SLACK), ()
    else:  # pragma: no cover - a new pass: give it a case
        raise LookupError(name)


def _offered(engine):
    return [name for name in FUSED if getattr(engine, name) is not None]


def test_every_offered_pass_has_a_case(engine, rng):
    for name in _offered(engine):
        list(_cases(name, engine, rng, (9, 7), "C"))  # raises LookupError if missing


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_passes_give_the_generic_bits(engine, rng, shape, order):
    passes = passes_for(engine)
    for name in _offered(engine):
        call = getattr(passes, "slice_storage" if name == "empty_slices_like" else name)
        if not hasattr(call, "fused"):
            continue  # not paired with array code (storage, the accumulator object)
        for args, written in _cases(name, engine, rng, shape, order):
            mine = _copy(args)
            got = call.fused(*mine)
            if got is None or got is False:
                continue  # declined: the generic code runs (the wrapper's fallback)
            gen = _copy(args)
            want = call.generic(*gen)
            if name in ("abs_max", "abs_max_both"):  # their contract: NaN may come out as Inf
                pairs = zip(got, want) if name == "abs_max_both" else [(got, want)]
                for g, w in pairs:
                    bad = ~np.isfinite(w)
                    np.testing.assert_array_equal(~np.isfinite(g), bad)
                    np.testing.assert_array_equal(g[~bad], w[~bad])
                continue
            _equal(got, want)
            for g, w in zip(_outputs(mine, written), _outputs(gen, written)):
                np.testing.assert_array_equal(g, w, err_msg=f"{name} {shape} {order}")


def test_the_passes_fall_back_where_a_fused_pass_declines(engine, rng):
    # a strided view: the compiled abs_max declines, the generic code answers
    x = random_matrix(rng, 31, 40, 2.0)[::2, ::3]
    want = np.abs(x).max(axis=1)
    np.testing.assert_array_equal(passes_for(engine).abs_max(x, 1), want)
    np.testing.assert_array_equal(passes_for(None, np).abs_max(x, 1), want)


def test_passes_are_built_once_per_engine(engine):
    assert passes_for(engine) is passes_for(engine)


@pytest.mark.parametrize("n", [1, 5, 20])
def test_crt_accumulator(engine, rng, n):
    if engine.crt_accumulator is None:
        pytest.skip("no fused accumulator")
    consts = crt_constants(n)
    prods = [rng.integers(-(2**31) + 1, 2**31, (17, 29)).astype(np.int32) for _ in range(n)]
    prods[0][0, :3] = [2**31 - 1, -(2**31) + 1, 0]
    fused = engine.crt_accumulator(consts)
    if fused is None:
        pytest.skip("the fused accumulator declines here")
    gen = CRTAccumulator(np, Engine(), consts)
    for t, prod in enumerate(prods):
        fused.add(t, prod)
        gen.add(t, prod)
    np.testing.assert_array_equal(fused.result(), gen.result())


@pytest.mark.parametrize("n", [255, 2047, 2049, 4101])
@pytest.mark.parametrize("threads", [1, 2])
def test_row_stats_of_columns_in_wide_blocks(engine, rng, n, threads):
    # B^T's rows are B's columns: row_stats walks them in column blocks (one a thread,
    # up to 2048 wide); every block split gives the generic code's bits
    passes = passes_for(engine)
    if not hasattr(passes.row_stats, "fused"):
        pytest.skip("no fused row_stats")
    b = _matrix(rng, (6, n), "C")
    b[:, n // 2] = 0.0  # a zero row of B^T
    b[2, n - 1] = 2.0**-1060  # a subnormal entry
    tile = b.T
    prev = engine.threads
    engine.threads = threads  # (the SGEMM engine's passes stay on one)
    try:
        for top in (None, np.abs(tile).max(axis=1)):
            mine = passes.slice_storage(tile, 1, "crt", "b")[0]
            gen = mine.copy(order="K")
            got = passes.row_stats.fused(tile, mine, top)
            if got is None:
                pytest.skip("the fused row_stats declines here")
            _equal(got, passes.row_stats.generic(tile, gen, top))
            np.testing.assert_array_equal(mine, gen)
    finally:
        engine.threads = prev
