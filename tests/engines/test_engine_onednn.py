"""The exact CPU INT8 engines: what the oneDNN engine, the AVX2 engine and the SGEMM
engine on int8 slices share (the Int8Engine around their GEMMs: slice storage, EF
groups, the INT32 run limit, the fused passes, the exactness self-test and its
retries), the float32 SGEMM engine's results bit for bit; and what is oneDNN's own
(its selection, its library's status codes, its ISA below VNNI).

The shared tests run on each INT8 engine that runs here (``int8_engine``,
tests/conftest.py), like tests/engines/test_engine_cublaslt.py does for the GPU
engine and its host stand-in: every method, fixed and ``auto`` counts, shapes that
hit the EF group limit r, the inner block and the output tiles, both memory orders
of each operand, Inf/NaN and complex inputs. An engine that cannot run skips with
its own verdict (oneDNN failing its self-test below VNNI, no AVX2 build); the
oneDNN-only tests skip where oneDNN cannot run; the selection tests run everywhere.
The AVX2 engine's own GEMM and selection: tests/engines/test_engine_avx2.py.
"""
import ast
import contextlib
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from conftest import cpu_engine_or_skip, float32_sgemm

import ozlinalg
from ozlinalg.engines import select
from ozlinalg.engines.onednn import EngineUnavailable, self_test
from ozlinalg.engines.onednn.engine import Int8Engine
from ozlinalg.ozaki import params
from ozlinalg.ozaki.split import normalize_rows, split_rows
from ozlinalg.testing import random_matrix

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def onednn():
    """The oneDNN engine, for what is its own (skips with its verdict where it cannot
    run); what it shares with the AVX2 engine takes ``int8_engine``."""
    return cpu_engine_or_skip("onednn")


@pytest.fixture(autouse=True)
def driver_path(monkeypatch):
    """These tests exercise the engines' GEMMs and passes in the driver: small products'
    one-call path (tests/ozaki/test_small.py) is switched off on both INT8 engines."""
    monkeypatch.setattr(Int8Engine, "small_product", None)


def _run(engine, a, b, **kw):
    with ozlinalg.options(engine=engine), ozlinalg.profile() as prof:
        c = ozlinalg.matmul(a, b, **kw)
    return c, prof


@contextlib.contextmanager
def on_float32_sgemm():
    """``ozlinalg`` calls inside run on the float32 SGEMM engine (``SGEMMEngine`` made
    directly, :func:`conftest.float32_sgemm`), whatever the name "sgemm" gives here."""
    from ozlinalg.engines import base

    saved = base._ENGINES.get("numpy")
    base._ENGINES["numpy"] = float32_sgemm()
    try:
        with ozlinalg.options(engine=None):
            yield
    finally:
        base._ENGINES["numpy"] = saved


def _run_ref(a, b, **kw):
    """``_run`` on the float32 SGEMM engine: the reference bits."""
    with on_float32_sgemm(), ozlinalg.profile() as prof:
        c = ozlinalg.matmul(a, b, **kw)
    return c, prof


def _order(x, order):
    return np.asfortranarray(x) if order == "F" else np.ascontiguousarray(x)


INT8_METHODS = ["hybrid-ef", "bitmask-ef", "bitmask", "rn", "crt", "crt-fast"]


# counts below auto's on purpose (this tests the engines' bits): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestSameBitsAsSGEMM:
    """``ozlinalg.matmul`` on each INT8 engine equals the float32 SGEMM engine bit for
    bit (``_run_ref``: the engine made directly; the name "sgemm" gives the SGEMM engine
    on int8 slices where the compiled passes load, one of the engines under test)."""

    @pytest.mark.parametrize("method", INT8_METHODS + ["splitfp"])
    @pytest.mark.parametrize("slices", [7, "auto"])
    @pytest.mark.parametrize("orders", ["CC", "CF", "FC", "FF"])
    def test_methods_counts_and_layouts(self, rng, int8_engine, method, slices, orders):
        a = _order(random_matrix(rng, 45, 203, 1.0), orders[0])
        b = _order(random_matrix(rng, 203, 37, 1.0), orders[1])
        if method.startswith("crt") and slices == 7:
            slices = 14
        want, p0 = _run_ref(a, b, method=method, slices=slices)
        got, p1 = _run(int8_engine.name, a, b, method=method, slices=slices)
        np.testing.assert_array_equal(got, want)
        assert p0.slices == p1.slices and p1.int8_gemms == p0.int8_gemms
        assert p1.calls[0].engine.startswith(int8_engine.name)
        if method.endswith("-ef"):  # each EF group is one INT8 GEMM
            assert p1.engine_calls == p1.slices[0] < p1.int8_gemms

    @pytest.mark.parametrize("order", ["C", "F"])
    def test_top_groups_in_blocks(self, rng, int8_engine, order):
        # Outputs of 2**20 entries and more: the top groups go a block of rows (of
        # columns, column-major) at a time through thirds of the one INT32 buffer.
        from ozlinalg._matmul import matmul_ordered
        from ozlinalg.ozaki.gemm import TOP_BLOCKS_FROM

        a = random_matrix(rng, 1100, 48, 1.0)
        b = random_matrix(rng, 48, 1000, 1.0)
        assert a.shape[0] * b.shape[1] >= TOP_BLOCKS_FROM
        want, _ = _run_ref(a, b, slices=7)
        with ozlinalg.options(engine=int8_engine.name), ozlinalg.profile() as prof:
            got = matmul_ordered(a, b, slices=7, order=order)
        np.testing.assert_array_equal(got, want)
        assert got.flags.f_contiguous == (order == "F")
        n = 1100 if order == "C" else 1000  # blocks of rows / of columns
        blocks = -(-n // (n // 3))
        assert prof.int8_gemms == 28 and prof.engine_calls == 4 + 3 * blocks

    @pytest.mark.parametrize("method", ["hybrid-ef", "bitmask-ef", "rn"])
    def test_group_limit_r(self, rng, int8_engine, method):
        # k = 5000: r = 2**(31 - 14 - 13) = 16 products per INT32 accumulator, below
        # the 20 pairs of the largest group at 20 slices.
        k = 5000
        assert params.group_limit(k, params.slice_width(k)) == 16
        a = random_matrix(rng, 6, k, 0.5)
        b = random_matrix(rng, k, 5, 0.5)
        want, _ = _run_ref(a, b, method=method, slices=20)
        got, prof = _run(int8_engine.name, a, b, method=method, slices=20)
        np.testing.assert_array_equal(got, want)
        if method.endswith("-ef"):
            assert prof.engine_calls == 20 + 4  # groups of 17..20 pairs take two GEMMs

    @pytest.mark.parametrize("method, slices", [("hybrid-ef", 9), ("hybrid-ef", "auto"),
                                                ("crt", 15), ("crt-fast", "auto")])
    def test_inner_blocks(self, rng, int8_engine, method, slices):
        k = params.INT8_INNER_BLOCK + 999  # two inner blocks (CRT: its own block length)
        a = random_matrix(rng, 3, k, 0.5)
        b = random_matrix(rng, k, 2, 0.5)
        want, _ = _run_ref(a, b, method=method, slices=slices)
        got, prof = _run(int8_engine.name, a, b, method=method, slices=slices)
        np.testing.assert_array_equal(got, want)
        assert len(prof.calls) == 1

    @pytest.mark.parametrize("method, slices", [("hybrid-ef", 9), ("bitmask", 8),
                                                ("hybrid-ef", "auto"), ("crt", 16),
                                                ("crt", "auto"), ("rn", "auto")])
    @pytest.mark.parametrize("limit", ["smallest", 3 << 20, 6 << 20])
    def test_output_tiles(self, rng, int8_engine, method, slices, limit):
        # int8 slices need less memory, so the two engines' tiles differ at the
        # larger limits (e.g. 130 x 125 against 65 x 125 tiles of 260 x 250)
        from ozlinalg._matmul import memory_plan

        a = random_matrix(rng, 260, 200, 2.0)
        b = random_matrix(rng, 200, 250, 2.0)
        if limit == "smallest":  # the larger of the two engines' smallest plans
            limit = max(memory_plan(260, 200, 250, method, slices, None, 1 << 50,
                                    eng).minimum for eng in (int8_engine, float32_sgemm()))
        want, _ = _run_ref(a, b, method=method, slices=slices)  # one tile
        with ozlinalg.options(memory_limit=limit):
            tiled, _ = _run_ref(a, b, method=method, slices=slices)
            got, _ = _run(int8_engine.name, a, b, method=method, slices=slices)
        # the count (and Ozaki-II's scalings) are planned for the whole product
        np.testing.assert_array_equal(tiled, want)
        np.testing.assert_array_equal(got, want)

    @pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
    def test_nonfinite_complex_and_faithful(self, rng, int8_engine, method):
        a = random_matrix(rng, 40, 90, 2.0) + 1j * random_matrix(rng, 40, 90, 2.0)
        b = random_matrix(rng, 90, 30, 2.0) - 1j * random_matrix(rng, 90, 30, 2.0)
        for scheme in ("3m", "4m"):
            if scheme == "4m":  # (3m forms Inf - Inf by design: NumPy warns)
                a[3, 4] = np.inf
                b[5, 6] = np.nan
            for accuracy in ("dgemm", "faithful"):
                with ozlinalg.options(complex_scheme=scheme):
                    want, _ = _run_ref(a, b, method=method, accuracy=accuracy)
                    got, _ = _run(int8_engine.name, a, b, method=method, accuracy=accuracy)
                np.testing.assert_array_equal(got, want)

    @pytest.mark.parametrize("method", ["hybrid-ef", "bitmask", "rn", "crt"])
    def test_numpy_passes_without_kernels(self, rng, int8_engine, method, monkeypatch):
        # OZLINALG_FUSED=0 (or no compiled kernels): the generic NumPy passes around the same
        # INT8 GEMMs (AVX2's stays compiled), same bits.
        from ozlinalg.engines import base

        plain = type(int8_engine)(fused=False)
        assert plain.kernels is None and "NumPy" in plain.describe()
        a = _order(random_matrix(rng, 33, 150, 1.0), "F")
        b = random_matrix(rng, 150, 21, 1.0)
        want, _ = _run_ref(a, b, method=method)
        monkeypatch.setitem(base._ENGINES, "numpy", plain)
        with ozlinalg.options(engine=None), ozlinalg.profile() as prof:
            got = ozlinalg.matmul(a, b, method=method)
        np.testing.assert_array_equal(got, want)
        assert prof.calls[0].engine == plain.describe()

    def test_factorizations(self, rng, int8_engine):
        a = rng.standard_normal((300, 300))
        spd = a @ a.T + 300 * np.eye(300)
        for name, x in (("getrf", a), ("potrf", spd), ("geqrf", a)):
            fn = getattr(ozlinalg.lapack, name)
            with on_float32_sgemm():
                want = fn(x, min_size=64, block_size=64)
            with ozlinalg.options(engine=int8_engine.name):
                got = fn(x, min_size=64, block_size=64)
            for w, g in zip(want, got):
                np.testing.assert_array_equal(g, w)

    def test_huge_exponent_range_auto(self, rng, int8_engine):
        # Inner dimension scaled by 2**(+-300): auto's estimate underflows in float32 /
        # BF16 and is redone in float64; some entries go native. Same bits.
        a = random_matrix(rng, 30, 64, 1.0)
        b = random_matrix(rng, 64, 20, 1.0)
        d = 2.0 ** np.where(np.arange(64) % 2, 300, -300)
        a, b = a * d, b / d[:, None]
        for method in ("hybrid-ef", "crt"):
            want, _ = _run_ref(a, b, method=method, balance=False)
            got, _ = _run(int8_engine.name, a, b, method=method, balance=False)
            np.testing.assert_array_equal(got, want)


class TestExactness:
    """Each INT8 engine is exact where it runs, and the self-test can fail."""

    @pytest.mark.parametrize("layouts", ["rows", "cols"])
    def test_grouped_runs_in_both_layouts(self, rng, int8_engine, layouts):
        eng = int8_engine
        s, m, p, k = 6, 19, 23, 300
        xa = np.zeros((m, k)) if layouts == "rows" else np.zeros((k, m)).T
        xb = np.zeros((p, k)) if layouts == "rows" else np.zeros((k, p)).T
        da = eng.empty_slices_like(xa, s, "bitmask", "a")
        db = eng.empty_slices_like(xb, s, "bitmask", "b")
        assert (da.strides[1] == 1) == (layouts == "cols")
        da[...] = rng.integers(-128, 128, da.shape)
        db[...] = rng.integers(-128, 128, db.shape)
        a64, b64 = da.astype(np.int64), db.astype(np.int64)
        for g in range(s):
            pairs = [(i, g - i) for i in range(g + 1)]
            for order in "CF":
                got, calls = eng.int_matmul_sum(da, db, pairs, 128, 128,
                                                ws=eng.workspace(m, p, order))
                assert calls == 1  # the whole group: one GEMM over the stacked slices
                np.testing.assert_array_equal(got, sum(a64[i] @ b64[j].T for i, j in pairs))

    @pytest.mark.parametrize("m, p, k", [(1, 16, 144), (16, 1, 33), (1, 1, 5), (37, 29, 300)])
    @pytest.mark.parametrize("order", ["C", "F"])
    def test_result_in_either_order(self, rng, int8_engine, m, p, k, order):
        eng = int8_engine
        da = eng.empty_slices(3, m, k, "bitmask", "a")
        db = eng.empty_slices(3, p, k, "bitmask", "b")
        da[...] = rng.integers(-128, 128, da.shape)
        db[...] = rng.integers(-128, 128, db.shape)
        pairs = [(0, 2), (1, 1), (2, 0)]
        got, _ = eng.int_matmul_sum(da, db, pairs, 128, 128, ws=eng.workspace(m, p, order))
        a64, b64 = da.astype(np.int64), db.astype(np.int64)
        np.testing.assert_array_equal(got, sum(a64[i] @ b64[j].T for i, j in pairs))

    def test_int32_overflow_goes_to_int64(self, rng, int8_engine):
        k = 1 << 16
        a = int8_engine.empty_slices(2, 3, k, "bitmask")
        a[...] = -128
        got, calls = int8_engine.int_matmul_sum(a, a, [(0, 0), (1, 1)], 128, 128)
        assert got.dtype == np.int64 and calls == 2
        assert int(got[0, 0]) == 2 * k * 128 * 128  # 2**31: past INT32

    def test_rejects_float_slices(self, int8_engine):
        with pytest.raises(TypeError, match=f"the {int8_engine.label} engine multiplies int8"):
            int8_engine.int_matmul_sum(np.zeros((1, 2, 2), np.float32),
                                       np.zeros((1, 2, 2), np.int8), [(0, 0)], 1, 1)

    def test_self_test_passes_here(self, int8_engine):
        ok, detail = self_test(int8_engine)
        assert ok and int8_engine.isa in detail, detail

    def test_self_test_fails_on_a_saturating_gemm(self):
        # vpmaddubsw (oneDNN below VNNI) adds pairs of u8 * s8 products in INT16 with
        # saturation; an engine that does so must fail the test. The self-test and the
        # slice storage are the Int8Engine's: no GEMM library is needed.
        class Saturating(Int8Engine):
            def __init__(self):
                self.kernels, self.threads = None, 1

            def int_matmul_sum(self, a, b, pairs, bound_a, bound_b, ws=None):
                out = 0
                for i, j in pairs:
                    u = a[i].astype(np.int64) + 128  # s8 -> u8, compensated below
                    v = b[j].astype(np.int64)
                    k = u.shape[1] - u.shape[1] % 2
                    pair = u[:, None, :k] * v[None, :, :k]
                    pair = np.clip(pair[..., 0::2] + pair[..., 1::2], -32768, 32767)
                    tot = pair.sum(-1) + (u[:, None, k:] * v[None, :, k:]).sum(-1)
                    out = out + tot - 128 * v.sum(-1)[None, :]
                return out, len(pairs)

        ok, detail = self_test(Saturating())
        assert not ok and "entries wrong" in detail


def _assert_accumulators_agree(fused, consts, prods):
    """The fused CRT accumulator's result is the generic one's, bit for bit."""
    from ozlinalg.ozaki.crt import CRTAccumulator

    for faithful in (False, True):  # the DGEMM-level rebuild, and the TwoSum one with its bound
        gen = CRTAccumulator(np, ozlinalg.engines.base.Engine(), consts)
        fus = fused.crt_accumulator(consts)
        for t, pr in enumerate(prods):
            gen.add(t, pr)
            fus.add(t, pr)
        if faithful:
            for got, want in zip(fus.faithful_result(), gen.faithful_result()):
                np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_array_equal(fus.result(), gen.result())
    _assert_fused_certificate_agrees(fused, consts, prods)


def _assert_fused_certificate_agrees(fused, consts, prods):
    """The rebuild fused with the Ozaki-II certificate (``faithful_certify``) gives the
    generic rebuild's values and ``faithful.crt_certify``'s truth values, with bounds on
    both sides of the distance to the neighbouring floats, zero rows and columns, exact
    zeros and exponents at both ends of the range."""
    from ozlinalg.ozaki import faithful
    from ozlinalg.ozaki.crt import CRTAccumulator

    rng = np.random.default_rng(len(prods))
    gen = CRTAccumulator(np, ozlinalg.engines.base.Engine(), consts)
    fus = fused.crt_accumulator(consts)
    prods = [pr.copy() for pr in prods]
    for pr in prods:
        pr[-1] = 0  # a row of exact zeros
    for t, pr in enumerate(prods):
        gen.add(t, pr)
        fus.add(t, pr)
    r, slop = gen.faithful_result()
    m, p = r.shape
    ar = np.abs(r)
    scale = np.ldexp(np.median(ar[ar > 0]) if np.any(ar > 0) else 1.0, -54)
    sx = scale * np.ldexp(1.0, rng.integers(-6, 4, m).astype(np.int32))
    sy = scale * np.ldexp(1.0, rng.integers(-6, 4, p).astype(np.int32))
    sx[0] = 0.0  # a zero row: bound 0
    if p > 2:
        sy[2] = 0.0
    mu, nu = np.zeros(m), np.zeros(p)
    vec = faithful.CRTBound(np, sx, sy, mu, nu, rng.random(m) < 0.5, rng.random(p) < 0.5,
                            1.0)
    vec.pa *= 0.25
    ea = rng.integers(-200, 200, m)
    eb = rng.integers(-200, 200, p)
    ea[1 % m] = 1023 - 160  # results near both ends of the range
    eb[1 % p] = -1100 + 250
    got_c, got_ok = fus.faithful_certify(vec, ea, eb, faithful._SLACK)
    want = faithful.crt_certify(np, ozlinalg.engines.base.Engine(), r, slop, vec, ea, eb)
    np.testing.assert_array_equal(got_c, r)
    np.testing.assert_array_equal(got_ok, want)
    assert 0 < want.sum() < want.size or want.size < 8


class TestFusedPassesMatchGeneric:
    """Each compiled kernel gives the generic array code's bits, on both engines that
    run them (the AVX2 engine shares the oneDNN engine's passes)."""

    @pytest.fixture
    def fused(self, int8_engine):
        if int8_engine.kernels is None:
            pytest.skip(f"no fused kernels here: {int8_engine.kernels_reason}")
        return int8_engine

    @pytest.mark.parametrize("kind", ["hybrid", "bitmask", "rn"])
    @pytest.mark.parametrize("order", ["C", "F"])
    @pytest.mark.parametrize("phi", [0.5, 4.0])
    def test_split(self, rng, fused, kind, order, phi):
        a = random_matrix(rng, 33, 517, phi)
        a[3] = 0.0
        a[5, ::2] = 0.0
        a[7, 4] = 5e-324
        a[8] *= 2.0**-1040  # subnormal row
        a = _order(a, order)
        x_g, e_g = normalize_rows(np, a)
        x_f, e_f = normalize_rows(np, a, fused)
        np.testing.assert_array_equal(x_f, x_g)
        np.testing.assert_array_equal(e_f, e_g)
        assert x_f.flags.f_contiguous == (order == "F")  # follows the input's order
        s, width = 9, 7
        out_g, sc_g = np.empty((s, 33, 517), np.int8), np.empty((s, 33))
        split_rows(np, kind, x_g.copy(), s, width, out_g, sc_g)
        out_f = fused.empty_slices_like(x_f, s, kind, "b")
        sc_f = np.empty((s, 33))
        assert fused.split_rows(kind, x_f.copy(order="K"), s, width, out_f, sc_f)
        np.testing.assert_array_equal(out_f, out_g)
        np.testing.assert_array_equal(sc_f, sc_g)

    @pytest.mark.parametrize("phi", [0.5, 4.0])
    def test_normalize_tiles_of_a_transposed_operand(self, rng, fused, phi):
        # B^T's row tiles of a C-ordered B (a product's column tiles under a memory
        # limit): unit stride down a column, not contiguous as a whole; they take the
        # column kernel (x comes back column-contiguous), with the generic code's bits
        b = random_matrix(rng, 517, 90, phi)
        b[4, 7] = 5e-324
        for tile in (b.T[10:43], b.T[10:43, 5:400], b.T[:1]):
            x_g, e_g = normalize_rows(np, tile)
            x_f, e_f = normalize_rows(np, tile, fused)
            np.testing.assert_array_equal(x_f, x_g)
            np.testing.assert_array_equal(e_f, e_g)
            if tile.shape[0] > 1:
                assert x_f.flags.f_contiguous

    @pytest.mark.parametrize("order", ["C", "F"])
    @pytest.mark.parametrize("phi", [0.5, 4.0])
    def test_split_without_normalized_copy(self, rng, fused, order, phi):
        # fixed counts: normalization and split in one pass, straight from the input
        a = random_matrix(rng, 29, 411, phi)
        a[2] = 0.0
        a[4, 7] = 5e-324
        a[6] *= 2.0**-1040
        a[9] *= 2.0**1000
        a = _order(a, order)
        x, e = normalize_rows(np, a)
        s, width = 8, 7
        want, sc = np.empty((s, 29, 411), np.int8), np.empty((s, 29))
        split_rows(np, "hybrid", x, s, width, want, sc)
        got, sc_f, e_f = fused.split_raw("hybrid", a, s, width, "a")
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(sc_f, sc)
        np.testing.assert_array_equal(e_f, e)

    @pytest.mark.parametrize("order", ["C", "F"])
    def test_crt_residues_and_bound(self, rng, fused, order):
        from ozlinalg.ozaki.crt import MODULI, residues_into

        x, _ = normalize_rows(np, _order(random_matrix(rng, 21, 333, 2.0), order))
        shift = rng.integers(10, 70, 21).astype(float)
        mult = np.ldexp(np.ones(21), shift.astype(np.int32))
        rnd = shift >= 30
        mods = MODULI[:18]
        bits = int(shift.max()) + 2
        v = x * mult[:, None]
        want = np.empty((18, 21, 333), np.int8)
        residues_into(np, np.where(rnd[:, None], np.rint(v), np.trunc(v)), mods, bits, want)
        got = fused.empty_slices_like(x, 18, "crt")
        assert fused.crt_residues(x, mult, rnd, mods, bits, got)
        np.testing.assert_array_equal(got, want)
        bound = fused.empty_slices_like(x, 1, "crt")
        assert fused.crt_bound(x, bound[0])
        np.testing.assert_array_equal(bound[0], -np.ceil(np.abs(x) * 128.0))

    @pytest.mark.parametrize("which", ["ef", "crt"])
    def test_certificates(self, rng, fused, which):
        # certify_ef / certify_crt against certify_core: magnitudes over the whole range
        # (subnormal, tiny, huge; powers of two, whose lower gap is half), zeros with and
        # without a bound, Inf, bounds on both sides of the gap, result exponents at
        # both ends of the range
        from ozlinalg.ozaki import faithful

        m, p = 37, 41
        e = rng.integers(-1074, 1024, (m, p))
        r = np.ldexp(rng.uniform(0.5, 1.0, (m, p)), e.astype(np.int32))
        r[rng.random((m, p)) < 0.2] = np.ldexp(1.0, rng.integers(-1074, 1023, 1).astype(
            np.int32))[0] * np.where(rng.random() < 0.5, 1.0, -1.0)
        r *= np.where(rng.random((m, p)) < 0.5, -1.0, 1.0)
        r[rng.random((m, p)) < 0.05] = 0.0
        r[0, :3] = [np.inf, 2.0**-1074, 2.0**-1022]
        slop = np.abs(r) * 2.0**-54 * rng.uniform(0.0, 2.5, (m, p))
        slop[~np.isfinite(slop)] = 0.0
        slop[rng.random((m, p)) < 0.05] = 0.0
        ea = rng.integers(-600, 600, m)
        eb = rng.integers(-600, 600, p)
        if which == "ef":
            da = rng.integers(0, 2, (3, m)) * 2.0**-80
            db = rng.integers(0, 2, (3, p)) * 2.0**-80
            vec = faithful.EFBound(np, da, db, "hybrid", 7, 3, 100, 63, 5)
            got = fused.certify_ef(r, slop, vec, ea, eb, faithful._SLACK)
        else:
            sx = rng.integers(0, 2, m) * 2.0**-70
            sy = rng.integers(0, 2, p) * 2.0**-70
            vec = faithful.CRTBound(np, sx, sy, np.zeros(m), np.zeros(p),
                                    rng.random(m) < 0.5, rng.random(p) < 0.5, 3.0)
            vec.pa[:] = sx * 2.0**-60
            vec.pb[:] = sy * 2.0**-60
            vec.ra[:] *= 2.0**-200
            vec.rb[:] *= 2.0**-200
            got = fused.certify_crt(r, slop, vec, ea, eb, faithful._SLACK)
        want = faithful.certify_generic(np, r, slop, vec, ea, eb, faithful._SLACK)
        np.testing.assert_array_equal(got, want)
        assert 0.1 < want.mean() < 0.9

    def test_crt_accumulator(self, rng, fused):
        from ozlinalg.ozaki.crt import crt_constants

        for n in (1, 5, 15, 20):
            consts = crt_constants(n)
            prods = [rng.integers(-(2**31) + 1, 2**31, (17, 29)).astype(np.int32)
                     for _ in range(n)]
            prods[0][0, :3] = [2**31 - 1, -(2**31) + 1, 0]
            _assert_accumulators_agree(fused, consts, prods)

    @pytest.mark.parametrize("order", ["C", "F"])
    @pytest.mark.parametrize("operand", [None, "a", "b"])
    @pytest.mark.parametrize("top", [20, 49, 50, 84, 85, 120, 250])
    def test_crt_residues_every_digit_plan_and_layout(self, rng, fused, order, operand, top):
        # |v| < 2**51 needs no digit, up to 86 bits two 43-bit digits, more above;
        # the grouped storage of A and (reversed) of B, and plain slices
        from ozlinalg.ozaki.crt import MODULI, residues_into

        rows, k, n = 19, 157, 20
        x, _ = normalize_rows(np, _order(random_matrix(rng, rows, k, 2.0), order))
        x[2] = 0.0
        x[3, :4] = [1.0 - 2.0**-53, -(1.0 - 2.0**-53), 2.0**-60, -0.5]
        shift = rng.integers(max(0, top - 30), top + 1, rows)
        shift[3] = top
        mult = np.ldexp(np.ones(rows), shift.astype(np.int32))
        rnd = rng.random(rows) < 0.5
        mods = MODULI[:n]
        bits = int(shift.max()) + 2
        v = x * mult[:, None]
        want = np.empty((n, rows, k), np.int8)
        residues_into(np, np.where(rnd[:, None], np.rint(v), np.trunc(v)), mods, bits, want)
        got = fused.empty_slices_like(x, n, "crt", operand)
        assert fused.crt_residues(x, mult, rnd, mods, bits, got)
        np.testing.assert_array_equal(got, want)

    @pytest.mark.parametrize("bits", [40, 51, 52, 86, 87, 88, 129, 200])
    def test_crt_residues_at_the_exactness_bound(self, rng, fused, bits):
        # Row t holds integers v = k 2**s (53-bit k) near 2**bits with v = +-(p - 1) / 2
        # mod p_t: whatever the digits, every partial sum has that residue, whose
        # quotient by p lies nearest a half-integer, so any step that lets a sum reach
        # 2**51 rounds a few of them wrong (checked: ~5 % of such values in [2**51,
        # 2**52) with a one-step rint)
        from ozlinalg.ozaki.crt import MODULI, residues_into

        mods = [q for q in MODULI if q % 2]
        s, top, n = max(0, bits - 53), 2 ** min(bits, 53), 4000
        rows = []
        for q in mods:
            k = rng.integers(top - top // 4, top, n, dtype=np.int64)  # the top of the range
            want = np.where(np.arange(n) % 2, (q - 1) // 2, q - (q - 1) // 2)
            k += (want * pow(pow(2, s, q), -1, q) - k) % q  # k 2**s = want (mod q)
            k = np.where(k >= top, k - q, k)
            rows.append(np.where(np.arange(n) % 3, 1.0, -1.0) * np.ldexp(k.astype(float), s))
        v = np.array(rows)
        assert np.all(np.abs(v) < 2.0**bits) and np.all(v == np.trunc(v))
        x = np.ldexp(v, -bits)  # exact: x * 2**bits gives v back
        mult = np.full(len(mods), 2.0**bits)
        want = np.empty((len(mods), len(mods), n), np.int8)
        residues_into(np, v, mods, bits, want)
        got = fused.empty_slices_like(x, len(mods), "crt", "a")
        assert fused.crt_residues(x, mult, np.ones(len(mods), bool), mods, bits, got)
        np.testing.assert_array_equal(got, want)

    @pytest.mark.parametrize("order", ["C", "F"])
    @pytest.mark.parametrize("m", [1, 40, 157, 158, 300])
    def test_crt_accumulator_in_the_operands_memory(self, rng, fused, order, m):
        # The residues of product t go to B's slots 0..t (dead once product t is
        # taken) when those are one block in order and m <= k: same bits as the
        # generic accumulator, and every product reads its own operand slot intact
        from ozlinalg.ozaki.crt import CRTAccumulator, crt_constants

        k, p, n = 157, 61, 15
        consts = crt_constants(n)
        da = fused.empty_slices(n, m, k, "crt", "a")
        da[...] = rng.integers(-128, 128, da.shape)
        db = fused.empty_slices_like(_order(np.zeros((p, k)), order), n, "crt", "b")
        db[...] = rng.integers(-128, 128, db.shape)
        want = [da[t].astype(np.int64) @ db[t].astype(np.int64).T for t in range(n)]
        gen = CRTAccumulator(np, ozlinalg.engines.base.Engine(), consts)
        fus = fused.crt_accumulator(consts)
        fus.recycle(db)
        for t in range(n):
            prod, _ = fused.int_matmul_sum(da, db, [(t, t)], 128, 128)
            np.testing.assert_array_equal(prod, want[t])
            gen.add(t, prod)
            fus.add(t, prod)
        assert np.shares_memory(fus.res, db) == (order == "F" and m <= k)
        np.testing.assert_array_equal(fus.result(), gen.result())

    @pytest.mark.parametrize("n", [2, 4, 6, 11, 16, 17, 24, 32])
    def test_crt_accumulator_every_limb_count(self, rng, fused, n):
        # 1 .. 7 limbs of 40 bits; a count that is not a multiple of four; residues
        # at both ends of every modulus' range
        from ozlinalg.ozaki.crt import crt_constants

        consts = crt_constants(n)
        prods = []
        for p in consts.moduli:
            pr = rng.integers(-(2**31) + 1, 2**31, (13, 1100)).astype(np.int64)
            pr[0, :6] = [2**31 - 1, -(2**31) + 1, 0, p // 2, p // 2 - p, p * 12345 + p // 2]
            pr[1] = (pr[1] // p) * p + rng.choice([p // 2, p // 2 - p + 1, 0], 1100)
            prods.append(np.clip(pr, -(2**31) + 1, 2**31 - 1).astype(np.int32))
        _assert_accumulators_agree(fused, consts, prods)

    @pytest.mark.parametrize("order", ["C", "F"])
    @pytest.mark.parametrize("shape", [(33, 517), (1, 300), (40, 1), (9, 7), (17, 128),
                                       (5, 129), (3, 4099), (300, 17)])
    def test_normalize_odd_shapes(self, rng, fused, order, shape):
        rows, k = shape
        a = random_matrix(rng, rows, k, 4.0)
        a[0, 0] = 5e-324
        if rows > 3:
            a[1] = 0.0
            a[2] *= 2.0**-1040  # subnormal row
            a[3] *= 2.0**1000
        a = _order(a, order)
        x_g, e_g = normalize_rows(np, a)
        x_f, e_f = fused.normalize_rows(a)
        np.testing.assert_array_equal(x_f, x_g)
        np.testing.assert_array_equal(e_f, e_g)
        assert x_f.flags.f_contiguous == x_g.flags.f_contiguous or rows == 1 or k == 1

    @pytest.mark.parametrize("order", ["C", "F"])
    def test_fixed_sums(self, rng, fused, order):
        # the engine-independent row norms / absolute sums (ozaki.counts.estimate): same floats
        from ozlinalg.ozaki.counts import estimate

        a = random_matrix(rng, 300, 517, 2.0)
        a[3] = 0.0
        a[7, 4] = 5e-324
        a[8] *= 2.0**-1040
        x, _ = normalize_rows(np, _order(a, order))
        x[9, :5] = 2.0**-600  # squares underflow
        for fn in (estimate.sq_norm_upper, estimate.abs_sum_upper):
            want = fn(np, x)
            np.testing.assert_array_equal(fn(np, x, fused), want)
            np.testing.assert_array_equal(fn(np, x[:1], fused), want[:1])

    @pytest.mark.parametrize("with_num", [False, True])
    def test_classify_estimate(self, rng, fused, with_num):
        # auto's interval pass: the codes, row minima and candidates of the generic form
        from ozlinalg.ozaki.counts import estimate

        m, p = 37, 300
        q = (rng.random((m, p)) * 2e-3).astype(np.float32)
        q[0, :4] = [0.0, 1e-30, np.inf, -1.0]  # (finite inputs never give NaN here)
        num = None
        if with_num:
            num = [rng.random(n) + 0.5 for n in (m, p, m, p)]
            num[0][1], num[1][2], num[2][3] = 0.0, np.inf, 1e200  # d = 0, inf, overflow
            num[0][3] = 0.0
        consts = (2.0**10, 1e-60, 0.9, 1.1, 2.0**-40, 1e-3)
        codes, row_lo, row_hi = fused.classify_estimate(q, consts, num)
        w, lo, hi = estimate._interval(np, q, consts, num)
        unsure = (w <= 0) | (lo <= 0)
        nat = (hi < consts[-1]) & ~unsure
        amb = (lo < consts[-1]) & ~nat | unsure
        kept = ~(nat | amb)
        np.testing.assert_array_equal(codes, np.where(kept, 0, np.where(nat, 1, 2)))
        assert {0, 1, 2} <= set(np.unique(codes))
        np.testing.assert_array_equal(row_lo, np.where(kept, lo, np.inf).min(axis=1))
        np.testing.assert_array_equal(row_hi, np.where(kept, hi, np.inf).min(axis=1))
        bound = float(row_hi.min())
        below = fused.kept_below(q, consts, num, codes, bound, row_lo)
        np.testing.assert_array_equal(below, kept & (lo < bound))
        assert below.any()

    @pytest.mark.parametrize("layout", ["rows", "cols"])
    def test_digit_sums(self, rng, fused, layout):
        # the faithful bound's exact digit sums, slices stored either way, 2+ column blocks
        from ozlinalg.ozaki import faithful

        d = rng.integers(-128, 128, (3, 300, 517)).astype(np.int8)
        d[0, 5] = -128
        if layout == "cols":
            d = np.ascontiguousarray(d.transpose(0, 2, 1)).transpose(0, 2, 1)
        want = faithful.digit_sums(np, ozlinalg.engines.base.Engine(), d)
        np.testing.assert_array_equal(want, np.abs(d.astype(np.int64)).sum(axis=2))
        np.testing.assert_array_equal(fused.digit_sums(d), want)

    @pytest.mark.parametrize("tiles", [(1, 1), (2, 1), (1, 3), (3, 2)])
    def test_crt_bound_shifts(self, rng, fused, tiles):
        # the engine's int32 summary of W gives the generic float pass's shifts
        from ozlinalg.ozaki.crt import crt_constants
        from ozlinalg.ozaki.crt.shifts import _accurate_shifts

        m, p = 61, 47
        for spread in (0, 3, 20, 30):
            w = (rng.random((m, p)) ** 3 * 2.0**spread).astype(np.int32)
            w[rng.random((m, p)) < 0.2] = 0
            w[5] = 0
            w[:, 7] = 0
            w[9, 9] = 2**31 - 1
            rt = [(i * m // tiles[0], (i + 1) * m // tiles[0]) for i in range(tiles[0])]
            ct = [(j * p // tiles[1], (j + 1) * p // tiles[1]) for j in range(tiles[1])]
            planner = fused.crt_bound_shifts(m, p)
            w_tiles = []
            for i0, i1 in rt:
                for j0, j1 in ct:
                    w_tiles.append((i0, i1, j0, j1, w[i0:i1, j0:j1].astype(np.float64)))
                    planner.add(i0, i1, j0, j1, w[i0:i1, j0:j1])
            for n in (1, 3, 15, 20, 32):
                log2p = crt_constants(n).log2P
                mu, nu = _accurate_shifts(np, w_tiles, log2p, m, p)
                mu_f, nu_f = _accurate_shifts(np, [], log2p, m, p, planner)
                np.testing.assert_array_equal(mu_f, mu)
                np.testing.assert_array_equal(nu_f, nu)

    @pytest.mark.parametrize("order", ["C", "F"])
    @pytest.mark.parametrize("axis", [0, 1])
    def test_abs_max(self, rng, fused, order, axis):
        # balance_inner's maxima: the generic values where finite, non-finite otherwise
        from ozlinalg.ozaki.balance import abs_max_generic

        x = random_matrix(rng, 301, 517, 4.0)
        x[3] = -0.0
        x[7, 9] = -5e-324
        x = _order(x, order)
        np.testing.assert_array_equal(fused.abs_max(x, axis), abs_max_generic(np, x, axis))
        for bad in (np.inf, -np.inf, np.nan):
            y = x.copy(order="K")
            y[11, 13] = bad
            got, want = fused.abs_max(y, axis), abs_max_generic(np, y, axis)
            fin = np.isfinite(want)
            np.testing.assert_array_equal(got[fin], want[fin])
            assert not np.isfinite(got[~fin]).any() and (~fin).sum() == 1
        assert fused.abs_max(x[::2, ::2], axis) is None  # strided: generic code
        # a block of a larger matrix (a factorization's panel): unit-stride lines, any
        # leading dimension, no copy
        for blk in (x[3:250, 10:150], x[:, 5:6], x[7:8, :], x[2:, 1:][::1, :-3]):
            np.testing.assert_array_equal(fused.abs_max(blk, axis),
                                          abs_max_generic(np, blk, axis))

    @pytest.mark.parametrize("order", ["C", "F"])
    def test_abs_min_nonzero(self, rng, fused, order):
        from ozlinalg.ozaki.balance import abs_min_nonzero_generic

        x = random_matrix(rng, 301, 517, 30.0)
        x[3] = 0.0
        x[7, 9] = -5e-324
        x[8, 8] = np.nan
        x = _order(x, order)
        for blk in (x, x[3:250, 10:150], x[3:4, 3:300], x[:, 9:10], x[100:, 100:]):
            assert fused.abs_min_nonzero(blk) == abs_min_nonzero_generic(np, blk)
        assert fused.abs_min_nonzero(x[::2, ::2]) is None
        assert fused.abs_min_nonzero(np.zeros((4, 5))) == np.inf

    def test_bound_r_min(self, rng, fused):
        # auto's lower bounds from W: the generic row blocks' minima and columns
        from ozlinalg.ozaki.counts.moduli import _bound_r_min

        m, p, k = 70, 53, 400
        w = rng.integers(0, 2**31 - 1, (m, p)).astype(np.int32)
        ca = rng.integers(0, 129 * k, m).astype(np.float64)
        cb = rng.integers(0, 129 * k, p).astype(np.float64)
        w[3, :] = 0  # no positive W - ca - cb: 0
        num = [np.ldexp(1.0, -rng.integers(0, 40, n)) * rng.random(n) for n in (m, p, m, p)]
        num[0][6] = 0.0  # no divisor
        num[2][6] = 0.0
        num[0][7] = 2.0**-600  # num**2 below the normal range
        num[2][7] = 0.0
        inv_k = 2.0**-28 / k * (1 - 2.0**-40)
        rg, ag = _bound_r_min(np, None, w, ca, cb, num, inv_k)
        rf, af = fused.bound_r_min(w, ca, cb, num, inv_k)
        np.testing.assert_array_equal(rf, rg)
        np.testing.assert_array_equal(af, ag)
        assert rg[3] == rg[6] == rg[7] == 0.0

    @pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
    def test_axpy(self, rng, fused, dtype):
        x = rng.integers(-(2**31) + 1, 2**31, (300, 500)).astype(dtype)
        for alpha in (1.0, 2.0**-14, 2.0**-300):
            acc0 = rng.standard_normal((300, 500))
            acc1 = acc0.copy()
            ozlinalg.engines.base.Engine().axpy(alpha, x, acc0)
            fused.axpy(alpha, x, acc1)
            np.testing.assert_array_equal(acc1, acc0)

    def test_scale_outer(self, rng, fused):
        from ozlinalg.ozaki.scaling import apply_exponents

        acc = rng.standard_normal((70, 90)) * 2.0 ** rng.integers(-60, 60, (70, 90))
        ea, eb = rng.integers(-400, 400, 70), rng.integers(-400, 400, 90)
        want, got = acc.copy(), acc.copy()
        apply_exponents(np, want, ea, eb, -80, 80)
        apply_exponents(np, got, ea, eb, -80, 80, fused)
        np.testing.assert_array_equal(got, want)

    def test_estimate_within_bf16_precision(self, rng, fused):
        xa, _ = normalize_rows(np, random_matrix(rng, 40, 300, 4.0))
        xb, _ = normalize_rows(np, random_matrix(rng, 300, 30, 4.0).T)
        q = fused.approx_squares(xa, xb)
        if fused.bf16_gemm is None:  # no BF16 units: the FP32 estimate, left scaled
            assert q is None
            q32, scale = fused.scaled_estimate(xa, xb)
            assert q32.dtype == np.float32
            q = q32.astype(np.float64) / scale
            # FP32 sums of 300 nonnegative terms, in whatever order the BLAS takes for
            # the operands' memory orders
            np.testing.assert_allclose(q, fused.approx_matmul(xa * xa, xb * xb),
                                       rtol=300 * 2.0**-24)
        exact = (xa * xa) @ (xb * xb).T
        assert np.all(np.abs(q / exact - 1) < 2.0**-6)
        q2 = fused.approx_matmul((xa * xa).astype(np.float32), (xb * xb).astype(np.float32))
        assert np.all(np.abs(q2 / exact - 1) < 2.0**-6)


class TestEstimateGEMM:
    """``auto``'s estimate on oneDNN's BF16 GEMM where the CPU has BF16 units, else on
    BLAS SGEMM of float32 squares: the same counts and bits either way."""

    def test_bf16_only_where_the_cpu_has_bf16_units(self, onednn):
        with open("/proc/cpuinfo") as fh:
            flags = set(fh.read().split())
        if not flags & {"avx512_bf16", "amx_bf16"}:
            assert onednn.bf16_gemm is None, onednn.isa

    @pytest.mark.parametrize("order", ["C", "F"])
    def test_squares_f32_kernel(self, rng, onednn, order):
        if onednn.kernels is None:
            pytest.skip(f"no fused kernels here: {onednn.kernels_reason}")
        x = random_matrix(rng, 37, 301, 4.0)
        x[2, 3] = 2.0**-600  # its square scaled: an FP32 subnormal, kept as NumPy does
        x = np.asfortranarray(x) if order == "F" else x
        got, transposed = onednn._squares(x, np.float32)
        got = got.T if transposed else got
        assert got.shape == x.shape and got.dtype == np.float32
        np.testing.assert_array_equal(got, onednn.approx_operand(x * x))

    @pytest.mark.parametrize("method", ["hybrid-ef", "bitmask-ef", "crt-fast"])
    def test_same_counts_and_bits_on_either_gemm(self, rng, onednn, method, monkeypatch):
        if onednn.lib._bf16 is None or onednn.kernels is None:
            pytest.skip("this oneDNN has no BF16 GEMM, or no fused kernels")
        a = random_matrix(rng, 150, 700, 2.0)
        b = random_matrix(rng, 700, 90, 2.0)
        out = []
        for gemm in (lambda e: e.lib.gemm_bf16, lambda e: None):
            monkeypatch.setattr(type(onednn), "bf16_gemm", property(gemm))
            out.append(_run("onednn", a, b, method=method))
        (c1, p1), (c2, p2) = out
        assert p1.slices == p2.slices
        np.testing.assert_array_equal(c1, c2)


#: ``ONEDNN_MAX_CPU_ISA`` values below VNNI: oneDNN's s8s8s32 GEMM saturates there.
BELOW_VNNI = ("SSE41", "AVX", "AVX2", "AVX512_CORE")


def _fallback_name():
    """The engine ``"auto"`` runs where oneDNN cannot: the AVX2 engine where it runs
    here (ozlinalg.engines.select.FALLBACKS), else SGEMM."""
    for name in select.FALLBACKS[:-1]:
        try:
            return select.cpu_engine(name).name
        except EngineUnavailable:
            continue
    return "cpu-sgemm"


class TestSelection:
    """Which engine runs, why, and how to force one."""

    def test_default_engine_follows_the_environment(self):
        """What the CI's engine legs set (README, "Tests"): ``OZLINALG_ENGINE`` picks the
        default engine; ``ONEDNN_MAX_CPU_ISA`` below VNNI makes oneDNN fail its
        exactness self-test, and the default engine is the fallback (the AVX2 engine
        where it runs, else SGEMM) with that reason recorded. Skips where neither
        variable is set."""
        from ozlinalg.engines import _dnnl, get_engine

        env = os.environ.get("OZLINALG_ENGINE", "").strip()
        isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
        eng = get_engine(np)
        if env and select.validate_engine(env) != "auto":
            assert eng.name == f"cpu-{select.validate_engine(env)}"
        elif isa in BELOW_VNNI:
            if _dnnl.load()[0] is None:
                pytest.skip(f"no oneDNN library here: {_dnnl.load()[1]}")
            text = eng.describe()
            assert eng.name == _fallback_name(), text
            assert "failed the INT8 exactness self-test" in text and isa.lower() in text
            with pytest.raises(EngineUnavailable, match="self-test"):
                select.cpu_engine("onednn")
        else:
            pytest.skip("neither OZLINALG_ENGINE nor a pre-VNNI ONEDNN_MAX_CPU_ISA is set")

    def test_default_is_onednn_where_it_passes(self, onednn):
        eng = select.cpu_engine("auto")
        assert eng is onednn
        text = eng.describe()
        assert "oneDNN" in text and "ISA" in text and "self-test passed" in text

    def test_option_forces_either_engine(self, onednn):
        from ozlinalg._options import current_engine as get_engine

        with ozlinalg.options(engine="sgemm"):
            assert get_engine(np).name == "cpu-sgemm"
        with ozlinalg.options(engine="onednn"):
            assert get_engine(np) is onednn

    def test_unknown_engine_name(self):
        with pytest.raises(ValueError, match="unknown engine 'mkl'"):
            ozlinalg.options(engine="mkl")

    def test_profile_names_engine_and_isa(self, rng, onednn):
        a = rng.standard_normal((30, 40))
        _, prof = _run("onednn", a, a.T)
        assert prof.calls[0].engine.startswith("cpu-onednn")
        assert onednn.isa in prof.summary() and "cpu-onednn" in prof.summary()
        _, prof = _run("sgemm", a, a.T)
        assert "cpu-sgemm" in prof.summary()

    def _python(self, code, *args, **env):
        """``python -c code *args`` with only the engine variables given in ``env``
        (the CI's engine legs set some in this process's environment)."""
        full = dict(os.environ, PYTHONPATH=str(ROOT), **env)
        for key in ("OZLINALG_ENGINE", "ONEDNN_MAX_CPU_ISA", "OZLINALG_ONEDNN_LIBRARY"):
            if key not in env:
                full.pop(key, None)
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, env=full, cwd=str(ROOT), timeout=300)

    _WHICH = ("import numpy as np, ozlinalg; from ozlinalg.engines import get_engine; "
              "e = get_engine(np); print(e.name); print(e.describe()); "
              "a = np.arange(12.0).reshape(3, 4); "
              "print(bool((ozlinalg.matmul(a, a.T) == a @ a.T).all()))")

    def test_without_onednn_the_fallback_runs_and_says_why(self):
        r = self._python(self._WHICH, OZLINALG_ONEDNN_LIBRARY="none")
        assert r.returncode == 0, r.stderr
        name, text, ok = r.stdout.split("\n")[:3]
        assert name == _fallback_name() and ok == "True"
        assert "oneDNN engine not used" in text and "disabled" in text

    def test_env_forces_sgemm(self):
        r = self._python(self._WHICH, OZLINALG_ENGINE="sgemm")
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[0] == "cpu-sgemm"

    def test_env_asking_for_missing_onednn_raises_with_the_reason(self):
        r = self._python(self._WHICH, OZLINALG_ENGINE="onednn", OZLINALG_ONEDNN_LIBRARY="none")
        assert r.returncode != 0
        assert "EngineUnavailable" in r.stderr and "disabled" in r.stderr

    @pytest.mark.parametrize("isa", BELOW_VNNI)
    def test_below_vnni_the_self_test_fails_and_the_fallback_runs(self, onednn, isa):
        # oneDNN capped below VNNI computes s8s8s32 with saturating vpmaddubsw: not
        # exact at -128 / 127. The self-test sees it; the fallback engine runs (AVX2
        # where it runs, else SGEMM).
        r = self._python(self._WHICH, ONEDNN_MAX_CPU_ISA=isa)
        assert r.returncode == 0, r.stderr
        name, text, ok = r.stdout.split("\n")[:3]
        assert name == _fallback_name() and ok == "True"
        assert "failed the INT8 exactness self-test" in text and isa.lower() in text

    def test_cli_names_the_engine(self):
        cmd = ("import sys; from ozlinalg.__main__ import main; "
               "main(['compare', '--n', '48', '--methods', 'hybrid-ef', '--repeat', '1', "
               "'--check-rows', '0'] + sys.argv[1:])")
        auto = self._python("import numpy as np; from ozlinalg.engines.select import "
                            "cpu_engine; print(cpu_engine('auto').name)").stdout.strip()
        for env in ({}, {"OZLINALG_ENGINE": "sgemm"}):
            r = self._python(cmd, **env)
            assert r.returncode == 0, r.stderr
            line = next(x for x in r.stdout.splitlines() if x.startswith("engine: "))
            want = "cpu-sgemm" if env else auto
            assert line.startswith(f"engine: {want}")
        r = self._python(cmd, "--json")
        import json

        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["engine"].startswith(auto)

    def test_library_lookup_order(self, monkeypatch, tmp_path):
        from ozlinalg.engines import _dnnl

        monkeypatch.setenv(_dnnl.ENV_LIBRARY, str(tmp_path / "nope.so"))
        with pytest.raises(ValueError, match=r"OZLINALG_ONEDNN_LIBRARY=.*nope\.so.*no such file"):
            _dnnl.find_library()  # a mistyped path is an error, not "oneDNN missing"
        (tmp_path / "lib.so").write_bytes(b"")
        monkeypatch.setenv(_dnnl.ENV_LIBRARY, str(tmp_path / "lib.so"))
        assert _dnnl.find_library() == (str(tmp_path / "lib.so"),
                                        [f"{_dnnl.ENV_LIBRARY}={tmp_path / 'lib.so'}"])
        for off in ("none", "OFF", "0"):
            monkeypatch.setenv(_dnnl.ENV_LIBRARY, off)
            path, tried = _dnnl.find_library()
            assert path is None and "disabled" in tried[0]
        monkeypatch.setenv(_dnnl.ENV_LIBRARY, " ")  # blank: as if unset
        assert _dnnl.find_library()[1][0] == os.path.join(sys.prefix, "lib", "libdnnl.so.3")
        monkeypatch.delenv(_dnnl.ENV_LIBRARY)
        path, tried = _dnnl.find_library()
        assert tried[0] == os.path.join(sys.prefix, "lib", "libdnnl.so.3")

    def test_engine_unavailable_is_raised_not_hidden(self, monkeypatch):
        monkeypatch.setitem(select._CACHE, "onednn", EngineUnavailable("no library"))
        with pytest.raises(EngineUnavailable, match="no library"):
            select.cpu_engine("onednn")
        eng = select.cpu_engine("auto")
        assert eng.name == _fallback_name() and "no library" in eng.describe()

    def test_fallback_keeps_the_reason_it_was_chosen_for(self, monkeypatch):
        # The default engine is cached once handed out; a later "auto" selection
        # under another verdict must not relabel it (it did: the CI's below-VNNI leg
        # then saw "no library" from an earlier test instead of the self-test's reason).
        monkeypatch.setitem(select._CACHE, "onednn", EngineUnavailable("verdict one"))
        first = select.cpu_engine("auto")
        assert select.cpu_engine("auto") is first
        monkeypatch.setitem(select._CACHE, "onednn", EngineUnavailable("verdict two"))
        second = select.cpu_engine("auto")
        assert "verdict one" in first.describe() and "verdict two" not in first.describe()
        assert "verdict two" in second.describe()


class TestStatus:
    """A failed oneDNN call raises: out of memory as MemoryError, any other status as
    RuntimeError naming it (ozlinalg/engines/_dnnl.py)."""

    def test_status_names(self):
        from ozlinalg.engines._dnnl import check_status

        assert check_status(0, "dnnl_gemm_s8s8s32", "m=1") is None
        with pytest.raises(MemoryError, match=r"dnnl_gemm_s8s8s32\(m=3, n=4\).*out of memory"):
            check_status(1, "dnnl_gemm_s8s8s32", "m=3, n=4")
        with pytest.raises(RuntimeError, match="status 2 .invalid arguments"):
            check_status(2, "dnnl_gemm_s8s8s32", "m=3")
        with pytest.raises(RuntimeError, match="status 3 .unimplemented"):
            check_status(3, "dnnl_gemm_bf16bf16f32", "m=3")
        with pytest.raises(RuntimeError, match="status 99 .unknown status"):
            check_status(99, "dnnl_gemm_s8s8s32", "m=3")

    @staticmethod
    def _slices(rng, onednn):
        a = onednn.empty_slices(2, 5, 64, "bitmask", "a")
        b = onednn.empty_slices(2, 3, 64, "bitmask", "b")
        a[...] = rng.integers(-128, 128, a.shape)
        b[...] = rng.integers(-128, 128, b.shape)
        return a, b

    def test_int8_gemm_out_of_memory_is_a_memory_error(self, rng, onednn, monkeypatch):
        a, b = self._slices(rng, onednn)
        monkeypatch.setattr(onednn, "amx", None)  # oneDNN's GEMM, also on AMX CPUs
        monkeypatch.setattr(onednn.lib, "_s8", lambda *args: 1)  # dnnl_out_of_memory
        with pytest.raises(MemoryError, match=r"dnnl_gemm_s8s8s32\(m=5, n=3, k=128.*out of mem"):
            onednn.int_matmul_sum(a, b, [(0, 1), (1, 0)], 128, 128)
        monkeypatch.setattr(onednn.lib, "_s8", lambda *args: 2)  # dnnl_invalid_arguments
        with pytest.raises(RuntimeError, match="status 2 .invalid arguments") as info:
            onednn.int_matmul_sum(a, b, [(0, 1), (1, 0)], 128, 128)
        assert not isinstance(info.value, MemoryError)

    def test_bf16_gemm_out_of_memory_is_a_memory_error(self, rng, onednn, monkeypatch):
        if onednn.lib._bf16 is None:
            pytest.skip("this oneDNN has no dnnl_gemm_bf16bf16f32")
        x = rng.random((6, 40)).astype(np.float32)
        # (where the CPU has no BF16 units the estimates take SGEMM: the binding still)
        monkeypatch.setattr(type(onednn), "bf16_gemm", property(lambda e: e.lib.gemm_bf16))
        monkeypatch.setattr(onednn.lib, "_bf16", lambda *args: 1)
        with pytest.raises(MemoryError, match=r"dnnl_gemm_bf16bf16f32\(m=6, n=6, k=40"):
            onednn.approx_matmul(x, x)
        monkeypatch.setattr(onednn.lib, "_bf16", lambda *args: 3)
        with pytest.raises(RuntimeError, match="status 3 .unimplemented"):
            onednn.approx_matmul(x, x)

    def test_compiled_kernels_raise_memory_error_too(self):
        # the kernels' dispatcher turns OZK_NOMEM into MemoryError (PyErr_NoMemory)
        text = (ROOT / "ozlinalg" / "engines" / "_csrc" / "module.c").read_text()
        assert "if (st == OZK_NOMEM) {\n        PyErr_NoMemory();" in text


class TestSelfTestRetry:
    """Running out of memory (or Ctrl-C) during the one-time self-test is no verdict:
    it propagates, nothing is cached, and the next call creates the engine; only a
    wrong answer is kept (ozlinalg/engines/select.py). On each INT8 engine, as the
    engine ``auto`` takes: oneDNN first, the AVX2 engine as the fallback."""

    @pytest.fixture
    def fresh(self, monkeypatch, int8_engine):
        """A selection state of its own (the process's engines stay as they are) in which
        ``auto`` takes the engine under test (for the AVX2 engine: oneDNN set aside),
        the default engine chosen by ``auto``; (monkeypatch, that initial state)."""
        from ozlinalg.engines import base

        monkeypatch.setattr(select, "_CACHE", {})
        if int8_engine.name == "cpu-avx2":
            select._CACHE["onednn"] = EngineUnavailable("set aside: the AVX2 engine is tested")
            monkeypatch.setattr(select, "FALLBACKS", ("avx2", "sgemm"))
        elif int8_engine.name == "cpu-sgemm":
            select._CACHE["onednn"] = EngineUnavailable("set aside: the SGEMM engine is tested")
            select._CACHE["avx2"] = EngineUnavailable("set aside: the SGEMM engine is tested")
            monkeypatch.setattr(select, "FALLBACKS", ("avx2", "sgemm"))
        monkeypatch.setitem(base._ENGINES, "numpy", select.default_cpu_engine)
        monkeypatch.delenv("OZLINALG_ENGINE", raising=False)
        return monkeypatch, dict(select._CACHE)

    @staticmethod
    def _fail_first_gemm(monkeypatch, cls, exc):
        """The next GEMM of the engine class ``cls`` raises ``exc``; the ones after it run."""
        real = cls._run_gemm
        left = [exc]

        def run_gemm(self, *args):
            if left:
                raise left.pop()
            return real(self, *args)

        monkeypatch.setattr(cls, "_run_gemm", run_gemm)
        return left

    def test_memory_error_is_retried(self, fresh, int8_engine):
        from ozlinalg.engines import get_engine

        monkeypatch, before = fresh
        left = self._fail_first_gemm(monkeypatch, type(int8_engine), MemoryError("simulated"))
        with ozlinalg.options(engine=None):
            with pytest.raises(MemoryError, match="self-test.*nothing was cached.*tries again"):
                get_engine(np)
            assert not left and select._CACHE == before
            eng = get_engine(np)
        assert eng.name == int8_engine.name and "self-test passed" in eng.describe()
        assert select.cpu_engine("auto") is eng

    def test_memory_error_releases_the_scratch_pools(self, fresh, int8_engine):
        from ozlinalg.engines._scratch import MIN_BYTES, ScratchPool

        pool = ScratchPool(1 << 30)
        x = pool.empty((2 * MIN_BYTES,), np.uint8)
        del x
        assert pool.held > 0
        self._fail_first_gemm(fresh[0], type(int8_engine), MemoryError("simulated"))
        with pytest.raises(MemoryError):
            select.cpu_engine(int8_engine.name)
        assert pool.held == 0

    def test_keyboard_interrupt_propagates(self, fresh, int8_engine):
        monkeypatch, before = fresh
        self._fail_first_gemm(monkeypatch, type(int8_engine), KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            select.cpu_engine("auto")
        assert select._CACHE == before
        assert select.cpu_engine("auto").name == int8_engine.name

    def test_self_test_lets_memory_error_through(self, int8_engine, monkeypatch):
        self._fail_first_gemm(monkeypatch, type(int8_engine), MemoryError("simulated"))
        with pytest.raises(MemoryError, match="simulated"):
            self_test(int8_engine)

    def test_a_wrong_answer_is_cached(self, fresh, int8_engine):
        monkeypatch, _ = fresh
        cls, key = type(int8_engine), select.validate_engine(int8_engine.name)
        real = cls._run_gemm
        calls = []

        def wrong(self, la, i, lb, j, k0, k1, out, *rest):
            calls.append(1)
            real(self, la, i, lb, j, k0, k1, out, *rest)
            out[0, 0] += 1  # one entry off by one

        monkeypatch.setattr(cls, "_run_gemm", wrong)
        eng = select.cpu_engine("auto")
        assert "entries wrong" in eng.describe()
        if key == "sgemm":
            # SGEMM on int8 slices failing: the name "sgemm" keeps its float32 engine,
            # whose line says why
            from ozlinalg.engines.sgemm import SGEMMEngine

            named = select.cpu_engine(key)
            for e in (eng, named):
                assert type(e) is SGEMMEngine and "float32 slices" in e.describe()
            seen = len(calls)
            assert select.cpu_engine(key) is named and len(calls) == seen  # kept
            return
        # what "auto" takes next: oneDNN's fallback, or SGEMM after the AVX2 engine
        assert eng.name == (_fallback_name() if key == "onednn" else "cpu-sgemm")
        assert isinstance(select._CACHE[key], EngineUnavailable)
        seen = len(calls)
        with pytest.raises(EngineUnavailable, match="self-test"):
            select.cpu_engine(key)
        assert select.cpu_engine("auto") is eng and len(calls) == seen  # not tested again


class TestLayering:
    """engines/ never imports ozaki/ (ozaki/ imports engines/), and crt/ takes no
    private helper from gemm.py."""

    @staticmethod
    def _imports(path):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                yield ("." * node.level) + (node.module or ""), [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                for a in node.names:
                    yield a.name, []

    def test_engines_do_not_import_ozaki(self):
        files = sorted((ROOT / "ozlinalg" / "engines").rglob("*.py"))
        assert len(files) >= 6
        for f in files:
            for mod, _ in self._imports(f):
                assert "ozaki" not in mod, f"{f.name} imports {mod}"

    def test_crt_takes_nothing_private_from_gemm(self):
        for path in sorted((ROOT / "ozlinalg" / "ozaki" / "crt").glob("*.py")):
            for mod, names in self._imports(path):
                assert mod not in ("..gemm", "ozlinalg.ozaki.gemm"), names
                assert not any(n.startswith("_") for n in names), (path.name, mod, names)
