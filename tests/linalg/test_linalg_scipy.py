"""ozlinalg.linalg against scipy.linalg 1.17 over SciPy's own kinds of cases.

Sizes are small and ``min_size=0`` (the default) with the block size chosen
by ozlinalg.linalg, so every matrix of order >= 2 has emulated updates.
"""
import inspect
import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import ozlinalg
import ozlinalg.linalg as ol

NAMES = ["lu_factor", "lu_solve", "lu", "cho_factor", "cho_solve", "cholesky", "qr",
         "solve", "solve_triangular", "inv", "det", "lstsq"]
DTYPES = [np.float64, np.float32, np.int64]


def _orig(f):
    return getattr(f, "__wrapped__", f) if getattr(f, "_ozlinalg_shim", False) else f


def sp(name):
    return _orig(getattr(sl, name))


def upcast(args):
    """``args`` with float32 arrays in float64: the same values, for SciPy's FP64 reference."""
    if isinstance(args, (tuple, list)):
        return type(args)(upcast(a) for a in args)
    if isinstance(args, np.ndarray) and args.dtype == np.float32:
        return args.astype(np.float64)
    return args


def assert_same(x, y, rtol=1e-10, atol=1e-12, fp64=None):
    """Same structure, types, shapes, dtypes as SciPy's ``y``; values close to ``y``.

    ``fp64`` (given for float32 inputs): SciPy computes those in float32 (an
    error that depends on the BLAS kernel), ozlinalg in float64, rounding a
    float32 result once. The values are then judged against ``fp64``, SciPy's
    result on the float64 values of the same inputs: within one float32
    rounding (2**-24 relative) beyond the FP64 tolerance; or equal to ``y`` bit
    for bit, where ozlinalg delegates the call to SciPy.
    """
    if isinstance(x, (tuple, list)):
        assert type(x) is type(y) and len(x) == len(y), (type(x), type(y))
        for i, (u, v) in enumerate(zip(x, y)):
            assert_same(u, v, rtol, atol, None if fp64 is None else fp64[i])
        return
    if x is None or isinstance(x, (bool, int)):
        assert x == y
        return
    assert type(x) is type(y), (type(x), type(y))
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
    if fp64 is not None and x.dtype.kind == "f":
        if not np.array_equal(x, y):
            np.testing.assert_allclose(x, np.asarray(fp64), rtol=2.0**-24 + rtol, atol=atol)
        return
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def _mat(rng, n, m=None, dtype=np.float64, order="C", kind="gen"):
    m = n if m is None else m
    a = rng.standard_normal((n, m))
    if kind == "spd":
        a = a @ a.T + n * np.eye(n)
    if np.dtype(dtype).kind == "i":
        a = np.round(a * 3)
        if kind == "gen":
            a += 10 * np.eye(n, m)
    return np.asarray(a, dtype=dtype, order=order)


#: Keyword-only parameters ozlinalg adds (docs/backend.md, deliberate differences).
EXTRA_KEYWORDS = {"solve": ("refine",)}


@pytest.mark.parametrize("name", NAMES)
def test_signature_matches_scipy(name):
    sig = inspect.signature(getattr(ol, name))
    extra = EXTRA_KEYWORDS.get(name, ())
    for p in extra:
        assert sig.parameters[p].kind is inspect.Parameter.KEYWORD_ONLY
    sig = sig.replace(parameters=[p for n, p in sig.parameters.items() if n not in extra])
    assert sig == inspect.signature(sp(name))
    assert "Notes" in getattr(ol, name).__doc__


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_factorizations_match_scipy(rng, dtype, order, n):
    a = _mat(rng, n, dtype=dtype, order=order)
    spd = _mat(rng, n, dtype=dtype, order=order, kind="spd")
    b = _mat(rng, n, 2, dtype=dtype, order=order)
    cases = [
        ("lu_factor", (a,), {}), ("lu", (a,), {}), ("lu", (a,), {"permute_l": True}),
        ("lu", (a,), {"p_indices": True}),
        ("cholesky", (spd,), {}), ("cholesky", (spd,), {"lower": True}),
        ("qr", (a,), {}), ("qr", (a,), {"mode": "r"}), ("qr", (a,), {"mode": "economic"}),
        ("qr", (a,), {"mode": "raw"}),
        ("solve", (a, b), {}), ("solve", (a, b[:, 0]), {}), ("solve", (a, b), {"transposed": True}),
        ("solve", (spd, b), {"assume_a": "pos"}), ("solve", (spd, b), {"assume_a": "sym"}),
        ("solve", (spd, b), {"assume_a": "positive definite", "lower": True}),
        ("solve", (np.tril(a), b), {"assume_a": "lower triangular"}),
        ("solve", (np.triu(a), b), {}),
        ("solve_triangular", (a, b), {"lower": True}),
        ("solve_triangular", (a, b[:, 0]), {"trans": "T", "unit_diagonal": True}),
        ("inv", (a,), {}), ("inv", (spd,), {"assume_a": "pos"}), ("det", (a,), {}),
        ("lstsq", (a, b), {}),
    ]
    single = dtype == np.float32
    for name, args, kw in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sl.LinAlgWarning)
            assert_same(getattr(ol, name)(*args, **kw), sp(name)(*args, **kw),
                        fp64=sp(name)(*upcast(args), **kw) if single else None)
    # The solves with ozlinalg's own (float32: rounded) factors; FP64 reference: SciPy's
    # solve with those factors' values
    c = ol.cho_factor(spd)
    assert_same(ol.cho_solve(c, b), sp("cho_solve")(sp("cho_factor")(spd), b),
                fp64=sp("cho_solve")(upcast(c), upcast(b)) if single else None)
    f = ol.lu_factor(a)
    for trans in (0, 1, 2):
        assert_same(ol.lu_solve(f, b, trans=trans),
                    sp("lu_solve")(sp("lu_factor")(a), b, trans=trans),
                    fp64=sp("lu_solve")(upcast(f), upcast(b), trans=trans) if single else None)


@pytest.mark.parametrize("shape", [(7, 4), (4, 7)])
def test_rectangular(rng, shape):
    a = rng.standard_normal(shape)
    b = rng.standard_normal((shape[0], 3))
    for mode in ("full", "r", "economic", "raw"):
        assert_same(ol.qr(a, mode=mode), sp("qr")(a, mode=mode))
    assert_same(ol.lu(a), sp("lu")(a))
    assert_same(ol.lu_factor(a), sp("lu_factor")(a))
    assert_same(ol.lstsq(a, b), sp("lstsq")(a, b))
    assert_same(ol.lstsq(a, b[:, 0]), sp("lstsq")(a, b[:, 0]))
    x, res, rank, s = ol.lstsq(a, b, lapack_driver="gelsy")
    assert s is None and res.shape == (0,)


def test_lstsq_rank_deficient_delegates(rng):
    a = rng.standard_normal((6, 3))
    a[:, 2] = a[:, 0] + a[:, 1]
    b = rng.standard_normal(6)
    assert_same(ol.lstsq(a, b), sp("lstsq")(a, b), rtol=1e-8, atol=1e-10)
    assert ol.lstsq(a, b)[2] == 2


def test_batched_like_scipy(rng):
    a = rng.standard_normal((3, 2, 4, 4))
    b = rng.standard_normal((2, 4, 3))
    assert_same(ol.solve(a, b), sp("solve")(a, b))
    assert_same(ol.inv(a), sp("inv")(a))
    assert_same(ol.det(a), sp("det")(a))
    assert_same(ol.lu_factor(a), sp("lu_factor")(a))
    assert_same(ol.lu(a), sp("lu")(a))
    assert_same(ol.qr(a), sp("qr")(a))
    spd = a @ np.swapaxes(a, -1, -2) + 4 * np.eye(4)
    assert_same(ol.cholesky(spd), sp("cholesky")(spd))
    assert_same(ol.solve_triangular(a, b[0], lower=True), sp("solve_triangular")(a, b[0],
                                                                               lower=True))


@pytest.mark.parametrize("name,args", [
    ("lu_factor", ((0, 0),)), ("lu_factor", ((3, 0),)), ("lu", ((0, 3),)),
    ("cholesky", ((0, 0),)), ("cho_factor", ((0, 0),)), ("qr", ((0, 0),)), ("qr", ((3, 0),)),
    ("solve", ((0, 0), (0,))), ("solve", ((0, 0), (0, 2))), ("inv", ((0, 0),)),
    ("det", ((0, 0),)), ("solve_triangular", ((0, 0), (0,))), ("lstsq", ((0, 2), (0,))),
    ("lstsq", ((3, 0), (3,))),
])
def test_empty_inputs(name, args):
    arrs = [np.ones(s) for s in args]
    assert_same(getattr(ol, name)(*arrs), sp(name)(*arrs))


def test_one_by_one():
    a = np.array([[4.0]])
    b = np.array([2.0])
    for name, args in [("lu_factor", (a,)), ("lu", (a,)), ("cholesky", (a,)), ("qr", (a,)),
                       ("solve", (a, b)), ("inv", (a,)), ("det", (a,)), ("lstsq", (a, b)),
                       ("solve_triangular", (a, b))]:
        assert_same(getattr(ol, name)(*args), sp(name)(*args))


def test_inputs_not_modified_unless_overwrite(rng):
    a = _mat(rng, 6, order="F")
    spd = _mat(rng, 6, order="F", kind="spd")
    b = _mat(rng, 6, 2, order="F")
    a0, spd0, b0 = a.copy(), spd.copy(), b.copy()
    ol.lu_factor(a), ol.lu(a), ol.qr(a), ol.inv(a), ol.det(a), ol.lstsq(a, b)
    ol.cholesky(spd), ol.cho_factor(spd), ol.solve(a, b), ol.solve_triangular(a, b)
    ol.cho_solve(ol.cho_factor(spd), b), ol.lu_solve(ol.lu_factor(a), b)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(spd, spd0)
    np.testing.assert_array_equal(b, b0)
    # with overwrite allowed the results are still right
    lu1, piv1 = ol.lu_factor(a.copy(order="F"), overwrite_a=True)
    assert_same((lu1, piv1), sp("lu_factor")(a0))
    x = ol.lu_solve((lu1, piv1), b.copy(order="F"), overwrite_b=True)
    assert_same(x, sp("solve")(a0, b0))
    assert_same(ol.cholesky(spd.copy(order="F"), overwrite_a=True), sp("cholesky")(spd0))


@pytest.mark.parametrize("name,nargs", [("lu_factor", 1), ("lu", 1), ("cholesky", 1),
                                        ("cho_factor", 1), ("qr", 1), ("solve", 2),
                                        ("solve_triangular", 2), ("inv", 1), ("det", 1),
                                        ("lstsq", 2)])
def test_check_finite(name, nargs):
    a = np.eye(3)
    a[1, 1] = np.nan
    args = (a, np.ones(3))[:nargs]
    with pytest.raises(ValueError, match="array must not contain infs or NaNs"):
        sp(name)(*args)
    with pytest.raises(ValueError, match="array must not contain infs or NaNs"):
        getattr(ol, name)(*args)
    if name not in ("cholesky", "cho_factor", "det", "lstsq"):  # LAPACK behaviour on NaN differs
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sl.LinAlgWarning)
            getattr(ol, name)(*args, check_finite=False)  # no validation error


def _msg(f, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sl.LinAlgWarning)
        with pytest.raises(Exception) as ei:
            f(*args, **kw)
    return type(ei.value), str(ei.value)


@pytest.mark.parametrize("name,args,kw", [
    ("solve", ([[1., 2.], [2., 4.]], [1., 2.]), {}),
    ("solve", ([[1., 2.], [2., 1.]], [1., 2.]), {"assume_a": "pos"}),
    ("solve", ([[1., 2.], [0., 0.]], [1., 2.]), {"assume_a": "upper triangular"}),
    ("solve", (np.eye(3), [1., 2.]), {}),
    ("solve", (np.ones((3, 2)), [1., 2.]), {}),
    ("solve", (np.eye(2), [1., 2.]), {"assume_a": "foo"}),
    ("inv", ([[1., 2.], [2., 4.]],), {}),
    ("inv", (np.ones((2, 3)),), {}),
    ("inv", (np.ones(3),), {}),
    ("det", (np.ones(3),), {}),
    ("det", (np.ones((2, 3)),), {}),
    ("cholesky", ([[1., 2.], [2., 1.]],), {}),
    ("cholesky", (np.ones((2, 3)),), {}),
    ("cholesky", (np.ones(3),), {}),
    ("cho_factor", ([[1., 2.], [2., 1.]],), {}),
    ("qr", (np.eye(2),), {"mode": "bogus"}),
    ("qr", (np.ones(3),), {}),
    ("solve_triangular", ([[1., 0.], [1., 0.]], [1., 2.]), {"lower": True}),
    ("solve_triangular", (np.eye(3), [1., 2.]), {}),
    ("solve_triangular", (np.ones((2, 3)), [1., 2.]), {}),
    ("lu_solve", ((np.eye(3), np.arange(3, dtype=np.int32)), [1., 2.]), {}),
    ("cho_solve", ((np.eye(3), False), [1., 2.]), {}),
    ("cho_solve", ((np.ones((2, 3)), False), [1., 2.]), {}),
    ("lstsq", (np.ones(3), [1., 2., 3.]), {}),
    ("lstsq", (np.ones((3, 2)), [1., 2.]), {}),
    ("lstsq", (np.ones((3, 2)), [1., 2., 3.]), {"lapack_driver": "nope"}),
])
def test_errors_match_scipy(name, args, kw):
    args = tuple(np.asarray(x) if isinstance(x, list) else x for x in args)
    assert _msg(getattr(ol, name), *args, **kw) == _msg(sp(name), *args, **kw)


OBJ_A = np.array([[3, 2], [1, -1]], dtype=object)
OBJ_B = np.array([2, 4], dtype=object)


@pytest.mark.parametrize("args,kw", [
    ((OBJ_A, OBJ_B), {}),
    ((OBJ_A.astype(float), OBJ_B), {}),  # b alone
    ((OBJ_A, OBJ_B), {"check_finite": False}),
    ((OBJ_A, OBJ_B), {"assume_a": "pos"}),
    ((OBJ_A, OBJ_B), {"assume_a": "banded"}),  # SciPy's own path
    ((OBJ_A.tolist(), OBJ_B.tolist()), {}),  # nested lists of ints: no object array
])
def test_solve_on_object_arrays_as_scipy(args, kw):
    # SciPy's solve validates with _asarray_validated: ValueError("object arrays are not
    # supported"), not the TypeError of numpy.linalg; the top-level ozlinalg.solve too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sl.LinAlgWarning)
        try:
            want = sp("solve")(*args, **kw)
        except Exception as e:  # noqa: BLE001 (the verdict to match)
            want = e
    for f in (ozlinalg.solve, ol.solve):
        if isinstance(want, Exception):
            assert _msg(f, *args, **kw) == (type(want), str(want)), f
        else:
            np.testing.assert_allclose(f(*args, **kw), want, rtol=1e-14)
    if isinstance(want, Exception):
        assert (type(want), str(want)) == (ValueError, "object arrays are not supported")


@pytest.mark.parametrize("name,args", [
    ("solve_triangular", (np.triu(OBJ_A), OBJ_B)), ("inv", (OBJ_A,)),
    ("lstsq", (OBJ_A, OBJ_B)), ("det", (OBJ_A,)),
])
def test_object_arrays_elsewhere_as_scipy(name, args):
    # solve_triangular, inv, lstsq: SciPy's ValueError; det casts first, a TypeError
    # there as here (ozlinalg's message is its own)
    got, want = _msg(getattr(ol, name), *args), _msg(sp(name), *args)
    assert got[0] is want[0] is (TypeError if name == "det" else ValueError)
    if name != "det":
        assert got == want == (ValueError, "object arrays are not supported")


def test_ill_conditioned_warning():
    a = np.array([[1.0, 2.0], [3.0, 4.0 + 1e-15]]) * np.array([1.0, 1e-17])
    with pytest.warns(sl.LinAlgWarning, match="An ill-conditioned matrix detected"):
        sp("solve")(a, np.ones(2))
    with pytest.warns(sl.LinAlgWarning, match="An ill-conditioned matrix detected"):
        ol.solve(a, np.ones(2))
    with pytest.warns(sl.LinAlgWarning, match="exactly zero"):
        ol.lu_factor(np.array([[1.0, 2.0], [2.0, 4.0]]))


def test_batched_singular_message():
    # SciPy 1.17 numbers the failing slices by their position among the
    # failures ([0] here); ozlinalg reports the slice index itself ([1]).
    a = np.stack([np.eye(2), np.zeros((2, 2)), np.eye(2)])
    t1, m1 = _msg(ol.solve, a, np.ones((3, 2, 1)))
    t2, m2 = _msg(sp("solve"), a, np.ones((3, 2, 1)))
    assert t1 is t2 and m1.split(":")[0] == m2.split(":")[0]
    assert m1 == "A singular matrix detected: slice(s) [1] are singular."


def test_extended_precision_is_rejected():
    # complex64 / complex128 are supported (tests/linalg/test_complex_factorizations.py)
    with pytest.raises(TypeError, match="unsupported dtype"):
        ol.solve(np.eye(2, dtype=np.clongdouble), np.ones(2))


def test_qr_pivoting_delegates(rng):
    a = rng.standard_normal((5, 4))
    assert_same(ol.qr(a, pivoting=True), sp("qr")(a, pivoting=True))


# counts below auto's on purpose (this tests the options): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
def test_emulated_and_options_passed_through(rng):
    a = rng.standard_normal((12, 12))
    spd = a @ a.T + 12 * np.eye(12)
    for f, args in [(ol.lu_factor, (a,)), (ol.cholesky, (spd,)), (ol.qr, (a,)),
                    (ol.solve, (a, a[:, 0])), (ol.lstsq, (a, a[:, :2]))]:
        with ozlinalg.options(method="bitmask-ef", slices=9), ozlinalg.profile() as prof:
            f(*args)
        assert prof.emulated_gemm_calls > 0, f.__name__
        assert set(prof.methods) == {"bitmask-ef"} and set(prof.slices) == {9}
    # min_size is the order below which the whole call is native
    with ozlinalg.options(min_size=64), ozlinalg.profile() as prof:
        ol.lu_factor(a)
    assert prof.emulated_gemm_calls == 0


def test_top_level_solve(rng):
    a = rng.standard_normal((8, 8))
    b = rng.standard_normal(8)
    # ozlinalg.solve is the namespace's solve with refine="auto" (tests/linalg/test_refine.py)
    assert inspect.signature(ozlinalg.solve).parameters["refine"].default == "auto"
    np.testing.assert_allclose(ozlinalg.solve(a, b), np.linalg.solve(a, b), rtol=1e-10)
    assert ol.matmul is ozlinalg.matmul


def test_accuracy_matches_lapack_on_ill_conditioned(rng):
    # kappa ~ 1e10: the emulated solve keeps LAPACK's backward error level
    n = 24
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = (u * np.logspace(0, -10, n)) @ v.T
    b = rng.standard_normal(n)
    x = ol.solve(a, b)
    xr = sp("solve")(a, b)
    res = np.linalg.norm(a @ x - b) / (np.linalg.norm(a) * np.linalg.norm(x))
    res_ref = np.linalg.norm(a @ xr - b) / (np.linalg.norm(a) * np.linalg.norm(xr))
    assert res < 20 * max(res_ref, 1e-16)
