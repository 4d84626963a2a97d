"""Backward error of blocked LU on dask arrays: ozlinalg's (partial pivoting over
whole column panels) against dask's own ``da.linalg.lu`` (pivoting inside
diagonal blocks only) and LAPACK's ``dgetrf`` on the same input::

    PYTHONPATH=$PWD python benchmarks/studies/dask_pivoting.py --n 1024 --chunk 256

Metric: ``||P L U - A||_1 / ||A||_1``; also whether ozlinalg's pivots equal
LAPACK's and the largest ``|L_ij|`` (1 under partial pivoting).
"""
from __future__ import annotations

import argparse

import numpy as np


def matrices(n, chunk, rng):
    g = rng.standard_normal((n, n))
    small = g.copy()
    for k in range(0, n, chunk):   # nearly singular diagonal blocks, regular matrix
        small[k:k + chunk, k:k + chunk] *= 1e-12
    scaled = g * np.exp(4 * rng.standard_normal((n, 1)))   # badly scaled rows
    return {"random normal": g, "diagonal blocks x 1e-12": small,
            "rows scaled by exp(4 N(0,1))": scaled}


def main(argv=None):
    import dask
    import dask.array as da
    import scipy.linalg as sla

    import ozlinalg

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    def back(a, p, lo, up):
        return np.linalg.norm(p @ lo @ up - a, 1) / np.linalg.norm(a, 1)

    print(f"n = {args.n}, chunks {args.chunk}: ||PLU - A||_1 / ||A||_1")
    print("| matrix | LAPACK dgetrf | ozlinalg (dask) | dask da.linalg.lu | pivots = LAPACK's "
          "| max abs L (ozlinalg / dask) |")
    print("|---|---|---|---|---|---|")
    for name, a in matrices(args.n, args.chunk, np.random.default_rng(args.seed)).items():
        x = da.from_array(a, chunks=args.chunk)
        p, lo, up = dask.compute(*ozlinalg.linalg.lu(x))
        pd, ld, ud = dask.compute(*da.linalg.lu(x))
        piv = ozlinalg.linalg.lu_factor(x)[1].compute()
        same = np.array_equal(piv, sla.lu_factor(a)[1])
        print(f"| {name} | {back(a, *sla.lu(a)):.1e} | {back(a, p, lo, up):.1e} | "
              f"{back(a, pd, ld, ud):.1e} | {same} | {np.abs(lo).max():.1f} / "
              f"{np.abs(ld).max():.1e} |")


if __name__ == "__main__":
    main()
