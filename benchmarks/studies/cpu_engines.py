"""Time against n of native DGEMM and of every method on the NumPy engines, and each
engine's exact INT8 GEMM rate: the data and the plot of docs/performance.md.

For each n: native DGEMM (NumPy's BLAS), one exact n x n x n INT8 slice product on
each engine (``int_matmul_sum``, ops/s; the oneDNN engine's against ``--peak-tops``),
and ``ozlinalg.matmul`` for each method (``slices="auto"``, or ``method:count`` such as
``hybrid-ef:8``; phi = 0.5 inputs) on each engine of ``--engines`` (``sgemm``,
``onednn``, ``avx2``), best of ``--repeat`` (the SGEMM engine once above
``--sgemm-repeat-max-n``: tens of seconds each at n = 4096). Native DGEMM is
re-measured before each engine's run, and each ratio uses the native time of
its own run.

Usage::

    python benchmarks/studies/cpu_engines.py --n 512 1024 2048 4096 --json cpu-engines.json \\
        --plot docs/img/cpu-engines.png --peak-tops 2.15
    python benchmarks/studies/cpu_engines.py --from-json cpu-engines.json --plot out.png
    python benchmarks/studies/cpu_engines.py --n 2048 --engines sgemm avx2 --threads 1 \\
        --clock cpu --methods hybrid-ef:8 hybrid-ef crt   # the AVX2 engine's table
"""
from __future__ import annotations

import argparse
import json
import os
import warnings

import numpy as np
from cpu_timing import add_arguments, best, configure

import ozlinalg
from ozlinalg.engines import get_engine
from ozlinalg.testing import random_matrix

METHODS = ["hybrid-ef", "bitmask-ef", "rn", "crt", "crt-fast"]


def measure(sizes, methods, engines, repeat, sgemm_repeat_max_n, args):
    # fixed counts (``method:count``) below auto's are asked for: no AccuracyWarning
    warnings.simplefilter("ignore", ozlinalg.AccuracyWarning)
    rows = []
    for n in sizes:
        rng = np.random.default_rng([n, 23])
        a = random_matrix(rng, n, n, 0.5)
        b = random_matrix(rng, n, n, 0.5)
        a @ b
        for engine in engines:
            with ozlinalg.options(engine=engine):
                eng = get_engine(np, engine)  # the engine of the options, by name
                configure(args, eng)
                t_nat = best(lambda a=a, b=b: a @ b, repeat)[0]
                row = dict(n=n, engine=engine, native=t_nat, load=os.getloadavg()[0],
                           describe=eng.describe(), methods={})
                # one exact INT8 slice product of random full-range digits, n x n x n
                x = eng.empty_slices(1, n, n, "bitmask")
                x[...] = rng.integers(-128, 128, x.shape)
                ws = eng.workspace(n, n)
                eng.int_matmul_sum(x, x, [(0, 0)], 128, 128, ws=ws)
                t8 = best(lambda e=eng, x=x, ws=ws: e.int_matmul_sum(x, x, [(0, 0)], 128,
                                                                     128, ws=ws),
                          repeat)[0]
                row["int8_gemm"] = t8
                row["int8_tops"] = 2.0 * n**3 / t8 / 1e12
                del x, ws
                print(f"n={n:>5} {engine:>6} INT8 GEMM {t8 * 1e3:.1f} ms "
                      f"({2.0 * n**3 / t8 / 1e9:.1f} Gops/s, {t_nat / t8:.2f}x native "
                      f"DGEMM's rate: {2.0 * n**3 / t_nat / 1e9:.1f} GFLOP/s)", flush=True)
                rep = repeat if engine != "sgemm" or n <= sgemm_repeat_max_n else 1
                for spec in methods:
                    meth, _, count = spec.partition(":")
                    kw = dict(method=meth, slices=int(count) if count else "auto")
                    with ozlinalg.profile() as prof:
                        ozlinalg.matmul(a, b, **kw)
                    t = best(lambda a=a, b=b, kw=kw: ozlinalg.matmul(a, b, **kw), rep)[0]
                    row["methods"][spec] = dict(seconds=t, ratio=t / t_nat,
                                                slices=prof.slices[0],
                                                int8_gemms=prof.int8_gemms)
                    print(f"n={n:>5} {engine:>6} {spec:<12} s={prof.slices[0]:>2} "
                          f"{t:8.3f} s  {t / t_nat:6.2f}x native ({t_nat:.3f} s)", flush=True)
                rows.append(row)
    return rows


def _cpu_name():
    """The CPU's model name (``/proc/cpuinfo``), else the machine type."""
    import platform

    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def plot(data, path, peak_tops=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    methods = list(dict.fromkeys(m for r in rows for m in r["methods"]))
    ncol = 3
    nrow = -(-(len(methods) + 1) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.3 * nrow), squeeze=False)
    styles = {"sgemm": ("tab:orange", "s", "SGEMM engine"),
              "onednn": ("tab:blue", "o", "INT8 engine (oneDNN)"),
              "avx2": ("tab:green", "^", "AVX2 engine (vpmaddwd)")}
    for ax, meth in zip(axes.flat, methods):
        nat = {}
        for r in rows:
            nat.setdefault(r["n"], []).append(r["native"])
        ns = sorted(nat)
        ax.plot(ns, [min(nat[n]) for n in ns], "k--", marker="x", label="native DGEMM")
        for engine, (color, marker, label) in styles.items():
            pts = sorted((r["n"], r["methods"][meth]["seconds"]) for r in rows
                         if r["engine"] == engine and meth in r["methods"])
            if pts:
                ax.plot(*zip(*pts), color=color, marker=marker, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{meth}" if ":" in meth else f"{meth} (slices auto)")
        ax.set_xlabel("n")
        ax.set_ylabel("seconds")
        ax.grid(True, which="both", alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    ax = axes.flat[len(methods)]
    pts = sorted((r["n"], r["int8_tops"]) for r in rows
                 if "int8_tops" in r and r["engine"] == "onednn")
    if pts:
        ax.plot(*zip(*pts), color="tab:blue", marker="o", label="oneDNN s8s8s32 GEMM")
        if peak_tops:
            ax.axhline(peak_tops, color="tab:red", ls=":", label=f"peak {peak_tops:.2f} TOPS")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, (peak_tops or max(p[1] for p in pts)) * 1.15)
        ax.set_title("INT8 engine: one n x n x n GEMM")
        ax.set_xlabel("n")
        ax.set_ylabel("TOPS")
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    for extra in list(axes.flat)[len(methods) + 1:]:
        extra.axis("off")
    threads = data.get("threads", "all")
    clock = "CPU time" if data.get("clock") == "cpu" else "wall clock"
    fig.suptitle(f"ozlinalg.matmul on {data.get('machine', 'CPU')}: phi = 0.5, "
                 f"{threads} thread(s), {clock}, time against n", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--engines", nargs="+", default=["sgemm", "onednn"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sgemm-repeat-max-n", type=int, default=2048)
    ap.add_argument("--peak-tops", type=float, default=None)
    add_arguments(ap)
    ap.add_argument("--json", default=None)
    ap.add_argument("--from-json", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as fh:
            data = json.load(fh)
    else:
        data = dict(machine=_cpu_name(),
                    threads=args.threads or os.cpu_count(), clock=args.clock,
                    rows=measure(args.n, args.methods, args.engines, args.repeat,
                                 args.sgemm_repeat_max_n, args))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(data, fh, indent=1)
    if args.plot:
        plot(data, args.plot, args.peak_tops)


if __name__ == "__main__":
    main()
