"""What ``accuracy="faithful"`` costs against the DGEMM-level mode, in one run.

For each size n (default 2048 and 4096; phi = 0.5, 1 and 2 inputs) and method
(hybrid-ef, crt) it measures, best of ``--repeat`` on the configured clock
(``--clock cpu --threads 1``: one core's CPU time, robust to the load of a shared
machine), the product in ``accuracy="dgemm"`` and in ``accuracy="faithful"``
(the two alternate, so that both see the same machine), their ratio, the counts
each chose, the time split of the last run of each (``split``: splitting, INT8
GEMMs, accumulation incl. the certificate and the exact recomputation), and
the faithful mode's certified fraction (entries the bound
certified before any recomputation) and recomputed entries, with the machine
load before and after.

``--sweep``: for fixed counts instead of ``auto`` (``--sweep-n``, default 1024;
``--extra E``: the E counts above ``auto``'s), the certified fraction per count,
the recomputed entries and the time against the DGEMM-level product: what the
choice of ``faithful.EXTRA_SLICES`` / ``EXTRA_MODULI`` rests on.

Usage::

    python benchmarks/studies/faithful_cost.py --n 2048 4096 --repeat 3 --json out.json
    python benchmarks/studies/faithful_cost.py --threads 1 --clock cpu
    python benchmarks/studies/faithful_cost.py --sweep
    python benchmarks/studies/faithful_cost.py --sweep --sweep-n 2048 --extra 4 --phis 0.5 1 \
        --threads 1 --clock cpu
"""
from __future__ import annotations

import argparse
import json
import os
import platform

import numpy as np
from cpu_timing import add_arguments, best, configure

import ozlinalg
from ozlinalg.engines import get_engine
from ozlinalg.testing import random_matrix


def run(a, b, method, accuracy, slices="auto"):
    with ozlinalg.profile() as prof:
        ozlinalg.matmul(a, b, method=method, accuracy=accuracy, slices=slices)
    return prof


def measure(n, phi, method, repeat):
    rng = np.random.default_rng([n, int(10 * phi), 29])
    a = random_matrix(rng, n, n, phi)
    b = random_matrix(rng, n, n, phi)
    run(a[:64], b[:, :64], method, "faithful")  # compile / warm
    times = {"dgemm": float("inf"), "faithful": float("inf")}
    profs = {}
    for _ in range(max(1, repeat)):
        for acc in ("dgemm", "faithful"):
            t, prof = best(lambda acc=acc: run(a, b, method, acc), 1)
            times[acc] = min(times[acc], t)
            profs[acc] = prof
    f = profs["faithful"]
    row = dict(n=n, phi=phi, method=method, seconds_dgemm=times["dgemm"],
               seconds_faithful=times["faithful"],
               ratio=times["faithful"] / times["dgemm"],
               count_dgemm=profs["dgemm"].slices[0], count_faithful=f.slices[0],
               int8_gemms_dgemm=profs["dgemm"].int8_gemms, int8_gemms_faithful=f.int8_gemms,
               certified_fraction=f.entries_certified / (n * n),
               recomputed=f.entries_recomputed,
               split={acc: dict(split=p.time_split, int8=p.time_int8,
                                accumulate=p.time_accumulate)
                      for acc, p in profs.items()})
    print(f"  n={n} phi={phi} {method:<9} dgemm {times['dgemm']:7.3f} s (count "
          f"{row['count_dgemm']})  faithful {times['faithful']:7.3f} s (count "
          f"{row['count_faithful']})  ratio {row['ratio']:.2f}  certified "
          f"{100 * row['certified_fraction']:.4f}%  recomputed {row['recomputed']}",
          flush=True)
    return row


def sweep(n=1024, phis=(0.5, 1.0, 2.0, 4.0), extra=None):
    """Per count above the DGEMM-level one (``extra``: how many more; default the
    ranges below), the certified fraction, the recomputed entries and the time
    against the DGEMM-level product."""
    rows = []
    for phi in phis:
        rng = np.random.default_rng([n, int(10 * phi), 31])
        a = random_matrix(rng, n, n, phi)
        b = random_matrix(rng, n, n, phi)
        run(a[:64], b[:, :64], "crt", "faithful")  # compile / warm
        for method, counts in (("hybrid-ef", range(9, 15)), ("crt", range(15, 24))):
            t_auto, prof = best(lambda a=a, b=b, method=method: run(a, b, method, "dgemm"), 1)
            auto = prof.slices[0]
            if extra:
                counts = range(auto + 1, auto + 1 + extra)
            line = []
            for s in counts:
                t, p = best(lambda a=a, b=b, s=s, method=method:
                            run(a, b, method, "faithful", slices=s), 1)
                frac = p.entries_certified / (n * n)
                rows.append(dict(n=n, phi=phi, method=method, auto=auto, count=s,
                                 certified_fraction=frac, recomputed=p.entries_recomputed,
                                 ratio=t / t_auto))
                line.append(f"{s}: {100 * frac:.3f}% ({t / t_auto:.2f}x)")
            print(f"  phi={phi} {method:<9} (dgemm auto {auto})  " + "  ".join(line),
                  flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--phis", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--methods", nargs="+", default=["hybrid-ef", "crt"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--sweep-n", type=int, default=1024)
    ap.add_argument("--extra", type=int, default=None,
                    help="--sweep: counts auto+1 .. auto+EXTRA instead of fixed ranges")
    ap.add_argument("--json", default=None)
    add_arguments(ap)
    args = ap.parse_args(argv)
    eng = get_engine(np)
    configure(args, eng)
    info = dict(engine=eng.describe(), machine=platform.processor() or platform.machine(),
                threads=args.threads, clock=args.clock, load_before=os.getloadavg())
    print(f"engine: {info['engine']}; clock {args.clock}, threads {args.threads}; "
          f"load {info['load_before']}")
    if args.sweep:
        rows = sweep(args.sweep_n, args.phis, args.extra)
    else:
        rows = [measure(n, phi, meth, args.repeat) for n in args.n for phi in args.phis
                for meth in args.methods]
    info["load_after"] = os.getloadavg()
    print(f"load after: {info['load_after']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(info=info, rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
