"""eigh, eigvalsh, svd, svdvals, pinv, polar of ozlinalg.linalg against LAPACK.

The accuracy contract: on every test matrix the emulated decomposition's residual
and orthogonality are at most twice LAPACK's on the same input (``dsyevd`` /
``dgesdd``), with a floor of ``sqrt(n) u`` for the rounding of the output itself
(a decomposition stored in double cannot do better than its entries' rounding).
Both are measured in extended precision (``np.longdouble`` products), so that the
metric is not limited by a double-precision product's own rounding. Eigenvalues
are checked against a 50-digit reference (mpmath) at small orders.
"""
from __future__ import annotations

import mpmath
import numpy as np
import pytest
import scipy.linalg as sla

import ozlinalg
from ozlinalg.linalg import eigh, eigvalsh, pinv, polar, svd, svdvals
from ozlinalg.linalg._spectral import FALLBACK

U = 2.0**-53
LD = np.longdouble


def _orth(rng, n, cplx=False):
    z = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if cplx else 0)
    q, r = np.linalg.qr(z)
    return q * (np.diagonal(r) / np.abs(np.diagonal(r)))


def _from_spectrum(q, lam):
    a = (q * lam) @ q.conj().T
    return (a + a.conj().T) / 2


def _hermitian_cases(n, rng):
    """The test matrices: random, clustered (a third equal, a third spaced 1e-9),
    graded (1 ... 1e-13, mixed signs), rank-deficient, complex Hermitian."""
    a = rng.standard_normal((n, n))
    k = n // 3
    clustered = np.concatenate([np.ones(k), 2 + 1e-9 * np.arange(k),
                                rng.uniform(-3, 3, n - 2 * k)])
    graded = np.logspace(0, -13, n) * rng.choice([-1.0, 1.0], n)
    rankdef = np.concatenate([rng.standard_normal(n // 2), np.zeros(n - n // 2)])
    return {
        "random": (a + a.T) / 2,
        "clustered": _from_spectrum(_orth(rng, n), clustered),
        "graded": _from_spectrum(_orth(rng, n), graded),
        "rank-deficient": _from_spectrum(_orth(rng, n), rankdef),
        "complex": _from_spectrum(_orth(rng, n, True), rng.standard_normal(n)),
    }


def _ld(x):
    return x.astype(np.clongdouble if x.dtype.kind == "c" else LD)


def _fro(x):
    return float(np.sqrt(np.sum(np.abs(x) ** 2)))


def _eig_metrics(a, w, v):
    al, vl = _ld(a), _ld(v)
    res = _fro(al @ vl - vl * w.astype(LD)) / _fro(al)
    orth = _fro(vl.conj().T @ vl - np.eye(v.shape[1]))
    return res, orth


def _svd_metrics(a, u, s, vh):
    k = s.size
    al, ul, vl = _ld(a), _ld(u), _ld(vh)
    res = _fro(al - (ul[:, :k] * s.astype(LD)) @ vl[:k]) / _fro(al)
    ou = _fro(ul.conj().T @ ul - np.eye(u.shape[1]))
    ov = _fro(vl @ vl.conj().T - np.eye(vh.shape[0]))
    return res, ou, ov


def _within(ours, lapack, n):
    return ours <= max(2.0 * lapack, np.sqrt(max(n, 1)) * U)


def _no_fallback(prof):
    assert prof.native_calls.get(FALLBACK, 0) == 0, "the refinement fell back to LAPACK"


CASES = ("random", "clustered", "graded", "rank-deficient", "complex")


class TestEigh:
    @pytest.mark.parametrize("n", [24, 60])
    @pytest.mark.parametrize("case", CASES)
    def test_accuracy_contract(self, case, n):
        a = _hermitian_cases(n, np.random.default_rng(n))[case]
        with ozlinalg.profile() as prof:
            w, v = eigh(a)
        _no_fallback(prof)
        assert prof.emulated_gemm_calls >= 4
        wl, vl = sla.eigh(a, driver="evd")
        res, orth = _eig_metrics(a, w, v)
        res_l, orth_l = _eig_metrics(a, wl, vl)
        assert _within(res, res_l, n), (res, res_l)
        assert _within(orth, orth_l, n), (orth, orth_l)
        assert np.all(np.diff(w) >= 0)
        # Weyl: both sets within their residuals of the exact spectrum
        norm2 = np.abs(wl).max()
        assert np.abs(w - wl).max() <= 4 * n * U * norm2

    @pytest.mark.parametrize("n", [1, 2, 3, 8, 17])
    @pytest.mark.parametrize("cplx", [False, True])
    def test_eigenvalues_against_50_digits(self, n, cplx):
        rng = np.random.default_rng(100 + n)
        a = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if cplx else 0)
        a = (a + a.conj().T) / 2
        mpmath.mp.dps = 50
        m = mpmath.matrix(a.tolist())
        ev = mpmath.eighe(m)[0] if cplx else mpmath.eigsy(m)[0]
        exact = np.sort(np.array([float(x) for x in ev]))
        w = eigh(a, eigvals_only=True)
        wl = sla.eigh(a, eigvals_only=True)
        err, err_l = np.abs(w - exact).max(), np.abs(wl - exact).max()
        norm2 = np.abs(exact).max()
        assert err <= max(2 * err_l, 2 * U * norm2), (err, err_l)

    @pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128,
                                       np.int64])
    def test_dtypes_and_layout(self, dtype):
        rng = np.random.default_rng(5)
        a = rng.standard_normal((9, 9))
        if np.dtype(dtype).kind == "c":
            a = a + 1j * rng.standard_normal((9, 9))
        a = (a + a.conj().T).astype(dtype) if np.dtype(dtype).kind != "i" else \
            np.round(10 * (a + a.T)).astype(dtype)
        w, v = eigh(a)
        wl, vl = sla.eigh(a)
        assert w.dtype == wl.dtype and v.dtype == vl.dtype
        assert v.flags.f_contiguous == vl.flags.f_contiguous
        tol = 8 * 9 * np.finfo(wl.dtype).eps * np.abs(wl).max()
        assert np.abs(w - wl).max() <= tol

    @pytest.mark.parametrize("order", ["C", "F", "strided"])
    @pytest.mark.parametrize("lower", [True, False])
    def test_triangle_and_order_input_untouched(self, order, lower):
        rng = np.random.default_rng(6)
        base = rng.standard_normal((14, 14))
        full = np.asarray(base, order="F" if order == "F" else "C")
        a = full[::2, ::2] if order == "strided" else full
        keep = a.copy()
        w, v = eigh(a, lower=lower, overwrite_a=True)
        wl = sla.eigh(a.copy(), lower=lower, eigvals_only=True)
        np.testing.assert_array_equal(a, keep)
        assert np.abs(w - wl).max() <= 16 * a.shape[0] * U * np.abs(wl).max()

    def test_subsets_and_eigvalsh(self):
        a = _hermitian_cases(20, np.random.default_rng(7))["random"]
        wl = sla.eigh(a, eigvals_only=True)
        tol = 64 * 20 * U * np.abs(wl).max()
        w, v = eigh(a, subset_by_index=[3, 7])
        assert w.shape == (5,) and v.shape == (20, 5)
        assert np.abs(w - wl[3:8]).max() <= tol
        lo, hi = wl[4] - 1e-3, wl[11] + 1e-3
        w = eigvalsh(a, subset_by_value=(lo, hi))
        assert np.abs(w - sla.eigvalsh(a, subset_by_value=(lo, hi))).max() <= tol
        assert np.abs(eigvalsh(a) - wl).max() <= tol
        assert eigh(a, driver="evr", eigvals_only=True).shape == (20,)

    @pytest.mark.parametrize("type_", [1, 2, 3])
    def test_generalized(self, type_):
        rng = np.random.default_rng(8)
        a = _hermitian_cases(12, rng)["random"]
        b = rng.standard_normal((12, 12))
        b = b @ b.T + 12 * np.eye(12)
        w, v = eigh(a, b, type=type_)
        wl, vl = sla.eigh(a, b, type=type_)
        tol = 64 * 12 * U * np.abs(wl).max() * np.linalg.cond(b)
        assert np.abs(w - wl).max() <= tol
        np.testing.assert_allclose(np.abs(v.T @ b @ v) if type_ != 3 else
                                   np.abs(v.T @ np.linalg.solve(b, v)), np.eye(12),
                                   atol=1e-12)

    def test_errors_as_scipy(self):
        a = np.eye(3)
        for bad, kw in [(np.ones((2, 3)), {}), (a, dict(subset_by_index=[2, 5])),
                        (a, dict(subset_by_value=(2, 1))), (a, dict(driver="gvd")),
                        (a, dict(driver="nope")), (a, dict(driver="evd", subset_by_index=[0, 1])),
                        (np.array([[np.nan, 0], [0, 1]]), {})]:
            with pytest.raises(ValueError) as ours:
                eigh(bad, **kw)
            with pytest.raises(ValueError) as theirs:
                sla.eigh(bad, **kw)
            assert str(ours.value) == str(theirs.value)
        with pytest.raises(np.linalg.LinAlgError) as ours:
            eigh(a, -np.eye(3))
        with pytest.raises(np.linalg.LinAlgError) as theirs:
            sla.eigh(a, -np.eye(3))
        assert str(ours.value) == str(theirs.value)

    def test_tiny_empty_stacked(self):
        for n in (0, 1):
            a = np.full((n, n), 3.0)
            for x, y in zip(eigh(a), sla.eigh(a)):
                assert x.shape == y.shape and x.dtype == y.dtype
                np.testing.assert_array_equal(np.abs(x), np.abs(y))
        rng = np.random.default_rng(9)
        s = rng.standard_normal((2, 3, 6, 6))
        s = s + np.swapaxes(s, -1, -2)
        w, v = eigh(s)
        wl, vl = sla.eigh(s)
        assert w.shape == wl.shape and v.shape == vl.shape
        assert np.abs(w - wl).max() <= 64 * 6 * U * np.abs(wl).max()

    def test_non_finite_without_check_is_lapacks(self):
        a = np.array([[np.inf, 0.0], [0.0, 1.0]])
        try:
            ref = sla.eigh(a, check_finite=False)
        except Exception as exc:  # noqa: BLE001
            with pytest.raises(type(exc)):
                eigh(a, check_finite=False)
        else:
            out = eigh(a, check_finite=False)
            np.testing.assert_array_equal(out[0], ref[0])


class TestSvd:
    @pytest.mark.parametrize("shape", [(40, 40), (60, 25), (25, 60)])
    @pytest.mark.parametrize("case", CASES + ("general", "complex general"))
    def test_accuracy_contract(self, case, shape):
        m, n = shape
        rng = np.random.default_rng(m * n)
        if case == "general":
            a = rng.standard_normal(shape)
        elif case == "complex general":
            a = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        else:
            a = _hermitian_cases(max(shape), rng)[case][:m, :n]
        with ozlinalg.profile() as prof:
            u, s, vh = svd(a, full_matrices=False)
        _no_fallback(prof)
        ul, sl, vhl = sla.svd(a, full_matrices=False)
        ours, theirs = _svd_metrics(a, u, s, vh), _svd_metrics(a, ul, sl, vhl)
        for x, y in zip(ours, theirs):
            assert _within(x, y, max(shape)), (ours, theirs)
        assert np.all(np.diff(s) <= 0) and np.all(s >= 0)
        assert np.abs(s - sl).max() <= 4 * max(shape) * U * sl[0]

    @pytest.mark.parametrize("shape", [(7, 4), (4, 7), (5, 5), (1, 3), (3, 1), (1, 1)])
    @pytest.mark.parametrize("full", [True, False])
    @pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
    def test_shapes_dtypes_layout(self, shape, full, dtype):
        rng = np.random.default_rng(11)
        a = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            a = a + 1j * rng.standard_normal(shape)
        a = a.astype(dtype)
        keep = a.copy()
        ours, theirs = svd(a, full_matrices=full), sla.svd(a, full_matrices=full)
        np.testing.assert_array_equal(a, keep)
        for x, y in zip(ours, theirs):
            assert x.shape == y.shape and x.dtype == y.dtype
            assert x.flags.f_contiguous == y.flags.f_contiguous
        u, s, vh = ours
        eps = np.finfo(s.dtype).eps
        assert np.abs(s - theirs[1]).max() <= 8 * max(shape) * eps * theirs[1][0]
        k = s.size
        rec = (u[:, :k].astype(complex) * s) @ vh[:k]
        assert np.abs(rec - a).max() <= 16 * max(shape) * eps * theirs[1][0]

    def test_svdvals_empty_stacked_errors(self):
        rng = np.random.default_rng(12)
        a = rng.standard_normal((2, 5, 3))
        np.testing.assert_allclose(svdvals(a), sla.svdvals(a), rtol=1e-14, atol=1e-15)
        for x, y in zip(svd(np.zeros((0, 3))), sla.svd(np.zeros((0, 3)))):
            assert x.shape == y.shape and x.dtype == y.dtype
        assert svdvals(np.zeros((3, 0))).shape == (0,)
        for kw, exc in [(dict(lapack_driver="nope"), ValueError),
                        (dict(lapack_driver=3), TypeError)]:
            with pytest.raises(exc) as ours:
                svd(np.eye(2), **kw)
            with pytest.raises(exc) as theirs:
                sla.svd(np.eye(2), **kw)
            assert str(ours.value) == str(theirs.value)
        with pytest.raises(ValueError, match="infs or NaNs"):
            svd(np.array([[1.0, np.nan]]))


class TestPinv:
    @pytest.mark.parametrize("shape", [(12, 7), (7, 12), (10, 10)])
    @pytest.mark.parametrize("rank_deficient", [False, True])
    def test_penrose_conditions_and_rank(self, shape, rank_deficient):
        rng = np.random.default_rng(13)
        a = rng.standard_normal(shape)
        if rank_deficient:
            a = rng.standard_normal((shape[0], 3)) @ rng.standard_normal((3, shape[1]))
        b, rank = pinv(a, return_rank=True)
        bl, rank_l = sla.pinv(a, return_rank=True)
        assert rank == rank_l and b.shape == bl.shape and b.dtype == bl.dtype
        cond = np.linalg.cond(a[:, :] if not rank_deficient else
                              np.diag(np.linalg.svd(a, compute_uv=False)[:3]))
        tol = 64 * max(shape) * U * cond * np.abs(bl).max()
        assert np.abs(b - bl).max() <= tol
        np.testing.assert_allclose(a @ b @ a, a, atol=64 * max(shape) * U * cond *
                                   np.abs(a).max())

    def test_arguments(self):
        a = np.diag([1.0, 1e-3, 1e-9])
        for kw in [dict(atol=1e-4), dict(rtol=1e-6), dict(atol=0, rtol=0)]:
            assert pinv(a, return_rank=True, **kw)[1] == sla.pinv(a, return_rank=True, **kw)[1]
        with pytest.raises(ValueError, match="must be positive"):
            pinv(a, atol=-1)


class TestSvdIndexing:
    """SciPy refuses, before any work, factors LAPACK's int32 indices cannot hold."""

    @pytest.mark.parametrize("full, shape, message", [
        (True, (46341, 3), "Indexing a matrix size 46341 x 46341"),
        (False, (3, 715827883), "Indexing a matrix of 2147483649 elements"),
    ])
    def test_refused_as_scipy(self, full, shape, message):
        a = np.broadcast_to(np.float64(1.0), shape)  # no memory behind it
        for f in (svd, sla.svd):
            with pytest.raises(ValueError, match=message):
                f(a, full_matrices=full, check_finite=False)


class TestPolar:
    @pytest.mark.parametrize("shape", [(20, 20), (30, 12), (12, 30)])
    @pytest.mark.parametrize("side", ["right", "left"])
    @pytest.mark.parametrize("kind", ["random", "ill-conditioned", "rank-deficient", "complex"])
    def test_against_scipy(self, shape, side, kind):
        rng = np.random.default_rng(14)
        m, n = shape
        if kind == "random":
            a = rng.standard_normal(shape)
        elif kind == "complex":
            a = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        elif kind == "ill-conditioned":
            k = min(shape)
            a = _orth(rng, m)[:, :k] @ np.diag(np.logspace(0, -12, k)) @ _orth(rng, n)[:k]
        else:
            a = rng.standard_normal((m, 4)) @ rng.standard_normal((4, n))
        u, p = polar(a, side=side)
        ul, pl = sla.polar(a, side=side)
        assert u.shape == ul.shape and p.shape == pl.shape and u.dtype == ul.dtype
        k = min(shape)
        gram = u.conj().T @ u if m >= n else u @ u.conj().T
        assert np.abs(gram - np.eye(k)).max() <= 16 * max(shape) * U
        rec = u @ p if side == "right" else p @ u
        assert np.abs(rec - a).max() <= 16 * max(shape) * U * np.abs(a).max() * 4
        np.testing.assert_array_equal(p, p.conj().T)
        assert np.linalg.eigvalsh(p).min() >= -16 * max(shape) * U * np.abs(p).max()
        np.testing.assert_allclose(p, pl, atol=64 * max(shape) * U * np.abs(pl).max())
        if kind != "rank-deficient":  # the polar factor is unique
            cond = np.linalg.cond(a)
            np.testing.assert_allclose(u, ul, atol=64 * max(shape) * U * cond)

    def test_errors_and_emulation(self):
        with pytest.raises(ValueError, match="side"):
            polar(np.eye(2), side="up")
        with pytest.raises(ValueError, match="2-D"):
            polar(np.ones(3))
        with ozlinalg.profile() as prof:
            polar(np.random.default_rng(15).standard_normal((16, 16)))
        assert prof.emulated_gemm_calls > 0

    @pytest.mark.parametrize("side", ["right", "left"])
    def test_batched_as_scipy(self, side):
        a = np.random.default_rng(16).standard_normal((2, 3, 18, 12))
        u, p = polar(a, side=side)
        ul, pl = sla.polar(a, side=side)
        assert isinstance(u, np.ndarray) and u.shape == ul.shape and p.shape == pl.shape
        for idx in np.ndindex(2, 3):
            u1, p1 = polar(a[idx], side=side)
            np.testing.assert_array_equal(u[idx], u1)
            np.testing.assert_array_equal(p[idx], p1)
        tol = 64 * 18 * U * np.linalg.cond(a).max()
        np.testing.assert_allclose(u, ul, atol=tol)
        np.testing.assert_allclose(p, pl, atol=tol * np.abs(pl).max())


class TestOnTheGpuStandIn:
    """The same code on CuPy arrays: :class:`host_cuda.HostGPU` makes ``import cupy``
    a host stand-in whose products run on the cuBLASLt engine's code (and any
    product on the CPU engine fails)."""

    @pytest.fixture
    def cp(self):
        from host_cuda import HostGPU

        with HostGPU():
            import cupy

            yield cupy

    @pytest.mark.parametrize("cplx", [False, True])
    def test_eigh_svd_polar(self, cp, cplx):
        rng = np.random.default_rng(16)
        a = _hermitian_cases(20, rng)["complex" if cplx else "clustered"]
        g = rng.standard_normal((24, 16)) + (1j * rng.standard_normal((24, 16)) if cplx else 0)
        w, v = eigh(cp.asarray(a))
        u, s, vh = svd(cp.asarray(g), full_matrices=False)
        up, p = polar(cp.asarray(g))
        for x in (w, v, u, s, vh, up, p):
            assert type(x) is cp.ndarray
        w, v, u, s, vh, up, p = (cp.asnumpy(x) for x in (w, v, u, s, vh, up, p))
        w_cpu = sla.eigvalsh(a)  # native: an emulated product on the CPU engine fails here
        np.testing.assert_allclose(w, w_cpu, rtol=0, atol=8 * 20 * U * 3)
        res, orth = _eig_metrics(a, w, v)
        assert res <= 4 * 20 * U and orth <= 4 * 20 * U
        assert max(_svd_metrics(g, u, s, vh)) <= 4 * 24 * U
        np.testing.assert_allclose(s, sla.svdvals(g), rtol=0, atol=8 * 24 * U * s.max())
        np.testing.assert_allclose(up @ p, g, atol=64 * 24 * U * 4)
