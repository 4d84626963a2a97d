"""``np.matrix`` arguments under the backend: every routed ``numpy.linalg`` and
``scipy.linalg`` function is emulated and returns what the original returns, in
one test body: the same result types (NumPy passes some results through the
input's ``__array_wrap__``, so ``eigh``'s vectors come back as a matrix and its
values do not; SciPy returns plain ndarrays), shapes, dtypes and values within
``C n eps cond``. ``multi_dot`` stays native on matrices (NumPy's ``dot`` on the
subclass decides its type)."""
import numpy as np
import pytest
import scipy.linalg

import ozlinalg
from ozlinalg.routing import ROUTES

pytestmark = [pytest.mark.usefixtures("one_blas_thread"),
              pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

N = 24
EPS = np.finfo(np.float64).eps
EAGER = dict(strategy="eager", min_size=0, native_order=0)


def _native(mod, name):
    f = getattr(mod, name)
    while getattr(f, "_ozlinalg_shim", False):
        f = f.__wrapped__
    return f


@pytest.fixture(scope="module")
def mats():
    rng = np.random.default_rng(30)
    g = rng.standard_normal((N, N))
    spd = g @ g.T + N * np.eye(N)
    return dict(m=np.matrix(spd), g=np.matrix(rng.standard_normal((N + 5, N))),
                b=np.matrix(rng.standard_normal((N, 3))),
                bt=np.matrix(rng.standard_normal((N + 5, 3))),
                t=np.matrix(np.triu(spd)), nd=spd)


NUMPY_ARGS = {
    "solve": lambda d: (d["m"], d["b"]),
    "inv": lambda d: (d["m"],),
    "det": lambda d: (d["m"],),
    "slogdet": lambda d: (d["m"],),
    "cholesky": lambda d: (d["m"],),
    "qr": lambda d: (d["g"],),
    "lstsq": lambda d: (d["g"], d["bt"]),
    "multi_dot": lambda d: ([d["m"], d["m"], d["b"]],),
    "eigh": lambda d: (d["m"],),
    "eigvalsh": lambda d: (d["m"],),
    "svd": lambda d: (d["g"],),
    "pinv": lambda d: (d["g"],),
    "matrix_rank": lambda d: (d["g"],),
}
SCIPY_ARGS = {
    "lu_factor": lambda d: (d["m"],),
    "lu_solve": lambda d: (scipy.linalg.lu_factor(d["nd"]), d["b"]),
    "lu": lambda d: (d["m"],),
    "cho_factor": lambda d: (d["m"],),
    "cho_solve": lambda d: (scipy.linalg.cho_factor(d["nd"]), d["b"]),
    "cholesky": lambda d: (d["m"],),
    "qr": lambda d: (d["g"],),
    "solve": lambda d: (d["m"], d["b"]),
    "solve_triangular": lambda d: (d["t"], d["b"]),
    "inv": lambda d: (d["m"],),
    "det": lambda d: (d["m"],),
    "lstsq": lambda d: (d["g"], d["bt"]),
    "eigh": lambda d: (d["m"],),
    "eigvalsh": lambda d: (d["m"],),
    "svd": lambda d: (d["g"],),
    "svdvals": lambda d: (d["g"],),
    "pinv": lambda d: (d["g"],),
    "polar": lambda d: (d["g"],),
}
#: keywords: U's columns beyond min(m, n) are any basis of a complement, not comparable
KWARGS = {"svd": dict(full_matrices=False)}
CALLS = [(np.linalg, "numpy.linalg", n, f) for n, f in NUMPY_ARGS.items()] + \
    [(scipy.linalg, "scipy.linalg", n, f) for n, f in SCIPY_ARGS.items()]


def test_every_route_is_covered():
    assert set(NUMPY_ARGS) == set(ROUTES["numpy.linalg"])
    assert set(SCIPY_ARGS) == {n for n, t in ROUTES["scipy.linalg"].items()
                               if isinstance(t, str)}


def _leaves(r):
    return [x for y in r for x in _leaves(y)] if isinstance(r, tuple) else [r]


@pytest.mark.parametrize("call", CALLS, ids=lambda c: f"{c[1]}.{c[2]}")
def test_matrix_in_same_types_out(call, mats):
    mod, modname, name, make = call
    args = make(mats)
    before = [np.array(a, copy=True) for a in args if isinstance(a, np.ndarray)]
    kw = KWARGS.get(name, {})
    ref = _native(mod, name)(*args, **kw)
    with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
        got = getattr(mod, name)(*args, **kw)
    # the inputs are untouched, and keep their type
    after = [a for a in args if isinstance(a, np.ndarray)]
    for x, y in zip(before, after):
        np.testing.assert_array_equal(x, y)
    assert [(r.function, r.emulated) for r in prof.routing] == \
        [(f"{modname}.{name}", True)]
    if name == "multi_dot":
        assert prof.emulated_gemm_calls == 0
    else:
        assert prof.emulated_gemm_calls > 0
    assert type(got) is type(ref)
    cond = np.linalg.cond(mats["nd"]) * np.linalg.cond(np.asarray(mats["g"]))
    for x, y in zip(_leaves(got), _leaves(ref)):
        assert type(x) is type(y)
        if not isinstance(y, np.ndarray):
            assert np.isclose(x, y, rtol=64 * N * EPS * cond, atol=0) if isinstance(
                y, (float, np.floating)) else x == y
            continue
        assert x.shape == y.shape and x.dtype == y.dtype
        # eigen / singular vectors: signs are free
        scale = max(np.abs(y).max(), 1.0)
        np.testing.assert_allclose(np.abs(np.asarray(x)), np.abs(np.asarray(y)), rtol=0,
                                   atol=64 * N * EPS * cond * scale)
