"""Tests of the emulated DGEMM core against an exact reference."""
import math
import warnings

import numpy as np
import pytest

import ozlinalg
from ozlinalg import AccuracyWarning
from ozlinalg._array import to_numpy
from ozlinalg.engines import get_engine
from ozlinalg.ozaki import params
from ozlinalg.testing import (
    ExactReference,
    dot_error_bound,
    error_stats,
    random_matrix,
    textbook_matmul,
)

flint = pytest.importorskip("flint")

from conftest import assert_dot_accurate  # noqa: E402

METHODS = [m for m in ozlinalg.METHODS if not m.startswith("crt")]  # crt: tests/ozaki/test_crt.py


def textbook_and_emulated_errors(a, b, c):
    """``error_stats`` against the exact product of FP64 recursive summation (the
    DGEMM level on every machine; native DGEMM's error depends on the BLAS kernel)
    and of ``c``."""
    ref = ExactReference(a, b)
    return (error_stats(ref.relative_errors(textbook_matmul(a, b))),
            error_stats(ref.relative_errors(c)))


class TestParams:
    @pytest.mark.parametrize("n, beta", [(1, 7), (2**10, 7), (2**17, 7), (2**17 + 1, 6),
                                         (2**19, 6), (2**21, 5)])
    def test_slice_width(self, n, beta):
        assert params.slice_width(n) == beta
        assert beta == min(7, math.floor((31 - math.log2(n)) / 2))

    @pytest.mark.parametrize("n", [1, 100, 2048, 4096, 2**17])
    def test_group_limit_keeps_int32_exact(self, n):
        beta = params.slice_width(n)
        r = params.group_limit(n, beta)
        assert r == max(1, 2 ** (31 - 2 * beta - math.ceil(math.log2(n))))
        # r products of n terms of size < 2**(2 beta) fit in INT32.
        assert r == 1 or r * n * (2**beta - 1) ** 2 < 2**31

    def test_fp_slice_width(self):
        assert params.fp_slice_width(1) == 12
        assert params.fp_slice_width(1024) == 7
        assert params.fp_slice_width(4096) == 6

    def test_pairs_are_triangular_and_grouped(self):
        for s in range(1, 12):
            groups = params.pairs_by_group(s)
            pairs = [p for g in groups for p in g]
            assert len(pairs) == s * (s + 1) // 2
            assert all(i + j <= s - 1 for i, j in pairs)
            assert all(len({i + j for i, j in g}) == 1 for g in groups)

    @pytest.mark.parametrize("alias, name", [("ozimmu", "bitmask"), ("ozIMMU_EF", "bitmask-ef"),
                                             ("ozimmu_h", "hybrid-ef"), ("hybrid_ef", "hybrid-ef"),
                                             ("ootomo", "splitfp"), ("RN", "rn")])
    def test_aliases(self, alias, name):
        assert params.validate_method(alias) == name

    def test_bad_method_and_slices(self):
        with pytest.raises(ValueError, match="unknown method 'nope'"):
            params.validate_method("nope")
        with pytest.raises(ValueError, match="between 1 and 64"):
            params.validate_slices(0)
        with pytest.raises(ValueError, match="'auto' or an integer"):
            params.validate_slices("many")
        with pytest.raises(TypeError):
            params.validate_slices(2.5)


class TestCPUEngine:
    """The CPU engines must be EXACT: they are the foundation of every method."""

    @pytest.mark.parametrize("k", [1, 7, 1024, 1041, 4099, 65536])
    @pytest.mark.parametrize("fill", [127.0, -128.0, "mixed"])
    def test_adversarial_extremes_exact(self, k, fill, rng, cpu_engine):
        eng = cpu_engine
        m, p, s = 3, 5, 2
        a = eng.empty_slices(s, m, k, "bitmask")
        b = eng.empty_slices(s, p, k, "bitmask")
        if fill == "mixed":
            a[...] = rng.choice([-128.0, 127.0], size=a.shape)
            b[...] = rng.choice([-128.0, 127.0], size=b.shape)
        else:
            a[...] = fill
            b[...] = fill
        pairs = [(0, 0), (0, 1), (1, 0)]
        got, calls = eng.int_matmul_sum(a, b, pairs, 128, 128)
        ai = a.astype(np.int64)
        bi = b.astype(np.int64)
        want = sum(ai[i] @ bi[j].T for i, j in pairs)
        assert calls >= 1
        np.testing.assert_array_equal(got, want)
        # SGEMM: exact float64 integers; oneDNN: the INT32 result itself
        assert got.dtype in (np.float64, np.int32, np.int64)

    def test_worst_case_sum_exceeds_fp32_range(self, cpu_engine):
        # 65536 * 128 * 128 = 2**30: far beyond float32's 2**24 integers.
        eng = cpu_engine
        k = 65536
        a = eng.empty_slices(1, 1, k, "bitmask")
        b = eng.empty_slices(1, 1, k, "bitmask")
        a[...] = -128
        b[...] = -128
        got, _ = eng.int_matmul_sum(a, b, [(0, 0)], 128, 128)
        assert got[0, 0] == 2**30

    def test_float_engine_fp32_accumulation(self, cpu_engine):
        eng = cpu_engine
        a = np.ones((1, 3), np.float32)
        b = np.array([[2.0**24, 1.0, 1.0]], np.float32)
        # FP32 accumulation loses the ones: it is a float engine, not an exact one.
        assert eng.float_matmul(a, b)[0, 0] in (2.0**24, 2.0**24 + 2)


@pytest.mark.parametrize("method", METHODS)
class TestMethods:
    def test_dgemm_level_with_enough_slices(self, method, rng):
        a = random_matrix(rng, 40, 300, 1.0)
        b = random_matrix(rng, 300, 30, 1.0)
        c = ozlinalg.matmul(a, b, method=method, slices=12)
        (nat_max, _), (emu_max, emu_med) = textbook_and_emulated_errors(a, b, c)
        assert emu_max <= max(nat_max, 4e-16)
        assert emu_med <= 2**-53

    def test_error_decreases_with_slices(self, method, rng):
        a = random_matrix(rng, 30, 200, 0.5)
        b = random_matrix(rng, 200, 20, 0.5)
        ref = ExactReference(a, b)
        with ozlinalg.profile() as prof:
            ozlinalg.matmul(a, b, method=method)
        meds = []
        for s in (2, 4, 6, 8):  # below auto's count, each product says so (AccuracyWarning)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always", AccuracyWarning)
                c = ozlinalg.matmul(a, b, method=method, slices=s)
            assert bool(w) == (s < prof.slices[0]), (s, prof.slices)
            meds.append(error_stats(ref.relative_errors(c))[1])
        assert all(x > 100 * y for x, y in zip(meds, meds[1:]) if y > 1e-16), meds

    def test_auto_is_dgemm_level(self, method, rng):
        for phi in (0.5, 2.0, 4.0):
            a = random_matrix(rng, 32, 512, phi)
            b = random_matrix(rng, 512, 24, phi)
            c = ozlinalg.matmul(a, b, method=method)
            (nat_max, _), (emu_max, _) = textbook_and_emulated_errors(a, b, c)
            assert emu_max <= nat_max, (phi, emu_max, nat_max)


class TestAccuracyOrdering:
    def test_round_to_nearest_beats_truncation_at_equal_slices(self, rng):
        a = random_matrix(rng, 64, 512, 1.0)
        b = random_matrix(rng, 512, 64, 1.0)
        ref = ExactReference(a, b)
        for s in (4, 5, 6, 7):
            med = {}
            for m in ("bitmask", "rn", "hybrid-ef"):
                with pytest.warns(AccuracyWarning, match=f"slices={s} is too few"):
                    c = ozlinalg.matmul(a, b, method=m, slices=s)
                med[m] = error_stats(ref.relative_errors(c))[1]
            assert med["rn"] < med["bitmask"], (s, med)
            assert med["hybrid-ef"] < med["bitmask"], (s, med)

    # counts below auto's on purpose (this tests the passes): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_groupwise_does_fewer_fp64_passes(self, rng, monkeypatch):
        # the driver's passes (small products may run in one compiled call instead,
        # tests/ozaki/test_small.py)
        monkeypatch.setattr(type(get_engine(np)), "small_product", None, raising=False)
        a, b = rng.standard_normal((20, 50)), rng.standard_normal((50, 20))
        passes = {}
        for m in METHODS:
            with ozlinalg.profile() as prof:
                ozlinalg.matmul(a, b, method=m, slices=8)
            passes[m] = prof.accumulation_passes
            assert prof.int8_gemms >= 36
        # one pass per group; an engine with a fused finish takes the three top
        # groups and the result in one
        fused = getattr(get_engine(np), "finish_ef", None) is not None
        assert passes["hybrid-ef"] == passes["bitmask-ef"] == (6 if fused else 8)
        # one pass per product, plus one per group joining the result
        assert passes["bitmask"] == passes["rn"] == 36 + 8


class TestSpecialValues:
    def test_zero_rows_and_columns(self, rng):
        a = rng.standard_normal((6, 9))
        b = rng.standard_normal((9, 5))
        a[2] = 0.0
        b[:, 3] = 0.0
        for m in METHODS:
            c = ozlinalg.matmul(a, b, method=m)
            assert np.all(c[2] == 0) and np.all(c[:, 3] == 0)
            assert_dot_accurate(c, a, b)

    @pytest.mark.parametrize("method", METHODS)
    def test_subnormals(self, method, rng):
        tiny = np.finfo(float).smallest_subnormal
        a = rng.standard_normal((5, 8)) * 1e-310  # subnormal entries
        a[0, 0] = 3 * tiny
        b = rng.standard_normal((8, 4))
        c = ozlinalg.matmul(a, b, method=method)
        ref = ExactReference(a, b).rounded()
        # Results are subnormal: compare in absolute units of the subnormal spacing.
        assert np.max(np.abs(c - ref)) <= 4 * tiny
        # Mixed: a normal row with subnormal entries beside large ones.
        a2 = rng.standard_normal((4, 8))
        a2[:, ::2] *= 1e-312
        c2 = ozlinalg.matmul(a2, b, method=method)
        (nat, _), (emu, _) = textbook_and_emulated_errors(a2, b, c2)
        assert emu <= max(nat, 1e-15)

    @pytest.mark.parametrize("scale_a, scale_b", [(1e300, 1e-300), (1e-300, 1e300),
                                                  (1e154, 1e154), (1e-154, 1e-154),
                                                  (2.0**-1022, 1.0), (2.0**1020, 0.5)])
    def test_extreme_exponents(self, scale_a, scale_b, rng):
        a = rng.uniform(-1.5, 1.5, (7, 11)) * scale_a
        b = rng.uniform(-1.5, 1.5, (11, 6)) * scale_b
        c = ozlinalg.matmul(a, b)
        ref = ExactReference(a, b)
        exact = ref.rounded()
        fin = np.isfinite(exact)
        # Where the exact product overflows, the result is the infinity of its sign.
        np.testing.assert_array_equal(c[~fin], exact[~fin])
        # Finite entries: within the FP64 dot-product bound (its n 2**-1074 term
        # covers results in the subnormal range).
        with np.errstate(over="ignore"):
            err = ref.absolute_errors(np.where(fin, c, 0.0))[fin]
        assert np.all(err <= dot_error_bound(a, b)[fin])

    def test_overflowing_result_matches_native(self):
        a = np.full((2, 3), 1e308)
        b = np.full((3, 2), 10.0)
        c = ozlinalg.matmul(a, b)
        assert np.all(np.isposinf(c))

    def test_rows_spanning_the_whole_exponent_range(self, rng):
        a = rng.standard_normal((4, 6)) * np.array([1e300, 1e-300, 1.0, 1e-310, 1e200, 1e-200])
        b = rng.standard_normal((6, 3))
        c = ozlinalg.matmul(a, b)
        (nat, _), (emu, _) = textbook_and_emulated_errors(a, b, c)
        assert emu <= max(nat, 2e-16)

    @pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
    def test_inf_nan_match_native(self, bad, rng):
        a = rng.standard_normal((6, 7))
        b = rng.standard_normal((7, 5))
        a[1, 3] = bad
        b[2, 4] = bad
        b[5, 0] = np.nan
        with np.errstate(invalid="ignore"):
            want = a @ b
        for m in METHODS:
            c = ozlinalg.matmul(a, b, method=m)
            np.testing.assert_array_equal(np.isnan(c), np.isnan(want))
            np.testing.assert_array_equal(np.isposinf(c), np.isposinf(want))
            np.testing.assert_array_equal(np.isneginf(c), np.isneginf(want))
            fin = np.isfinite(want)  # entries whose row and column are finite
            az, bz = np.where(np.isfinite(a), a, 0.0), np.where(np.isfinite(b), b, 0.0)
            assert np.all(ExactReference(az, bz).absolute_errors(np.where(fin, c, 0.0))[fin]
                          <= dot_error_bound(az, bz)[fin])

    def test_inputs_never_modified(self, rng):
        a = rng.standard_normal((9, 13))
        b = rng.standard_normal((13, 4))
        a[0, 0] = np.nan
        a0, b0 = a.copy(), b.copy()
        for m in METHODS:
            ozlinalg.matmul(a, b, method=m)
        np.testing.assert_array_equal(a, a0)
        np.testing.assert_array_equal(b, b0)


class TestShapesAndDtypes:
    @pytest.mark.parametrize("m, n, p", [(0, 3, 4), (3, 0, 4), (3, 4, 0), (1, 1, 1),
                                         (7, 61, 68), (1, 1000, 1), (33, 1, 17)])
    def test_shapes(self, m, n, p, rng):
        a = rng.standard_normal((m, n))
        b = rng.standard_normal((n, p))
        c = ozlinalg.matmul(a, b)
        assert c.shape == (m, p) and c.dtype == np.float64
        if c.size:
            assert_dot_accurate(c, a, b)

    def test_vectors_and_stacks(self, rng):
        a = rng.standard_normal((5, 6))
        v = rng.standard_normal(6)
        w = rng.standard_normal(5)
        for x, y in ((a, v), (w, a), (v, v)):
            c = ozlinalg.matmul(x, y)
            assert c.shape == (x @ y).shape
            assert_dot_accurate(c, x, y)
        s = rng.standard_normal((3, 1, 5, 6))
        t = rng.standard_normal((2, 6, 4))
        c = ozlinalg.matmul(s, t)
        assert c.shape == (3, 2, 5, 4)
        assert_dot_accurate(c, s, t)

    def test_orders_and_strides(self, rng):
        a = rng.standard_normal((40, 60))
        b = rng.standard_normal((60, 30))
        want = ozlinalg.matmul(a, b)
        np.testing.assert_array_equal(ozlinalg.matmul(np.asfortranarray(a), b), want)
        np.testing.assert_array_equal(ozlinalg.matmul(a, np.asfortranarray(b)), want)
        big = rng.standard_normal((80, 120))
        sub_a = big[::2, ::2]
        sub_b = big[1::2, :60].T[:, ::2][:60]
        assert_dot_accurate(ozlinalg.matmul(sub_a, sub_b), sub_a, sub_b)

    @pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.bool_,
                                       np.float16, np.float32])
    def test_promotion(self, dtype, rng):
        a = (rng.standard_normal((5, 7)) * 10).astype(dtype)
        b = (rng.standard_normal((7, 3)) * 10).astype(dtype)
        c = ozlinalg.matmul(a, b)
        assert c.dtype == np.float64
        assert_dot_accurate(c, a.astype(float), b.astype(float))

    def test_integer_products_are_exact(self, rng):
        a = rng.integers(-2**20, 2**20, (20, 30))
        b = rng.integers(-2**20, 2**20, (30, 10))
        np.testing.assert_array_equal(ozlinalg.matmul(a, b), (a @ b).astype(float))

    def test_lists_accepted(self):
        np.testing.assert_array_equal(ozlinalg.matmul([[1, 2], [3, 4]], [[5], [6]]),
                                      [[17.0], [39.0]])

    def test_errors(self):
        with pytest.raises(TypeError, match="complex128 only"):
            ozlinalg.matmul(np.ones((2, 2), np.clongdouble), np.ones((2, 2)))
        with pytest.raises(TypeError, match="unsupported dtype"):
            ozlinalg.matmul(np.array([["a"]]), np.ones((1, 1)))
        with pytest.raises(ValueError, match=r"inner dimensions differ.*\(3, 4\).*\(5, 2\)"):
            ozlinalg.matmul(np.ones((3, 4)), np.ones((5, 2)))
        with pytest.raises(ValueError, match="at least 1-D"):
            ozlinalg.matmul(np.float64(2.0), np.ones((1, 1)))
        with pytest.raises(ValueError, match="unknown method"):
            ozlinalg.matmul(np.ones((2, 2)), np.ones((2, 2)), method="dgemm")
        with pytest.raises(TypeError, match="float64 / complex128 only"):
            ozlinalg.matmul(np.ones((2, 2), np.longdouble), np.ones((2, 2)))


class TestAuto:
    def test_chosen_count_grows_with_exponent_spread(self, rng):
        chosen = []
        for phi in (0.5, 2.0, 4.0):
            a = random_matrix(rng, 32, 2048, phi)
            b = random_matrix(rng, 2048, 32, phi)
            with ozlinalg.profile() as prof:
                ozlinalg.matmul(a, b)
            chosen.append(prof.slices[0])
        assert chosen == sorted(chosen) and chosen[0] < chosen[-1]
        assert 8 <= chosen[0] <= 10

    # counts below auto's on purpose (this tests the count used): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_explicit_count_overrides(self, rng):
        a = rng.standard_normal((8, 8))
        with ozlinalg.profile() as prof:
            ozlinalg.matmul(a, a, slices=5)
        assert prof.slices == [5]

    def test_too_few_max_slices_goes_native(self, rng):
        # max_slices=4 serves no entry at FP64 accuracy: native FP64, no warning.
        a = random_matrix(rng, 8, 256, 8.0)
        with ozlinalg.options(max_slices=4), ozlinalg.profile() as prof:
            with warnings.catch_warnings():
                warnings.simplefilter("error", AccuracyWarning)
                c = ozlinalg.matmul(a, a.T)
        assert_dot_accurate(c, a, a.T)
        assert prof.native_flops == 2.0 * 8 * 256 * 8 and prof.int8_gemms == 0

    def test_warns_when_max_slices_is_not_enough_fixed_rule(self):
        # choose_slices itself (CRT's twin, choose_moduli, likewise) still warns.
        from ozlinalg.ozaki.counts.slices import choose_slices

        with pytest.warns(AccuracyWarning, match="max_slices=4"):
            assert choose_slices("hybrid", 7, 60.0, 4) == 4


def _inner_scaled(rng, t, m=40, n=300, p=30):
    """A D and D^-1 B with D = diag(2**U{-t..t}): the product of A and B, with every
    term a_ik b_kj unchanged, but columns of A and rows of B badly scaled."""
    a = random_matrix(rng, m, n, 0.5)
    b = random_matrix(rng, n, p, 0.5)
    d = np.ldexp(1.0, rng.integers(-t, t + 1, n))
    return a * d[None, :], b / d[:, None]


def _max_rel_err(c, ref):
    return error_stats(ref.relative_errors(c))[0]


class TestAutoHugeExponentRanges:
    """``auto`` never guesses silently (docs/peers.md: adaptive counts elsewhere
    truncated silently on huge exponent ranges): magnitudes that underflow the
    float32 estimate are re-measured in float64; entries beyond what
    ``max_slices`` slices (or moduli) serve are computed in native FP64."""

    @pytest.mark.parametrize("method", ["hybrid-ef", "bitmask-ef", "crt", "crt-fast"])
    def test_underflowing_estimate_is_remeasured(self, rng, method):
        # 2**(+-40) inner scaling: every (X**2 Y**2)_ij is below float32's range.
        # Before the float64 re-measure this chose 9 slices and returned 100% errors.
        a, b = _inner_scaled(rng, 40)
        ref = ExactReference(a, b)
        with ozlinalg.profile() as prof, warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always", AccuracyWarning)
            c = ozlinalg.matmul(a, b, method=method, balance=False)
        native = _max_rel_err(a @ b, ref)
        # DGEMM level: with the count chosen for the float64-measured spread, or in
        # native FP64 where no count up to max_slices serves (profile: 0 slices).
        assert _max_rel_err(c, ref) <= native and not w
        assert prof.slices[0] >= 15 or (prof.slices[0] == 0 and prof.native_flops > 0)

    @pytest.mark.parametrize("t", [80, 300])
    def test_beyond_max_slices_is_native_not_wrong(self, rng, t):
        # Spreads no slice count up to max_slices serves: those entries (here all)
        # are computed in native FP64, recorded as native flops, without a warning.
        a, b = _inner_scaled(rng, t)
        ref = ExactReference(a, b)
        with ozlinalg.profile() as prof, warnings.catch_warnings():
            warnings.simplefilter("error", AccuracyWarning)
            c = ozlinalg.matmul(a, b, balance=False)
        assert _max_rel_err(c, ref) <= _max_rel_err(a @ b, ref)
        assert prof.native_flops > 0

    def test_only_the_unservable_entries_go_native(self, rng):
        # One row of A scaled far below the others in the columns where B is large:
        # that row's entries need ~150 bits more; the rest keep the emulation.
        a = random_matrix(rng, 12, 64, 0.5)
        b = random_matrix(rng, 64, 9, 0.5)
        a[3, :32] *= 2.0**-400
        b[:32] *= 2.0**300
        ref = ExactReference(a, b)
        with ozlinalg.profile() as prof, warnings.catch_warnings():
            warnings.simplefilter("error", AccuracyWarning)
            c = ozlinalg.matmul(a, b, balance=False)
        assert _max_rel_err(c, ref) <= _max_rel_err(a @ b, ref)
        assert 0 < prof.native_flops <= 2.0 * 9 * 64  # row 3 only
        assert prof.int8_gemms > 0

    @pytest.mark.parametrize("max_slices", [4, 20])
    @pytest.mark.parametrize("method", ["crt", "crt-fast"])
    def test_crt_beyond_its_range_is_native_not_wrong(self, rng, max_slices, method):
        a, b = _inner_scaled(rng, 300)
        ref = ExactReference(a, b)
        with ozlinalg.options(max_slices=max_slices), ozlinalg.profile() as prof:
            with warnings.catch_warnings():
                warnings.simplefilter("error", AccuracyWarning)
                c = ozlinalg.matmul(a, b, method=method, balance=False)
        assert _max_rel_err(c, ref) <= _max_rel_err(a @ b, ref)
        assert prof.native_flops > 0

    @pytest.mark.parametrize("method", ["bitmask", "hybrid-ef", "crt"])
    def test_entry_flushed_by_normalization_is_not_a_zero(self, method):
        # Found by test_properties.py::test_auto_is_never_silently_wrong: C[1, 0] =
        # a_10 b_00 with b_00 subnormal in a column whose maximum is 1.5e4, so
        # normalizing the column flushes b_00 to 0 and the entry (1e-301) came out
        # 0. No slice or moduli count can help: that entry is computed natively.
        a = np.array([[2.72588107e16, 1.03869857e18], [-3.28204828e18, 0.0]])
        b = np.array([[-3.04640877e-320], [1.47607944e4]])
        ref = ExactReference(a, b)
        with warnings.catch_warnings():
            warnings.simplefilter("error", AccuracyWarning)
            c = ozlinalg.matmul(a, b, method=method)
        assert _max_rel_err(c, ref) <= max(_max_rel_err(a @ b, ref), 2.0**-53)

    def test_squared_products_tells_zeros_from_underflow(self):
        from ozlinalg.ozaki.counts.slices import squared_products

        eng = get_engine(np)
        xa = np.array([[1.0, 0.0, 0.0], [0.0, 2.0**-40, 0.0], [0.0, 0.0, 2.0**-300]])
        xb = np.array([[0.0, 0.0, 1.0], [0.0, 2.0**-40, 0.0], [0.0, 0.0, 2.0**-300]])
        q, lost = squared_products(np, eng, xa[:2], xb[:2])
        assert lost is None
        assert q[0, 0] == 0.0 and q[0, 1] == 0.0  # structural zeros stay zero
        assert q[1, 1] == 2.0**-160  # float32 would say 0
        q, lost = squared_products(np, eng, xa, xb)
        np.testing.assert_array_equal(lost, np.eye(3, dtype=bool) & (np.arange(3) == 2))
        # (2, 2) holds 2**-1200: beyond float64 too


class TestBalance:
    @pytest.mark.parametrize("t", [20, 40, 300])
    @pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
    def test_auto_balances_badly_scaled_inner_dimension(self, rng, t, method):
        a, b = _inner_scaled(rng, t)
        ref = ExactReference(a, b)
        with ozlinalg.profile() as prof:
            c = ozlinalg.matmul(a, b, method=method)  # balance="auto"
        assert _max_rel_err(c, ref) <= _max_rel_err(a @ b, ref)
        assert prof.slices[0] <= (10 if method == "hybrid-ef" else 16)  # as unscaled

    def test_auto_leaves_comparable_scales_alone(self, rng):
        # The calibrated inputs (|f_k| <= 9 even at phi = 4): bit-identical results.
        a = random_matrix(rng, 64, 2048, 4.0)
        b = random_matrix(rng, 2048, 48, 4.0)
        np.testing.assert_array_equal(ozlinalg.matmul(a, b),
                                      ozlinalg.matmul(a, b, balance=False))

    def test_complex_operands_are_balanced_as_a_whole(self, rng):
        # |a_ik| (not the real and imaginary parts apart) decides the shift, and both
        # parts are scaled alike, so the product stays the same product.
        a, b = _inner_scaled(rng, 40)
        ai, bi = _inner_scaled(np.random.default_rng(7), 0)
        d = np.abs(a).max(axis=0) / np.maximum(np.abs(ai).max(axis=0), 1e-300)
        za, zb = a + 1j * ai * d[None, :], b + 1j * bi / d[:, None]
        want = za @ zb
        got = ozlinalg.matmul(za, zb)
        assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AccuracyWarning)
            bad = ozlinalg.matmul(za, zb, slices=9, balance=False)
        assert np.abs(bad - want).max() > 1e-6 * np.abs(want).max()  # what balancing fixes

    def test_balanced_product_is_the_same_product(self, rng):
        from ozlinalg.ozaki.balance import balance_inner

        a, b = _inner_scaled(rng, 30)
        a2, b2, _ = balance_inner(np, a, b)
        assert not np.array_equal(a2, a)
        # Exact power-of-two scaling: every term a_ik b_kj is unchanged.
        np.testing.assert_array_equal(a2[:, :, None] * b2[None, :, :],
                                      a[:, :, None] * b[None, :, :])

    def test_maxima_come_with_unchanged_operands(self, rng):
        # the row maxima of a and column maxima of b, read with the balancing's own, for
        # the product's Inf / NaN check; None where the operands were scaled
        from ozlinalg.ozaki.balance import abs_max_generic, balance_inner

        a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
        a[3, 4], b[5, 6] = np.nan, -np.inf
        for eng in (None, ozlinalg.engines.get_engine(np)):
            for x, y in ((a, b), (np.asfortranarray(a), b[:, 2:])):
                x2, y2, (ra, cb) = balance_inner(np, x, y, 1, eng)
                assert x2 is x and y2 is y
                for got, want in ((ra, abs_max_generic(np, x, 1)),
                                  (cb, abs_max_generic(np, y, 0))):
                    fin = np.isfinite(want)
                    np.testing.assert_array_equal(np.isfinite(got), fin)
                    np.testing.assert_array_equal(got[fin], want[fin])
        a, b = _inner_scaled(rng, 30)
        assert balance_inner(np, a, b)[2] is None
        assert balance_inner(np, a, b, 200)[2] is not None  # below min_shift: unchanged

    def test_nonfinite_and_empty_are_left_alone(self, rng):
        from ozlinalg.ozaki.balance import balance_inner

        a, b = _inner_scaled(rng, 30)
        a[0, 0] = np.inf
        assert balance_inner(np, a, b)[0] is a
        z = np.empty((3, 0))
        assert balance_inner(np, z, np.empty((0, 2)))[0] is z

    @pytest.mark.parametrize("bad", ["yes", 1, None, 2.0])
    def test_option_validated(self, bad):
        with pytest.raises(ValueError, match="balance must be 'auto', True or False"):
            ozlinalg.options(balance=bad)

    # counts below auto's on purpose (this tests the balance option): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_option_and_keyword(self, rng):
        a, b = _inner_scaled(rng, 8)  # |f_k| < 12: "auto" leaves it
        with ozlinalg.options(balance=True):
            forced = ozlinalg.matmul(a, b, slices=7)
        assert not np.array_equal(forced, ozlinalg.matmul(a, b, slices=7))
        np.testing.assert_array_equal(forced, ozlinalg.matmul(a, b, slices=7, balance=True))


class TestProfileAndOptions:
    # counts below auto's on purpose (this tests the profile): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_profile_records_what_ran(self, rng):
        a = rng.standard_normal((64, 100))
        with ozlinalg.profile() as prof:
            ozlinalg.matmul(a, a.T, slices=6, method="hybrid-ef")
            ozlinalg.matmul(a, a.T, slices=4, method="bitmask")
        assert prof.emulated_gemm_calls == 2
        assert prof.int8_gemms == 21 + 10
        assert prof.slices == [6, 4]
        assert prof.methods == {"hybrid-ef": 1, "bitmask": 1}
        assert prof.emulated_flops == 2 * 2.0 * 64 * 100 * 64
        assert prof.time_split > 0 and prof.time_int8 > 0 and prof.time_accumulate > 0
        assert "emulated GEMM calls : 2" in prof.summary()

    def test_nested_profiles_and_outside_calls(self, rng):
        a = rng.standard_normal((10, 10))
        ozlinalg.matmul(a, a)
        with ozlinalg.profile() as outer:
            ozlinalg.matmul(a, a)
            with ozlinalg.profile() as inner:
                ozlinalg.matmul(a, a)
        ozlinalg.matmul(a, a)
        assert outer.emulated_gemm_calls == 2 and inner.emulated_gemm_calls == 1

    # counts below auto's on purpose (this tests the options): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_options_context(self, rng):
        a = rng.standard_normal((10, 10))
        with ozlinalg.options(method="ozimmu", slices=7):
            with ozlinalg.profile() as prof:
                ozlinalg.matmul(a, a)
        assert prof.methods == {"bitmask": 1} and prof.slices == [7]
        assert ozlinalg.get_options().method == "hybrid-ef"
        with pytest.raises(TypeError, match="unknown option"):
            ozlinalg.options(colour="red")

    def test_min_size_runs_natively(self, rng):
        a = rng.standard_normal((10, 10))
        with ozlinalg.options(min_size=64):
            with ozlinalg.profile() as prof:
                c = ozlinalg.matmul(a, a)
        assert prof.emulated_gemm_calls == 0 and prof.native_flops == 2000
        np.testing.assert_array_equal(c, a @ a)

    def test_reentering_an_instance_is_an_error(self):
        p = ozlinalg.profile()
        with p:
            with pytest.raises(RuntimeError, match="already active"):
                p.__enter__()


# counts below auto's on purpose (this tests NumPy = CuPy bits): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
def test_generic_code_path(xp, rng):
    """The same call on NumPy and (where present) CuPy gives the same answer."""
    a = random_matrix(rng, 50, 70, 1.0)
    b = random_matrix(rng, 70, 40, 1.0)
    c = ozlinalg.matmul(xp.asarray(a), xp.asarray(b), slices=9)
    np.testing.assert_array_equal(to_numpy(c), ozlinalg.matmul(a, b, slices=9))


class TestMemory:
    """Peak memory follows ``working_bytes`` and large products are tiled, not refused."""

    @staticmethod
    def peak_bytes(fn):
        import tracemalloc

        tracemalloc.start()
        try:
            fn()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    #: (method, slices, accuracy): every family of the memory model, fixed and auto counts
    CASES = [("hybrid-ef", 6, "dgemm"), ("hybrid-ef", "auto", "dgemm"),
             ("bitmask", 6, "dgemm"), ("rn", "auto", "dgemm"), ("splitfp", "auto", "dgemm"),
             ("crt", 15, "dgemm"), ("crt", "auto", "dgemm"), ("crt-fast", "auto", "dgemm"),
             ("hybrid-ef", "auto", "faithful"), ("bitmask-ef", 9, "faithful"),
             ("crt", "auto", "faithful"), ("crt-fast", 16, "faithful")]

    @staticmethod
    def traced(fn):
        """``(peak traced bytes, result)`` of ``fn()``, the scratch pool emptied first
        (buffers it hands out again are not allocations tracemalloc sees)."""
        import tracemalloc

        from ozlinalg.engines._scratch import free_scratch

        free_scratch()
        tracemalloc.start()
        try:
            out = fn()
            return tracemalloc.get_traced_memory()[1], out
        finally:
            tracemalloc.stop()

    @pytest.mark.parametrize("method, s", [("hybrid-ef", "auto"), ("bitmask", 6),
                                           ("rn", "auto")])
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_a_row_of_tiles_splits_a_once(self, method, s, rng, cpu_engine, monkeypatch):
        # Ozaki I under a limit: the first tile of each row of tiles splits A's rows,
        # the others take its slices; the same bits as one tile
        from ozlinalg._matmul import memory_plan
        from ozlinalg.engines import base
        from ozlinalg.ozaki import tiling

        monkeypatch.setitem(base._ENGINES, "numpy", cpu_engine)
        m, k, p = 240, 150, 260
        a = rng.standard_normal((m, k))
        b = rng.standard_normal((k, p))
        want = ozlinalg.matmul(a, b, slices=s, method=method)
        whole = memory_plan(m, k, p, method, s, "dgemm", 1 << 50, cpu_engine)
        seen = []
        real = tiling.emulate_block

        def spy(plan, x, bt, block_plan=None, kept=None):
            # reused: the tile ran on the slices the last one left (not new ones)
            count = block_plan[0] if block_plan is not None else int(s)
            before = None if kept is None else kept.get(count)
            out = real(plan, x, bt, block_plan, kept)
            after = None if kept is None else kept.get(count)
            seen.append((x.__array_interface__["data"][0], before is not None and after is before))
            return out

        monkeypatch.setattr(tiling, "emulate_block", spy)
        with ozlinalg.options(memory_limit=whole.need // 4):
            got = ozlinalg.matmul(a, b, slices=s, method=method)
        np.testing.assert_array_equal(got, want)
        rows = {}
        for start, reused in seen:
            rows.setdefault(start, []).append(reused)
        assert len(seen) > len(rows) > 1  # several rows of several tiles
        assert all(r == [False] + [True] * (len(r) - 1) for r in rows.values())

    @pytest.mark.parametrize("method, s, accuracy", CASES)
    # counts below auto's on purpose (this tests memory): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    @pytest.mark.parametrize("level", ["one tile", "quarter", "smallest"])
    def test_peak_within_documented_bound(self, level, method, s, accuracy, rng, cpu_engine,
                                          monkeypatch):
        from ozlinalg._matmul import memory_plan
        from ozlinalg.engines import base
        from ozlinalg.ozaki.memory import SLACK_FRACTION

        monkeypatch.setitem(base._ENGINES, "numpy", cpu_engine)
        # the smallest plan's tiles are 8 x 8 or so: a smaller product keeps their
        # count (and the test's time: one to five seconds a case at 240 x 260) down
        m, k, p = (96, 150, 104) if level == "smallest" else (240, 150, 260)
        a = rng.standard_normal((m, k))
        b = rng.standard_normal((k, p))
        with ozlinalg.options(accuracy=accuracy):
            want = ozlinalg.matmul(a, b, slices=s, method=method)
            whole = memory_plan(m, k, p, method, s, accuracy, 1 << 50, cpu_engine)
            limit = {"one tile": whole.need, "quarter": whole.need // 4,
                     "smallest": whole.minimum}[level]
            plan = memory_plan(m, k, p, method, s, accuracy, limit, cpu_engine)
            assert plan.need <= limit
            assert (plan.tiles == (m, p)) == (level == "one tile")
            with ozlinalg.options(memory_limit=limit):
                ozlinalg.matmul(a, b, slices=s, method=method)  # first-call caches aside
                peak, got = self.traced(lambda: ozlinalg.matmul(a, b, slices=s,
                                                                method=method))
        # tiling changes no result: per-row/column scales, and the count and crt's
        # scalings are planned over all tiles
        np.testing.assert_array_equal(got, want)
        # what tracemalloc sees stays within the plan; the rest of the documented
        # allowance (SLACK_BYTES) is for the engine's native buffers, which it does not
        # see (benchmarks/studies/memory_bound.py measures those through the resident set)
        assert peak - got.nbytes <= plan.need * (1 + SLACK_FRACTION) + (1 << 18)

    @pytest.mark.parametrize("method", ["hybrid-ef", "crt", "crt-fast"])
    def test_products_take_the_tiles_of_the_count_chosen(self, method, rng, cpu_engine,
                                                          monkeypatch):
        # planned for auto's most slices, the products take larger tiles once the count
        # is known: fewer engine calls, the same bits, within the limit
        from ozlinalg._matmul import memory_plan
        from ozlinalg.engines import base
        from ozlinalg.ozaki import memory, tiling

        monkeypatch.setitem(base._ENGINES, "numpy", cpu_engine)
        m, k, p = 240, 150, 260
        a = rng.standard_normal((m, k))
        b = rng.standard_normal((k, p))
        with ozlinalg.profile() as prof:
            want = ozlinalg.matmul(a, b, method=method)
        s = prof.calls[-1].slices
        s_max = ozlinalg.get_options().max_slices
        fam = memory.family(method, method == "hybrid-ef")
        low = memory_plan(m, k, p, method, "auto", "dgemm", 1 << 50, cpu_engine).minimum

        def area(count, limit):
            t = memory.product_plan(m, p, k, count, limit, fam, cpu_engine.slice_bytes,
                                    cpu_engine.memory_model)
            return t[0] * t[1]

        limit = next((lim for lim in (int(low * 1.25 ** i) for i in range(40))
                      if area(s, lim) > area(s_max, lim)), None)
        assert limit is not None, "no limit where the count chosen allows larger tiles"

        def run():
            with ozlinalg.options(memory_limit=limit), ozlinalg.profile() as prof:
                got = ozlinalg.matmul(a, b, method=method)
            return got, prof.calls[-1].engine_calls

        got, calls = run()
        with monkeypatch.context() as mp:  # the products' tiles for the most slices
            tiles = tiling._MemoryArgs.product_tiles
            mp.setattr(tiling._MemoryArgs, "product_tiles",
                       lambda self, engine, extra, _, start=True:
                       tiles(self, engine, extra, self.s_max, start))
            same, more = run()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(same, want)
        assert calls < more
        peak, _ = self.traced(run)
        assert peak - got.nbytes <= limit * (1 + memory.SLACK_FRACTION) + (1 << 18)

    def test_native_entries_on_the_products_own_tiles(self, cpu_engine, monkeypatch):
        # entries no count up to max_slices serves: their masks, made on the count's
        # tiles, are mapped onto the products' tiles (other shapes), the same bits
        from ozlinalg._matmul import memory_plan
        from ozlinalg.engines import base
        from ozlinalg.ozaki import memory

        monkeypatch.setitem(base._ENGINES, "numpy", cpu_engine)
        rng = np.random.default_rng(3)  # (a draw with a few such entries)
        a = random_matrix(rng, 120, 128, 0.5)
        b = random_matrix(rng, 128, 100, 0.5)
        for i in (3, 77):
            a[i] = random_matrix(rng, 1, 128, 12.0)[0]
        b[:, 5] = random_matrix(rng, 128, 1, 12.0)[:, 0]
        with ozlinalg.options(max_slices=9, balance=False):  # (no balanced copies)
            with ozlinalg.profile() as prof:
                want = ozlinalg.matmul(a, b)
            native, s = prof.native_flops, prof.calls[-1].slices
            assert 0 < native < 2.0 * 120 * 128 * 100 and s == 9
            low = memory_plan(120, 128, 100, limit=1 << 50, engine=cpu_engine).minimum
            seen = set()
            for limit in (int(low * 1.3 ** i) for i in range(30)):
                count = memory_plan(120, 128, 100, limit=limit, engine=cpu_engine).tiles
                own = memory.product_plan(120, 100, 128, s, limit, "ef",
                                          cpu_engine.slice_bytes, cpu_engine.memory_model)
                if own == count or (count, own) in seen:
                    continue
                seen.add((count, own))
                with ozlinalg.options(memory_limit=limit), ozlinalg.profile() as prof:
                    got = ozlinalg.matmul(a, b)
                np.testing.assert_array_equal(got, want)
                assert prof.native_flops == native
        assert len(seen) >= 2

    def test_balanced_copies_are_in_the_plan(self, rng):
        # balance=True copies both operands (9.8 MiB here, beyond the 4 MiB allowance):
        # the plan leaves room for them, so the working memory stays within the bound
        from ozlinalg.ozaki.memory import SLACK_BYTES, SLACK_FRACTION

        n = 800
        scale = 2.0 ** rng.integers(-20, 20, n)
        a = rng.standard_normal((n, n)) * scale[None, :]
        b = rng.standard_normal((n, n)) / scale[:, None]
        limit = 16 << 20
        with ozlinalg.options(balance=True):
            want = ozlinalg.matmul(a, b)
            with ozlinalg.options(memory_limit=limit):
                peak, got = self.traced(lambda: ozlinalg.matmul(a, b))
            with ozlinalg.options(memory_limit=8 << 20), pytest.raises(
                    MemoryError, match="balanced copies"):
                ozlinalg.matmul(a, b)
        np.testing.assert_array_equal(got, want)
        assert peak - got.nbytes <= limit * (1 + SLACK_FRACTION) + SLACK_BYTES

    def test_crt_bounds_recomputed_when_they_do_not_fit(self, rng, cpu_engine, monkeypatch):
        # W of the whole output beyond the budget: recomputed per planning pass, the same
        # shifts and count; W (the bound GEMMs) is computed more than once per tile
        from ozlinalg._matmul import memory_plan
        from ozlinalg.engines import base
        from ozlinalg.ozaki import memory

        monkeypatch.setitem(base._ENGINES, "numpy", cpu_engine)
        a = rng.standard_normal((240, 150))
        b = rng.standard_normal((150, 260))
        want = ozlinalg.matmul(a, b, method="crt")
        plan = memory_plan(240, 150, 260, "crt", "auto", "dgemm", 1 << 50, cpu_engine)
        with ozlinalg.options(memory_limit=plan.minimum), ozlinalg.profile() as prof:
            got = ozlinalg.matmul(a, b, method="crt")
        assert not memory_plan(240, 150, 260, "crt", "auto", "dgemm", plan.minimum,
                               cpu_engine).keep_bounds
        np.testing.assert_array_equal(got, want)
        (rec,) = prof.calls
        mt, pt = plan.minimum_tiles
        tiles = -(-240 // mt) * -(-260 // pt)
        # the residues' products on the product phase's own tiles, for the count chosen
        own = memory.product_plan(240, 260, 150, rec.slices, plan.minimum, "crt",
                                  cpu_engine.slice_bytes, cpu_engine.memory_model)
        products = rec.slices * -(-240 // own[0]) * -(-260 // own[1])
        assert rec.int8_gemms - products > tiles  # bound GEMMs: several passes

    def test_crt_keeps_w_unless_recomputing_it_quadruples_the_tiles(self):
        from ozlinalg.ozaki import memory

        int8 = {"crt_input": 16, "crt_product_input": 8, "crt_output": 32,
                "crt_output_per_modulus": 1, "bounds": 4}

        def largest(limit, keep):  # the count phase's largest tiles
            return next(t for t in memory._halvings(2048, 2048)
                        if memory.count_bytes(2048, 2048, 2048, 20, t, "crt", 1, int8,
                                              keep_bounds=keep) <= limit)

        # int8 residues under 40 MiB: W kept with 256 x 256 tiles; without it 256 x 512
        # (2x): kept
        plan = memory.plan(2048, 2048, 2048, 20, 40 << 20, "crt", 1, int8)
        assert plan.fits and plan.keep_bounds and plan.tiles == (256, 256)
        assert largest(40 << 20, False) == (256, 512)
        # under 24 MiB: 64 x 128 with W, 256 x 256 without (8x): recomputed
        plan = memory.plan(2048, 2048, 2048, 20, 24 << 20, "crt", 1, int8)
        assert plan.fits and not plan.keep_bounds and plan.tiles == (256, 256)
        assert largest(24 << 20, True) == (64, 128)
        # under 16 MiB no plan keeps W
        plan = memory.plan(2048, 2048, 2048, 20, 16 << 20, "crt", 1, int8)
        assert plan.fits and not plan.keep_bounds
        assert all(memory.count_bytes(2048, 2048, 2048, 20, t, "crt", 1, int8) > 16 << 20
                   for t in memory._halvings(2048, 2048))

    def test_crt_phases_take_tiles_of_their_own(self):
        from ozlinalg.ozaki import memory

        int8 = {"crt_input": 16, "crt_product_input": 8, "crt_output": 32,
                "crt_output_per_modulus": 1, "bounds": 4}
        n, k, s, tiles = 2048, 2048, 16, (512, 512)
        fixed = 1024 * 16  # the tiles' Python objects
        rows = 16 * 1024 * k + (32 + s) * 512 * 512  # normalized rows, W's tiles, estimates
        w = 4 * n * n  # W kept for the whole output
        residues = 8 * 1024 * k + s * 1024 * k + (32 + s) * 512 * 512
        assert memory.count_bytes(n, n, k, s, tiles, "crt", 1, int8) == fixed + rows + w
        assert memory.plan_bytes(n, n, k, s, tiles, "crt", 1, int8) == (
            fixed + max(rows + w, residues))
        # under 64 MiB: the count's phase on 512 x 512 tiles with W; the products on
        # 256 x 512 for the most moduli (20), on 512 x 512 for the 16 chosen
        plan = memory.plan(n, n, k, 20, 64 << 20, "crt", 1, int8)
        assert plan.tiles == (512, 512) and plan.keep_bounds
        assert memory.product_plan(n, n, k, 20, 64 << 20, "crt", 1, int8) == (256, 512)
        assert memory.product_plan(n, n, k, s, 64 << 20, "crt", 1, int8) == (512, 512)
        assert plan.need <= 64 << 20
        # Ozaki-I: the count's phase holds no slices (512 x 1024 tiles); the products
        # take 256 x 512 for the most slices auto takes, 512 x 512 for the 9 chosen
        ef = {"input": 12, "output": 32}
        assert memory.count_bytes(n, n, k, 20, (512, 1024), "ef", 1, ef) == (
            8 * 1024 + 12 * 1536 * k + 32 * 512 * 1024)
        assert memory.plan(n, n, k, 20, 64 << 20, "ef", 1, ef).tiles == (512, 1024)
        assert memory.product_plan(n, n, k, 20, 64 << 20, "ef", 1, ef) == (256, 512)
        assert memory.product_plan(n, n, k, 9, 64 << 20, "ef", 1, ef) == (512, 512)

    @pytest.mark.parametrize("method, s, accuracy", CASES[::2])
    def test_below_the_minimum_raises_before_allocating(self, method, s, accuracy, rng):
        import re

        from ozlinalg._matmul import memory_plan

        a = rng.standard_normal((240, 150))
        b = rng.standard_normal((150, 260))
        low = memory_plan(240, 150, 260, method, s, accuracy, 1 << 50).minimum
        for limit in (1, low - 1):
            with ozlinalg.options(memory_limit=limit, accuracy=accuracy):
                with pytest.raises(MemoryError) as info:
                    peak, _ = self.traced(lambda: ozlinalg.matmul(a, b, slices=s,
                                                                  method=method))
            msg = str(info.value)
            assert f"memory_limit={limit} bytes is below the {low / 2**20:.2f} MiB" in msg
            assert re.search(rf"method '{method}' \(tiles of \d+ x \d+", msg)
            assert "raise the limit" in msg
        # nothing of the product was allocated: far below one output-sized buffer
        import tracemalloc

        with ozlinalg.options(memory_limit=1, accuracy=accuracy):
            tracemalloc.start()
            try:
                with pytest.raises(MemoryError):
                    ozlinalg.matmul(a, b, slices=s, method=method)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        assert peak < 8 * 240 * 260 // 4
        with ozlinalg.options(memory_limit=low, accuracy=accuracy):  # the minimum works
            warnings.simplefilter("ignore", AccuracyWarning)
            ozlinalg.matmul(a, b, slices=s, method=method)

    def test_out_of_memory_releases_the_scratch_pool(self, rng, monkeypatch):
        eng = get_engine(np)
        pool = getattr(eng, "scratch", None)
        if pool is None:
            pytest.skip("the engine keeps no scratch pool")
        big = rng.standard_normal((800, 800))
        ozlinalg.matmul(big, big)  # leaves large buffers in the pool
        assert pool.held > 0
        cls = type(eng)  # patched on the class: an instance attribute left behind by the
        real = cls.int_matmul_sum  # undo would hide other tests' class-level patches
        calls = []

        def fail_once(self, *args, **kwargs):
            if not calls:
                calls.append(1)
                raise MemoryError
            return real(self, *args, **kwargs)

        monkeypatch.setattr(cls, "int_matmul_sum", fail_once)
        monkeypatch.setattr(cls, "small_product", None, raising=False)
        a = rng.standard_normal((300, 300))
        with pytest.raises(MemoryError, match="the scratch pool was released"):
            ozlinalg.matmul(a, a)
        assert pool.held == 0
        got = ozlinalg.matmul(a, a)  # the next call works
        monkeypatch.undo()
        np.testing.assert_array_equal(got, ozlinalg.matmul(a, a))

    # counts below auto's on purpose (this tests the error message): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_out_of_memory_names_the_sizes(self, rng, monkeypatch):
        from ozlinalg.ozaki import tiling as gemm

        def no_memory(*args, **kwargs):
            raise MemoryError

        # the product's core (every engine and split path goes through it; an engine
        # method would be bypassed by whichever fused path the engine has)
        monkeypatch.setattr(gemm, "_tiled_product", no_memory)
        monkeypatch.setattr(type(get_engine(np)), "small_product", None, raising=False)
        a = rng.standard_normal((30, 40))
        b = rng.standard_normal((40, 7))
        with pytest.raises(MemoryError, match=r"\(30 x 40\) @ \(40 x 7\).*memory_limit"):
            ozlinalg.matmul(a, b, slices=5)

    @pytest.mark.parametrize("bad", [0, -1, 1.5, "2GiB", True])
    def test_memory_limit_validated(self, bad):
        with pytest.raises(ValueError, match="memory_limit must be a positive number of bytes"):
            ozlinalg.options(memory_limit=bad)

    # counts below auto's on purpose (this tests the memory limit): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_default_limit_is_the_engines(self, rng, monkeypatch):
        # options(memory_limit=None) asks the engine (CPU: 1/4 of the
        # process's memory bound; GPU: half the free memory).
        from ozlinalg.engines._process import memory_bound

        eng = get_engine(np)
        assert ozlinalg.get_options().memory_limit is None
        assert eng.memory_limit() == memory_bound()[0] // 4
        monkeypatch.setattr(eng, "memory_limit", lambda: 1 << 20)
        seen = []
        real = eng.empty_slices

        def spy(s, rows, k, kind, operand=None):
            seen.append(rows)
            return real(s, rows, k, kind, operand)

        monkeypatch.setattr(eng, "empty_slices", spy)
        a = rng.standard_normal((300, 100))
        b = rng.standard_normal((100, 300))
        c = ozlinalg.matmul(a, b, slices=6)
        assert max(seen) < 300  # tiled under the engine's 1 MiB
        with ozlinalg.options(memory_limit=2**31):
            np.testing.assert_array_equal(c, ozlinalg.matmul(a, b, slices=6))
