"""Reproducible bits (docs/guarantees.md): for given inputs, method, count (or
``auto``) and accuracy, ``ozlinalg.matmul`` returns the same bits on every engine,
thread count, memory limit (tile plan) and batch position, and for fixed counts
on every row / column subset.

One test body runs over all engines available here: the float32 SGEMM engine, the
SGEMM engine on int8 slices with the compiled passes, the oneDNN INT8 engine and the
AVX2 ``vpmaddwd`` engine (each skipped where it cannot run) and the GPU engine on
tests/host_cuda.py's stand-ins (and on a real GPU, marked ``gpu``, where one
exists). ``TestDecisions`` perturbs the engines' magnitude estimates within
their stated error bound next to a threshold: the decision must stay the one
the EXACT magnitudes give (it would not if a float estimate decided).
"""
import math
import re
from fractions import Fraction

import numpy as np
import pytest
from conftest import avx2_is_redundant, cpu_engine_or_skip, sgemm_int8_is_redundant
from host_cuda import HostEngine, compiler_available
from numpy.testing import assert_array_equal

import ozlinalg
from ozlinalg.engines import base as engine_registry
from ozlinalg.engines.sgemm import SGEMMEngine
from ozlinalg.ozaki import crt, faithful
from ozlinalg.ozaki.counts import estimate
from ozlinalg.ozaki.counts import moduli as crt_counts
from ozlinalg.ozaki.counts import slices as slice_counts
from ozlinalg.testing import random_matrix

INT8_METHODS = ["hybrid-ef", "bitmask-ef", "rn", "bitmask", "crt", "crt-fast"]
FAITHFUL = ["hybrid-ef", "bitmask-ef", "crt", "crt-fast"]
#: ``"min"``: the smallest plan of the product (ozlinalg.ozaki.memory), the most tiles
LIMITS = [None, 1 << 20, "min"]
#: (threads, limit) per engine: each thread count with and without tiles, each limit
#: (the six pairs took a third more of the suite's time for no case the four miss)
RUNS = [(1, None), (1, 1 << 20), (2, None), (2, "min")]


def runs_for(name):
    """:data:`RUNS` by thread count, ``{threads: [limit, ...]}``; the host stand-in of the
    GPU engine: one thread (its threads are the CPU's), every limit."""
    if name == "host-gpu":
        return {1: list(LIMITS)}
    out = {}
    for threads, limit in RUNS:
        out.setdefault(threads, []).append(limit)
    return out


def make_engine(name, threads):
    """A fresh engine ``name`` ("sgemm": the float32 one, "sgemm-int8", "onednn", "avx2",
    "host-gpu") with ``threads`` threads."""
    if name == "sgemm":
        return SGEMMEngine(threads=threads)
    if name == "sgemm-int8":
        from ozlinalg.engines import kernels
        from ozlinalg.engines.sgemm_int8 import SGEMMInt8Engine

        if kernels.load()[0] is None:
            pytest.skip(f"no compiled passes, no SGEMM engine on int8 slices: "
                        f"{kernels.load()[1]}")
        return SGEMMInt8Engine(threads=threads)
    if name == "onednn":
        cpu_engine_or_skip("onednn")
        from ozlinalg.engines.onednn import OneDNNEngine

        return OneDNNEngine(threads=threads)
    if name == "avx2":
        cpu_engine_or_skip("avx2")
        from ozlinalg.engines.avx2 import AVX2Engine

        return AVX2Engine(threads=threads)
    return HostEngine(fused_split=compiler_available())


ENGINES = ["sgemm", "sgemm-int8", "onednn", "avx2", "host-gpu"]


def engines_here():
    """:data:`ENGINES` less the CPU INT8 engines that cannot run here (each is
    compared where it runs; a missing one never skips the others' comparison)."""
    from ozlinalg.engines.onednn import EngineUnavailable
    from ozlinalg.engines.select import cpu_engine

    out = []
    for name in ENGINES:
        if name in ("onednn", "avx2"):
            try:
                cpu_engine(name)
            except EngineUnavailable:
                continue
            if name == "avx2" and avx2_is_redundant():
                continue
        if name == "sgemm-int8":
            from ozlinalg.engines import kernels

            if kernels.load()[0] is None or sgemm_int8_is_redundant():
                continue
        out.append(name)
    return out


def run(monkeypatch, engine, a, b, limit=None, **kw):
    """``ozlinalg.matmul`` on ``engine`` under ``memory_limit=limit``: (result, profile)."""
    monkeypatch.setitem(engine_registry._ENGINES, "numpy", engine)
    if limit == "min":
        limit = smallest_limit(engine, a, b, **kw)
    with ozlinalg.options(engine=None, memory_limit=limit), ozlinalg.profile() as prof:
        c = ozlinalg.matmul(a, b, **kw)
    return c, prof


def smallest_limit(engine, a, b, method=None, slices=None, accuracy=None, **_):
    """The smallest ``memory_limit`` the driver accepts for the real product ``a @ b``
    on ``engine`` (a complex one: its real products are as large)."""
    from ozlinalg._matmul import memory_plan

    (m, n), p = a.shape, b.shape[1]
    return memory_plan(m, n, p, method, slices, accuracy, 1 << 50, engine).minimum


CASES = ([(m, "auto", "dgemm") for m in INT8_METHODS] + [(m, 8, "dgemm") for m in INT8_METHODS]
         + [(m, "auto", "faithful") for m in FAITHFUL] + [(m, 9, "faithful") for m in FAITHFUL])


# counts below auto's on purpose (this tests the bits): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestSameBits:
    @pytest.mark.parametrize("method, slices, accuracy", CASES)
    def test_engines_threads_and_memory_limits(self, rng, monkeypatch, method, slices,
                                               accuracy):
        if method.startswith("crt") and slices != "auto":
            slices += 7
        a = random_matrix(rng, 140, 200, 2.0)
        b = random_matrix(rng, 200, 90, 2.0)
        want = None
        for name in engines_here():
            for threads, limits in runs_for(name).items():
                eng = make_engine(name, threads)
                for limit in limits:
                    got, prof = run(monkeypatch, eng, a, b, limit, method=method,
                                    slices=slices, accuracy=accuracy)
                    if want is None:
                        want, count = got, prof.slices
                        continue
                    assert prof.slices == count, (name, threads, limit)
                    assert_array_equal(got, want, err_msg=f"{name} {threads} {limit}")

    @pytest.mark.parametrize("method", FAITHFUL)
    def test_faithful_count_prediction(self, rng, monkeypatch, method):
        # faithful mode's automatic count from its sampled prediction (ozaki.crt.certify.
        # faithful_moduli, ozaki.gemm.predicted_slices; here on a small product): the same
        # count and bits on every engine, thread count and memory limit (tiles; W kept or
        # recomputed per pass)
        monkeypatch.setattr(faithful, "PREDICT_MIN_SIZE", 0)
        a = random_matrix(rng, 140, 200, 2.0)
        b = random_matrix(rng, 200, 90, 2.0)
        want = None
        for name in engines_here():
            for threads, limits in runs_for(name).items():
                eng = make_engine(name, threads)
                for limit in limits:
                    got, prof = run(monkeypatch, eng, a, b, limit, method=method,
                                    accuracy="faithful")
                    if want is None:
                        want, count = got, prof.slices
                        continue
                    assert prof.slices == count, (name, threads, limit)
                    assert_array_equal(got, want, err_msg=f"{name} {threads} {limit}")

    def test_tiles_really_differ(self, rng, monkeypatch):
        # the memory limits above cut this product into several output tiles
        a = random_matrix(rng, 140, 200, 2.0)
        b = random_matrix(rng, 200, 90, 2.0)
        shapes = set()
        for limit in LIMITS:
            eng_counter = HostEngine(fused_split=False)
            run(monkeypatch, eng_counter, a, b, limit, slices=8)
            shapes.add(frozenset(eng_counter.products))
        assert len(shapes) == len(LIMITS)

    @pytest.mark.parametrize("accuracy", ["dgemm", "faithful"])
    @pytest.mark.parametrize("slices", ["auto", 9])
    def test_batch_position(self, rng, accuracy, slices):
        a = np.stack([random_matrix(rng, 20, 90, phi) for phi in (0.5, 2.0, 4.0)])
        b = random_matrix(rng, 90, 15, 1.0)
        c = ozlinalg.matmul(a, b, slices=slices, accuracy=accuracy)
        order = [2, 0, 1]
        c2 = ozlinalg.matmul(a[order], b, slices=slices, accuracy=accuracy)
        for t in range(3):
            single = ozlinalg.matmul(a[t], b, slices=slices, accuracy=accuracy)
            assert_array_equal(c[t], single)
            assert_array_equal(c2[order.index(t)], single)

    def test_complex_and_inner_blocks(self, rng, monkeypatch):
        from ozlinalg.ozaki import params

        monkeypatch.setattr(params, "INT8_INNER_BLOCK", 128)
        a = random_matrix(rng, 30, 300, 1.0) + 1j * random_matrix(rng, 30, 300, 1.0)
        b = random_matrix(rng, 300, 20, 1.0)
        for accuracy in ("dgemm", "faithful"):
            want, _ = run(monkeypatch, make_engine("sgemm", 2), a, b, accuracy=accuracy)
            for name in engines_here():
                got, _ = run(monkeypatch, make_engine(name, 1), a, b, 1 << 19,
                             accuracy=accuracy)
                assert_array_equal(got, want)


# counts below auto's on purpose (this tests the bits): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestSubsets:
    """Each entry of a fixed-count product depends on its row of A and column of B
    only (fixed-count slices, per-row scales; Ozaki-II's fast scaling): a subset
    of rows and columns gives the same bits. Ozaki-II's accurate scaling shifts a
    row by the bound of its products with ALL columns: not subset-stable."""

    @pytest.mark.parametrize("method, accuracy", [
        (m, acc) for m in ["hybrid-ef", "bitmask-ef", "rn", "bitmask", "crt-fast"]
        for acc in ["dgemm", "faithful"] if acc == "dgemm" or m in FAITHFUL])
    def test_fixed_counts(self, rng, method, accuracy):
        s = 16 if method.startswith("crt") else 9
        a = random_matrix(rng, 50, 200, 3.0)
        b = random_matrix(rng, 200, 40, 3.0)
        whole = ozlinalg.matmul(a, b, method=method, slices=s, accuracy=accuracy,
                                balance=False)
        rows = rng.choice(50, 13, replace=False)
        cols = rng.choice(40, 7, replace=False)
        part = ozlinalg.matmul(a[rows], b[:, cols], method=method, slices=s,
                               accuracy=accuracy, balance=False)
        assert_array_equal(part, whole[np.ix_(rows, cols)])
        one = ozlinalg.matmul(a[rows[:1]], b[:, cols[:1]], method=method, slices=s,
                              accuracy=accuracy, balance=False)
        assert_array_equal(one, whole[rows[:1]][:, cols[:1]])

    @pytest.mark.parametrize("method", ["hybrid-ef", "bitmask-ef", "rn", "crt-fast"])
    def test_auto_is_the_count_it_reports(self, rng, method):
        # a subset may decide another count; with the same count it has the same bits
        a = random_matrix(rng, 50, 200, 1.0)
        b = random_matrix(rng, 200, 40, 1.0)
        with ozlinalg.profile() as prof:
            whole = ozlinalg.matmul(a, b, method=method)
        fixed = ozlinalg.matmul(a[:9], b[:, :5], method=method, slices=prof.slices[0])
        assert_array_equal(fixed, whole[:9, :5])


class PerturbedEngine(SGEMMEngine):
    """The SGEMM engine with its magnitude estimates moved by ``factor`` (inside the
    bound :data:`ozlinalg.ozaki.counts.estimate.EST_REL` every engine's estimate obeys)."""

    #: The driver decides here (its estimates are the subject): not the one-call path
    #: of small products, which decides from exact magnitudes of its own.
    small_product = None

    def __init__(self, factor):
        super().__init__(threads=1)
        self.factor = factor

    def approx_matmul(self, a, b):
        return super().approx_matmul(a, b) * self.factor


#: Estimate errors of +-5.6%: what BF16 operands with a loose FP32 accumulation may
#: give, inside the bound the decisions assume (checked below).
FACTORS = [1 - 0.056, 1.0, 1 + 0.056]


def test_the_bound_covers_the_perturbation():
    assert estimate.EST_REL >= 0.056 / (1 - 0.056)


def exact_q(xa, xb):
    return [[estimate._exact_sq_dot(xa[i], xb[j]) for j in range(xb.shape[0])]
            for i in range(xa.shape[0])]


class TestDecisions:
    """Thresholds placed within 0.1% of the smallest magnitude: an estimate
    perturbed by +-5.6% (within its bound) straddles them; the decision is the
    exact one all the same."""

    def test_slices_auto_near_a_threshold(self, rng, monkeypatch):
        from ozlinalg.ozaki.split import normalize_rows

        a = random_matrix(rng, 12, 40, 2.0)
        b = random_matrix(rng, 40, 9, 2.0)
        xa, _ = normalize_rows(np, a)
        xb, _ = normalize_rows(np, b.T)
        qmin = min(min(r) for r in exact_q(xa, xb))
        real = slice_counts.slice_thresholds("hybrid", 7, 20, 12 * 9)
        for near in (qmin * (1 + 1e-3), qmin * (1 - 1e-3)):
            thr = tuple(list(real[:9]) + [near] + list(real[10:]))
            monkeypatch.setattr(slice_counts, "slice_thresholds", lambda *args, t=thr: t)
            want = next(n + 1 for n, t in enumerate(thr)
                        if t < math.inf and Fraction(qmin) >= Fraction(t))
            results = set()
            for f in FACTORS:
                c, prof = run(monkeypatch, PerturbedEngine(f), a, b, slices="auto")
                assert prof.slices == [want], (near, f)
                results.add(c.tobytes())
            assert len(results) == 1

    def test_native_entries_near_the_cap(self, rng, monkeypatch):
        from ozlinalg.ozaki.split import normalize_rows

        a = random_matrix(rng, 8, 30, 3.0)
        b = random_matrix(rng, 30, 6, 3.0)
        xa, _ = normalize_rows(np, a)
        xb, _ = normalize_rows(np, b.T)
        q = exact_q(xa, xb)
        flat = sorted(v for r in q for v in r)
        cap = float(flat[4]) * (1 + 1e-3)  # the four smallest entries (and a near one)
        real = slice_counts.slice_thresholds("hybrid", 7, 20, 8 * 6)
        thr = tuple(list(real[:19]) + [cap])
        monkeypatch.setattr(slice_counts, "slice_thresholds", lambda *args: thr)
        want_native = np.array([[v < Fraction(cap) for v in r] for r in q])
        seen = set()
        for f in FACTORS:
            c, _ = run(monkeypatch, PerturbedEngine(f), a, b)
            seen.add(c.tobytes())
        assert len(seen) == 1 and want_native.sum() == 5

    @pytest.mark.parametrize("scaling", ["accurate", "fast"])
    def test_moduli_auto_near_a_threshold(self, rng, monkeypatch, scaling):
        a = random_matrix(rng, 10, 50, 1.0)
        b = random_matrix(rng, 50, 8, 1.0)
        method = "crt" if scaling == "accurate" else "crt-fast"
        c0, p0 = run(monkeypatch, SGEMMEngine(threads=1), a, b, method=method)
        # the smallest r = q / num**2, exactly, from the decision's own pieces
        seen = {}
        orig = estimate.CountPlan.__init__

        def spy(plan, *args, **kw):
            orig(plan, *args, **kw)
            seen["plan"] = plan

        monkeypatch.setattr(estimate.CountPlan, "__init__", spy)
        run(monkeypatch, SGEMMEngine(threads=1), a, b, method=method)
        plan = seen["plan"]
        rows, cols = np.meshgrid(np.arange(10), np.arange(8), indexing="ij")
        rmin = min(plan._r_exact(rows.ravel(), cols.ravel()))
        real = crt.crt_thresholds(scaling, 20, crt.crt_constants(20).log2P)
        n = p0.slices[0] - 1
        for near in (float(rmin) * (1 + 1e-3), float(rmin) * (1 - 1e-3)):
            thr = tuple(list(real[:n]) + [near] + list(real[n + 1:]))
            monkeypatch.setattr(crt_counts, "crt_thresholds", lambda *args, t=thr: t)
            want = next(i + 1 for i, t in enumerate(thr) if t < math.inf and rmin >= Fraction(t))
            for f in FACTORS:
                _, prof = run(monkeypatch, PerturbedEngine(f), a, b, method=method)
                assert prof.slices == [want], (near, f)

    @pytest.mark.parametrize("phi", [0.1, 0.5, 1.0, 4.0])
    def test_bound_products_bound_r_from_below(self, rng, phi):
        # crt.count._bound_decision's L_ij <= r_ij = q_ij / num_ij**2, against the exact q
        from ozlinalg.ozaki.split import normalize_rows

        m, k, p = 9, 70, 7
        a = random_matrix(rng, m, k, phi)
        b = random_matrix(rng, k, p, phi)
        a[2, ::3] = 0.0
        a[4, 5] = 5e-324
        xa, _ = normalize_rows(np, a)
        xb, _ = normalize_rows(np, b.T)
        ia_, ib_ = np.ceil(128 * np.abs(xa)), np.ceil(128 * np.abs(xb))
        w = (ia_.astype(np.int64) @ ib_.astype(np.int64).T).astype(np.int32)
        num = [rng.random(n) * 2.0**-rng.integers(0, 30, n) + 2.0**-60 for n in (m, p, m, p)]
        inv_k = 2.0**-28 / k * (1.0 - 2.0**-40)
        q = exact_q(xa, xb)
        for i in range(m):
            lows = [crt_counts._bound_r_min(np, None, w[i:i + 1, j:j + 1], ia_.sum(1)[i:i + 1],
                                     ib_.sum(1)[j:j + 1], [num[0][i:i + 1], num[1][j:j + 1],
                                     num[2][i:i + 1], num[3][j:j + 1]], inv_k)[0][0]
                    for j in range(p)]
            for j in range(p):
                n = num[0][i] * num[1][j] + num[2][i] * num[3][j]
                assert Fraction(lows[j]) <= q[i][j] / Fraction(n) ** 2, (i, j)

    @pytest.mark.parametrize("phi", [0.1, 0.5])
    def test_moduli_auto_from_the_bound_products(self, monkeypatch, phi):
        # dense, narrow-range operands: W decides the count with no estimate GEMM; a
        # threshold moved next to the smallest r, or between r and W's bound of it
        # (the estimates decide then), gives the exact decision all the same (inputs
        # with no real threshold between W's bound and r: seed 0)
        rng = np.random.default_rng(0)
        a = random_matrix(rng, 12, 60, phi)
        b = random_matrix(rng, 60, 10, phi)
        seen = {}
        orig = estimate.CountPlan.decide_from_lower

        def spy(plan, low, rows, cols):
            seen["plan"], seen["low"] = plan, low
            return orig(plan, low, rows, cols)

        monkeypatch.setattr(estimate.CountPlan, "decide_from_lower", spy)
        c0, p0 = run(monkeypatch, SGEMMEngine(threads=1), a, b, method="crt")
        plan = seen["plan"]
        rows, cols = np.meshgrid(np.arange(12), np.arange(10), indexing="ij")
        rmin = min(plan._r_exact(rows.ravel(), cols.ravel()))
        assert Fraction(seen["low"]) <= rmin
        real = crt.crt_thresholds("accurate", 20, crt.crt_constants(20).log2P)
        n = p0.slices[0] - 1
        assert real[n] <= rmin < (real[n - 1] if n else math.inf)
        counts = {}
        crt.crt_matmul_2d(np, SGEMMEngine(threads=1), a, b, profile_counts=counts)
        assert counts["bound_decided"] == 1 and counts["float_gemms"] == 0
        middle = math.sqrt(seen["low"] * float(rmin))
        for near in (float(rmin) * (1 + 1e-3), float(rmin) * (1 - 1e-3), middle):
            thr = tuple(list(real[:n]) + [near] + list(real[n + 1:]))
            monkeypatch.setattr(crt_counts, "crt_thresholds", lambda *args, t=thr: t)
            want = next(i + 1 for i, t in enumerate(thr) if t < math.inf and rmin >= Fraction(t))
            picks = set()
            for f in FACTORS:
                _, prof = run(monkeypatch, PerturbedEngine(f), a, b, method="crt")
                picks.add(prof.slices[0])
            monkeypatch.setattr(crt_counts, "_bound_decision", lambda *args: None)
            _, prof = run(monkeypatch, PerturbedEngine(1.0), a, b, method="crt")
            monkeypatch.undo()
            monkeypatch.setattr(estimate.CountPlan, "decide_from_lower", spy)
            assert picks == {want} == {prof.slices[0]}, near

    def test_thresholds_are_decimal_constants(self):
        # the same floats on every machine: decimal arithmetic, not libm
        t = slice_counts.slice_thresholds("hybrid", 7, 20, 1 << 20)
        assert t[:7] == (math.inf,) * 7 and all(x > y for x, y in zip(t[7:], t[8:]))
        assert t == slice_counts.slice_thresholds.__wrapped__("hybrid", 7, 20, 1 << 20)

    def test_robust_floor_at_integers(self):
        v = np.array([0.25, 2.0**-30, 3.0, 0.75])
        got = estimate.robust_floor(np, 2.0, v)
        assert_array_equal(got, [4.0, 32.0, math.floor(2 - math.log2(3)),
                                 math.floor(2 - math.log2(0.75))])
        assert_array_equal(estimate.robust_floor(np, 3.0, np.array([2.0]), div=2), [1.0])


@pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
def test_native_entries_same_bits(rng, monkeypatch, method):
    # entries beyond max_slices (X D times D^-1 Y blocks) go to native FP64 in dgemm
    # mode: in one fixed order, whatever share of an output tile they are
    d = np.ldexp(1.0, rng.integers(-600, 601, 300))
    a = random_matrix(rng, 70, 300, 1.0)
    b = random_matrix(rng, 300, 50, 1.0)
    a[:30] = rng.uniform(-1, 1, (30, 300)) * d
    b[:, :20] = rng.uniform(-1, 1, (300, 20)) / d[:, None]
    want = None
    for name in engines_here():
        for limit in (None, 1 << 20, "min"):
            got, prof = run(monkeypatch, make_engine(name, 2), a, b, limit, method=method,
                            balance=False)
            assert prof.native_flops > 0
            if want is None:
                want = got
            assert_array_equal(got, want, err_msg=f"{name} {limit}")
    fixed = np.array([[np.sum(a[i] * b[:, j]) for j in range(20)] for i in range(30)])
    assert_array_equal(want[:30, :20], fixed)


@pytest.mark.parametrize("accuracy", ["dgemm", "faithful"])
def test_factorizations_same_bits(rng, monkeypatch, accuracy):
    n = 150
    a = random_matrix(rng, n, n, 1.0) + n * np.eye(n)
    spd = a @ a.T
    outs = {}
    for name in engines_here():
        for limit in (None, 1 << 19):  # panel products in several tiles
            eng = make_engine(name, 2)
            monkeypatch.setitem(engine_registry._ENGINES, "numpy", eng)
            with ozlinalg.options(engine=None, memory_limit=limit, accuracy=accuracy):
                got = (ozlinalg.lapack.getrf(a, block_size=32, min_size=0)[0],
                       ozlinalg.lapack.potrf(spd, block_size=32, min_size=0),
                       ozlinalg.lapack.geqrf(a, block_size=32, min_size=0)[0])
            for key, val in zip(("getrf", "potrf", "geqrf"), got):
                if key in outs:
                    assert_array_equal(val, outs[key], err_msg=f"{key} {name} {limit}")
                outs.setdefault(key, val)


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_properties import SETTINGS, inner_scaled, problem  # noqa: E402


@SETTINGS
@given(ab=st.one_of(problem(), inner_scaled()), method=st.sampled_from(INT8_METHODS),
       accuracy=st.sampled_from(["dgemm", "faithful"]),
       limit=st.integers(1 << 12, 1 << 22))
def test_random_memory_limits(ab, method, accuracy, limit):
    a, b = ab
    if accuracy == "faithful" and method not in FAITHFUL:
        accuracy = "dgemm"
    with np.errstate(all="ignore"):
        want = ozlinalg.matmul(a, b, method=method, accuracy=accuracy)
        with ozlinalg.options(memory_limit=limit):
            try:
                got = ozlinalg.matmul(a, b, method=method, accuracy=accuracy)
            except MemoryError as exc:  # below the smallest plan: refused, naming it
                need = re.search(r"memory_limit=(\d+) bytes is below the ([0-9.]+) MiB",
                                 str(exc))
                assert need is not None and int(need[1]) == limit, str(exc)
                assert limit < (float(need[2]) + 0.005) * 2**20
                return
    assert_array_equal(got, want)
