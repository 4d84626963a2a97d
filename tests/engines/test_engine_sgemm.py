"""The SGEMM engine on int8 slices (ozlinalg/engines/sgemm_int8.py): its GEMM (int8
pieces of at most 1024 inner indices converted to float32, SGEMM, added into INT32)
against int64 NumPy at the extremes, every layout, run length and result order; the
exactness self-test; the bits of the AVX2 engine and of the float32 SGEMM engine on
every method; its memory model; and what the name "sgemm" gives with and without the
compiled passes. What it shares with the other INT8 engines (storage, runs, passes) is
tested on each of them (``int8_engine``, ``cpu_engine``); where the AVX2 or oneDNN
engine runs, the whole suite leaves this one out of those and the CI's sgemm and
kernels_baseline legs take it in (tests/conftest.py, ``sgemm_int8_is_redundant``).
Everything that needs the engine skips (naming the reason) where the compiled passes do
not load.
"""

import numpy as np
import pytest
from conftest import (
    assert_same_bits_as,
    cpu_engine_or_skip,
    engines_where_they_run,
    float32_sgemm,
    matmul_on,
    python_with_engine_env,
)

import ozlinalg
from ozlinalg.engines import select
from ozlinalg.engines.onednn import EngineUnavailable
from ozlinalg.engines.onednn.engine import Int8Engine
from ozlinalg.testing import random_matrix


@pytest.fixture
def sgemm8():
    """The engine the name "sgemm" gives, where it is the one on int8 slices."""
    eng = cpu_engine_or_skip("sgemm")
    if not isinstance(eng, Int8Engine):
        pytest.skip(f"the name 'sgemm' gives the float32 engine here: {eng.describe()}")
    return eng


@pytest.fixture(autouse=True)
def driver_path(monkeypatch):
    """The engines' GEMMs in the driver: small products' one-call path is switched off
    (tests/ozaki/test_small.py tests it)."""
    monkeypatch.setattr(Int8Engine, "small_product", None)


def _int64(a, b):
    return a.astype(np.int64) @ b.astype(np.int64).T


def _slices(rng, eng, s, rows, k, layout, operand, values=None):
    x = np.zeros((rows, k)) if layout == "rows" else np.zeros((k, rows)).T
    d = eng.empty_slices_like(x, s, "bitmask", operand)
    d[...] = rng.integers(-128, 128, d.shape) if values is None else rng.choice(
        np.array(values, np.int8), d.shape)
    return d


class TestGemm:
    """``int_matmul_sum`` through the SGEMM pieces against int64 NumPy."""

    @pytest.mark.parametrize("m, p, k", [(1, 1, 1), (7, 5, 3), (33, 17, 300), (13, 70, 1024),
                                         (9, 11, 1025), (40, 3, 2100)])
    @pytest.mark.parametrize("layouts", ["rows", "cols", "mixed"])
    @pytest.mark.parametrize("order", ["C", "F"])
    def test_groups_layouts_orders(self, rng, sgemm8, m, p, k, layouts, order):
        # EF groups are one GEMM over up to 4 stacked slices: inner lengths up to 4k, in
        # pieces of min(k, 1024) accumulated in SGEMM while they add up to 1024
        s = 4
        la, lb = {"rows": ("rows", "rows"), "cols": ("cols", "cols"),
                  "mixed": ("rows", "cols")}[layouts]
        da = _slices(rng, sgemm8, s, m, k, la, "a", [-128, 127, -127, 0, 1])
        db = _slices(rng, sgemm8, s, p, k, lb, "b")
        a64, b64 = da.astype(np.int64), db.astype(np.int64)
        for g in range(s):
            pairs = [(i, g - i) for i in range(g + 1)]
            got, calls = sgemm8.int_matmul_sum(da, db, pairs, 128, 128,
                                               ws=sgemm8.workspace(m, p, order))
            assert calls == 1 and got.dtype == np.int32
            np.testing.assert_array_equal(got, sum(a64[i] @ b64[j].T for i, j in pairs))

    @pytest.mark.parametrize("k", [1024, 1025, 2100, 4099])
    @pytest.mark.parametrize("va, vb", [(-128, -128), (-128, 127), (127, 127)])
    def test_extremes_at_the_piece_bound(self, sgemm8, k, va, vb):
        # 1024 products of (-128)(-128) = 2**24: the largest float32 integer range;
        # one more index and the piece ends
        a = sgemm8.empty_slices(1, 5, k, "bitmask", "a")
        b = sgemm8.empty_slices(1, 6, k, "bitmask", "b")
        a[...] = va
        b[...] = vb
        b[0, 3, ::2] = -vb - 1 if vb < 0 else -vb  # mixed signs in one row
        got, _ = sgemm8.int_matmul_sum(a, b, [(0, 0)], 128, 128)
        np.testing.assert_array_equal(got, _int64(a[0], b[0]))
        assert int(np.abs(got).max()) >= 127 * 127 * k

    def test_runs_accumulate_with_beta(self, rng, sgemm8):
        # claimed bounds force one GEMM per pair: the later ones accumulate (beta = 1)
        a = _slices(rng, sgemm8, 3, 21, 1500, "rows", "a", [-128, 127])
        got, calls = sgemm8.int_matmul_sum(a, a, [(0, 0), (1, 1), (2, 2)], 1 << 10, 1 << 10)
        assert calls == 3
        np.testing.assert_array_equal(got, sum(_int64(a[t], a[t]) for t in range(3)))

    def test_int32_overflow_goes_to_int64(self, sgemm8):
        k = 1 << 16
        a = sgemm8.empty_slices(2, 3, k, "bitmask")
        a[...] = -128
        got, calls = sgemm8.int_matmul_sum(a, a, [(0, 0), (1, 1)], 128, 128)
        assert got.dtype == np.int64 and calls == 2 and int(got[0, 0]) == 2 * k * 128 * 128

    def test_buffers_come_from_the_scratch_pool(self, rng, sgemm8):
        # a GEMM's float32 buffers (result and pieces: 5 MiB here) are leased from the
        # engine's pool: the second product reuses the first one's
        m = p = 512
        a = _slices(rng, sgemm8, 1, m, 1024, "rows", "a")
        b = _slices(rng, sgemm8, 1, p, 1024, "rows", "b")
        sgemm8.int_matmul_sum(a, b, [(0, 0)], 128, 128)
        hits = sgemm8.scratch.hits
        got, _ = sgemm8.int_matmul_sum(a, b, [(0, 0)], 128, 128)
        assert sgemm8.scratch.hits > hits
        np.testing.assert_array_equal(got, _int64(a[0], b[0]))

    def test_passes_leave_the_cores_to_blas(self, sgemm8, monkeypatch):
        # OpenMP's spinning workers would take the cores from the SGEMMs that follow:
        # every compiled pass runs on one thread, however large, and a product with
        # passes large enough to go parallel on the other engines asks for no more
        ker = sgemm8.kernels
        asked = []
        real = ker.set_threads
        monkeypatch.setattr(ker, "set_threads", lambda n: asked.append(n) or real(n),
                            raising=False)
        with monkeypatch.context() as m:
            m.setattr(sgemm8, "threads", 4)  # as on a 4-core machine
            assert sgemm8._k(1 << 26) is ker and asked == [1]
        with ozlinalg.options(engine="sgemm"):
            rng = np.random.default_rng(7)
            ozlinalg.matmul(rng.standard_normal((600, 1800)), rng.standard_normal((1800, 600)),
                            method="crt")
        assert asked and set(asked) == {1}


class TestExactness:
    def test_self_test_passes(self, sgemm8):
        assert "exact on" in sgemm8.self_test and sgemm8.isa in sgemm8.self_test

    def test_self_test_rejects_a_wrong_gemm(self, sgemm8, monkeypatch):
        from ozlinalg.engines.sgemm_int8 import SGEMMInt8Engine

        real = SGEMMInt8Engine._run_gemm

        def wrong(self, la, i, lb, j, k0, k1, out, colmajor, beta):
            real(self, la, i, lb, j, k0, k1, out, colmajor, beta)
            out.reshape(-1)[:1] += 1  # one entry off by one

        monkeypatch.setattr(SGEMMInt8Engine, "_run_gemm", wrong)
        with pytest.raises(EngineUnavailable, match="SGEMM on int8 slices failed the INT8 "
                                                    "exactness self-test.*entries wrong"):
            SGEMMInt8Engine()


METHODS = ["bitmask", "rn", "bitmask-ef", "hybrid-ef", "crt", "crt-fast"]


# counts below auto's on purpose (this tests the engines' bits): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestSameBits:
    """The same bits as the AVX2 engine and the float32 SGEMM engine, every method."""

    @pytest.mark.parametrize("method", METHODS)
    @pytest.mark.parametrize("accuracy", ["dgemm", "faithful"])
    @pytest.mark.parametrize("shape, orders", [((45, 2100, 37), "CF"), ((1, 7, 1), "FC"),
                                               ((33, 301, 21), "FF"), ((5, 1030, 64), "CC")])
    def test_methods_shapes_orders(self, rng, sgemm8, method, accuracy, shape, orders):
        assert_same_bits_as(engines_where_they_run("avx2"), sgemm8, rng, method, accuracy,
                            shape, orders)

    @pytest.mark.parametrize("method", ["hybrid-ef", "bitmask", "rn", "crt"])
    @pytest.mark.parametrize("slices", [7, "auto"])
    def test_nonfinite_and_fixed_counts(self, rng, sgemm8, method, slices):
        a = random_matrix(rng, 30, 2100, 2.0)
        b = random_matrix(rng, 2100, 20, 2.0)
        a[3, 4], a[7, 0] = np.inf, np.nan
        b[5, 6] = -np.inf
        a[9] = 0.0
        if method == "crt" and slices == 7:
            slices = 14
        with np.errstate(invalid="ignore"):
            got, _ = matmul_on(sgemm8, a, b, method=method, slices=slices)
            for other in engines_where_they_run("avx2"):
                want, _ = matmul_on(other, a, b, method=method, slices=slices)
                np.testing.assert_array_equal(got, want, err_msg=other.name)

    @pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
    def test_under_a_memory_limit(self, rng, sgemm8, method):
        a = random_matrix(rng, 260, 1100, 2.0)
        b = random_matrix(rng, 1100, 250, 2.0)
        from ozlinalg._matmul import memory_plan

        want, _ = matmul_on(float32_sgemm(), a, b, method=method)
        _, whole = matmul_on(sgemm8, a, b, method=method)
        # a quarter of the one-tile plan (at least the smallest): tiled on every engine
        one = memory_plan(260, 1100, 250, method, limit=1 << 50, engine=sgemm8)
        limit = max(one.need // 4, one.minimum)
        assert memory_plan(260, 1100, 250, method, limit=limit, engine=sgemm8).tiles != (
            260, 250)
        with ozlinalg.options(memory_limit=limit):
            got, prof = matmul_on(sgemm8, a, b, method=method)
        np.testing.assert_array_equal(got, want)
        assert prof.calls[0].engine_calls > whole.calls[0].engine_calls  # tiled


class TestMemoryModel:
    def test_counts_the_float32_temporaries(self, sgemm8):
        # 4 bytes per tile input entry (the pieces) and per tile output entry (the
        # SGEMM result) on top of what the INT8 engines hold
        avx2_like = Int8Engine.memory_model.fget(sgemm8)
        model = sgemm8.memory_model
        for key in ("input", "output", "product_input", "product_output", "crt_input",
                    "crt_product_input", "crt_output"):
            assert model[key] == avx2_like[key] + 4
        assert model["bounds"] == avx2_like["bounds"] and sgemm8.slice_bytes == 1


class TestSelection:
    """What the name "sgemm" gives, and how it is named."""

    def test_name_gives_it_with_the_passes(self, sgemm8):
        from ozlinalg._options import current_engine

        for name in ("sgemm", "SGEMM", "cpu-sgemm"):
            with ozlinalg.options(engine=name):
                assert current_engine(np) is sgemm8
        text = sgemm8.describe()
        assert text.startswith("cpu-sgemm (INT8 slices on BLAS SGEMM")
        assert "passes: fused (compiled, x86-64" in text and sgemm8.name == "cpu-sgemm"

    def test_tuning_facts_differ_from_the_float32_engine(self, sgemm8):
        facts = sgemm8.tuning_facts()
        assert facts["engine"] == "cpu-sgemm" and facts["isa"] == sgemm8.isa
        assert facts["kernels"].startswith("x86-64") and "blas_threads" in facts
        assert facts != float32_sgemm().tuning_facts()
        assert sgemm8.int8_peak_ratio() == 2.0 and sgemm8.crossovers == {}

    def test_auto_falls_back_to_it_and_says_why(self, sgemm8, monkeypatch):
        monkeypatch.setattr(select, "_CACHE", {"onednn": EngineUnavailable("no library"),
                                               "avx2": EngineUnavailable("no AVX2")})
        monkeypatch.setattr(select, "FALLBACKS", ("avx2", "sgemm"))
        eng = select.cpu_engine("auto")
        assert type(eng) is type(sgemm8) and eng is not sgemm8
        assert eng.describe().endswith(
            "; oneDNN engine not used: no library; AVX2 engine not used: no AVX2)")

    def test_float32_engine_without_the_passes(self, monkeypatch):
        from ozlinalg.engines import kernels
        from ozlinalg.engines.sgemm import SGEMMEngine

        monkeypatch.setattr(select, "_CACHE", {})
        monkeypatch.setitem(kernels._LOADED, "kernels", (None, "OZLINALG_FUSED=0"))
        eng = select.cpu_engine("sgemm")
        assert type(eng) is SGEMMEngine and eng.slice_bytes == 4
        assert eng.describe() == ("cpu-sgemm (BLAS SGEMM on float32 slices, passes: NumPy; "
                                  "no compiled passes: OZLINALG_FUSED=0)")

    _WHICH = ("import numpy as np, ozlinalg; from ozlinalg.engines import get_engine; "
              "e = get_engine(np); print(e.name); print(e.describe()); "
              "print(e.slice_bytes); a = np.arange(12.0).reshape(3, 4); "
              "print(bool((ozlinalg.matmul(a, a.T) == a @ a.T).all()))")

    def test_env_fused_off_gives_the_float32_engine(self, sgemm8):
        r = python_with_engine_env(self._WHICH, OZLINALG_ENGINE="sgemm", OZLINALG_FUSED="0")
        assert r.returncode == 0, r.stderr
        name, text, size, ok = r.stdout.split("\n")[:4]
        assert name == "cpu-sgemm" and size == "4" and ok == "True"
        assert "float32 slices" in text and "no compiled passes: OZLINALG_FUSED=0" in text

    def test_env_on_the_baseline_build(self, sgemm8):
        r = python_with_engine_env(self._WHICH, OZLINALG_ENGINE="sgemm",
                                   OZLINALG_KERNELS_ISA="x86-64")
        assert r.returncode == 0, r.stderr
        name, text, size, ok = r.stdout.split("\n")[:4]
        assert name == "cpu-sgemm" and size == "1" and ok == "True"
        assert "INT8 slices on BLAS SGEMM" in text and "(compiled, x86-64)" in text
