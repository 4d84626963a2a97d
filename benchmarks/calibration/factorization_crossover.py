"""Time the blocked factorizations emulated vs native across n (the crossover data).

Usage::

    python benchmarks/calibration/factorization_crossover.py [--sizes 128 192 256 384 512 768 1024]

Prints a markdown table: for each n and operation, the native LAPACK time,
the ozlinalg time with ``min_size=0`` (emulated trailing updates), their
ratio and the emulated-flop share. This is the measurement behind
``ozlinalg.lapack.DEFAULT_MIN_SIZE`` (see docs/factorizations.md).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.linalg as sla

import ozlinalg
from ozlinalg.lapack import geqrf, getrf, potrf


def best(fn, reps):
    t = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 192, 256, 384, 512, 768, 1024])
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    nb = args.block_size
    print("| n | op | native s | emulated s | ratio | emulated flop share |")
    print("|---|---|---|---|---|---|")
    emu_kw = dict(block_size=nb, min_size=0)
    for n in args.sizes:
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n))
        s = a @ a.T / n + np.eye(n)
        ops = {
            "getrf": (lambda a=a: sla.lu_factor(a), lambda a=a: getrf(a, **emu_kw)),
            "potrf": (lambda s=s: sla.cholesky(s), lambda s=s: potrf(s, **emu_kw)),
            "geqrf": (lambda a=a: sla.lapack.dgeqrf(a), lambda a=a: geqrf(a, **emu_kw)),
        }
        for op, (nat, emu) in ops.items():
            tn = best(nat, args.reps)
            te = best(emu, args.reps)
            with ozlinalg.profile() as p:
                emu()
            print(f"| {n} | {op} | {tn:.4f} | {te:.4f} | {te / tn:.0f} | "
                  f"{100 * p.emulated_flop_share:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
