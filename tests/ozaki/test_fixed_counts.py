"""Fixed slice and moduli counts: too few for the inputs warns, never silently.

A fixed count (``slices=9``; moduli for the ``crt`` methods) is used as given; when
``slices="auto"`` would pick more for the inputs (or compute entries natively), the
product emits an :class:`ozlinalg.AccuracyWarning` naming auto's count
(:mod:`ozlinalg.ozaki.counts.adequacy`). The warned cases are checked against the exact
product (they really are below DGEMM level), the quiet ones (counts at or above
auto's) never warn and are at DGEMM level against the exact product, and the check
never changes a bit of the result.
"""
import hashlib
import math
import re
import warnings

import numpy as np
import pytest
from conftest import cpu_engine_or_skip

import ozlinalg
from ozlinalg import AccuracyWarning
from ozlinalg.engines import get_engine
from ozlinalg.ozaki import small
from ozlinalg.ozaki import tiling as gemm
from ozlinalg.ozaki.counts import adequacy
from ozlinalg.ozaki.counts import moduli as crt_counts
from ozlinalg.ozaki.split import normalize_rows
from ozlinalg.testing import ExactReference, dot_error_bound, error_stats, random_matrix

OZAKI_I = ["hybrid-ef", "bitmask-ef", "bitmask", "rn", "splitfp"]


@pytest.fixture(params=[None, "sgemm"], ids=["default-engine", "sgemm"])
def engine(request):
    """The default engine (oneDNN where it runs), and the SGEMM engine."""
    if request.param is not None:
        cpu_engine_or_skip(request.param)
    with ozlinalg.options(engine=request.param):
        yield request.param


def _inner_scaled(rng, spread, m=40, n=300, p=30):
    """``A D`` and ``D^-1 B``, ``D = diag(10**U(-spread, spread))``: every term
    ``a_ik b_kj`` as in the unscaled product, but the columns of A and the rows of B
    span ``10**(+-spread)``."""
    a = random_matrix(rng, m, n, 0.5)
    b = random_matrix(rng, n, p, 0.5)
    d = 10.0 ** rng.uniform(-spread, spread, n)
    return a * d[None, :], b / d[:, None]


def _max_rel_err(c, ref):
    return error_stats(ref.relative_errors(c))[0]


def _run(a, b, **kw):
    """``(c, messages)``: the product and the AccuracyWarnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AccuracyWarning)
        c = ozlinalg.matmul(a, b, **kw)
    return c, [str(w.message) for w in caught if issubclass(w.category, AccuracyWarning)]


def _auto(a, b, **kw):
    """``(count, native)`` of ``slices="auto"`` for the same product (profile)."""
    with ozlinalg.profile() as prof, warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        ozlinalg.matmul(a, b, **kw)
    return prof.slices[0], prof.native_flops > 0


def _names_auto(msg, count, native, unit):
    """The warning names what auto does: its count, and native entries if any."""
    if count == 0:  # every entry beyond the cap: auto computes all natively
        return "slices='auto' computes them in native FP64" in msg
    return (f"slices='auto' would use {count} {unit}" in msg
            and ("native FP64" in msg) == native)


def _quiet(a, b, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        return ozlinalg.matmul(a, b, **kw)


def _enough(a, b, slices, **kw):
    """Assert that the fixed count ``slices`` is at or above auto's for these inputs
    (and that auto computes no entry natively): the premise of a case that must not
    warn. Call it before patching out auto's planner or estimate."""
    count, native = _auto(a, b, **kw)
    assert not native and count <= slices, (count, native, slices)


_EXACT = {}


def _exact(a, b):
    """``ExactReference(a, b)``, kept for the tests that draw the same inputs (the rng
    fixture's seed is fixed, and the 200 x 2000 x 150 reference takes seconds)."""
    key = hashlib.sha256(b"".join([repr((a.shape, b.shape)).encode(), a.tobytes(),
                                   b.tobytes()])).digest()
    if key not in _EXACT:
        _EXACT[key] = ExactReference(a, b)
    return _EXACT[key]


def _quiet_and_accurate(a, b, **kw):
    """The product with a count at or above auto's: no warning, and at DGEMM level
    (every entry within the FP64 dot-product bound of the exact product, as the
    tests' ``assert_dot_accurate``)."""
    c = _quiet(a, b, **kw)
    err = _exact(a, b).absolute_errors(c)
    bound = dot_error_bound(a, b)
    bad = ~(err <= bound)
    assert not bad.any(), (f"{int(bad.sum())} entries beyond the FP64 dot-product bound; "
                           f"worst error / bound {np.max(err / bound):.3g}")
    return c


class TestShortCountsWarn:
    """The cases that returned wrong answers silently: each warns, names auto's
    count, and is below DGEMM level against the exact product."""

    def test_columns_spanning_1e300(self, rng, engine):
        # The terms a_ik b_kj are those of an ordinary product (C about 3), but the
        # columns of A span 10**(+-300): 9 slices keep none of most terms.
        a, b = _inner_scaled(rng, 300)
        ref = ExactReference(a, b)
        c, msgs = _run(a, b, slices=9)
        assert _max_rel_err(c, ref) > 1e3 * max(_max_rel_err(a @ b, ref), 2.0**-53)
        count, native = _auto(a, b)
        assert native  # auto: entries beyond max_slices, computed in native FP64
        assert len(msgs) == 1 and "slices=9 is too few" in msgs[0]
        assert _names_auto(msgs[0], count, native, "slices")
        # auto is right on the same inputs
        c_auto = _quiet(a, b)
        assert _max_rel_err(c_auto, ref) <= max(_max_rel_err(a @ b, ref), 2.0**-53)

    @pytest.mark.parametrize("method", OZAKI_I)
    def test_unbalanced_1e5_spread(self, rng, engine, method):
        a, b = _inner_scaled(rng, 5)
        ref = ExactReference(a, b)
        c, msgs = _run(a, b, slices=9, balance=False, method=method)
        assert _max_rel_err(c, ref) > 4 * _max_rel_err(a @ b, ref)
        count, native = _auto(a, b, balance=False, method=method)
        assert count > 9 or native
        assert len(msgs) == 1
        assert f"slices=9 is too few for DGEMM-level accuracy with method={method!r}" in msgs[0]
        assert _names_auto(msgs[0], count, native, "slices")

    @pytest.mark.parametrize("method", ["crt", "crt-fast"])
    @pytest.mark.parametrize("spread", [0, 1, 3, 5])
    def test_crt_nine_moduli(self, rng, engine, method, spread):
        if spread:
            a, b = _inner_scaled(rng, spread)
        else:
            a, b = random_matrix(rng, 40, 300, 0.5), random_matrix(rng, 300, 30, 0.5)
        ref = ExactReference(a, b)
        c, msgs = _run(a, b, method=method, slices=9, balance=False)
        assert _max_rel_err(c, ref) > 4 * _max_rel_err(a @ b, ref)
        count, native = _auto(a, b, method=method, balance=False)
        assert count > 9 or native
        assert len(msgs) == 1 and "9 moduli (slices=9) are too few" in msgs[0]
        assert _names_auto(msgs[0], count, native, "moduli")

    def test_one_warning_per_product_and_stacklevel(self, rng):
        a, b = _inner_scaled(rng, 5)
        with pytest.warns(AccuracyWarning) as record:
            ozlinalg.matmul(a, b, slices=9, balance=False)
        assert len(record) == 1
        assert record[0].filename == __file__  # points at the caller, not at ozlinalg


class TestEnoughDoesNotWarn:
    """Counts at or above auto's never warn, and their products are at DGEMM level
    against the exact product; the common case is settled by the bound alone (no
    estimate GEMM: auto's planner is not called)."""

    @pytest.mark.parametrize("method", OZAKI_I)
    @pytest.mark.parametrize("shape", [(40, 300, 30), (200, 2000, 150)])
    def test_twelve_slices_random(self, rng, engine, method, shape, monkeypatch):
        m, n, p = shape
        a, b = random_matrix(rng, m, n, 0.5), random_matrix(rng, n, p, 0.5)
        _enough(a, b, 12, method=method)

        def no_plan(*args, **kwargs):
            raise AssertionError("the bound should settle slices=12 here")

        monkeypatch.setattr(gemm, "_block_plan", no_plan)
        _quiet_and_accurate(a, b, slices=12, method=method)

    @pytest.mark.parametrize("method", ["hybrid-ef", "bitmask-ef", "crt-fast"])
    def test_auto_count_settled_by_the_sampled_estimate(self, rng, engine, method,
                                                         monkeypatch):
        # inner dimension >= 1024: an estimate over a sixteenth of it shows one count
        # above auto's enough without auto's plan (often auto's own, not always)
        a, b = random_matrix(rng, 64, 2048, 0.5), random_matrix(rng, 2048, 48, 0.5)
        count, native = _auto(a, b, method=method)
        assert not native

        def no_plan(*args, **kwargs):
            raise AssertionError("the sampled estimate should settle this count")

        monkeypatch.setattr(gemm, "_block_plan", no_plan)
        monkeypatch.setattr(crt_counts, "estimate", no_plan)
        for module, name in ((gemm, "q_floor"), (crt_counts, "_r_floor"), (crt_counts, "_w_floor")):
            monkeypatch.setattr(module, name, lambda *args: 0.0)  # the GEMM-free bounds fail
        _quiet_and_accurate(a, b, method=method, slices=count + 1)

    @pytest.mark.parametrize("method", ["crt", "crt-fast"])
    @pytest.mark.parametrize("moduli", [17, 20, 24, 32])
    def test_crt_many_moduli(self, rng, engine, method, moduli, monkeypatch):
        a, b = random_matrix(rng, 40, 300, 0.5), random_matrix(rng, 300, 30, 0.5)
        _enough(a, b, moduli, method=method)

        def no_estimate(*args, **kwargs):
            raise AssertionError("the bounds should settle this count")

        monkeypatch.setattr(crt_counts, "estimate", no_estimate)
        _quiet_and_accurate(a, b, method=method, slices=moduli)

    @pytest.mark.parametrize("method", ["crt", "crt-fast"])
    def test_crt_sixteen_moduli(self, rng, engine, method):
        a, b = random_matrix(rng, 40, 300, 0.5), random_matrix(rng, 300, 30, 0.5)
        _enough(a, b, 16, method=method)
        _quiet_and_accurate(a, b, method=method, slices=16)

    def test_nonfinite_lines_are_set_aside(self, rng, engine):
        # rows of A / columns of B with Inf or NaN are computed natively: the check
        # sees them as zeros (the driver's row maxima of them are replaced)
        a, b = random_matrix(rng, 40, 300, 0.5), random_matrix(rng, 300, 30, 0.5)
        a[3, 7], b[11, 4] = np.inf, np.nan
        c = _quiet(a, b, slices=12)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(np.isfinite(c), np.isfinite(a @ b))
        a2, b2 = _inner_scaled(rng, 5)
        a2[0, 0] = np.nan
        _, msgs = _run(a2, b2, slices=9, balance=False)
        assert len(msgs) == 1

    @pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
    def test_tiles_give_the_same_verdict(self, rng, method):
        # output tiles (a small memory limit) change neither the bits nor the verdict;
        # the limit is the smallest plan's on the engine that runs here (the bytes a
        # method needs differ between engines), so the product is tiled on every engine
        from ozlinalg._matmul import memory_plan

        m, n, p = 150, 300, 140
        a, b = _inner_scaled(rng, 5, m=m, n=n, p=p)
        for s in (9, 12, 16, 24):
            limit = memory_plan(m, n, p, method, s, limit=1 << 50).minimum
            assert memory_plan(m, n, p, method, s, limit=limit).tiles != (m, p), s
            c1, m1 = _run(a, b, method=method, slices=s, balance=False)
            with ozlinalg.options(memory_limit=limit):
                c2, m2 = _run(a, b, method=method, slices=s, balance=False)
            assert np.array_equal(c1, c2) and m1 == m2, (s, m1, m2)

    def test_faithful_never_warns(self, rng):
        # accuracy="faithful": uncertified entries are recomputed exactly, so a small
        # count costs time, never accuracy: no warning, and the result is faithful.
        a, b = _inner_scaled(rng, 5, m=12, n=64, p=9)
        ref = ExactReference(a, b)
        for method in ("hybrid-ef", "crt"):
            c = _quiet(a, b, slices=4, method=method, accuracy="faithful", balance=False)
            hi, lo = ref.hi, ref.lo  # exact = hi + lo; faithful: hi or its neighbour
            ok = ((c == hi) | ((lo > 0) & (c == np.nextafter(hi, np.inf)))
                  | ((lo < 0) & (c == np.nextafter(hi, -np.inf))))
            assert ok.all()


# -- warn exactly when auto needs more ----------------------------------------------


def _families(rng):
    """Inputs with narrow and wide exponent ranges, structural zeros, zero rows and
    columns, a sparse pattern and subnormal entries."""
    out = []
    for phi in (0.5, 2.0, 4.0):
        out.append((f"phi={phi}", random_matrix(rng, 24, 160, phi),
                    random_matrix(rng, 160, 20, phi)))
    a, b = _inner_scaled(rng, 12, m=20, n=140, p=18)
    out.append(("spread 1e12", a, b))
    a = random_matrix(rng, 20, 150, 0.5)
    b = random_matrix(rng, 150, 16, 0.5)
    a[:, :75] = 0.0  # rows of A live in the first half, some columns of B in the second
    a[3] = 0.0
    b[75:, :4] = 0.0
    b[:, 7] = 0.0
    out.append(("structural zeros", a, b))
    a = random_matrix(rng, 20, 150, 0.5) * (rng.random((20, 150)) < 0.1)
    b = random_matrix(rng, 150, 16, 0.5) * (rng.random((150, 16)) < 0.1)
    out.append(("sparse", a, b))
    a = random_matrix(rng, 16, 140, 0.5)
    b = random_matrix(rng, 140, 12, 0.5)
    a[:, ::7] *= 2.0**-1060  # subnormals beside normal entries in the same rows
    b[::5] *= 2.0**600
    out.append(("subnormals", a, b))
    return out


@pytest.mark.parametrize("method", OZAKI_I + ["crt", "crt-fast"])
def test_warns_exactly_when_auto_needs_more(rng, method):
    """For counts around auto's: a warning iff auto's count is larger or auto computes
    entries natively (the cap, max_slices = 20, is above every count tried)."""
    for name, a, b in _families(rng):
        count, native = _auto(a, b, method=method, balance=False)
        lo = max(1, (count or 10) - 2)
        for s in range(lo, min(20, (count or 10) + 3) + 1):
            c, msgs = _run(a, b, method=method, slices=s, balance=False)
            short = native or count == 0 or count > s
            assert bool(msgs) == short, (name, s, count, native, msgs)
            if short:
                unit = "moduli" if method.startswith("crt") else "slices"
                assert _names_auto(msgs[0], count, native, unit), (name, s, msgs)


def test_beyond_max_slices(rng):
    """A fixed count above max_slices is judged with its own count as the cap: enough
    is quiet although auto (capped lower) would go native; too few still warns."""
    a, b = _inner_scaled(rng, 5)
    count, _ = _auto(a, b, balance=False)
    assert 9 < count < 16
    with ozlinalg.options(max_slices=8):
        _, msgs = _run(a, b, slices=9, balance=False)
        assert len(msgs) == 1
        assert re.search(r"no count up to 9 slices serves any of its \d+ entries", msgs[0])
        _quiet(a, b, slices=16, balance=False)


# -- the result bits --------------------------------------------------------------------


@pytest.mark.parametrize("method", OZAKI_I + ["crt", "crt-fast"])
def test_bits_unchanged(rng, engine, method, monkeypatch):
    """The check is a side computation: the same bits with it (warning or not, shown
    or filtered) and without it."""
    cases = [(random_matrix(rng, 40, 300, 0.5), random_matrix(rng, 300, 30, 0.5), 12),
             (*_inner_scaled(rng, 5), 9)]
    for a, b, s in cases:
        c_checked, _ = _run(a, b, method=method, slices=s, balance=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AccuracyWarning)
            c_filtered = ozlinalg.matmul(a, b, method=method, slices=s, balance=False)
        with monkeypatch.context() as mp:
            mp.setattr(gemm, "_check_fixed_count", lambda *args: None)
            mp.setattr(crt_counts, "_fixed_short", lambda *args: None)
            mp.setattr(small, "count_warning", lambda *args: None)  # the one-call path's
            c_unchecked = _quiet(a, b, method=method, slices=s, balance=False)
        assert np.array_equal(c_checked, c_unchecked)
        assert np.array_equal(c_filtered, c_unchecked)


# -- the bound itself --------------------------------------------------------------------


def _bound_cases(rng):
    yield from ((a, b) for _, a, b in _families(rng))
    # long inner dimensions (the bound samples windows of it), big entries outside them
    a, b = random_matrix(rng, 30, 3000, 1.0), random_matrix(rng, 3000, 25, 1.0)
    windows = adequacy.sample_windows(0, 3000)
    out = np.ones(3000, bool)
    for k0, k1 in windows:
        out[k0:k1] = False
    a[:, out] *= 2.0**40
    yield a, b
    yield random_matrix(rng, 30, 3000, 8.0), random_matrix(rng, 3000, 25, 8.0)
    yield np.ones((5, 7)), np.full((7, 4), 2.0**-1070)  # subnormal B: q underflows


def test_q_floor_is_a_lower_bound(rng):
    """``q_floor <= min q_ij`` over the entries that are not structural zeros, for the
    exponents of the rows and for larger ones (blocks of longer rows)."""
    eng = get_engine(np)
    for a, b in _bound_cases(rng):
        bt = b.T
        ea, nz_a = adequacy.row_exponents(np, a)
        eb, nz_b = adequacy.row_exponents(np, bt)
        xa, _ = normalize_rows(np, a, eng)
        xb, _ = normalize_rows(np, bt, eng)
        with np.errstate(under="ignore"):
            # where the bound is positive it is at least 4**-128: q_min is then in
            # float64's normal range, its rounding (k 2**-53) inside the 2**-40 below
            q = (xa * xa) @ (xb * xb).T
        pattern = (a != 0).astype(float) @ (bt != 0).astype(float).T > 0
        q_min = float(q[pattern].min()) if pattern.any() else math.inf
        k = a.shape[1]
        for extra in (0, 3):
            low = adequacy.q_floor(np, a, ea + extra, nz_a, bt, eb + extra, nz_b, 0, k)
            assert low <= q_min * (1 - 2.0**-40), (low, q_min)
        if q_min == 0:  # entries the normalization flushed: never certified
            assert adequacy.q_floor(np, a, ea, nz_a, bt, eb, nz_b, 0, k) == 0


def test_sampled_estimate_never_claims_more_than_the_exact_minimum(rng):
    """``sampled_settles`` at a threshold just above the exact ``min q_ij`` (over the
    entries that are not structural zeros) is False: it bounds from below."""
    eng = get_engine(np)
    cases = [(random_matrix(rng, 30, 2048, phi), random_matrix(rng, 2048, 20, phi))
             for phi in (0.5, 2.0, 6.0)]
    a, b = random_matrix(rng, 30, 2048, 0.5), random_matrix(rng, 2048, 20, 0.5)
    a[:, :1024] *= 2.0**-30  # the small halves against the large ones
    b[1024:] *= 2.0**-30
    cases.append((a, b))
    for a, b in cases:
        bt = b.T
        ea, nz_a = adequacy.row_exponents(np, a)
        eb, nz_b = adequacy.row_exponents(np, bt)
        xa, _ = normalize_rows(np, a, eng)
        xb, _ = normalize_rows(np, bt, eng)
        q_min = float(((xa * xa) @ (xb * xb).T).min())
        windows = adequacy.share_windows(0, 2048)
        tiles = [(0, a.shape[0])], [(0, bt.shape[0])]
        assert not adequacy.sampled_settles(np, eng, a, ea, nz_a, bt, eb, nz_b, windows,
                                            q_min * (1 + 2.0**-20), *tiles)
        # and it does settle thresholds far enough below (the sample is 1/16 of k)
        if q_min > 2.0**-100:
            assert adequacy.sampled_settles(np, eng, a, ea, nz_a, bt, eb, nz_b, windows,
                                            q_min * 2.0**-40, *tiles)


def test_q_floor_all_zero_operand():
    a, b = np.zeros((3, 5)), np.ones((5, 2))
    ea, nz_a = adequacy.row_exponents(np, a)
    eb, nz_b = adequacy.row_exponents(np, b.T)
    assert adequacy.q_floor(np, a, ea, nz_a, b.T, eb, nz_b, 0, 5) == math.inf
    _quiet(a, b, slices=1)  # every entry a structural zero: nothing to warn about
