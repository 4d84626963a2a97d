"""pytest-benchmark: the emulated DGEMM against native FP64 GEMM.

One group per size; each holds native DGEMM (NumPy/BLAS on the host, cuBLAS
through CuPy on a GPU) and every emulation method on the same inputs.
``extra_info``: n, slices, method, device, effective GFLOPS (2 n^3 / time, as
if it were FP64) and the max / median relative error of the first rows
against the exact reference (python-flint).

Default size is small so ``pytest benchmarks --benchmark-disable`` is a quick
smoke test (the test run does this). Larger::

    OZLINALG_BENCH_MATMUL_SIZES=1024,2048 pytest benchmarks/suite/bench_matmul.py \\
        --benchmark-only --benchmark-json=bench.json

Environment: ``OZLINALG_BENCH_MATMUL_SIZES`` (default 160),
``OZLINALG_BENCH_SLICES`` (int or "auto", default auto), ``OZLINALG_BENCH_PHI``
(default 0.5), ``OZLINALG_BENCH_ROUNDS`` (default 3), ``OZLINALG_BENCH_ENGINES``
(NumPy engines, comma-separated: ``auto`` (default), ``onednn``, ``sgemm``, or
``all``). The engine (and its ISA) is in ``extra_info``.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest

import ozlinalg
from ozlinalg._array import cupy_or_none, to_numpy
from ozlinalg.testing import error_stats, random_matrix

SIZES = [int(s) for s in os.environ.get("OZLINALG_BENCH_MATMUL_SIZES", "160").split(",") if s]
_SL = os.environ.get("OZLINALG_BENCH_SLICES", "auto")
SLICES = _SL if _SL == "auto" else int(_SL)
PHI = float(os.environ.get("OZLINALG_BENCH_PHI", "0.5"))
ROUNDS = int(os.environ.get("OZLINALG_BENCH_ROUNDS", "3"))
CHECK_ROWS = 32
_ENG = os.environ.get("OZLINALG_BENCH_ENGINES", "auto")
ENGINES = ["sgemm", "onednn"] if _ENG == "all" else [e for e in _ENG.split(",") if e]


def _devices():
    cp = cupy_or_none()
    try:
        if cp is not None and cp.cuda.runtime.getDeviceCount() > 0:
            return ["cpu", "gpu"]
    except Exception:
        pass
    return ["cpu"]


@functools.cache
def problem(n):
    rng = np.random.default_rng([n, 7])
    a = random_matrix(rng, n, n, PHI)
    b = random_matrix(rng, n, n, PHI)
    try:
        from ozlinalg.testing import ExactReference

        ref = ExactReference(a[:CHECK_ROWS], b)
    except ImportError:
        ref = None
    return a, b, ref


def _xp(device):
    return cupy_or_none() if device == "gpu" else np


def _run(benchmark, device, fn, n, info):
    xp = _xp(device)
    if device == "gpu":
        def timed():
            out = fn()
            xp.cuda.Device().synchronize()
            return out
    else:
        timed = fn
    c = benchmark.pedantic(timed, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    _, _, ref = problem(n)
    if ref is not None:
        mx, med = error_stats(ref.relative_errors(to_numpy(c)[:CHECK_ROWS]))
        info.update(max_rel_err=mx, median_rel_err=med)
    stats = getattr(benchmark, "stats", None)
    if stats is not None and getattr(stats, "stats", None) is not None:
        info["gflops"] = 2.0 * n**3 / stats.stats.min / 1e9
    benchmark.extra_info.update(info)


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("n", SIZES)
def bench_native(benchmark, n, device):
    benchmark.group = f"matmul n={n} {device}"
    a, b, _ = problem(n)
    xp = _xp(device)
    da, db = xp.asarray(a), xp.asarray(b)
    _run(benchmark, device, lambda: xp.matmul(da, db), n,
         dict(n=n, method="native", slices=None, device=device))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("method", list(ozlinalg.METHODS))
@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("n", SIZES)
def bench_emulated(benchmark, n, device, method, engine):
    benchmark.group = f"matmul n={n} {device}"
    a, b, _ = problem(n)
    xp = _xp(device)
    da, db = xp.asarray(a), xp.asarray(b)
    with ozlinalg.options(engine=engine if device == "cpu" else None):
        with ozlinalg.profile() as prof:
            ozlinalg.matmul(da, db, method=method, slices=SLICES)
        _run(benchmark, device, lambda: ozlinalg.matmul(da, db, method=method, slices=SLICES),
             n, dict(n=n, method=method, slices=prof.slices[0], device=device,
                     engine=prof.calls[0].engine, int8_gemms=prof.int8_gemms))
