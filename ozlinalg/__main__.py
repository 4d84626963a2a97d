"""``python -m ozlinalg``: the main job from a shell.

Subcommands
-----------
compare   time and accuracy of every emulated-GEMM method against native FP64
          on one problem (the default job; CPU, or the GPU when CuPy finds one;
          --dask N: on a local dask.distributed cluster of N workers)
solve     solve A x = b from .npy files (or an embedded problem) by blocked LU
          on the emulated GEMM, with the residual beside native LAPACK's
accuracy  sweep phi x slices x methods against the exact reference
run       run a Python program with numpy.linalg / scipy.linalg routed to the
          emulation from its first import on (``run script.py [args]``,
          ``run -m module [args]``; see ``run --help``)
tune      measure where emulation pays on this machine (the crossovers of the
          backend's "performant" strategy) and write the tuning cache
          (docs/tuning.md; see ``tune --help``)

Without a subcommand (nothing, or options only) it runs ``compare``. The texts
``--help`` shows are written out in :func:`_parser`, not taken from this docstring:
argparse prints them as they are, reST markup included.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import ozlinalg
from ozlinalg.ozaki.faithful import FAITHFUL_METHODS


def _device(name):
    if name == "cpu":
        return np, "cpu"
    from ._array import cupy_or_none

    cp = cupy_or_none()
    try:
        ok = cp is not None and cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        ok = False
    if name == "gpu" and not ok:
        raise SystemExit("ozlinalg: --device gpu asked for, but CuPy finds no CUDA device")
    return (cp, "gpu") if ok else (np, "cpu")


def _best_time(fn, sync, repeat):
    best = float("inf")
    out = None
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best, out


def cmd_compare(args):
    from .testing import random_matrix

    if args.dask:  # a local dask.distributed cluster of N workers
        from .tools.dask_cluster import compare

        return compare(args)
    xp, dev = _device(args.device)
    sync = (lambda: xp.cuda.Device().synchronize()) if dev == "gpu" else (lambda: None)
    rng = np.random.default_rng(args.seed)
    n = args.n
    a_h = random_matrix(rng, n, n, args.phi)
    b_h = random_matrix(rng, n, n, args.phi)
    a, b = xp.asarray(a_h), xp.asarray(b_h)
    try:
        from .testing import ExactReference

        ref = ExactReference(a_h[: args.check_rows], b_h) if args.check_rows else None
    except ImportError:
        ref = None

    def err(c):
        if ref is None:
            return float("nan"), float("nan")
        from ._array import to_numpy
        from .testing import error_stats

        return error_stats(ref.relative_errors(to_numpy(c)[: args.check_rows]))

    rows = []
    t_nat, c_nat = _best_time(lambda: xp.matmul(a, b), sync, args.repeat)
    mx, med = err(c_nat)
    rows.append(dict(method="native FP64", slices="-", seconds=t_nat,
                     gflops=2 * n**3 / t_nat / 1e9, ratio=1.0, max_err=mx, median_err=med))
    methods = list(ozlinalg.METHODS) if args.methods == ["all"] else args.methods
    for meth in _progress(methods, "methods"):
        with ozlinalg.profile() as prof:
            t, c = _best_time(
                lambda meth=meth: ozlinalg.matmul(a, b, method=meth, slices=args.slices),
                sync, args.repeat)
        mx, med = err(c)
        rows.append(dict(method=meth, slices=prof.slices[-1], seconds=t,
                         int8_seconds=_floor(prof), gflops=2 * n**3 / t / 1e9,
                         ratio=t / t_nat, max_err=mx, median_err=med,
                         int8_gemms=prof.calls[-1].int8_gemms, accuracy="dgemm"))
    if args.accuracy == "faithful":
        faithful = [m for m in methods if m in FAITHFUL_METHODS]
    elif args.accuracy == "both":  # each scheme's default method, beside its DGEMM row
        faithful = [m for m in methods if m in ("hybrid-ef", "crt")]
    else:
        faithful = []
    for meth in _progress(faithful, "faithful"):
        with ozlinalg.profile() as prof:
            t, c = _best_time(
                lambda meth=meth: ozlinalg.matmul(a, b, method=meth, slices=args.slices,
                                                  accuracy="faithful"),
                sync, args.repeat)
        mx, med = err(c)
        rows.append(dict(method=f"{meth} F", slices=prof.slices[-1], seconds=t,
                         int8_seconds=_floor(prof), gflops=2 * n**3 / t / 1e9,
                         ratio=t / t_nat, max_err=mx, median_err=med,
                         int8_gemms=prof.calls[-1].int8_gemms, accuracy="faithful"))
    engine = _engine_line(xp)
    if args.plot:
        _plot_compare(rows, args.plot, f"n = {n}, phi = {args.phi}, {dev}")
    if args.json:
        json.dump(dict(device=dev, engine=engine, n=n, phi=args.phi, rows=rows), sys.stdout,
                  indent=1)
        print()
        return
    print(f"ozlinalg {ozlinalg.__version__}: C = A @ B, n = {n}, phi = {args.phi}, "
          f"device = {dev}, errors vs exact reference on {args.check_rows} rows")
    print(f"engine: {engine}")
    if faithful:
        print('"F": accuracy="faithful", every entry within one ulp of the exact product, '
              "certified")
    print('"INT8 [s]": the time of the method\'s INT8 products alone (its floor on this '
          'engine); "%": their share of the whole time')
    print(f"{'method':<12} {'slices':>6} {'time [s]':>9} {'INT8 [s]':>9} {'%':>4} "
          f"{'GFLOP/s':>8} {'x native':>9} {'max rel err':>11} {'median':>9}")
    for r in rows:
        fl = r.get("int8_seconds")
        floor = f"{fl:9.4f} {100 * fl / r['seconds']:4.0f}" if fl else f"{'-':>9} {'-':>4}"
        print(f"{r['method']:<12} {r['slices']!s:>6} {r['seconds']:9.4f} {floor} "
              f"{r['gflops']:8.1f} {r['ratio']:9.1f} {r['max_err']:11.2e} "
              f"{r['median_err']:9.2e}")


def _floor(prof):
    """Seconds of the INT8 products of the fastest run in `prof` (the engine's own
    timers; None where no product was timed)."""
    runs = [c for c in prof.calls if c.time_total > 0]
    if not runs:
        return None
    best = min(runs, key=lambda c: c.time_total)
    return best.time_int8 or None


def _engine_line(xp):
    """What multiplies the INT8 slices: engine, library, ISA, and why it was chosen."""
    from ._options import current_engine

    return current_engine(xp).describe()


def _plot_compare(rows, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["method"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.barh(names, [r["ratio"] for r in rows], color="tab:blue")
    ax1.set_xlabel("time / native FP64")
    ax1.set_xscale("log")
    ax2.barh(names, [max(r["max_err"], 1e-18) for r in rows], color="tab:orange")
    ax2.set_xscale("log")
    ax2.set_xlabel("max relative error (exact reference)")
    ax2.set_yticklabels([])
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cmd_solve(args):
    import scipy.linalg as sla

    from .lapack import getrf, getrs

    xp, dev = _device(args.device)
    sync = (lambda: xp.cuda.Device().synchronize()) if dev == "gpu" else (lambda: None)
    if args.a is None:
        from .testing import random_matrix

        rng = np.random.default_rng(args.seed)
        a_h = random_matrix(rng, args.n, args.n, args.phi)
        b_h = rng.standard_normal(args.n)
        source = f"embedded random problem n = {args.n}, phi = {args.phi}"
    else:
        if args.b is None:
            raise SystemExit("ozlinalg solve: give both A.npy and b.npy")
        a_h = np.load(args.a)
        b_h = np.load(args.b)
        if a_h.ndim != 2 or a_h.shape[0] != a_h.shape[1]:
            raise SystemExit(f"ozlinalg solve: A must be square, got shape {a_h.shape}")
        if b_h.shape[0] != a_h.shape[0]:
            raise SystemExit(f"ozlinalg solve: b has shape {b_h.shape}, A {a_h.shape}")
        source = f"{args.a} {a_h.shape}, {args.b} {b_h.shape}"
    if args.dask:  # a local dask.distributed cluster of N workers
        from .tools.dask_cluster import solve

        return solve(args, np.asarray(a_h, dtype=float), np.asarray(b_h, dtype=float), source)
    a, b = xp.asarray(a_h, dtype=float), xp.asarray(b_h, dtype=float)
    kw = dict(slices=args.slices, method=args.method, block_size=args.block_size, min_size=0)
    # a fixed count or panel width asks for the plain blocked LU: no refinement
    refine = {"true": True, "false": False, "auto": "auto"}[args.refine]
    if args.slices != "auto" or args.block_size is not None:
        refine = False
    opts = {} if args.method is None else {"method": args.method}
    with ozlinalg.profile() as prof, ozlinalg.options(**opts):
        sync()
        t0 = time.perf_counter()
        if refine:
            x = ozlinalg.solve(a, b, refine=refine)
        else:
            lu, piv = getrf(a, **kw)
            x = getrs(lu, piv, b, **kw)
        sync()
        t_emul = time.perf_counter() - t0
    t0 = time.perf_counter()
    x_nat = sla.solve(a_h, b_h) if dev == "cpu" else xp.linalg.solve(a, b)
    sync()
    t_nat = time.perf_counter() - t0

    def residual(xx):
        from ._array import to_numpy

        xx = to_numpy(xx).astype(float)
        r = a_h @ xx - b_h
        return float(np.linalg.norm(r, np.inf) / (np.linalg.norm(a_h, np.inf)
                                                  * np.linalg.norm(xx, np.inf)
                                                  + np.linalg.norm(b_h, np.inf)))

    res = dict(source=source, device=dev, engine=_engine_line(xp), n=a_h.shape[0],
               seconds=t_emul,
               native_seconds=t_nat, residual=residual(x), native_residual=residual(x_nat),
               emulated_flop_share=prof.emulated_flop_share, slices=sorted(set(prof.slices)),
               int8_gemms=prof.int8_gemms,
               refined=[dict(counts=list(r.counts), iterations=r.iterations,
                             gmres_steps=r.gmres_steps, fell_back=r.fell_back)
                        for r in prof.refined])
    if args.out:
        from ._array import to_numpy

        np.save(args.out, to_numpy(x))
    if args.json:
        json.dump(res, sys.stdout, indent=1)
        print()
        return
    print(f"ozlinalg solve: {source}, device = {dev}")
    print(f"  engine: {res['engine']}")
    what = "refined solve      " if prof.refined else "emulated LU + solve"
    print(f"  {what} : {t_emul:8.3f} s   residual {res['residual']:.2e}")
    print(f"  native LAPACK       : {t_nat:8.3f} s   residual {res['native_residual']:.2e}")
    print(f"  flops through the emulated GEMM: {100 * prof.emulated_flop_share:.1f}%, "
          f"slices {res['slices']}, INT8 GEMMs {prof.int8_gemms}")
    for r in prof.refined:
        how = "fell back to the DGEMM-level solve" if r.fell_back else (
            f"{r.iterations} refinement steps"
            + (f", {r.gmres_steps} GMRES steps" if r.gmres_steps else ""))
        print(f"  refined: factored at counts {list(r.counts)} ({r.method}), {how}")
    if args.out:
        print(f"  x written to {args.out}")


def _progress(it, desc):
    try:
        from tqdm import tqdm
    except ImportError:
        return it
    return tqdm(it, desc=desc, disable=not sys.stderr.isatty(), leave=False)


def _dask_args(p):
    p.add_argument("--dask", type=int, default=0, metavar="N",
                   help="run on a local dask.distributed cluster of N worker processes")
    p.add_argument("--dask-chunk", type=int, default=None, metavar="C",
                   help="chunk (block) size of the dask arrays (default: n / 2)")


#: What ``python -m ozlinalg --help`` says below its subcommands.
_EPILOG = """\
Without a subcommand, python -m ozlinalg runs compare: alone, with compare's
defaults (n = 1024, every method, on the GPU where CuPy finds one, else the
CPU); followed by options only, with those (python -m ozlinalg --n 2048 is
python -m ozlinalg compare --n 2048). Each subcommand has its own --help."""


def _method(text):
    """argparse ``type`` of a method name: an unknown one is a usage error (exit status
    2, one line) before anything runs, not a traceback from the first product."""
    from .ozaki.params import validate_method

    try:
        validate_method(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("ozlinalg: ")) from None
    return text  # as typed: the table names the method as the user did


def _methods_item(text):
    return text if text == "all" else _method(text)


def _slices(text):
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'auto' or an integer, got {text!r}") from None


def _problem_args(p, what):
    p.add_argument("--n", type=int, default=1024, help=f"order of the {what} (default 1024)")
    p.add_argument("--phi", type=float, default=0.5,
                   help="spread of the entries' exponents: (U(0,1) - 0.5) * exp(phi * N(0,1)) "
                        "(default 0.5)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the problem (default 0)")
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto",
                   help="where to compute (auto: the GPU where CuPy finds one, else the CPU)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def _parser():
    """``(parser, {name: subparser})`` of compare and solve (the other subcommands parse
    their own arguments: listed here for --help only)."""
    ap = argparse.ArgumentParser(
        prog="python -m ozlinalg", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="FP64-accurate linear algebra on exact INT8 products (the Ozaki "
                    "scheme):\nthe main jobs from a shell.")
    ap.add_argument("--version", action="version", version=f"ozlinalg {ozlinalg.__version__}",
                    help="print the version of ozlinalg and exit")
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser(
        "compare", help="speed and accuracy of every method vs native FP64 (the default)",
        description="Time and accuracy of every emulated-GEMM method against native FP64 "
                    "on one random n x n product; the errors against an exact reference.")
    _problem_args(c, "random matrices A and B")
    c.add_argument("--slices", default="auto", type=_slices,
                   help="slice (or moduli) count of every method, or auto (default)")
    c.add_argument("--methods", nargs="+", default=["all"], type=_methods_item,
                   metavar="METHOD",
                   help="methods to run (names or aliases of ozlinalg.METHODS), or all "
                        "(default)")
    c.add_argument("--accuracy", choices=["dgemm", "both", "faithful"], default="both",
                   help="also run accuracy='faithful' (both: for hybrid-ef and crt; faithful: "
                        "for every method that has it)")
    c.add_argument("--repeat", type=int, default=2,
                   help="runs per method; the fastest counts (default 2)")
    c.add_argument("--check-rows", type=int, default=64,
                   help="rows judged against the exact reference (default 64; 0: skip)")
    c.add_argument("--plot", metavar="PNG", help="also draw time ratio and error bars")
    _dask_args(c)
    c.set_defaults(func=cmd_compare)
    sv = sub.add_parser(
        "solve", help="solve A x = b (.npy files, or an embedded problem)",
        description="Solve A x = b on the emulated GEMM (the refined solve where it pays, "
                    "else blocked LU), with the residual beside native LAPACK's.")
    sv.add_argument("a", nargs="?", help="A.npy (square)")
    sv.add_argument("b", nargs="?", help="b.npy")
    sv.add_argument("-o", "--out", help="write x here (.npy)")
    _problem_args(sv, "embedded problem, without A.npy")
    sv.add_argument("--slices", default="auto", type=_slices,
                    help="slice (or moduli) count, or auto (default)")
    sv.add_argument("--method", default=None, type=_method,
                    help="emulated GEMM method (default: the current ozlinalg.options(), "
                         "hybrid-ef unless set)")
    sv.add_argument("--block-size", type=int, default=None,
                    help="panel width of the blocked LU (default: the engine's)")
    sv.add_argument("--refine", choices=["auto", "true", "false"], default="auto",
                    help="refined solve (ozlinalg.solve's refine=; a fixed --slices or "
                         "--block-size means false)")
    _dask_args(sv)
    sv.set_defaults(func=cmd_solve)
    sub.add_parser("accuracy", add_help=False,
                   help="accuracy sweep against the exact reference (see accuracy --help)")
    sub.add_parser("tune", add_help=False,
                   help="measure the crossovers of this machine and write the tuning cache "
                        "(see tune --help)")
    sub.add_parser("run", add_help=False,
                   help="run script.py / -m module with numpy.linalg and scipy.linalg routed "
                        "to the emulation (see run --help)")
    return ap, {"compare": c, "solve": sv}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "run":
        from .tools.launcher import main as run_main

        return run_main(argv[1:])
    if argv and argv[0] == "tune":
        from .tools.tune import main as tune_main

        return tune_main(argv[1:])
    if argv and argv[0] == "accuracy":
        from .tools.sweep import main as sweep_main

        return sweep_main(argv[1:], prog="python -m ozlinalg accuracy")
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = ["compare", *argv]  # the default job (the epilog says so)
    ap, subs = _parser()
    args = ap.parse_args(argv)
    if args.cmd == "compare" and "all" in args.methods and len(args.methods) > 1:
        subs["compare"].error("argument --methods: all runs every method; give it alone")
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())
