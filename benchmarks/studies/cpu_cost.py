"""CPU cost of the emulation against its own engine and against native DGEMM.

For an n x n x n product with a fixed slice count it measures, in one run:

* ``t_engine``: one exact INT8 product of that shape on the engine (the unit
  of the cost model), for the method's slice bound;
* ``t_emul``: the whole emulated GEMM (best of ``--repeat``), with the time
  split from ``ozlinalg.profile()``;
* ``t_native``: NumPy's DGEMM on the same inputs.

and reports ``t_emul / (INT8 GEMMs x t_engine)`` (1.0 = splitting and
accumulation are free) and ``t_emul / t_native``.

Usage::

    python benchmarks/studies/cpu_cost.py                 # n = 2048, 8 slices, every method
    python benchmarks/studies/cpu_cost.py --n 1024 --slices 9 --methods hybrid-ef
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import ozlinalg
from ozlinalg.engines import get_engine
from ozlinalg.ozaki import params
from ozlinalg.ozaki.split import slice_layout
from ozlinalg.testing import random_matrix


def best(fn, repeat):
    t_best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        t_best = min(t_best, time.perf_counter() - t)
    return t_best


def engine_time(n, meth, repeat):
    eng = get_engine(np)
    width = params.slice_width(n) if meth.engine == "int8" else params.fp_slice_width(
        min(n, params.FP16_INNER_BLOCK))
    bound = 128 if meth.split.startswith("crt") else slice_layout(meth.split, width)[1]
    rng = np.random.default_rng(0)
    a = eng.empty_slices(1, n, n, meth.split)
    b = eng.empty_slices(1, n, n, meth.split)
    a[...] = rng.integers(-bound, bound + 1, a.shape)
    b[...] = rng.integers(-bound, bound + 1, b.shape)
    if meth.engine == "int8":
        return best(lambda: eng.int_matmul_sum(a, b, [(0, 0)], bound, bound), repeat)
    blk = params.FP16_INNER_BLOCK
    return best(lambda: [eng.float_matmul(a[0][:, k:k + blk], b[0][:, k:k + blk])
                         for k in range(0, n, blk)], repeat) / max(1, -(-n // blk))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--slices", type=int, default=8)
    ap.add_argument("--methods", nargs="+", default=list(ozlinalg.METHODS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--phi", type=float, default=0.5)
    args = ap.parse_args(argv)
    n = args.n
    rng = np.random.default_rng(1)
    a = random_matrix(rng, n, n, args.phi)
    b = random_matrix(rng, n, n, args.phi)
    t_nat = best(lambda: a @ b, args.repeat)
    print(f"# CPU cost, n = {n}, {args.slices} slices, phi = {args.phi} "
          f"({platform.processor() or platform.machine()}, numpy {np.__version__})\n")
    print(f"Reproduce: `python benchmarks/studies/cpu_cost.py --n {n} --slices {args.slices}`\n")
    print("| method | INT8 GEMMs | t_engine [ms] | t_emul [s] | emul / (GEMMs x t_engine) "
          "| split / int8 / accumulate / other [%] | emul / native DGEMM |")
    print("|---|---|---|---|---|---|---|")
    for name in args.methods:
        meth = ozlinalg.METHODS[name]
        t_eng = engine_time(n, meth, args.repeat)
        prof = None
        t_emul = float("inf")
        for _ in range(args.repeat):
            with ozlinalg.profile() as p:
                t = time.perf_counter()
                ozlinalg.matmul(a, b, method=name, slices=args.slices)
                t = time.perf_counter() - t
            if t < t_emul:
                t_emul, prof = t, p
        g = prof.int8_gemms
        tot = prof.time_total
        split = " / ".join(f"{100 * x / tot:.0f}" for x in (
            prof.time_split, prof.time_int8, prof.time_accumulate, prof.time_other))
        print(f"| {name} | {g} | {1e3 * t_eng:.1f} | {t_emul:.3f} | "
              f"{t_emul / (g * t_eng):.3f} | {split} | {t_emul / t_nat:.1f} |")
    print(f"\nnative DGEMM: {1e3 * t_nat:.1f} ms ({2 * n**3 / t_nat / 1e9:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
