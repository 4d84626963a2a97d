"""The backend routes of the spectral decompositions: ``numpy.linalg.eigh / eigvalsh / svd /
pinv / matrix_rank`` and ``scipy.linalg.eigh / eigvalsh / svd / svdvals / pinv / polar``
(operations ``syevd`` and ``gesdd``).

Under ``strategy="eager"`` each call is routed (``Profile.routing``) and emulated (its
products counted in the profile); the results agree with the originals on the same input
(values within ``C n eps ||A||``, vectors through their residuals: their signs are free);
outside the block, and after ``uninstall()``, the original functions run. Under the
default "performant" strategy they run natively on this CPU (no crossover), bit for bit.
"""
import numpy as np
import pytest
import scipy.linalg

import ozlinalg
from ozlinalg.engines.base import CROSSOVER_OPS, get_engine, register_engine
from ozlinalg.engines.sgemm import SGEMMEngine
from ozlinalg.routing import OPS, ROUTES

pytestmark = pytest.mark.usefixtures("one_blas_thread")

EAGER = dict(strategy="eager", min_size=0, native_order=0)
EPS = np.finfo(np.float64).eps
N = 12


def native(mod, name):
    f = getattr(mod, name)
    while getattr(f, "_ozlinalg_shim", False):
        f = f.__wrapped__
    return f


@pytest.fixture
def sym():
    g = np.random.default_rng(21).standard_normal((N, N))
    return g + g.T


@pytest.fixture
def gen():
    return np.random.default_rng(22).standard_normal((N + 3, N))


@pytest.fixture
def uninstalled():
    yield
    ozlinalg.uninstall()


@pytest.fixture
def cpu_crossovers():
    """The NumPy engine replaced by one with the given crossovers; restored after."""
    saved = get_engine(np)

    def use(crossovers):
        eng = SGEMMEngine()
        eng.crossovers = dict(crossovers)
        register_engine("numpy", eng)
        return eng

    yield use
    register_engine("numpy", saved)


def tol(a):
    return 8 * max(a.shape) * EPS * np.linalg.norm(a, 2)


def check_eigh(a, w, v, w_ref):
    assert np.abs(w - w_ref).max() <= tol(a)
    assert np.linalg.norm(a @ v - v * w, 2) <= tol(a)
    assert np.linalg.norm(v.T.conj() @ v - np.eye(a.shape[0]), 2) <= 8 * a.shape[0] * EPS


def check_svd(a, u, s, vh, s_ref):
    k = min(a.shape)
    assert np.abs(s - s_ref).max() <= tol(a)
    assert np.linalg.norm(a - (u[:, :k] * s) @ vh[:k], 2) <= tol(a)


#: (module, name, make the arguments from (sym, gen), check(result, reference, sym, gen))
NUMPY_CALLS = {
    "eigh": (lambda s, g: (s,),
             lambda r, ref, s, g: check_eigh(s, r.eigenvalues, r.eigenvectors, ref[0])),
    "eigvalsh": (lambda s, g: (s,),
                 lambda r, ref, s, g: np.testing.assert_allclose(r, ref, rtol=0, atol=tol(s))),
    "svd": (lambda s, g: (g,), lambda r, ref, s, g: check_svd(g, *r, ref.S)),
    "pinv": (lambda s, g: (g,),
             lambda r, ref, s, g: np.testing.assert_allclose(r, ref, rtol=0, atol=1e-12)),
    "matrix_rank": (lambda s, g: (g,), lambda r, ref, s, g: np.testing.assert_equal(r, ref)),
}
SCIPY_CALLS = {
    "eigh": (lambda s, g: (s,), lambda r, ref, s, g: check_eigh(s, r[0], r[1], ref[0])),
    "eigvalsh": (lambda s, g: (s,),
                 lambda r, ref, s, g: np.testing.assert_allclose(r, ref, rtol=0, atol=tol(s))),
    "svd": (lambda s, g: (g,), lambda r, ref, s, g: check_svd(g, *r, ref[1])),
    "svdvals": (lambda s, g: (g,),
                lambda r, ref, s, g: np.testing.assert_allclose(r, ref, rtol=0, atol=tol(g))),
    "pinv": (lambda s, g: (g,),
             lambda r, ref, s, g: np.testing.assert_allclose(r, ref, rtol=0, atol=1e-12)),
    "polar": (lambda s, g: (g,),
              lambda r, ref, s, g: [np.testing.assert_allclose(x, y, rtol=0, atol=1e-12)
                                    for x, y in zip(r, ref)]),
}
CALLS = [("numpy.linalg", np.linalg, n, *c) for n, c in NUMPY_CALLS.items()] + \
    [("scipy.linalg", scipy.linalg, n, *c) for n, c in SCIPY_CALLS.items()]
OP = {"eigh": "syevd", "eigvalsh": "syevd"}


def ids(c):
    return f"{c[0]}.{c[2]}"


def test_registry_and_ops():
    for name in NUMPY_CALLS:
        assert ROUTES["numpy.linalg"][name] == "ozlinalg.numpy_linalg:" + name
        assert ROUTES["cupy.linalg"][name] == "ozlinalg.numpy_linalg:" + name
    for name in SCIPY_CALLS:
        assert ROUTES["scipy.linalg"][name] == "ozlinalg.linalg:" + name
    for name in (*NUMPY_CALLS, *SCIPY_CALLS):
        assert OPS[name] == OP.get(name, "gesdd")
    assert {"syevd", "gesdd"} <= set(CROSSOVER_OPS)


@pytest.mark.parametrize("call", CALLS, ids=ids)
def test_eager_routes_and_emulates(call, sym, gen):
    modname, mod, name, make, check = call
    args = make(sym, gen)
    ref = native(mod, name)(*args)
    with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
        got = getattr(mod, name)(*args)
    order = min(args[0].shape)
    op = OP.get(name, "gesdd")
    assert [(r.function, r.op, r.order, r.emulated, r.reason) for r in prof.routing] == \
        [(f"{modname}.{name}", op, order, True, "eager")]
    assert prof.routed_emulated == 1
    assert prof.emulated_gemm_calls > 0  # the decomposition's products, in this profile
    assert f"{modname}.{name} (order {order}, {op} on" in prof.summary()
    check(got, ref, sym, gen)
    # outside the block: the original, unrouted, bit for bit
    with ozlinalg.profile() as outside:
        again = getattr(mod, name)(*args)
    assert not outside.routing and outside.emulated_gemm_calls == 0
    for x, y in zip(again if isinstance(again, tuple) else (again,),
                    ref if isinstance(ref, tuple) else (ref,)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("call", CALLS, ids=ids)
def test_performant_runs_natively_on_this_cpu(call, sym, gen):
    modname, mod, name, make, _ = call
    args = make(sym, gen)
    with ozlinalg.backend(), ozlinalg.profile() as prof:
        got = getattr(mod, name)(*args)
    ref = native(mod, name)(*args)
    assert [(r.op, r.emulated, r.reason) for r in prof.routing] == \
        [(OP.get(name, "gesdd"), False, "no crossover (never faster)")]
    assert prof.emulated_gemm_calls == 0
    for x, y in zip(got if isinstance(got, tuple) else (got,),
                    ref if isinstance(ref, tuple) else (ref,)):
        np.testing.assert_array_equal(x, y)


def test_min_size_and_native_order(sym):
    """``min_size`` and ``native_order`` decide under "eager" (below native_order the
    refinement's per-product cost would dominate tiny calls)."""
    with ozlinalg.backend(strategy="eager", min_size=N + 1), ozlinalg.profile() as prof:
        np.linalg.eigh(sym)
    assert [(r.emulated, r.reason) for r in prof.routing] == [(False, f"below min_size {N + 1}")]
    assert prof.emulated_gemm_calls == 0
    with ozlinalg.backend(strategy="eager", min_size=0, native_order=N + 1), \
            ozlinalg.profile() as prof:
        np.linalg.eigh(sym)
        np.linalg.svd(sym)
    assert [(r.emulated, r.reason) for r in prof.routing] == [
        (False, f"order below native_order {N + 1} (per-product cost)")] * 2
    assert prof.emulated_gemm_calls == 0
    with ozlinalg.backend(strategy="eager", min_size=0, native_order=N), \
            ozlinalg.profile() as prof:
        np.linalg.eigh(sym)
        np.linalg.svd(sym)
    assert [r.emulated for r in prof.routing] == [True, True]


def test_performant_follows_the_crossovers(rng, cpu_crossovers):
    cpu_crossovers({"syevd": 16, "gesdd": 24})
    small, big = (rng.standard_normal((n, n)) for n in (10, 20))
    small, big = small + small.T, big + big.T
    with ozlinalg.backend(), ozlinalg.profile() as prof:
        np.linalg.eigvalsh(small)
        np.linalg.eigvalsh(big)
        np.linalg.svd(big, compute_uv=False)
    got = {(r.function, r.order): (r.op, r.emulated, r.reason) for r in prof.routing}
    assert got == {
        ("numpy.linalg.eigvalsh", 10): ("syevd", False, "below crossover 16"),
        ("numpy.linalg.eigvalsh", 20): ("syevd", True, "at or above crossover 16"),
        ("numpy.linalg.svd", 20): ("gesdd", False, "below crossover 24"),
    }
    assert prof.emulated_gemm_calls > 0


def test_stacked_and_single_precision_input(rng):
    a = rng.standard_normal((3, 6, 6)).astype(np.float32)
    a = a + np.swapaxes(a, -1, -2)
    with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
        w = np.linalg.eigvalsh(a)
        r = np.linalg.matrix_rank(a)
    assert prof.routed_emulated == 2 and prof.emulated_gemm_calls > 0
    ref = native(np.linalg, "eigvalsh")(a)
    assert w.dtype == ref.dtype == np.float32 and w.shape == ref.shape
    assert np.abs(w - ref).max() <= 8 * 6 * np.finfo(np.float32).eps * np.abs(ref).max()
    np.testing.assert_array_equal(r, native(np.linalg, "matrix_rank")(a))


def test_unroutable_input_runs_the_original(sym):
    with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
        w16 = None
        with pytest.raises(TypeError):
            w16 = np.linalg.eigvalsh(sym.astype(np.float16))
        m = np.linalg.svd(sym.view(Sub), compute_uv=False)  # a subclass: its own route
    assert w16 is None and not prof.routing and prof.emulated_gemm_calls == 0
    np.testing.assert_array_equal(m, native(np.linalg, "svd")(sym, compute_uv=False))


class Sub(np.ndarray):
    """An ndarray subclass other than np.matrix (which is routed)."""


def test_install_and_uninstall_restore_the_originals(sym, uninstalled):
    originals = {(mod, n): native(mod, n) for mod, names in
                 ((np.linalg, NUMPY_CALLS), (scipy.linalg, SCIPY_CALLS)) for n in names}
    ozlinalg.install(**EAGER)
    names = ozlinalg.backend.installed()
    for mod, n in originals:
        assert f"{mod.__name__}.{n}" in names
        shim = getattr(mod, n)
        assert shim._ozlinalg_shim and shim.__wrapped__ is originals[mod, n]
        assert shim._ozlinalg_op == OP.get(n, "gesdd")
    with ozlinalg.profile() as prof:
        np.linalg.eigvalsh(sym)
    assert prof.routed_emulated == 1
    ozlinalg.uninstall()
    for (mod, n), fn in originals.items():
        assert getattr(mod, n) is fn


def test_wrapper_array_routes_the_spectral_functions(sym):
    x = ozlinalg.asarray(sym)
    with ozlinalg.profile() as prof:
        w, v = np.linalg.eigh(x)
        s = np.linalg.svd(x, compute_uv=False)
        p = np.linalg.pinv(x)
        r = np.linalg.matrix_rank(x)
    assert prof.emulated_gemm_calls > 0
    assert isinstance(w, ozlinalg.OzArray) and isinstance(p, ozlinalg.OzArray)
    check_eigh(sym, np.asarray(w), np.asarray(v), native(np.linalg, "eigvalsh")(sym))
    np.testing.assert_allclose(np.asarray(s), native(np.linalg, "svd")(sym, compute_uv=False),
                               rtol=0, atol=tol(sym))
    np.testing.assert_allclose(np.asarray(p), native(np.linalg, "pinv")(sym), rtol=0,
                               atol=1e-10)
    assert r == N
