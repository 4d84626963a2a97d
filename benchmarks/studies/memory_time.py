"""Time of one emulated product under ``options(memory_limit=...)`` against unlimited.

    python benchmarks/studies/memory_time.py [--n 2048] [--limit-mib 64]
        [--engines avx2 sgemm] [--methods crt hybrid-ef] [--repeat 2]

For each engine and method, one ``(n x n) @ (n x n)`` product runs unlimited and then
under the limit, in the same process, each the best of ``--repeat`` runs after an
untimed one; the table gives both wall times, their ratio,
the memory plan's tiles (the count's phase, and the products' once the count is
known), the engine calls, where the time went (the profile's split / int8 /
accumulate, unlimited; limited), and whether the bits are the same (they must
be: tiles never change a result). The limit counts working memory only (the result,
8 n^2 bytes, comes on top), so 64 MiB at n = 2048 is twice the result.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ozlinalg  # noqa: E402
from ozlinalg._matmul import memory_plan  # noqa: E402
from ozlinalg.engines import get_engine  # noqa: E402
from ozlinalg.ozaki import memory  # noqa: E402
from ozlinalg.ozaki.params import METHODS  # noqa: E402


def one(a, b, meth, limit, repeat):
    """The best wall time of ``repeat`` products after an untimed one (the first call of
    a shape pays page faults for fresh buffers and oneDNN's kernel generation: up to
    half of crt's unlimited time at n = 2048), with its result and profile record."""
    runs = []
    for _ in range(repeat + 1):
        with ozlinalg.options(memory_limit=limit), ozlinalg.profile() as prof:
            t = time.perf_counter()
            c = ozlinalg.matmul(a, b, method=meth)
            t = time.perf_counter() - t
        runs.append((t, c, prof.calls[-1]))
    return min(runs[1:], key=lambda r: r[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--limit-mib", type=int, default=64)
    ap.add_argument("--engines", nargs="+", default=["avx2", "sgemm"])
    ap.add_argument("--methods", nargs="+", default=["crt", "hybrid-ef"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2, help="timed runs after an untimed one")
    args = ap.parse_args(argv)
    n, limit = args.n, args.limit_mib << 20
    rng = np.random.default_rng(args.seed)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    print(f"n = {n}, memory_limit = {args.limit_mib} MiB, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    print("| engine | method | unlimited [s] | limited [s] | ratio | tiles: count / products "
          "| engine calls "
          "| split / int8 / acc [s]: unlimited; limited | same bits |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.engines:
        with ozlinalg.options(engine=name):
            try:
                eng = get_engine(np, name)
            except RuntimeError as exc:
                print(f"| {name} | unavailable: {exc} |")
                continue
            for meth in args.methods:
                t0, c0, r0 = one(a, b, meth, None, args.repeat)
                t1, c1, r1 = one(a, b, meth, limit, args.repeat)
                with ozlinalg.options(memory_limit=limit):
                    tiles = memory_plan(n, n, n, method=meth).tiles
                # the products' own tiles once the count is known (the same plan's)
                fam = memory.family(METHODS[meth].split, METHODS[meth].groupwise)
                own = memory.product_plan(n, n, n, r1.slices, limit, fam, eng.slice_bytes,
                                          eng.memory_model) or tiles
                print(f"| {eng.name} | {meth} | {t0:.2f} | {t1:.2f} | {t1 / t0:.2f} "
                      f"| {tiles[0]} x {tiles[1]} / {own[0]} x {own[1]} "
                      f"| {r0.engine_calls} -> {r1.engine_calls} "
                      f"| {r0.time_split:.2f} / {r0.time_int8:.2f} / {r0.time_accumulate:.2f}; "
                      f"{r1.time_split:.2f} / {r1.time_int8:.2f} / {r1.time_accumulate:.2f} "
                      f"| {np.array_equal(c0, c1)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
