"""Huge exponent ranges: ``slices="auto"`` / ``moduli="auto"`` with and without balancing.

``A = X D``, ``B = D^-1 Y`` with ``D = diag(2**U{-t..t})`` over the inner
dimension (X, Y the papers' phi = 0.5 inputs): the product is X Y with every
term unchanged, but columns of A and rows of B are badly scaled. For each t it
reports the count ``auto`` chose (0: no entry within reach of ``max_slices``),
the share of entries computed in native FP64 instead (Ozaki-I), the max
relative error against the EXACT product (python-flint), whether an
AccuracyWarning was raised, and native DGEMM's error, with ``balance="auto"``
(the default) and ``balance=False``. A row whose error is above native's must
carry a warning: never a silent loss.

Usage::

    python benchmarks/studies/accuracy_huge_range.py            # 128 x 1024 x 96, ~20 s
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np

import ozlinalg
from ozlinalg.testing import ExactReference, error_stats, random_matrix


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=int, nargs=3, default=[128, 1024, 96])
    ap.add_argument("--spreads", type=int, nargs="+", default=[0, 10, 20, 40, 80, 300])
    ap.add_argument("--methods", nargs="+", default=["hybrid-ef", "crt"])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    m, n, p = args.shape
    rng = np.random.default_rng(args.seed)
    x, y = random_matrix(rng, m, n, 0.5), random_matrix(rng, n, p, 0.5)
    print(f"`python benchmarks/studies/accuracy_huge_range.py --shape {m} {n} {p} "
          f"--seed {args.seed}`\n")
    print("| inner scaling 2^±t | method | balance | auto chose | entries in native FP64 | "
          "max rel err | warning | native DGEMM |")
    print("|---|---|---|---|---|---|---|---|")
    silent = 0
    for t in args.spreads:
        d = np.ldexp(1.0, rng.integers(-t, t + 1, n))
        a, b = x * d[None, :], y / d[:, None]
        ref = ExactReference(a, b)
        native = error_stats(ref.relative_errors(a @ b))[0]
        for meth in args.methods:
            for bal in ("auto", False):
                with ozlinalg.profile() as prof, warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always", ozlinalg.AccuracyWarning)
                    c = ozlinalg.matmul(a, b, method=meth, balance=bal)
                err = error_stats(ref.relative_errors(c))[0]
                silent += err > native and not w
                share = prof.native_flops / (2.0 * m * n * p)
                print(f"| {t} | {meth} | {bal} | {prof.slices[0]} | {share:.0%} | {err:.2e} | "
                      f"{'yes' if w else 'no'} | {native:.2e} |")
    print(f"\nRows above native DGEMM's error without a warning: {silent}")


if __name__ == "__main__":
    main()
