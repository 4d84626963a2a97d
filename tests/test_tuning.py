"""Per-machine tuning (ozlinalg._tuning, python -m ozlinalg tune): the cache, its key
and validation, the model, and how the backend's "performant" strategy uses them.

Every test writes its own cache in a temporary directory (``OZLINALG_CACHE_DIR``) and
fixes the model's probes, so the decisions are the same on every machine.
"""
import inspect
import itertools
import json
import os
import pickle
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
import scipy.linalg

import ozlinalg
from ozlinalg import PerformanceWarning, _tuning
from ozlinalg import numpy_linalg as _numpy_api
from ozlinalg._profile import Route
from ozlinalg.engines.base import CROSSOVER_OPS, Engine, get_engine
from ozlinalg.engines.sgemm import SGEMMEngine
from ozlinalg.tools.tune import _crossover, _has_refine, measure
from ozlinalg.tools.tune import main as tune_main


@pytest.fixture
def engine():
    return get_engine(np)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory, every source of the tuning on, fixed model probes
    (INT8 at 4x DGEMM: the model says never), nothing read or warned yet."""
    monkeypatch.setenv("OZLINALG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("OZLINALG_TUNING", "auto")
    monkeypatch.setattr(_tuning, "_WARNED", [])
    monkeypatch.setattr(_tuning, "_READ", {})
    monkeypatch.setattr(_tuning, "_RATES", {"host": (50e9, 1e-9)})
    monkeypatch.setattr(Engine, "int8_rate", lambda self: 200e9)
    return tmp_path


def entry(crossover, method=None, **kw):
    return {"crossover": crossover, "method": method, "measured": True, "ratios": {},
            "note": "test", **kw}


def write(engine, ops, directory=None):
    return _tuning.store(engine, ops, 1.0, directory)


def _system(rng, n):
    return rng.standard_normal((n, n)) + n * np.eye(n), rng.standard_normal(n)


def _spd(rng, n):
    g = rng.standard_normal((n, n))
    return g @ g.T + n * np.eye(n)


def _one_warning(record):
    got = [w for w in record if issubclass(w.category, PerformanceWarning)]
    assert len(got) == 1, [str(w.message) for w in got]
    return str(got[0].message)


class TestTunedRouting:
    """``backend(strategy="performant")`` emulates from the cache's crossover on, with
    the cache's method, and records where the numbers came from."""

    def test_getrf_crossover_from_the_cache(self, cache, engine, rng):
        path = write(engine, {"getrf": entry(64)})
        a, b = _system(rng, 128)
        small, bs = _system(rng, 48)
        with ozlinalg.backend(strategy="performant"), ozlinalg.profile() as prof:
            with ozlinalg.profile() as p_big:
                x = np.linalg.solve(a, b)
            x_small = np.linalg.solve(small, bs)
        assert p_big.emulated_gemm_calls > 0
        got = {(r.order, r.op, r.emulated, r.reason, r.source) for r in prof.routing}
        assert got == {(128, "getrf", True, "at or above crossover 64", f"cache {path}"),
                       (48, "getrf", False, "below crossover 64", f"cache {path}")}
        np.testing.assert_allclose(a @ x, b, rtol=0, atol=1e-10 * np.abs(b).max() * 128)
        np.testing.assert_array_equal(x_small, np.linalg.solve.__wrapped__(small, bs))
        assert f"[cache {path}]" in prof.summary()

    def test_the_cached_method_runs(self, cache, engine, rng):
        write(engine, {"getrf": entry(64, "crt")})
        a, b = _system(rng, 128)
        with ozlinalg.backend(), ozlinalg.profile() as prof:
            np.linalg.solve(a, b)
        assert set(prof.methods) == {"crt"}
        assert [r.method for r in prof.routing] == ["crt"]
        with ozlinalg.backend(method="hybrid-ef"), ozlinalg.profile() as prof:
            np.linalg.solve(a, b)  # a method the caller names wins
        assert set(prof.methods) == {"hybrid-ef"}
        with ozlinalg.backend(accuracy="faithful"), ozlinalg.profile() as prof:
            np.linalg.solve(a, b)  # measured at DGEMM level: not for faithful calls
        assert "crt" not in prof.methods

    def test_refined_solve_where_it_pays(self, cache, engine, rng, monkeypatch):
        write(engine, {"gesv_refined": entry(64), "posv_refined": entry(64)})
        calls = []
        real_np, real_sp = _numpy_api.solve, ozlinalg.linalg.solve

        def np_solve(a, b, refine=False):
            calls.append(("numpy", refine))
            return real_np(a, b)

        def sp_solve(a, b, assume_a=None, refine=False):
            calls.append(("scipy", assume_a, refine))
            return real_sp(a, b, assume_a=assume_a)

        monkeypatch.setattr(_numpy_api, "solve", np_solve)
        monkeypatch.setattr(ozlinalg.linalg, "solve", sp_solve)
        a, b = _system(rng, 128)
        s = _spd(rng, 128)
        small, bs = _system(rng, 32)
        with ozlinalg.backend(), ozlinalg.profile() as prof:
            np.linalg.solve(a, b)
            scipy.linalg.solve(s, b, assume_a="pos")
            np.linalg.solve(small, bs)  # below: getrf decides (never here)
        assert calls == [("numpy", True), ("scipy", "pos", True)]
        got = {(r.function, r.op, r.emulated, r.refine) for r in prof.routing}
        assert got == {("numpy.linalg.solve", "gesv_refined", True, True),
                       ("scipy.linalg.solve", "posv_refined", True, True),
                       ("numpy.linalg.solve", "getrf", False, False)}
        assert "refine=True" in prof.summary()

    def test_the_refined_solve_runs_under_the_backend(self, cache, engine, rng):
        # end to end: the routed calls run ozlinalg's refined solve itself
        write(engine, {"gesv_refined": entry(64), "posv_refined": entry(64)})
        a, b = _system(rng, 300)
        s = _spd(rng, 300)
        with ozlinalg.backend(), ozlinalg.profile() as prof:
            x = np.linalg.solve(a, b)
            y = scipy.linalg.solve(s, b, assume_a="pos")
        assert len(prof.refined) == 2 and not any(r.fell_back for r in prof.refined)
        np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(y, scipy.linalg.solve(s, b, assume_a="pos"), rtol=1e-8,
                                   atol=1e-10)

    def test_no_refine_keyword_keeps_the_plain_route(self, cache, engine, rng):
        # this tree's solve may lack refine=: the route then never passes it
        from ozlinalg.routing._shims import accepts_refine

        write(engine, {"gesv_refined": entry(64), "getrf": entry(64)})
        a, b = _system(rng, 128)
        with ozlinalg.backend(), ozlinalg.profile() as prof:
            x = np.linalg.solve(a, b)
        expected = "gesv_refined" if accepts_refine(_numpy_api.solve) else "getrf"
        assert [(r.op, r.emulated) for r in prof.routing] == [(expected, True)]
        assert np.all(np.isfinite(x))

    def test_eager_never_refines(self, cache, engine, rng, monkeypatch):
        write(engine, {"gesv_refined": entry(2)})
        seen = []
        real = _numpy_api.solve
        monkeypatch.setattr(_numpy_api, "solve",
                            lambda a, b, refine=False: seen.append(refine) or real(a, b))
        a, b = _system(rng, 32)
        with ozlinalg.backend(strategy="eager"), ozlinalg.profile() as prof:
            np.linalg.solve(a, b)
        assert seen == [False] and [r.source for r in prof.routing] == ["eager"]

    def test_unmeasured_ops_fall_back(self, cache, engine):
        write(engine, {"gesv_refined": {"crossover": None, "method": None, "measured": False,
                                        "ratios": {}, "note": "not measured"}})
        assert engine.tuned("gesv_refined").source.startswith("model")

    def test_tuning_off_reads_no_cache(self, cache, engine, monkeypatch):
        write(engine, {"getrf": entry(64)})
        monkeypatch.setenv("OZLINALG_TUNING", "off")
        assert engine.tuned("getrf") == (None, None, "none")
        monkeypatch.setenv("OZLINALG_TUNING", "bogus")
        with pytest.raises(ValueError, match="OZLINALG_TUNING"):
            engine.tuned("getrf")


class TestValidation:
    """A file that cannot be used is ignored with one warning per process; the model
    (here: never) answers. Nothing in it is ever executed or unpickled."""

    @staticmethod
    def _payload(engine, **changes):
        data = {"schema": 1, "key": _tuning.key_for(engine), "created": "x",
                "elapsed_s": 1.0, "ops": {"getrf": entry(64)}}
        data.update(changes)
        return data

    def _check_ignored(self, engine, text, kind):
        path = _tuning.cache_path(engine)
        with open(path, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            first = engine.tuned("getrf")
            second = engine.tuned("potrf")
            with ozlinalg.backend(), ozlinalg.profile() as prof:
                np.linalg.solve(np.eye(128) * 2, np.ones(128))
        msg = _one_warning(record)
        assert kind in msg and path in msg
        for t in (first, second):
            assert t.order is None and t.source.startswith("model (int8 0.20 TOPS")
        assert prof.routed_native == 1

    @pytest.mark.parametrize("name, make", [
        ("not JSON", lambda e: "{not json"),
        ("empty", lambda e: ""),
        ("binary", lambda e: bytes(range(256))),
        ("a list", lambda e: "[1, 2]"),
        ("crossover as text", lambda e: json.dumps(
            TestValidation._payload(e, ops={"getrf": entry("64")}))),
        ("crossover a bool", lambda e: json.dumps(
            TestValidation._payload(e, ops={"getrf": entry(True)}))),
        ("negative crossover", lambda e: json.dumps(
            TestValidation._payload(e, ops={"getrf": entry(-1)}))),
        ("huge crossover", lambda e: json.dumps(
            TestValidation._payload(e, ops={"getrf": entry(1 << 40)}))),
        ("unknown op", lambda e: json.dumps(
            TestValidation._payload(e, ops={"svd": entry(64)}))),
        ("unknown method", lambda e: json.dumps(
            TestValidation._payload(e, ops={"getrf": entry(64, "os.system")}))),
        ("ratio NaN", lambda e: json.dumps(TestValidation._payload(
            e, ops={"getrf": entry(64, ratios={"256": {"crt": float("nan")}})}))),
        ("ops a list", lambda e: json.dumps(TestValidation._payload(e, ops=[]))),
        ("extra field", lambda e: json.dumps(TestValidation._payload(e, code="1"))),
    ])
    def test_corrupt(self, cache, engine, name, make):
        self._check_ignored(engine, make(engine), "corrupt")

    def test_foreign_key(self, cache, engine):
        key = json.loads(json.dumps(_tuning.key_for(engine)))
        key["machine"]["cpu"] = "another CPU"
        self._check_ignored(engine, json.dumps(self._payload(engine, key=key)), "foreign")

    @pytest.mark.parametrize("lib", ["numpy", "ozlinalg"])
    def test_stale_versions(self, cache, engine, lib):
        key = json.loads(json.dumps(_tuning.key_for(engine)))
        key["versions"][lib] = "0.0.1"
        self._check_ignored(engine, json.dumps(self._payload(engine, key=key)), "stale")

    def test_other_schema_is_stale(self, cache, engine):
        self._check_ignored(engine, json.dumps(self._payload(engine, schema=2)), "stale")

    def test_python_code_and_pickle_are_never_run(self, cache, engine, tmp_path):
        marker = tmp_path / "ran"
        code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"

        class Evil:
            def __reduce__(self):
                return (eval, (code,))

        self._check_ignored(engine, code, "corrupt")
        assert not marker.exists()
        _tuning._WARNED.clear()
        _tuning._READ.clear()
        self._check_ignored(engine, pickle.dumps(Evil()), "corrupt")
        assert not marker.exists()

    def test_one_warning_per_process(self, cache, engine):
        with open(_tuning.cache_path(engine), "w") as f:
            f.write("{")
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            engine.tuned("getrf")
            with open(_tuning.cache_path(engine), "w") as f:
                f.write("[[")  # changed: read again, still bad, no second warning
            engine.tuned("getrf")
            _tuning.load(SGEMMEngine(), str(cache))  # no file of its own: no warning
        _one_warning(record)

    def test_a_good_file_round_trips(self, cache, engine):
        ops = {"matmul": entry(2048, "crt", ratios={"1024": {"crt": 1.3, "hybrid-ef": 2.0}}),
               "potrf": entry(None)}
        path = write(engine, ops)
        data, got_path = _tuning.load(engine)
        assert got_path == path and data["ops"] == ops
        assert engine.tuned("matmul") == (2048, "crt", f"cache {path}")
        assert engine.tuned("potrf") == (None, None, f"cache {path}")
        assert [f for f in os.listdir(cache) if f.startswith(".tuning-")] == []

    def test_writes_are_atomic(self, cache, engine, monkeypatch):
        path = write(engine, {"getrf": entry(64)})

        def broken(*args, **kwargs):
            raise OSError("disk full")

        with monkeypatch.context() as m:
            m.setattr(json, "dump", broken)
            with pytest.raises(OSError, match="disk full"):
                write(engine, {"getrf": entry(128)})
        assert json.load(open(path))["ops"]["getrf"]["crossover"] == 64
        assert sorted(os.listdir(cache)) == [os.path.basename(path)]

    def test_store_rejects_what_would_not_validate(self, cache, engine):
        with pytest.raises(_tuning.CacheError):
            write(engine, {"getrf": entry(0)})

    def test_missing_or_unwritable_directory(self, cache, engine, monkeypatch, rng):
        blocker = cache / "a-file"
        blocker.write_text("")
        monkeypatch.setenv("OZLINALG_CACHE_DIR", str(blocker / "sub"))  # never a directory
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert engine.tuned("getrf").source.startswith("model")
            with ozlinalg.backend(), ozlinalg.profile() as prof:
                np.linalg.solve(*_system(rng, 64))
        assert prof.routed_native == 1
        with pytest.raises(OSError):
            write(engine, {"getrf": entry(64)})


class TestKey:
    def test_key_names_the_machine_and_the_versions(self, engine):
        key = _tuning.key_for(engine)
        machine, versions = key["machine"], key["versions"]
        assert machine["engine"] == engine.name and machine["threads"] == engine.threads
        assert isinstance(machine["cpu"], str) and isinstance(machine["isa_flags"], list)
        assert set(machine["isa_flags"]) <= set(_tuning.ISA_FLAGS)
        assert versions["numpy"] == np.__version__
        assert versions["ozlinalg"] == ozlinalg.__version__
        assert versions["scipy"] == scipy.__version__
        if engine.name == "cpu-onednn":
            assert versions["onednn"] == engine.version and machine["isa"] == engine.isa

    def test_the_file_name_follows_the_machine_part(self, engine, tmp_path):
        path = _tuning.cache_path(engine, str(tmp_path))
        assert os.path.dirname(path) == str(tmp_path)
        assert os.path.basename(path).startswith(f"tuning-{engine.name}-")
        assert path != _tuning.cache_path(SGEMMEngine(threads=7), str(tmp_path))

    def test_cache_dir(self, monkeypatch, tmp_path):
        monkeypatch.setenv("OZLINALG_CACHE_DIR", str(tmp_path / "x"))
        assert _tuning.cache_dir() == str(tmp_path / "x")
        monkeypatch.delenv("OZLINALG_CACHE_DIR")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        monkeypatch.setitem(sys.modules, "platformdirs", None)  # not installed
        assert _tuning.cache_dir() == str(tmp_path / "ozlinalg")


class TestModel:
    """The conservative model: INT8 GEMMs per method times the INT8 time, passes, panels."""

    def test_never_at_this_class_of_rates(self):
        for ratio in (2, 8, 16):  # SGEMM, AVX2, VNNI: INT8 at most 16x DGEMM
            for op in ("matmul", "getrf", "potrf", "geqrf", "syevd", "gesdd"):
                assert _tuning.model_crossover(op, ratio * 50e9, 50e9, 1e-9,
                                               block=512) == (None, None)

    def test_pays_at_amx_rates(self):
        order, method = _tuning.model_crossover("matmul", 64 * 50e9, 50e9, 1e-9)
        assert method == "crt" and _tuning.MODEL_MIN_ORDER <= order <= 8192
        faster = _tuning.model_crossover("matmul", 256 * 50e9, 50e9, 1e-9)
        assert faster[0] <= order
        ratio = _tuning.model_ratio("matmul", order, 64 * 50e9, 50e9, 1e-9, method)
        assert ratio * _tuning.MODEL_MARGIN < 1

    def test_spectral_ops_cost_their_products_against_lapack(self):
        """eigh / svd: a single-precision start plus the refinement's n^3 products at the
        emulated GEMM's ratio, against dsyevd's / dgesdd's flops at the DGEMM rate: never
        even at AMX rates (64x), where the GEMM alone pays."""
        rates = (64 * 50e9, 50e9, 1e-9)
        assert _tuning.model_crossover("matmul", *rates)[0] is not None
        for op in _tuning.SPECTRAL_OPS:
            assert _tuning.model_crossover(op, *rates) == (None, None)
            products, flops, start = _tuning.SPECTRAL_MODEL[op]
            gemm = _tuning.model_ratio("matmul", 4096, *rates, "crt")
            r = _tuning.model_spectral_ratio(op, 4096, *rates, "crt")
            assert r == pytest.approx(start + products * 2 / flops * gemm) and r > start
        order, _ = _tuning.model_crossover("gesdd", 4096 * 50e9, 50e9, 1e-12)
        assert order is not None and order >= _tuning.MODEL_MIN_ORDER  # rates it never sees

    def test_no_model_for_the_refined_solves_nor_without_a_rate(self):
        for op in _tuning.REFINED_OPS:
            assert _tuning.model_crossover(op, 1e15, 1e9, 1e-12) == (None, None)
        assert _tuning.model_crossover("matmul", None, 1e9, 1e-12) == (None, None)

    def test_the_source_names_the_rates(self, cache, engine):
        # the cache fixture's probes: INT8 200 GOPS, DGEMM 50 GFLOPS (4x); the source
        # names the probed rates, and the cap where this engine's ISA peak is below 4x
        # (the SGEMM engine's 2x; oneDNN's 8x and more leave the probe as it is)
        cap = engine.int8_peak_ratio()
        capped = f", capped at the ISA's {cap:g}x" if cap is not None and cap < 4 else ""
        t = engine.tuned("matmul")
        assert t.order is None
        assert t.source == f"model (int8 0.20 TOPS, dgemm 50.0 GFLOPS{capped})"

    def test_a_probe_past_the_isa_peak_is_capped(self, cache, monkeypatch):
        eng = SGEMMEngine()
        monkeypatch.setattr(SGEMMEngine, "int8_rate", lambda self: 1e15)
        t = eng.tuned("matmul")
        assert t.order is None and "capped at the ISA's 2x" in t.source

    def test_device_engines_get_no_model(self, cache, monkeypatch):
        eng = SGEMMEngine()
        monkeypatch.setattr(eng, "device", "gpu")
        assert eng.tuned("matmul") == (None, None, "none (no model for gpu engines)")

    def test_engine_constants_before_the_model(self, cache):
        eng = SGEMMEngine()
        eng.crossovers = {"potrf": 300}
        assert eng.tuned("potrf") == (300, None, "engine constants")
        assert Engine().tuned("potrf").order is None

    def test_probes_are_real_and_taken_once(self, monkeypatch):
        monkeypatch.setattr(_tuning, "_RATES", {})
        got = []
        threads = [threading.Thread(target=lambda: got.append(_tuning.host_rates()))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 4 and all(g is got[0] for g in got)
        dgemm, pass_s = got[0]
        assert dgemm > 0 and pass_s > 0
        eng = SGEMMEngine()
        rate = eng.int8_rate()
        assert rate > 0 and eng.int8_rate() == rate

    def test_the_dgemm_probe_runs_at_the_models_orders(self, monkeypatch):
        # the model applies the probed DGEMM rate from MODEL_MIN_ORDER on; a smaller
        # probe measured per-call costs (a third of the rate `compare` prints at its
        # default n on a shared 2-core machine): probe there, at compare's n
        from ozlinalg.__main__ import _parser

        n = inspect.signature(_tuning.host_rates).parameters["n"].default
        assert n == _tuning.MODEL_MIN_ORDER == min(
            o for o in _tuning.MODEL_ORDERS if o >= _tuning.MODEL_MIN_ORDER)
        assert _parser()[1]["compare"].get_default("n") == n
        shapes = []
        real = np.random.default_rng

        class Rng:
            def __init__(self, *a):
                self.rng = real(*a)

            def standard_normal(self, shape):
                shapes.append(shape)
                return self.rng.standard_normal(shape)

        monkeypatch.setattr(_tuning, "_RATES", {})
        monkeypatch.setattr(np.random, "default_rng", Rng)
        dgemm, pass_s = _tuning.host_rates()
        assert shapes == [(n, n)] and dgemm > 0 and pass_s > 0

    def test_nothing_is_probed_at_import(self):
        code = ("import ozlinalg, numpy as np\n"
                "from ozlinalg import _tuning\n"
                "from ozlinalg.engines.base import get_engine\n"
                "assert _tuning._RATES == {}, _tuning._RATES\n"
                "assert '_int8_rate' not in get_engine(np).__dict__\n")
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


class TestRoute:
    def test_old_fields_still_build_a_route(self):
        r = Route("numpy.linalg.solve", "getrf", 8, "cpu-sgemm", False, "below min_size 9")
        assert (r.source, r.method, r.refine) == ("", "", False)
        assert r[:6] == ("numpy.linalg.solve", "getrf", 8, "cpu-sgemm", False,
                         "below min_size 9")

    def test_crossover_ops(self):
        assert set(CROSSOVER_OPS) == {"matmul", "getrf", "potrf", "geqrf", "gesv_refined",
                                      "posv_refined", "syevd", "gesdd"}

    def test_explicit_options_are_remembered(self):
        with ozlinalg.options(method="crt"):
            with ozlinalg.options(slices=9):
                assert {"method", "slices"} <= ozlinalg.get_options()._explicit
        assert "method" not in ozlinalg.get_options()._explicit


class TestCrossoverFromRatios:
    def test_interpolated_between_the_sizes_that_lose_and_win(self):
        cross, extrapolated, note = _crossover({256: 2.0, 512: 1.2, 1024: 0.8}, 4096)
        assert 512 < cross <= 1024 and not extrapolated and "interpolated" in note

    def test_extrapolated_up_to_max_n(self):
        cross, extrapolated, _ = _crossover({512: 1.5, 1024: 1.2}, 4096)
        assert extrapolated and 1024 < cross <= 4096
        assert _crossover({512: 1.5, 1024: 1.2}, 1024)[0] is None  # nothing beyond max_n

    def test_never(self):
        assert _crossover({256: 3.0, 512: 4.0}, 4096)[0] is None
        assert _crossover({256: 100.0, 512: 29.0}, 4096)[0] is None  # far from 1: no trend
        assert _crossover({256: 0.5}, 4096)[0] == 256


class TestTuneCommand:
    """``python -m ozlinalg tune`` on tiny sizes (the numbers are not judged)."""

    def test_writes_a_valid_cache(self, cache, engine, capsys):
        assert tune_main(["--quick", "--max-n", "48", "--budget", "5", "--json",
                          "--cache-dir", str(cache)]) == 0
        out = capsys.readouterr()
        printed = json.loads(out.out)
        assert set(printed["ops"]) == set(_tuning.TUNED_OPS)
        assert "cache written" in out.err and "matmul" in out.err
        data, path = _tuning.load(engine, str(cache))
        assert data is not None and data["ops"] == printed["ops"]
        for op in ("matmul", "getrf", "potrf", "geqrf", "syevd", "gesdd"):
            e = data["ops"][op]
            assert e["measured"] and set(e["ratios"]) == {"48"}
            assert set(e["ratios"]["48"]) <= set(_tuning.TUNABLE_METHODS)
        if not _has_refine():
            assert data["ops"]["gesv_refined"]["note"].startswith("not measured")

    def test_spectral_ops_need_the_scipy_functions(self, cache, monkeypatch):
        import ozlinalg.linalg as ol

        monkeypatch.delattr(ol, "svd", raising=False)
        ops = measure_ops(["syevd", "gesdd"])
        assert ops["gesdd"] == {"crossover": None, "method": None, "measured": False,
                                "ratios": {}, "note": "not measured: ozlinalg.linalg has no "
                                                      "svd here"}
        assert ops["syevd"]["measured"] and set(ops["syevd"]["ratios"]) == {"24"}

    def test_a_first_size_beyond_the_budget_is_skipped(self, cache, monkeypatch):
        """The first order is predicted from the warm-up's timed round (n^3): one that
        would not fit what is left of the whole budget is not run (never, no ratios)."""
        import ozlinalg.tools.tune as tune_mod

        clock = itertools.count(0, 100)  # every reading 100 s after the last
        monkeypatch.setattr(tune_mod.time, "perf_counter", lambda: next(clock))
        lines = []
        ops = tune_mod.measure(get_engine(np), sizes=(256,), max_n=256, budget_s=1000,
                               ops=["syevd"], log=lines.append)
        e = ops["syevd"]
        assert e["crossover"] is None and e["ratios"] == {} and e["measured"]
        assert e["note"].startswith("no size ran: n = 256 would take about")
        assert any("skipped" in line for line in lines)

    def test_dry_run_and_unwritable(self, cache, capsys):
        assert tune_main(["--quick", "--max-n", "32", "--budget", "3", "--dry-run",
                          "--cache-dir", str(cache)]) == 0
        assert os.listdir(cache) == [] and "--dry-run: not written" in capsys.readouterr().out
        blocker = cache / "f"
        blocker.write_text("")
        assert tune_main(["--quick", "--max-n", "32", "--budget", "3",
                          "--cache-dir", str(blocker / "sub")]) == 1
        assert "cannot write the cache" in capsys.readouterr().out

    def test_show(self, cache, engine, capsys):
        path = write(engine, {"getrf": entry(64, "crt")})
        assert tune_main(["--show"]) == 0
        out = capsys.readouterr().out
        assert f"getrf                 64       crt  cache {path}" in out
        assert "matmul             never         -  model (int8 0.20 TOPS" in out
        assert tune_main(["--show", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["ops"]
        assert rows["getrf"] == {"order": 64, "method": "crt", "source": f"cache {path}"}

    def test_cli_entry(self):
        from ozlinalg.__main__ import main

        with pytest.raises(SystemExit) as exc:
            main(["tune", "--help"])
        assert exc.value.code == 0


def measure_ops(ops, n=24):
    return measure(get_engine(np), sizes=(n,), max_n=n, budget_s=5, ops=ops,
                   log=lambda line: None)
