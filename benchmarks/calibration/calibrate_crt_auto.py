"""Calibration data for ``moduli="auto"`` of Ozaki scheme II (see ozlinalg/ozaki/crt/).

For each case (shape, phi, seed, scaling) it records the predicted spread rho
(with the reference count ``P_ref`` of 20 moduli, the default cap), the count
``moduli="auto"`` picks, and the smallest count whose max relative error
against the EXACT product (python-flint) is at or below native DGEMM's. A pick
below the needed count is an under-pick: a silent loss of accuracy (a pick of
0 means every entry was beyond ``max_moduli`` and computed in native FP64).

Usage::

    python benchmarks/calibration/calibrate_crt_auto.py                   # ~10 minutes on 2 cores
    python benchmarks/calibration/calibrate_crt_auto.py --json rows.json  # keep the raw rows
"""
from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

from ozlinalg.engines import get_engine
from ozlinalg.ozaki.crt import MAX_MODULI, crt_matmul_2d
from ozlinalg.testing import error_stats
from ozlinalg.tools.sweep import problems

CASES = [(32, 64, 24), (40, 300, 30), (64, 512, 64), (64, 2048, 48), (128, 2048, 96),
         (200, 4096, 160)]
PHIS = [0.5, 1.0, 2.0, 4.0, 6.0, 8.0]


def measure(a, b, ref, native, scaling, eng, lo=10):
    counts = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        crt_matmul_2d(np, eng, a, b, moduli="auto", scaling=scaling, max_moduli=MAX_MODULI,
                      profile_counts=counts)
    pick = counts["slices"][-1]
    need = None
    for nm in range(lo, MAX_MODULI + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = crt_matmul_2d(np, eng, a, b, moduli=nm, scaling=scaling)
        if error_stats(ref.relative_errors(c))[0] <= native:
            need = nm
            break
    return dict(rho=counts["crt_rho"][-1], pick=pick, need=need)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--phis", type=float, nargs="+", default=PHIS)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    eng = get_engine(np)
    rows = []
    print("| m x n x p | phi | seed | scaling | rho | auto | needed | |")
    print("|---|---|---|---|---|---|---|---|")
    for m, n, p in CASES:
        for seed in range(args.seeds):
            for phi, a, b, ref, native, _ in problems(m, n, p, args.phis, seed):
                for scaling in ("accurate", "fast"):
                    r = measure(a, b, ref, native, scaling, eng)
                    r.update(shape=(m, n, p), phi=phi, seed=seed, scaling=scaling)
                    rows.append(r)
                    flag = ("native" if r["pick"] == 0 else "UNDER"
                            if r["need"] is None or r["pick"] < r["need"]
                            else f"+{r['pick'] - r['need']}")
                    print(f"| {m}x{n}x{p} | {phi} | {seed} | {scaling} | {r['rho']:.2f} | "
                          f"{r['pick']} | {r['need']} | {flag} |", flush=True)
    under = [r for r in rows if r["pick"] and (r["need"] is None or r["pick"] < r["need"])]
    print(f"\n{len(rows)} cases, {len(under)} under-picks")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
