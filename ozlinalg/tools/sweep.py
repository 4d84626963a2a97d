"""Accuracy sweep: every method, slices 3..14, phi in {0.5, 1, 2, 4}.

For each phi it draws ``A`` (m x n) and ``B`` (n x p) with entries
``(U(0,1) - 0.5) * exp(phi * N(0,1))``, computes the EXACT product once
(python-flint integer arithmetic), and reports the max and median elementwise
relative error of native DGEMM, of every method at every slice count, and of
``slices="auto"`` (with the count it chose). The smallest slice count at which
each method's max error is at or below native DGEMM's is the "DGEMM-level"
column, to compare with ozIMMU_EF's published counts (docs/peers.md: 9, 9, 10, 11-12).

Usage (``benchmarks/studies/accuracy.py`` and ``python -m ozlinalg accuracy`` run this)::

    python benchmarks/studies/accuracy.py                      # m = p = 256, n = 4096
    python -m ozlinalg accuracy --n 1024 --phis 0.5 4 --out /tmp/acc.md --no-plot

Needs python-flint (exact reference); matplotlib for the plot.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import ozlinalg
from ozlinalg.ozaki.params import validate_method
from ozlinalg.testing import ExactReference, error_stats, random_matrix


def problems(m, n, p, phis, seed):
    """Per phi: ``(phi, a, b, ref, native_max, native_median)`` — the inputs, their
    exact product and native DGEMM's max / median relative error against it."""
    for phi in phis:
        rng = np.random.default_rng([seed, int(phi * 1000)])
        a = random_matrix(rng, m, n, phi)
        b = random_matrix(rng, n, p, phi)
        ref = ExactReference(a, b)
        mx, med = error_stats(ref.relative_errors(a @ b))
        yield phi, a, b, ref, mx, med


def run(m, n, p, phis, methods, slice_range, seed, progress=True):
    """Measure; return a list of dict rows (one per phi x method x slices, plus native/auto)."""
    rows = []
    try:
        from tqdm import tqdm
    except ImportError:  # optional
        tqdm = None
    total = len(phis) * len(methods) * (len(slice_range) + 1)
    bar = tqdm(total=total, desc="accuracy", disable=not progress) if tqdm else None
    for phi, a, b, ref, mx, med in problems(m, n, p, phis, seed):
        rows.append(dict(phi=phi, method="native", slices=None, max=mx, median=med))
        for meth in methods:
            for s in list(slice_range) + ["auto"]:
                with ozlinalg.profile() as prof:
                    c = ozlinalg.matmul(a, b, method=meth, slices=s)
                mx, med = error_stats(ref.relative_errors(c))
                rows.append(dict(phi=phi, method=meth, slices=s, chosen=prof.slices[-1],
                                 max=mx, median=med, int8_gemms=prof.int8_gemms,
                                 passes=prof.accumulation_passes))
                if bar:
                    bar.update()
    if bar:
        bar.close()
    return rows


def dgemm_level(rows, phi, meth):
    """Smallest slice count whose max error <= native DGEMM's (None if never)."""
    native = next(r["max"] for r in rows if r["phi"] == phi and r["method"] == "native")
    ok = [r["slices"] for r in rows if r["phi"] == phi and r["method"] == meth
          and r["slices"] != "auto" and r["max"] <= native]
    return min(ok) if ok else None


OZAKI_I = [m for m in ozlinalg.METHODS if not m.startswith("crt")]

ANCHOR_EF = {0.5: "9", 1.0: "9", 2.0: "10", 4.0: "11-12"}


def markdown(rows, m, n, p, methods, seed, elapsed):
    phis = sorted({r["phi"] for r in rows})
    out = [
        f"# Accuracy of the emulated DGEMM (m = p = {m}, n = {n})",
        "",
        f"Inputs `(U(0,1) - 0.5) * exp(phi * N(0,1))`, seed {seed}; errors are elementwise "
        "`|C - C_exact| / |C_exact|` against the EXACT product (python-flint integers).",
        f"Reproduce: `python benchmarks/studies/accuracy.py --m {m} --n {n} --p {p} --seed {seed}` "
        f"({elapsed:.0f} s on the machine that wrote this).",
        "",
        "## Slices needed for DGEMM-level accuracy (max error <= native DGEMM's)",
        "",
        "| phi | native max | native median | " + " | ".join(methods)
        + " | auto (hybrid-ef) chose | auto max | ozIMMU_EF (published) |",
        "|---|---|---|" + "---|" * len(methods) + "---|---|---|",
    ]
    for phi in phis:
        nat = next(r for r in rows if r["phi"] == phi and r["method"] == "native")
        auto = next((r for r in rows if r["phi"] == phi and r["method"] == "hybrid-ef"
                     and r["slices"] == "auto"), None)
        cells = [str(dgemm_level(rows, phi, mt) or ">max") for mt in methods]
        out.append(
            f"| {phi} | {nat['max']:.2e} | {nat['median']:.2e} | " + " | ".join(cells)
            + (f" | {auto['chosen']} | {auto['max']:.2e}" if auto else " | - | -")
            + f" | {ANCHOR_EF.get(phi, '-')} |"
        )
    out += ["", "## Max / median relative error per method and slice count", ""]
    for phi in phis:
        out += [f"### phi = {phi}", "",
                "| slices | " + " | ".join(methods) + " |",
                "|---|" + "---|" * len(methods)]
        slist = sorted({r["slices"] for r in rows if r["phi"] == phi and r["slices"]
                        not in (None, "auto")})
        for s in slist + ["auto"]:
            cells = []
            for mt in methods:
                r = next(r for r in rows if r["phi"] == phi and r["method"] == mt
                         and r["slices"] == s)
                tag = f" (s={r['chosen']})" if s == "auto" else ""
                cells.append(f"{r['max']:.1e} / {r['median']:.1e}{tag}")
            out.append(f"| {s} | " + " | ".join(cells) + " |")
        out.append("")
    out += ["## INT8 products and FP64 accumulation passes per call (from `ozlinalg.profile()`)",
            "", "| slices | " + " | ".join(f"{mt} GEMMs / passes" for mt in methods) + " |",
            "|---|" + "---|" * len(methods)]
    phi0 = phis[0]
    for s in sorted({r["slices"] for r in rows if r["slices"] not in (None, "auto")}):
        cells = []
        for mt in methods:
            r = next(r for r in rows if r["phi"] == phi0 and r["method"] == mt
                     and r["slices"] == s)
            cells.append(f"{r['int8_gemms']} / {r['passes']}")
        out.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def plot(rows, path, methods):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phis = sorted({r["phi"] for r in rows})
    fig, axes = plt.subplots(1, len(phis), figsize=(4.2 * len(phis), 3.8), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, phi in zip(axes, phis):
        for mt in methods:
            pts = sorted((r["slices"], r["max"]) for r in rows if r["phi"] == phi
                         and r["method"] == mt and r["slices"] != "auto")
            ax.semilogy([s for s, _ in pts], [max(e, 1e-18) for _, e in pts], marker="o",
                        ms=3, label=mt)
        nat = next(r["max"] for r in rows if r["phi"] == phi and r["method"] == "native")
        ax.axhline(nat, color="k", ls="--", lw=1, label="native DGEMM")
        ax.set_title(f"phi = {phi}")
        ax.set_xlabel("slices")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("max relative error (exact reference)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None, prog=None):
    ap = argparse.ArgumentParser(
        prog=prog, description="Accuracy sweep: every method, slices 3..14, phi in "
                               "{0.5, 1, 2, 4}, against the exact product (needs "
                               "python-flint).")
    ap.add_argument("--m", type=int, default=256, help="rows of A (default 256)")
    ap.add_argument("--n", type=int, default=4096,
                    help="columns of A, rows of B: the inner dimension (default 4096)")
    ap.add_argument("--p", type=int, default=None, help="columns of B (default: --m)")
    ap.add_argument("--phis", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0],
                    metavar="PHI",
                    help="spreads of the entries' exponents, one problem each: "
                         "(U(0,1) - 0.5) * exp(phi * N(0,1)) (default 0.5 1 2 4)")
    ap.add_argument("--methods", nargs="+", default=OZAKI_I, metavar="METHOD",
                    help="methods to sweep (default: the Ozaki-I methods; crt: "
                         "benchmarks/studies/accuracy_crt.py)")
    ap.add_argument("--slices", type=int, nargs=2, default=[3, 14], metavar=("LO", "HI"),
                    help="slice counts tried, LO to HI inclusive, besides auto (default 3 14)")
    ap.add_argument("--seed", type=int, default=2026, help="random seed (default 2026)")
    ap.add_argument("--out", default="accuracy-table.md", help="markdown table to write")
    ap.add_argument("--plot", default="accuracy.png", help="PNG plot to write")
    ap.add_argument("--no-plot", action="store_true", help="draw no plot")
    ap.add_argument("--json", default=None, help="also write the raw rows here")
    args = ap.parse_args(argv)
    for meth in args.methods:  # a typo is a usage error now, not a traceback later
        try:
            validate_method(meth)
        except ValueError as e:
            ap.error(f"argument --methods: {str(e).removeprefix('ozlinalg: ')}")
    p = args.p or args.m
    t0 = time.perf_counter()
    rows = run(args.m, args.n, p, args.phis, args.methods,
               range(args.slices[0], args.slices[1] + 1), args.seed,
               progress=sys.stderr.isatty())
    elapsed = time.perf_counter() - t0
    text = markdown(rows, args.m, args.n, p, args.methods, args.seed, elapsed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    if not args.no_plot:
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot(rows, args.plot, args.methods)
    print(text)


if __name__ == "__main__":
    main()
