"""Refined solves (``refine=`` of ozlinalg.solve / ozlinalg.linalg.solve).

Accuracy is judged against the exact solution (rational arithmetic) and against
LAPACK's own answer to the same system in the same test body: the refined solve must
never be worse than ``scipy.linalg.solve``.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla

import ozlinalg
from ozlinalg._options import resolve
from ozlinalg.linalg import _refine, solve
from ozlinalg.linalg._basic import REFINE_MIN_ORDER, refines
from ozlinalg.testing import exact_solve

U = 2.0**-53


def _matrix(rng, n, kappa, spd=False, dtype=np.float64):
    """A random matrix of 2-norm condition number ``kappa`` (singular values
    geometrically spaced), symmetric positive definite when ``spd``."""
    cplx = np.dtype(dtype).kind == "c"

    def orth():
        g = rng.standard_normal((n, n))
        if cplx:
            g = g + 1j * rng.standard_normal((n, n))
        return np.linalg.qr(g)[0]

    s = np.logspace(0, -np.log10(kappa), n)
    q1 = orth()
    a = (q1 * s) @ (q1.conj().T if spd else orth().conj().T)
    if spd:
        a = (a + a.conj().T) / 2
    return a.astype(dtype)


def _eta(a, b, x):
    """Largest normwise backward error over the columns, in float64 arithmetic."""
    a, b, x = (np.asarray(v, dtype=np.complex128) for v in (a, b, x))
    b, x = b.reshape(len(b), -1), x.reshape(len(x), -1)
    r = np.abs(b - a @ x).max(axis=0)
    den = np.abs(a).sum(axis=1).max() * np.abs(x).max(axis=0) + np.abs(b).max(axis=0)
    return float((r / den).max())


@pytest.fixture
def rng():
    return np.random.default_rng(20261202)


class TestRefinedSolveAccuracy:
    """Backward and forward error against LAPACK and the exact solution, κ 1e1..1e14."""

    @pytest.mark.parametrize("kappa", [1e1, 1e4, 1e6, 1e8, 1e10, 1e12, 1e14])
    @pytest.mark.parametrize("assume_a", [None, "pos"])
    def test_errors_no_worse_than_lapack(self, rng, kappa, assume_a):
        n = 48
        a = _matrix(rng, n, kappa, spd=assume_a == "pos")
        b = rng.standard_normal(n)
        with ozlinalg.profile() as prof:
            x = solve(a, b, assume_a=assume_a, refine=True)
        want = sla.solve(a, b, assume_a=assume_a)
        exact = exact_solve(a, b)
        assert len(prof.refined) == 1 and not prof.refined[0].fell_back
        # backward error: at most LAPACK dsgesv's stopping test (sqrt(n) eps), and not
        # above LAPACK's own beyond the rounding of the residual
        eta = _eta(a, b, x)
        assert eta <= 2 * np.sqrt(n) * 2 * U
        assert eta <= max(4 * _eta(a, b, want), 4 * U)
        # forward error: within a small factor of LAPACK's (both ~ kappa * u), and of
        # the first-order bound
        scale = np.abs(exact).max()
        err = np.abs(x - exact).max() / scale
        err_lapack = np.abs(want - exact).max() / scale
        assert err <= max(10 * err_lapack, 8 * n * U)
        assert err <= 8 * n * kappa * U

    def test_large_order_matches_lapack(self, rng):
        n = 384
        a = _matrix(rng, n, 1e6)
        b = rng.standard_normal((n, 3))
        x = solve(a, b, refine=True)
        want = sla.solve(a, b)
        assert _eta(a, b, x) <= max(4 * _eta(a, b, want), 2 * np.sqrt(n) * 2 * U)
        # both are backward stable at kappa 1e6: forward errors ~1e-10 apart at most
        np.testing.assert_allclose(x, want, rtol=0, atol=1e6 * n * U * np.abs(want).max())


def _exact_eta(a, b, x):
    """Normwise backward error of ``x`` with the residual ``b - a x`` from the exact
    product (python-flint), not from the FP64 arithmetic the refinement itself uses."""
    from ozlinalg.testing import ExactReference

    ref = ExactReference(a, x.reshape(-1, 1))
    r = np.abs((b.reshape(-1, 1) - ref.hi) - ref.lo).max()
    return float(r / (np.abs(a).sum(axis=1).max() * np.abs(x).max() + np.abs(b).max()))


class TestExactResidual:
    """The refined solve's answer judged by an independent, exact residual: its
    backward error at most LAPACK's on the same system (also exact) or two units of
    roundoff. Systems with no cancellation in ``A x`` (positive entries), where
    ``||b|| = ||A|| ||x||``: a residual the refinement computed a few ulps wrong would
    leave that much backward error here (it converges to the wrong residual's zero)."""

    @pytest.mark.parametrize("n", [48, 96])
    @pytest.mark.parametrize("assume_a", [None, "pos"])
    @pytest.mark.parametrize("seed", [0, 1])
    def test_backward_error_of_the_exact_residual(self, n, assume_a, seed):
        pytest.importorskip("flint")
        rng = np.random.default_rng(seed)
        a = rng.random((n, n)) + 0.5 * n * np.eye(n)
        if assume_a == "pos":
            a = a @ a.T
        b = a @ (rng.random(n) + 0.5)
        with ozlinalg.profile() as prof:
            x = solve(a, b, assume_a=assume_a, refine=True)
        assert len(prof.refined) == 1 and not prof.refined[0].fell_back
        lapack = _exact_eta(a, b, sla.solve(a, b, assume_a=assume_a))
        assert _exact_eta(a, b, x) <= max(2 * lapack, 4 * U)


class TestRefinedSolveCounts:
    """The count is chosen from the condition estimate and raised where needed."""

    def test_well_conditioned_stays_at_the_first_level(self, rng):
        n = 300
        a = _matrix(rng, n, 1e2)
        with ozlinalg.profile() as prof:
            solve(a, rng.standard_normal(n), refine=True)
        rec = prof.refined[0]
        first = _refine.ladder("hybrid-ef")[_refine.FIRST_LEVEL["hybrid-ef"]].slices
        assert rec.counts == (first,)
        assert rec.count == first and 1 <= rec.iterations <= 5
        assert rec.gmres_steps == 0 and not rec.fell_back
        assert rec.rcond is not None and rec.backward_error <= 2 * np.sqrt(n) * 2 * U
        assert "refined solve" in prof.summary()

    @pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
    def test_ill_conditioned_raises_the_count(self, rng, method):
        n = 300
        a = _matrix(rng, n, 1e10)
        b = rng.standard_normal(n)
        with ozlinalg.options(method=method), ozlinalg.profile() as prof:
            x = solve(a, b, refine=True)
        rec = prof.refined[0]
        levels = [lv.slices for lv in _refine.ladder(method)]
        assert len(rec.counts) == 2
        assert levels.index(rec.counts[1]) > levels.index(rec.counts[0])
        assert _eta(a, b, x) <= 2 * np.sqrt(n) * 2 * U

    def test_faithful_and_methods_without_levels_refine_at_dgemm_level(self):
        assert [lv.slices for lv in _refine.ladder("hybrid-ef", "faithful")] == ["auto"]
        assert [lv.slices for lv in _refine.ladder("bitmask")] == ["auto"]
        assert _refine.ladder("crt")[-1].slices == "auto"

    def test_gmres_ir_when_classical_refinement_stalls(self, rng, monkeypatch):
        # forbid the escalation by the estimate and start on the coarsest level: the
        # classical iteration cannot contract at kappa 1e7 there, GMRES-IR can
        monkeypatch.setattr(_refine, "KAPPA_U_MAX", np.inf)
        monkeypatch.setitem(_refine.FIRST_LEVEL, "hybrid-ef", 0)
        n = 300
        a = _matrix(rng, n, 1e7)
        b = rng.standard_normal(n)
        with ozlinalg.profile() as prof:
            x = solve(a, b, refine=True)
        rec = prof.refined[0]
        assert rec.gmres_steps > 0
        assert not rec.fell_back
        assert _eta(a, b, x) <= 2 * np.sqrt(n) * 2 * U

    def test_falls_back_to_the_dgemm_level_solve(self, rng, monkeypatch):
        def never(self, factors, x):
            return x, self.backward(x, self.residual(x)), False

        monkeypatch.setattr(_refine._Refinement, "classical", never)
        monkeypatch.setattr(_refine._Refinement, "gmres", never)
        n = 300
        a = _matrix(rng, n, 1e3)
        b = rng.standard_normal(n)
        with ozlinalg.profile() as prof:
            x = solve(a, b, refine=True)
        rec = prof.refined[0]
        assert rec.fell_back and rec.counts[-1] == "auto"
        # the DGEMM-level solve's own accuracy
        assert _eta(a, b, x) <= 64 * n * U


class TestRefinedSolveVerdicts:
    """Singular, ill-conditioned and indefinite matrices get SciPy's verdict."""

    @pytest.mark.parametrize("refine", [True, "auto"])
    def test_singular(self, refine):
        a = np.ones((300, 300))
        b = np.ones(300)
        with pytest.raises(np.linalg.LinAlgError, match="singular"):
            sla.solve(a, b)
        with pytest.raises(np.linalg.LinAlgError, match="singular"):
            ozlinalg.solve(a, b, refine=refine)

    def test_ill_conditioned_warns_as_lapack(self, rng):
        n = 64
        a = _matrix(rng, n, 1e18)
        b = rng.standard_normal(n)
        with warnings.catch_warnings(record=True) as native:
            warnings.simplefilter("always")
            sla.solve(a, b)
        with warnings.catch_warnings(record=True) as ours:
            warnings.simplefilter("always")
            solve(a, b, refine=True)
        assert [w.category for w in ours] == [w.category for w in native]
        assert any(issubclass(w.category, sla.LinAlgWarning) for w in ours)

    def test_not_positive_definite(self, rng):
        a = _matrix(rng, 64, 10.0, spd=True) - 2 * np.eye(64)
        b = np.ones(64)
        with pytest.raises(np.linalg.LinAlgError):
            sla.solve(a, b, assume_a="pos")
        with pytest.raises(np.linalg.LinAlgError):
            solve(a, b, assume_a="pos", refine=True)


class TestRefinedSolveInputs:
    """dtypes, structures, transposition, batches, 1-D right-hand sides, memory."""

    @pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
    @pytest.mark.parametrize("assume_a", [None, "gen", "pos", "sym", "her"])
    def test_dtype_and_structure_grid(self, rng, dtype, assume_a):
        n = 96
        a = _matrix(rng, n, 1e3, spd=assume_a in ("pos", "her"), dtype=dtype)
        if assume_a == "sym":
            a = (a + a.T) / 2
        b = rng.standard_normal((n, 2)).astype(dtype)
        want = sla.solve(a, b, assume_a=assume_a)
        got = solve(a, b, assume_a=assume_a, refine=True)
        assert got.dtype == want.dtype and got.shape == want.shape
        tiny = np.finfo(want.dtype).eps
        # the rounding of an FP64-accurate solution: at least LAPACK's backward error
        assert _eta(a, b, got) <= max(2 * _eta(a, b, want), 2 * tiny)

    @pytest.mark.parametrize("order", ["C", "F"])
    def test_transposed_and_memory_order(self, rng, order):
        n = 80
        a = np.asarray(_matrix(rng, n, 1e4), order=order)
        b = rng.standard_normal(n)
        a0, b0 = a.copy(), b.copy()
        got = solve(a, b, transposed=True, refine=True)
        want = sla.solve(a, b, transposed=True)
        np.testing.assert_array_equal(a, a0)  # inputs untouched
        np.testing.assert_array_equal(b, b0)
        assert got.shape == want.shape == (n,)
        assert _eta(a.T, b, got) <= max(4 * _eta(a.T, b, want), 4 * U)

    def test_batched(self, rng):
        n = 64
        a = np.stack([_matrix(rng, n, k) for k in (1e2, 1e6, 1e10)])
        b = rng.standard_normal((3, n, 2))
        with ozlinalg.profile() as prof:
            got = solve(a, b, refine=True)
        assert len(prof.refined) == 3
        for i in range(3):
            assert _eta(a[i], b[i], got[i]) <= 2 * np.sqrt(n) * 2 * U

    def test_bad_refine_value(self):
        with pytest.raises(ValueError, match="refine"):
            solve(np.eye(3), np.ones(3), refine="yes")

    def test_no_accuracy_warning_for_the_reduced_counts(self, rng):
        a = _matrix(rng, 300, 1e3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            solve(a, np.ones(300), refine=True)
        # outside a refined solve a short fixed count still warns
        with pytest.warns(ozlinalg.AccuracyWarning):
            ozlinalg.matmul(a, a, slices=2)

    def test_dask_arrays(self, rng):
        da = pytest.importorskip("dask.array")
        a = _matrix(rng, 64, 1e3)
        b = rng.standard_normal(64)
        x = ozlinalg.solve(da.from_array(a, chunks=32), da.from_array(b, chunks=32))
        np.testing.assert_allclose(x.compute(), sla.solve(a, b), rtol=1e-9)
        with pytest.raises(NotImplementedError, match="refine"):
            ozlinalg.solve(da.from_array(a, chunks=32), da.from_array(b, chunks=32),
                           refine=True)


def _plan():
    """The plan a call on NumPy arrays makes under the options in force."""
    return resolve(np)


class TestRefineAuto:
    """``refine="auto"`` (ozlinalg.solve's default) refines where it can pay."""

    def test_rules(self):
        n = _refine_min = REFINE_MIN_ORDER
        assert refines(_plan(), n, 1)
        assert not refines(_plan(), n - 1, 1)
        assert not refines(_plan(), n, n)  # many right-hand sides
        assert not refines(_plan(), n, 1, a_kept=False)
        with ozlinalg.options(accuracy="faithful"):
            assert not refines(_plan(), _refine_min, 1)
        with ozlinalg.options(method="bitmask"):
            assert not refines(_plan(), _refine_min, 1)
        with ozlinalg.options(min_size=2 * n):
            assert not refines(_plan(), n, 1)

    def test_default_of_the_public_solve(self, rng):
        n = REFINE_MIN_ORDER
        a = _matrix(rng, n, 1e3)
        b = rng.standard_normal(n)
        with ozlinalg.profile() as prof:
            x = ozlinalg.solve(a, b)
        assert len(prof.refined) == 1
        assert _eta(a, b, x) <= 2 * np.sqrt(n) * 2 * U
        with ozlinalg.profile() as prof:
            ozlinalg.solve(a, b, refine=False)
            ozlinalg.linalg.solve(a, b)  # the namespace's default: SciPy's solve
            ozlinalg.solve(a[:100, :100], b[:100])  # too small to pay
        assert prof.refined == []

    def test_overwritten_a_is_not_refined(self, rng):
        n = REFINE_MIN_ORDER
        a = np.asfortranarray(_matrix(rng, n, 1e3))
        b = rng.standard_normal(n)
        want = sla.solve(a.copy(order="F"), b)
        with ozlinalg.profile() as prof:
            x = ozlinalg.solve(a, b, overwrite_a=True)
        assert prof.refined == []
        np.testing.assert_allclose(x, want, rtol=1e-9)


class TestRefinedSolveOnTheDevice:
    """The same code on CuPy arrays, here on the host stand-in of the GPU engine."""

    def test_runs_on_the_gpu_engine(self, rng):
        from host_cuda import HostGPU

        n = 96
        a = _matrix(rng, n, 1e4)
        b = rng.standard_normal((n, 2))
        with HostGPU() as engine:
            import cupy as cp

            with ozlinalg.profile() as prof:
                x = solve(cp.asarray(a), cp.asarray(b), refine=True)
            assert isinstance(x, cp.ndarray)
            x = cp.asnumpy(x)
        assert engine.lt.calls > 0
        rec = prof.refined[0]
        assert rec.rcond is None  # no condition estimator on a device
        assert _eta(a, b, x) <= 2 * np.sqrt(n) * 2 * U


class TestSolveCommand:
    """``python -m ozlinalg solve``: the refined solve by default, the plain LU on request."""

    @pytest.mark.parametrize("refine", ["auto", "false"])
    def test_json(self, capsys, refine):
        import json

        from ozlinalg.__main__ import main

        main(["solve", "--n", str(REFINE_MIN_ORDER), "--refine", refine, "--json"])
        res = json.loads(capsys.readouterr().out)
        assert res["residual"] <= 2 * np.sqrt(res["n"]) * 2 * U
        if refine == "auto":
            assert len(res["refined"]) == 1 and not res["refined"][0]["fell_back"]
        else:
            assert res["refined"] == []
