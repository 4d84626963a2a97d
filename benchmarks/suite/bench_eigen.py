"""pytest-benchmark: eigh and svd on the emulated GEMM against LAPACK dsyevd / dgesdd.

One group per operation and size; each holds the ozlinalg run
(:func:`ozlinalg.linalg.eigh` / :func:`ozlinalg.linalg.svd`: a float32 LAPACK start
refined by Ogita-Aishima steps whose products are emulated, docs/eigen.md) and the
native baseline (``scipy.linalg.eigh(driver="evd")``, ``scipy.linalg.svd(
lapack_driver="gesdd")``) on the same input: a random symmetric matrix for eigh, a
random square one for svd.

Each test ASSERTS its accuracy against the LAPACK result of the same run:

* eigh: residual ``||A V - V diag(w)||_F / ||A||_F`` and orthogonality
  ``||V^T V - I||_F``;
* svd: residual ``||A - U diag(s) V^T||_F / ||A||_F``, ``||U^T U - I||_F`` and
  ``||V^T V - I||_F``;

each at most ``2 x`` LAPACK's ``+ sqrt(n) eps`` (see ``floor``). Each metric is ONE
product of concatenated exact operands (``[A, V] [V; -diag(w)]``, ``[V^T, I] [V; -I]``,
``[A, -hi, -lo] [I; V^T; V^T]`` with ``U diag(s) = hi + lo`` exactly), on the emulated
GEMM with a fixed 16 slices (``CHECK_SLICES``: about twice the DGEMM-level count, an
error far below the result's rounding), so that DGEMM's own rounding of ``A V``
does not blur the metric: the norms agree with those of the faithfully rounded
products (``accuracy="faithful"``, benchmarks/studies/eigen_accuracy.py) to 1e-6
relative at n = 256 and 512, at a sixth of their cost. A decomposition that fell
back to LAPACK's double precision (``"lapack fallback"`` in the profile's
``native_calls``) fails the test: its time would not be the emulation's.

``extra_info`` of the emulated runs: the metrics and LAPACK's, the refinement steps
(the n x n x n products over 4 for eigh, 6 for svd), and the time floor: those
products' count x the time of one emulated n x n x n product (the matrix times the
result's vectors) timed on the benchmark's clock in the same test.

The default size (256, one round) is a quick smoke test of ``python -m pytest -q``
(about 3 s of one core's CPU time on a Zen 2 core with the SGEMM engine). The
headline sizes are opt-in (sizes above 256 are also marked ``slow``, so
``-m "not slow"`` drops them from a mixed run); one core's CPU time::

    OZLINALG_BENCH_EIGEN_SIZES=256,512,1024,2048 OZLINALG_BENCH_THREADS=1 \\
        python -m pytest benchmarks/suite/bench_eigen.py --benchmark-only \\
        --benchmark-timer=time.process_time --benchmark-json=bench.json
    python benchmarks/suite/render_table.py bench.json

Environment: ``OZLINALG_BENCH_EIGEN_SIZES`` (comma-separated n, default 256),
``OZLINALG_BENCH_ROUNDS`` (default 3 where ``OZLINALG_BENCH_EIGEN_SIZES`` is set,
else 1; 1 is enough at 2048, where one emulated eigh takes minutes on a 2-core AVX2
CPU), ``OZLINALG_BENCH_THREADS`` (BLAS and engine threads during the timed calls;
default: the library's). At n = 2048 the accuracy metrics (five 16-slice products of
up to 2048 x 6144 x 2048 per operation, for both results) take minutes as well.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import time

import numpy as np
import pytest
import scipy.linalg as sla

import ozlinalg
from ozlinalg.linalg import eigh, svd

SIZES = [int(s) for s in os.environ.get("OZLINALG_BENCH_EIGEN_SIZES", "256").split(",") if s]
#: 3 rounds where sizes are asked for; the default run's smoke test times one
ROUNDS = int(os.environ.get("OZLINALG_BENCH_ROUNDS",
                            "3" if "OZLINALG_BENCH_EIGEN_SIZES" in os.environ else "1"))
THREADS = int(os.environ.get("OZLINALG_BENCH_THREADS", "0")) or None
SMOKE = 256  # the largest size of the default test run
EPS = 2.0**-52
CHECK_SLICES = 16
FALLBACK = "lapack fallback"  # ozlinalg.linalg._spectral.FALLBACK
#: FP64 flop counts of LAPACK's drivers with vectors (effective GFLOPS)
FLOPS = {"eigh": lambda n: 9.0 * n**3, "svd": lambda n: 22.0 * n**3}


def floor(n):
    """The accuracy floor of a double result: an exactly orthogonal V rounded entry
    by entry to double (relative error <= u = eps/2 per entry) is off by
    ``||dV||_F <= u sqrt(n)`` (its n columns have norm 1), so ``||V^T V - I||_F`` is up to
    ``2 u sqrt(n) = sqrt(n) eps`` and the residual ``||A dV||_F / ||A||_F`` up to
    ``sqrt(n) u``. Where LAPACK's own metric is below that (small n), "2x LAPACK"
    would ask the emulation to beat the rounding of its own output."""
    return math.sqrt(n) * EPS


def _params(sizes):
    return [pytest.param(n, marks=pytest.mark.slow) if n > SMOKE else n for n in sizes]


@contextlib.contextmanager
def _threads():
    """``OZLINALG_BENCH_THREADS`` for BLAS and the engine's passes, restored after."""
    if THREADS is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    eng = ozlinalg.engines.get_engine(np)
    old = eng.threads
    kernels = getattr(eng, "kernels", None)
    with threadpool_limits(THREADS):
        eng.threads = THREADS
        if kernels is not None:
            kernels.set_threads(THREADS)
        try:
            yield
        finally:
            eng.threads = old
            if kernels is not None and old:
                kernels.set_threads(old)


@functools.cache
def problem(op, n):
    rng = np.random.default_rng([n, 2026, op == "svd"])
    g = rng.standard_normal((n, n))
    return (g + g.T) / 2 if op == "eigh" else g


# ----------------------------------------------------------------- metrics


def _fmm(a, b):
    """One product accurate far beyond DGEMM (the metrics' cancellation is exact)."""
    return ozlinalg.matmul(a, b, slices=CHECK_SLICES)


def _orth(v):
    """``||V^T V - I||_F``: ``[V^T, I] [V; -I]`` in one product."""
    eye = np.eye(v.shape[1])
    return float(np.linalg.norm(_fmm(np.hstack([v.T, eye]), np.vstack([v, -eye]))))


def _two_prod(x, y):
    """``x * y = p + e`` exactly (Dekker's TwoProduct, Veltkamp's split)."""
    def split(a):
        c = 134217729.0 * a
        hi = c - (c - a)
        return hi, a - hi

    p = x * y
    xh, xl = split(x)
    yh, yl = split(y)
    return p, ((xh * yh - p) + xh * yl + xl * yh) + xl * yl


def metrics(op, a, out):
    """The accuracy metrics of a result ``out`` of `op` on `a` (dict)."""
    nrm = float(np.linalg.norm(a))
    if op == "eigh":
        w, v = out
        res = _fmm(np.hstack([a, v]), np.vstack([v, np.diag(-w)]))  # A V - V diag(w)
        return {"residual": float(np.linalg.norm(res)) / nrm, "orth_v": _orth(v)}
    u, s, vh = out
    hi, lo = _two_prod(u, s[None, :])  # U diag(s), exactly
    eye = np.eye(a.shape[1])
    res = _fmm(np.hstack([a, -hi, -lo]), np.vstack([eye, vh, vh]))  # A - U diag(s) V^T
    return {"residual": float(np.linalg.norm(res)) / nrm, "orth_u": _orth(u),
            "orth_v": _orth(vh.T)}


def _native(op, a):
    if op == "eigh":
        return lambda: sla.eigh(a, driver="evd", check_finite=False)
    return lambda: sla.svd(a, lapack_driver="gesdd", check_finite=False)


def _emulated(op, a):
    return (lambda: eigh(a, check_finite=False)) if op == "eigh" else \
        (lambda: svd(a, check_finite=False))


_LAPACK = {}  # (op, n) -> LAPACK's metrics, from bench_native where it ran first


def lapack_metrics(op, n):
    """LAPACK's metrics on the same input (computed once per op and size)."""
    if (op, n) not in _LAPACK:
        a = problem(op, n)
        _LAPACK[op, n] = metrics(op, a, _native(op, a)())
    return _LAPACK[op, n]


def _record(benchmark, op, n, impl, m, **more):
    stats = getattr(benchmark, "stats", None)
    best = stats.stats.min if stats is not None and getattr(stats, "stats", None) else None
    benchmark.extra_info.update(
        n=n, op=op, impl=impl, method="native" if impl == "native" else impl, threads=THREADS,
        gflops=(FLOPS[op](n) / best / 1e9) if best else None, **m, **more)


@pytest.mark.parametrize("n", _params(SIZES))
@pytest.mark.parametrize("op", ["eigh", "svd"])
def bench_native(benchmark, op, n):
    benchmark.group = f"{op} n={n} cpu"
    a = problem(op, n)
    with _threads():
        out = benchmark.pedantic(_native(op, a), rounds=ROUNDS, iterations=1, warmup_rounds=0)
    m = _LAPACK[op, n] = metrics(op, a, out)
    _record(benchmark, op, n, "native", m, floor=floor(n))
    assert all(np.isfinite(x) for x in m.values())


@pytest.mark.parametrize("n", _params(SIZES))
@pytest.mark.parametrize("op", ["eigh", "svd"])
def bench_emulated(benchmark, op, n):
    benchmark.group = f"{op} n={n} cpu"
    a = problem(op, n)
    fn = _emulated(op, a)
    with _threads():
        _emulated(op, problem(op, 32))()  # first use (engine set-up) outside the timing
        with ozlinalg.profile() as prof:
            out = benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=0)
        # the time floor: one emulated n x n x n product of the kind the steps make
        vec = out[1] if op == "eigh" else out[2].T
        clock = getattr(benchmark, "_timer", time.perf_counter)
        t_prod = float("inf")
        for _ in range(2):
            t0 = clock()
            ozlinalg.matmul(a, vec)
            t_prod = min(t_prod, clock() - t0)
    runs = max(1, ROUNDS)
    m = metrics(op, a, out)
    ref = lapack_metrics(op, n)
    per_step = 4 if op == "eigh" else 6
    full = sum(1 for c in prof.calls if c.shape == (n, n, n)) / runs
    _record(benchmark, op, n, "ozlinalg", m,
            lapack={k: ref[k] for k in m}, floor=floor(n),
            product_time=t_prod, time_floor=full * t_prod,
            emulated_gemm_calls=prof.emulated_gemm_calls / runs, steps=full / per_step,
            native_calls={k: v / runs for k, v in prof.native_calls.items()},
            engine=next(iter(prof.engines), ""),
            fallback=bool(prof.native_calls.get(FALLBACK)))
    assert not prof.native_calls.get(FALLBACK), (
        f"{op} n={n}: the refinement did not converge, LAPACK's double precision ran")
    for k, x in m.items():
        assert x <= 2.0 * ref[k] + floor(n), (
            f"{op} n={n}: {k} {x:.2e} above 2 x LAPACK's {ref[k]:.2e} + sqrt(n) eps "
            f"{floor(n):.2e}")
