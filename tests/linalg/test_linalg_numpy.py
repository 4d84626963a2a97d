"""ozlinalg.numpy_linalg against numpy.linalg (NumPy 2.x semantics, stacked inputs)."""
import numpy as np
import pytest
from conftest import assert_dot_accurate

import ozlinalg
from ozlinalg import numpy_linalg as onl


def npf(name):
    f = getattr(np.linalg, name)
    return f.__wrapped__ if getattr(f, "_ozlinalg_shim", False) else f


def same(x, y, rtol=1e-10, atol=1e-12, fp64=None, values=True):
    """Same structure, types, shapes and dtypes as NumPy's ``y``; values close to ``y``.

    ``fp64`` (given for float32 inputs, which NumPy computes in float32 with an
    error that depends on the BLAS kernel): NumPy's result on the float64 values
    of the same inputs. ozlinalg computes in float64 and rounds once, so its
    values are within one float32 rounding (2**-24 relative) of it beyond the
    FP64 tolerance, or equal to ``y`` where it delegates to NumPy. ``values=False``:
    structure only (the caller judges the values).
    """
    if isinstance(x, tuple):
        assert type(x) is type(y) and len(x) == len(y), (type(x), type(y))
        for i, (u, v) in enumerate(zip(x, y)):
            same(u, v, rtol, atol, None if fp64 is None else fp64[i], values)
        return
    if isinstance(x, int):
        assert x == y
        return
    assert type(x) is type(y), (type(x), type(y))
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
    if not values:
        return
    if fp64 is not None and x.dtype.kind == "f":
        if not np.array_equal(x, y):
            np.testing.assert_allclose(x, np.asarray(fp64), rtol=2.0**-24 + rtol, atol=atol)
        return
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 1, 3, 3)])
def test_square_functions(rng, dtype, shape):
    a = rng.standard_normal(shape) + 4 * np.eye(shape[-1])
    if np.dtype(dtype).kind == "i":
        a = np.round(a * 3)
    a = a.astype(dtype)
    spd = (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)
    b = rng.standard_normal(shape[:-1] + (2,)).astype(dtype)
    bv = b[..., 0] if a.ndim == 2 else b
    single = dtype == np.float32

    def check(name, *args, rtol=1e-10, **kw):
        want = npf(name)(*args, **kw)
        fp64 = npf(name)(*(x.astype(np.float64) for x in args), **kw) if single else None
        same(getattr(onl, name)(*args, **kw), want, rtol=rtol, fp64=fp64)

    check("solve", a, b)
    check("solve", a, bv)
    check("inv", a)
    check("det", a, rtol=1e-9)
    check("slogdet", a)
    check("cholesky", spd)
    check("cholesky", spd, upper=True)


def test_solve_broadcasting_and_vector_rule(rng):
    a = rng.standard_normal((3, 4, 4))
    b = rng.standard_normal(4)  # (M,) is a vector, broadcast over the stack
    same(onl.solve(a, b), npf("solve")(a, b))
    b2 = rng.standard_normal((2, 1, 4, 3))
    same(onl.solve(a, b2), npf("solve")(a, b2))


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5), (2, 6, 3)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r", "raw"])
def test_qr_modes(rng, shape, mode):
    a = rng.standard_normal(shape)
    same(onl.qr(a, mode=mode), npf("qr")(a, mode=mode))


@pytest.mark.parametrize("shape,k", [((7, 3), None), ((7, 3), 2), ((3, 7), 2), ((4, 4), 1)])
def test_lstsq(rng, shape, k):
    a = rng.standard_normal(shape)
    b = rng.standard_normal(shape[0] if k is None else (shape[0], k))
    same(onl.lstsq(a, b), npf("lstsq")(a, b))
    same(onl.lstsq(a, b, rcond=1e-3), npf("lstsq")(a, b, rcond=1e-3))
    a[:, -1] = a[:, 0]  # rank deficient: native fallback, NumPy's output
    same(onl.lstsq(a, b), npf("lstsq")(a, b))


def test_matmul_and_multi_dot(rng):
    a, b, c = (rng.standard_normal(s) for s in [(5, 8), (8, 3), (3, 6)])
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    for x, y in ((a, b), (a32, b32)):  # NumPy's structure and dtype; exact values
        got = onl.matmul(x, y)
        same(got, np.matmul(x, y), values=False)
        assert_dot_accurate(got, x, y)
    ia = np.arange(6).reshape(2, 3)
    same(onl.matmul(ia, ia.T), np.matmul(ia, ia.T))  # integers stay native
    same(onl.multi_dot([a, b, c]), npf("multi_dot")([a, b, c]))
    v = rng.standard_normal(5)
    w = rng.standard_normal(6)
    same(onl.multi_dot([v, a, b, c, w]), npf("multi_dot")([v, a, b, c, w]))
    out = np.empty((5, 6))
    assert onl.multi_dot([a, b, c], out=out) is out
    with ozlinalg.profile() as prof:
        onl.multi_dot([a, b, c])
    assert prof.emulated_gemm_calls == 2


@pytest.mark.parametrize("call", [
    lambda m: m.solve(np.array([[1., 2.], [2., 4.]]), np.ones(2)),
    lambda m: m.inv(np.array([[1., 2.], [2., 4.]])),
    lambda m: m.cholesky(np.array([[1., 2.], [2., 1.]])),
    lambda m: m.inv(np.ones((2, 3))),
    lambda m: m.det(np.ones(3)),
    lambda m: m.qr(np.ones(3)),
    lambda m: m.lstsq(np.ones((3, 2)), np.ones(2)),
    lambda m: m.solve(np.eye(3), np.ones((2, 2))),
])
def test_errors_match_numpy(call):
    with pytest.raises(Exception) as e1:
        call(np.linalg)
    with pytest.raises(Exception) as e2:
        call(onl)
    assert type(e1.value) is type(e2.value) and str(e1.value) == str(e2.value)


def test_singular_slogdet_det():
    a = np.array([[1., 2.], [2., 4.]])
    same(onl.slogdet(a), npf("slogdet")(a))
    assert onl.det(a) == 0.0


@pytest.mark.parametrize("name,args", [
    ("solve", (np.ones((0, 0)), np.ones(0))), ("inv", (np.ones((2, 0, 0)),)),
    ("det", (np.ones((0, 0)),)), ("slogdet", (np.ones((3, 0, 0)),)),
    ("cholesky", (np.ones((0, 0)),)), ("qr", (np.ones((0, 3)),)),
    ("solve", (np.eye(2, dtype=complex), np.ones(2))), ("inv", (np.eye(2, dtype=np.float16),)),
])
def test_edge_cases_are_numpy_own(name, args):
    def run(f):
        try:
            return f(*args)
        except Exception as e:  # noqa: BLE001
            return type(e), str(e)
    r1, r2 = run(getattr(onl, name)), run(npf(name))
    if isinstance(r2, tuple) and isinstance(r2[0], type):
        assert r1 == r2
    else:
        same(r1, r2)


def test_emulated(rng):
    a = rng.standard_normal((8, 8))
    with ozlinalg.profile() as prof:
        onl.solve(a, a[:, 0]), onl.inv(a), onl.det(a), onl.qr(a)
        onl.cholesky(a @ a.T + 8 * np.eye(8)), onl.lstsq(a, a[:, :2])
    assert prof.emulated_gemm_calls >= 6


def test_namespace():
    assert ozlinalg.numpy_linalg is onl
    for n in onl.__all__:
        assert hasattr(onl, n)
        if n != "LinAlgError":
            assert "Notes" in getattr(onl, n).__doc__
