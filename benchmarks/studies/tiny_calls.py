"""Time of tiny calls by name on each CPU engine: ``ozlinalg.matmul`` and
``ozlinalg.solve`` on n x n matrices.

    python benchmarks/studies/tiny_calls.py [--engines avx2 sgemm] [--n 8 32]
        [--calls 200] [--repeat 5]

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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", nargs="+", default=["avx2", "sgemm"])
    ap.add_argument("--n", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"load {os.getloadavg()[0]:.1f}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print("| engine | n | matmul [us] | solve [us] |")
    print("|---|---|---|---|")
    for eng in args.engines:
        with ozlinalg.options(engine=eng):
            for n in args.n:
                a = rng.standard_normal((n, n)) + n * np.eye(n)
                b = rng.standard_normal((n, n))
                tm = per_call(lambda a=a, b=b: ozlinalg.matmul(a, b), args.calls, args.repeat)
                ts = per_call(lambda a=a, b=b: ozlinalg.solve(a, b), args.calls, args.repeat)
                print(f"| {eng} | {n} | {tm * 1e6:.1f} | {ts * 1e6:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
