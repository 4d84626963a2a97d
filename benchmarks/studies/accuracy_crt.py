"""Accuracy of Ozaki scheme II (CRT over INT8 moduli): moduli 8..20, both scalings.

For each phi it draws ``A`` (m x n) and ``B`` (n x p) with entries
``(U(0,1) - 0.5) * exp(phi * N(0,1))``, computes the EXACT product once
(python-flint integers, :class:`ozlinalg.testing.ExactReference`) and reports
the max and median elementwise relative error of native DGEMM and of
:func:`ozlinalg.ozaki.crt.crt_matmul_2d` for every moduli count, for the
``fast`` and ``accurate`` scalings, and for ``moduli="auto"``. The smallest
count whose max error is at or below native DGEMM's is the "DGEMM-level"
column, beside GEMMul8's published Ozaki-II figures (docs/peers.md) (GH200, m = p = 1024; accurate:
15, 15, 15-16, 17-18; fast: 15, 16, 18, not reached by 20).

Usage::

    python benchmarks/studies/accuracy_crt.py                 # m = p = 256, n = 4096
    python benchmarks/studies/accuracy_crt.py --n 1024 --phis 0.5 4 --out /tmp/acc.md
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from ozlinalg.engines import get_engine
from ozlinalg.ozaki.crt import crt_matmul_2d
from ozlinalg.testing import error_stats
from ozlinalg.tools.sweep import problems

ROOT = Path(__file__).resolve().parents[2]
SCALINGS = ("accurate", "fast")
ANCHOR = {
    "accurate": {0.5: "15", 1.0: "15", 2.0: "15-16", 4.0: "17-18"},
    "fast": {0.5: "15", 1.0: "16", 2.0: "18", 4.0: "not reached by 20"},
}


def run(m, n, p, phis, moduli_range, seed):
    eng = get_engine(np)
    rows = []
    for phi, a, b, ref, mx, med in problems(m, n, p, phis, seed):
        rows.append(dict(phi=phi, scaling="native", moduli=None, max=mx, median=med))
        for sc in SCALINGS:
            for nm in list(moduli_range) + ["auto"]:
                counts = {}
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    c = crt_matmul_2d(np, eng, a, b, moduli=nm, scaling=sc,
                                      profile_counts=counts)
                dt = time.perf_counter() - t0
                mx, med = error_stats(ref.relative_errors(c))
                rows.append(dict(phi=phi, scaling=sc, moduli=nm, chosen=counts["slices"][-1],
                                 max=mx, median=med, int8_gemms=counts["int8_gemms"],
                                 seconds=dt))
        print(f"phi = {phi} done", file=sys.stderr, flush=True)
    return rows


def dgemm_level(rows, phi, sc):
    native = next(r["max"] for r in rows if r["phi"] == phi and r["scaling"] == "native")
    ok = [r["moduli"] for r in rows if r["phi"] == phi and r["scaling"] == sc
          and r["moduli"] != "auto" and r["max"] <= native]
    return min(ok) if ok else None


def markdown(rows, m, n, p, seed, elapsed, moduli_range):
    phis = sorted({r["phi"] for r in rows})
    hi = moduli_range[-1]
    out = [
        f"# Accuracy of Ozaki scheme II (CRT over INT8 moduli), m = p = {m}, n = {n}",
        "",
        f"Inputs `(U(0,1) - 0.5) * exp(phi * N(0,1))`, seed {seed}; errors are elementwise "
        "`|C - C_exact| / |C_exact|` against the EXACT product (python-flint integers). "
        "Code: `ozlinalg/ozaki/crt/` (`crt_matmul_2d`), CPU engine (exact INT8 products on "
        "SGEMM), moduli 256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, "
        "197, 193, 191, 181, 179, 173 (the first N are used).",
        f"Reproduce: `python benchmarks/studies/accuracy_crt.py --m {m} --n {n} --p {p} "
        f"--seed {seed}` "
        f"({elapsed:.0f} s on the machine that wrote this).",
        "",
        "## Moduli needed for DGEMM-level accuracy (max error <= native DGEMM's)",
        "",
        "The published figures (docs/peers.md) are GEMMul8 on GH200 at m = p = 1024, "
        "n = 1024..16384 against a double-double reference; these are one draw at the size above.",
        "",
        "| phi | native max | native median | accurate | GEMMul8 accurate (published) "
        "| auto (accurate) chose | auto max | fast | GEMMul8 fast (published) "
        "| auto (fast) chose | auto max |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for phi in phis:
        nat = next(r for r in rows if r["phi"] == phi and r["scaling"] == "native")
        cells = []
        for sc in SCALINGS:
            lvl = dgemm_level(rows, phi, sc)
            auto = next(r for r in rows if r["phi"] == phi and r["scaling"] == sc
                        and r["moduli"] == "auto")
            cells += [str(lvl) if lvl else f">{hi}", ANCHOR[sc].get(phi, "-"),
                      str(auto["chosen"]), f"{auto['max']:.2e}"]
        out.append(f"| {phi} | {nat['max']:.2e} | {nat['median']:.2e} | " + " | ".join(cells)
                   + " |")
    out += ["", "## Max / median relative error per moduli count", ""]
    for phi in phis:
        nat = next(r for r in rows if r["phi"] == phi and r["scaling"] == "native")
        out += [f"### phi = {phi} (native DGEMM: {nat['max']:.1e} / {nat['median']:.1e})", "",
                "| moduli | accurate max / median | fast max / median |", "|---|---|---|"]
        for nm in list(moduli_range) + ["auto"]:
            cells = []
            for sc in SCALINGS:
                r = next(r for r in rows if r["phi"] == phi and r["scaling"] == sc
                         and r["moduli"] == nm)
                tag = f" (N={r['chosen']})" if nm == "auto" else ""
                mark = " *" if r["max"] <= nat["max"] else ""
                cells.append(f"{r['max']:.1e} / {r['median']:.1e}{tag}{mark}")
            out.append(f"| {nm} | " + " | ".join(cells) + " |")
        out.append("")
    out += ["`*`: at or below native DGEMM's max error.", "",
            "INT8 GEMMs per call: N for `fast`, N + 1 for `accurate` (the bound "
            "`ceil(128|X|) ceil(128|Y|)^T`); `auto` adds one float32 GEMM of the squared "
            "normalized operands. CPU times are not meaningful for the GPU.", "",
            "Fixed counts below the `auto` pick are what `ozlinalg.matmul(a, b, "
            "method=\"crt\", slices=N)` warns about (`AccuracyWarning` naming auto's count, "
            "[accuracy](accuracy.md#fixed-counts-too-few-warns)); this benchmark calls "
            "`crt_matmul_2d` directly, whose check is off by default (`check=False`).", ""]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--p", type=int, default=None)
    ap.add_argument("--phis", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    ap.add_argument("--moduli", type=int, nargs=2, default=[8, 20], metavar=("LO", "HI"))
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", default=str(ROOT / "docs" / "accuracy-crt.md"))
    ap.add_argument("--json", default=None, help="also write the raw rows here")
    args = ap.parse_args(argv)
    p = args.p or args.m
    mr = list(range(args.moduli[0], args.moduli[1] + 1))
    t0 = time.perf_counter()
    rows = run(args.m, args.n, p, args.phis, mr, args.seed)
    text = markdown(rows, args.m, args.n, p, args.seed, time.perf_counter() - t0, mr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    print(text)


if __name__ == "__main__":
    main()
