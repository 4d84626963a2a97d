"""``with ozlinalg.backend():`` routing, isolation, the strategy and its
crossovers, ``ozlinalg.install()``, and the OzArray wrapper.

Tests that need the backend to emulate ask for it: ``strategy="eager"``.
The launcher (``python -m ozlinalg run``) is tested in test_launcher.py.
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.linalg
from conftest import assert_dot_accurate, assert_solve_accurate

import ozlinalg
from ozlinalg.engines.base import CROSSOVER_OPS, Engine, get_engine, register_engine
from ozlinalg.engines.sgemm import SGEMMEngine
from ozlinalg.routing import ROUTES

EAGER = dict(strategy="eager", min_size=0, native_order=0)


@pytest.fixture
def a(rng):
    return rng.standard_normal((8, 8)) + 8 * np.eye(8)


@pytest.fixture
def uninstalled():
    """Whatever a test installs process-wide is undone."""
    yield
    ozlinalg.uninstall()


@pytest.fixture
def cpu_crossovers():
    """Replace the NumPy engine by one with the given crossovers (through
    ``register_engine``, which also drops cached thresholds); restored after."""
    saved = get_engine(np)

    def use(crossovers):
        eng = SGEMMEngine()
        eng.crossovers = dict(crossovers)
        register_engine("numpy", eng)
        return eng

    yield use
    register_engine("numpy", saved)


def _spd(rng, n):
    g = rng.standard_normal((n, n))
    return g @ g.T + n * np.eye(n)


class TestRouting:
    def test_routes_numpy_and_scipy_inside_only(self, a):
        b = np.ones(8)
        with ozlinalg.profile() as outside:
            x0 = np.linalg.solve(a, b)
            scipy.linalg.lu_factor(a)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as inside:
            x1 = np.linalg.solve(a, b)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as inside_sp:
            scipy.linalg.lu_factor(a)
        assert outside.emulated_gemm_calls == 0 and not outside.routing
        assert inside.emulated_gemm_calls > 0 and inside_sp.emulated_gemm_calls > 0
        assert x1.shape == x0.shape and x1.dtype == x0.dtype
        assert_solve_accurate(x1, a, b)  # against the exact solution, not LAPACK's

    @pytest.mark.parametrize("call", [
        lambda a: np.linalg.solve(a, a[:, 0]), lambda a: np.linalg.inv(a),
        lambda a: np.linalg.det(a), lambda a: np.linalg.slogdet(a),
        lambda a: np.linalg.cholesky(a @ a.T), lambda a: np.linalg.qr(a),
        lambda a: np.linalg.lstsq(a, a[:, :2]), lambda a: np.linalg.multi_dot([a, a, a]),
        lambda a: scipy.linalg.solve(a, a[:, 0]), lambda a: scipy.linalg.inv(a),
        lambda a: scipy.linalg.det(a), lambda a: scipy.linalg.lu(a),
        lambda a: scipy.linalg.cho_factor(a @ a.T), lambda a: scipy.linalg.cholesky(a @ a.T),
        lambda a: scipy.linalg.qr(a), lambda a: scipy.linalg.lstsq(a, a[:, 0]),
        lambda a: scipy.linalg.solve_triangular(a, a[:, 0]),
        lambda a: scipy.linalg.lu_solve(scipy.linalg.lu_factor(a), a[:, 0]),
    ])
    def test_each_routed_function(self, a, call):
        ref = call(a)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
            out = call(a)
        assert prof.emulated_gemm_calls > 0 and prof.routed_emulated >= 1
        for u, v in zip(out if isinstance(out, tuple) else (out,),
                        ref if isinstance(ref, tuple) else (ref,)):
            np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-12)

    def test_fall_through_cases(self, a):
        with ozlinalg.backend(**EAGER):
            for call in [
                # a subclass other than np.matrix keeps its dispatch
                lambda: np.linalg.inv(np.ma.masked_array(a)),
                lambda: np.linalg.eigvals(a),  # not routed at all
                lambda: np.linalg.solve(a.tolist(), [1.0] * 8),  # not an ndarray
                lambda: scipy.linalg.inv(a.astype(np.float16)),  # dtype the emulation lacks
            ]:
                with ozlinalg.profile() as prof:
                    call()
                assert prof.emulated_gemm_calls == 0 and not prof.routing
            assert type(np.linalg.inv(np.ma.masked_array(a))) is np.ma.MaskedArray
        with ozlinalg.backend(strategy="eager", min_size=9), ozlinalg.profile() as prof:
            np.linalg.solve(a, np.ones(8))  # below min_size
        assert prof.emulated_gemm_calls == 0
        assert [(r.emulated, r.reason) for r in prof.routing] == [(False, "below min_size 9")]

    def test_complex_input_is_routed_and_emulated(self, rng):
        # docs/backend.md: complex input is routed (it used to say it falls through)
        a = rng.standard_normal((8, 8)) + 1j * rng.standard_normal((8, 8)) + 8 * np.eye(8)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
            x = np.linalg.solve(a, np.ones(8))
        assert prof.routed_emulated == 1 and prof.emulated_gemm_calls > 0
        np.testing.assert_allclose(a @ x, np.ones(8), atol=1e-12)

    def test_installed_and_wrapped(self):
        with ozlinalg.backend():
            pass
        names = ozlinalg.backend.installed()
        assert "numpy.linalg.solve" in names and "scipy.linalg.lu_factor" in names
        assert "numpy.linalg.eig" not in names
        for full in names:
            mod, _, fn = full.rpartition(".")
            shim = getattr(__import__(mod, fromlist=[fn]), fn)
            assert shim._ozlinalg_shim and callable(shim.__wrapped__)
            if mod in ROUTES:  # (the dask route's shims decide through backend.emulates)
                assert shim._ozlinalg_op in CROSSOVER_OPS
        assert np.linalg.solve.__wrapped__.__module__.startswith("numpy")
        with ozlinalg.backend():  # installing again is a no-op
            pass
        assert ozlinalg.backend.installed() == names

    # counts below auto's on purpose (this tests the routing): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_nested_options_and_double_enter(self, a):
        bk = ozlinalg.backend(method="bitmask-ef", slices=7, **EAGER)
        with bk:
            with pytest.raises(RuntimeError):
                bk.__enter__()
            with ozlinalg.profile() as p1:
                np.linalg.det(a)
            with ozlinalg.backend(method="rn", slices=10):
                assert ozlinalg.get_options().min_size == 0  # inherited
                assert ozlinalg.get_options().strategy == "eager"  # inherited too
                with ozlinalg.profile() as p2:
                    np.linalg.det(a)
            with ozlinalg.profile() as p3:
                np.linalg.det(a)
        assert not ozlinalg.backend.active()
        assert set(p1.methods) == {"bitmask-ef"} and set(p1.slices) == {7}
        assert set(p2.methods) == {"rn"} and set(p2.slices) == {10}
        assert set(p3.methods) == {"bitmask-ef"}
        with bk:  # re-usable after exit
            assert ozlinalg.backend.active()
        with pytest.raises(TypeError):
            ozlinalg.backend(bogus=1)

    def test_decorator(self, a):
        @ozlinalg.backend(**EAGER)
        def f(m):
            with ozlinalg.profile() as prof:
                np.linalg.inv(m)
            return prof.emulated_gemm_calls

        assert f(a) > 0 and f(a) > 0  # each call enters a fresh block
        assert not ozlinalg.backend.active()

    def test_thread_isolation(self, a):
        """A thread inside a block is routed, a concurrent thread outside is not,
        and a worker started inside a block starts with an empty context."""
        barrier = threading.Barrier(2)

        def outside():  # three solves while the other thread does the same
            barrier.wait()
            with ozlinalg.profile() as prof:
                for _ in range(3):
                    np.linalg.solve(a, np.ones(8))
            barrier.wait()
            return prof.emulated_gemm_calls

        def inside():
            with ozlinalg.backend(**EAGER):
                return outside()

        with ThreadPoolExecutor(2) as pool:
            fi, fo = pool.submit(inside), pool.submit(outside)
            assert fi.result() > 0
            assert fo.result() == 0

        with ozlinalg.backend(**EAGER):
            def worker():
                with ozlinalg.profile() as prof:
                    np.linalg.inv(a)
                return prof.emulated_gemm_calls, ozlinalg.backend.active()

            with ThreadPoolExecutor(1) as pool:
                assert pool.submit(worker).result() == (0, False)

    def test_reentrancy_guard(self):
        # ozlinalg's own native panels call scipy.linalg.solve_triangular: they
        # must not recurse into the emulation.
        a = np.random.default_rng(1).standard_normal((40, 40)) + 40 * np.eye(40)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
            x = scipy.linalg.solve_triangular(a, np.ones(40))
        np.testing.assert_allclose(
            x, scipy.linalg.solve_triangular.__wrapped__(a, np.ones(40)), rtol=1e-12)
        assert sum(prof.routing.values()) == 1  # the user's call only


class TestStrategy:
    """``strategy``: "performant" (the backend's default) emulates only from the
    engine's measured crossover on; "eager" emulates every call >= min_size."""

    def test_option_values(self):
        assert ozlinalg.get_options().strategy == "eager"  # calls by name
        with pytest.raises(ValueError, match="strategy"):
            ozlinalg.options(strategy="always")
        with pytest.raises(ValueError, match="strategy"):
            ozlinalg.backend(strategy="lazy")
        with pytest.raises(ValueError, match="min_size"):
            ozlinalg.options(min_size=-1)
        with pytest.raises(TypeError, match="min_size"):
            ozlinalg.options(min_size=2.5)
        with ozlinalg.options(min_size=np.int64(3)) as o:
            assert o.min_size == 3 and type(o.min_size) is int

    def test_backend_defaults_to_performant(self):
        with ozlinalg.backend():
            assert ozlinalg.get_options().strategy == "performant"
            with ozlinalg.backend(slices=9):  # nested: inherited, not reset
                assert ozlinalg.get_options().strategy == "performant"
        with ozlinalg.backend(strategy="eager"):
            with ozlinalg.backend(slices=9):
                assert ozlinalg.get_options().strategy == "eager"

    def test_sgemm_engine_never_pays(self):
        """The committed table for the CPU SGEMM engine: no crossover for any
        operation (benchmarks/calibration/crossover.py; docs/backend.md)."""
        eng = SGEMMEngine()
        assert [eng.crossover(op) for op in CROSSOVER_OPS] == [None] * len(CROSSOVER_OPS)
        with pytest.raises(ValueError, match="unknown operation"):
            eng.crossover("svd")
        assert Engine().crossover("getrf") is None  # missing -> None

    @pytest.mark.parametrize("n", [8, 32, 96])
    def test_performant_runs_natively_below_crossover(self, rng, n):
        a = rng.standard_normal((n, n)) + n * np.eye(n)
        b = rng.standard_normal(n)
        s = _spd(rng, n)
        with ozlinalg.backend(), ozlinalg.profile() as prof:
            x1 = np.linalg.solve(a, b)
            x2 = scipy.linalg.solve(a, b)
            c = scipy.linalg.cho_factor(s)
            q, r = np.linalg.qr(a)
        assert prof.emulated_gemm_calls == 0
        # bit-identical to the native functions: they ran
        np.testing.assert_array_equal(x1, np.linalg.solve.__wrapped__(a, b))
        np.testing.assert_array_equal(x2, scipy.linalg.solve.__wrapped__(a, b))
        np.testing.assert_array_equal(c[0], scipy.linalg.cho_factor.__wrapped__(s)[0])
        np.testing.assert_array_equal(q, np.linalg.qr.__wrapped__(a)[0])
        got = {(r.function, r.op, r.order, r.engine, r.emulated, r.reason)
               for r in prof.routing}
        reason = "no crossover (never faster)"
        eng = get_engine(np).name  # the SGEMM or the oneDNN engine: neither pays on the CPU
        assert got == {("numpy.linalg.solve", "getrf", n, eng, False, reason),
                       ("scipy.linalg.solve", "getrf", n, eng, False, reason),
                       ("scipy.linalg.cho_factor", "potrf", n, eng, False, reason),
                       ("numpy.linalg.qr", "geqrf", n, eng, False, reason)}
        assert prof.routed_native == 4 and prof.routed_emulated == 0
        assert "native, no crossover" in prof.summary()

    def test_performant_follows_the_engine_crossover(self, rng, cpu_crossovers):
        cpu_crossovers({"getrf": 16, "matmul": 12})
        small = rng.standard_normal((10, 10)) + 10 * np.eye(10)
        big = rng.standard_normal((20, 20)) + 20 * np.eye(20)
        with ozlinalg.backend(), ozlinalg.profile() as prof:
            np.linalg.solve(small, np.ones(10))  # 10 < 16: native
            with ozlinalg.profile() as p_big:
                np.linalg.solve(big, np.ones(20))  # 20 >= 16: emulated
            np.linalg.cholesky(_spd(rng, 20))  # potrf: no crossover
            np.linalg.multi_dot([big, big, big])  # matmul: 20 >= 12
        decisions = {(r.function, r.order): (r.emulated, r.reason) for r in prof.routing}
        assert decisions == {
            ("numpy.linalg.solve", 10): (False, "below crossover 16"),
            ("numpy.linalg.solve", 20): (True, "at or above crossover 16"),
            ("numpy.linalg.cholesky", 20): (False, "no crossover (never faster)"),
            ("numpy.linalg.multi_dot", 20): (True, "at or above crossover 12"),
        }
        assert p_big.emulated_gemm_calls > 0
        with ozlinalg.backend(min_size=32), ozlinalg.profile() as prof:
            np.linalg.solve(big, np.ones(20))  # min_size still applies
        assert [(r.emulated, r.reason) for r in prof.routing] == [(False, "below min_size 32")]

    def test_replacing_an_engine_drops_cached_thresholds(self, a, cpu_crossovers):
        with ozlinalg.backend():
            with ozlinalg.profile() as p1:
                np.linalg.det(a)
            cpu_crossovers({"getrf": 2})  # the same options object, a new engine
            with ozlinalg.profile() as p2:
                np.linalg.det(a)
        assert p1.routed_native == 1 and p2.routed_emulated == 1

    def test_eager_emulates_every_size(self, a):
        with ozlinalg.backend(strategy="eager", native_order=0), ozlinalg.profile() as prof:
            np.linalg.solve(a, np.ones(8))
            np.linalg.solve(a[:1, :1], np.ones(1))
        assert prof.routed_emulated == 2 and prof.emulated_gemm_calls > 0
        assert {r.reason for r in prof.routing} == {"eager"}

    def test_eager_runs_orders_below_native_order_natively(self, a):
        big = a.repeat(2, 0).repeat(2, 1) + 16 * np.eye(16)
        with ozlinalg.backend(strategy="eager"), ozlinalg.profile() as prof:
            x = np.linalg.solve(a, np.ones(8))  # order 8 < 16: one native panel
            np.linalg.solve(big, np.ones(16))
        assert [(r.emulated, r.reason) for r in prof.routing] == [
            (False, "order below native_order 16 (one native panel)"), (True, "eager")]
        np.testing.assert_array_equal(x, np.linalg.solve(a, np.ones(8)))

    def test_calls_by_name_are_emulated_whatever_the_strategy(self, a):
        with ozlinalg.backend(), ozlinalg.profile() as prof:  # performant
            ozlinalg.linalg.solve(a, np.ones(8))
            ozlinalg.matmul(a, a)
        assert prof.emulated_gemm_calls > 1 and not prof.routing

    def test_profile_off_takes_the_same_decisions(self, rng, cpu_crossovers):
        # The shim's fast path skips screening when no profile records; the
        # decisions (and so the results, bit for bit) must not depend on it.
        cpu_crossovers({"getrf": 16})
        small = rng.standard_normal((10, 10)) + 10 * np.eye(10)
        big = rng.standard_normal((20, 20)) + 20 * np.eye(20)
        with ozlinalg.backend():
            xs, xb = np.linalg.solve(small, np.ones(10)), np.linalg.solve(big, np.ones(20))
            with ozlinalg.profile() as prof:
                xs_p = np.linalg.solve(small, np.ones(10))
                xb_p = np.linalg.solve(big, np.ones(20))
        assert [r.emulated for r in sorted(prof.routing, key=lambda r: r.order)] == [False, True]
        np.testing.assert_array_equal(xs, xs_p)
        np.testing.assert_array_equal(xb, xb_p)
        np.testing.assert_array_equal(xs, np.linalg.solve.__wrapped__(small, np.ones(10)))

    def test_fast_path_takes_tuple_and_list_arguments(self, a):
        # lu_solve((lu, piv), b) and multi_dot([a, b, c]) take the fast path
        # too; with no crossover they are the native functions' results.
        lu = scipy.linalg.lu_factor(a)
        with ozlinalg.backend():
            x = scipy.linalg.lu_solve(lu, np.ones(8))
            m = np.linalg.multi_dot([a, a, a])
            with ozlinalg.profile() as prof:
                scipy.linalg.lu_solve(lu, np.ones(8))
                np.linalg.multi_dot([a, a, a])
        np.testing.assert_array_equal(x, scipy.linalg.lu_solve.__wrapped__(lu, np.ones(8)))
        np.testing.assert_array_equal(m, np.linalg.multi_dot.__wrapped__([a, a, a]))
        assert prof.routed_native == 2 and prof.emulated_gemm_calls == 0
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
            scipy.linalg.lu_solve(lu, np.ones(8))
            np.linalg.multi_dot([a, a, a])
        assert prof.routed_emulated == 2


    def test_emulates_is_the_shims_decision(self, cpu_crossovers):
        with ozlinalg.backend(), ozlinalg.profile() as prof:
            assert not ozlinalg.backend.emulates("numpy.linalg.solve", 4096)
            cpu_crossovers({"getrf": 100})
            assert ozlinalg.backend.emulates("somelib.lu", 100, op="getrf")
            assert not ozlinalg.backend.emulates("somelib.lu", 99, op="getrf")
        with ozlinalg.backend(strategy="eager", min_size=10):
            assert ozlinalg.backend.emulates("somelib.qr", 10)
            assert not ozlinalg.backend.emulates("somelib.qr", 9)
        got = {(r.function, r.op, r.order, r.emulated) for r in prof.routing}
        assert got == {("numpy.linalg.solve", "getrf", 4096, False),
                       ("somelib.lu", "getrf", 100, True), ("somelib.lu", "getrf", 99, False)}

    def test_dask_route_follows_the_strategy(self, rng):
        da = pytest.importorskip("dask.array")
        a = da.from_array(rng.standard_normal((40, 40)) + 40 * np.eye(40), chunks=20)

        def oz_graph(x):
            return any(name.startswith("oz-") for name in x.dask.layers)

        try:
            with ozlinalg.backend(), ozlinalg.profile() as prof:  # performant
                x = da.linalg.solve(a, a[:, 0])
            assert not oz_graph(x)  # dask's own graph: no crossover on this engine
            got = {(r.function, r.emulated, r.reason) for r in prof.routing}
            # (dask's own solve calls its lu, which the route screens too)
            assert ("dask.array.linalg.solve", False, "no crossover (never faster)") in got
            assert not any(emulated for _, emulated, _ in got)
            with ozlinalg.backend(**EAGER):
                assert oz_graph(da.linalg.solve(a, a[:, 0]))
        finally:
            ozlinalg.uninstall()


class TestInstall:
    """``ozlinalg.install()``: routing for the whole program, whatever the
    import order and in every thread; ``ozlinalg.uninstall()`` undoes it."""

    def test_names_bound_after_install_are_routed(self, a, uninstalled):
        ozlinalg.uninstall()
        from numpy.linalg import solve as before  # bound before: the original

        assert not getattr(before, "_ozlinalg_shim", False)
        # native_order=0: the order-8 calls below are emulated too
        opts = ozlinalg.install(strategy="eager", native_order=0)
        assert opts.strategy == "eager" and ozlinalg.backend.active()
        from numpy.linalg import solve
        from scipy.linalg import cho_solve, cholesky

        s = a @ a.T
        with ozlinalg.profile() as prof:
            x = solve(a, np.ones(8))
            c = cho_solve((cholesky(s, lower=True), True), np.ones(8))
            before(a, np.ones(8))
        assert prof.routed_emulated == 3 and prof.emulated_gemm_calls > 0
        np.testing.assert_allclose(a @ x, np.ones(8), atol=1e-12)
        np.testing.assert_allclose(s @ c, np.ones(8), atol=1e-10)
        ozlinalg.uninstall()
        with ozlinalg.profile() as prof:  # bound shims stay, but route nothing
            solve(a, np.ones(8))
        assert not prof.routing and prof.emulated_gemm_calls == 0

    def test_default_strategy_is_performant(self, uninstalled):
        assert ozlinalg.install().strategy == "performant"
        assert ozlinalg.get_options().strategy == "performant"
        assert ozlinalg.install(slices=9).strategy == "performant"  # again: replaced
        assert ozlinalg.get_options().slices == 9

    # counts below auto's on purpose (this tests the routing): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_threads_started_later_are_routed(self, a, uninstalled):
        ozlinalg.install(strategy="eager", slices=8, native_order=0)
        ready = threading.Event()
        go = threading.Event()
        out = {}

        def worker(key):
            ready.set()
            go.wait()
            with ozlinalg.profile() as prof:
                np.linalg.inv(a)
            out[key] = (prof.routed_emulated, set(prof.slices),
                        ozlinalg.get_options().slices, ozlinalg.backend.active())

        t = threading.Thread(target=worker, args=("thread",))
        t.start()
        ready.wait()
        go.set()
        t.join()
        with ThreadPoolExecutor(2) as pool:  # a pool created after install()
            pool.submit(worker, "pool").result()
        assert out["thread"] == (1, {8}, 8, True)
        assert out["pool"] == (1, {8}, 8, True)

    def test_asyncio_tasks_are_routed(self, a, uninstalled):
        import asyncio

        ozlinalg.install(strategy="eager", native_order=0)

        async def task():
            with ozlinalg.profile() as prof:
                np.linalg.det(a)
                await asyncio.sleep(0)
                np.linalg.det(a)
            return prof.routed_emulated

        async def main():
            return await asyncio.gather(task(), task())

        assert asyncio.run(main()) == [2, 2]

    # counts below auto's on purpose (this tests the routing): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_blocks_still_override_locally(self, a, uninstalled):
        ozlinalg.install(strategy="eager", slices=8, native_order=0)
        with ozlinalg.options(slices=6), ozlinalg.profile() as p1:
            np.linalg.det(a)
        with ozlinalg.backend(strategy="performant"), ozlinalg.profile() as p2:
            np.linalg.det(a)
        with ozlinalg.profile() as p3:
            np.linalg.det(a)
        assert set(p1.slices) == {6}
        assert p2.routed_native == 1 and p2.emulated_gemm_calls == 0
        assert set(p3.slices) == {8}

    def test_uninstall_restores_everything(self, a, uninstalled):
        original = ozlinalg.backend.original(np.linalg.solve)
        assert ozlinalg.backend.original(original) is original
        ozlinalg.install(strategy="eager", min_size=3)
        assert np.linalg.solve._ozlinalg_shim
        assert ozlinalg.backend.original(np.linalg.solve) is original
        ozlinalg.uninstall()
        assert np.linalg.solve is original and scipy.linalg.cholesky.__module__.startswith(
            "scipy")
        assert ozlinalg.backend.installed() == []
        assert not ozlinalg.backend.active()
        assert ozlinalg.get_options() == ozlinalg.Options()
        got = {}
        t = threading.Thread(target=lambda: got.update(o=ozlinalg.get_options()))
        t.start()
        t.join()
        assert got["o"] == ozlinalg.Options()
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:  # blocks still work
            np.linalg.solve(a, np.ones(8))
        assert prof.routed_emulated == 1

    def test_shims_are_installed_once_and_missing_modules_remembered(self, monkeypatch,
                                                                      uninstalled):
        # Each backend() entry asks for the shims; after the first it must not ask
        # the import system again for a module that was missing (the search of
        # sys.path on every entry), yet a module imported later still gets its
        # shims at the next entry.
        import importlib
        import sys
        import types

        missing = "ozlinalg_test_absent.linalg"  # no such module
        monkeypatch.setitem(ROUTES, missing, {"solve": "ozlinalg.numpy_linalg:solve"})
        tried = []
        import_module = importlib.import_module

        def counting(name, *args, **kwargs):
            tried.append(name)
            return import_module(name, *args, **kwargs)

        monkeypatch.setattr(importlib, "import_module", counting)
        with ozlinalg.backend(**EAGER):  # a route was added: one complete pass
            pass
        assert missing in tried and "numpy.linalg" in tried
        tried.clear()
        for _ in range(50):
            with ozlinalg.backend(**EAGER):
                pass
        ozlinalg.backend(strategy="eager")(lambda: None)()  # the decorator too
        assert tried == []
        stand_in = types.ModuleType(missing)
        stand_in.solve = lambda a, b: "original"
        monkeypatch.setitem(sys.modules, missing, stand_in)  # imported since
        with ozlinalg.backend(**EAGER):
            assert stand_in.solve._ozlinalg_shim
            assert stand_in.solve(1, 2) == "original"  # not an ndarray: the original
        assert tried.count(missing) == 1 and f"{missing}.solve" in ozlinalg.backend.installed()
        tried.clear()
        for _ in range(10):
            with ozlinalg.backend(**EAGER):
                pass
        assert tried == []
        ozlinalg.uninstall()  # starts over: the next entry installs everything again
        with ozlinalg.backend(**EAGER):
            assert np.linalg.solve._ozlinalg_shim
        assert "numpy.linalg" in tried

    def test_entries_reuse_the_merged_options(self):
        from ozlinalg._options import explicit_names

        # backend() keeps the Options it merged: equal entries see the same
        # instance, with the names set explicitly remembered, and nested blocks
        # and options() blocks still win inside
        with ozlinalg.backend(strategy="eager", slices=9):
            first = ozlinalg.get_options()
        with ozlinalg.backend(strategy="eager", slices=9):
            assert ozlinalg.get_options() is first
            with ozlinalg.options(slices=7):
                assert ozlinalg.get_options().slices == 7
            with ozlinalg.backend(method="bitmask-ef"):
                inner = ozlinalg.get_options()
            assert ozlinalg.get_options() is first
        assert first.slices == 9 and first.strategy == "eager"
        assert (inner.method, inner.slices, inner.strategy) == ("bitmask-ef", 9, "eager")
        assert {"strategy", "slices"} <= explicit_names(first)
        assert "method" in explicit_names(inner) and "method" not in explicit_names(first)
        assert ozlinalg.get_options() == ozlinalg.Options()
        with ozlinalg.backend():  # the default strategy, outside any block
            assert ozlinalg.get_options().strategy == "performant"
            with ozlinalg.backend():  # inherited, not reset
                assert ozlinalg.get_options().strategy == "performant"
            with ozlinalg.backend(strategy="eager"), pytest.raises(TypeError, match="bogus"):
                ozlinalg.backend(bogus=1)
        with pytest.raises(ValueError, match="strategy"):
            ozlinalg.backend(strategy="sometimes")

    def test_bad_options_are_rejected_before_anything_changes(self, uninstalled):
        ozlinalg.uninstall()
        for bad in (dict(strategy="x"), dict(slices=0), dict(bogus=1)):
            with pytest.raises((ValueError, TypeError)):
                ozlinalg.install(**bad)
            assert not ozlinalg.backend.active() and ozlinalg.backend.installed() == []


class TestDocumentedDifferences:
    """Rows of docs/backend.md's table of deliberate differences, checked on
    both sides so the table stays true when either library changes."""

    def test_read_only_b_is_never_written(self, rng):
        low = np.tril(rng.standard_normal((6, 6))) + 6 * np.eye(6)
        for solve in (scipy.linalg.solve_triangular, ozlinalg.linalg.solve_triangular):
            b = np.ones(6)
            b.flags.writeable = False
            x = solve(low, b, lower=True, overwrite_b=True)  # no routing active here
            np.testing.assert_allclose(low @ x, np.ones(6), rtol=1e-12)
            if solve is ozlinalg.linalg.solve_triangular:
                assert np.all(b == 1) and not np.shares_memory(x, b)
            else:  # SciPy's f2py wrapper writes through the read-only flag
                assert np.shares_memory(x, b) and not np.all(b == 1)

    def test_lstsq_with_inf_raises_instead_of_hanging(self):
        a = np.ones((6, 3))
        a[0, 0], a[1, 1], a[2, 2] = np.inf, 2.0, 3.0
        with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
            ozlinalg.linalg.lstsq(a, np.ones(6), check_finite=False)
        with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
            ozlinalg.numpy_linalg.lstsq(a, np.ones(6))
        with ozlinalg.backend(**EAGER), \
                pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
            np.linalg.lstsq(a, np.ones(6))  # routed: never reaches native gelsd


def test_wrapper_array(a, rng):
    b = rng.standard_normal((8, 3))
    x = ozlinalg.asarray(a)
    with ozlinalg.profile() as prof:
        r1 = x @ b
        r2 = np.matmul(x, b)
        r3 = np.dot(x, b)
        r4 = np.linalg.solve(x, b)
        r5 = b.T @ x
    assert prof.emulated_gemm_calls >= 5
    for r in (r1, r2, r3, r4, r5):
        assert isinstance(r, ozlinalg.OzArray)
    for r in (r1, r2, r3):
        assert_dot_accurate(np.asarray(r), a, b)
    assert_dot_accurate(np.asarray(r5), b.T, a)
    assert_solve_accurate(np.asarray(r4), a, b)
    s = np.sum(x)  # other functions: unwrap, NumPy, plain result
    assert isinstance(s, np.floating) and s == np.sum(a)
    y = x + 1  # ufuncs re-wrap
    assert isinstance(y, ozlinalg.OzArray) and y.shape == (8, 8)
    assert isinstance(np.concatenate([x, x]), np.ndarray)
    with ozlinalg.profile() as prof:
        a @ b  # plain ndarrays: never routed
    assert prof.emulated_gemm_calls == 0
