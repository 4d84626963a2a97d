"""What only a GPU can run: CuPy's ElementwiseKernel (the EF axpy), the GemmEx
paths (SplitFP, the BF16 estimate) and ``ozlinalg.matmul`` on CuPy arrays.

Every test here is marked ``gpu``: skipped without CuPy and a CUDA device
(tests/conftest.py). The engine's INT8 GEMM bookkeeping and the RawKernel
sources are tested in tests/engines/test_engine_cublaslt.py, on a host emulation in
every run and with the same bodies on the GPU. NOT YET RUN ON A GPU when
written; run with ``python -m pytest -m gpu tests -q``.
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
    from ozlinalg.engines.cublaslt import CublasLtEngine

    eng = get_engine(cp)
    assert isinstance(eng, CublasLtEngine)
    return eng


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
    # Integers in +-256 (exact in FP16): every partial sum is below
    # 70 * 2**16 < 2**24, an exact FP32 integer in any summation order, so the
    # tensor cores' FP32 accumulation must give the exact product.
    eng = _engine()
    a = (rng.integers(-256, 257, size=(33, 70))).astype(np.float16)
    b = (rng.integers(-256, 257, size=(21, 70))).astype(np.float16)
    a[0], b[0] = 256, -256  # the extremes: |sum| = 70 * 2**16
    c = eng.float_matmul(cp.asarray(a), cp.asarray(b))
    assert c.dtype == cp.float32
    assert "float16 GemmEx" not in eng.fallbacks, eng.fallbacks
    want = a.astype(np.int64) @ b.astype(np.int64).T
    np.testing.assert_array_equal(cp.asnumpy(c).astype(np.int64), want)


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
        # (tests/engines/test_engine_cublaslt.py shows it for the engine on emulated cuBLASLt).
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
    a = rng.random((64, 300))
    b = rng.random((48, 300))
    a[0, :] = 2.0**-70  # products 2**-140: subnormal in FP32, kept by the 2**48 prescale
    b[0, :] = 2.0**-70
    a[1, :] = 2.0**-135  # float64 entries below FP32's normal range: a cast before the
    b[1, :] = 0.5  # prescale would flush them (CuPy's kernels are -ftz=true)
    q = cp.asnumpy(eng.approx_matmul(cp.asarray(a), cp.asarray(b)))
    want = a @ b.T
    assert "approx BF16 GemmEx" not in eng.fallbacks, eng.fallbacks
    assert q.dtype == np.float64
    np.testing.assert_allclose(q, want, rtol=2.0**-6)  # BF16 inputs: products within ~2**-7
    assert q[0, 0] > 0 and q[1, 1] > 0

