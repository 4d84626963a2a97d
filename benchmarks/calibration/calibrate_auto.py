"""Calibration data for ``slices="auto"`` (see ozlinalg/ozaki/counts/slices.py).

For each case (shape, phi, seed) it computes the exponent spread rho, the
smallest slice count whose max relative error (against the EXACT product) is
at or below native DGEMM's, and the count ``slices="auto"`` picks, per method.
A pick below the needed count is an under-pick: a failure of the calibration.

``--json`` keeps the raw rows: per case and method the max error of every count
tried, and native DGEMM's max error under six summation orders that are all
legitimate FP64 products (``natives``: BLAS with two threads and with one,
``(B^T A^T)^T``, the inner dimension reversed, permuted, or summed in two
halves). "Needed" is defined against the first (the default); the others show
how much of it is the BLAS's own rounding (docs/calibration.md has the analysis).

Usage::

    python benchmarks/calibration/calibrate_auto.py                 # about 15 minutes on 2 cores
    python benchmarks/calibration/calibrate_auto.py --json rows.json
    python benchmarks/calibration/calibrate_auto.py --quick         # n <= 1024
    python benchmarks/calibration/calibrate_auto.py --small         # outputs of 16..1200 entries
    python benchmarks/calibration/calibrate_auto.py --small --engine onednn   # on one NumPy engine
    python benchmarks/calibration/calibrate_auto.py --case 32 512 32 --phis 4 --seeds 18
"""
from __future__ import annotations

import argparse
import json

import numpy as np

import ozlinalg
from ozlinalg.engines import get_engine
from ozlinalg.ozaki.counts.slices import spread_bits
from ozlinalg.ozaki.split import normalize_rows
from ozlinalg.testing import ExactReference, error_stats, random_matrix

CASES = [(256, 64, 256), (256, 256, 256), (32, 512, 24), (256, 1024, 256),
         (256, 4096, 256), (96, 16384, 96)]
#: Small outputs (``--small``): the max over few entries is the hard case.
SMALL_CASES = [(30, 300, 30), (8, 1000, 8), (40, 300, 30), (4, 64, 4), (100, 2000, 3)]


def native_orders(a, b):
    """Native FP64 products of ``a @ b`` in six summation orders (module doc)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        threadpool_limits = None
    k = a.shape[1]
    perm = np.random.default_rng(0).permutation(k)
    out = {"blas": a @ b}
    if threadpool_limits is not None:
        with threadpool_limits(1, "blas"):
            out["blas-1-thread"] = a @ b
    out["transposed"] = (b.T @ a.T).T
    out["reversed"] = a[:, ::-1] @ b[::-1]
    out["permuted"] = a[:, perm] @ b[perm]
    h = k // 2
    out["halves"] = a[:, :h] @ b[:h] + a[:, h:] @ b[h:]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--small", action="store_true", help="the small-output cases, 6 seeds")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--case", type=int, nargs=3, action="append", metavar=("M", "N", "P"),
                    help="run this (m x n) @ (n x p) shape instead of the grid (repeatable)")
    ap.add_argument("--phis", type=float, nargs="+", default=[0.5, 1, 2, 3, 4])
    ap.add_argument("--methods", nargs="+", default=["hybrid-ef", "bitmask-ef", "rn", "splitfp"])
    ap.add_argument("--json", default=None, help="write the raw rows here")
    ap.add_argument("--engine", default=None,
                    help="NumPy engine: onednn, sgemm or auto (default: OZLINALG_ENGINE / auto)")
    args = ap.parse_args(argv)
    with ozlinalg.options(engine=args.engine):
        print(f"engine: {get_engine(np).describe()}")
        return _run(args)


def _run(args):
    cases = [c for c in CASES if not args.quick or c[1] <= 1024]
    if args.small:
        cases, args.seeds = SMALL_CASES, max(args.seeds, 6)
    if args.case:
        cases = [tuple(c) for c in args.case]
    under = 0
    rows = []
    print(f"{'m':>4} {'n':>6} {'phi':>4} seed {'rho':>5}  method: needed/auto")
    for m, n, p in cases:
        for phi in args.phis:
            for seed in range(1, args.seeds + 1):
                rng = np.random.default_rng([seed, n, int(phi * 10)])
                a = random_matrix(rng, m, n, phi)
                b = random_matrix(rng, n, p, phi)
                xa, _ = normalize_rows(np, a)
                xb, _ = normalize_rows(np, b.T)
                rho = spread_bits(np, get_engine(np), xa, xb)
                ref = ExactReference(a, b)
                natives = {k: error_stats(ref.relative_errors(v))[0]
                           for k, v in native_orders(a, b).items()}
                nat = natives["blas"]
                row = dict(m=m, n=n, p=p, phi=phi, seed=seed, rho=rho, native=nat,
                           natives=natives, errors={})
                cells = []
                low = min(natives.values())
                for meth in args.methods:
                    with ozlinalg.profile() as prof:
                        ozlinalg.matmul(a, b, method=meth)
                    auto = prof.slices[0]
                    need = None
                    errs = {}
                    for s in range(5, 21):
                        c = ozlinalg.matmul(a, b, method=meth, slices=s)
                        errs[s] = error_stats(ref.relative_errors(c))[0]
                        if need is None and errs[s] <= nat:
                            need = s
                        if errs[s] <= low:  # every order's count is known
                            break
                    row[meth] = (need, auto)
                    row["errors"][meth] = errs
                    flag = "!" if need is None or auto < need else ""
                    under += bool(flag)
                    cells.append(f"{meth}: {need}/{auto}{flag}")
                rows.append(row)
                print(f"{m:>4} {n:>6} {phi:>4} {seed:>4} {rho:5.1f}  " + "  ".join(cells),
                      flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    over = [r[mt][1] - r[mt][0] for r in rows for mt in args.methods if r[mt][0]]
    print(f"\n{len(rows)} cases x {len(args.methods)} methods: under-picks {under}, "
          f"over-picks by 1: {sum(o == 1 for o in over)}, by 2+: {sum(o >= 2 for o in over)}, "
          f"exact: {sum(o == 0 for o in over)}")


if __name__ == "__main__":
    main()
