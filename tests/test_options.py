"""Every option and every ``OZLINALG_*`` variable is checked where it is set or read,
with a TypeError / ValueError naming it and the value (ozlinalg/_options.py,
ozlinalg/_env.py); a bad engine variable never demotes the engine."""
import dataclasses
import warnings

import numpy as np
import pytest
import scipy.linalg as sla

import ozlinalg
from ozlinalg import _env, _options
from ozlinalg.engines import _dnnl, _scratch, kernels, select
from ozlinalg.engines.avx2 import AVX2Engine
from ozlinalg.engines.onednn import ENV_FUSED, OneDNNEngine
from ozlinalg.testing import ExactReference

#: (option, bad value, exception): at least one wrong type and one bad value each.
BAD = [
    ("method", "ozimmu-x", ValueError), ("method", 3, TypeError),
    ("slices", 0, ValueError), ("slices", 65, ValueError), ("slices", "many", ValueError),
    ("slices", 2.0, TypeError), ("slices", None, TypeError),
    ("min_size", -1, ValueError), ("min_size", 2.5, TypeError), ("min_size", "8", TypeError),
    ("min_size", True, TypeError),
    ("min_order", -1, ValueError), ("min_order", 2.5, TypeError), ("min_order", "8", TypeError),
    ("min_order", True, TypeError),
    ("count_check", "yes", TypeError), ("count_check", 1, TypeError),
    ("count_check", None, TypeError),
    ("max_slices", 0, ValueError), ("max_slices", -3, ValueError),
    ("max_slices", 65, ValueError), ("max_slices", "x", TypeError),
    ("max_slices", None, TypeError), ("max_slices", 4.0, TypeError),
    ("max_slices", True, TypeError),
    ("memory_limit", 0, ValueError), ("memory_limit", -1, ValueError),
    ("memory_limit", 1.5, ValueError), ("memory_limit", "2GiB", ValueError),
    ("memory_limit", True, ValueError),
    ("complex_scheme", "5m", ValueError), ("complex_scheme", "4M", ValueError),
    ("complex_scheme", 4, ValueError), ("complex_scheme", None, ValueError),
    ("balance", "yes", ValueError), ("balance", 1, ValueError), ("balance", None, ValueError),
    ("strategy", "lazy", ValueError), ("strategy", None, ValueError),
    ("engine", "mkl", ValueError), ("engine", 3, ValueError),
    ("accuracy", "exact", ValueError), ("accuracy", None, ValueError),
    ("native_order", -1, ValueError), ("native_order", 1.5, TypeError),
    ("native_order", "16", TypeError), ("native_order", True, TypeError),
]


def test_every_option_has_a_check():
    fields = {f.name for f in dataclasses.fields(ozlinalg.Options)}
    assert set(_options._CHECKS) == fields
    assert {name for name, _, _ in BAD} == fields


@pytest.mark.parametrize(("name", "value", "exc"), BAD)
def test_bad_values_are_rejected_where_they_are_set(name, value, exc):
    for setter in (ozlinalg.options, ozlinalg.backend):
        with pytest.raises(exc) as info:
            setter(**{name: value})
        msg = str(info.value)
        assert name in msg and repr(value) in msg, msg
    assert ozlinalg.get_options() == ozlinalg.Options()


def test_install_rejects_before_anything_changes():
    ozlinalg.uninstall()  # earlier backend() blocks leave their shims installed
    with pytest.raises(ValueError, match="max_slices"):
        ozlinalg.install(max_slices=0)
    with pytest.raises(ValueError, match="complex_scheme"):
        ozlinalg.install(complex_scheme="x")
    assert not ozlinalg.backend.active() and ozlinalg.backend.installed() == []
    assert ozlinalg.get_options() == ozlinalg.Options()


def test_good_values_become_canonical():
    with ozlinalg.options(max_slices=np.int64(5), memory_limit=np.int32(1 << 20),
                          min_size=np.int16(3), method="ozimmu_h", engine="SGEMM",
                          complex_scheme="3m") as o:
        assert (o.max_slices, o.memory_limit, o.min_size) == (5, 1 << 20, 3)
        assert all(type(v) is int for v in (o.max_slices, o.memory_limit, o.min_size))
        assert (o.method, o.engine, o.complex_scheme) == ("hybrid-ef", "sgemm", "3m")


@pytest.mark.parametrize("max_slices", [1, _options.MAX_SLICES_LIMIT])
@pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
def test_max_slices_at_its_limits(rng, method, max_slices):
    # One slice (modulus) serves no entry of these operands: all run natively. The
    # largest limit is that of slices (crt: 32 moduli), and the count stays below it.
    a = rng.standard_normal((20, 30))
    with ozlinalg.options(method=method, max_slices=max_slices), ozlinalg.profile() as prof:
        c = ozlinalg.matmul(a, a.T)
    if max_slices == 1:
        assert prof.slices == [0] and prof.native_flops == 2 * 20 * 30 * 20
    else:
        assert prof.native_flops == 0 and 1 < prof.slices[0] <= (32 if method == "crt" else 64)
    # Either way within the FP64 dot-product bound gamma_n |a| |a^T| of the exact product
    n, u = a.shape[1], 2.0**-53
    err = np.abs(c - ExactReference(a, a.T).rounded())
    assert (err <= (n * u / (1 - n * u)) * (np.abs(a) @ np.abs(a.T)) + u * np.abs(c)).all()


class TestEnvHelpers:
    @pytest.mark.parametrize("text", ["", "  ", None])
    def test_unset_or_blank_is_the_default(self, text):
        env = {} if text is None else {"V": text}
        assert _env.env_text("V", env) is None
        assert _env.env_flag("V", True, env) is True
        assert _env.env_bytes("V", env) is None

    @pytest.mark.parametrize(("text", "want"), [("1", True), (" ON ", True), ("yes", True),
                                                ("False", False), ("0", False), ("no", False)])
    def test_flag(self, text, want):
        assert _env.env_flag("V", not want, {"V": text}) is want

    @pytest.mark.parametrize("text", ["2", "maybe", "disabled"])
    def test_bad_flag(self, text):
        with pytest.raises(ValueError, match=f"V={text!r} is not valid"):
            _env.env_flag("V", True, {"V": text})

    @pytest.mark.parametrize(("text", "want"), [("0", 0), ("268435456", 1 << 28),
                                                ("1e9", 10**9), (" 2.5e8 ", 250_000_000)])
    def test_bytes(self, text, want):
        assert _env.env_bytes("V", {"V": text}) == want

    @pytest.mark.parametrize("text", ["abc", "inf", "-inf", "nan", "-1", "1.5", "2GiB", "1e400"])
    def test_bad_bytes(self, text):
        with pytest.raises(ValueError, match=f"V={text!r} is not valid: expected a"):
            _env.env_bytes("V", {"V": text})


@pytest.fixture
def fresh_engines(monkeypatch):
    """Engines created anew (the selection's cache emptied for this test only)."""
    monkeypatch.setattr(select, "_CACHE", {})
    for var in (select.ENV_ENGINE, _scratch.ENV_SCRATCH, ENV_FUSED, kernels.ENV_ISA,
                _dnnl.ENV_LIBRARY):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


class TestEngineVariables:
    """A bad engine variable raises, naming it, whichever engine is asked for; it
    never makes ``"auto"`` fall back to SGEMM as a failed self-test would."""

    CASES = [(_scratch.ENV_SCRATCH, "abc"), (_scratch.ENV_SCRATCH, "inf"),
             (_scratch.ENV_SCRATCH, "-1"), (ENV_FUSED, "maybe"), (kernels.ENV_ISA, "avx9"),
             (_dnnl.ENV_LIBRARY, "/no/such/libdnnl.so.3"), (select.ENV_ENGINE, "mkl")]

    @pytest.mark.parametrize(("var", "text"), CASES)
    @pytest.mark.parametrize("name", ["auto", "sgemm", "onednn", "avx2"])
    def test_raises_whichever_engine(self, fresh_engines, var, text, name):
        fresh_engines.setenv(var, text)
        with pytest.raises(ValueError, match=f"{var}={text!r}"):
            select.cpu_engine(name)
        with pytest.raises(ValueError, match=f"{var}={text!r}"):
            select.check_environment()
        assert select._CACHE == {}  # nothing was created, nothing demoted

    def test_default_engine_reads_ozlinalg_engine(self, fresh_engines):
        fresh_engines.setenv(select.ENV_ENGINE, " SGEMM ")
        assert select.default_cpu_engine().name == "cpu-sgemm"
        fresh_engines.setenv(select.ENV_ENGINE, "fast")
        with pytest.raises(ValueError, match="OZLINALG_ENGINE='fast' is not valid"):
            select.default_cpu_engine()

    @pytest.mark.parametrize("cls", [OneDNNEngine, AVX2Engine])
    def test_bad_scratch_cache_is_not_a_failed_self_test(self, fresh_engines, cls):
        # raised by the Int8Engine's pool before the library, the GEMM and the
        # self-test: runs whether or not the engine could run here
        fresh_engines.setenv(_scratch.ENV_SCRATCH, "inf")
        with pytest.raises(ValueError, match="OZLINALG_SCRATCH_CACHE='inf'"):
            cls()

    def test_scratch_cache_reaches_the_engine(self, int8_engine, fresh_engines):
        fresh_engines.setenv(_scratch.ENV_SCRATCH, "0")
        assert type(int8_engine)().scratch.limit == 0


class TestMinOrder:
    """``min_size`` (products) and ``min_order`` (calls on matrices) are two options."""

    def test_min_order_defaults_to_min_size(self):
        assert ozlinalg.Options(min_size=5).call_min_order == 5
        assert ozlinalg.Options(min_size=5, min_order=0).call_min_order == 0
        assert ozlinalg.Options(min_size=0, min_order=7).call_min_order == 7

    def test_a_call_above_min_order_emulates_every_product(self):
        rng = np.random.default_rng(3)
        a = rng.standard_normal((40, 40)) + 40 * np.eye(40)
        with ozlinalg.options(min_size=10**6, min_order=0), ozlinalg.profile() as prof:
            ozlinalg.linalg.lu_factor(a)
        assert prof.emulated_gemm_calls > 0  # the products inside are far below min_size
        with ozlinalg.options(min_size=10**6, min_order=0), ozlinalg.profile() as prof:
            ozlinalg.matmul(a, a)
        assert prof.emulated_gemm_calls == 0  # a product by name below min_size: native

    def test_a_call_below_min_order_runs_natively(self):
        rng = np.random.default_rng(4)
        a = rng.standard_normal((40, 40)) + 40 * np.eye(40)
        with ozlinalg.options(min_size=0, min_order=41), ozlinalg.profile() as prof:
            lu, piv = ozlinalg.linalg.lu_factor(a)
        assert prof.emulated_gemm_calls == 0
        ref_lu, ref_piv = sla.lu_factor(a)
        assert np.array_equal(piv, ref_piv) and np.array_equal(lu, ref_lu)
        with ozlinalg.options(min_size=0, min_order=41), ozlinalg.profile() as prof:
            ozlinalg.matmul(a, a)
        assert prof.emulated_gemm_calls == 1


class TestCountCheck:
    """``count_check`` turns the fixed-count check (and its warning) off, never the bits."""

    def test_off_silences_the_warning_and_keeps_the_bits(self):
        rng = np.random.default_rng(5)
        a, b = rng.standard_normal((40, 64)), rng.standard_normal((64, 30))
        with pytest.warns(ozlinalg.AccuracyWarning):
            warned = ozlinalg.matmul(a, b, slices=2)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ozlinalg.AccuracyWarning)
            with ozlinalg.options(count_check=False):
                quiet = ozlinalg.matmul(a, b, slices=2)
        assert warned.tobytes() == quiet.tobytes()


class TestPlan:
    """``resolve``: one validated plan per call, kept per options value."""

    def test_a_plain_call_reuses_its_options_plan(self):
        from ozlinalg._options import resolve

        with ozlinalg.options(slices=7):
            first, again = resolve(np), resolve(np)
            assert first is again and first.slices == 7
            named = resolve(np, slices=5)
            assert named is not first and named.slices == 5
        with ozlinalg.options(slices=7):  # a new options value: a new plan
            assert resolve(np) is not first

    def test_the_plan_follows_the_engine(self):
        from ozlinalg._options import resolve

        with ozlinalg.options(engine="sgemm"):
            plan = resolve(np)
            assert plan.engine.name == "cpu-sgemm"
            assert resolve(np) is plan

    def test_bad_call_arguments_are_rejected(self):
        from ozlinalg._options import resolve

        with pytest.raises(ValueError, match="method"):
            resolve(np, method="nope")
        with pytest.raises(ValueError, match="slices"):
            resolve(np, slices="many")
        with pytest.raises(ValueError, match="balance"):
            resolve(np, balance="sometimes")

    def test_pickled_options_leave_their_plans_behind(self):
        import pickle

        from ozlinalg._options import resolve

        with ozlinalg.options(slices=6) as opts:
            resolve(np)
            assert "_plans" in vars(opts)
            back = pickle.loads(pickle.dumps(opts))
        assert back == opts and "_plans" not in vars(back)
