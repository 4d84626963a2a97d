"""Where ``ozlinalg.linalg.eigh`` / ``svd`` spend their time, against LAPACK
``dsyevd`` / ``dgesdd`` in the same run; QDWH ``polar`` beside them.

    python benchmarks/studies/eigen_cost.py --n 512 1024 2048 --threads 1 --clock cpu
        [--ops eigh svd polar] [--matrices random clustered graded rank-def]
        [--repeat 2] [--json FILE] [--md FILE]

For each n and operation, on a random symmetric (eigh) or square (svd, polar)
matrix (``--matrices``: also eigen_accuracy.py's clustered, graded and rank-deficient
ones), each repeat times back to back (interleaved: a shared machine's load
changes both alike) LAPACK (``scipy.linalg.eigh(driver="evd")``,
``scipy.linalg.svd(lapack_driver="gesdd")``, ``scipy.linalg.polar``) and the
emulated routine; the best repeat of each is reported. The emulated run is split
into:

* ``start``: the float32 LAPACK start (``ssyevd`` / ``sgesdd``: NumPy's
  ``linalg.eigh`` / ``linalg.svd`` called on float32);
* ``products``: the emulated GEMMs of the refinement (every call of
  ``ozlinalg.linalg._spectral``'s product, the clusters' included);
* ``clusters``: LAPACK's double precision on the clusters' small blocks
  (``dsyevd`` / ``dgesdd`` on float64 blocks);
* ``rest``: everything else (the steps' O(n^2) element-wise work, sorting,
  scaling, copies).

The split is taken by wrapping those functions with the configured clock in this
process (instrumentation only; the library is not changed). The ``floor`` is what
the emulated products alone cost at best: the number of n x n x n products the run
made (``ozlinalg.profile()``) times the time of one emulated n x n x n product
(``ozlinalg.matmul`` of the matrix and the float32 start's vectors) measured in the
same run. ``n^3 equiv`` is the profile's emulated flops over ``2 n^3``: the emulated
work in units of one n x n x n product (polar's QR / Cholesky / trsm included).

``--threads 1 --clock cpu``: one core's CPU time (robust to the other processes
of a shared machine).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import scipy.linalg as sla
from cpu_timing import CLOCK, add_arguments, configure  # the studies' timer (this folder)
from eigen_accuracy import FAMILIES, cpu_class, gen_matrix, sym_matrix  # this folder
from report import write_report  # the studies' report writer (this folder)

import ozlinalg
import ozlinalg.linalg._spectral as spectral
from ozlinalg.linalg import eigh, polar, svd

PER_STEP = {"eigh": 4, "svd": 6}


class Split:
    """Accumulates the configured clock's time of the wrapped functions by part."""

    def __init__(self):
        self.t = {"start": 0.0, "products": 0.0, "clusters": 0.0}
        self._saved = []

    def _wrap(self, owner, name, part_of):
        fn = getattr(owner, name)

        def wrapped(*args, **kw):
            t = CLOCK[0]()
            try:
                return fn(*args, **kw)
            finally:
                self.t[part_of(args)] += CLOCK[0]() - t

        self._saved.append((owner, name, fn))
        setattr(owner, name, wrapped)

    def __enter__(self):
        def lapack_part(args):
            return "start" if args[0].dtype in (np.float32, np.complex64) else "clusters"

        self._wrap(spectral, "_mm", lambda args: "products")
        self._wrap(np.linalg, "eigh", lapack_part)
        self._wrap(np.linalg, "svd", lapack_part)
        return self

    def __exit__(self, *exc):
        for owner, name, fn in reversed(self._saved):
            setattr(owner, name, fn)
        return False


def problem(op, n, seed, matrix="random"):
    if matrix != "random":  # eigen_accuracy.py's families
        rng = np.random.default_rng([seed, n, FAMILIES.index(matrix), op != "eigh"])
        return (sym_matrix if op == "eigh" else gen_matrix)(rng, n, matrix)
    rng = np.random.default_rng([seed, n, op == "eigh"])
    g = rng.standard_normal((n, n))
    return (g + g.T) / 2 if op == "eigh" else g


def timed(fn):
    t = CLOCK[0]()
    out = fn()
    return CLOCK[0]() - t, out


def one_product(op, a, repeat):
    """Best time of one emulated n x n x n product of the kind the refinement makes."""
    if op == "eigh":
        x = np.linalg.eigh(a.astype(np.float32))[1].astype(np.float64)
    else:
        x = np.linalg.svd(a.astype(np.float32))[2].T.astype(np.float64)
    ozlinalg.matmul(a, x)
    return min(timed(lambda: ozlinalg.matmul(a, x))[0] for _ in range(max(1, repeat)))


def run_op(op, n, args, matrix="random"):
    a = problem(op, n, args.seed, matrix)
    native = {"eigh": lambda: sla.eigh(a, driver="evd", check_finite=False),
              "svd": lambda: sla.svd(a, lapack_driver="gesdd", check_finite=False),
              "polar": lambda: sla.polar(a)}[op]
    emulated = {"eigh": lambda: eigh(a, check_finite=False),
                "svd": lambda: svd(a, check_finite=False),
                "polar": lambda: polar(a)}[op]
    best_nat, best = float("inf"), None
    for _ in range(max(1, args.repeat)):
        t_nat, _ = timed(native)
        best_nat = min(best_nat, t_nat)
        with Split() as split, ozlinalg.profile() as prof:
            t, _ = timed(emulated)
        if best is None or t < best[0]:
            best = (t, dict(split.t), prof)
    t, parts, prof = best
    row = dict(op=op, n=n, matrix=matrix, time=t, lapack=best_nat, ratio=t / best_nat,
               calls=prof.emulated_gemm_calls,
               faithful=sum(1 for c in prof.calls if c.accuracy == "faithful"),
               equiv=prof.emulated_flops / (2.0 * n**3),
               native_calls=dict(prof.native_calls),
               fallback=bool(prof.native_calls.get(spectral.__dict__.get(
                   "FALLBACK", "lapack fallback"))))
    if op in PER_STEP:
        t1 = one_product(op, a, args.repeat)
        full = sum(1 for c in prof.calls if c.shape == (n, n, n))
        rest = t - sum(parts.values())
        row.update(parts, rest=rest, product=t1, full_products=full,
                   steps=full / PER_STEP[op], floor=full * t1,
                   floor_ratio=full * t1 / best_nat)
    return row


def table(rows, clock, threads):
    unit = f"{'CPU' if clock == 'cpu' else 'wall'} s, {threads or 'all'} thread(s)"
    out = [f"| op | matrix | n | LAPACK ({unit}) | emulated | ratio | float32 start | products "
           "| clusters (LAPACK) | rest | n³ products x one product = floor | floor / LAPACK "
           "| steps | n³ equiv |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "floor" in r:
            out.append(
                f"| {r['op']} | {r['matrix']} | {r['n']} | {r['lapack']:.3f} | "
                f"{r['time']:.2f} | {r['ratio']:.1f} | {r['start']:.3f} | {r['products']:.2f} | "
                f"{r['clusters']:.3f} | {r['rest']:.3f} | {r['full_products']} x "
                f"{r['product']:.3f} = {r['floor']:.2f} | {r['floor_ratio']:.1f} | "
                f"{r['steps']:g} | {r['equiv']:.1f} |")
        else:
            out.append(f"| {r['op']} | {r['matrix']} | {r['n']} | {r['lapack']:.3f} | "
                       f"{r['time']:.2f} | "
                       f"{r['ratio']:.1f} | - | - | - | - | - | - | - | {r['equiv']:.1f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048])
    ap.add_argument("--ops", nargs="+", default=["eigh", "svd"],
                    choices=["eigh", "svd", "polar"])
    ap.add_argument("--polar-n", type=int, nargs="*", default=[512],
                    help="orders of the polar rows (with 'polar' in --ops: every --n)")
    ap.add_argument("--matrices", nargs="+", default=["random"],
                    choices=["random"] + [f for f in FAMILIES if f != "complex"],
                    help="test matrices (eigen_accuracy.py's families) of the eigh / svd rows")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--md", help="write the markdown table here")
    add_arguments(ap)
    args = ap.parse_args(argv)
    eng = ozlinalg.engines.get_engine(np)
    configure(args, eng)
    head = (f"CPU: {cpu_class()}; engine: {eng.describe()}; clock {args.clock}, "
            f"threads {args.threads or 'all'}")
    print(head, flush=True)
    eigh(problem("eigh", 64, 0))  # first use outside the timings
    svd(problem("svd", 64, 0))
    todo = [(op, n, m) for n in args.n for m in args.matrices for op in args.ops
            if op != "polar" or m == "random"]
    if "polar" not in args.ops:
        todo += [("polar", n, "random") for n in args.polar_n or []]
    rows = []
    for op, n, m in todo:
        r = run_op(op, n, args, m)
        rows.append(r)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()},
              flush=True)
    cmd = "python benchmarks/studies/eigen_cost.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    md = "\n".join([f"Generated by `{cmd.strip()}` on {time.strftime('%Y-%m-%d')}.", "",
                    head + ".", "", table(rows, args.clock, args.threads), ""])
    write_report(md, head, cmd, rows, args.md, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
