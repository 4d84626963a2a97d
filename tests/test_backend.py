"""``with ozlinalg.backend():`` routing, isolation, and the OzArray wrapper."""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.linalg

import ozlinalg


@pytest.fixture
def a(rng):
    return rng.standard_normal((8, 8)) + 8 * np.eye(8)


def test_routes_numpy_and_scipy_inside_only(a):
    b = np.ones(8)
    with ozlinalg.profile() as outside:
        x0 = np.linalg.solve(a, b)
        scipy.linalg.lu_factor(a)
    with ozlinalg.backend(min_size=0), ozlinalg.profile() as inside:
        x1 = np.linalg.solve(a, b)
    with ozlinalg.backend(min_size=0), ozlinalg.profile() as inside_sp:
        scipy.linalg.lu_factor(a)
    assert outside.emulated_gemm_calls == 0
    assert inside.emulated_gemm_calls > 0 and inside_sp.emulated_gemm_calls > 0
    np.testing.assert_allclose(x1, x0, rtol=1e-12)


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
def test_each_routed_function(a, call):
    ref = call(a)
    with ozlinalg.backend(min_size=0), ozlinalg.profile() as prof:
        out = call(a)
    assert prof.emulated_gemm_calls > 0
    for u, v in zip(out if isinstance(out, tuple) else (out,),
                    ref if isinstance(ref, tuple) else (ref,)):
        np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-12)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_fall_through_cases(a):
    with ozlinalg.backend(min_size=0):
        for call in [
            lambda: np.linalg.inv(np.asmatrix(a)),  # subclass keeps its dispatch
            lambda: np.linalg.eigvals(a),  # not routed at all
            lambda: np.linalg.solve(a.tolist(), [1.0] * 8),  # not an ndarray
        ]:
            with ozlinalg.profile() as prof:
                call()
            assert prof.emulated_gemm_calls == 0
        assert isinstance(np.linalg.inv(np.asmatrix(a)), np.matrix)
    with ozlinalg.backend(min_size=9), ozlinalg.profile() as prof:  # below min_size
        np.linalg.solve(a, np.ones(8))
    assert prof.emulated_gemm_calls == 0


def test_installed_and_wrapped():
    with ozlinalg.backend():
        pass
    names = ozlinalg.backend.installed()
    assert "numpy.linalg.solve" in names and "scipy.linalg.lu_factor" in names
    assert "numpy.linalg.eig" not in names
    for full in names:
        mod, _, fn = full.rpartition(".")
        shim = getattr(__import__(mod, fromlist=[fn]), fn)
        assert shim._ozlinalg_shim and callable(shim.__wrapped__)
    assert np.linalg.solve.__wrapped__.__module__.startswith("numpy")
    with ozlinalg.backend():  # installing again is a no-op
        pass
    assert ozlinalg.backend.installed() == names


def test_nested_options_and_double_enter(a):
    bk = ozlinalg.backend(method="bitmask-ef", slices=7, min_size=0)
    with bk:
        with pytest.raises(RuntimeError):
            bk.__enter__()
        with ozlinalg.profile() as p1:
            np.linalg.det(a)
        with ozlinalg.backend(method="rn", slices=10):
            assert ozlinalg.get_options().min_size == 0  # inherited
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


def test_decorator(a):
    @ozlinalg.backend(min_size=0)
    def f(m):
        with ozlinalg.profile() as prof:
            np.linalg.inv(m)
        return prof.emulated_gemm_calls

    assert f(a) > 0 and f(a) > 0  # each call enters a fresh block
    assert not ozlinalg.backend.active()


def test_thread_isolation(a):
    """A thread inside a block is routed, a concurrent thread outside is not,
    and a worker started inside a block starts with an empty context."""
    barrier = threading.Barrier(2)

    def inside():
        with ozlinalg.backend(min_size=0):
            barrier.wait()
            with ozlinalg.profile() as prof:
                for _ in range(3):
                    np.linalg.solve(a, np.ones(8))
            barrier.wait()
        return prof.emulated_gemm_calls

    def outside():
        barrier.wait()
        with ozlinalg.profile() as prof:
            for _ in range(3):
                np.linalg.solve(a, np.ones(8))
        barrier.wait()
        return prof.emulated_gemm_calls

    with ThreadPoolExecutor(2) as pool:
        fi, fo = pool.submit(inside), pool.submit(outside)
        assert fi.result() > 0
        assert fo.result() == 0

    with ozlinalg.backend(min_size=0):
        def worker():
            with ozlinalg.profile() as prof:
                np.linalg.inv(a)
            return prof.emulated_gemm_calls, ozlinalg.backend.active()

        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(worker).result() == (0, False)


def test_reentrancy_guard(a):
    # ozlinalg's own native panels call scipy.linalg.solve_triangular: they
    # must not recurse into the emulation.
    a = np.random.default_rng(1).standard_normal((40, 40)) + 40 * np.eye(40)
    with ozlinalg.backend(min_size=0):
        x = scipy.linalg.solve_triangular(a, np.ones(40))
    np.testing.assert_allclose(x, scipy.linalg.solve_triangular.__wrapped__(a, np.ones(40)),
                               rtol=1e-12)


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
    np.testing.assert_allclose(np.asarray(r1), a @ b, rtol=1e-13)
    np.testing.assert_allclose(np.asarray(r4), np.linalg.solve(a, b), rtol=1e-10)
    s = np.sum(x)  # other functions: unwrap, NumPy, plain result
    assert isinstance(s, np.floating) and s == np.sum(a)
    y = x + 1  # ufuncs re-wrap
    assert isinstance(y, ozlinalg.OzArray) and y.shape == (8, 8)
    assert isinstance(np.concatenate([x, x]), np.ndarray)
    with ozlinalg.profile() as prof:
        a @ b  # plain ndarrays: never routed
    assert prof.emulated_gemm_calls == 0
