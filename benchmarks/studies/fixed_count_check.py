"""Cost of the fixed-count check (ozlinalg.ozaki.counts.adequacy) against the product it guards.

For n x n x n products of the papers' inputs (phi = 0.5) with a fixed count that is
enough (the check's common case: its bound settles it, no GEMM), it times, inside
real ``ozlinalg.matmul`` calls, the time spent in the check (the driver's
``_check_fixed_count`` for the Ozaki-I methods, ``counts.moduli._fixed_short`` for the CRT
ones) and the whole call, best of ``--repeat`` each, and reports their ratio; native
DGEMM on the same inputs in the same run. ``--forced`` also times the check when
its GEMM-free bounds are made to fail (the estimate over a sixteenth of the inner
dimension decides: counts about one above what the inputs need), and when that fails
too (auto's own plan runs: counts at or below what the inputs need).

Usage::

    python benchmarks/studies/fixed_count_check.py                    # n = 2048, the default engine
    OZLINALG_ENGINE=sgemm python benchmarks/studies/fixed_count_check.py --n 1024 2048
    python benchmarks/studies/fixed_count_check.py --n 2048 --cases hybrid-ef:10 crt:16 --forced
    python benchmarks/studies/fixed_count_check.py --settle      # which counts the bound settles

``--settle`` prints, for a few shapes and exponent ranges, auto's count and, for the
counts around it, whether the product warned and which stages of the check ran
(the GEMM-free bound alone, the sampled estimate, auto's plan).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time
import warnings

import numpy as np

import ozlinalg
from ozlinalg.engines import get_engine
from ozlinalg.ozaki import tiling as gemm
from ozlinalg.ozaki.counts import adequacy
from ozlinalg.ozaki.counts import moduli as crt_counts
from ozlinalg.testing import random_matrix


def timed_checks():
    """Wrap the two check entry points; returns the dict their time accumulates in."""
    spent = {"t": 0.0}

    def wrap(module, name):
        inner = getattr(module, name)

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent["t"] += time.perf_counter() - t

        setattr(module, name, timed)

    wrap(gemm, "_check_fixed_count")
    wrap(crt_counts, "_fixed_short")
    return spent


def measure(a, b, method, slices, repeat, spent):
    best_call, best_check = float("inf"), float("inf")
    for _ in range(repeat):
        spent["t"] = 0.0
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ozlinalg.AccuracyWarning)
            ozlinalg.matmul(a, b, method=method, slices=slices)
        best_call = min(best_call, time.perf_counter() - t)
        best_check = min(best_check, spent["t"])
    return best_call, best_check


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2048])
    ap.add_argument("--cases", nargs="+", default=["hybrid-ef:10", "bitmask-ef:10", "crt:16",
                                                   "crt-fast:16"],
                    help="method:count pairs")
    ap.add_argument("--phi", type=float, default=0.5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--forced", action="store_true",
                    help="also time the check with its bound failing (auto's plan runs)")
    ap.add_argument("--settle", action="store_true",
                    help="which counts the bound settles alone (no timing)")
    args = ap.parse_args(argv)
    if args.settle:
        return settle(args.cases)
    eng = get_engine(np)
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, engine {eng.describe()}, load {os.getloadavg()[0]:.1f}")
    spent = timed_checks()
    rng = np.random.default_rng(2026)
    print("| n | method | count | native DGEMM s | product s | check s | check / product |"
          + (" sampled s | sampled / product | plan s | plan / product |" if args.forced
             else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|---|---|" if args.forced else ""))
    for n in args.n:
        a, b = random_matrix(rng, n, n, args.phi), random_matrix(rng, n, n, args.phi)
        t_nat = min(_time(np.matmul, a, b) for _ in range(args.repeat))
        for case in args.cases:
            method, count = case.split(":")
            count = int(count)
            t_call, t_check = measure(a, b, method, count, args.repeat, spent)
            row = (f"| {n} | {method} | {count} | {t_nat:.3f} | {t_call - t_check:.3f} | "
                   f"{t_check * 1e3:.1f} ms | {100 * t_check / (t_call - t_check):.2f} % |")
            if args.forced:
                for stage in ("sampled", "plan"):
                    with forced(stage):
                        f_call, f_check = measure(a, b, method, count, args.repeat, spent)
                    row += f" {f_check:.3f} | {100 * f_check / (f_call - f_check):.1f} % |"
            print(row, flush=True)


def settle(cases, shapes=((40, 300, 30), (256, 256, 256), (1024, 1024, 1024)),
           phis=(0.5, 1.0, 2.0, 4.0)):
    """For each method, shape and phi: auto's count, then ``count:W`` (warned) or
    ``count:-`` (quiet), ``+sample`` where the sampled estimate ran (the GEMM-free
    bounds did not settle it), ``+plan`` where auto's plan had to run."""
    planned = {"plan": 0, "sample": 0}

    def counting(module, name, key):
        inner = getattr(module, name)

        def counted(*args, **kwargs):
            planned[key] += 1
            return inner(*args, **kwargs)

        setattr(module, name, counted)

    counting(gemm, "_block_plan", "plan")
    counting(crt_counts, "estimate", "plan")
    counting(adequacy, "estimate", "sample")
    rng = np.random.default_rng(2026)
    print("| method | shape | phi | auto | count: W warned, - quiet; +sample, +plan: what ran |")
    print("|---|---|---|---|---|")
    for method in dict.fromkeys(c.split(":")[0] for c in cases):
        for m, n, p in shapes:
            for phi in phis:
                a, b = random_matrix(rng, m, n, phi), random_matrix(rng, n, p, phi)
                with ozlinalg.profile() as prof:
                    ozlinalg.matmul(a, b, method=method)
                auto = prof.slices[0]
                cells = []
                for count in range(max(1, auto - 2), auto + 5):
                    planned.update(plan=0, sample=0)
                    with warnings.catch_warnings(record=True) as w:
                        warnings.simplefilter("always", ozlinalg.AccuracyWarning)
                        ozlinalg.matmul(a, b, method=method, slices=count)
                    tags = "".join(f"+{key}" for key in ("sample", "plan") if planned[key])
                    cells.append(f"{count}:{'W' if w else '-'}{tags}")
                print(f"| {method} | {m}x{n}x{p} | {phi} | {auto} | {' '.join(cells)} |",
                      flush=True)


@contextlib.contextmanager
def forced(stage):
    """The check's GEMM-free bounds made to fail, so that the sampled estimate decides
    (``stage="sampled"``) or, that failing too, auto's own plan (``"plan"``)."""
    saved = (gemm.q_floor, crt_counts._r_floor, crt_counts._w_floor, gemm.sampled_settles,
             crt_counts.sampled_settles)
    gemm.q_floor = crt_counts._r_floor = crt_counts._w_floor = lambda *args, **kwargs: 0.0
    if stage == "plan":
        gemm.sampled_settles = crt_counts.sampled_settles = lambda *args, **kwargs: False
    try:
        yield
    finally:
        (gemm.q_floor, crt_counts._r_floor, crt_counts._w_floor, gemm.sampled_settles,
         crt_counts.sampled_settles) = saved


def _time(fn, *args):
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
