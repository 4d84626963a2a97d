"""Measure an engine's crossovers: the order from which emulation is as fast as native FP64.

Usage::

    python benchmarks/calibration/crossover.py [--sizes 128 256 512 1024 2048]
        [--ops matmul getrf potrf geqrf] [--reps 3] [--device cpu|gpu] [--json out.json]

For each operation and order n it times, on the same inputs and in the same
run, the native FP64 routine and what ``ozlinalg.backend()`` runs when it
routes a call (``strategy="eager", min_size=0``):

========  ==================================  ====================================
op        native                              emulated (ozlinalg)
========  ==================================  ====================================
matmul    ``a @ b`` (BLAS DGEMM / cuBLAS)     ``ozlinalg.matmul(a, b)``
getrf     ``scipy.linalg.lu_factor``          ``ozlinalg.linalg.lu_factor``
potrf     ``scipy.linalg.cholesky``           ``ozlinalg.linalg.cholesky``
geqrf     ``scipy.linalg.qr(mode="r")``       ``ozlinalg.linalg.qr(mode="r")``
========  ==================================  ====================================

On the host each side gets the best of its BLAS using all threads and one
thread (a shared 2-core machine can make multithreaded BLAS slower than
one thread on small orders). (On the GPU: CuPy's matmul, ``cupyx.scipy.linalg.lu_factor``,
``cupy.linalg.cholesky``, ``cupy.linalg.qr(mode="r")``). It prints a markdown
table of best-of-``reps`` times (after one warm-up call) and their ratio, and the crossover of each
operation: the smallest measured order from which the ratio stays <= 1 up to
the largest measured order, or ``None`` (never) when the largest order is
still slower. Paste the printed dict into the engine's ``crossovers``
(:meth:`ozlinalg.engines.Engine.crossover`), with this command and the date.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

import ozlinalg
from ozlinalg.engines.base import CROSSOVER_OPS, get_engine


def _native_funcs(xp):
    orig = ozlinalg.backend.original  # the native function even if a shim is installed
    if xp is np:
        import scipy.linalg as sla

        lu, chol, qr = orig(sla.lu_factor), orig(sla.cholesky), orig(sla.qr)
        return {"matmul": lambda a, b: a @ b,
                "getrf": lambda a, b: lu(a, check_finite=False),
                "potrf": lambda a, b: chol(b, check_finite=False),
                "geqrf": lambda a, b: qr(a, mode="r", check_finite=False)}
    import cupyx.scipy.linalg as csla

    lu, chol, qr = orig(csla.lu_factor), orig(xp.linalg.cholesky), orig(xp.linalg.qr)
    return {"matmul": lambda a, b: a @ b,
            "getrf": lambda a, b: lu(a, check_finite=False),
            "potrf": lambda a, b: chol(b),
            "geqrf": lambda a, b: qr(a, mode="r")}


def _emulated_funcs():
    lg = ozlinalg.linalg
    return {"matmul": lambda a, b: ozlinalg.matmul(a, b),
            "getrf": lambda a, b: lg.lu_factor(a, check_finite=False),
            "potrf": lambda a, b: lg.cholesky(b, check_finite=False),
            "geqrf": lambda a, b: lg.qr(a, mode="r", check_finite=False)}


def best(fn, reps, sync, thread_limits=(None,)):
    """Best time of `reps` calls (after one warm-up call), over the BLAS thread
    limits given: on a small, shared host a multithreaded BLAS can lose more
    to waiting for its threads than it gains, so each side gets its best."""
    t = np.inf
    for limit in thread_limits:
        with _blas_threads(limit):
            fn()  # warm-up: thread pools, plans, caches
            for _ in range(reps):
                sync()
                t0 = time.perf_counter()
                fn()
                sync()
                t = min(t, time.perf_counter() - t0)
    return t


def _blas_threads(limit):
    import contextlib

    if limit is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=limit, user_api="blas")


def crossover(ratios):
    """Smallest order from which every measured ratio (emulated / native) is <= 1."""
    cross = None
    for n in sorted(ratios, reverse=True):
        if ratios[n] > 1.0:
            break
        cross = n
    return cross


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    ap.add_argument("--ops", nargs="+", default=list(CROSSOVER_OPS), choices=CROSSOVER_OPS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    if args.device == "gpu":
        import cupy as xp

        def sync():
            xp.cuda.Device().synchronize()
    else:
        xp = np

        def sync():
            pass
    # host BLAS: the best of all threads and one thread, for both sides
    limits = (None, 1) if args.device == "cpu" else (None,)
    engine = get_engine(xp)
    nat, emu = _native_funcs(xp), _emulated_funcs()
    print(f"engine {engine.name} ({args.device}), {datetime.date.today()}, "
          f"load {os.getloadavg()}, cmd: python {' '.join(sys.argv)}")
    print("| op | n | native s | emulated s | ratio |")
    print("|---|---|---|---|---|")
    rows, ratios = [], {op: {} for op in args.ops}
    with ozlinalg.options(strategy="eager", min_size=0):
        for n in args.sizes:
            rng = np.random.default_rng(n)
            a_h = rng.standard_normal((n, n))
            a = xp.asarray(a_h)
            s = xp.asarray(a_h @ a_h.T / n + np.eye(n))
            for op in args.ops:
                b = s if op == "potrf" else (a if op != "matmul" else xp.asarray(a_h.T.copy()))
                tn = best(lambda op=op, a=a, b=b: nat[op](a, b), args.reps, sync, limits)
                te = best(lambda op=op, a=a, b=b: emu[op](a, b), args.reps, sync, limits)
                ratios[op][n] = te / tn
                rows.append(dict(op=op, n=n, native_s=tn, emulated_s=te, ratio=te / tn))
                print(f"| {op} | {n} | {tn:.4f} | {te:.4f} | {te / tn:.1f} |", flush=True)
    table = {op: crossover(r) for op, r in ratios.items()}
    print(f"\ncrossovers of {engine.name} (None: never at the measured orders "
          f"{min(args.sizes)}..{max(args.sizes)}): {table}")
    print("ratio at the largest order: "
          + ", ".join(f"{op} {r[max(r)]:.1f}x" for op, r in ratios.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(engine=engine.name, device=args.device, rows=rows,
                           crossovers=table), f, indent=1)


if __name__ == "__main__":
    main()
