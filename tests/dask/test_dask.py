"""ozlinalg on dask arrays (ozlinalg.dask): lazy graphs, real partial pivoting,
options carried in the tasks on every scheduler, the backend route for
unchanged dask code, and accuracy against the exact reference.

Factorizations are judged as in tests/linalg/test_lapack.py: backward errors
compared with LAPACK (scipy) on the same input, within a factor 4.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.linalg as sla
from numpy.linalg import LinAlgError
from scipy.linalg import LinAlgWarning

import ozlinalg

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from conftest import assert_dot_accurate, assert_solve_accurate  # noqa: E402

from ozlinalg import dask as ozd  # noqa: E402
from ozlinalg.dask._tasks import OzTask  # noqa: E402
from ozlinalg.testing import ExactReference, random_matrix, textbook_matmul  # noqa: E402

EPS = np.finfo(np.float64).eps
FACTOR = 4.0
#: Tests of the backend route ask for emulation everywhere (the backend's
#: strategy option, where this version has it, would otherwise emulate only
#: where the engine's crossover says it pays).
EAGER = ({"strategy": "eager"} if "strategy" in {f.name for f in
                                                  dataclasses.fields(ozlinalg.Options)} else {})

pytestmark = pytest.mark.usefixtures("one_blas_thread")


def rel(x, ref):
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def lu_backward(a, p, lo, up):
    return np.linalg.norm(a - p @ lo @ up, 1) / np.linalg.norm(a, 1)


def poisoned(shape, chunks):
    """A dask array whose blocks raise when computed: building on it must not compute."""
    def boom(block):
        raise AssertionError("computed while building the graph")
    return da.zeros(shape, chunks=chunks).map_blocks(boom, dtype=float)


def oz_layers(x):
    return {name.rsplit("-", 1)[0] for name in x.dask.layers}


# ----------------------------------------------------------------- import

def test_import_ozlinalg_does_not_import_dask():
    code = ("import sys, ozlinalg, ozlinalg.linalg; "
            "print(any(m == 'dask' or m.startswith('dask.') for m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------- matmul

class TestMatmul:
    @pytest.mark.parametrize("m,n,p,cm,cn,cp", [
        (1, 1, 1, 1, 1, 1), (7, 61, 68, 3, 20, 30), (64, 64, 64, 64, 64, 64),
        (100, 130, 90, 40, 50, 45), (33, 200, 17, 33, 64, 17)])
    def test_shapes_and_lazy(self, rng, m, n, p, cm, cn, cp):
        a_h, b_h = rng.standard_normal((m, n)), rng.standard_normal((n, p))
        a, b = da.from_array(a_h, chunks=(cm, cn)), da.from_array(b_h, chunks=(cn, cp))
        c = ozlinalg.matmul(a, b)
        assert isinstance(c, da.Array) and c.shape == (m, p) and c.dtype == np.float64
        assert c.chunks == (a.chunks[0], b.chunks[1])
        assert_dot_accurate(c.compute(), a_h, b_h)

    def test_building_computes_nothing(self):
        a = poisoned((40, 40), 10)
        c = ozlinalg.matmul(a, a)
        lu, piv = ozlinalg.linalg.lu_factor(a)
        x = ozlinalg.linalg.solve(a, a)
        q, r = ozlinalg.linalg.qr(a)
        ch = ozlinalg.linalg.cholesky(a)
        assert all(isinstance(t, da.Array) for t in (c, lu, piv, x, q, r, ch))

    def test_vectors_batches_mixed_and_complex(self, rng):
        a_h = rng.standard_normal((3, 20, 30))
        b_h = rng.standard_normal((30, 10))
        v_h = rng.standard_normal(30)
        a = da.from_array(a_h, chunks=(1, 10, 15))
        for x, y, x_h, y_h in ((a, b_h, a_h, b_h), (a, v_h, a_h, v_h),
                               (v_h[:20], a[0], v_h[:20], a_h[0])):
            c = ozlinalg.matmul(x, y).compute()
            assert c.shape == (x_h @ y_h).shape
            assert_dot_accurate(c, x_h, y_h)
        z = a_h[0] + 1j * rng.standard_normal((20, 30))
        zc = ozlinalg.matmul(da.from_array(z, chunks=10), da.from_array(b_h, chunks=10))
        assert zc.dtype == np.complex128
        assert_dot_accurate(zc.compute(), z, b_h)

    def test_errors_at_build(self):
        a = da.ones((4, 5), chunks=2)
        with pytest.raises(ValueError, match="inner dimensions"):
            ozlinalg.matmul(a, a)
        with pytest.raises(ValueError, match="at least 1-D"):
            ozlinalg.matmul(da.ones(()), a)
        with pytest.raises(TypeError, match="unsupported dtype"):
            ozlinalg.matmul(a.astype(np.longdouble), a.T)

    # counts below auto's on purpose (this tests the blocks): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_single_inner_block_is_the_single_node_emulation(self, rng):
        """One inner chunk: each output block IS ozlinalg.matmul of its rows and
        columns (fixed slices, no balancing: entries depend on their row and
        column only), so the dask result equals the single-node one bit for bit."""
        a_h, b_h = random_matrix(rng, 60, 50, 1.0), random_matrix(rng, 50, 70, 1.0)
        with ozlinalg.options(slices=3, balance=False):
            c = ozlinalg.matmul(da.from_array(a_h, chunks=(25, 50)),
                                da.from_array(b_h, chunks=(50, 30)))
            ref = ozlinalg.matmul(a_h, b_h)
        assert np.array_equal(c.compute(), ref)

    # counts below auto's on purpose (this tests the blocks): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    @pytest.mark.parametrize("phi", [0.5, 2.0])
    def test_error_is_block_emulation_plus_fp64_sum(self, rng, phi):
        """Part 4: |C - AB| <= sum_k |P_k - A_k B_k| + (K-1) u sum_k |P_k|, with
        P_k the single-node emulated block products (exact reference per block)."""
        m, n, p, kb = 24, 120, 20, 30
        a_h, b_h = random_matrix(rng, m, n, phi), random_matrix(rng, n, p, phi)
        for slices in (4, "auto"):
            with ozlinalg.options(slices=slices, balance=False):
                c = ozlinalg.matmul(da.from_array(a_h, chunks=(12, kb)),
                                    da.from_array(b_h, chunks=(kb, 10))).compute()
                parts = [ozlinalg.matmul(a_h[:, k:k + kb], b_h[k:k + kb]) for k in range(0, n, kb)]
            bound = (len(parts) - 1) * EPS / 2 * sum(np.abs(q) for q in parts)
            for k, q in zip(range(0, n, kb), parts):
                ref_k = ExactReference(a_h[:, k:k + kb], b_h[k:k + kb])
                bound = bound + ref_k.relative_errors(q) * np.abs(ref_k.hi)
            ref = ExactReference(a_h, b_h)
            err = ref.relative_errors(c) * np.abs(ref.hi)
            assert np.all(err <= bound * (1 + 1e-6) + 1e-300)

    def test_dgemm_level_against_exact_reference(self, rng):
        a_h, b_h = random_matrix(rng, 32, 256, 0.5), random_matrix(rng, 256, 24, 0.5)
        ref = ExactReference(a_h, b_h)
        c = ozlinalg.matmul(da.from_array(a_h, chunks=(16, 64)),
                            da.from_array(b_h, chunks=(64, 12))).compute()
        bar = ref.relative_errors(textbook_matmul(a_h, b_h)).max()  # DGEMM level, any machine
        assert ref.relative_errors(c).max() <= max(bar, 4 * EPS)


# ----------------------------------------------------------------- LU

class TestLU:
    @pytest.mark.parametrize("n,chunk", [(1, 1), (50, 50), (97, 20), (128, 32), (130, 64)])
    def test_pivots_are_lapacks(self, rng, n, chunk):
        """Real partial pivoting over whole column panels: the same pivot sequence
        as LAPACK's dgetrf (random inputs have no ties) and the same factors."""
        a_h = rng.standard_normal((n, n))
        lu, piv = dask.compute(*ozlinalg.linalg.lu_factor(da.from_array(a_h, chunks=chunk)))
        lu0, piv0 = sla.lu_factor(a_h)
        assert piv.dtype == np.int32 and np.array_equal(piv, piv0)
        np.testing.assert_allclose(lu, lu0, rtol=0, atol=1e-10 * np.abs(lu0).max())

    def test_pivoting_crosses_block_rows(self, rng):
        """Diagonal blocks that are nearly zero: pivoting inside diagonal blocks
        (dask's own lu) is unstable here; panel pivoting gives LAPACK's backward error."""
        n, c = 96, 32
        a_h = rng.standard_normal((n, n))
        for k in range(0, n, c):
            a_h[k:k + c, k:k + c] *= 1e-12
        p, lo, up = dask.compute(*ozd.lu(da.from_array(a_h, chunks=c)))
        ours = lu_backward(a_h, p, lo, up)
        lapack = lu_backward(a_h, *sla.lu(a_h))
        assert ours <= FACTOR * max(lapack, EPS)
        pd, ld, ud = dask.compute(*da.linalg.lu(da.from_array(a_h, chunks=c)))  # dask's own
        assert lu_backward(a_h, pd, ld, ud) > 1e3 * ours   # what block-local pivoting gives
        assert np.abs(lo).max() <= 1.0 + 1e-12   # |L| <= 1: partial pivoting's signature

    @pytest.mark.parametrize("trans", [0, 1, 2])
    @pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
    def test_lu_solve(self, rng, trans, dtype):
        n = 70
        a_h = rng.standard_normal((n, n)).astype(dtype)
        b_h = rng.standard_normal((n, 3)).astype(dtype)
        if np.dtype(dtype).kind == "c":
            a_h = a_h + 1j * rng.standard_normal((n, n))
        f = ozlinalg.linalg.lu_factor(da.from_array(a_h, chunks=25))
        x = ozlinalg.linalg.lu_solve(f, da.from_array(b_h, chunks=(20, 2)), trans=trans)
        x0 = sla.lu_solve(sla.lu_factor(a_h), b_h, trans=trans)
        assert x.dtype == x0.dtype and x.shape == x0.shape  # SciPy's dtype and shape
        # Accuracy against the exact solution, not SciPy's (a float32 LAPACK result
        # whose error depends on the BLAS kernel): the factors are in x's dtype.
        op = {0: a_h, 1: a_h.T, 2: a_h.conj().T}[trans]
        assert_solve_accurate(x.compute(), op, b_h)
        x1 = ozlinalg.linalg.lu_solve(f, b_h[:, 0], trans=trans)
        assert x1.shape == (n,)

    def test_lu_forms(self, rng):
        a_h = rng.standard_normal((45, 45))
        a = da.from_array(a_h, chunks=15)
        p, lo, up = dask.compute(*ozlinalg.linalg.lu(a))
        np.testing.assert_allclose(p @ lo @ up, a_h, atol=1e-13)
        pl, up2 = dask.compute(*ozlinalg.linalg.lu(a, permute_l=True))
        np.testing.assert_allclose(pl @ up2, a_h, atol=1e-13)
        perm, lo3, up3 = dask.compute(*ozlinalg.linalg.lu(a, p_indices=True))
        np.testing.assert_array_equal(perm, sla.lu(a_h, p_indices=True)[0])
        np.testing.assert_allclose(lo3[perm] @ up3, a_h, atol=1e-13)
        np.testing.assert_allclose(np.tril(lo, -1) + up, sla.lu_factor(a_h)[0], atol=1e-12)

    def test_singular(self, rng):
        a_h = rng.standard_normal((40, 40))
        a_h[:, 25] = 0.0
        a = da.from_array(a_h, chunks=10)
        with pytest.warns(LinAlgWarning, match="Diagonal number 26 is exactly zero"):
            ozlinalg.linalg.lu_factor(a)[0].compute(scheduler="sync")
        with pytest.raises(LinAlgError, match="singular"):
            ozlinalg.linalg.solve(a, np.ones(40)).compute(scheduler="sync")
        assert ozlinalg.linalg.det(a).compute() == 0.0

    def test_det(self, rng):
        a_h = rng.standard_normal((60, 60))
        d = ozlinalg.linalg.det(da.from_array(a_h, chunks=20))
        assert d.shape == () and np.isclose(d.compute(), sla.det(a_h), rtol=1e-11)

    def test_rectangular_chunks_are_squared_and_bad_shapes_raise(self, rng):
        a_h = rng.standard_normal((30, 30))
        lu, piv = ozlinalg.linalg.lu_factor(da.from_array(a_h, chunks=(10, 15)))
        assert lu.chunks == ((10,) * 3, (10,) * 3)
        with pytest.raises(ValueError, match="square"):
            ozlinalg.linalg.lu_factor(da.ones((4, 5), chunks=2))
        with pytest.raises(ValueError, match="incompatible"):
            ozlinalg.linalg.lu_solve((lu, piv), da.ones(7, chunks=7))


# ----------------------------------------------------------------- Cholesky

class TestCholesky:
    @pytest.mark.parametrize("lower", [True, False])
    @pytest.mark.parametrize("n,chunk", [(1, 1), (60, 60), (97, 25)])
    def test_factor_and_solve(self, rng, lower, n, chunk):
        g = rng.standard_normal((n, n))
        a_h = g @ g.T + n * np.eye(n)
        stored = np.tril(a_h) if lower else np.triu(a_h)   # only that triangle is read
        c = ozlinalg.linalg.cholesky(da.from_array(stored, chunks=chunk), lower=lower).compute()
        c0 = sla.cholesky(a_h, lower=lower)
        np.testing.assert_allclose(c, c0, atol=1e-12 * np.abs(c0).max())
        b_h = rng.standard_normal((n, 2))
        cf = ozlinalg.linalg.cho_factor(da.from_array(a_h, chunks=chunk), lower=lower)
        assert cf[1] is lower
        x = ozlinalg.linalg.cho_solve(cf, da.from_array(b_h, chunks=chunk)).compute()
        assert_solve_accurate(x, a_h, b_h)

    def test_complex_hermitian(self, rng):
        n = 40
        g = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
        a_h = g @ g.conj().T + n * np.eye(n)
        c = ozlinalg.linalg.cholesky(da.from_array(a_h, chunks=15), lower=True).compute()
        np.testing.assert_allclose(c @ c.conj().T, a_h, atol=1e-11 * np.abs(a_h).max())

    def test_not_positive_definite_names_the_global_minor(self, rng):
        g = rng.standard_normal((50, 50))
        a_h = g @ g.T + 50 * np.eye(50)
        a_h[33, 33] = -1e4
        with pytest.raises(LinAlgError) as ours:
            ozlinalg.linalg.cholesky(da.from_array(a_h, chunks=10)).compute(scheduler="sync")
        with pytest.raises(LinAlgError) as ref:
            sla.cholesky(a_h)
        assert str(ours.value) == str(ref.value)


# ----------------------------------------------------------------- QR

class TestQR:
    @pytest.mark.parametrize("shape,chunks", [
        ((200, 30), (50, 30)), ((90, 90), 30), ((100, 70), 25), ((70, 100), 25),
        ((40, 150), (40, 50)), ((31, 31), 31)])
    @pytest.mark.parametrize("mode", ["economic", "full", "r"])
    def test_modes_and_shapes(self, rng, shape, chunks, mode):
        a_h = rng.standard_normal(shape)
        out = dask.compute(*ozlinalg.linalg.qr(da.from_array(a_h, chunks=chunks), mode=mode))
        ref = sla.qr(a_h, mode=mode)
        assert [o.shape for o in out] == [r.shape for r in ref]
        r = out[-1]
        assert np.abs(np.tril(r, -1)).max(initial=0) == 0
        np.testing.assert_allclose(np.abs(r), np.abs(ref[-1]), atol=1e-12 * np.abs(a_h).max())
        if mode != "r":
            q = out[0]
            assert np.linalg.norm(q @ r - a_h) <= FACTOR * max(
                np.linalg.norm(ref[0] @ ref[1] - a_h), EPS * np.linalg.norm(a_h))
            assert np.abs(q.T @ q - np.eye(q.shape[1])).max() <= 100 * EPS

    def test_bad_arguments(self):
        a = da.ones((6, 4), chunks=2)
        with pytest.raises(ValueError, match="Mode"):
            ozlinalg.linalg.qr(a, mode="raw")
        with pytest.raises(NotImplementedError, match="pivoting"):
            ozlinalg.linalg.qr(a, pivoting=True)


# ----------------------------------------------------------------- solve & co

class TestSolve:
    @pytest.mark.parametrize("assume_a", [None, "gen", "sym", "her", "pos",
                                          "lower triangular", "upper triangular"])
    def test_kinds(self, rng, assume_a):
        n = 80
        g = rng.standard_normal((n, n))
        a_h = {"pos": g @ g.T + n * np.eye(n), "sym": g + g.T, "her": g + g.T,
               "lower triangular": np.tril(g) + n * np.eye(n),
               "upper triangular": np.triu(g) + n * np.eye(n)}.get(assume_a, g)
        b_h = rng.standard_normal(n)
        x = ozlinalg.linalg.solve(da.from_array(a_h, chunks=30), da.from_array(b_h, chunks=30),
                                  assume_a=assume_a)
        assert x.shape == (n,)
        assert_solve_accurate(x.compute(), a_h, b_h)  # against the exact solution

    def test_transposed_float32_and_errors(self, rng):
        a_h = rng.standard_normal((50, 50)).astype(np.float32)
        b_h = rng.standard_normal((50, 2)).astype(np.float32)
        x = ozlinalg.linalg.solve(da.from_array(a_h, chunks=20), b_h, transposed=True)
        x0 = sla.solve(a_h, b_h, transposed=True)
        assert x.dtype == x0.dtype == np.float32 and x.shape == x0.shape  # SciPy's
        # Accuracy against the exact solution of the float32 inputs (SciPy's float32
        # LAPACK result is off by ~cond * 2**-24, depending on the BLAS kernel):
        # ozlinalg solves in FP64 and rounds once to float32.
        assert_solve_accurate(x.compute(), a_h.T, b_h, rounded_from_fp64=True)
        with pytest.raises(ValueError, match="not a recognized"):
            ozlinalg.linalg.solve(da.from_array(a_h), b_h, assume_a="weird")
        with pytest.raises(ValueError, match="same number of rows"):
            ozlinalg.linalg.solve(da.from_array(a_h), b_h[:3])
        bad = a_h.copy()
        bad[3, 4] = np.nan
        x = ozlinalg.linalg.solve(da.from_array(bad, chunks=20), b_h)   # lazy: no error yet
        with pytest.raises(ValueError, match="infs or NaNs"):
            x.compute(scheduler="sync")

    def test_inv(self, rng):
        a_h = rng.standard_normal((55, 55))
        x = ozlinalg.linalg.inv(da.from_array(a_h, chunks=20))
        np.testing.assert_allclose(x.compute(), sla.inv(a_h), rtol=1e-9, atol=1e-11)

    @pytest.mark.parametrize("shape", [(300, 40), (40, 120)])
    def test_lstsq(self, rng, shape):
        a_h = rng.standard_normal(shape)
        b_h = rng.standard_normal(shape[0])
        out = dask.compute(*ozlinalg.linalg.lstsq(da.from_array(a_h, chunks=(60, 40)),
                                                  da.from_array(b_h, chunks=60)))
        x0, res0, rank0, s0 = sla.lstsq(a_h, b_h)
        np.testing.assert_allclose(out[0], x0, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out[1], res0, rtol=1e-9)
        assert int(out[2]) == rank0
        np.testing.assert_allclose(out[3], s0, rtol=1e-10)

    def test_solve_triangular(self, rng):
        n = 64
        a_h = np.triu(rng.standard_normal((n, n))) + n * np.eye(n)
        b_h = rng.standard_normal((n, 3))
        for trans in (0, 1, 2, "T"):
            x = ozlinalg.linalg.solve_triangular(da.from_array(a_h, chunks=16), b_h, trans=trans)
            np.testing.assert_allclose(
                x.compute(), sla.solve_triangular(a_h, b_h, trans=trans), rtol=1e-12)
        x = ozlinalg.linalg.solve_triangular(da.from_array(a_h.T, chunks=16), b_h[:, 0],
                                             lower=True, unit_diagonal=True)
        np.testing.assert_allclose(
            x.compute(), sla.solve_triangular(a_h.T, b_h[:, 0], lower=True, unit_diagonal=True),
            rtol=1e-10)


class TestResultDtypes:
    """Each function's result dtype is SciPy's for the same input dtypes (bool and
    8/16-bit integers: float32 from the LAPACK-backed functions, float64 from solve;
    det: double whatever the input)."""

    CALLS = {
        "lu_factor": lambda m, a, b: m.lu_factor(a)[0],
        "lu_solve": lambda m, a, b: m.lu_solve(m.lu_factor(a), b),
        "lu": lambda m, a, b: m.lu(a)[1],
        "cholesky": lambda m, a, b: m.cholesky(a),
        "cho_solve": lambda m, a, b: m.cho_solve(m.cho_factor(a), b),
        "qr": lambda m, a, b: m.qr(a)[0],
        "solve": lambda m, a, b: m.solve(a, b),
        "solve_triangular": lambda m, a, b: m.solve_triangular(a, b),
        "inv": lambda m, a, b: m.inv(a),
        "det": lambda m, a, b: m.det(a),
        "lstsq": lambda m, a, b: m.lstsq(a, b)[0],
    }

    @pytest.mark.parametrize("call", sorted(CALLS))
    @pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int16, np.uint8, np.int32,
                                       np.float16, np.float32, np.complex64])
    def test_as_scipy(self, call, dtype):
        f = self.CALLS[call]
        a = np.eye(4, dtype=dtype) if dtype is np.bool_ else (np.eye(4) * 4 + 1).astype(dtype)
        b = np.ones(4, dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            want = np.asarray(f(sla, a, b)).dtype
            got = f(ozlinalg.linalg, da.from_array(a, chunks=2), da.from_array(b, chunks=2))
        assert got.dtype == want
        assert np.asarray(got.compute()).dtype == want


# ----------------------------------------------------------------- graph

class TestGraph:
    def test_readable_names_and_options_in_every_task(self, rng):
        a = da.from_array(rng.standard_normal((60, 60)), chunks=20)
        with ozlinalg.options(slices=5, method="bitmask-ef", memory_limit=1 << 20):
            want = ozlinalg.get_options().replace(min_size=0)
            arrays = [ozlinalg.matmul(a, a), ozlinalg.linalg.solve(a, a),
                      ozlinalg.linalg.cholesky(a @ a.T), ozlinalg.linalg.qr(a)[0],
                      ozlinalg.linalg.lstsq(a, a[:, 0])[0]]
        for x in arrays:
            names = oz_layers(x)
            assert any(nm.startswith("oz-") for nm in names), names
            graph = dict(x.__dask_graph__())
            tasks = [t for t in graph.values() if isinstance(getattr(t, "func", None), OzTask)]
            tasks += [t for t in graph.values() if isinstance(t, tuple) and t
                      and isinstance(t[0], OzTask)]
            assert tasks
            for t in tasks:
                fn = t.func if isinstance(getattr(t, "func", None), OzTask) else t[0]
                assert fn.options == want

    def test_options_are_part_of_the_keys(self, rng):
        a = da.from_array(rng.standard_normal((30, 30)), chunks=10)
        with ozlinalg.options(slices=3):
            c3 = ozlinalg.matmul(a, a)
        c_auto = ozlinalg.matmul(a, a)
        assert c3.name != c_auto.name

    # counts below auto's on purpose (this tests the graph): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_min_size_applies_to_the_whole_problem(self, rng):
        a = da.from_array(rng.standard_normal((40, 40)), chunks=10)
        with ozlinalg.options(min_size=30, slices=2):
            emulated = ozlinalg.matmul(a, a).compute()       # order 40 >= 30: every block
        with ozlinalg.options(min_size=50, slices=2):
            native = ozlinalg.matmul(a, a).compute()         # order 40 < 50: native blocks
        ref = a.compute() @ a.compute()
        assert rel(emulated, ref) > 1e-4 and rel(native, ref) < 1e-14


# ----------------------------------------------------------------- options travel

def _options_seen(opts, scheduler=None, client=None):
    """What ozlinalg.get_options() returns inside a task wrapped like every ozlinalg task."""
    task = dask.delayed(OzTask(ozlinalg.get_options, opts), pure=True)()
    return client.compute(task).result() if client else task.compute(scheduler=scheduler)


def _emulated_evidence(rng, compute):
    """Results computed by ``compute`` under options the workers do not have
    (3 bitmask slices): (matmul bit-identical to the single-node emulation,
    its max error against the exact reference, FP64 recursive summation's, LU
    solve's relative difference from FP64 LAPACK: a 3-slice emulation's, far above
    any FP64 error)."""
    a_h, b_h = random_matrix(rng, 48, 48, 1.0), random_matrix(rng, 48, 2, 1.0)
    a = da.from_array(a_h, chunks=(16, 48))
    with ozlinalg.options(slices=3, method="bitmask-ef", balance=False):
        c, x = ozlinalg.matmul(a, b_h), ozlinalg.linalg.solve(a.rechunk(16), b_h)
        single = ozlinalg.matmul(a_h, b_h)
    c, x = compute(c, x)
    ref = ExactReference(a_h, b_h)
    return (bool(np.array_equal(c, single)), float(ref.relative_errors(c).max()),
            float(ref.relative_errors(textbook_matmul(a_h, b_h)).max()),
            rel(x, sla.solve(a_h, b_h)))


def _check_travel(rng, seen, compute):
    opts = ozlinalg.Options(method="crt", slices=9, memory_limit=1234567, min_size=0)
    assert seen(opts) == opts
    same, mm_err, native_err, solve_err = _emulated_evidence(rng, compute)
    assert same                          # each block ran the same emulation as here
    assert mm_err > 1e-6 > 1e4 * native_err   # the 3-slice emulation's error, not FP64's
    assert solve_err > 1e-6              # the LU's products were emulated too


# counts below auto's on purpose (this tests the options): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestOptionsTravel:
    @pytest.mark.parametrize("scheduler", ["threads", "sync"])
    def test_threads(self, rng, scheduler):
        _check_travel(rng, lambda o: _options_seen(o, scheduler),
                      lambda *xs: dask.compute(*xs, scheduler=scheduler))

    def test_processes(self, rng):
        _check_travel(rng, lambda o: _options_seen(o, "processes"),
                      lambda *xs: dask.compute(*xs, scheduler="processes", num_workers=2))

    def test_distributed_local_cluster(self, rng):
        distributed = pytest.importorskip("distributed")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                               dashboard_address=None, silence_logs=40)
        with cluster, distributed.Client(cluster) as client:
            _check_travel(rng, lambda o: _options_seen(o, client=client),
                          lambda *xs: client.compute(list(xs), sync=True))
            # the tasks ran on both worker processes
            a = da.from_array(rng.standard_normal((64, 64)), chunks=16)
            c = client.persist(ozlinalg.matmul(a, a))
            distributed.wait(c)
            assert len({w for ws in client.who_has(c).values() for w in ws}) == 2

    @pytest.mark.slow
    def test_a_worker_killed_mid_factorization_is_recovered_by_dask(self, rng):
        """Tasks are pure: when a worker process dies, dask reruns what it held
        elsewhere (the nanny restarts it) and the result is still right.

        The worker is killed at a known point: each worker holds its k-th emulated
        block product until the test releases them, so the solve cannot finish before
        the kill, and the victim dies inside a task, after k - 1 products of its own."""
        distributed = pytest.importorskip("distributed")
        import uuid

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                               dashboard_address=None, silence_logs=50)
        a_h, b_h = rng.standard_normal((512, 512)), rng.standard_normal(512)
        x_lazy = ozlinalg.linalg.solve(da.from_array(a_h, chunks=64), b_h)
        updates = sum("oz-lu-update" in str(key) for key in dict(x_lazy.__dask_graph__()))
        # Each update task is one product: were neither worker to reach its k-th, the
        # two would run fewer than 2 k < updates products in all. So one of them does.
        k = updates // 4
        assert k >= 2
        tag = uuid.uuid4().hex
        held, release = f"held-{tag}", f"release-{tag}"

        def hold_kth_product():
            # runs in each worker process (pickled by value; the modules it names are
            # the worker's own), whose tasks look matmul up in _kernels at every call
            from ozlinalg.dask import _kernels

            product, count = _kernels.matmul, [0]

            def gated(*args, **kwargs):
                count[0] += 1
                if count[0] == k:
                    distributed.Queue(held).put(os.getpid())
                    distributed.Event(release).wait()
                return product(*args, **kwargs)

            _kernels.matmul = gated

        with cluster, distributed.Client(cluster) as client:
            client.run(hold_kth_product)
            fut = client.compute(x_lazy)
            pid = distributed.Queue(held, client=client).get(timeout=300)
            assert pid in client.run(os.getpid).values()   # one of this cluster's workers
            # a task the result depends on is held: it cannot have finished
            assert fut.status == "pending"
            os.kill(pid, signal.SIGKILL)   # the worker process this test started
            distributed.Event(release, client=client).set()
            x = fut.result(timeout=300)

        def backward(x):
            return np.linalg.norm(b_h - a_h @ x, 1) / (
                np.linalg.norm(a_h, 1) * np.linalg.norm(x, 1) + np.linalg.norm(b_h, 1))

        assert backward(x) <= FACTOR * max(backward(sla.solve(a_h, b_h)), EPS)

    def test_explicit_keywords_win_over_the_context(self, rng):
        a_h = random_matrix(rng, 30, 30, 1.0)
        with ozlinalg.options(slices=2):
            c = ozlinalg.matmul(da.from_array(a_h, chunks=10), a_h, slices=12).compute()
        assert_dot_accurate(c, a_h, a_h)  # 12 slices, not the context's 2


# ----------------------------------------------------------------- the route

@pytest.fixture
def clean_backend():
    yield
    ozlinalg.backend.uninstall()


def _user_code(a, b):
    """Unchanged dask code."""
    spd = a @ a.T + a.shape[0] * da.eye(a.shape[0], chunks=a.chunks[0][0])
    ts = a.rechunk({1: -1})   # dask's own qr / lstsq take one column of blocks only
    return dict(solve=da.linalg.solve(a, b), matmul=a @ b, np_matmul=np.matmul(a, b),
                cholesky=da.linalg.cholesky(spd, lower=True), qr=da.linalg.qr(ts),
                lu=da.linalg.lu(a), inv=da.linalg.inv(a),
                trsm=da.linalg.solve_triangular(spd, b),
                np_solve=np.linalg.solve(a, b), lstsq=da.linalg.lstsq(ts, b))


@pytest.mark.usefixtures("clean_backend")
class TestRoute:
    @pytest.mark.parametrize("dtype", [np.int8, np.int32, np.float32, np.complex64])
    def test_dask_dtypes_kept(self, rng, dtype):
        # routed results have the dtypes dask's own functions give (which are not
        # SciPy's: inv of float32 is float64 there, solve of int8 float32)
        n = 12
        a_h = (rng.integers(-3, 4, (n, n)) + n * np.eye(n)).astype(dtype)
        b_h = rng.integers(-3, 4, (n, 2)).astype(dtype)
        a, b = da.from_array(a_h, chunks=4), da.from_array(b_h, chunks=(4, 2))
        native = _user_code(a, b)
        with ozlinalg.backend(min_size=0, **EAGER):
            routed = _user_code(a, b)
        for key, x in routed.items():
            xs = x if isinstance(x, tuple) else (x,)
            ys = native[key] if isinstance(native[key], tuple) else (native[key],)
            assert [getattr(v, "dtype", None) for v in xs] == \
                [getattr(v, "dtype", None) for v in ys], key
        computed = dask.compute(routed["inv"], routed["solve"])
        assert [c.dtype for c in computed] == [native["inv"].dtype, native["solve"].dtype]

    # counts below auto's on purpose (this tests the routing): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_unchanged_dask_code_under_one_with_block(self, rng):
        n = 48
        a_h, b_h = random_matrix(rng, n, n, 1.0), random_matrix(rng, n, 2, 1.0)
        a, b = da.from_array(a_h, chunks=16), da.from_array(b_h, chunks=(16, 2))
        native = _user_code(a, b)
        with ozlinalg.options(slices=3, balance=False), ozlinalg.backend(min_size=0, **EAGER):
            routed = _user_code(a, b)
        native, routed = dask.compute(native, routed)
        for key in ("solve", "matmul", "np_matmul", "np_solve", "inv"):
            x, y = routed[key], native[key]
            assert x.shape == y.shape and x.dtype == y.dtype, key
            assert 1e-8 < rel(x, y) < 1e-1, key   # the 3-slice emulation ran, and it is close
        # dask's own lu pivots inside diagonal blocks: other factors, same product
        assert [x.shape for x in routed["lu"]] == [x.shape for x in native["lu"]]
        assert 1e-8 < lu_backward(a_h, *routed["lu"]) < 1e-1
        for key, k in (("cholesky", None), ("trsm", None), ("qr", 1), ("lstsq", 0)):
            x = routed[key] if k is None else routed[key][k]
            y = native[key] if k is None else native[key][k]
            assert x.shape == y.shape, key
            assert rel(np.abs(x), np.abs(y)) < 1e-1, key
        assert len(routed["lstsq"]) == 4 and routed["lstsq"][1].shape == native["lstsq"][1].shape

    def test_graph_is_ozlinalgs_inside_and_daskss_outside(self, rng):
        a = da.from_array(rng.standard_normal((40, 40)), chunks=20)
        with ozlinalg.backend(min_size=0, **EAGER):
            # (qr of blocks in both dimensions raises, as dask's: one column of blocks)
            inside = [a @ a, da.linalg.solve(a, a[:, 0]), da.linalg.qr(a.rechunk({1: -1}))[1]]
            assert "dask.array.linalg.solve" in ozlinalg.backend.installed()
        outside = [a @ a, da.linalg.solve(a, a[:, 0])]
        assert all(any(n.startswith("oz-") for n in oz_layers(x)) for x in inside)
        assert not any(n.startswith("oz-") for x in outside for n in oz_layers(x))

    def test_what_falls_through(self, rng):
        ai = da.from_array(rng.integers(-5, 5, (20, 20)), chunks=10)
        af = ai.astype(float)
        with ozlinalg.backend(min_size=0, **EAGER):
            prod = ai @ ai                                   # integers stay exact integers
        assert prod.dtype == ai.dtype and not any(n.startswith("oz-") for n in oz_layers(prod))
        with ozlinalg.backend(min_size=64, **EAGER):
            small = af @ af                                  # below min_size: dask's own
        assert not any(n.startswith("oz-") for n in oz_layers(small))
        with ozlinalg.backend(min_size=0, **EAGER):
            f32 = af.astype(np.float32) @ af.astype(np.float32)
        assert f32.dtype == np.float32 and any(n.startswith("oz-") for n in oz_layers(f32))

    def test_uninstall_restores_dask(self):
        import dask.array.linalg as dal
        import dask.array.routines as dar

        original = dal.solve
        with ozlinalg.backend():
            assert dal.solve is not original and dal.solve.__wrapped__ is original
            assert getattr(dar.matmul, "_ozlinalg_shim", False)
        ozlinalg.backend.uninstall()
        assert dal.solve is original
