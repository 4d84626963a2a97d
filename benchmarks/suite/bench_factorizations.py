"""pytest-benchmark: blocked factorizations on the emulated GEMM vs native LAPACK.

One benchmark group per operation and size; each group holds the ozlinalg run
(``min_size=0``: trailing updates always emulated) and the native baseline
(SciPy/LAPACK on the host, cuSOLVER through CuPy on a GPU) on the same input.
``extra_info`` records n, slices, method, device, effective GFLOPS (the
operation's FP64 flop count / time) and the backward error, which every run
asserts is at most twice LAPACK's on the same matrix plus ``2 n u``.

Default sizes are small, so ``pytest benchmarks/suite/bench_factorizations.py
--benchmark-disable`` is a quick smoke test. Larger runs::

    OZLINALG_BENCH_SIZES=1024,2048 pytest benchmarks/suite/bench_factorizations.py \\
        --benchmark-group-by=group --benchmark-columns=mean,stddev,rounds

Environment: ``OZLINALG_BENCH_SIZES`` (comma-separated n, default 192),
``OZLINALG_BENCH_SLICES`` (int or "auto"), ``OZLINALG_BENCH_METHOD``,
``OZLINALG_BENCH_NB`` (block size; default 128, or n // 4 below n = 512),
``OZLINALG_BENCH_ROUNDS`` (default 3).
"""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import scipy.linalg as sla

import ozlinalg
from ozlinalg._array import cupy_or_none
from ozlinalg.lapack import geqrf, getrf, potrf, trsm

SIZES = [int(s) for s in os.environ.get("OZLINALG_BENCH_SIZES", "192").split(",") if s]
_SL = os.environ.get("OZLINALG_BENCH_SLICES", "auto")
SLICES = _SL if _SL == "auto" else int(_SL)
METHOD = os.environ.get("OZLINALG_BENCH_METHOD", "hybrid-ef")
ROUNDS = int(os.environ.get("OZLINALG_BENCH_ROUNDS", "3"))


def block_size(n):
    env = os.environ.get("OZLINALG_BENCH_NB")
    if env:
        return int(env)
    return 128 if n >= 512 else max(8, n // 4)


def _devices():
    devs = ["cpu"]
    cp = cupy_or_none()
    if cp is not None:
        try:
            if cp.cuda.runtime.getDeviceCount() > 0:
                devs.append("gpu")
        except Exception:
            pass
    return devs


DEVICES = _devices()
OPS = ["getrf", "potrf", "geqrf", "trsm"]

FLOPS = {
    "getrf": lambda n: 2.0 * n ** 3 / 3.0,
    "potrf": lambda n: n ** 3 / 3.0,
    "geqrf": lambda n: 4.0 * n ** 3 / 3.0,
    "trsm": lambda n: float(n) ** 3,  # n x n triangle, n right-hand sides
}


def _inputs(op, n, xp):
    rng = np.random.default_rng(n)
    if op == "potrf":
        g = rng.standard_normal((n, n))
        a = g @ g.T / n + np.eye(n)
    elif op == "trsm":
        a = np.tril(rng.standard_normal((n, n))) + 2 * np.sqrt(n) * np.eye(n)
    else:
        a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, n)) if op == "trsm" else None
    if xp is not np:
        a = xp.asarray(a)
        b = None if b is None else xp.asarray(b)
    return a, b


def _emulated(op, a, b, nb):
    kw = dict(block_size=nb, slices=SLICES, method=METHOD, min_size=0)
    if op == "getrf":
        return lambda: getrf(a, **kw)
    if op == "potrf":
        return lambda: potrf(a, lower=True, **kw)
    if op == "geqrf":
        return lambda: geqrf(a, **kw)
    return lambda: trsm(a, b, lower=True, **kw)


def _native(op, a, b, xp):
    if xp is np:
        return {
            "getrf": lambda: sla.lu_factor(a, check_finite=False),
            "potrf": lambda: sla.cholesky(a, lower=True, check_finite=False),
            "geqrf": lambda: sla.lapack.dgeqrf(a)[:2],
            "trsm": lambda: sla.solve_triangular(a, b, lower=True, check_finite=False),
        }[op]
    import cupyx.scipy.linalg as csla  # cuSOLVER / cuBLAS baselines

    return {
        "getrf": lambda: csla.lu_factor(a, check_finite=False),
        "potrf": lambda: xp.linalg.cholesky(a),
        # raw mode stores the transpose of LAPACK's layout (a view back)
        "geqrf": lambda: (lambda h: (h[0].T, h[1]))(xp.linalg.qr(a, mode="raw")),
        "trsm": lambda: csla.solve_triangular(a, b, lower=True, check_finite=False),
    }[op]


def _backward_error(op, a, b, out):
    """Normwise backward error of the result (host arithmetic)."""
    a = np.asarray(a.get() if hasattr(a, "get") else a)
    n = a.shape[0]

    def h(x):
        return np.asarray(x.get() if hasattr(x, "get") else x)

    nrm = lambda x: np.linalg.norm(x, 1)  # noqa: E731
    if op == "getrf":
        lu, piv = (h(x) for x in out)
        pa = a.copy()
        for i, p in enumerate(piv):
            pa[[i, p]] = pa[[p, i]]
        return nrm(pa - (np.tril(lu, -1) + np.eye(n)) @ np.triu(lu)) / nrm(a)
    if op == "potrf":
        c = h(out)
        return nrm(a - c @ c.T) / nrm(a)
    if op == "geqrf":
        qr, tau = (h(x) for x in out)
        q = sla.lapack.dorgqr(qr, tau)[0]
        return nrm(a - q @ np.triu(qr)) / nrm(a)
    x = h(out)
    bb = h(b)
    return nrm(a @ x - bb) / (nrm(a) * nrm(x) + nrm(bb))


@functools.cache
def _lapack_backward_error(op, n):
    """``_backward_error`` of SciPy's LAPACK on the same (host) input: the reference
    every run is held to. Computed once per (op, n), outside any timed call."""
    a, b = _inputs(op, n, np)
    return _backward_error(op, a, b, _native(op, a, b, np)())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["ozlinalg", "native"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", OPS)
def test_factorization(benchmark, op, n, impl, device):
    if device == "gpu":
        pytest.importorskip("cupy")
        import cupy as xp

        sync = xp.cuda.get_current_stream().synchronize
    else:
        xp = np
        sync = None
    a, b = _inputs(op, n, xp)
    nb = block_size(n)
    fn = _emulated(op, a, b, nb) if impl == "ozlinalg" else _native(op, a, b, xp)

    def run():
        out = fn()
        if sync is not None:
            sync()
        return out

    benchmark.group = f"{op} n={n} {device}"
    if impl == "ozlinalg":
        with ozlinalg.profile() as prof:
            out = benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=0)
        share = prof.emulated_flop_share
        used = sorted(set(prof.slices))
    else:
        out = benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=0)
        share, used = 0.0, []
    err = _backward_error(op, a, b, out)
    stats = getattr(benchmark, "stats", None)
    mean = stats.stats.mean if stats is not None and getattr(stats, "stats", None) else None
    benchmark.extra_info.update(
        n=n,
        op=op,
        impl=impl,
        device=device,
        slices=used if impl == "ozlinalg" else None,
        method=METHOD if impl == "ozlinalg" else "fp64",
        block_size=nb if impl == "ozlinalg" else None,
        emulated_flop_share=share,
        backward_error=float(err),
        gflops=(FLOPS[op](n) / mean / 1e9) if mean else None,
    )
    # Backward stable as LAPACK is on this very matrix: at most twice its backward
    # error, plus 2 n u. The margin is for the case where LAPACK's error happens to
    # lie far below n u (trsm's is ~1e-17 at n = 192): both errors are measured by
    # an FP64 residual whose own rounding is of order gamma_n, one for each
    # measurement. (The worst-case bound of that rounding, gamma_n |L||U| for LU, is
    # the a priori backward error bound itself and would make the check no sharper
    # than the textbook one.)
    ref = _lapack_backward_error(op, n)
    tol = 2 * ref + 2 * n * 2.0**-53
    assert np.isfinite(err) and err <= tol, (
        f"{impl} {op} n={n}: backward error {err:.3g} > {tol:.3g} (LAPACK's {ref:.3g})")
