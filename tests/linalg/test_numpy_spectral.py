"""ozlinalg.numpy_linalg's spectral functions (eigh, eigvalsh, svd, pinv, matrix_rank)
against numpy.linalg on the same inputs.

Tolerances come from the problem, never from a machine: eigenvalues and singular values
within ``C * n * eps * ||A||_2`` of NumPy's (Weyl: both are backward stable, NumPy at
its dtype's precision, so ``eps`` is the input dtype's); eigen- and singular vectors,
unique only up to a sign (a phase), through the residual ``||A V - V diag(w)||_2`` and
``||V^H V - I||_2`` instead of entry by entry; the pseudo-inverse within
``C * n * eps * kappa`` of NumPy's. Types, shapes, dtypes, memory order and errors are
NumPy's exactly.
"""
import numpy as np
import pytest

import ozlinalg
from ozlinalg import numpy_linalg as onl

pytestmark = pytest.mark.usefixtures("one_blas_thread")

DTYPES = (np.float32, np.float64, np.complex64, np.complex128, np.int64)
ORDERS = ("C", "F", "strided")
SIZES = (0, 1, 2, 3, 17, 64)
C = 8  # the constant of the tolerances C * n * eps


def npf(name):
    """NumPy's own function (not a backend shim)."""
    f = getattr(np.linalg, name)
    while getattr(f, "_ozlinalg_shim", False):
        f = f.__wrapped__
    return f


def eps_of(dtype):
    dt = np.dtype(dtype)
    return np.finfo(np.float32 if dt in (np.float32, np.complex64) else np.float64).eps


def lay(x, order):
    """``x`` in C or F order, or a non-contiguous view (every other entry of a larger array)."""
    if order == "C":
        return np.ascontiguousarray(x)
    if order == "F":
        return np.asfortranarray(x)
    parent = np.zeros(x.shape[:-2] + (2 * x.shape[-2], 2 * x.shape[-1]), dtype=x.dtype)
    parent[..., ::2, ::2] = x
    view = parent[..., ::2, ::2]
    assert not view.flags.c_contiguous or x.size <= 1
    return view


def draw(rng, shape, dtype, kind="gen"):
    """A matrix (stack) in ``dtype``: 'herm' Hermitian (symmetric), 'gen' general;
    integers small, so that every dtype sees a well-posed problem."""
    dt = np.dtype(dtype)
    x = rng.standard_normal(shape)
    if dt.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    if dt.kind == "i":
        x = np.round(4 * x)
    if kind == "herm":
        x = x + np.swapaxes(x.conj(), -1, -2)
    return x.astype(dt)


def exact(a):
    """The float64 / complex128 values of ``a`` (what a tolerance is measured on)."""
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def norm2(a):
    """Largest 2-norm of the matrices of the stack (1 for an empty one)."""
    a = exact(a)
    if a.size == 0:
        return 1.0
    return float(np.max(np.linalg.norm(a, 2, axis=(-2, -1))))


def assert_like(got, ref):
    """Same structure (result class, tuple length), shapes, dtypes and memory order."""
    if isinstance(ref, tuple):
        assert type(got) is type(ref), (type(got), type(ref))
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            assert_like(g, r)
        return
    assert type(got) is type(ref), (type(got), type(ref))
    if isinstance(ref, np.ndarray):
        assert got.shape == ref.shape and got.dtype == ref.dtype, \
            (got.shape, ref.shape, got.dtype, ref.dtype)
        assert (got.flags.c_contiguous, got.flags.f_contiguous) == \
            (ref.flags.c_contiguous, ref.flags.f_contiguous)


def assert_same_error(call_got, call_ref):
    """Both raise, the same type and message."""
    with pytest.raises(Exception) as ref:  # noqa: PT011 (NumPy's own type, compared)
        call_ref()
    with pytest.raises(type(ref.value)) as got:
        call_got()
    assert str(got.value) == str(ref.value)


def assert_values_close(w, w_ref, a, k=None):
    """|w - w_ref| <= C n eps ||A||_2 (eps of `a`'s dtype; n = order, or `k`)."""
    n = max(k if k is not None else a.shape[-1], 1)
    tol = C * n * eps_of(a.dtype) * norm2(a)
    err = float(np.abs(exact(w) - exact(w_ref)).max()) if w.size else 0.0
    assert err <= tol, (err, tol)


def assert_orthonormal_columns(v, dtype):
    v = exact(v)
    if v.size == 0:
        return
    k = v.shape[-1]
    g = np.swapaxes(v.conj(), -1, -2) @ v - np.eye(k)
    err = float(np.max(np.linalg.norm(g, 2, axis=(-2, -1))))
    assert err <= C * max(v.shape[-2], 1) * eps_of(dtype), err


def assert_eigenpairs(a_full, w, v, dtype):
    """||A V - V diag(w)||_2 <= C n eps ||A||_2, and V orthonormal."""
    a64, w64, v64 = exact(a_full), exact(w), exact(v)
    r = a64 @ v64 - v64 * w64[..., None, :]
    n = max(a_full.shape[-1], 1)
    err = float(np.max(np.linalg.norm(r, 2, axis=(-2, -1)))) if r.size else 0.0
    assert err <= C * n * eps_of(dtype) * norm2(a_full), err
    assert_orthonormal_columns(v, dtype)


def hermitian_of(a, uplo):
    """The Hermitian matrix NumPy decomposes: `a`'s lower (upper) triangle, real diagonal."""
    a = exact(a)
    t = np.tril(a) if uplo == "L" else np.triu(a)
    d = np.real(np.diagonal(a, axis1=-2, axis2=-1))
    full = t + np.swapaxes(t.conj(), -1, -2)
    idx = np.arange(a.shape[-1])
    full[..., idx, idx] = d
    return full


GRID = [(dt, order, n) for dt in DTYPES for order in ORDERS for n in SIZES
        if n < 64 or (order == "C" and dt in (np.float64, np.complex128))]


def gid(p):
    return f"{np.dtype(p[0]).name}-{p[1]}-{p[2]}"


class TestEigh:
    @pytest.mark.parametrize("case", GRID, ids=gid)
    def test_grid(self, case):
        dtype, order, n = case
        rng = np.random.default_rng([11, n, DTYPES.index(dtype), ORDERS.index(order)])
        a = lay(draw(rng, (n, n), dtype, "herm"), order)
        ref = npf("eigh")(a)
        got = onl.eigh(a)
        assert_like(got, ref)
        assert_values_close(got.eigenvalues, ref.eigenvalues, a)
        assert_eigenpairs(a, got.eigenvalues, got.eigenvectors, dtype)
        assert np.all(np.diff(got.eigenvalues) >= 0)

    @pytest.mark.parametrize("uplo", ["L", "U", "l", "u"])
    @pytest.mark.parametrize("dtype", [np.float64, np.complex128])
    def test_only_the_named_triangle_is_read(self, uplo, dtype):
        rng = np.random.default_rng(3)
        a = draw(rng, (6, 6), dtype)  # not Hermitian: the other triangle is garbage
        ref = npf("eigh")(a, UPLO=uplo)
        got = onl.eigh(a, UPLO=uplo)
        assert_like(got, ref)
        full = hermitian_of(a, uplo.upper())
        assert_values_close(got.eigenvalues, ref.eigenvalues, full)
        assert_eigenpairs(full, got.eigenvalues, got.eigenvectors, dtype)

    @pytest.mark.parametrize("shape", [(2, 3, 5, 5), (3, 1, 4, 4), (0, 3, 3), (2, 0, 0)])
    @pytest.mark.parametrize("dtype", [np.float32, np.complex128])
    def test_stacks(self, shape, dtype):
        a = draw(np.random.default_rng(5), shape, dtype, "herm")
        ref = npf("eigh")(a)
        got = onl.eigh(a)
        assert_like(got, ref)
        assert_values_close(got.eigenvalues, ref.eigenvalues, a)
        assert_eigenpairs(a, got.eigenvalues, got.eigenvectors, dtype)

    def test_result_class_is_numpys(self):
        got = onl.eigh(np.eye(2))
        assert type(got) is type(npf("eigh")(np.eye(2)))
        assert got.eigenvalues is got[0] and got.eigenvectors is got[1]

    def test_emulated_products_show_in_the_profile(self):
        a = draw(np.random.default_rng(1), (12, 12), np.float64, "herm")
        with ozlinalg.profile() as prof:
            onl.eigh(a)
        assert prof.emulated_gemm_calls > 0 and prof.routing == {}

    @pytest.mark.parametrize("fn", ["eigh", "eigvalsh"])
    @pytest.mark.parametrize("a, kw", [
        (np.ones(3), {}), (np.array(2.0), {}), (np.ones((2, 3)), {}), (np.ones((3, 3, 2)), {}),
        (np.eye(2, dtype=np.float16), {}), (np.eye(2, dtype=np.longdouble), {}),
        (np.eye(2, dtype=object), {}), (np.eye(2), {"UPLO": "X"}), (np.eye(2), {"UPLO": 1}),
    ], ids=lambda x: str(getattr(x, "shape", x)))
    def test_errors_are_numpys(self, fn, a, kw):
        assert_same_error(lambda: getattr(onl, fn)(a, **kw), lambda: npf(fn)(a, **kw))

    @pytest.mark.parametrize("bad", [np.nan, np.inf])
    @pytest.mark.parametrize("fn", ["eigh", "eigvalsh"])
    def test_non_finite_input_gives_numpys_result(self, fn, bad):
        a = draw(np.random.default_rng(2), (4, 4), np.float64, "herm")
        a[2, 1] = a[1, 2] = bad
        with np.errstate(all="ignore"):
            try:
                ref = npf(fn)(a)
            except np.linalg.LinAlgError as e:
                with pytest.raises(np.linalg.LinAlgError, match=str(e)):
                    getattr(onl, fn)(a)
                return
            got = getattr(onl, fn)(a)
        for g, r in zip(got if isinstance(got, tuple) else (got,),
                        ref if isinstance(ref, tuple) else (ref,)):
            np.testing.assert_array_equal(g, r)


class TestEigvalsh:
    @pytest.mark.parametrize("case", GRID, ids=gid)
    def test_grid(self, case):
        dtype, order, n = case
        rng = np.random.default_rng([12, n, DTYPES.index(dtype), ORDERS.index(order)])
        a = lay(draw(rng, (n, n), dtype, "herm"), order)
        ref = npf("eigvalsh")(a)
        got = onl.eigvalsh(a)
        assert_like(got, ref)
        assert_values_close(got, ref, a)

    @pytest.mark.parametrize("uplo", ["L", "U"])
    def test_stack_and_triangle(self, uplo):
        a = draw(np.random.default_rng(4), (3, 2, 5, 5), np.complex64)
        ref = npf("eigvalsh")(a, uplo)
        got = onl.eigvalsh(a, uplo)
        assert_like(got, ref)
        assert_values_close(got, ref, hermitian_of(a, uplo))
        np.testing.assert_allclose(got, onl.eigh(a, uplo).eigenvalues, rtol=0,
                                   atol=C * 5 * eps_of(a.dtype) * norm2(hermitian_of(a, uplo)))


SHAPES = [(0, 0), (1, 1), (2, 2), (3, 3), (3, 2), (2, 5), (17, 17), (17, 5), (5, 17),
          (64, 64), (64, 17)]


class TestSvd:
    @pytest.mark.parametrize("order", ORDERS)
    @pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
    @pytest.mark.parametrize("shape", SHAPES, ids=str)
    def test_grid(self, shape, dtype, order):
        if min(shape) >= 64 and (order != "C" or dtype not in (np.float64, np.complex128)):
            pytest.skip("the largest order: two dtypes, C order (the suite's time)")
        rng = np.random.default_rng([13, *shape, DTYPES.index(dtype), ORDERS.index(order)])
        a = lay(draw(rng, shape, dtype), order)
        k = min(shape)
        for full in (True, False):
            ref = npf("svd")(a, full_matrices=full)
            got = onl.svd(a, full_matrices=full)
            assert_like(got, ref)
            assert_values_close(got.S, ref.S, a, k=max(shape))
            assert np.all(np.diff(got.S) <= 0)
            assert_orthonormal_columns(got.U, dtype)
            assert_orthonormal_columns(np.swapaxes(got.Vh.conj(), -1, -2), dtype)
            u, s, vh = exact(got.U[..., :, :k]), exact(got.S), exact(got.Vh[..., :k, :])
            err = norm2(exact(a) - (u * s[..., None, :]) @ vh) if a.size else 0.0
            assert err <= C * max(max(shape), 1) * eps_of(dtype) * norm2(a), err
        ref = npf("svd")(a, compute_uv=False)
        got = onl.svd(a, compute_uv=False)
        assert_like(got, ref)
        assert_values_close(got, ref, a, k=max(shape))

    @pytest.mark.parametrize("shape", [(2, 3, 6, 4), (3, 1, 4, 5), (0, 3, 2), (2, 3, 0)])
    def test_stacks(self, shape):
        a = draw(np.random.default_rng(6), shape, np.float64)
        for kw in ({}, {"full_matrices": False}, {"compute_uv": False}):
            ref = npf("svd")(a, **kw)
            got = onl.svd(a, **kw)
            assert_like(got, ref)
            s_got, s_ref = (got, ref) if "compute_uv" in kw else (got.S, ref.S)
            assert_values_close(s_got, s_ref, a, k=max(shape[-2:]))

    @pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
    @pytest.mark.parametrize("shape", [(5, 5), (2, 4, 4), (1, 1)])
    def test_hermitian(self, shape, dtype):
        a = draw(np.random.default_rng(7), shape, dtype, "herm")
        ref = npf("svd")(a, hermitian=True)
        got = onl.svd(a, hermitian=True)
        assert_like(got, ref)
        assert_values_close(got.S, ref.S, a)
        u, s, vh = exact(got.U), exact(got.S), exact(got.Vh)
        assert norm2(exact(a) - (u * s[..., None, :]) @ vh) <= \
            C * shape[-1] * eps_of(dtype) * norm2(a)
        ref_s = npf("svd")(a, compute_uv=False, hermitian=True)
        got_s = onl.svd(a, compute_uv=False, hermitian=True)
        assert_like(got_s, ref_s)
        assert_values_close(got_s, ref_s, a)

    def test_result_class_and_profile(self):
        a = draw(np.random.default_rng(8), (9, 6), np.float64)
        with ozlinalg.profile() as prof:
            got = onl.svd(a)
        assert type(got) is type(npf("svd")(a)) and got.U is got[0]
        assert prof.emulated_gemm_calls > 0

    @pytest.mark.parametrize("a, kw", [
        (np.ones(3), {}), (np.array(1.0), {}), (np.eye(2, dtype=np.float16), {}),
        (np.eye(2, dtype=np.longdouble), {}), (np.eye(2, dtype=object), {}),
        (np.ones((2, 3)), {"hermitian": True}), (np.ones(3), {"compute_uv": False}),
    ], ids=lambda x: str(getattr(x, "shape", x)))
    def test_errors_are_numpys(self, a, kw):
        assert_same_error(lambda: onl.svd(a, **kw), lambda: npf("svd")(a, **kw))

    @pytest.mark.parametrize("bad", [np.nan, np.inf])
    def test_non_finite_input_gives_numpys_result(self, bad):
        a = draw(np.random.default_rng(2), (5, 4), np.float64)
        a[2, 1] = bad
        with np.errstate(all="ignore"):
            try:
                ref = npf("svd")(a, compute_uv=False)
            except np.linalg.LinAlgError as e:
                with pytest.raises(np.linalg.LinAlgError, match=str(e)):
                    onl.svd(a, compute_uv=False)
                return
            np.testing.assert_array_equal(onl.svd(a, compute_uv=False), ref)


def cond(a):
    return float(np.max(np.linalg.cond(exact(a)))) if a.size else 1.0


class TestPinv:
    @pytest.mark.parametrize("order", ORDERS)
    @pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
    @pytest.mark.parametrize("shape", SHAPES, ids=str)
    def test_grid(self, shape, dtype, order):
        if min(shape) >= 64 and (order != "C" or dtype not in (np.float64, np.complex128)):
            pytest.skip("the largest order: two dtypes, C order (the suite's time)")
        rng = np.random.default_rng([14, *shape, DTYPES.index(dtype), ORDERS.index(order)])
        a = draw(rng, shape, dtype)
        if shape[0] == shape[1] and shape[0]:  # square: keep it well conditioned
            a = (a + (4 * np.sqrt(shape[0]) * np.eye(shape[0])).astype(dtype)).astype(dtype)
        a = lay(a, order)
        ref = npf("pinv")(a)
        got = onl.pinv(a)
        assert_like(got, ref)
        if a.size:
            tol = C * max(shape) * eps_of(dtype) * cond(a) * float(np.abs(exact(ref)).max())
            assert float(np.abs(exact(got) - exact(ref)).max()) <= tol

    @pytest.mark.parametrize("kw", [{"rcond": 1e-10}, {"rtol": None}, {"rtol": 1e-10},
                                    {"rcond": np.array([1e-10, 0.5])}])
    @pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
    def test_rank_deficient_and_cutoffs(self, kw, dtype):
        rng = np.random.default_rng(9)
        b, c = draw(rng, (2, 7, 3), dtype), draw(rng, (2, 3, 5), dtype)
        a = (exact(b) @ exact(c)).astype(dtype)  # rank 3
        ref = npf("pinv")(a, **kw)
        got = onl.pinv(a, **kw)
        assert_like(got, ref)
        s = np.linalg.svd(exact(a), compute_uv=False)
        kappa = float(np.max(s[..., 0] / s[..., 2]))  # of the kept part
        tol = C * 7 * eps_of(dtype) * kappa * float(np.abs(exact(ref)).max())
        if dtype == np.float32:  # NumPy's float32 SVD: its "zero" values are ~eps32 s_max
            tol *= kappa
        assert float(np.abs(exact(got) - exact(ref)).max()) <= tol

    @pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
    def test_hermitian(self, dtype):
        a = draw(np.random.default_rng(10), (3, 6, 6), dtype, "herm")
        a[..., 4, 3] = 99.0  # upper-triangle garbage: NumPy reads conj(a)'s lower triangle
        ref = npf("pinv")(a, hermitian=True)
        got = onl.pinv(a, hermitian=True)
        assert_like(got, ref)
        full = hermitian_of(a.conj(), "L")
        tol = C * 6 * eps_of(dtype) * cond(full) * float(np.abs(exact(ref)).max())
        assert float(np.abs(exact(got) - exact(ref)).max()) <= tol

    def test_products_are_emulated(self):
        a = draw(np.random.default_rng(12), (8, 5), np.float64)
        with ozlinalg.profile() as prof:
            onl.pinv(a)
        assert prof.emulated_gemm_calls > 0

    @pytest.mark.parametrize("a, kw", [
        (np.ones(3), {}), (np.eye(2), {"rcond": 1e-3, "rtol": 1e-3}),
        (np.eye(2, dtype=np.int64), {"rtol": None}), (np.eye(2, dtype=np.float16), {}),
        (np.ones((2, 3)), {"hermitian": True}), (np.eye(2, dtype=object), {}),
    ], ids=lambda x: str(getattr(x, "shape", x)))
    def test_errors_are_numpys(self, a, kw):
        assert_same_error(lambda: onl.pinv(a, **kw), lambda: npf("pinv")(a, **kw))

    @pytest.mark.parametrize("shape, dtype", [((0, 3), np.int64), ((2, 0, 0), np.float32),
                                              ((3, 0), np.complex64)])
    def test_empty_is_numpys(self, shape, dtype):
        a = np.zeros(shape, dtype)
        assert_like(onl.pinv(a), npf("pinv")(a))


class TestMatrixRank:
    @pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
    @pytest.mark.parametrize("shape, rank", [((6, 6), 6), ((6, 6), 3), ((7, 4), 2),
                                             ((4, 7), 4), ((1, 1), 1), ((2, 3, 5, 5), 2)])
    def test_grid(self, shape, rank, dtype):
        rng = np.random.default_rng([15, *shape, rank])
        b = draw(rng, shape[:-1] + (rank,), dtype)
        c = draw(rng, shape[:-2] + (rank, shape[-1]), dtype)
        a = (exact(b) @ exact(c)).astype(dtype)
        for kw in ({}, {"tol": 1e-6}, {"rtol": 1e-8}, {"rtol": np.float64(0.5)}):
            ref = npf("matrix_rank")(a, **kw)
            got = onl.matrix_rank(a, **kw)
            assert type(got) is type(ref)
            np.testing.assert_array_equal(got, ref)
            assert np.asarray(got).dtype == np.asarray(ref).dtype
        if shape[-1] == shape[-2]:
            h = (exact(b) @ np.swapaxes(exact(b).conj(), -1, -2)).astype(dtype)
            np.testing.assert_array_equal(onl.matrix_rank(h, hermitian=True),
                                          npf("matrix_rank")(h, hermitian=True))

    @pytest.mark.parametrize("a", [np.zeros(3), np.ones(3), np.array(0.0), np.array(2),
                                   np.zeros((0, 3)), np.zeros((2, 0, 0)), np.zeros((3, 3))],
                             ids=lambda x: f"{x.shape}")
    def test_edge_inputs(self, a):
        ref = npf("matrix_rank")(a)
        got = onl.matrix_rank(a)
        assert type(got) is type(ref)
        np.testing.assert_array_equal(got, ref)

    def test_errors_are_numpys(self):
        for a, kw in ((np.eye(3), {"tol": 1.0, "rtol": 1.0}),
                      (np.eye(2, dtype=np.float16), {}), (np.ones((2, 3)), {"hermitian": True})):
            assert_same_error(lambda a=a, kw=kw: onl.matrix_rank(a, **kw),
                              lambda a=a, kw=kw: npf("matrix_rank")(a, **kw))

    def test_singular_values_are_emulated(self):
        with ozlinalg.profile() as prof:
            onl.matrix_rank(draw(np.random.default_rng(3), (6, 6), np.float64))
        assert prof.emulated_gemm_calls > 0


def test_exported_from_numpy_linalg():
    for name in ("eigh", "eigvalsh", "svd", "pinv", "matrix_rank"):
        assert name in onl.__all__ and callable(getattr(onl, name))


@pytest.mark.parametrize("name, kind, kw", [
    ("eigh", "herm", {}), ("eigvalsh", "herm", {}), ("svd", "gen", {}),
    ("svd", "herm", {"hermitian": True}), ("pinv", "gen", {}), ("matrix_rank", "gen", {})])
def test_below_min_size_is_numpys_own(name, kind, kw):
    """Calls by name of order below ``options(min_size=...)`` run NumPy's function."""
    a = draw(np.random.default_rng(31), (2, 5, 5), np.float64, kind)
    with ozlinalg.options(min_size=6), ozlinalg.profile() as prof:
        got = getattr(onl, name)(a, **kw)
    assert prof.emulated_gemm_calls == 0
    ref = npf(name)(a, **kw)
    for g, r in zip(got if isinstance(got, tuple) else (got,),
                    ref if isinstance(ref, tuple) else (ref,)):
        np.testing.assert_array_equal(g, r)
    with ozlinalg.options(min_size=5), ozlinalg.profile() as prof:
        getattr(onl, name)(a, **kw)
    assert prof.emulated_gemm_calls > 0
