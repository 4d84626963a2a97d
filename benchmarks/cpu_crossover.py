"""Crossovers of a NumPy engine: from which order emulation is at least as fast as native.

For each operation of ``Engine.crossovers`` ("matmul", "getrf", "potrf",
"geqrf") and each n it times the emulated call (default method and
``slices="auto"``; factorizations with ``crossover=0``) and the native one
(NumPy / SciPy LAPACK) alternately, best of ``--repeat`` each, and reports the
smallest measured n from which every larger measured n has ratio <= 1, or None
(emulation never paid in the measured range). The dict it prints is what the
engine's ``crossovers`` attribute holds (ozlinalg/engines/onednn.py).

Usage::

    python benchmarks/cpu_crossover.py --engine onednn --n 512 1024 2048 4096
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np
import scipy.linalg as sla
from cpu_timing import add_arguments, best, configure

import ozlinalg
from ozlinalg.testing import random_matrix


def cases(n):
    rng = np.random.default_rng([n, 29])
    a = random_matrix(rng, n, n, 0.5)
    b = random_matrix(rng, n, n, 0.5)
    g = rng.standard_normal((n, n))
    spd = g @ g.T + n * np.eye(n)
    return {
        "matmul": (lambda: ozlinalg.matmul(a, b), lambda: a @ b),
        "getrf": (lambda: ozlinalg.lapack.getrf(g, crossover=0),
                  lambda: sla.lu_factor(g, check_finite=False)),
        "potrf": (lambda: ozlinalg.lapack.potrf(spd, crossover=0),
                  lambda: sla.cholesky(spd, check_finite=False)),
        "geqrf": (lambda: ozlinalg.lapack.geqrf(g, crossover=0),
                  lambda: sla.qr(g, mode="raw", check_finite=False)),
    }


def crossover(ratios):
    """Smallest n from which every larger measured n has ratio <= 1 (None: never)."""
    best = None
    for n in sorted(ratios, reverse=True):
        if ratios[n] > 1.0:
            break
        best = n
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--ops", nargs="+", default=["matmul", "getrf", "potrf", "geqrf"])
    ap.add_argument("--repeat", type=int, default=2)
    add_arguments(ap)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    ratios = {op: {} for op in args.ops}
    with ozlinalg.options(engine=args.engine):
        from ozlinalg.engines import get_engine

        configure(args, get_engine(np))
        print(f"engine: {get_engine(np).describe()}")
        for n in args.n:
            fns = cases(n)
            for op in args.ops:
                emul, native = fns[op]
                emul()
                native()
                te = tn = float("inf")
                for _ in range(args.repeat):  # alternately: both see the same load
                    tn = min(tn, best(native, 1)[0])
                    te = min(te, best(emul, 1)[0])
                ratios[op][n] = te / tn
                print(f"n={n:>5} {op:<7} emulated {te:8.3f} s  native {tn:7.3f} s  "
                      f"ratio {te / tn:6.2f}  (load {os.getloadavg()[0]:.2f})", flush=True)
    result = {op: crossover(r) for op, r in ratios.items()}
    print("crossovers =", result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(ratios=ratios, crossovers=result), fh, indent=1)


if __name__ == "__main__":
    main()
