"""Tests of ozlinalg.lapack: blocked getrf / potrf / geqrf / orgqr / ormqr / trsm.

Accuracy: backward errors (and solve residuals) within a factor 4 of LAPACK's
(scipy) on the same input, or of n ulps where LAPACK's is smaller (``within``).
Emulation is forced at every size (``min_size=0``) and small block sizes
exercise the blocking.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
from numpy.linalg import LinAlgError
from scipy.linalg import LinAlgWarning

import ozlinalg
from ozlinalg.lapack import (
    DEFAULT_MIN_SIZE,
    geqrf,
    getrf,
    getrs,
    orgqr,
    ormqr,
    potrf,
    potrs,
    trsm,
)
from ozlinalg.testing import portable_exp

EPS = np.finfo(np.float64).eps
FACTOR = 4.0
EMU = dict(min_size=0)


pytestmark = pytest.mark.usefixtures("one_blas_thread")


# ---------------------------------------------------------------- helpers


def within(err, ref, a):
    """Backward error within FACTOR of LAPACK's, or of ``n`` ulps (n: the largest
    dimension of ``a``): the normwise backward error bounds of LU, Cholesky,
    Householder QR and triangular solves are of order n u, and this floor keeps the
    test from depending on how accurate LAPACK happens to be on the machine (its
    error depends on the BLAS kernel; the emulation's bits do not)."""
    return err <= FACTOR * max(ref, max(np.shape(a)) * EPS)


def nrm(x):
    return np.linalg.norm(x, 1) if x.ndim == 2 else np.linalg.norm(x, 1)


def apply_piv(a, piv):
    pa = np.array(a, dtype=float, copy=True)
    for i, p in enumerate(piv):
        if p != i:
            pa[[i, p]] = pa[[p, i]]
    return pa


def lu_backward(a, lu, piv):
    m, n = a.shape
    k = min(m, n)
    L = np.tril(lu[:, :k], -1) + np.eye(m, k)
    U = np.triu(lu[:k, :])
    return nrm(apply_piv(a, piv) - L @ U) / nrm(a)


def chol_backward(a, c, lower):
    r = c @ c.T if lower else c.T @ c
    return nrm(a - r) / nrm(a)


def solve_residual(a, x, b):
    return np.linalg.norm(a @ x - b, 1) / (nrm(a) * np.linalg.norm(x, 1) + np.linalg.norm(b, 1))


def make(rng, shape, kind="random", order="C", dtype=np.float64):
    m, n = shape
    if kind == "random":
        a = rng.standard_normal(shape)
    elif kind.startswith("kappa"):
        kappa = float(kind[5:])
        k = min(m, n)
        u, _ = np.linalg.qr(rng.standard_normal((m, k)))
        v, _ = np.linalg.qr(rng.standard_normal((n, k)))
        s = np.logspace(0, -np.log10(kappa), k)
        a = (u * s) @ v.T
    elif kind == "scaled":
        a = (rng.random(shape) - 0.5) * portable_exp(4 * rng.standard_normal(shape))
    elif kind == "rowscaled":
        a = rng.standard_normal(shape) * portable_exp(4 * rng.standard_normal((m, 1)))
    else:
        raise ValueError(kind)
    a = a.astype(dtype)
    return np.asfortranarray(a) if order == "F" else np.ascontiguousarray(a)


def spd(rng, n, kappa=None):
    if kappa is None:
        g = rng.standard_normal((n, n))
        return g @ g.T + n * np.eye(n)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (q * np.logspace(0, -np.log10(kappa), n)) @ q.T


def noncontig(a):
    """Same values, a strided non-contiguous view."""
    big = np.zeros((a.shape[0] * 2, a.shape[1] * 2), dtype=a.dtype)
    big[::2, ::2] = a
    return big[::2, ::2]


# ---------------------------------------------------------------- getrf


class TestGetrf:
    @pytest.mark.parametrize("shape", [(1, 1), (2, 2), (64, 64), (97, 97), (130, 70),
                                       (70, 130), (257, 257)])
    @pytest.mark.parametrize("order", ["C", "F"])
    def test_backward_error(self, shape, order):
        rng = np.random.default_rng(1)
        a = make(rng, shape, order=order)
        a0 = a.copy()
        lu, piv = getrf(a, block_size=16, **EMU)
        assert np.array_equal(a, a0)
        assert lu.shape == shape and lu.dtype == np.float64
        assert piv.shape == (min(shape),) and piv.dtype == np.int32
        lu0, piv0 = sla.lu_factor(a)
        assert within(lu_backward(a, lu, piv), lu_backward(a, lu0, piv0), a)

    @pytest.mark.parametrize("kind", ["kappa1e8", "kappa1e12", "scaled", "rowscaled"])
    def test_hard_inputs(self, kind):
        rng = np.random.default_rng(2)
        a = make(rng, (200, 200), kind)
        lu, piv = getrf(a, block_size=32, **EMU)
        lu0, piv0 = sla.lu_factor(a)
        assert within(lu_backward(a, lu, piv), lu_backward(a, lu0, piv0), a)
        b = rng.standard_normal(200)
        x = getrs(lu, piv, b, block_size=32, **EMU)
        x0 = sla.lu_solve((lu0, piv0), b)
        assert within(solve_residual(a, x, b), solve_residual(a, x0, b), a)

    def test_same_pivots_as_lapack(self):
        rng = np.random.default_rng(3)
        a = rng.standard_normal((150, 150))
        _, piv = getrf(a, block_size=16, **EMU)
        _, piv0 = sla.lu_factor(a)
        np.testing.assert_array_equal(piv, piv0)

    @pytest.mark.filterwarnings("ignore::scipy.linalg.LinAlgWarning")
    @pytest.mark.parametrize("dtype", [np.float32, np.int64, bool])
    def test_dtypes(self, dtype):
        rng = np.random.default_rng(4)
        a = (rng.standard_normal((80, 80)) * 10).astype(dtype)
        if dtype is bool:
            a = a | np.eye(80, dtype=bool)
        lu, piv = getrf(a, block_size=16, **EMU)
        assert lu.dtype == np.float64
        af = a.astype(np.float64)
        lu0, piv0 = sla.lu_factor(af)
        assert within(lu_backward(af, lu, piv), lu_backward(af, lu0, piv0), af)

    def test_noncontiguous(self):
        rng = np.random.default_rng(5)
        a = noncontig(rng.standard_normal((90, 90)))
        lu, piv = getrf(a, block_size=16, **EMU)
        lu0, piv0 = sla.lu_factor(a)
        assert within(lu_backward(a, lu, piv), lu_backward(a, lu0, piv0), a)

    def test_empty(self):
        for shape in [(0, 0), (0, 3), (3, 0)]:
            lu, piv = getrf(np.zeros(shape), **EMU)
            assert lu.shape == shape and piv.shape == (0,)

    def test_overwrite(self):
        rng = np.random.default_rng(6)
        a = np.asfortranarray(rng.standard_normal((70, 70)))
        a0 = a.copy()
        lu, piv = getrf(a, block_size=16, overwrite_a=True, **EMU)
        assert lu is a
        lu0, piv0 = sla.lu_factor(a0)
        assert within(lu_backward(a0, lu, piv), lu_backward(a0, lu0, piv0), a0)

    def test_singular_warns(self):
        a = np.ones((40, 40))
        with pytest.warns(LinAlgWarning, match="exactly zero"):
            getrf(a, block_size=8, **EMU)

    @pytest.mark.parametrize("col", [5, 60, 95])
    def test_zero_pivot_index_in_either_half(self, col):
        # the recursion's info: the first exactly zero pivot, 1-based, wherever it falls
        a = np.random.default_rng(11).standard_normal((96, 96))
        a[:, col] = 0.0
        with pytest.warns(LinAlgWarning, match=f"Diagonal number {col + 1} is exactly zero"):
            lu, piv = getrf(a, block_size=8, **EMU)
        with pytest.warns(LinAlgWarning, match=f"Diagonal number {col + 1} is exactly zero"):
            _, piv0 = sla.lu_factor(a)  # LAPACK says the same
        np.testing.assert_array_equal(piv, piv0)
        assert lu[col, col] == 0.0

    def test_errors(self):
        with pytest.raises(ValueError, match="2-D"):
            getrf(np.ones(3))
        with pytest.raises(TypeError, match="unsupported dtype"):
            getrf(np.ones((3, 3), dtype=np.clongdouble))
        with pytest.raises(ValueError, match="infs or NaNs"):
            getrf(np.array([[1.0, np.inf], [0.0, 1.0]]))
        with pytest.raises(ValueError, match="block_size"):
            getrf(np.eye(3), block_size=0)
        with pytest.raises(ValueError, match="min_size"):
            getrf(np.eye(3), min_size=-1)
        lu, _ = getrf(np.array([[1.0, np.nan], [2.0, 1.0]]), check_finite=False)
        assert np.isnan(lu).any()

    def test_min_size_former_name_crossover(self):
        # crossover= (the keyword's former name) still works, warns, and means the same
        a = np.random.default_rng(9).standard_normal((40, 40))
        with pytest.warns(DeprecationWarning, match="min_size"):
            old = getrf(a, block_size=8, crossover=0)
        new = getrf(a, block_size=8, min_size=0)
        assert all(np.array_equal(x, y) for x, y in zip(old, new))
        with pytest.raises(TypeError, match="not both"):
            getrf(a, min_size=0, crossover=0)
        # a solve warns once, at the caller's line, whatever trsm calls it makes
        lu, piv = new
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            x_old = getrs(lu, piv, np.ones(40), block_size=8, crossover=0)
        assert [w.category for w in seen] == [DeprecationWarning]
        assert seen[0].filename == __file__
        assert np.array_equal(x_old, getrs(lu, piv, np.ones(40), block_size=8, min_size=0))

    def test_min_size_and_profile(self):
        rng = np.random.default_rng(7)
        n = DEFAULT_MIN_SIZE // 2
        a = rng.standard_normal((n, n))
        with ozlinalg.profile() as p:
            getrf(a, block_size=16)
        assert p.emulated_flops == 0 and p.native_flops > 0
        with ozlinalg.profile() as p:
            getrf(a, block_size=16, **EMU)
        assert p.emulated_gemm_calls > 0

    def test_flop_share(self):
        rng = np.random.default_rng(8)
        a = rng.standard_normal((512, 512))
        with ozlinalg.profile() as p:
            getrf(a, block_size=32, **EMU)
        assert p.emulated_flop_share >= 0.9
        # Everything that ran is accounted for: emulated + native ~ LU flops
        # (plus the full diagonal blocks of the triangular couplings).
        total = p.emulated_flops + p.native_flops
        assert 2 / 3 * 512**3 * 0.99 <= total <= 2 / 3 * 512**3 * 1.1

    # counts below auto's on purpose (this tests the options): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_slices_and_method_pass_through(self):
        rng = np.random.default_rng(9)
        a = rng.standard_normal((64, 64))
        with ozlinalg.profile() as p:
            getrf(a, block_size=16, slices=5, method="bitmask-ef", **EMU)
        assert set(p.slices) == {5} and set(p.methods) == {"bitmask-ef"}

    @pytest.mark.parametrize("trans", [0, 1])
    def test_getrs_many_rhs(self, trans):
        rng = np.random.default_rng(10)
        a = rng.standard_normal((120, 120))
        b = np.asfortranarray(rng.standard_normal((120, 9)))
        b0 = b.copy()
        lu, piv = getrf(a, block_size=16, **EMU)
        x = getrs(lu, piv, b, trans=trans, block_size=16, **EMU)
        assert np.array_equal(b, b0) and x.shape == b.shape
        x0 = sla.lu_solve(sla.lu_factor(a), b, trans=trans)
        at = a.T if trans else a
        assert within(solve_residual(at, x, b), solve_residual(at, x0, b), at)

    def test_getrs_errors(self):
        lu, piv = getrf(np.eye(4) * 2, **EMU)
        with pytest.raises(ValueError, match="incompatible"):
            getrs(lu, piv, np.ones(5))
        with pytest.raises(ValueError, match="piv"):
            getrs(lu, piv[:2], np.ones(4))


# ---------------------------------------------------------------- potrf


class TestPotrf:
    @pytest.mark.parametrize("n", [1, 2, 64, 97, 200])
    @pytest.mark.parametrize("lower", [True, False])
    @pytest.mark.parametrize("order", ["C", "F"])
    def test_backward_error(self, n, lower, order):
        rng = np.random.default_rng(11)
        a = spd(rng, n)
        a = np.asfortranarray(a) if order == "F" else np.ascontiguousarray(a)
        a0 = a.copy()
        c = potrf(a, lower=lower, block_size=16, **EMU)
        assert np.array_equal(a, a0)
        assert np.array_equal(c, np.tril(c) if lower else np.triu(c))
        c0 = sla.cholesky(a, lower=lower)
        assert within(chol_backward(a, c, lower), chol_backward(a, c0, lower), a)

    @pytest.mark.parametrize("kappa", [1e8, 1e12])
    def test_ill_conditioned(self, kappa):
        rng = np.random.default_rng(12)
        a = spd(rng, 160, kappa)
        c = potrf(a, lower=True, block_size=32, **EMU)
        c0 = sla.cholesky(a, lower=True)
        assert within(chol_backward(a, c, True), chol_backward(a, c0, True), a)
        b = rng.standard_normal((160, 2))
        x = potrs(c, b, lower=True, block_size=32, **EMU)
        x0 = sla.cho_solve((c0, True), b)
        assert within(solve_residual(a, x, b), solve_residual(a, x0, b), a)

    def test_badly_scaled(self):
        rng = np.random.default_rng(13)
        d = portable_exp(4 * rng.standard_normal(150))
        a = d[:, None] * spd(rng, 150) * d[None, :]
        c = potrf(a, block_size=32, **EMU)
        c0 = sla.cholesky(a)
        assert within(chol_backward(a, c, False), chol_backward(a, c0, False), a)

    def test_only_triangle_referenced(self):
        rng = np.random.default_rng(14)
        a = spd(rng, 100)
        for lower in (True, False):
            junk = a.copy()
            junk[np.triu_indices(100, 1) if lower else np.tril_indices(100, -1)] = np.nan
            c = potrf(junk, lower=lower, block_size=16, check_finite=False, **EMU)
            assert np.isfinite(c).all()
            c0 = sla.cholesky(a, lower=lower)
            assert within(chol_backward(a, c, lower), chol_backward(a, c0, lower), a)

    def test_clean_false_keeps_other_triangle(self):
        rng = np.random.default_rng(15)
        a = spd(rng, 80)
        a[np.triu_indices(80, 1)] = 7.0
        c = potrf(a, lower=True, clean=False, block_size=16, **EMU)
        assert np.array_equal(np.triu(c, 1), np.triu(a, 1))

    @pytest.mark.parametrize("bad", [1, 20, 70, 99])
    def test_not_positive_definite(self, bad):
        rng = np.random.default_rng(16)
        a = spd(rng, 100)
        a[bad - 1, bad - 1] = -1.0
        with pytest.raises(LinAlgError) as ref:
            sla.cholesky(a)
        for lower in (True, False):
            with pytest.raises(LinAlgError) as got:
                potrf(a, lower=lower, block_size=16, **EMU)
            assert str(got.value) == str(ref.value)
            assert str(got.value) == f"{bad}-th leading minor of the array is not positive definite"

    def test_noncontiguous_and_overwrite(self):
        rng = np.random.default_rng(17)
        a = noncontig(spd(rng, 70))
        c = potrf(a, block_size=16, **EMU)
        c0 = sla.cholesky(a)
        assert within(chol_backward(a, c, False), chol_backward(a, c0, False), a)
        f = np.asfortranarray(spd(rng, 70))
        f0 = f.copy()
        c = potrf(f, lower=True, overwrite_a=True, block_size=16, **EMU)
        assert c is f
        c0 = sla.cholesky(f0, True)
        assert within(chol_backward(f0, c, True), chol_backward(f0, c0, True), f0)

    def test_empty_and_errors(self):
        assert potrf(np.zeros((0, 0))).shape == (0, 0)
        with pytest.raises(ValueError, match="square"):
            potrf(np.ones((3, 4)))
        with pytest.raises(ValueError, match="2-D"):
            potrf(np.ones((2, 2, 2)))

    def test_flop_share(self):
        rng = np.random.default_rng(18)
        a = spd(rng, 512)
        with ozlinalg.profile() as p:
            potrf(a, block_size=32, **EMU)
        assert p.emulated_flop_share >= 0.9


# ---------------------------------------------------------------- geqrf / orgqr / ormqr


def q_from(qr, tau, m, **kw):
    """Full (m x m) Q the way scipy.linalg.qr builds it."""
    n = qr.shape[1]
    if m > n:
        pad = np.zeros((m, m))
        pad[:, :n] = qr
        return orgqr(pad, tau, **kw)
    return orgqr(qr[:, :m], tau, **kw)


class TestGeqrf:
    @pytest.mark.parametrize("shape", [(1, 1), (64, 64), (97, 97), (200, 50), (50, 130),
                                       (257, 100)])
    @pytest.mark.parametrize("order", ["C", "F"])
    def test_backward_error(self, shape, order):
        rng = np.random.default_rng(21)
        a = make(rng, shape, order=order)
        a0 = a.copy()
        qr, tau = geqrf(a, block_size=16, **EMU)
        assert np.array_equal(a, a0)
        m, n = shape
        assert qr.shape == shape and tau.shape == (min(shape),)
        q = q_from(qr, tau, m, block_size=16, **EMU)
        r = np.triu(qr)
        q0, r0 = sla.qr(a)
        assert within(nrm(a - q @ r) / nrm(a), nrm(a - q0 @ r0) / nrm(a), a)
        eye = np.eye(m)
        assert within(nrm(q.T @ q - eye), nrm(q0.T @ q0 - eye), q.T)
        # LAPACK storage: same R and reflectors as dgeqrf up to rounding.
        qr0, tau0, _, _ = sla.lapack.dgeqrf(a)
        np.testing.assert_allclose(tau, tau0, rtol=0, atol=1e-10)
        np.testing.assert_allclose(qr, qr0, rtol=0, atol=1e-10 * np.abs(qr0).max())

    @pytest.mark.parametrize("kind", ["kappa1e8", "kappa1e12", "scaled", "rowscaled"])
    def test_hard_inputs(self, kind):
        rng = np.random.default_rng(22)
        a = make(rng, (240, 60), kind)
        qr, tau = geqrf(a, block_size=16, **EMU)
        q = orgqr(qr, tau, block_size=16, **EMU)
        q0, r0 = sla.qr(a, mode="economic")
        assert within(nrm(a - q @ np.triu(qr[:60])) / nrm(a), nrm(a - q0 @ r0) / nrm(a), a)
        eye = np.eye(60)
        assert within(nrm(q.T @ q - eye), nrm(q0.T @ q0 - eye), q.T)

    def test_economic_like_scipy(self):
        rng = np.random.default_rng(23)
        a = rng.standard_normal((150, 40))
        qr, tau = geqrf(a, block_size=16, **EMU)
        q = orgqr(qr, tau, block_size=16, **EMU)
        q0, _ = sla.qr(a, mode="economic")
        np.testing.assert_allclose(q, q0, atol=1e-12)

    @pytest.mark.parametrize("side", ["L", "R"])
    @pytest.mark.parametrize("trans", ["N", "T"])
    @pytest.mark.parametrize("shape", [(120, 50), (60, 90)])
    def test_ormqr(self, side, trans, shape):
        rng = np.random.default_rng(24)
        a = rng.standard_normal(shape)
        m = shape[0]
        qr, tau = geqrf(a, block_size=16, **EMU)
        k = tau.shape[0]
        c = rng.standard_normal((m, 7) if side == "L" else (5, m))
        c0 = c.copy()
        got = ormqr(qr, tau, c, side=side, trans=trans, block_size=16, **EMU)
        assert np.array_equal(c, c0)
        ref = sla.lapack.dormqr(side, trans, qr[:, :k], tau, c, lwork=max(1, 64 * m))[0]
        np.testing.assert_allclose(got, ref, atol=1e-12 * np.abs(ref).max())

    def test_ormqr_vector_and_solve(self):
        rng = np.random.default_rng(25)
        a = rng.standard_normal((100, 100))
        b = rng.standard_normal(100)
        qr, tau = geqrf(a, block_size=16, **EMU)
        y = ormqr(qr, tau, b, block_size=16, **EMU)
        assert y.shape == (100,)
        x = trsm(qr, y, lower=False, block_size=16, **EMU)
        x0 = sla.solve(a, b)
        assert within(solve_residual(a, x, b), solve_residual(a, x0, b), a)

    def test_noncontiguous_overwrite_empty(self):
        rng = np.random.default_rng(26)
        a = noncontig(rng.standard_normal((80, 60)))
        qr, tau = geqrf(a, block_size=16, **EMU)
        qr0, tau0, _, _ = sla.lapack.dgeqrf(a)
        np.testing.assert_allclose(qr, qr0, atol=1e-12 * np.abs(qr0).max())
        f = np.asfortranarray(rng.standard_normal((80, 60)))
        qr, tau = geqrf(f, block_size=16, overwrite_a=True, **EMU)
        assert qr is f
        q = orgqr(qr, tau, block_size=16, overwrite_a=True, **EMU)
        assert q is qr
        np.testing.assert_allclose(q.T @ q, np.eye(60), atol=1e-13)
        for shape in [(0, 0), (0, 4), (4, 0)]:
            qr, tau = geqrf(np.zeros(shape))
            assert qr.shape == shape and tau.shape == (0,)

    def test_zero_columns(self):
        # tau = 0 reflectors (zero columns) must not break the T recurrence.
        rng = np.random.default_rng(27)
        a = rng.standard_normal((90, 60))
        a[:, 5] = 0.0
        a[:, 40] = 0.0
        qr, tau = geqrf(a, block_size=16, **EMU)
        q = orgqr(qr, tau, block_size=16, **EMU)
        q0, r0 = sla.qr(a, mode="economic")
        assert within(nrm(a - q @ np.triu(qr[:60])) / nrm(a), nrm(a - q0 @ r0) / nrm(a), a)

    def test_errors(self):
        qr, tau = geqrf(np.eye(4) + 1, **EMU)
        with pytest.raises(ValueError, match="M >= N"):
            orgqr(np.ones((3, 4)), np.ones(2))
        with pytest.raises(ValueError, match="tau"):
            orgqr(qr, np.ones(5))
        with pytest.raises(ValueError, match="order"):
            ormqr(qr, tau, np.ones((5, 2)))
        with pytest.raises(ValueError, match="side"):
            ormqr(qr, tau, np.ones((4, 2)), side="X")
        with pytest.raises(ValueError, match="trans"):
            ormqr(qr, tau, np.ones((4, 2)), trans="Q")

    def test_flop_share(self):
        rng = np.random.default_rng(28)
        a = rng.standard_normal((512, 512))
        with ozlinalg.profile() as p:
            geqrf(a, block_size=32, **EMU)
        assert p.emulated_flop_share >= 0.9


# ---------------------------------------------------------------- trsm


def tri_matrix(rng, n, lower):
    a = rng.standard_normal((n, n)) + 2 * np.sqrt(n) * np.eye(n)
    return np.tril(a) if lower else np.triu(a)


class TestTrsm:
    @pytest.mark.parametrize("side", ["L", "R"])
    @pytest.mark.parametrize("lower", [True, False])
    @pytest.mark.parametrize("trans", [0, 1, "C"])
    @pytest.mark.parametrize("unit", [False, True])
    def test_all_variants(self, side, lower, trans, unit):
        rng = np.random.default_rng(31)
        n = 100
        a = tri_matrix(rng, n, lower)
        if unit:
            a[np.diag_indices(n)] = 1.0
        b = rng.standard_normal((n, 7) if side == "L" else (7, n))
        b0 = b.copy()
        x = trsm(a, b, side=side, lower=lower, trans=trans, unit_diagonal=unit,
                 block_size=16, **EMU)
        assert np.array_equal(b, b0)
        op = a.T if trans in (1, "C") else a
        if side == "L":
            x0 = sla.solve_triangular(op, b, lower=lower != (op is not a), unit_diagonal=unit)
            res, ref = solve_residual(op, x, b), solve_residual(op, x0, b)
        else:
            x0 = sla.solve_triangular(op.T, b.T, lower=lower == (op is not a),
                                      unit_diagonal=unit).T
            res = solve_residual(op.T, x.T, b.T)
            ref = solve_residual(op.T, x0.T, b.T)
        assert within(res, ref, a)

    @pytest.mark.parametrize("n", [1, 33, 130])
    def test_sizes_vector_rhs(self, n):
        rng = np.random.default_rng(32)
        a = tri_matrix(rng, n, True)
        b = rng.standard_normal(n)
        x = trsm(a, b, lower=True, block_size=8, **EMU)
        assert x.shape == (n,)
        x0 = sla.solve_triangular(a, b, lower=True)
        assert within(solve_residual(a, x, b), solve_residual(a, x0, b), a)
        xr = trsm(a, b, side="R", lower=True, block_size=8, **EMU)
        xr0 = sla.solve_triangular(a.T, b, lower=False)
        assert within(solve_residual(a.T, xr, b), solve_residual(a.T, xr0, b), a.T)

    def test_unreferenced_parts(self):
        rng = np.random.default_rng(33)
        a = tri_matrix(rng, 64, True)
        junk = a.copy()
        junk[np.triu_indices(64, 1)] = np.nan
        junk[np.diag_indices(64)] = np.nan
        b = rng.standard_normal((64, 3))
        x = trsm(junk, b, lower=True, unit_diagonal=True, check_finite=False, block_size=8,
                 **EMU)
        x0 = sla.solve_triangular(np.tril(a, -1) + np.eye(64), b, lower=True)
        np.testing.assert_allclose(x, x0, rtol=1e-10, atol=1e-12)

    def test_many_rhs_fortran_noncontig_overwrite(self):
        rng = np.random.default_rng(34)
        a = tri_matrix(rng, 90, False)
        b = noncontig(rng.standard_normal((90, 200)))
        x = trsm(a, b, block_size=16, **EMU)
        x0 = sla.solve_triangular(a, b)
        assert within(solve_residual(a, x, b), solve_residual(a, x0, b), a)
        f = np.asfortranarray(rng.standard_normal((90, 20)))
        f0 = f.copy()
        x = trsm(a, f, block_size=16, overwrite_b=True, **EMU)
        assert x is f
        x0 = sla.solve_triangular(a, f0)
        assert within(solve_residual(a, x, f0), solve_residual(a, x0, f0), a)

    def test_ill_conditioned(self):
        rng = np.random.default_rng(35)
        a = np.triu(rng.standard_normal((150, 150)))  # exponentially ill-conditioned
        a[np.diag_indices(150)] = portable_exp(rng.standard_normal(150))
        b = rng.standard_normal((150, 4))
        x = trsm(a, b, block_size=16, **EMU)
        x0 = sla.solve_triangular(a, b)
        assert within(solve_residual(a, x, b), solve_residual(a, x0, b), a)

    def test_empty_and_errors(self):
        assert trsm(np.eye(3), np.zeros((3, 0)), **EMU).shape == (3, 0)
        assert trsm(np.zeros((0, 0)), np.zeros((0, 2)), **EMU).shape == (0, 2)
        with pytest.raises(LinAlgError, match="diagonal 2"):
            a = np.eye(4)
            a[2, 2] = 0
            trsm(a, np.ones(4), **EMU)
        with pytest.raises(ValueError, match="incompatible"):
            trsm(np.eye(3), np.ones((4, 2)))
        with pytest.raises(ValueError, match="square"):
            trsm(np.ones((3, 2)), np.ones(3))
        with pytest.raises(ValueError, match="side"):
            trsm(np.eye(2), np.ones(2), side="X")
        with pytest.raises(ValueError, match="trans"):
            trsm(np.eye(2), np.ones(2), trans=3)

    def test_emulated_share(self):
        rng = np.random.default_rng(36)
        a = tri_matrix(rng, 256, True)
        b = rng.standard_normal((256, 64))
        with ozlinalg.profile() as p:
            trsm(a, b, lower=True, block_size=16, **EMU)
        assert p.emulated_flop_share >= 0.9


def test_public_namespace():
    import ozlinalg.lapack as L

    for name in L.__all__:
        assert hasattr(L, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        getrf(np.eye(3) + 1, **EMU)


class TestBalanceInner:
    def test_exact_and_effective(self):
        from ozlinalg.ozaki.balance import balance_inner

        rng = np.random.default_rng(41)
        d = portable_exp(4 * rng.standard_normal(60))
        a = rng.standard_normal((30, 60)) / d[None, :]
        b = rng.standard_normal((60, 20)) * d[:, None]
        a2, b2, _ = balance_inner(np, a, b)
        f = np.frexp(np.abs(b2).max(axis=1))[1] - np.frexp(np.abs(b).max(axis=1))[1]
        np.testing.assert_array_equal(np.ldexp(a2, f[None, :]), a)
        np.testing.assert_array_equal(np.ldexp(b2, -f[:, None]), b)
        ratio = np.abs(a2).max(axis=0) / np.abs(b2).max(axis=1)
        assert ratio.max() <= 4 and ratio.min() >= 0.25

    def test_skips_when_unsafe(self):
        from ozlinalg.ozaki.balance import balance_inner

        a = np.array([[1e-300, 1e300]])
        b = np.array([[1e300], [1e-300]])
        a2, b2, _ = balance_inner(np, a, b)
        assert a2 is a and b2 is b

    def test_correlated_scaling_product(self):
        # Large a_ik meeting small b_kj: the case balancing is for.
        from ozlinalg._options import resolve
        from ozlinalg.lapack._common import Runner

        rng = np.random.default_rng(43)
        e = rng.integers(0, 60, 80)
        a = np.ldexp(rng.standard_normal((40, 80)), e[None, :])
        b = np.ldexp(rng.standard_normal((80, 3)), -e[:, None])
        got = Runner(resolve(np)).gemm(a, b)
        ref = a @ b
        scale = np.abs(a) @ np.abs(b)
        assert np.max(np.abs(got - ref) / scale) < 1e-14

    def test_scaled_spd_solve(self):
        rng = np.random.default_rng(42)
        n = 256
        d = portable_exp(4 * rng.standard_normal(n))
        g = rng.standard_normal((n, n))
        a = d[:, None] * (g @ g.T / n + np.eye(n)) * d[None, :]
        b = rng.standard_normal(n)
        c = potrf(a, lower=True, block_size=32, **EMU)
        x = potrs(c, b, lower=True, **EMU)
        c0 = sla.cholesky(a, lower=True)
        x0 = sla.cho_solve((c0, True), b)
        assert within(chol_backward(a, c, True), chol_backward(a, c0, True), a)
        assert within(solve_residual(a, x, b), solve_residual(a, x0, b), a)
