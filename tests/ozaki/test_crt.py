"""Ozaki scheme II (CRT over INT8 moduli): arithmetic exactness and accuracy."""
import math
import warnings

import numpy as np
import pytest

import ozlinalg
from ozlinalg import AccuracyWarning
from ozlinalg.engines import get_engine
from ozlinalg.ozaki import crt
from ozlinalg.ozaki.crt import product as crt_product
from ozlinalg.testing import ExactReference, error_stats, random_matrix, textbook_matmul

flint = pytest.importorskip("flint")

from conftest import assert_dot_accurate  # noqa: E402

ENG = get_engine(np)


def run(a, b, **kw):
    counts = {}
    c = crt.crt_matmul_2d(np, ENG, a, b, profile_counts=counts, **kw)
    return c, counts


def errors(a, b, c):
    """Max relative errors against the exact product of FP64 recursive summation (the
    DGEMM level on every machine; native DGEMM's depends on the BLAS kernel) and of c."""
    ref = ExactReference(a, b)
    return (error_stats(ref.relative_errors(textbook_matmul(a, b)))[0],
            error_stats(ref.relative_errors(c))[0])


def median_error(a, b, c):
    """Median relative error of c against the exact product: at DGEMM level the
    emulation is far below 2**-53 (one ulp of FP64 is 2**-52), so a product a few ulps
    off everywhere shows here, where the max against FP64's own error does not."""
    return error_stats(ExactReference(a, b).relative_errors(c))[1]


class TestModuli:
    def test_pairwise_coprime_and_bounded(self):
        mods = crt.MODULI
        assert len(mods) >= crt.MAX_MODULI and mods[0] == 256
        assert all(2 <= p <= 256 for p in mods)
        for i, p in enumerate(mods):
            for q in mods[i + 1:]:
                assert math.gcd(p, q) == 1
        assert mods[:12] == (256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217)

    @pytest.mark.parametrize("n", [1, 8, 15, 20, 32])
    def test_constants(self, n):
        k = crt.crt_constants(n)
        assert k.P == math.prod(crt.MODULI[:n])
        limb = 2**crt.LIMB_BITS
        for t, p in enumerate(k.moduli):
            w = sum(int(v) * limb**l for l, v in enumerate(k.weight_limbs[t]))
            assert 0 <= w < k.P
            for q in k.moduli:
                assert w % q == (1 if q == p else 0)
            assert abs(k.frac[t] - w / k.P) <= 2**-53
            # Exact accumulation: N * limb * 128 < 2**53.
            assert all(float(v).is_integer() and v < limb for v in k.weight_limbs[t])
        assert sum(int(v) * limb**l for l, v in enumerate(k.P_limbs)) == k.P

    def test_bad_counts(self):
        with pytest.raises(ValueError):
            crt.crt_constants(0)
        with pytest.raises(ValueError):
            crt.crt_constants(crt.MAX_MODULI + 1)


class TestModularArithmetic:
    @pytest.mark.parametrize("p", [256, 255, 253, 173, 2, 3])
    def test_symmetric_mod_exact_adversarial(self, rng, p):
        top = 2**52
        vals = [0, 1, -1, p // 2, -(p // 2), p // 2 + 1, -(p // 2) - 1, p, -p, top, -top,
                top - 1, 2**52 - 1, -(2**52) + 1, 2**31, -(2**31)]
        vals += [int(v) for v in rng.integers(-(2**52), 2**52, 300, dtype=np.int64)]
        vals += [q * p + h for q in (2**44, -(2**44), 12345) for h in (p // 2, -(p // 2))]
        x = np.array(vals, dtype=np.float64)
        assert all(int(v) == w for v, w in zip(x, vals))
        r = crt.symmetric_mod(np, x, p)
        h = p // 2
        for v, ri in zip(vals, r):
            assert float(ri).is_integer() and -h <= ri <= p - 1 - h
            assert (v - int(ri)) % p == 0

    @pytest.mark.parametrize("bits", [20, 53, 80, 130, 178])
    def test_residues_of_wide_integers(self, rng, bits):
        # Floats with integer values up to 2**bits (53-bit significands at every position).
        mant = rng.integers(-(2**53) + 1, 2**53 - 1, (7, 33), dtype=np.int64).astype(np.float64)
        sh = rng.integers(0, max(1, bits - 53), (7, 33))
        v = np.ldexp(mant, sh) if bits > 53 else np.trunc(mant / 2.0 ** (53 - bits))
        v[0, :3] = [0.0, -(2.0**bits) + 2.0 ** max(0, bits - 53), 2.0 ** (bits - 1)]
        mods = crt.MODULI[:20]
        out = np.empty((len(mods),) + v.shape, dtype=np.float32)
        crt.residues_into(np, v, mods, bits + 1, out)
        for t, p in enumerate(mods):
            for x, r in zip(v.ravel(), out[t].ravel()):
                assert -128 <= r <= 127
                assert (int(x) - int(r)) % p == 0

    @pytest.mark.parametrize("n", [8, 14, 20])
    def test_crt_reconstruction(self, rng, n):
        k = crt.crt_constants(n)
        half = k.P // 2
        vals = [0, 1, -1, 2, half - half // 50, -(half - half // 50), 12345678901234567,
                2**60 + 1]
        vals += [int(rng.integers(-(2**62), 2**62)) * int(rng.integers(1, 2**62)) % (half // 2)
                 * (1 if i % 2 else -1) for i in range(40)]
        vals = [v for v in vals if abs(v) < half - half // 60]
        prods = []
        for p in k.moduli:
            # Any integer congruent to C' mod p works as the "product"; add multiples of p.
            prods.append(np.array([[float((v % p) + p * ((i % 7) - 3) * 1000)
                                    for i, v in enumerate(vals)]]))
        c = crt.crt_reconstruct(np, ENG, enumerate(prods), k)
        for v, got in zip(vals, c[0]):
            if v == 0:
                assert got == 0.0
            else:
                assert abs(got - v) <= 4 * abs(v) * 2**-53

    def test_engine_products_exact_at_extremes(self):
        # Residues all -128 (256's range) and 127, inner 4096: sums of 2**14 * 4096.
        k = 4096
        a = ENG.empty_slices(1, 3, k, "crt")
        b = ENG.empty_slices(1, 2, k, "crt")
        a[...] = -128
        a[0, 1] = 127
        a[0, 2, ::2] = 127
        b[...] = -128
        prod, _ = ENG.int_matmul_sum(a, b, [(0, 0)], 128, 128)
        assert prod[0, 0] == 128 * 128 * k
        assert prod[1, 0] == -127 * 128 * k
        assert prod[2, 0] == (-127 * 128 + 128 * 128) * k // 2


class TestAccuracy:
    @pytest.mark.parametrize("phi", [0.5, 2.0])
    @pytest.mark.parametrize("scaling", ["fast", "accurate"])
    def test_dgemm_level_with_enough_moduli(self, rng, phi, scaling):
        a = random_matrix(rng, 40, 512, phi)
        b = random_matrix(rng, 512, 24, phi)
        c, counts = run(a, b, moduli=19, scaling=scaling)
        nat, emu = errors(a, b, c)
        assert emu <= nat
        assert median_error(a, b, c) <= 2.0**-53
        assert counts["int8_gemms"] == 19 + (scaling == "accurate")
        assert counts["slices"] == [19]

    @pytest.mark.parametrize("phi", [0.5, 2.0])
    def test_auto_reaches_dgemm_level(self, rng, phi):
        a = random_matrix(rng, 36, 300, phi)
        b = random_matrix(rng, 300, 28, phi)
        for scaling in ("fast", "accurate"):
            c, counts = run(a, b, moduli="auto", scaling=scaling)
            nat, emu = errors(a, b, c)
            assert emu <= nat, (scaling, counts["slices"])
            assert median_error(a, b, c) <= 2.0**-53, scaling
            assert 13 <= counts["slices"][0] <= 19
            # one estimate GEMM, or none where the bound products W decide (accurate)
            assert counts["float_gemms"] + counts.get("bound_decided", 0) == 1
            assert counts.get("bound_decided", 0) == 0 or scaling == "accurate"

    def test_auto_grows_with_exponent_spread(self, rng):
        chosen = []
        for phi in (0.5, 4.0):
            a = random_matrix(rng, 30, 256, phi)
            b = random_matrix(rng, 256, 20, phi)
            _, counts = run(a, b, moduli="auto", max_moduli=32)
            chosen.append(counts["slices"][0])
        assert chosen[0] < chosen[1]

    def test_auto_beyond_max_moduli_goes_native(self, rng):
        # 12 moduli serve no entry of a phi = 4 product at FP64 accuracy: native FP64.
        a = random_matrix(rng, 20, 128, 4.0)
        b = random_matrix(rng, 128, 10, 4.0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", AccuracyWarning)
            c, counts = run(a, b, moduli="auto", max_moduli=12)
        assert counts["slices"] == [0] and counts["int8_gemms"] == counts["bound_gemms"] == 1
        assert_dot_accurate(c, a, b)

    @pytest.mark.parametrize("tiles, own", [((8, 8), (16, 12)), ((16, 12), (8, 8)),
                                            ((40, 30), (7, 9)), ((9, 7), (40, 30))])
    def test_native_entries_on_the_products_own_tiles(self, rng, tiles, own, monkeypatch):
        # a few entries no count up to the cap serves: their masks, made on the count's
        # tiles, are mapped onto the products' (larger, smaller, misaligned)
        from ozlinalg.ozaki.crt import block

        a = random_matrix(rng, 40, 128, 0.5)
        b = random_matrix(rng, 128, 30, 0.5)
        a[3] = random_matrix(rng, 1, 128, 12.0)[0]
        a[17] = random_matrix(rng, 1, 128, 12.0)[0]
        b[:, 5] = random_matrix(rng, 128, 1, 12.0)[:, 0]
        natives = []
        native_entries = block.native_entries

        def spy(xp, c, x, yt, mask):
            natives.append(int(mask.sum()))
            return native_entries(xp, c, x, yt, mask)

        monkeypatch.setattr(block, "native_entries", spy)
        want, counts = run(a, b, moduli="auto", max_moduli=16)
        assert counts["slices"] == [16] and sum(natives) > 0
        whole = sum(natives)
        natives.clear()
        got, _ = run(a, b, moduli="auto", max_moduli=16, tiles=tiles,
                     retile=lambda nmod: own)
        np.testing.assert_array_equal(got, want)
        assert sum(natives) == whole

    def test_choose_moduli_clips_with_warning(self):
        from ozlinalg.ozaki.crt import crt_constants

        with pytest.warns(AccuracyWarning, match="max_moduli=12"):
            assert crt.choose_moduli(-20.0, "accurate", 12, crt_constants(20).log2P) == 12

    def test_more_moduli_more_accurate(self, rng):
        a = random_matrix(rng, 30, 200, 1.0)
        b = random_matrix(rng, 200, 20, 1.0)
        ref = ExactReference(a, b)
        errs = [error_stats(ref.relative_errors(run(a, b, moduli=n)[0]))[0]
                for n in (8, 11, 14, 17)]
        assert errs[0] > errs[1] > errs[2] > errs[3]

    def test_integer_inputs_exact(self, rng):
        a = rng.integers(-1000, 1000, (17, 90)).astype(float)
        b = rng.integers(-1000, 1000, (90, 13)).astype(float)
        for scaling in ("fast", "accurate"):
            c, _ = run(a, b, moduli=10, scaling=scaling)
            np.testing.assert_array_equal(c, a @ b)

    def test_inner_blocking(self, rng, monkeypatch):
        monkeypatch.setattr(crt_product, "CRT_INNER_BLOCK", 100)
        a = random_matrix(rng, 12, 250, 1.0)
        b = random_matrix(rng, 250, 9, 1.0)
        c, counts = run(a, b, moduli=18, scaling="accurate")
        assert counts["slices"] == [18, 18, 18]
        assert counts["int8_gemms"] == 3 * 19
        nat, emu = errors(a, b, c)
        assert emu <= max(nat, 1e-15)


class TestThroughMatmul:
    """``ozlinalg.matmul(method="crt" / "crt-fast")``: the front door's route to the
    Ozaki-II core, at DGEMM level against the exact product."""

    @pytest.mark.parametrize("method", ["crt", "crt-fast"])
    @pytest.mark.parametrize("shape", [(40, 300, 30), (7, 64, 5), (130, 90, 70)])
    def test_dgemm_level(self, rng, method, shape):
        m, k, p = shape
        a = random_matrix(rng, m, k, 1.0)
        b = random_matrix(rng, k, p, 1.0)
        c = ozlinalg.matmul(a, b, method=method)
        nat, emu = errors(a, b, c)
        assert emu <= max(nat, 4e-16)
        assert median_error(a, b, c) <= 2.0**-53


class TestSpecialInputs:
    def test_zero_rows_cols_and_empty(self, rng):
        a = random_matrix(rng, 10, 50, 1.0)
        b = random_matrix(rng, 50, 8, 1.0)
        a[3] = 0.0
        b[:, 5] = 0.0
        a[:, 7] = 0.0
        for scaling in ("fast", "accurate"):
            c, _ = run(a, b, moduli=18, scaling=scaling)
            assert np.all(c[3] == 0.0) and np.all(c[:, 5] == 0.0)
            nat, emu = errors(a, b, c)
            assert emu <= max(nat, 2e-16)
        assert run(np.zeros((3, 0)), np.zeros((0, 4)))[0].shape == (3, 4)
        c, _ = run(np.zeros((4, 6)), np.zeros((6, 2)))
        assert np.all(c == 0.0)

    def test_exact_zero_results_stay_zero(self):
        # Orthogonal rows/columns: C has exact zeros amid large entries.
        a = np.array([[1.0, 1.0, 0.0], [1.0, -1.0, 3.0]])
        b = np.array([[1.0, 2.0], [-1.0, 2.0], [0.5, 0.75]])
        c, _ = run(a, b, moduli=16)
        assert c[0, 0] == 0.0
        np.testing.assert_array_equal(c, a @ b)

    @pytest.mark.parametrize("scaling", ["fast", "accurate"])
    def test_huge_small_and_subnormal_exponents(self, rng, scaling):
        a = random_matrix(rng, 8, 60, 1.0)
        b = random_matrix(rng, 60, 6, 1.0)
        a[0] *= 2.0**900
        a[1] *= 2.0**-1000       # rows of subnormals and tiny normals
        a[2, ::3] *= 2.0**-600   # a wide exponent range inside one row
        b[:, 0] *= 2.0**-300
        b[:, 1] *= 2.0**100
        b[5, 2] = 5e-324         # smallest subnormal
        c, _ = run(a, b, moduli=20, scaling=scaling)
        ref = ExactReference(a, b)
        with np.errstate(over="ignore"):
            nat = textbook_matmul(a, b)
        fin = np.isfinite(ref.hi) & (np.abs(ref.hi) > 1e-290)
        emu_err = ref.relative_errors(c)[fin]
        nat_err = ref.relative_errors(nat)[fin]
        assert emu_err.max() <= max(nat_err.max(), 4e-16)
        # Results that are subnormal or overflow are rounded once: infinite exactly
        # where the exact product rounds to infinity.
        assert np.array_equal(np.isinf(c), np.isinf(ref.hi))
        tiny = ~fin & np.isfinite(ref.hi)
        tol = 2.0**-1074 * 4 + 1e-16 * np.abs(ref.hi[tiny])
        assert np.all(np.abs(c[tiny] - ref.hi[tiny]) <= tol)

    def test_overflow_matches_native(self):
        a = np.full((2, 3), 1e300)
        b = np.full((3, 2), 1e10)
        b[:, 1] = 1e-10
        c, _ = run(a, b, moduli=18)
        assert np.isinf(c[:, 0]).all() and (c[:, 0] > 0).all()
        assert_dot_accurate(c[:, 1], a, b[:, 1])

    def test_bad_arguments(self):
        a = np.ones((2, 2))
        with pytest.raises(ValueError, match="scaling"):
            run(a, a, scaling="exact")
        with pytest.raises(ValueError, match="moduli"):
            run(a, a, moduli="many")
        with pytest.raises(ValueError, match="moduli"):
            run(a, a, moduli=0)


class TestTiles:
    """Under a memory limit the residues of each tile are taken from the operands' rows
    themselves (no normalized copy): the same bits as one tile, in every memory order,
    rows of subnormals and rows near overflow included."""

    @staticmethod
    def operands(rng, order):
        a = random_matrix(rng, 150, 97, 1.0)
        b = random_matrix(rng, 97, 130, 1.0)
        a[3] *= 2.0**-1060       # a row of subnormals: its scale 2**1100 is not a float
        a[5] *= 2.0**1000
        a[7, ::3] *= 2.0**-900   # a wide exponent range inside one row
        b[:, 9] *= 2.0**-1070
        b[:, 2] *= 2.0**1010
        b[::5, 11] *= 2.0**-1000
        a[20] = 0.0
        b[:, 30] = 0.0
        return (np.asfortranarray(a), np.asfortranarray(b)) if order == "F" else (a, b)

    @pytest.mark.parametrize("order", ["C", "F"])
    @pytest.mark.parametrize("method", ["crt", "crt-fast"])
    def test_tiles_give_the_same_bits(self, rng, cpu_engine, monkeypatch, method, order):
        from ozlinalg._matmul import memory_plan
        from ozlinalg.engines import base

        monkeypatch.setitem(base._ENGINES, "numpy", cpu_engine)
        a, b = self.operands(rng, order)
        with ozlinalg.profile() as prof:
            want = ozlinalg.matmul(a, b, method=method)
        least = memory_plan(150, 97, 130, method, "auto", "dgemm", 1 << 50,
                            cpu_engine).minimum
        for limit in (least, 2 * least):
            with ozlinalg.options(memory_limit=limit), ozlinalg.profile() as tiled:
                got = ozlinalg.matmul(a, b, method=method)
            assert tiled.calls[-1].engine_calls >= 4 * prof.calls[-1].engine_calls
            np.testing.assert_array_equal(got, want)


class TestModuliKeyword:
    """``moduli=`` names the crt methods' count: the same product as ``slices=``."""

    @pytest.mark.parametrize("method", ["crt", "crt-fast"])
    def test_same_bits_as_slices(self, rng, method):
        import ozlinalg

        a, b = rng.standard_normal((23, 70)), rng.standard_normal((70, 9))
        for count in (16, "auto"):
            want = ozlinalg.matmul(a, b, method=method, slices=count)
            got = ozlinalg.matmul(a, b, method=method, moduli=count)
            assert np.array_equal(got, want)

    def test_dask_same_bits_as_slices(self, rng):
        import ozlinalg

        da = pytest.importorskip("dask.array")
        a = da.from_array(rng.standard_normal((20, 30)), chunks=10)
        b = rng.standard_normal((30, 7))
        want = ozlinalg.matmul(a, b, method="crt", slices=16).compute(scheduler="sync")
        got = ozlinalg.matmul(a, b, method="crt", moduli=16).compute(scheduler="sync")
        assert np.array_equal(got, want)

    def test_errors(self, rng):
        import ozlinalg

        a = rng.standard_normal((4, 5))
        with pytest.raises(ValueError, match="moduli= is the count of the crt methods"):
            ozlinalg.matmul(a, a.T, method="hybrid-ef", moduli=5)
        with pytest.raises(ValueError, match="not both"):
            ozlinalg.matmul(a, a.T, method="crt", moduli=16, slices=16)
        with ozlinalg.options(method="bitmask"), pytest.raises(ValueError, match="counts slices"):
            ozlinalg.matmul(a, a.T, moduli=16)
