"""The factorizations' emulated products, each checked against the exact product while
the factorization runs: blocked LU, Cholesky, QR (geqrf / orgqr / ormqr) and the
triangular solve.

A backward error cannot see a product a few ulps off: LAPACK's own rounding in the
panels and the subtraction ``A22 - L21 U12`` is as large. So here every emulated
product the blocked code makes (:meth:`ozlinalg.lapack._common.Runner.gemm`, the one
route of the trailing updates and couplings) is compared with the exact product
(python-flint integers): the median error relative to the exact entries is at most
2**-53 (at DGEMM level the emulation is far closer than that: a product a few ulps
off everywhere fails), and no entry is beyond FP64's dot-product bound. The
factorizations still have to give LAPACK's backward error, and the products are
counted, so that a route that stopped calling the emulation fails too.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

from ozlinalg.lapack import (
    _common,
    compiled_steps,
    geqrf,
    getrf,
    getrs,
    orgqr,
    ormqr,
    potrf,
    potrs,
    trsm,
)
from ozlinalg.testing import ExactReference, dot_error_bound

pytest.importorskip("flint")

EPS = np.finfo(np.float64).eps
EMU = dict(min_size=0)
pytestmark = pytest.mark.usefixtures("one_blas_thread")


@pytest.fixture
def checked(monkeypatch):
    """Every emulated product of the blocked code, checked against the exact one; the
    list of ``(m, k, p)`` checked."""
    seen = []
    inner = _common._product

    def gemm(plan, a, b, **kw):
        c = inner(plan, a, b, **kw)
        real = np.asarray(a).dtype.kind != "c" and np.asarray(b).dtype.kind != "c"
        if real and a.size and b.size:
            a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
            ref = ExactReference(a64, b64)
            rel = ref.relative_errors(c)
            finite = np.isfinite(rel)
            med = float(np.median(rel[finite])) if finite.any() else 0.0
            assert med <= 2.0**-53, (f"{a.shape} @ {b.shape}: median relative error "
                                     f"{med:.3g} against the exact product")
            err = ref.absolute_errors(c)
            assert (err <= dot_error_bound(a64, b64)).all(), \
                f"{a.shape} @ {b.shape}: entries beyond the FP64 dot-product bound"
            seen.append((a.shape[0], a.shape[1], b.shape[1]))
        return c

    monkeypatch.setattr(_common, "_product", gemm)
    # the compiled one-level steps (LU, Cholesky, triangular solves) make their products
    # inside one kernel call: off here, so that each product is seen
    # (test_lu_one_level.py and test_one_level_cholesky.py hold them to these Python
    # steps' bits)
    monkeypatch.setattr(compiled_steps, "arguments", lambda *args: None)
    return seen


def _rng(seed):
    return np.random.default_rng(seed)


def _lu_backward(a, lu, piv):
    n = a.shape[0]
    perm = np.arange(n)
    for i, p in enumerate(piv):
        perm[i], perm[p] = perm[p], perm[i]
    low = np.tril(lu, -1)[:, :min(a.shape)] + np.eye(*a.shape)[:, :min(a.shape)]
    up = np.triu(lu)[:min(a.shape)]
    return np.linalg.norm(a[perm] - low @ up, 1) / np.linalg.norm(a, 1)


class TestGetrf:
    @pytest.mark.parametrize("shape", [(64, 64), (70, 45), (45, 70)])
    @pytest.mark.parametrize("order", ["C", "F"])
    def test_every_update_is_exact_to_the_dgemm_level(self, checked, shape, order):
        a = _rng(1).standard_normal(shape)
        a = np.asfortranarray(a) if order == "F" else a
        lu, piv = getrf(a, block_size=8, **EMU)
        assert len(checked) >= 4
        lu0, piv0 = sla.lu_factor(a)
        np.testing.assert_array_equal(piv, piv0)
        assert _lu_backward(a, lu, piv) <= 4 * max(_lu_backward(a, lu0, piv0),
                                                   min(shape) * EPS)

    def test_solve(self, checked):
        rng = _rng(2)
        a = rng.standard_normal((60, 60))
        b = rng.standard_normal((60, 5))
        lu, piv = getrf(a, block_size=8, **EMU)
        x = getrs(lu, piv, b, block_size=8, **EMU)
        assert len(checked) >= 4
        np.testing.assert_allclose(a @ x, b, atol=60 * EPS * np.linalg.cond(a) * 10)


class TestPotrf:
    @pytest.mark.parametrize("lower", [True, False])
    @pytest.mark.parametrize("order", ["C", "F"])
    def test_every_update_is_exact_to_the_dgemm_level(self, checked, lower, order):
        g = _rng(3).standard_normal((64, 64))
        a = g @ g.T + 64 * np.eye(64)
        a = np.asfortranarray(a) if order == "F" else a
        c = potrf(a, lower=lower, block_size=8, **EMU)
        assert len(checked) >= 4
        c = np.tril(c) if lower else np.triu(c)
        rec = c @ c.T if lower else c.T @ c
        assert np.linalg.norm(rec - a, 1) <= 64 * 4 * EPS * np.linalg.norm(a, 1)

    def test_solve(self, checked):
        rng = _rng(4)
        g = rng.standard_normal((48, 48))
        a = g @ g.T + 48 * np.eye(48)
        b = rng.standard_normal((48, 3))
        c = potrf(a, lower=True, block_size=8, **EMU)
        x = potrs(c, b, lower=True, block_size=8, **EMU)
        assert len(checked) >= 4
        np.testing.assert_allclose(a @ x, b, atol=48 * EPS * np.linalg.cond(a) * 10)


class TestGeqrf:
    @pytest.mark.parametrize("shape", [(70, 40), (48, 48)])
    def test_every_update_is_exact_to_the_dgemm_level(self, checked, shape):
        a = _rng(5).standard_normal(shape)
        qr, tau = geqrf(a, block_size=8, **EMU)
        q = orgqr(qr, tau, block_size=8, **EMU)
        assert len(checked) >= 4
        r = np.triu(qr[:shape[1]])
        assert np.linalg.norm(q @ r - a, 1) <= 8 * shape[0] * EPS * np.linalg.norm(a, 1)

    def test_ormqr(self, checked):
        rng = _rng(6)
        a = rng.standard_normal((64, 32))
        c = rng.standard_normal((64, 20))
        qr, tau = geqrf(a, block_size=8, **EMU)
        n0 = len(checked)
        got = ormqr(qr, tau, c, side="L", trans="T", block_size=8, **EMU)
        assert len(checked) > n0
        q = sla.qr(a)[0]
        np.testing.assert_allclose(np.abs(got[:32]), np.abs(q.T @ c)[:32],
                                   atol=64 * 8 * EPS * np.abs(c).max())


class TestTrsm:
    @pytest.mark.parametrize("side", ["L", "R"])
    @pytest.mark.parametrize("lower", [True, False])
    def test_every_coupling_is_exact_to_the_dgemm_level(self, checked, side, lower):
        rng = _rng(7)
        t = rng.standard_normal((64, 64))
        t = (np.tril(t) if lower else np.triu(t)) + 16 * np.eye(64)
        b = rng.standard_normal((64, 24) if side == "L" else (24, 64))
        x = trsm(t, b, side=side, lower=lower, block_size=8, **EMU)
        assert len(checked) >= 4
        rec = t @ x if side == "L" else x @ t
        assert np.abs(rec - b).max() <= 64 * 8 * EPS * np.abs(t).max() * np.abs(x).max()


@pytest.fixture
def small_blocks(monkeypatch):
    """Panels of 16 columns for the namespaces' factorizations (the engine's own
    default would factor these orders in one native panel): several emulated updates."""
    import ozlinalg
    from ozlinalg.engines import get_engine

    monkeypatch.setattr(get_engine(np), "block_size", 16, raising=False)
    with ozlinalg.options(min_size=0):
        yield


def _system(seed, n=96, k=3):
    rng = _rng(seed)
    a = rng.standard_normal((n, n)) + n**0.5 * np.eye(n)
    return a, rng.standard_normal((n, k))


def _close(got, want, a):
    """Within the first-order bound of a backward-stable answer: n cond(a) u."""
    scale = max(np.abs(want).max(), 1.0)
    tol = 8 * a.shape[0] * np.linalg.cond(a) * EPS * scale
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


class TestScipyNamespace:
    """``ozlinalg.linalg``'s solve, inv, det and lstsq, products checked."""

    def test_solve(self, checked, small_blocks):
        from ozlinalg import linalg

        a, b = _system(8)
        _close(linalg.solve(a, b), sla.solve(a, b), a)
        assert len(checked) >= 2

    def test_inv(self, checked, small_blocks):
        from ozlinalg import linalg

        a, _ = _system(9)
        _close(linalg.inv(a), sla.inv(a), a)
        assert len(checked) >= 2

    def test_det(self, checked, small_blocks):
        from ozlinalg import linalg

        a, _ = _system(10)
        want = sla.det(a)
        assert abs(linalg.det(a) - want) <= 8 * 96 * EPS * np.linalg.cond(a) * abs(want)
        assert len(checked) >= 1

    def test_lstsq(self, checked, small_blocks):
        from ozlinalg import linalg

        rng = _rng(11)
        a = rng.standard_normal((90, 50))
        b = rng.standard_normal((90, 2))
        _close(linalg.lstsq(a, b)[0], sla.lstsq(a, b)[0], a)
        assert len(checked) >= 2


class TestNumpyNamespace:
    """``ozlinalg.numpy_linalg``'s solve, inv, det, slogdet, cholesky, qr and lstsq,
    products checked."""

    def test_solve_inv_det(self, checked, small_blocks):
        from ozlinalg import numpy_linalg as la

        a, b = _system(12)
        _close(la.solve(a, b), np.linalg.solve(a, b), a)
        _close(la.inv(a), np.linalg.inv(a), a)
        want = np.linalg.det(a)
        assert abs(la.det(a) - want) <= 8 * 96 * EPS * np.linalg.cond(a) * abs(want)
        sign, logdet = la.slogdet(a)
        sign0, logdet0 = np.linalg.slogdet(a)
        assert sign == sign0 and abs(logdet - logdet0) <= 8 * 96 * EPS * np.linalg.cond(a)
        assert len(checked) >= 6

    def test_cholesky_qr_lstsq(self, checked, small_blocks):
        from ozlinalg import numpy_linalg as la

        a, b = _system(13)
        spd = a @ a.T
        _close(la.cholesky(spd), np.linalg.cholesky(spd), spd)
        q, r = la.qr(a)
        q0, r0 = np.linalg.qr(a)
        _close(np.abs(r), np.abs(r0), a)
        _close(la.lstsq(a, b)[0], np.linalg.lstsq(a, b)[0], a)
        assert len(checked) >= 6
