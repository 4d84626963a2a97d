"""Time of tiny calls by name on each CPU engine: ``ozlinalg.matmul`` and
``ozlinalg.solve`` on n x n matrices; with ``--more`` also ``ozlinalg.solve`` of a
symmetric positive definite matrix (the Cholesky route), ``ozlinalg.linalg.inv``,
``lu_solve(lu_factor(a), b)`` and ``cho_solve(cho_factor(a), b)``.

    python benchmarks/studies/tiny_calls.py [--engines avx2 sgemm] [--n 8 32]
        [--calls 200] [--repeat 5] [--more]

One process; each call is warmed up once, then timed as the best of ``--repeat``
loops of ``--calls`` calls (microseconds per call). Set ``OMP_NUM_THREADS=1`` for
one thread, as the figures in docs/performance.md and the closing notes are.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ozlinalg  # noqa: E402


def per_call(f, calls, repeat):
    f()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t) / calls)
    return best


def _calls(a, b, spd):
    la = ozlinalg.linalg
    return [lambda: ozlinalg.matmul(a, b), lambda: ozlinalg.solve(a, b),
            lambda: ozlinalg.solve(spd, b), lambda: la.inv(a),
            lambda: la.lu_solve(la.lu_factor(a), b),
            lambda: la.cho_solve(la.cho_factor(spd), b)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", nargs="+", default=["avx2", "sgemm"])
    ap.add_argument("--n", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--more", action="store_true",
                    help="also the SPD solve, inv, lu_solve and cho_solve")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    names = ["matmul", "solve"] + (["solve SPD", "inv", "lu_solve", "cho_solve"]
                                   if args.more else [])
    print(f"load {os.getloadavg()[0]:.1f}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print("| engine | n | " + " | ".join(f"{c} [us]" for c in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for eng in args.engines:
        with ozlinalg.options(engine=eng):
            for n in args.n:
                a = rng.standard_normal((n, n)) + n * np.eye(n)
                b = rng.standard_normal((n, n))
                g = rng.standard_normal((n, n))
                spd = g @ g.T + n * np.eye(n)
                calls = _calls(a, b, spd)[:len(names)]
                times = [per_call(f, args.calls, args.repeat) * 1e6 for f in calls]
                print(f"| {eng} | {n} | " + " | ".join(f"{t:.1f}" for t in times) + " |",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
