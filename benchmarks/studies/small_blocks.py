"""Why routed LU / Cholesky calls below order 16 run natively under ``strategy="eager"``.

    python benchmarks/studies/small_blocks.py [--reps 3]

Two measurements against the exact product (python-flint):

* products of inner dimension k (64 x k times k x 64, the papers' inputs at phi 0.5 and
  2): the largest error of native FP64 and of the emulation, relative to the exact
  entry and in units of the last place of ``(|A| |B|)_ij`` (the normwise scale that a
  factorization's backward error sees);
* LU of orders 2 .. 15 (phi = 2): ``||P A - L U||_1 / ||A||_1`` in ulps, LAPACK's
  ``getrf`` against ozlinalg's blocked LU with emulated updates.
"""
from __future__ import annotations

import argparse

import numpy as np
import scipy.linalg as sla

import ozlinalg
from ozlinalg.testing import ExactReference, random_matrix

U = 2.0**-53


def products(rng, reps):
    print("| k | phi | native max rel. err | emulated max rel. err | native, ulps of abs(A)abs(B) "
          "| emulated, ulps of abs(A)abs(B) |")
    print("|---|---|---|---|---|---|")
    for k in (2, 4, 8, 16, 32, 64):
        for phi in (0.5, 2.0):
            rn = re_ = un = ue = 0.0
            for _ in range(reps):
                a, b = random_matrix(rng, 64, k, phi), random_matrix(rng, k, 64, phi)
                ref = ExactReference(a, b)
                cn, ce = a @ b, ozlinalg.matmul(a, b)
                scale = np.abs(a) @ np.abs(b)
                rn = max(rn, ref.relative_errors(cn).max())
                re_ = max(re_, ref.relative_errors(ce).max())
                un = max(un, (ref.absolute_errors(cn) / scale).max() / U)
                ue = max(ue, (ref.absolute_errors(ce) / scale).max() / U)
            print(f"| {k} | {phi} | {rn:.2e} | {re_:.2e} | {un:.2f} | {ue:.2f} |")


def backward(a, lu, piv):
    n = a.shape[0]
    perm = np.arange(n)
    for i, p in enumerate(piv):
        perm[i], perm[p] = perm[p], perm[i]
    return (np.linalg.norm(a[perm] - (np.tril(lu, -1) + np.eye(n)) @ np.triu(lu), 1)
            / np.linalg.norm(a, 1) / U)


def lu(rng, reps):
    worst_n = worst_o = 0.0
    for n in range(2, 16):
        for _ in range(10 * reps):
            a = random_matrix(rng, n, n, 2.0)
            worst_n = max(worst_n, backward(a, *sla.lu_factor(a)))
            worst_o = max(worst_o, backward(a, *ozlinalg.linalg.lu_factor(a)))
    print(f"\nLU, orders 2..15, phi = 2, {10 * reps} matrices each: max ||PA - LU||_1 / ||A||_1 "
          f"= {worst_n:.2f} ulps (LAPACK), {worst_o:.2f} ulps (ozlinalg, emulated updates)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(7)
    products(rng, args.reps)
    lu(rng, args.reps)


if __name__ == "__main__":
    main()
