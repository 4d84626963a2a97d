"""The emulated product's cost against native DGEMM as n grows, with default options.

For each n (default 1024 to 8192) and method (default ``crt`` and ``hybrid-ef``, counts
``auto``): the product's time over DGEMM's, measured in the same run, and its split
(``ozlinalg.profile()``: splitting / INT8 GEMMs / accumulation), with the output tiles of
the memory plan the default ``memory_limit`` gives. The cost should grow as n^3 like
DGEMM's: the ratio at n = 6144 and 8192 within 10 % of n = 4096's.

    python benchmarks/studies/cost_against_n.py --clock cpu --threads 1 --repeat 2 \\
        --json benchmarks/results/cost-against-n-epyc-1t-2026-12-02.json
    python benchmarks/studies/cost_against_n.py --replot FILE.json \\
        --plot docs/img/cost-against-n.png
    python benchmarks/studies/cost_against_n.py --n 1024 2048 4096 --methods crt \\
        --json cost.json --plot docs/img/cost-against-n.png
"""
from __future__ import annotations

import argparse
import json
import platform

import numpy as np
from cpu_timing import add_arguments, best, configure

import ozlinalg
from ozlinalg._matmul import memory_plan
from ozlinalg.engines import get_engine


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1024, 2048, 4096, 6144, 8192])
    ap.add_argument("--methods", nargs="+", default=["crt", "hybrid-ef"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None)
    add_arguments(ap)
    ap.add_argument("--replot", default=None, help="only plot the rows of this --json file")
    args = ap.parse_args(argv)
    if args.replot:
        with open(args.replot) as f:
            data = json.load(f)
        plot(data["rows"], args.plot, sorted({r["method"] for r in data["rows"]}))
        return
    eng = get_engine(np)
    configure(args, eng)
    head = (f"{platform.processor() or platform.machine()}; {eng.describe()}; clock "
            f"{args.clock}, threads {args.threads or 'all'}; default memory limit "
            f"{eng.memory_limit() / 2**30:.1f} GiB")
    print(head, flush=True)
    rng = np.random.default_rng(0)
    rows = []
    for n in args.n:
        a = rng.standard_normal((n, n))
        b = rng.standard_normal((n, n))
        t_nat, _ = best(lambda a=a, b=b: a @ b, args.repeat)
        for m in args.methods:
            with ozlinalg.profile() as prof:
                t, _ = best(lambda a=a, b=b, m=m: ozlinalg.matmul(a, b, method=m),
                            args.repeat)
            plan = memory_plan(n, n, n, method=m, slices=prof.slices[-1])
            r = dict(n=n, method=m, count=prof.slices[-1], time=t, native=t_nat,
                     ratio=t / t_nat, tiles=list(plan.tiles),
                     split=prof.time_split / args.repeat, int8=prof.time_int8 / args.repeat,
                     accumulate=prof.time_accumulate / args.repeat)
            rows.append(r)
            print(f"n={n:5} {m:10} count {r['count']:2}  {t:8.2f} s  DGEMM {t_nat:7.2f} s  "
                  f"ratio {r['ratio']:.2f}  tiles {plan.tiles}  split {r['split']:.2f} "
                  f"int8 {r['int8']:.2f} acc {r['accumulate']:.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=head, rows=rows), f, indent=1)
    if args.plot:
        plot(rows, args.plot, args.methods)


def plot(rows, path, methods):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m in methods:
        pts = [r for r in rows if r["method"] == m]
        ax.plot([r["n"] for r in pts], [r["ratio"] for r in pts], "o-", label=m)
    ax.set(xlabel="n", ylabel="time / DGEMM", ylim=(0, None),
           title="emulated product against DGEMM, default options")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
