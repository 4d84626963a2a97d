"""The AVX2 engine (exact INT8 GEMM on ``vpmaddwd``, ozlinalg/engines/avx2.py): its
compiled GEMM against int64 NumPy at the extremes, every layout, edge tile and thread
count; the exactness self-test; the SGEMM engine's results bit for bit; and how it is
selected and named. Everything that needs the engine skips (naming the reason) where
it cannot run (no AVX2, the baseline build, no compiled kernels); the fused passes it
shares with the oneDNN engine are tested on both in tests/engines/test_engine_onednn.py.
"""

import numpy as np
import pytest
from conftest import (
    assert_same_bits_as,
    check_gemm_arguments,
    check_gemm_extremes,
    check_gemm_layouts,
    check_gemm_wraps,
    cpu_engine_or_skip,
    engines_where_they_run,
    float32_sgemm,
    kernel_or_skip,
    matmul_on,
    python_with_engine_env,
)

import ozlinalg
from ozlinalg.engines import kernels, select
from ozlinalg.engines.onednn import EngineUnavailable
from ozlinalg.testing import random_matrix


@pytest.fixture
def avx2():
    return cpu_engine_or_skip("avx2")


@pytest.fixture
def gemm16():
    """The compiled GEMM's module (skips where it is not built or the CPU lacks AVX2)."""
    return kernel_or_skip(kernels.load_gemm, "compiled AVX2 GEMM")


@pytest.fixture(autouse=True)
def driver_path(monkeypatch):
    """The engine's GEMMs in the driver: small products' one-call path is switched off
    (tests/ozaki/test_small.py tests it)."""
    from ozlinalg.engines.avx2 import AVX2Engine

    monkeypatch.setattr(AVX2Engine, "small_product", None)


def _run(engine, a, b, **kw):
    with ozlinalg.options(engine=engine), ozlinalg.profile() as prof:
        c = ozlinalg.matmul(a, b, **kw)
    return c, prof


class TestKernel:
    """``gemm16`` (_csrc/k_gemm16.c) against int64 NumPy."""

    @pytest.mark.parametrize("m, p, k", [(1, 1, 1), (6, 16, 2), (7, 17, 3), (5, 15, 33),
                                         (37, 29, 301), (13, 70, 1025), (130, 3, 2049),
                                         (61, 45, 4100)])
    @pytest.mark.parametrize("layout", ["rows", "cols", "strided", "grouped"])
    @pytest.mark.parametrize("threads", [1, 2])
    def test_shapes_layouts_threads(self, rng, gemm16, m, p, k, layout, threads):
        check_gemm_layouts(gemm16.gemm16, gemm16.set_threads, rng, m, p, k, layout, threads)

    @pytest.mark.parametrize("va, vb", [(-128, -128), (-128, 127), (127, 127), (127, -128)])
    def test_extremes_at_the_longest_inner_dimension(self, gemm16, va, vb):
        check_gemm_extremes(gemm16.gemm16, gemm16.set_threads, va, vb, 7, 17)

    def test_int32_sums_wrap_and_come_back(self, gemm16):
        check_gemm_wraps(gemm16.gemm16, 6, 16, (1 << 17,))

    def test_checks_shapes_and_types(self, gemm16):
        check_gemm_arguments(gemm16.gemm16)

    def test_built_from_x86_64_v3_only(self):
        info = np.zeros(3, np.int64)
        base = kernels._module(1)
        if base is None:
            pytest.skip("compiled kernels not built")
        base.gemm16_info(info)
        assert list(info) == [0, 0, 0]
        with pytest.raises(NotImplementedError, match="gemm16 is not built"):
            base.gemm16(np.zeros((1, 1), np.int8), np.zeros((1, 1), np.int8),
                        np.zeros((1, 1), np.int32), False)
        v3 = kernels._module(3)
        if v3 is not None:
            v3.gemm16_info(info)
            assert list(info) == [1, 6, 16]  # the register tile: 6 x 16 int32 sums


# counts below auto's on purpose (this tests the engines' bits): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestSameBits:
    """The float32 SGEMM engine's bits (and oneDNN's where it runs), every method, on
    this engine as an object: where oneDNN runs, the engine-wide tests take oneDNN
    only, so these are the whole run's check of this engine's results."""

    @pytest.mark.parametrize("method", ["bitmask", "rn", "bitmask-ef", "hybrid-ef", "crt",
                                        "crt-fast"])
    @pytest.mark.parametrize("accuracy", ["dgemm", "faithful"])
    @pytest.mark.parametrize("shape, orders", [((45, 2100, 37), "CF"), ((33, 301, 21), "FF")])
    def test_methods_shapes_orders(self, rng, avx2, method, accuracy, shape, orders):
        assert_same_bits_as(engines_where_they_run("onednn"), avx2, rng, method, accuracy,
                            shape, orders)

    @pytest.mark.parametrize("method, slices", [("hybrid-ef", 7), ("crt", "auto")])
    def test_nonfinite_complex_and_the_smallest_tiles(self, rng, avx2, method, slices):
        from ozlinalg._matmul import memory_plan

        a = random_matrix(rng, 130, 1100, 2.0)
        b = random_matrix(rng, 1100, 120, 2.0)
        smallest = memory_plan(130, 1100, 120, method, slices, None, 1 << 50, avx2).minimum
        bad = a.copy()
        bad[3, 4], bad[7, 0] = np.inf, np.nan
        bad[9, 9] = -np.inf
        ac = bad + 1j * random_matrix(rng, 130, 1100, 2.0)
        with np.errstate(invalid="ignore"):
            for x, limit in ((a, smallest), (bad, None), (ac, None)):
                want, _ = matmul_on(float32_sgemm(), x, b, method=method, slices=slices)
                with ozlinalg.options(memory_limit=limit):
                    got, prof = matmul_on(avx2, x, b, method=method, slices=slices)
                np.testing.assert_array_equal(got, want)
                assert prof.calls[0].engine == avx2.describe()
                assert limit is None or prof.calls[0].engine_calls > 16  # tiled


class TestExactness:
    """Its self-test fails on a wrong GEMM, and the engine is unavailable without its
    compiled GEMM. (Exactness, grouped runs, the int64 spill and the same bits as SGEMM
    are the shared tests of every INT8 engine: tests/engines/test_engine_onednn.py,
    ``int8_engine``, which leaves this engine to :class:`TestSameBits` and the CI's
    AVX2 legs where oneDNN runs: tests/conftest.py, ``avx2_is_redundant``.)"""

    def test_self_test_rejects_a_wrong_gemm(self, avx2, monkeypatch):
        from ozlinalg.engines.avx2 import AVX2Engine

        real = AVX2Engine._run_gemm

        def wrong(self, la, i, lb, j, k0, k1, out, colmajor, beta):
            real(self, la, i, lb, j, k0, k1, out, colmajor, beta)
            out.reshape(-1)[:1] += 1  # one entry off by one

        monkeypatch.setattr(AVX2Engine, "_run_gemm", wrong)
        with pytest.raises(EngineUnavailable, match="failed the INT8 exactness self-test.*"
                                                    "entries wrong"):
            AVX2Engine()

    def test_unavailable_without_the_compiled_gemm(self):
        from ozlinalg.engines.avx2 import AVX2Engine

        with pytest.raises(EngineUnavailable, match="no compiled AVX2 INT8 GEMM: why not"):
            AVX2Engine(gemm=(None, "why not"))


class TestSelection:
    """How the AVX2 engine is chosen, forced and named."""

    def test_option_and_names(self, avx2):
        from ozlinalg._options import current_engine

        for name in ("avx2", "AVX2", "cpu-avx2"):
            with ozlinalg.options(engine=name):
                assert current_engine(np) is avx2
        text = avx2.describe()
        assert text.startswith("cpu-avx2 (exact INT8 GEMM on AVX2 vpmaddwd")
        assert "self-test passed" in text and "x86-64-v" in text

    def test_profile_names_the_engine(self, rng, avx2):
        a = rng.standard_normal((30, 40))
        _, prof = _run("avx2", a, a.T)
        assert prof.calls[0].engine.startswith("cpu-avx2") and "cpu-avx2" in prof.summary()

    def test_tuning_facts(self, avx2):
        facts = avx2.tuning_facts()
        assert facts["engine"] == "cpu-avx2" and facts["isa"] == avx2.isa
        assert facts["gemm"].startswith("x86-64-v") and avx2.int8_peak_ratio() == 4.0

    def test_auto_takes_it_where_onednn_cannot(self, avx2, monkeypatch):
        monkeypatch.setattr(select, "_CACHE", {"onednn": EngineUnavailable("no library")})
        monkeypatch.setattr(select, "FALLBACKS", ("avx2", "sgemm"))
        eng = select.cpu_engine("auto")
        assert eng.name == "cpu-avx2" and eng is not avx2  # an engine of its own
        assert eng.describe().endswith("; oneDNN engine not used: no library)")
        assert select.cpu_engine("auto") is eng
        assert select.cpu_engine("avx2").selection_reason is None  # the named one: none

    def test_auto_says_why_neither_int8_engine_runs(self, monkeypatch):
        monkeypatch.setattr(select, "_CACHE", {"onednn": EngineUnavailable("no library"),
                                               "avx2": EngineUnavailable("no AVX2")})
        monkeypatch.setattr(select, "FALLBACKS", ("avx2", "sgemm"))
        eng = select.cpu_engine("auto")
        assert eng.name == "cpu-sgemm"
        assert ("oneDNN engine not used: no library; AVX2 engine not used: no AVX2"
                in eng.describe())
        with pytest.raises(EngineUnavailable, match="engine 'avx2' was asked for but cannot "
                                                    "run: no AVX2"):
            select.cpu_engine("avx2")

    def test_fallback_keeps_the_reason_it_was_chosen_for(self, avx2, monkeypatch):
        monkeypatch.setattr(select, "FALLBACKS", ("avx2", "sgemm"))
        monkeypatch.setitem(select._CACHE, "onednn", EngineUnavailable("verdict one"))
        first = select.cpu_engine("auto")
        monkeypatch.setitem(select._CACHE, "onednn", EngineUnavailable("verdict two"))
        second = select.cpu_engine("auto")
        assert "verdict one" in first.describe() and "verdict two" not in first.describe()
        assert "verdict two" in second.describe() and second.name == "cpu-avx2"

    _WHICH = ("import numpy as np, ozlinalg; from ozlinalg.engines import get_engine; "
              "e = get_engine(np); print(e.name); print(e.describe()); "
              "a = np.arange(12.0).reshape(3, 4); "
              "print(bool((ozlinalg.matmul(a, a.T) == a @ a.T).all()))")

    def test_env_forces_it(self, avx2):
        r = python_with_engine_env(self._WHICH, OZLINALG_ENGINE="avx2")
        assert r.returncode == 0, r.stderr
        name, text, ok = r.stdout.split("\n")[:3]
        assert name == "cpu-avx2" and ok == "True" and "vpmaddwd" in text

    def test_env_on_the_baseline_build_raises_with_the_reason(self, avx2):
        r = python_with_engine_env(self._WHICH, OZLINALG_ENGINE="avx2",
                                   OZLINALG_KERNELS_ISA="x86-64")
        assert r.returncode != 0
        assert "EngineUnavailable" in r.stderr and "OZLINALG_KERNELS_ISA=x86-64" in r.stderr

    def test_gemm_stays_compiled_without_fused_passes(self, avx2):
        r = python_with_engine_env(self._WHICH, OZLINALG_ENGINE="avx2", OZLINALG_FUSED="0")
        assert r.returncode == 0, r.stderr
        name, text, ok = r.stdout.split("\n")[:3]
        assert name == "cpu-avx2" and ok == "True" and "passes: NumPy: OZLINALG_FUSED=0" in text
