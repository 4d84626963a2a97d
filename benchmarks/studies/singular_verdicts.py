"""Exactly singular small integer matrices: does ozlinalg raise / warn where LAPACK does?

Usage::

    python benchmarks/studies/singular_verdicts.py [--count 10000] [--seed 0]

Draws ``--count`` random exactly singular integer matrices (order 2 to 8,
rank 1 to n - 1, entries of the factors in [-9, 9]) and a random right-hand
side, and calls the routed functions natively and inside an always-emulating
``ozlinalg.backend()``: ``scipy.linalg.solve``, ``scipy.linalg.inv``,
``scipy.linalg.lu_factor`` followed by ``lu_solve``, ``numpy.linalg.solve``
and ``numpy.linalg.inv``. Each outcome is one of ``raise`` (LinAlgError),
``warn`` (a LinAlgWarning), ``silent``, with ``-big`` when the result's
largest entry exceeds 1e8. Printed per function: the joint counts
(native, ozlinalg), and the rate of calls where LAPACK raises or warns but
ozlinalg returns a result without any warning (the issue-12 figure: "about
8% ... come back as 1e16-sized solutions with no warning").
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import warnings

import numpy as np
import scipy.linalg as sl

import ozlinalg


def _native(f):
    while getattr(f, "_ozlinalg_shim", False):
        f = f.__wrapped__
    return f


def outcome(func, *args):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            x = func(*args)
        except np.linalg.LinAlgError:
            return "raise"
    x = x[0] if isinstance(x, tuple) else x
    big = "-big" if np.abs(np.asarray(x)).max() > 1e8 else ""
    warned = any(issubclass(w.category, sl.LinAlgWarning) for w in rec)
    return ("warn" if warned else "silent") + big


CALLS = {
    "scipy.linalg.solve": lambda a, b: sl.solve(a, b),
    "scipy.linalg.inv": lambda a, b: sl.inv(a),
    "scipy lu_factor+lu_solve": lambda a, b: sl.lu_solve(sl.lu_factor(a), b),
    "numpy.linalg.solve": lambda a, b: np.linalg.solve(a, b),
    "numpy.linalg.inv": lambda a, b: np.linalg.inv(a),
}


def backend_opts():
    opts = {"min_size": 0}
    if "strategy" in {f.name for f in dataclasses.fields(ozlinalg.Options)}:
        opts["strategy"] = "eager"
    return opts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    mats = []
    for _ in range(args.count):
        n = int(rng.integers(2, 9))
        r = int(rng.integers(1, n))
        a = (rng.integers(-9, 10, (n, r)) @ rng.integers(-9, 10, (r, n))).astype(float)
        mats.append((a, rng.standard_normal(n)))
    opts = backend_opts()
    print(f"{args.count} exactly singular integer matrices, n in 2..8; backend({opts})")
    for name, call in CALLS.items():
        joint = collections.Counter()
        for a, b in mats:
            native = outcome(call, a, b)
            with ozlinalg.backend(**opts):
                ours = outcome(call, a, b)
            joint[(native, ours)] += 1
        agree = sum(v for (x, y), v in joint.items() if x == y)
        silent = sum(v for (x, y), v in joint.items()
                     if not x.startswith("silent") and y.startswith("silent"))
        print(f"\n{name}: same outcome {agree / args.count:.2%}; LAPACK raises or warns but "
              f"ozlinalg returns silently {silent / args.count:.2%}")
        for (x, y), v in sorted(joint.items(), key=lambda t: -t[1]):
            print(f"   native {x:10s} ozlinalg {y:10s} {v:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
