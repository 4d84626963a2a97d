"""The cuBLASLt engine (``CublasLtEngine``): on a host emulation always, on a GPU where one exists.

Every test taking the ``engine`` fixture runs twice: on :mod:`host_cuda`
(NumPy arrays with device-like pointers, a cuBLASLt stand-in enforcing the
IMMA rules, the CUDA kernel sources compiled for the host), in every CI run;
and, marked ``gpu``, on the real engine where CuPy finds a device (the CuPy
testing style: one body, two array modules). Tests that look inside the
stand-in (``host_engine``) check what the engine asks of cuBLASLt (layouts,
pointers, padding, descriptor caching) and that ``ozlinalg.matmul`` through
the engine gives the CPU engine's results bit for bit. tests/engines/test_gpu.py
holds what only a GPU can run (CuPy's ElementwiseKernel, GemmEx paths,
matmul on CuPy arrays).
"""
import shutil
import subprocess

import numpy as np
import pytest
from host_cuda import (
    HostCublasLt,
    HostEngine,
    NotSupported,
    compiler_available,
    host_cupy,
)

import ozlinalg
from ozlinalg._array import cupy_or_none, to_numpy
from ozlinalg.engines import base as engine_registry
from ozlinalg.engines.base import Engine
from ozlinalg.ozaki.split import normalize_rows, split_rows
from ozlinalg.testing import random_matrix


@pytest.fixture(params=["host", pytest.param("gpu", marks=pytest.mark.gpu)])
def engine(request):
    """The cuBLASLt engine on the host stand-ins, or on the GPU."""
    if request.param == "host":
        return HostEngine(fused_split=compiler_available())
    from ozlinalg.engines import get_engine

    return get_engine(cupy_or_none())


@pytest.fixture
def host_engine():
    return HostEngine(fused_split=compiler_available())


@pytest.fixture
def kernels(engine):
    """``engine``, where its CUDA kernel sources can run (a GPU, or a host compiler)."""
    if isinstance(engine, HostEngine) and not engine.fused_split:
        pytest.skip("needs a C++ compiler (g++) to run the CUDA kernel sources on the host")
    return engine


def _slices(rng, s, rows, k, bound):
    return rng.integers(-bound, bound + 1, size=(s, rows, k)).astype(np.int8)


def _exact(a, b, pairs):
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    return sum(a64[i] @ b64[j].T for i, j in pairs)


class TestIntMatmulSum:
    @pytest.mark.parametrize("m, p, k", [(128, 64, 256), (37, 29, 50), (5, 3, 1), (1, 1, 17),
                                         (64, 130, 1000), (3, 4, 16)])
    def test_exact_on_odd_shapes(self, rng, engine, m, p, k):
        cp = engine.xp
        a, b = _slices(rng, 3, m, k, 127), _slices(rng, 3, p, k, 127)
        pairs = [(0, 2), (1, 1), (2, 0)]
        ws = engine.workspace(m, p)
        before = engine.launches
        out, calls = engine.int_matmul_sum(cp.asarray(a), cp.asarray(b), pairs, 127, 127, ws=ws)
        assert out.shape == (m, p) and out.dtype == np.int32
        assert calls == len(pairs) == engine.launches - before
        np.testing.assert_array_equal(to_numpy(out), _exact(a, b, pairs))
        if isinstance(engine, HostEngine):
            # cuBLASLt saw (M, N, K) = (p padded to 4, m, k padded to 16): the TN product.
            assert set(engine.lt.shapes) == {(-(-p // 4) * 4, m, -(-max(k, 1) // 16) * 16)}

    def test_full_int8_range_near_inner_limit(self, engine):
        # -128 * -128 everywhere (the CRT bound GEMM's worst case), k close to 2**17.
        cp = engine.xp
        k = (1 << 17) - 1024
        a = cp.asarray(np.full((1, 8, k), -128, np.int8))
        b = cp.asarray(np.full((1, 12, k), -128, np.int8))
        out, _ = engine.int_matmul_sum(a, b, [(0, 0)], 128, 128)
        assert int(out.min()) == int(out.max()) == k * 128 * 128

    def test_long_run_spills_to_int64(self, rng, engine):
        # Claimed bounds so large that every 16-wide piece of k is its own run: the
        # strided sub-range plans and the int64 flush. Without the flush the
        # emulated INT32 accumulator wraps and the comparison fails.
        cp = engine.xp
        a, b = _slices(rng, 2, 24, 100, 127), _slices(rng, 2, 20, 100, 127)
        pairs = [(0, 1), (1, 0)]
        out, calls = engine.int_matmul_sum(cp.asarray(a), cp.asarray(b), pairs, 1 << 15, 1 << 15)
        assert out.dtype == np.int64
        assert calls == 2 * 7  # k_pad = 112 = 7 pieces of 16
        np.testing.assert_array_equal(to_numpy(out), _exact(a, b, pairs))

    def test_int32_wraps_without_bookkeeping(self, engine):
        # A run whose true sum passes 2**31 comes back wrong (wrapped on the host, as
        # IMMA accumulators do), so the engine's run splitting above is what keeps
        # results exact.
        cp = engine.xp
        k = 1 << 16
        a = cp.asarray(np.full((2, 4, k), -128, np.int8))
        b = cp.asarray(np.full((2, 4, k), -128, np.int8))
        out, _ = engine.int_matmul_sum(a, b, [(0, 0), (1, 1)], 1, 1)  # bounds understated
        assert int(out[0, 0]) != 2 * k * 128 * 128

    def test_strided_views_are_copied_and_padded(self, rng, engine):
        cp = engine.xp
        a, b = _slices(rng, 2, 40, 80, 64), _slices(rng, 2, 33, 80, 64)
        da = cp.asarray(a)[:, 3:35, 7:71]
        db = cp.asarray(b)[:, :, 7:71]
        out, _ = engine.int_matmul_sum(da, db, [(1, 0)], 64, 64)
        np.testing.assert_array_equal(to_numpy(out),
                                      _exact(a[:, 3:35, 7:71], b[:, :, 7:71], [(1, 0)]))

    def test_aligned_slices_are_used_in_place(self, rng, engine):
        da = engine.empty_slices(2, 32, 64, "hybrid")
        da[...] = engine.xp.asarray(_slices(rng, 2, 32, 64, 127))
        ws = engine.workspace(32, 32)
        engine.int_matmul_sum(da, da, [(0, 1)], 127, 127, ws=ws)
        assert not any(key[0] == "pad" for key in ws)  # no padded copy made
        if isinstance(engine, HostEngine):
            assert engine.lt.aligned16 == engine.lt.calls == 1

    def test_plans_are_cached_per_shape(self, rng, engine):
        cp = engine.xp
        a, b = cp.asarray(_slices(rng, 2, 16, 32, 7)), cp.asarray(_slices(rng, 2, 8, 32, 7))
        plans = set(engine._plans)
        for _ in range(3):
            engine.int_matmul_sum(a, b, [(0, 0), (1, 1)], 7, 7)
        assert len(set(engine._plans) - plans) == 1
        engine.int_matmul_sum(a[:, :12], b, [(0, 0)], 7, 7)  # another N
        assert len(set(engine._plans) - plans) == 2
        if isinstance(engine, HostEngine):
            assert engine.lt.heuristic_queries == 2 and len(engine.lt.descs) == 2

    @pytest.mark.parametrize("k, bound, per_gemm", [(200, 127, 9), (1000, 127, 9),
                                                     (100, 2**11, 5), (100, 2**12, 1)])
    def test_ef_group_is_one_gemm(self, rng, engine, k, bound, per_gemm):
        # The grouped storage: A_i and B_{g-i} side by side along the inner dimension,
        # so a group of 9 products is one GEMM, or runs of as many as INT32 allows.
        s, m, p, g = 9, 20, 13, 8
        da = engine.empty_slices(s, m, k, "hybrid", "a")
        db = engine.empty_slices(s, p, k, "hybrid", "b")
        a, b = _slices(rng, s, m, k, min(bound, 127)), _slices(rng, s, p, k, min(bound, 127))
        da[...] = engine.xp.asarray(a)
        db[...] = engine.xp.asarray(b)
        pairs = [(i, g - i) for i in range(g + 1)]
        before = engine.launches
        out, calls = engine.int_matmul_sum(da, db, pairs, bound, bound)
        assert calls == -(-len(pairs) // per_gemm) == engine.launches - before
        np.testing.assert_array_equal(to_numpy(out), _exact(a, b, pairs))
        # Runs that together could pass INT32 are summed in int64.
        assert out.dtype == (np.int32 if per_gemm >= len(pairs) else np.int64)

    def test_workspace_per_stream_handle_per_device(self, rng, host_engine, monkeypatch):
        import types

        engine = host_engine
        cp = engine.xp
        a, b = cp.asarray(_slices(rng, 1, 8, 32, 7)), cp.asarray(_slices(rng, 1, 8, 32, 7))
        engine.int_matmul_sum(a, b, [(0, 0)], 7, 7)
        monkeypatch.setattr(cp.cuda, "get_current_stream",
                            lambda: types.SimpleNamespace(ptr=7, synchronize=lambda: None))
        engine.int_matmul_sum(a, b, [(0, 0)], 7, 7)
        assert len(engine._workspaces) == 2  # a second stream never shares a workspace

        class Device1:
            id = 1

            def __init__(self, device=None):
                pass

        monkeypatch.setattr(cp.cuda, "Device", Device1)
        out, _ = engine.int_matmul_sum(a, b, [(0, 0)], 7, 7)
        assert len(engine.lt.handles) == 2 and len(engine._workspaces) == 3
        np.testing.assert_array_equal(out, _exact(np.asarray(a), np.asarray(b), [(0, 0)]))

    def test_rejects_non_int8_slices(self, engine):
        cp = engine.xp
        with pytest.raises(TypeError, match="int8"):
            engine.int_matmul_sum(cp.zeros((1, 4, 4), np.float32), cp.zeros((1, 4, 4), np.int8),
                                  [(0, 0)], 1, 1)


class TestHostCublasLtIsStrict:
    """The stand-in refuses what cuBLASLt refuses, so the tests above can fail."""

    def _plan_args(self, lt, transa=1, ld=16, m=8):
        h = lt.create()
        d = lt.matmul_desc_create(72, 10)
        buf = np.array([transa], np.int32)
        lt.matmul_desc_set_attribute(d, 3, buf.ctypes.data, 4)
        a = lt.matrix_layout_create(3, 16, m, ld)
        b = lt.matrix_layout_create(3, 16, 4, ld)
        c = lt.matrix_layout_create(10, m, 4, max(m, 4))
        pref = lt.matmul_preference_create()
        res = lt.MatmulHeuristicResult(1)
        count = np.zeros(1, np.int32)
        return h, d, a, b, c, pref, res, count

    def test_non_tn_refused(self):
        lt = HostCublasLt()
        h, d, a, b, c, pref, res, count = self._plan_args(lt, transa=0)
        with pytest.raises(NotSupported, match="TN"):
            lt.matmul_algo_get_heuristic(h, d, a, b, c, c, pref, 1, res.ptr, count.ctypes.data)

    def test_unaligned_leading_dimension_refused(self):
        lt = HostCublasLt()
        h, d, a, b, c, pref, res, count = self._plan_args(lt, ld=18)
        with pytest.raises(NotSupported, match="multiples of 4"):
            lt.matmul_algo_get_heuristic(h, d, a, b, c, c, pref, 1, res.ptr, count.ctypes.data)

    def test_m_not_multiple_of_4_refused(self):
        lt = HostCublasLt()
        h, d, a, b, c, pref, res, count = self._plan_args(lt, m=6)
        with pytest.raises(NotSupported, match="M=6"):
            lt.matmul_algo_get_heuristic(h, d, a, b, c, c, pref, 1, res.ptr, count.ctypes.data)


class TestFusedHybridSplit:
    """The fused split kernel against the generic split."""

    @pytest.mark.parametrize("s", [1, 5, 9])
    @pytest.mark.parametrize("phi", [0.5, 4.0])
    def test_bit_identical_to_generic(self, rng, kernels, s, phi):
        from ozlinalg.engines._cuda_kernels import hybrid_split_fused
        from ozlinalg.ozaki.params import slice_width

        a = random_matrix(rng, 45, 333, phi)
        a[3] = 0.0
        a[5, ::2] = 0.0
        a[7, 4] = 5e-324  # a subnormal
        width = slice_width(333)
        x, _ = normalize_rows(np, a)
        cp = kernels.xp
        xd = cp.asarray(x)
        out_f, sc_f = cp.empty((s, 45, 333), np.int8), cp.empty((s, 45))
        assert hybrid_split_fused(xd, s, width, out_f, sc_f, xp=cp)
        np.testing.assert_array_equal(to_numpy(xd), x)  # the input is left as it was
        out_g, sc_g = np.empty((s, 45, 333), np.int8), np.empty((s, 45))
        split_rows(np, "hybrid", x.copy(), s, width, out_g, sc_g)
        np.testing.assert_array_equal(to_numpy(out_f), out_g)
        np.testing.assert_array_equal(to_numpy(sc_f), sc_g)

    def test_writes_the_grouped_storage(self, rng, kernels):
        # B's grouped storage: slices reversed in memory (a negative slice stride).
        from ozlinalg.engines._cuda_kernels import hybrid_split_fused

        x, _ = normalize_rows(np, random_matrix(rng, 13, 70, 1.0))
        cp = kernels.xp
        out = kernels.empty_slices(6, 13, 70, "hybrid", "b")
        assert out.strides[0] < 0
        assert hybrid_split_fused(cp.asarray(x), 6, 7, out, cp.empty((6, 13)), xp=cp)
        want = np.empty((6, 13, 70), np.int8)
        split_rows(np, "hybrid", x.copy(), 6, 7, want, np.empty((6, 13)))
        np.testing.assert_array_equal(to_numpy(out), want)

    def test_declines_what_it_cannot_do(self, rng, kernels):
        from ozlinalg.engines._cuda_kernels import hybrid_split_fused

        cp = kernels.xp
        x = cp.asarray(rng.random((10, 20)) - 0.5)[:, ::2]
        assert not hybrid_split_fused(x, 3, 7, cp.empty((3, 10, 10), np.int8),
                                      cp.empty((3, 10)), xp=cp)
        assert not hybrid_split_fused(cp.zeros((4, 4)), 2, 7, cp.empty((2, 4, 4), np.float32),
                                      cp.empty((2, 4)), xp=cp)


# counts below auto's on purpose (this tests the engines' bits): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestMatmulThroughHostEngine:
    """``ozlinalg.matmul`` with the GPU engine in place of the CPU one: same results."""

    @pytest.fixture
    def swap_engine(self, monkeypatch):
        def use(eng):
            monkeypatch.setitem(engine_registry._ENGINES, "numpy", eng)
            return eng
        return use

    @pytest.mark.parametrize("method, slices", [
        ("hybrid-ef", 8), ("hybrid-ef", "auto"), ("bitmask-ef", 9), ("bitmask", 7), ("rn", 7),
        ("crt", 14), ("crt-fast", 15), ("crt", "auto"),
    ])
    def test_bit_identical_to_cpu_engine(self, rng, swap_engine, host_engine, method, slices):
        engine = host_engine
        a = random_matrix(rng, 50, 203, 1.0)
        b = random_matrix(rng, 203, 37, 1.0)
        want = ozlinalg.matmul(a, b, method=method, slices=slices)
        swap_engine(engine)
        with ozlinalg.profile() as prof:
            got = ozlinalg.matmul(a, b, method=method, slices=slices)
        np.testing.assert_array_equal(got, want)
        rec = prof.calls[0]
        assert engine.lt.calls == rec.engine_calls
        if method.endswith("-ef"):
            # Each EF group is ONE cuBLASLt GEMM over its slices laid side by side.
            assert rec.engine_calls == rec.slices < rec.int8_gemms
            assert {K for _, _, K in engine.lt.shapes} == {
                g * 208 for g in range(1, rec.slices + 1)}  # k = 203 padded to 208
        else:
            assert rec.engine_calls == rec.int8_gemms

    def test_splitfp_matches_cpu_engine(self, rng, swap_engine, host_engine):
        engine = host_engine
        a = random_matrix(rng, 40, 150, 0.5)
        b = random_matrix(rng, 150, 30, 0.5)
        want = ozlinalg.matmul(a, b, method="splitfp", slices=6)
        swap_engine(engine)
        got = ozlinalg.matmul(a, b, method="splitfp", slices=6)
        # FP32 accumulation of exact FP16 products: only the summation order differs.
        scale = float((np.abs(a) @ np.abs(b)).max())
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-14 * scale)

    def test_tiles_inner_blocks_and_nonfinite(self, rng, swap_engine, host_engine):
        engine = host_engine
        a = random_matrix(rng, 70, 300, 2.0)
        b = random_matrix(rng, 300, 45, 2.0)
        a[2, 3] = np.inf
        b[4, 1] = np.nan
        # below the one-tile plan (about 1.3 MiB with the copies of the Inf / NaN lines),
        # above the smallest
        with ozlinalg.options(memory_limit=1 << 20):
            want = ozlinalg.matmul(a, b, slices=9)
            swap_engine(engine)
            got = ozlinalg.matmul(a, b, slices=9)
        np.testing.assert_array_equal(got, want)

    def test_factorization_runs_on_the_engine(self, rng, swap_engine, host_engine):
        engine = host_engine
        a = rng.standard_normal((300, 300))
        want = ozlinalg.lapack.getrf(a, min_size=64, block_size=64)
        swap_engine(engine)
        got = ozlinalg.lapack.getrf(a, min_size=64, block_size=64)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert engine.lt.calls > 0


_NVCC = shutil.which("nvcc")


@pytest.mark.skipif(_NVCC is None, reason="needs nvcc (the CUDA toolkit) to compile for sm_90")
class TestKernelSourcesCompileForHopper:
    """The kernel sources compile for sm_90 and keep every FP64 operation separately
    rounded (NVRTC, like nvcc, contracts a * b + c into an FMA unless told not to)."""

    def _ptx(self, tmp_path, src):
        cu = tmp_path / "k.cu"
        cu.write_text(src)
        ptx = tmp_path / "k.ptx"
        subprocess.run([_NVCC, "-arch=sm_90", "-ptx", "-o", str(ptx), str(cu)], check=True,
                       capture_output=True)
        return ptx.read_text()

    def test_hybrid_split_has_no_fma(self, tmp_path):
        from ozlinalg.engines._cuda_kernels import _HYBRID_SRC

        ptx = self._ptx(tmp_path, _HYBRID_SRC)
        assert ".entry ozlinalg_hybrid_split" in ptx
        assert "fma.rn.f64" not in ptx
        assert "cvt.rni.f64.f64" in ptx  # rint: round half to even, as np.rint

    def test_axpy_body_has_no_fma(self, tmp_path):
        from ozlinalg.engines._cuda_kernels import AXPY_BODY

        kernel = (
            "template <typename T> __global__ void k(const T* x, double alpha, double* out, "
            "int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {{ "
            "double& acc = out[i]; {body}; }} }}\n"
            "template __global__ void k<int>(const int*, double, double*, int);\n"
            "template __global__ void k<long long>(const long long*, double, double*, int);\n"
            "template __global__ void k<double>(const double*, double, double*, int);\n")
        ptx = self._ptx(tmp_path, kernel.format(body=AXPY_BODY.replace("x", "x[i]")))
        assert "fma.rn.f64" not in ptx and "mul.rn.f64" in ptx
        # The control: the plain expression IS contracted, so the check above has teeth.
        plain = self._ptx(tmp_path, kernel.format(body="acc = acc + alpha * (double)x[i]"))
        assert "fma.rn.f64" in plain


# counts below auto's on purpose (this tests the kernels): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestFusedCRTKernels:
    """The Ozaki-II kernels against the generic code."""

    @pytest.mark.parametrize("nmod", [1, 7, 16, 20, 32])
    def test_accumulator_bit_identical(self, rng, kernels, nmod):
        from ozlinalg.engines._cuda_kernels import CRTFusedAccumulator
        from ozlinalg.ozaki.crt import CRTAccumulator, crt_constants

        consts = crt_constants(nmod)
        cp = kernels.xp
        generic = CRTAccumulator(np, Engine(), consts)
        fused = CRTFusedAccumulator(cp, consts)
        full = cp.empty((23, 40), np.int32)  # strided [:, :37] view, as the engine returns
        for t in range(nmod):
            prod = rng.integers(-(2**31) + 1, 2**31, size=(23, 37))
            prod[0, :4] = [0, 2**31 - 1, -(2**31) + 1, consts.moduli[t]]
            full[:, :37] = cp.asarray(prod.astype(np.int32))
            generic.add(t, prod.astype(np.float64))
            fused.add(t, full[:, :37])
        np.testing.assert_array_equal(to_numpy(fused.result()), generic.result())

    @pytest.mark.parametrize("bits", [1, 20, 52, 53, 90, 127, 180])
    @pytest.mark.parametrize("nmod", [3, 16, 32])
    def test_residues_bit_identical(self, rng, kernels, bits, nmod):
        from ozlinalg.engines._cuda_kernels import crt_residues_fused
        from ozlinalg.ozaki.crt import MODULI, residues_into

        mods = MODULI[:nmod]
        rows, k = 9, 31
        x = rng.uniform(-1, 1, size=(rows, k))
        x[0] = 0.0
        x[1, :5] = [1.0 - 2**-53, -(1.0 - 2**-53), 0.5, -0.5, 2**-1074]
        shift = rng.integers(max(0, bits - 8), bits, size=rows).astype(np.float64)
        mult = np.ldexp(np.ones(rows), shift.astype(np.int32))
        round_rows = rng.random(rows) < 0.5
        want = np.empty((nmod, rows, k), np.int8)
        v = x * mult[:, None]
        residues_into(np, np.where(round_rows[:, None], np.rint(v), np.trunc(v)), mods, bits,
                      want)
        cp = kernels.xp
        got = cp.empty((nmod, rows, k), np.int8)
        assert crt_residues_fused(cp.asarray(x), cp.asarray(mult), cp.asarray(round_rows), mods,
                                  bits, got, xp=cp)
        np.testing.assert_array_equal(to_numpy(got), want)

    def test_matmul_runs_the_fused_kernels(self, rng, monkeypatch, host_engine):
        from ozlinalg.engines import _cuda_kernels

        engine = host_engine
        if not engine.fused_split:
            pytest.skip("needs a C++ compiler (g++) to run the CUDA kernel sources on the host")
        monkeypatch.setitem(engine_registry._ENGINES, "numpy", engine)
        a, b = random_matrix(rng, 30, 70, 2.0), random_matrix(rng, 70, 20, 2.0)
        ozlinalg.matmul(a, b, method="crt", slices=12)
        launched = {key[1]: kern.launches for key, kern in _cuda_kernels._KERNELS.items()
                    if key[0] == "crt" and key[2] == engine.xp.__name__}
        assert launched["ozlinalg_crt_residues"] >= 2  # A and B
        assert launched["ozlinalg_crt_reduce"] >= 12 and launched["ozlinalg_crt_combine"] >= 1

    def test_symmetric_mod_near_two_to_52(self, kernels):
        # ozl_symmod's quotient floor(x * fl(1/p)) is off by one for some x near
        # 2**52 (multiples of p and their neighbours); the corrections must fix it.
        from ozlinalg.engines._cuda_kernels import _CRT_SRC
        from ozlinalg.ozaki.crt import MODULI

        src = _CRT_SRC + r"""
extern "C" __global__ void symmod_all(const double* __restrict__ x, const double* __restrict__ p,
                                      double* __restrict__ out, const long long n)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        out[i] = ozl_symmod(x[i], p[i], 1.0 / p[i], floor(0.5 * p[i]));
}
"""
        xs, ps = [], []
        for p in MODULI:
            for n in (2**52 // p, 2**52 // p - 1, 2**51 // p + 7, 12345):
                for d in (-2, -1, 0, 1, 2):
                    for sign in (1, -1):
                        v = sign * (n * p + d)
                        if abs(v) <= 2**52:
                            xs.append(float(v))
                            ps.append(float(p))
        rng = np.random.default_rng(52)
        for p in MODULI:  # up to ~1 in 500 of these needs the r >= p correction (p = 107)
            xs.extend(rng.integers(-(2**52), 2**52, size=20000, endpoint=True).astype(float))
            ps.extend([float(p)] * 20000)
        x, p = np.array(xs), np.array(ps)
        cp = kernels.xp
        out = cp.empty(x.shape)
        kern = cp.RawKernel(src, "symmod_all")
        kern((4,), (64,), (cp.asarray(x), cp.asarray(p), out, np.int64(x.size)))
        out = to_numpy(out)
        xi, pi = x.astype(np.int64), p.astype(np.int64)
        h = pi // 2
        want = (xi + h) % pi - h  # the symmetric residue in [-h, p - 1 - h]
        np.testing.assert_array_equal(out, want)


class TestPointerAlignment:
    """cuBLASLt's heuristic assumes 256-byte aligned A, B, C, D unless told
    (MIN_ALIGNMENT_*_BYTES); the engine's slice pointers ``base + i k_pad`` and
    inner pieces ``+ k0`` are often only 16-byte aligned. The stand-in refuses a
    pointer less aligned than its plan's heuristic query declared, as the
    library does, so these fail if the engine stops declaring the alignment."""

    @pytest.mark.parametrize("k, k_pad", [(200, 208), (1000, 1008)])
    def test_odd_k_every_group_and_run(self, rng, engine, k, k_pad):
        # All groups of a triangular 9-slice product on the grouped storage: runs
        # start at A_i (base + i k_pad) and B_j (base + (s - 1 - j) k_pad), and
        # bounds of 2**11 cut each group into runs of 5 (new starts at i = 5).
        s, m, p = 9, 20, 13
        da = engine.empty_slices(s, m, k, "hybrid", "a")
        db = engine.empty_slices(s, p, k, "hybrid", "b")
        a, b = _slices(rng, s, m, k, 127), _slices(rng, s, p, k, 127)
        da[...] = engine.xp.asarray(a)
        db[...] = engine.xp.asarray(b)
        assert k_pad % 256  # so slices 1.. are NOT 256-byte aligned
        for bound in (127, 2**11):
            for g in range(s):
                pairs = [(i, g - i) for i in range(g + 1)]
                out, _ = engine.int_matmul_sum(da, db, pairs, bound, bound)
                np.testing.assert_array_equal(to_numpy(out), _exact(a, b, pairs))
        if isinstance(engine, HostEngine):
            declared = {al for al in engine.lt.alignments}
            assert min(min(al) for al in declared) == 16
            assert any(al[:2] == (256, 256) for al in declared)  # aligned ones stay 256

    def test_inner_pieces_at_k0_offsets(self, rng, engine):
        # Bounds so large that k = 1000 (k_pad 1008) is cut into 16-wide pieces:
        # operand pointers + k0 for k0 = 16, 32, ...
        cp = engine.xp
        a, b = _slices(rng, 2, 12, 1000, 127), _slices(rng, 2, 8, 1000, 127)
        pairs = [(0, 1), (1, 0)]
        out, calls = engine.int_matmul_sum(cp.asarray(a), cp.asarray(b), pairs, 1 << 15, 1 << 15)
        assert calls == 2 * 1008 // 16
        np.testing.assert_array_equal(to_numpy(out), _exact(a, b, pairs))
        if isinstance(engine, HostEngine):
            assert {al[0] for al in engine.lt.alignments} >= {16, 32, 64, 128, 256}

    def test_plans_are_keyed_on_alignment(self, rng, host_engine):
        engine = host_engine
        cp = engine.xp
        full = cp.zeros((2, 24, 48), np.int8)
        full[...] = cp.asarray(_slices(rng, 2, 24, 48, 7))
        b = cp.asarray(_slices(rng, 1, 8, 32, 7))
        engine.int_matmul_sum(full[:1, :, :32], b, [(0, 0)], 7, 7)  # copied (k 32, ld 48)
        before = len(engine._plans)
        ws = engine.workspace(24, 8)
        view = engine.empty_slices(3, 24, 32, "hybrid", "a")  # grouped: ld 96
        view[...] = cp.asarray(_slices(rng, 3, 24, 32, 7))
        engine.int_matmul_sum(view, b, [(0, 0)], 7, 7, ws=ws)  # A_0: 256-byte aligned
        engine.int_matmul_sum(view, b, [(1, 0)], 7, 7, ws=ws)  # A_1: base + 32
        engine.int_matmul_sum(view, b, [(2, 0)], 7, 7, ws=ws)  # A_2: base + 64
        keys = list(engine._plans)[before:]
        assert len(keys) == 3 and len({key[:5] for key in keys}) == 1  # same shape
        assert sorted(key[5][1] for key in keys) == [32, 64, 256]  # cuBLASLt's B = our A

    def test_stand_in_refuses_misaligned_pointer_without_declaration(self):
        lt = HostCublasLt()
        h, d, a, b, c, pref, res, count = TestHostCublasLtIsStrict()._plan_args(lt)
        lt.matmul_algo_get_heuristic(h, d, a, b, c, c, pref, 1, res.ptr, count.ctypes.data)
        buf = np.zeros(4096, np.int8)
        base = (-buf.ctypes.data) % 256 + buf.ctypes.data
        one, zero = np.ones(1, np.int32), np.zeros(1, np.int32)
        args = (one.ctypes.data, base + 16, a, base + 1024, b, zero.ctypes.data, base + 2048, c,
                base + 2048, c, res.ptr, 0, 0, 0)
        with pytest.raises(NotSupported, match="MIN_ALIGNMENT_A_BYTES"):
            lt.matmul(h, d, *args)
        # Declared: the same call is accepted.
        sixteen = np.array([16], np.uint32)
        lt.matmul_preference_set_attribute(pref, 5, sixteen.ctypes.data, 4)
        lt.matmul_algo_get_heuristic(h, d, a, b, c, c, pref, 1, res.ptr, count.ctypes.data)
        lt.matmul(h, d, *args)
        # Below IMMA's 4 bytes no algorithm exists.
        two = np.array([2], np.uint32)
        lt.matmul_preference_set_attribute(pref, 6, two.ctypes.data, 4)
        lt.matmul_algo_get_heuristic(h, d, a, b, c, c, pref, 1, res.ptr, count.ctypes.data)
        assert count[0] == 0


# counts below auto's on purpose (this tests the copies): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestCRTResiduesPaddedOnce:
    """Ozaki-II residues live in the engine's padded product layout, written once:
    no modulus's GEMM copies them (k = 203 and p = 37 need padding)."""

    def test_no_padded_copies(self, rng, monkeypatch, host_engine):
        engine = host_engine
        a, b = random_matrix(rng, 50, 203, 1.0), random_matrix(rng, 203, 37, 1.0)
        want = ozlinalg.matmul(a, b, method="crt", slices=12)
        monkeypatch.setitem(engine_registry._ENGINES, "numpy", engine)
        got = ozlinalg.matmul(a, b, method="crt", slices=12)
        np.testing.assert_array_equal(got, want)
        assert engine.lt.calls == 13  # bound GEMM + 12 moduli
        assert engine.padded_copy_bytes == 0

    def test_working_bytes_counts_the_padding(self):
        from ozlinalg.ozaki.tiling import working_bytes

        m, p, k, s = 50, 37, 203, 16
        padded = s * (-(-m // 4) * 4 + -(-p // 4) * 4) * (-(-k // 16) * 16)
        for crt in (False, True):
            base = 64 if crt else 16
            assert working_bytes(m, p, k, s, crt, 1) - (base * (m + p) * k + (80 if crt else 32)
                                                        * m * p) >= padded

    def test_fused_residues_write_the_padded_storage(self, rng, kernels):
        from ozlinalg.engines._cuda_kernels import crt_residues_fused
        from ozlinalg.ozaki.crt import MODULI, residues_into

        cp = kernels.xp
        mods, rows, k, bits = MODULI[:7], 13, 70, 60
        x = rng.uniform(-1, 1, size=(rows, k))
        mult = np.ldexp(np.ones(rows), np.full(rows, 50, np.int32))
        round_rows = np.arange(rows) % 2 == 0
        want = np.empty((7, rows, k), np.int8)
        v = x * mult[:, None]
        residues_into(np, np.where(round_rows[:, None], np.rint(v), np.trunc(v)), mods, bits,
                      want)
        for operand in ("a", "b"):  # "b": slices reversed in memory (negative stride)
            out = kernels.empty_slices(7, rows, k, "crt", operand)
            assert not out.flags.c_contiguous
            assert crt_residues_fused(cp.asarray(x), cp.asarray(mult), cp.asarray(round_rows),
                                      mods, bits, out, xp=cp)
            np.testing.assert_array_equal(to_numpy(out), want)


class TestInt32Epilogue:
    """Exact integer sums above 2**24, where an FP32 epilogue would round: the
    engine's INT32 accumulation with beta = 0 (one GEMM) and beta = 1 (a run of
    two GEMMs into the same buffer)."""

    @staticmethod
    def _operands(cp, k, ones_at):
        # Rows of -128 * -128 = 2**14 products, one extra 1 * 1 term at ``ones_at``.
        a = np.zeros((2, 4, k), np.int8)
        b = np.zeros((2, 8, k), np.int8)
        a[:, :, : k - 1] = -128
        b[:, :, : k - 1] = -128
        for t in ones_at:
            a[t, :, k - 1] = 1
            b[t, :, k - 1] = 1
        return cp.asarray(a), cp.asarray(b)

    def check(self, engine):
        cp = engine.xp
        # beta = 0: one GEMM, sum 2**16 * 2**14 + 1 = 2**30 + 1.
        a, b = self._operands(cp, (1 << 16) + 1, ones_at=[0])
        before = engine.launches
        out, calls = engine.int_matmul_sum(a, b, [(0, 0)], 128, 128)
        assert calls == 1 == engine.launches - before and out.dtype == np.int32
        assert bool((out == 2**30 + 1).all()), int(out[0, 0])
        # beta = 1: 2**29 (the first GEMM) + (2**29 + 1) accumulated in place.
        a, b = self._operands(cp, (1 << 15) + 1, ones_at=[1])
        out, calls = engine.int_matmul_sum(a, b, [(0, 0), (1, 1)], 128, 128)
        assert calls == 2 and out.dtype == np.int32  # one INT32 run, no int64 flush
        assert bool((out == 2**30 + 1).all()), int(out[0, 0])

    def test_sums_above_two_to_24_are_exact(self, engine):
        self.check(engine)

    def test_an_fp32_epilogue_would_be_caught(self):
        mutant = HostEngine(lt=HostCublasLt(epilogue="fp32"))
        with pytest.raises(AssertionError, match="1073741824"):
            self.check(mutant)


class TestFlushToZero:
    """CuPy compiles kernels with -ftz=true: FP32 subnormals read and written as
    zeros. ``auto``'s squared magnitudes in [2**-149, 2**-126) must survive to
    its estimate GEMM on the GPU as on the CPU, or the two pick different counts."""

    def test_stand_in_flushes_like_cupy(self):
        cp = host_cupy()
        x = cp.asarray(np.array([2.0**-130, 2.0**-100, -(2.0**-140)]))
        np.testing.assert_array_equal(x.astype(np.float32), [0.0, 2.0**-100, -0.0])
        np.testing.assert_array_equal(cp.ascontiguousarray(x, dtype=np.float32)[:2],
                                      [0.0, 2.0**-100])
        y = cp.asarray(np.array([2.0**-100], np.float32))
        assert float((y * np.float32(2.0**-30))[0]) == 0.0  # a subnormal result
        assert float(np.asarray(x)[0] * 2.0) != 0.0  # float64 is not flushed

    @staticmethod
    def _inputs(m=8, p=6, k=1100, t=1024):
        # Entry (i, j) of X**2 (Y**2)^T: t terms 2**-127.2 * 0.5625 (subnormal FP32
        # squares; together ~2**-117.7) and one normal 2**-120 * 2**-6 = 2**-126.
        # Flushed, the estimate drops to 2**-126 and the spread rho rises by ~4 bits.
        a = np.zeros((m, k))
        bt = np.zeros((p, k))
        a[:, 0] = 0.75
        a[:, 1:t + 1] = 2.0**-63.6
        a[:, t + 1] = 2.0**-60
        bt[:, 1:t + 1] = 0.75
        bt[:, t + 1] = 2.0**-3
        bt[:, -1] = 0.5
        return a * (1 + np.arange(m)[:, None] / 64), bt

    @pytest.mark.parametrize("split", ["hybrid", "bitmask", "rn"])
    def test_auto_counts_match_cpu(self, engine, split):
        # Before the fix the host stand-in picked 18 slices here, the CPU 17.
        from ozlinalg.engines.sgemm import SGEMMEngine
        from ozlinalg.ozaki.counts.slices import plan_slices, squared_products
        from ozlinalg.ozaki.params import slice_width

        a, bt = self._inputs()
        xa, _ = normalize_rows(np, a)
        xb, _ = normalize_rows(np, bt)
        sq = (xa * xa)[(xa != 0) & (xa * xa < 2.0**-126)]
        assert sq.size and sq.min() >= 2.0**-149
        width = slice_width(a.shape[1])
        cp = engine.xp
        dev = [cp.asarray(v) for v in (xa, xb, a, bt)]
        cpu = plan_slices(np, SGEMMEngine(threads=1), split, width, xa, xb, a, bt, 20, 48)
        gpu = plan_slices(cp, engine, split, width, *dev, 20, 48)
        assert cpu == gpu == (17, None)  # 3 bits from either neighbour: BF16 cannot tip it
        q_cpu, _ = squared_products(np, SGEMMEngine(threads=1), xa, xb)
        q_gpu, _ = squared_products(cp, engine, dev[0], dev[1])
        if isinstance(engine, HostEngine):  # the same FP32 numbers through the same SGEMM
            np.testing.assert_array_equal(to_numpy(q_gpu), q_cpu)
        else:  # BF16 tensor cores: inputs rounded to 8 bits, products within ~2**-7
            np.testing.assert_allclose(to_numpy(q_gpu), q_cpu, rtol=2.0**-6)


def test_native_getrf_keeps_cupys_singular_warning_quiet(monkeypatch):
    # cupyx.scipy.linalg.lu_factor (CuPy 14.2) warns "Diagonal number %d is exactly
    # zero. Singular matrix." as a plain RuntimeWarning; the CPU path never warns,
    # and the zero pivot is reported through info.
    import sys
    import types
    import warnings

    from ozlinalg.lapack._common import native_getrf

    cp = host_cupy()

    def lu_factor(a, check_finite=True):
        warnings.warn("Diagonal number 2 is exactly zero. Singular matrix.", RuntimeWarning,
                      stacklevel=2)
        lu = cp.asarray(np.asarray(a))
        lu[1, 1] = 0.0
        return lu, cp.asarray(np.array([0, 1], np.int32))

    for name in ("cupyx", "cupyx.scipy", "cupyx.scipy.linalg"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["cupyx.scipy.linalg"].lu_factor = lu_factor
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lu, piv, info = native_getrf(cp, cp.asarray(np.array([[1.0, 2.0], [2.0, 4.0]])))
    assert info == 2 and list(piv) == [0, 1]
