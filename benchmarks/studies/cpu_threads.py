"""How the oneDNN engine's threads and OpenBLAS's share the cores: the measurements of
docs/performance.md ("Threads").

1. One n x n x n INT8 GEMM on the engine: alone; right after a NumPy DGEMM
   (OpenBLAS's worker threads still spinning: ``OPENBLAS_THREAD_TIMEOUT``);
   right after a DGEMM run with one BLAS thread (threadpoolctl: no worker woke).
2. A factorization (getrf / potrf / geqrf, default settings) on the oneDNN
   engine with its panels on one BLAS thread (``native_blas_threads = 1``, the
   default) and on all BLAS threads (``None``), LAPACK beside them.

Wall clock, best of ``--repeat``: take it on a quiet machine (the load is
printed). Usage::

    python benchmarks/studies/cpu_threads.py --n 2048 --fact-n 4096
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import scipy.linalg as sla
from threadpoolctl import threadpool_limits

import ozlinalg
from ozlinalg.engines.select import cpu_engine


def gemm_after(eng, a8, ws, before, repeat):
    best = float("inf")
    for _ in range(repeat):
        before()
        t = time.perf_counter()
        eng.int_matmul_sum(a8, a8, [(0, 0)], 128, 128, ws=ws)
        best = min(best, time.perf_counter() - t)
        time.sleep(0.3)  # let spinning workers time out between samples
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--fact-n", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    eng = cpu_engine("onednn")
    print(f"engine: {eng.describe()}; load {os.getloadavg()[0]:.2f}")
    n = args.n
    rng = np.random.default_rng(0)
    a8 = eng.empty_slices(1, n, n, "bitmask")
    a8[...] = rng.integers(-128, 128, a8.shape)
    ws = eng.workspace(n, n)
    x = rng.standard_normal((512, 512))
    eng.int_matmul_sum(a8, a8, [(0, 0)], 128, 128, ws=ws)
    alone = gemm_after(eng, a8, ws, lambda: time.sleep(0.2), args.repeat)
    spun = gemm_after(eng, a8, ws, lambda: x @ x, args.repeat)

    def one_thread_dgemm():
        with threadpool_limits(1, user_api="blas"):
            x @ x

    calm = gemm_after(eng, a8, ws, one_thread_dgemm, args.repeat)
    print(f"INT8 GEMM n={n}: alone {alone * 1e3:.1f} ms; right after a 2-thread DGEMM "
          f"{spun * 1e3:.1f} ms ({spun / alone:.2f}x); after a 1-thread DGEMM "
          f"{calm * 1e3:.1f} ms ({calm / alone:.2f}x)")

    m = args.fact_n
    g = rng.standard_normal((m, m))
    spd = g @ g.T + m * np.eye(m)
    ops = {"getrf": (lambda: ozlinalg.lapack.getrf(g), lambda: sla.lu_factor(g)),
           "potrf": (lambda: ozlinalg.lapack.potrf(spd), lambda: sla.cholesky(spd)),
           "geqrf": (lambda: ozlinalg.lapack.geqrf(g), lambda: sla.qr(g, mode="raw"))}
    saved = eng.native_blas_threads
    try:
        with ozlinalg.options(engine="onednn"):
            for name, (emul, native) in ops.items():
                res = {}
                for setting in (1, None):
                    eng.native_blas_threads = setting
                    emul()
                    best = float("inf")
                    for _ in range(max(1, args.repeat // 2)):
                        t = time.perf_counter()
                        emul()
                        best = min(best, time.perf_counter() - t)
                    res[setting] = best
                t = time.perf_counter()
                native()
                tn = time.perf_counter() - t
                print(f"{name} n={m}: panels on 1 BLAS thread {res[1]:.3f} s, on all "
                      f"{res[None]:.3f} s ({res[None] / res[1]:.2f}x); LAPACK {tn:.3f} s; "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        eng.native_blas_threads = saved


if __name__ == "__main__":
    main()
