"""The refined solves' ladder: each level's product error, and where refinement converges.

1. For every level of ``ozlinalg.linalg._refine.LADDERS``: the largest normwise error
   ``|fl(AB) - AB| / (|A||B|)`` of one product at that count, against the exact product
   (python-flint), over random operands whose rows, columns and inner index are scaled
   across 2**(+-4) (the spread of a factorization's trailing updates), at inner
   dimensions 128 and 1024. The ladder's ``unit`` must be at least twice this (it is
   the value doubled and rounded up to a power of two); the exit status says.
2. ``--refine``: for each level and κ, the classical refinement at that level alone (the
   escalation by the estimate switched off): ``κ_1 u`` from the factors' estimate, the
   steps, and whether it converged. ``KAPPA_U_MAX`` must lie below where it stops
   converging.

    python benchmarks/calibration/refine_levels.py
    python benchmarks/calibration/refine_levels.py --refine --n 512
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np

import ozlinalg
from ozlinalg.linalg import _refine
from ozlinalg.testing import exact_relative_errors


def unit_errors(rng):
    warnings.simplefilter("ignore", ozlinalg.AccuracyWarning)
    print("method     count  unit(ladder)  measured max |err|/(|A||B|)  (k = 128, 1024)")
    cases = []
    for k in (128, 1024):
        a = rng.standard_normal((128, k)) * np.exp(rng.uniform(-3, 3, (128, 1)))
        b = rng.standard_normal((k, 128)) * np.exp(rng.uniform(-3, 3, (1, 128)))
        a *= np.exp(rng.uniform(-2, 2, (1, k)))
        cases.append((a, b, a @ b, np.abs(a) @ np.abs(b)))
    ok = True
    for method, levels in _refine.LADDERS.items():
        for count, unit in levels:
            errs = []
            for a, b, c, den in cases:
                got = ozlinalg.matmul(a, b, method=method, slices=count)
                errs.append(float(np.max(exact_relative_errors(a, b, got) * np.abs(c) / den)))
            ok &= 2 * max(errs) <= unit
            print(f"{method:10} {count:5}  {unit:10.1e}    "
                  + "  ".join(f"{e:.1e}" for e in errs)
                  + ("" if 2 * max(errs) <= unit else "   TWICE THIS EXCEEDS THE LADDER'S UNIT"))
    return ok


def refine_steps(rng, n):
    def matrix(kappa):
        q1 = np.linalg.qr(rng.standard_normal((n, n)))[0]
        q2 = np.linalg.qr(rng.standard_normal((n, n)))[0]
        return (q1 * np.logspace(0, -np.log10(kappa), n)) @ q2.T

    print(f"\nclassical refinement at one level, n = {n}")
    print("method     count  kappa   kappa_1*u  steps  converged")
    for method, levels in _refine.LADDERS.items():
        if method == "crt-fast":
            continue
        for count, unit in levels:
            for kappa in (1e2, 1e4, 1e6, 1e8, 1e10):
                a = matrix(kappa)
                b = rng.standard_normal((n, 1))
                lv = _refine.Level(method, count, unit)
                f = _refine._Factors(np, a, "gen", False, False, lv, np.abs(a).sum(0).max())
                work = _refine._Refinement(np, a, b, _refine.UNIT_ROUNDOFF)
                _, _, ok = work.classical(f, f.solve(b))
                print(f"{method:10} {count:5}  {kappa:6.0e}  {unit / f.rcond:9.1e}  "
                      f"{work.iterations:5}  {ok}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--refine", action="store_true", help="also the refinement steps")
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    ok = unit_errors(rng)
    if args.refine:
        refine_steps(rng, args.n)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
