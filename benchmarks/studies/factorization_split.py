"""Where an emulated factorization's time goes: products, panels, triangular solves,
row swaps, the rest; with native LAPACK timed in the same run.

    python benchmarks/studies/factorization_split.py [--n 2048 4096] [--ops getrf potrf geqrf]
        [--method crt] [--slices 3] [--block-size 128] [--repeat 2] [--no-gemm]
        [--threads 1 --clock cpu]

Each factorization (``ozlinalg.lapack.getrf`` / ``potrf`` / ``geqrf`` with the
default options: method, count, block size and ``min_size`` of the strategy) runs
once to warm up, then once under :mod:`cProfile`, whose per-function own time is
sorted into parts by the ozlinalg function it was spent under (time in NumPy,
SciPy or a C extension goes to the ozlinalg caller that called it, in proportion
to each caller's share):

* ``products``: the emulated GEMMs (:mod:`ozlinalg.ozaki`, :mod:`ozlinalg.engines`,
  the front door);
* ``panels``: the native LAPACK panels (``lapack/_common.py``'s ``native_*``);
* ``trsm``: the blocked triangular solves' own work (their products are
  ``products``);
* ``swaps``: row interchanges (``swap_rows``);
* ``other``: everything else of the routine (copies, validation, set-up).

The wall time of the profiled run is larger than an unprofiled one (cProfile's
per-call cost); the shares are what this script reports, the best of ``--repeat``
unprofiled runs is the time. Native: SciPy's ``lu_factor`` / ``cholesky`` /
``qr(mode="raw")`` on the same matrix, best of ``--repeat``, each repeat timing the
emulated and the native call back to back (interleaved: a shared machine's load
changes both alike). ``--method`` / ``--slices`` set the products' options for the
whole run; the ``gemm`` row of each n is one emulated n x n x n product
(:func:`ozlinalg.matmul` under the same options) against native DGEMM, the ratio the
factorizations aim at.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import warnings

import numpy as np
import scipy.linalg
from cpu_timing import add_arguments, best, configure  # the studies' shared timer (this folder)

import ozlinalg
from ozlinalg import lapack

PARTS = ("products", "panels", "trsm", "swaps", "other")
_PKG = os.path.dirname(os.path.abspath(ozlinalg.__file__))


def _part_of_own(func):
    """The part of an ozlinalg function's own time, or None for code outside ozlinalg."""
    path, _, name = func
    if not path.startswith(_PKG):
        return None
    rel = os.path.relpath(path, _PKG)
    if rel.startswith(("ozaki", "engines")) or rel == "_matmul.py":
        return "products"
    if rel == os.path.join("lapack", "_common.py"):
        if name.startswith("native_"):
            return "panels"
        if name == "swap_rows":
            return "swaps"
    if rel == os.path.join("lapack", "trsm.py"):
        return "trsm"
    return "other"


def split(stats):
    """``{part: seconds}`` from a :class:`pstats.Stats` (own times, attributed upward)."""
    raw = stats.stats  # func -> (cc, nc, tt, ct, callers)
    memo = {}

    def shares(func, depth=0):
        """``{part: fraction}`` of ``func``'s own time."""
        if func in memo:
            return memo[func]
        own = _part_of_own(func)
        if own is not None:
            memo[func] = {own: 1.0}
            return memo[func]
        memo[func] = {"other": 1.0}  # cycles and uncalled roots
        callers = raw[func][4] if func in raw else {}
        total = sum(v[2] for v in callers.values())
        if depth > 40 or not callers or total <= 0:
            return memo[func]
        out = dict.fromkeys(PARTS, 0.0)
        for caller, v in callers.items():
            for part, f in shares(caller, depth + 1).items():
                out[part] += f * v[2] / total
        memo[func] = out
        return out

    out = dict.fromkeys(PARTS, 0.0)
    for func, (_, _, tt, _, _) in raw.items():
        for part, f in shares(func).items():
            out[part] += tt * f
    return out


def interleaved(emu, nat, repeat):
    """Best times of ``emu`` and ``nat`` over ``repeat`` back-to-back pairs."""
    t_emu = t_nat = float("inf")
    for _ in range(max(1, repeat)):
        t_emu = min(t_emu, best(emu, 1)[0])
        t_nat = min(t_nat, best(nat, 1)[0])
    return t_emu, t_nat


def run_gemm(n, repeat, rng):
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, n))
    emu = lambda: ozlinalg.matmul(a, b)  # noqa: E731
    nat = lambda: a @ b  # noqa: E731
    emu()
    nat()
    t_emu, t_nat = interleaved(emu, nat, repeat)
    return dict(op="gemm", n=n, native=t_nat, emulated=t_emu, ratio=t_emu / t_nat,
                shares=None)


def run(op, n, repeat, rng, nb=None):
    a = rng.standard_normal((n, n))
    if op == "potrf":
        a = a @ a.T + n * np.eye(n)
        emu = lambda: lapack.potrf(a, lower=True, block_size=nb)  # noqa: E731
        nat = lambda: scipy.linalg.cholesky(a, lower=True)  # noqa: E731
    elif op == "getrf":
        emu = lambda: lapack.getrf(a, block_size=nb)  # noqa: E731
        nat = lambda: scipy.linalg.lu_factor(a)  # noqa: E731
    else:
        emu = lambda: lapack.geqrf(a, block_size=nb)  # noqa: E731
        nat = lambda: scipy.linalg.qr(a, mode="raw")  # noqa: E731
    emu()
    nat()
    t_emu, t_nat = interleaved(emu, nat, repeat)
    prof = cProfile.Profile()
    prof.enable()
    emu()
    prof.disable()
    parts = split(pstats.Stats(prof))
    total = sum(parts.values())
    return dict(op=op, n=n, native=t_nat, emulated=t_emu, ratio=t_emu / t_nat,
                shares={k: v / total for k, v in parts.items()})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2048])
    ap.add_argument("--ops", nargs="+", default=["getrf", "potrf", "geqrf"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--method", default=None, help="the products' method (default: the options')")
    ap.add_argument("--slices", default=None,
                    help="the products' slice / moduli count (default: the options')")
    ap.add_argument("--no-gemm", action="store_true", help="skip the single-GEMM rows")
    ap.add_argument("--block-size", type=int, default=None,
                    help="the factorizations' block_size (default: the engine's)")
    add_arguments(ap)  # --threads, --clock (cpu: robust to a loaded machine with --threads 1)
    args = ap.parse_args(argv)
    configure(args, ozlinalg._options.current_engine(np))
    over = {}
    if args.method:
        over["method"] = args.method
    if args.slices:
        over["slices"] = args.slices if args.slices == "auto" else int(args.slices)
    if over:
        ozlinalg.options(**over).__enter__()  # for the whole run
    if args.slices:
        # a count below auto's is the point of --slices (a refined solver's): no warning
        warnings.simplefilter("ignore", ozlinalg.AccuracyWarning)
    rng = np.random.default_rng(2026)
    opts = ozlinalg.get_options()
    print(f"engine: {ozlinalg._options.current_engine(np).describe()}; method {opts.method}, "
          f"slices {opts.slices}; block_size {args.block_size or 'default'}; "
          f"threads {args.threads or 'all'}, clock {args.clock}; "
          f"load {os.getloadavg()[0]:.2f}")
    head = "| op | n | native [s] | emulated [s] | x native | " + " | ".join(PARTS) + " |"
    print(head)
    print("|" + "---|" * (5 + len(PARTS)))
    for n in args.n:
        rows = [] if args.no_gemm else ["gemm"]
        for op in rows + list(args.ops):
            if op == "gemm":
                r = run_gemm(n, args.repeat, rng)
            else:
                r = run(op, n, args.repeat, rng, args.block_size)
            if r["shares"] is None:
                cells = " | ".join("" for _ in PARTS)
            else:
                cells = " | ".join(f"{100 * r['shares'][p]:.0f} %" for p in PARTS)
            print(f"| {op} | {n} | {r['native']:.3f} | {r['emulated']:.3f} | "
                  f"{r['ratio']:.2f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
