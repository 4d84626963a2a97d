"""GPU engine and fused kernels, each against the generic array code / the CPU.

Every test here is marked ``gpu``: skipped without CuPy and a CUDA device
(tests/conftest.py). NOT YET RUN ON A GPU when written; run with
``python -m pytest -m gpu tests -q``.
"""
import numpy as np
import pytest

import ozlinalg
from ozlinalg._array import cupy_or_none
from ozlinalg.ozaki.split import normalize_rows, split_rows
from ozlinalg.testing import random_matrix

pytestmark = pytest.mark.gpu

cp = cupy_or_none()


def _engine():
    from ozlinalg.engines import get_engine
    from ozlinalg.engines.cublaslt import CuPyEngine

    eng = get_engine(cp)
    assert isinstance(eng, CuPyEngine)
    return eng


def _int_slices(rng, s, rows, k, bound):
    return rng.integers(-bound, bound + 1, size=(s, rows, k), dtype=np.int64).astype(np.int8)


def _exact_sum(a, b, pairs):
    a64 = a.astype(np.int64)
    b64 = b.astype(np.int64)
    return sum(a64[i] @ b64[j].T for i, j in pairs)


@pytest.mark.parametrize("m, p, k", [(128, 64, 256), (37, 29, 50), (5, 3, 1), (64, 130, 1000)])
def test_int_matmul_sum_exact(rng, m, p, k):
    eng = _engine()
    a = _int_slices(rng, 3, m, k, 127)
    b = _int_slices(rng, 3, p, k, 127)
    pairs = [(0, 2), (1, 1), (2, 0)]
    da, db = cp.asarray(a), cp.asarray(b)
    out, calls = eng.int_matmul_sum(da, db, pairs, 127, 127, ws=eng.workspace(m, p))
    assert calls >= len(pairs)
    np.testing.assert_array_equal(cp.asnumpy(out).astype(np.int64), _exact_sum(a, b, pairs))


def test_int_matmul_extreme_values_exact(rng):
    # -128 * -128 everywhere: the worst case of the CRT bound GEMM, k near 2**17.
    eng = _engine()
    m, p, k = 8, 12, (1 << 17) - 1024
    a = np.full((1, m, k), -128, np.int8)
    b = np.full((1, p, k), -128, np.int8)
    out, _ = eng.int_matmul_sum(cp.asarray(a), cp.asarray(b), [(0, 0)], 128, 128)
    assert int(cp.asnumpy(out).min()) == int(cp.asnumpy(out).max()) == k * 128 * 128


def test_int_matmul_runs_split_into_int64(rng):
    # Claimed bounds so large that every 16-long piece is its own run: exercises
    # the strided sub-range plans and the int64 flush.
    eng = _engine()
    a = _int_slices(rng, 2, 24, 100, 127)
    b = _int_slices(rng, 2, 20, 100, 127)
    pairs = [(0, 1), (1, 0)]
    out, calls = eng.int_matmul_sum(cp.asarray(a), cp.asarray(b), pairs, 1 << 15, 1 << 15)
    assert out.dtype == cp.int64
    assert calls == 2 * 7  # k_pad = 112 = 7 pieces of 16
    np.testing.assert_array_equal(cp.asnumpy(out), _exact_sum(a, b, pairs))


def test_int_matmul_strided_slice_views(rng):
    # Views of a bigger array (what a caller might pass): copied and padded.
    eng = _engine()
    a = _int_slices(rng, 2, 40, 80, 64)
    b = _int_slices(rng, 2, 33, 80, 64)
    da = cp.asarray(a)[:, 3:35, 7:71]
    db = cp.asarray(b)[:, :, 7:71]
    out, _ = eng.int_matmul_sum(da, db, [(1, 0)], 64, 64)
    np.testing.assert_array_equal(cp.asnumpy(out).astype(np.int64),
                                  _exact_sum(a[:, 3:35, 7:71], b[:, :, 7:71], [(1, 0)]))


@pytest.mark.parametrize("xdtype", ["int32", "int64", "float64"])
@pytest.mark.parametrize("alpha", [1.0, 2.0**-21, 0.1234567890123])
def test_axpy_kernel_matches_generic(rng, xdtype, alpha):
    from ozlinalg.engines._cuda_kernels import axpy_into

    x = cp.asarray(rng.integers(-2**30, 2**30, size=(70, 50)).astype(xdtype))
    acc = cp.asarray(rng.standard_normal((70, 50)))
    want = acc.copy()
    want += alpha * x  # the generic code
    axpy_into(alpha, x, acc)
    assert bool((acc == want).all())


def test_axpy_kernel_strided_view(rng):
    from ozlinalg.engines._cuda_kernels import axpy_into

    full = cp.asarray(rng.integers(-1000, 1000, size=(30, 44)).astype(np.int32))
    x = full[:, :41]
    acc = cp.zeros((30, 41))
    axpy_into(2.0**-7, x, acc)
    assert bool((acc == x.astype(cp.float64) * 2.0**-7).all())


@pytest.mark.parametrize("s", [1, 5, 9])
@pytest.mark.parametrize("phi", [0.5, 4.0])
def test_hybrid_split_fused_matches_generic(rng, s, phi):
    from ozlinalg.engines._cuda_kernels import hybrid_split_fused
    from ozlinalg.ozaki.params import slice_width

    a = random_matrix(rng, 45, 333, phi)
    a[3] = 0.0  # a zero row
    a[5, ::2] = 0.0
    width = slice_width(333)
    x, _ = normalize_rows(cp, cp.asarray(a))
    x2 = x.copy()
    out_f = cp.empty((s, 45, 333), cp.int8)
    sc_f = cp.empty((s, 45))
    assert hybrid_split_fused(x, s, width, out_f, sc_f)
    out_g = cp.empty((s, 45, 333), cp.int8)
    sc_g = cp.empty((s, 45))
    split_rows(cp, "hybrid", x2, s, width, out_g, sc_g)
    assert bool((out_f == out_g).all())
    assert bool((sc_f == sc_g).all())


def test_hybrid_split_fused_declines_noncontiguous(rng):
    from ozlinalg.engines._cuda_kernels import hybrid_split_fused

    x = cp.asarray(rng.random((10, 20)) - 0.5)[:, ::2]
    out = cp.empty((3, 10, 10), cp.int8)
    assert not hybrid_split_fused(x, 3, 7, out, cp.empty((3, 10)))


def test_engine_split_rows_hook(rng):
    eng = _engine()
    x, _ = normalize_rows(cp, cp.asarray(random_matrix(rng, 16, 64, 1.0)))
    out = eng.empty_slices(4, 16, 64, "hybrid")
    sc = cp.empty((4, 16))
    eng.split_rows("hybrid", x.copy(), 4, 7, out, sc)
    out_g = cp.empty_like(out)
    sc_g = cp.empty((4, 16))
    split_rows(cp, "hybrid", x.copy(), 4, 7, out_g, sc_g)
    assert bool((out == out_g).all()) and bool((sc == sc_g).all())


def test_float_matmul_fp16_inputs_fp32_accumulation(rng):
    eng = _engine()
    a = (rng.integers(-2048, 2049, size=(33, 70))).astype(np.float16)
    b = (rng.integers(-2048, 2049, size=(21, 70))).astype(np.float16)
    c = eng.float_matmul(cp.asarray(a), cp.asarray(b))
    assert c.dtype == cp.float32
    want = a.astype(np.float64) @ b.astype(np.float64).T  # |sum| < 2**29: FP32 rounds
    np.testing.assert_allclose(cp.asnumpy(c), want, rtol=2**-22, atol=0)


@pytest.mark.parametrize("method, slices", [
    ("hybrid-ef", 8), ("bitmask-ef", 9), ("bitmask", 7), ("rn", 7), ("crt", 14),
    ("crt-fast", 15), ("splitfp", 6), ("hybrid-ef", "auto"),
])
def test_matmul_gpu_matches_cpu(rng, method, slices):
    a = random_matrix(rng, 96, 200, 1.0)
    b = random_matrix(rng, 200, 80, 1.0)
    c_cpu = ozlinalg.matmul(a, b, method=method, slices=slices)
    c_gpu = ozlinalg.matmul(cp.asarray(a), cp.asarray(b), method=method, slices=slices)
    assert isinstance(c_gpu, cp.ndarray)
    c_gpu = cp.asnumpy(c_gpu)
    if method in ("hybrid-ef", "bitmask-ef", "bitmask", "rn") and slices != "auto":
        # Same IEEE operations on the same splits, exact integer products: bit-identical
        # (tests/test_gpu_engine_host.py shows it for the engine on emulated cuBLASLt).
        np.testing.assert_array_equal(c_gpu, c_cpu)
        return
    scale = np.abs(a) @ np.abs(b)
    # SplitFP's FP32 sums run in another order; CuPy's log2 (crt's shifts) and the
    # BF16 estimate of 'auto' may round differently from NumPy's.
    np.testing.assert_allclose(c_gpu, c_cpu, rtol=0, atol=float(1e-14 * scale.max()))


def test_matmul_gpu_nonfinite_and_odd_shapes(rng):
    a = random_matrix(rng, 7, 13, 0.5)
    b = random_matrix(rng, 13, 5, 0.5)
    a[2, 3] = np.inf
    b[4, 1] = np.nan
    c = cp.asnumpy(ozlinalg.matmul(cp.asarray(a), cp.asarray(b)))
    want = a @ b
    np.testing.assert_array_equal(np.isnan(c), np.isnan(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(c[fin], want[fin], rtol=1e-12)


def test_approx_matmul_bf16_estimate(rng):
    # slices="auto"'s magnitude estimate on BF16 tensor cores: a few bits, full range.
    eng = _engine()
    a = rng.random((64, 300)).astype(np.float32)
    b = rng.random((48, 300)).astype(np.float32)
    a[0, :] = 2.0**-70  # products 2**-140: subnormal in FP32, kept by the 2**48 prescale
    b[0, :] = 2.0**-70
    q = cp.asnumpy(eng.approx_matmul(cp.asarray(a), cp.asarray(b)))
    want = a.astype(np.float64) @ b.astype(np.float64).T
    assert "approx BF16 GemmEx" not in eng.fallbacks, eng.fallbacks
    assert q.dtype == np.float64
    np.testing.assert_allclose(q, want, rtol=2.0**-7)
    assert q[0, 0] > 0


@pytest.mark.parametrize("nmod", [7, 16, 32])
def test_crt_fused_accumulator_matches_generic(rng, nmod):
    from ozlinalg.engines._cuda_kernels import CRTFusedAccumulator
    from ozlinalg.engines.base import Engine
    from ozlinalg.ozaki.crt import CRTAccumulator, crt_constants

    consts = crt_constants(nmod)
    generic = CRTAccumulator(np, Engine(), consts)
    fused = CRTFusedAccumulator(cp, consts)
    full = cp.empty((23, 40), cp.int32)
    for t in range(nmod):
        prod = rng.integers(-(2**31) + 1, 2**31, size=(23, 37))
        full[:, :37] = cp.asarray(prod)
        generic.add(t, prod.astype(np.float64))
        fused.add(t, full[:, :37])
    np.testing.assert_array_equal(cp.asnumpy(fused.result()), generic.result())


@pytest.mark.parametrize("bits", [20, 53, 127])
def test_crt_residues_fused_matches_generic(rng, bits):
    from ozlinalg.engines._cuda_kernels import crt_residues_fused
    from ozlinalg.ozaki.crt import MODULI, residues_into

    mods = MODULI[:16]
    x = rng.uniform(-1, 1, size=(9, 31))
    shift = rng.integers(max(0, bits - 8), bits, size=9).astype(np.float64)
    mult = np.ldexp(np.ones(9), shift.astype(np.int32))
    round_rows = rng.random(9) < 0.5
    v = x * mult[:, None]
    want = np.empty((16, 9, 31), np.int8)
    residues_into(np, np.where(round_rows[:, None], np.rint(v), np.trunc(v)), mods, bits, want)
    got = cp.empty((16, 9, 31), cp.int8)
    assert crt_residues_fused(cp.asarray(x), cp.asarray(mult), cp.asarray(round_rows), mods,
                              bits, got)
    np.testing.assert_array_equal(cp.asnumpy(got), want)


@pytest.mark.parametrize("k, bound, per_gemm", [(200, 127, 9), (1000, 127, 9), (100, 2**11, 5)])
def test_ef_group_is_one_gemm(rng, k, bound, per_gemm):
    # Grouped slice storage: a group's 9 products in one GEMM (or INT32-sized runs).
    eng = _engine()
    s, m, p, g = 9, 20, 13, 8
    da = eng.empty_slices(s, m, k, "hybrid", "a")
    db = eng.empty_slices(s, p, k, "hybrid", "b")
    a = _int_slices(rng, s, m, k, 127)
    b = _int_slices(rng, s, p, k, 127)
    da[...] = cp.asarray(a)
    db[...] = cp.asarray(b)
    pairs = [(i, g - i) for i in range(g + 1)]
    before = eng.launches
    out, calls = eng.int_matmul_sum(da, db, pairs, bound, bound)
    assert calls == -(-len(pairs) // per_gemm) == eng.launches - before
    np.testing.assert_array_equal(cp.asnumpy(out).astype(np.int64), _exact_sum(a, b, pairs))
