"""How far the CRT ``moduli="auto"`` rule's picks sit above its threshold, from the raw
rows of ``benchmarks/calibration/calibrate_crt_auto.py --json``.

For each case the margin is ``log2 P_pick - required`` (bits; the rule of
ozlinalg/ozaki/crt/moduli.py picks the smallest count with a margin >= 0). It prints the
under-picks with their margins, and for raised offsets (bits added to
``AUTO_OFFSET_BITS`` of one scaling) how many picks would change, how many
under-picks that fixes and how many new over-picks it makes.

Usage::

    python benchmarks/calibration/crt_auto_margins.py \
        benchmarks/results/calibrate-crt-auto-onednn-zen5-2026-12-01.json
"""
from __future__ import annotations

import argparse
import json

from ozlinalg.ozaki.crt import (
    AUTO_HIGH_SLOPE,
    AUTO_OFFSET_BITS,
    AUTO_REF_MODULI,
    AUTO_RHO_KNEE,
    AUTO_RHO_SLOPE,
    crt_constants,
)


def required(rho, scaling):
    """log2 P the rule asks for at spread ``rho`` (the ozlinalg.ozaki.crt package doc)."""
    ref = crt_constants(AUTO_REF_MODULI).log2P
    return ref + 2 * (AUTO_RHO_SLOPE * (rho + 53) + AUTO_OFFSET_BITS[scaling]
                      + AUTO_HIGH_SLOPE * max(0.0, rho - AUTO_RHO_KNEE))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", help="JSON rows of calibrate_crt_auto.py --json")
    ap.add_argument("--deltas", type=float, nargs="+", default=[0.5, 1, 2, 3])
    args = ap.parse_args(argv)
    rows = []
    for r in json.load(open(args.rows)):
        if r.get("need") is None:
            continue
        margin = crt_constants(r["pick"]).log2P - required(r["rho"], r["scaling"])
        rows.append(dict(margin=margin, diff=r["pick"] - r["need"], **r))
    print(f"{len(rows)} cases; under-picks:")
    for r in rows:
        if r["diff"] < 0:
            print(f"  {r['shape']} phi {r['phi']} seed {r['seed']} {r['scaling']}: pick {r['pick']}"
                  f" need {r['need']}, margin {r['margin']:.2f} bits")
    for sc in ("fast", "accurate"):
        for d in args.deltas:
            moved = [r for r in rows if r["scaling"] == sc and r["margin"] < 2 * d]
            fixed = sum(r["diff"] < 0 for r in moved)
            print(f"{sc:>8} offset +{d:g} bits: {len(moved)} picks move up, {fixed} under-picks "
                  f"fixed, {len(moved) - fixed} new over-picks")


if __name__ == "__main__":
    main()
