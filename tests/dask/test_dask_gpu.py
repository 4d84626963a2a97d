"""Dask arrays with CuPy chunks: ozlinalg's graphs on the GPU engine, in every CI run.

No GPU here: :class:`host_cuda.HostGPU` makes ``import cupy`` give a host
stand-in whose arrays are ``cupy.ndarray`` to ozlinalg and to dask (and refuse
NumPy arrays as CuPy does), with ozlinalg's GPU engine (``CublasLtEngine`` on the
emulated cuBLASLt) behind them and ozlinalg's CPU engine made to raise. So a
graph that left a helper block on the host, returned a NumPy chunk, or ran a
block product on the CPU engine fails here, as it would fail (or silently
copy) on a GPU worker.

What holds, and how it is shown:

* every function of :mod:`ozlinalg.dask` takes CuPy-chunked dask arrays and
  returns CuPy-chunked dask arrays whose computed blocks are CuPy arrays
  (``TestChunksStayOnTheDevice``);
* the results are bit-identical to the NumPy-chunk graphs' (the GPU engine
  is bit-identical to the CPU one, tests/engines/test_engine_cublaslt.py, and the
  stand-in's cuSOLVER is SciPy's LAPACK: on a real GPU only the matmul is
  expected bit-identical, the factorizations' native panels differ in
  rounding);
* every block product task ran an emulated product on the GPU engine
  (the engine's product counter against the graph's product tasks);
* the backend route (``with ozlinalg.backend():`` around unchanged dask
  code) takes CuPy-chunked arrays (``TestRoute``);
* the options travel and the stand-in works in worker processes of a
  ``dask.distributed.LocalCluster`` (installed by a worker plugin), each
  worker counting its own products (``TestLocalCluster``).
"""
from __future__ import annotations

import logging
import os
import warnings

import numpy as np
import pytest
import scipy.linalg as sla
from conftest import assert_solve_accurate
from host_cuda import HostGPU, HostGPUPlugin, compiler_available

import ozlinalg
from ozlinalg._array import cupy_or_none

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from test_dask import EAGER, clean_backend  # noqa: E402, F401  (the route's fixtures)

from ozlinalg import dask as ozd  # noqa: E402
from ozlinalg.dask import _kernels as K  # noqa: E402
from ozlinalg.dask._tasks import OzTask  # noqa: E402
from ozlinalg.testing import ExactReference, random_matrix  # noqa: E402

#: Where CuPy itself imports (a GPU machine), the stand-in would take its place in
#: dask's lazy "cupy" dispatch registrations for the rest of the session: the
#: stand-in tests step aside and ``TestOnAGPU`` runs the same checks on the GPU.
REAL_CUPY = cupy_or_none() is not None
pytestmark = [pytest.mark.usefixtures("one_blas_thread"),
              pytest.mark.skipif(REAL_CUPY, reason="real CuPy present: TestOnAGPU instead")]

#: Every block emulated, few slices (fast here), one method the CPU and GPU
#: engines share bit for bit.
OPTS = dict(slices=6, method="bitmask-ef", min_size=0, **EAGER)
#: Block functions that form exactly one emulated product each.
PRODUCT_TASKS = {K.matmul_block, K.product, K.lu_update, K.reflector_w, K.reflector_update}


@pytest.fixture
def host_gpu():
    with HostGPU() as engine:
        yield engine


def on_device(x):
    """``x`` (a dask array of NumPy chunks) with CuPy chunks: what a GPU user writes."""
    import cupy

    return x.map_blocks(cupy.asarray)


def is_device_array(x):
    import cupy

    return type(x) is cupy.ndarray


def product_tasks(*arrays):
    """Number of tasks in the graphs of ``arrays`` that form one emulated product each."""
    graph = {}
    for x in arrays:
        graph.update(dict(x.__dask_graph__()))
    count = 0
    for task in graph.values():
        fn = getattr(task, "func", None)
        if fn is None and isinstance(task, tuple) and task:
            fn = task[0]
        count += isinstance(fn, OzTask) and fn.func in PRODUCT_TASKS
    return count


def _inputs(rng):
    n = 48
    a = random_matrix(rng, n, n, 1.0)
    spd = a @ a.T + n * np.eye(n)
    return dict(a=a, b=random_matrix(rng, n, 3, 1.0), spd=spd, tri=np.triu(a) + n * np.eye(n),
                tall=random_matrix(rng, 70, 30, 1.0))


#: name -> f(inputs, to_dask): a graph of ozlinalg.dask on the inputs.
CASES = {
    "matmul": lambda x, d: ozd.matmul(d(x["a"], (16, 24)), d(x["b"], (24, 2))),
    "matmul-batched-complex": lambda x, d: ozd.matmul(
        d(np.stack([x["a"], x["a"].T]) * (1 + 1j), (1, 16, 24)), d(x["a"], 24)),
    "lu_factor": lambda x, d: ozd.lu_factor(d(x["a"])),
    "lu_solve-trans": lambda x, d: ozd.lu_solve(ozd.lu_factor(d(x["a"])), d(x["b"]), trans=1),
    "lu": lambda x, d: ozd.lu(d(x["a"])),
    "lu-p_indices": lambda x, d: ozd.lu(d(x["a"]), p_indices=True),
    "lu-permute_l": lambda x, d: ozd.lu(d(x["a"]), permute_l=True),
    "det": lambda x, d: ozd.det(d(x["a"])),
    "solve": lambda x, d: ozd.solve(d(x["a"]), d(x["b"])),
    "solve-sym": lambda x, d: ozd.solve(d(x["spd"]), d(x["b"]), assume_a="sym"),
    "solve-pos": lambda x, d: ozd.solve(d(x["spd"]), d(x["b"]), assume_a="pos"),
    "cholesky": lambda x, d: ozd.cholesky(d(x["spd"])),
    "cho_solve-lower": lambda x, d: ozd.cho_solve(ozd.cho_factor(d(x["spd"]), lower=True),
                                                  d(x["b"])),
    "solve_triangular": lambda x, d: ozd.solve_triangular(d(x["tri"]), d(x["b"]), trans=2),
    "qr-tsqr": lambda x, d: ozd.qr(d(x["tall"], (20, 30)), mode="economic"),
    "qr-full": lambda x, d: ozd.qr(d(x["tall"], 20)),
    "qr-r": lambda x, d: ozd.qr(d(x["tall"], 20), mode="r"),
    "inv": lambda x, d: ozd.inv(d(x["a"])),
    "lstsq": lambda x, d: ozd.lstsq(d(x["tall"], (20, 30)), d(x["tall"][:, :2], (20, 2))),
    "lstsq-wide": lambda x, d: ozd.lstsq(d(x["tall"].T.copy(), (15, 35)),
                                         d(x["tall"][:30, :2], (15, 2))),
}


def _build(name, inputs, device):
    def to_dask(x, chunks=16):
        arr = da.from_array(x, chunks=chunks)
        return on_device(arr) if device else arr

    with ozlinalg.options(**OPTS):
        out = CASES[name](inputs, to_dask)
    return out if isinstance(out, tuple) else (out,)


# counts below auto's on purpose (this tests the device): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestChunksStayOnTheDevice:
    @pytest.mark.parametrize("name", sorted(CASES))
    def test_every_function(self, rng, name):
        inputs = _inputs(rng)
        want = dask.compute(*_build(name, inputs, False), scheduler="threads")
        with HostGPU() as engine:
            import cupy

            arrays = _build(name, inputs, True)
            for x in arrays:      # the lazy result says CuPy chunks ...
                assert type(x._meta) is cupy.ndarray, name
            got = dask.compute(*arrays, scheduler="threads")
            for x in got:         # ... and its blocks are CuPy arrays
                assert is_device_array(x), (name, type(x))
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape, name
                np.testing.assert_array_equal(g.get(), w)
            tasks = product_tasks(*arrays)
        # every product task formed its product on the GPU engine (panels and
        # diagonal blocks add their own emulated trailing updates); the CPU
        # engine raised if anything reached it
        assert engine.products.total() >= tasks
        assert engine.launches > 0 and engine.lt.calls == engine.launches
        if name.startswith("matmul"):
            assert tasks > 0

    def test_matmul_counts_one_product_per_block_triple(self, rng, host_gpu):
        a_h, b_h = random_matrix(rng, 60, 50, 1.0), random_matrix(rng, 50, 40, 1.0)
        a = on_device(da.from_array(a_h, chunks=(20, 25)))
        b = on_device(da.from_array(b_h, chunks=(25, 20)))
        with ozlinalg.options(**OPTS):
            ozlinalg.matmul(a, b).compute(scheduler="threads")
        assert host_gpu.products == {(20, 20): 3 * 2 * 2}   # (i, k, j) block triples

    @pytest.mark.skipif(not compiler_available(), reason="needs g++ for the CUDA kernel sources")
    @pytest.mark.parametrize("method, slices", [("hybrid-ef", 8), ("crt", 14)])
    def test_fused_kernels_on_device_chunks(self, rng, method, slices):
        """The GPU engine's fused split / residue kernels (their CUDA sources,
        compiled for the host) on the blocks of a dask product."""
        a_h, b_h = random_matrix(rng, 40, 64, 2.0), random_matrix(rng, 64, 36, 2.0)
        a, b = da.from_array(a_h, chunks=(20, 32)), da.from_array(b_h, chunks=(32, 18))
        with ozlinalg.options(method=method, slices=slices, min_size=0, **EAGER):
            want = ozlinalg.matmul(a, b).compute()
            with HostGPU(fused_split=True) as engine:
                got = ozlinalg.matmul(on_device(a), on_device(b)).compute()
                assert is_device_array(got)
        np.testing.assert_array_equal(got.get(), want)
        assert engine.products.total() == 2 * 2 * 2

    def test_results_stay_on_the_device_with_small_slices(self, rng, host_gpu):
        """3 slices: the error is the emulation's, so the products really were
        emulated on the device (not a native fallback)."""
        a_h, b_h = random_matrix(rng, 48, 48, 1.0), random_matrix(rng, 48, 2, 1.0)
        with ozlinalg.options(slices=3, method="bitmask-ef", balance=False, min_size=0, **EAGER):
            c = ozlinalg.matmul(on_device(da.from_array(a_h, chunks=16)),
                                on_device(da.from_array(b_h, chunks=(16, 2))))
        c = c.compute()
        ref = ExactReference(a_h, b_h)
        err = float(ref.relative_errors(c.get()).max())
        native = float(ref.relative_errors(a_h @ b_h).max())
        assert err > 1e-6 > 1e4 * native

    def test_mixed_chunk_types_are_refused_when_the_graph_is_built(self, rng, host_gpu):
        a = da.from_array(rng.standard_normal((20, 20)), chunks=10)
        with pytest.raises(TypeError, match="cannot mix dask arrays of NumPy and CuPy"):
            ozlinalg.matmul(a, on_device(a))
        with pytest.raises(TypeError, match="cannot mix"):
            ozlinalg.linalg.solve(on_device(a), a[:, 0])
        import cupy

        x = ozlinalg.matmul(on_device(a), cupy.asarray(a.compute()))  # a CuPy operand: fine
        assert type(x._meta) is cupy.ndarray

    def test_stand_in_refuses_what_cupy_refuses(self, host_gpu):
        """The checks above rely on it: a CuPy array does not mix with NumPy arrays."""
        import cupy

        x = cupy.asarray(np.ones((3, 3)))
        with pytest.raises(TypeError, match="Unsupported type"):
            x + np.ones((3, 3))
        with pytest.raises(TypeError, match="Unsupported type"):
            np.concatenate([x, np.ones((3, 3))])
        assert is_device_array(np.tril(x)) and is_device_array(x.sum())
        assert type(x.get()) is np.ndarray


# ----------------------------------------------------------------- the route


def _user_code(a, b, like):
    """Unchanged dask code (``like``: how the user makes chunks of the type of
    ``a``'s, e.g. ``cupy.asarray``)."""
    n = a.shape[0]
    spd = a @ a.T + n * da.eye(n, chunks=a.chunks[0][0]).map_blocks(like)
    ts = a.rechunk({1: -1})
    return dict(solve=da.linalg.solve(a, b), matmul=a @ b,
                cholesky=da.linalg.cholesky(spd, lower=True), qr=da.linalg.qr(ts),
                lu=da.linalg.lu(a), inv=da.linalg.inv(a),
                trsm=da.linalg.solve_triangular(spd, b), lstsq=da.linalg.lstsq(ts, b))


@pytest.mark.usefixtures("clean_backend")
class TestRoute:
    # counts below auto's on purpose (this tests the routing): AccuracyWarning expected
    @pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
    def test_unchanged_dask_code_on_cupy_chunks(self, rng):
        n = 48
        a_h, b_h = random_matrix(rng, n, n, 1.0), random_matrix(rng, n, 2, 1.0)
        a, b = da.from_array(a_h, chunks=16), da.from_array(b_h, chunks=(16, 2))

        def routed(a, b, like):
            with ozlinalg.options(slices=3, balance=False), \
                    ozlinalg.backend(min_size=0, **EAGER):
                return _user_code(a, b, like)

        want = dask.compute(routed(a, b, np.asarray), scheduler="threads")[0]
        with HostGPU() as engine:
            import cupy

            graphs = routed(on_device(a), on_device(b), cupy.asarray)
            for key, x in graphs.items():
                for y in (x if isinstance(x, tuple) else (x,)):
                    assert any(nm.startswith("oz-") for nm in y.dask.layers), key
                    assert type(y._meta) is cupy.ndarray, key
            got = dask.compute(graphs, scheduler="threads")[0]
            for key in got:
                for g, w in zip(*[x if isinstance(x, tuple) else (x,) for x in (got[key],
                                                                               want[key])]):
                    assert is_device_array(g), key
                    np.testing.assert_array_equal(g.get(), w)
        assert engine.products.total() >= product_tasks(
            *[y for x in graphs.values() for y in (x if isinstance(x, tuple) else (x,))]) > 0
        x0 = np.linalg.solve(a_h, b_h)   # and the 3-slice emulation ran: not FP64's result
        assert 1e-8 < np.linalg.norm(got["solve"].get() - x0) / np.linalg.norm(x0) < 1e-1

    def test_the_strategy_asks_the_gpu_engine(self, rng, host_gpu):
        """The route's decision is the GPU engine's for CuPy chunks (the default
        'performant' strategy: its crossover, none measured yet, so dask's own)."""
        a = on_device(da.from_array(rng.standard_normal((64, 64)), chunks=32))
        with ozlinalg.profile() as prof, ozlinalg.backend():
            c = a @ a
        (route,) = prof.routing
        assert route.engine == host_gpu.name == "cupy-cublaslt"
        assert not route.emulated and not any(nm.startswith("oz-") for nm in c.dask.layers)

    def test_mixed_chunk_types_fall_through_to_dask(self, rng, host_gpu):
        a = da.from_array(rng.standard_normal((20, 20)), chunks=10)
        with ozlinalg.backend(min_size=0, **EAGER):
            mixed = on_device(a) @ a
            device = on_device(a) @ on_device(a)
        assert not any(nm.startswith("oz-") for nm in mixed.dask.layers)
        assert any(nm.startswith("oz-") for nm in device.dask.layers)


# ----------------------------------------------------------------- worker processes


# counts below auto's on purpose (this tests the cluster): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestLocalCluster:
    def test_two_worker_processes_each_with_its_gpu_engine(self, rng):
        """LocalCluster(2 processes): the stand-in installed in each worker by a
        worker plugin (dask-cuda's LocalCUDACluster gives each worker process
        its own GPU the same way, by process): options travel, results are the
        NumPy-chunk graphs' bit for bit, and the workers' engines, not the
        client's, formed every product."""
        distributed = pytest.importorskip("distributed")
        a_h, b_h = random_matrix(rng, 64, 64, 1.0), random_matrix(rng, 64, 2, 1.0)
        opts = dict(slices=3, method="bitmask-ef", balance=False, min_size=0, **EAGER)
        with ozlinalg.options(**opts):
            a, b = da.from_array(a_h, chunks=16), da.from_array(b_h, chunks=(16, 2))
            want = dask.compute(ozd.matmul(a, a), ozd.solve(a, b))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                               processes=True, dashboard_address=None,
                                               silence_logs=logging.ERROR)
        with cluster, distributed.Client(cluster) as client, HostGPU() as client_engine:
            client.register_plugin(HostGPUPlugin())
            with ozlinalg.options(**opts):
                c, x = ozd.matmul(on_device(a), on_device(a)), ozd.solve(on_device(a),
                                                                         on_device(b))
            tasks = product_tasks(c)
            c, x = client.compute([c, x], sync=True)
            counters = client.run(HostGPUPlugin.counters)
            assert is_device_array(c) and is_device_array(x)
        np.testing.assert_array_equal(c.get(), want[0])
        np.testing.assert_array_equal(x.get(), want[1])
        assert client_engine.products.total() == 0          # nothing ran in the client
        assert {v["pid"] for v in counters.values()}.isdisjoint({os.getpid()})
        assert sum(v["products"] for v in counters.values()) >= tasks == 4 * 4 * 4
        assert all(v["products"] > 0 and v["cublaslt_calls"] > 0 for v in counters.values())


class TestCuPyInputsAreNotModified:
    """Found by the multi-GPU step's dry run (its 1-GPU rows): ``solve`` on CuPy
    arrays passed a broadcast VIEW of the caller's ``b`` to the in-place
    triangular solves as if it were a copy. NumPy's broadcast views are
    read-only, so NumPy inputs were copied; CuPy's are writable, so the
    caller's ``b`` would have been overwritten (the stand-in, which keeps
    NumPy's read-only flag, raised instead)."""

    @pytest.mark.parametrize("assume_a", ["gen", "pos", "sym"])
    def test_solve_leaves_b_alone(self, rng, host_gpu, assume_a):
        import cupy

        a_h = random_matrix(rng, 40, 40, 1.0)
        a_h = a_h @ a_h.T + 40 * np.eye(40)
        b_h = random_matrix(rng, 40, 3, 1.0)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        x = ozlinalg.linalg.solve(a, b, assume_a=assume_a)
        np.testing.assert_array_equal(b.get(), b_h)
        np.testing.assert_array_equal(a.get(), a_h)
        assert is_device_array(x)
        assert_solve_accurate(x.get(), a_h, b_h)  # against the exact solution


# ----------------------------------------------------------------- on a GPU


@pytest.mark.gpu
class TestOnAGPU:
    """The same checks with real CuPy chunks (GPU machines only)."""

    pytestmark = pytest.mark.skipif(not REAL_CUPY, reason="needs CuPy")

    def test_cupy_chunks_run_on_the_gpu_engine(self, rng):
        import cupy

        from ozlinalg.engines import get_engine

        engine = get_engine(cupy)
        a_h, b_h = random_matrix(rng, 96, 96, 1.0), random_matrix(rng, 96, 3, 1.0)
        a, b = da.from_array(a_h, chunks=32), da.from_array(b_h, chunks=(32, 3))
        with ozlinalg.options(**OPTS):
            want = ozd.matmul(a, a).compute()
            c = ozd.matmul(a.map_blocks(cupy.asarray), a.map_blocks(cupy.asarray))
            x = ozd.solve(a.map_blocks(cupy.asarray), b.map_blocks(cupy.asarray))
            lu, piv = ozd.lu_factor(a.map_blocks(cupy.asarray))
        before = engine.launches
        c, x, piv = dask.compute(c, x, piv, scheduler="threads")
        assert engine.launches > before
        assert all(type(v) is cupy.ndarray for v in (c, x, piv))
        np.testing.assert_array_equal(cupy.asnumpy(c), want)   # the engines' bits agree
        np.testing.assert_allclose(cupy.asnumpy(x), np.linalg.solve(a_h, b_h), rtol=1e-10)
        np.testing.assert_array_equal(cupy.asnumpy(piv), sla.lu_factor(a_h)[1])
