"""Refined solves against their baselines, time and accuracy against κ.

For random test matrices of 2-norm condition number κ (geometrically spaced singular
values, a known solution ``x``: ``b = A x``), in the same run:

* ``dgesv`` / ``dposv``: SciPy's LAPACK (the native FP64 baseline, ratio 1);
* ``fp32-ir``: ``sgetrf`` / ``spotrf`` plus refinement with FP64 residuals and FP32
  corrections (what LAPACK ``dsgesv`` / ``dsposv`` do; SciPy exposes the pieces), with
  ``dsgesv``'s stopping test and 30 steps at most; "no" in ``conv`` where it does not
  converge (``dsgesv`` would then fall back to ``dgesv``: its time is added);
* ``emulated``: ozlinalg's DGEMM-level LU / Cholesky solve (``refine=False``);
* ``refined <method>``: ``ozlinalg.solve(refine=True)`` with the method's ladder.

Columns: time and its ratio to the LAPACK baseline, normwise backward error
``||b - A x||_inf / (||A||_inf ||x||_inf + ||b||_inf)``, forward error
``||x - x_true||_inf / ||x_true||_inf``, and for the refined solves the counts tried and
the refinement steps (from ``ozlinalg.profile()``); for the emulated solves the floor, the
time of their INT8 products alone (the engine's timers), and the time over it.

    python benchmarks/studies/refined_solve.py --n 4096 --kappa 1e2 1e6 1e10 1e14
    python benchmarks/studies/refined_solve.py --n 2048 --clock cpu --threads 1 \\
        --plot docs/img/refined-solve.png
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import numpy as np
import scipy.linalg as sla
from scipy.linalg import lapack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_timing  # noqa: E402

import ozlinalg  # noqa: E402


def test_matrix(rng, n, kappa, spd):
    q1 = np.linalg.qr(rng.standard_normal((n, n)))[0]
    q2 = q1 if spd else np.linalg.qr(rng.standard_normal((n, n)))[0]
    s = np.logspace(0, -np.log10(kappa), n)
    a = (q1 * s) @ q2.T
    if spd:
        a = (a + a.T) / 2
    return np.asfortranarray(a)


def errors(a, b, x, x_true):
    r = np.abs(b - a @ x).max()
    eta = r / (np.abs(a).sum(axis=1).max() * np.abs(x).max() + np.abs(b).max())
    fwd = np.abs(x - x_true).max() / np.abs(x_true).max()
    return float(eta), float(fwd)


def fp32_ir(a, b, spd, max_steps=30):
    """FP32 factorization, FP64 residuals, FP32 corrections: LAPACK dsgesv / dsposv."""
    n = a.shape[0]
    cte = np.abs(a).sum(axis=1).max() * np.finfo(np.float64).eps * np.sqrt(n)
    a32 = a.astype(np.float32)
    if spd:
        c, info = lapack.spotrf(a32, lower=1)

        def corr(r):
            return lapack.spotrs(c, r.astype(np.float32), lower=1)[0]
    else:
        lu, piv, info = lapack.sgetrf(a32)

        def corr(r):
            return lapack.sgetrs(lu, piv, r.astype(np.float32))[0]
    if info != 0:
        return None, 0
    x = corr(b).astype(np.float64)
    for step in range(max_steps + 1):
        r = b - a @ x
        if np.abs(r).max() <= np.abs(x).max() * cte:
            return x, step
        if step == max_steps:
            break
        x += corr(r)
    return None, max_steps


def case(args, rng, kind, kappa):
    """The rows of one matrix: every solver on ``A x = b``, ``x`` known."""
    spd = kind == "pos"
    a = test_matrix(rng, args.n, kappa, spd)
    x_true = rng.standard_normal(args.n)
    b = a @ x_true
    assume = "pos" if spd else "gen"
    rows = []

    def row(solver, t, x, t_nat, **extra):
        eta, fwd = errors(a, b, x, x_true)
        rows.append(dict(kind=kind, kappa=kappa, solver=solver, time=t, ratio=t / t_nat,
                         eta=eta, fwd=fwd, **{"conv": "", "counts": "", "steps": "",
                                               "floor": None, **extra}))

    def native():
        return lapack.dposv(a, b, lower=1)[1] if spd else lapack.dgesv(a, b)[2]

    t_nat, x = cpu_timing.best(native, args.repeat)
    row("dposv" if spd else "dgesv", t_nat, x, t_nat)

    t, (x, steps) = cpu_timing.best(lambda: fp32_ir(a, b, spd), args.repeat)
    conv = "yes" if x is not None else "no"
    if x is None:  # dsgesv falls back to dgesv
        x = sla.solve(a, b, assume_a=assume)
        t += t_nat
    row("fp32-ir", t, x, t_nat, conv=conv, counts="fp32", steps=steps)

    solvers = [("emulated", args.methods[0], False)]
    solvers += [(f"refined {m}", m, True) for m in args.methods]
    for name, method, refine in solvers:
        def call(refine=refine):
            return ozlinalg.solve(a, b, assume_a=assume, refine=refine)

        with ozlinalg.options(method=method):
            ozlinalg.solve(a[:256, :256], b[:256], assume_a=assume, refine=refine)  # warm
            with ozlinalg.profile() as prof:
                t, x = cpu_timing.best(call, args.repeat)
        # the floor: the INT8 products' own time (the engine's timers), per run
        floor = sum(c.time_int8 for c in prof.calls) / max(1, args.repeat)
        rec = prof.refined[-1] if prof.refined else None
        if rec is None:
            row(name, t, x, t_nat, counts="auto", floor=floor)
            continue
        steps = f"{rec.iterations}" + (f"+{rec.gmres_steps}g" if rec.gmres_steps else "")
        row(name, t, x, t_nat, conv="fell back" if rec.fell_back else "yes",
            counts="/".join(map(str, rec.counts)), steps=steps, floor=floor)
    return rows


def run(args):
    rng = np.random.default_rng(args.seed)
    cpu_timing.configure(args, ozlinalg.engines.get_engine(np))
    rows = []
    for kind in args.kinds:
        for kappa in args.kappa:
            for r in case(args, rng, kind, kappa):
                rows.append(r)
                fl = (f"  floor {r['floor']:.3f} s ({r['time'] / r['floor']:.2f}x)"
                      if r["floor"] else "")
                print(f"{r['kind']:>4} {r['kappa']:8.0e} {r['solver']:>18} {r['time']:8.3f} s "
                      f"{r['ratio']:6.2f}x  eta {r['eta']:.1e}  fwd {r['fwd']:.1e}  "
                      f"{r['conv']:>9} {r['counts']:>8} {r['steps']}{fl}", flush=True)
    return rows


def table(rows):
    out = ["| matrix | κ | solver | time (s) | ratio to LAPACK | INT8 floor (s) | "
           "time / floor | backward error | forward error | converged | counts | steps |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fl = (f"{r['floor']:.3f} | {r['time'] / r['floor']:.2f}" if r.get("floor")
              else "- | -")
        out.append(f"| {r['kind']} | {r['kappa']:.0e} | {r['solver']} | {r['time']:.3f} | "
                   f"{r['ratio']:.2f} | {fl} | {r['eta']:.1e} | {r['fwd']:.1e} | "
                   f"{r['conv']} | {r['counts']} | {r['steps']} |")
    return "\n".join(out)


def plot(rows, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = sorted({r["kind"] for r in rows})
    fig, axes = plt.subplots(2, len(kinds), figsize=(5.5 * len(kinds), 7), squeeze=False)
    for j, kind in enumerate(kinds):
        sub = [r for r in rows if r["kind"] == kind]
        for solver in dict.fromkeys(r["solver"] for r in sub):
            pts = [r for r in sub if r["solver"] == solver]
            k = [r["kappa"] for r in pts]
            axes[0, j].plot(k, [r["ratio"] for r in pts], "o-", label=solver)
            axes[1, j].plot(k, [r["eta"] for r in pts], "o-", label=f"{solver} backward")
            axes[1, j].plot(k, [r["fwd"] for r in pts], "x--", label=f"{solver} forward")
        axes[0, j].set(xscale="log", ylabel="time / LAPACK", title=f"{kind}: {title}")
        axes[0, j].axhline(1.0, color="gray", lw=0.8)
        axes[1, j].set(xscale="log", yscale="log", xlabel="κ", ylabel="error")
        axes[0, j].legend(fontsize=7)
        axes[1, j].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--kappa", type=float, nargs="+", default=[1e2, 1e6, 1e10, 1e14])
    ap.add_argument("--kinds", nargs="+", default=["gen", "pos"], choices=["gen", "pos"])
    ap.add_argument("--methods", nargs="+", default=["hybrid-ef", "crt"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--plot", help="write the figure to this file (matplotlib)")
    cpu_timing.add_arguments(ap)
    args = ap.parse_args(argv)
    eng = ozlinalg.engines.get_engine(np)
    head = (f"n = {args.n}, {platform.processor() or platform.machine()}, "
            f"{eng.describe()}, clock {args.clock}, threads {args.threads or 'all'}")
    print(head)
    rows = run(args)
    print()
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=head, rows=rows), f, indent=1)
    if args.plot:
        plot(rows, args.plot, f"n = {args.n}")


if __name__ == "__main__":
    main()
