"""The CPU speed targets, measured in one run with native FP64 beside them.

For each size n (default 2048 and 4096; phi = 0.5 inputs) it measures, best of
``--repeat`` and with the machine load (``os.getloadavg``) recorded before and
after:

* native DGEMM (NumPy's BLAS) and ONE exact INT8 GEMM of the same shape on the
  engine (the unit of the cost model; its TOPS against ``--peak-tops``);
* ``ozlinalg.matmul`` for hybrid-ef with 8 slices, hybrid-ef auto, crt auto:
  time, ratio to native DGEMM, slices, INT8 GEMMs and
  ``emulated / (INT8 GEMMs x engine GEMM)`` (1.0 = the passes around the GEMMs
  are free), with the time split from ``ozlinalg.profile()``, and the cost of
  ``auto``'s decision against them (hybrid-ef: the BF16 squares estimate and its
  exact reading; crt: the lower bounds from the scaling's bound GEMM, or the
  estimate where they do not decide);
* ``--factorizations``: getrf / potrf / geqrf through ``ozlinalg.lapack``
  against SciPy's LAPACK on the same matrix;
* ``--memory``: the tracemalloc peak of an 8-slice product (minus its result)
  on both NumPy engines.

Usage::

    python benchmarks/studies/cpu_targets.py --n 2048 4096 --repeat 3 --json out.json
    python benchmarks/studies/cpu_targets.py --n 4096 --factorizations --memory --engine sgemm
    python benchmarks/studies/cpu_targets.py --threads 1 --clock cpu      # one core, CPU time
"""
from __future__ import annotations

import argparse
import json
import os
import platform

import numpy as np
import scipy.linalg as sla
from cpu_timing import add_arguments, best, configure

import ozlinalg
from ozlinalg.engines import get_engine
from ozlinalg.testing import random_matrix

#: (label, method, slices): the rows of the issue's targets table.
PRODUCTS = [("hybrid-ef, 8 slices", "hybrid-ef", 8), ("hybrid-ef, auto", "hybrid-ef", "auto"),
            ("crt, auto", "crt", "auto")]


def engine_gemm_time(eng, n, repeat):
    """One exact n x n x n INT8 product on the engine (full int8 range)."""
    rng = np.random.default_rng(0)
    a = eng.empty_slices(1, n, n, "bitmask")
    b = eng.empty_slices(1, n, n, "bitmask")
    a[...] = rng.integers(-128, 128, a.shape)
    b[...] = rng.integers(-128, 128, b.shape)
    ws = eng.workspace(n, n)
    eng.int_matmul_sum(a, b, [(0, 0)], 128, 128, ws=ws)
    return best(lambda: eng.int_matmul_sum(a, b, [(0, 0)], 128, 128, ws=ws), repeat)[0]


def measure_products(n, repeat, eng, t_native, t_gemm):
    rng = np.random.default_rng([n, 13])
    a = random_matrix(rng, n, n, 0.5)
    b = random_matrix(rng, n, n, 0.5)
    rows = []
    for label, method, slices in PRODUCTS:
        ozlinalg.matmul(a, b, method=method, slices=slices)  # warm (JIT, pages)
        with ozlinalg.profile() as prof:
            t, _ = best(lambda m=method, s=slices: ozlinalg.matmul(a, b, method=m, slices=s),
                        repeat)
        rec = prof.calls[-1]
        rows.append(dict(
            label=label, n=n, method=method, slices=rec.slices, int8_gemms=rec.int8_gemms,
            engine_calls=rec.engine_calls, seconds=t, ratio_native=t / t_native,
            cost_model=t / (rec.int8_gemms * t_gemm),
            split=rec.time_split, int8=rec.time_int8, acc=rec.time_accumulate,
            other=rec.time_total - rec.time_split - rec.time_int8 - rec.time_accumulate))
        print(f"  {label:<20} s={rec.slices:>2} GEMMs={rec.int8_gemms:>2} "
              f"calls={rec.engine_calls:>2} {t:7.3f} s  {t / t_native:5.2f}x native  "
              f"model {rows[-1]['cost_model']:4.2f}  (split {rec.time_split:.3f} int8 "
              f"{rec.time_int8:.3f} acc {rec.time_accumulate:.3f})", flush=True)
    return rows


def measure_estimate(n, repeat, eng, rows):
    """The cost of ``auto``'s decision (the engine's estimate, BF16 squares and a GEMM on
    oneDNN, and its exact reading, :mod:`ozlinalg.ozaki.counts.estimate`) against the emulated
    products of ``rows`` that use it."""
    from ozlinalg.ozaki import params
    from ozlinalg.ozaki.counts.slices import plan_auto
    from ozlinalg.ozaki.split import normalize_rows

    rng = np.random.default_rng([n, 13])
    a = random_matrix(rng, n, n, 0.5)
    b = random_matrix(rng, n, n, 0.5)
    bt = np.ascontiguousarray(b.T)
    xa, _ = normalize_rows(np, a, eng)
    xb, _ = normalize_rows(np, bt, eng)
    width = params.slice_width(n)

    def decide():  # the estimate and the exact decision of slices="auto" (ozaki.counts.estimate)
        return plan_auto(np, eng, "hybrid", width, [((0, 0), 0, 0, xa, xb)], a, bt, 20, n * n)

    cost = best(decide, repeat)[0]
    costs = {"hybrid-ef, auto": cost, "crt, auto": crt_decision_cost(eng, a, bt, xa, xb, repeat)}
    out = {}
    for r in rows:
        if r["label"] in costs:
            out[r["label"]] = dict(seconds=costs[r["label"]],
                                   share=costs[r["label"]] / r["seconds"])
    print("  auto's decision: " + ", ".join(
        f"{v['seconds']:.3f} s = {100 * v['share']:.1f}% of {k}" for k, v in out.items()),
        flush=True)
    return out


def crt_decision_cost(eng, a, bt, xa, xb, repeat):
    """Seconds of ``moduli="auto"``'s decision in crt's accurate scaling, beyond the
    bound GEMM W that the scaling needs anyway (counted among the INT8 GEMMs): W's
    row/column slack sums, the lower bounds of r from W, the float64 probes and, when
    W does not decide, the estimate (BF16 squares) and its exact reading."""
    from ozlinalg.ozaki import crt, faithful
    from ozlinalg.ozaki.counts import estimate
    from ozlinalg.ozaki.counts import moduli as crt_counts
    from ozlinalg.ozaki.counts.estimate import sq_norm_upper
    from ozlinalg.ozaki.crt import shifts as crt_shifts

    m, k = xa.shape
    p = xb.shape[0]
    ba = crt_shifts.bound_operand(np, eng, xa, "a")
    bb = crt_shifts.bound_operand(np, eng, xb, "b")
    w, _ = eng.int_matmul_sum(ba, bb, [(0, 0)], 128, 128, ws=eng.workspace(m, p))
    planner = eng.crt_bound_shifts(m, p)
    planner.add(0, m, 0, p, w)
    log2p_ref = crt.crt_constants(crt.AUTO_REF_MODULI).log2P
    mu, nu = crt_shifts._accurate_shifts(np, [], log2p_ref, m, p, planner)
    na, nb = sq_norm_upper(np, xa, eng), sq_norm_upper(np, xb, eng)
    ia, ib = np.ldexp(1.0, (-mu).astype(np.int32)), np.ldexp(1.0, (-nu).astype(np.int32))

    def num(I, J):
        return ia[I] * nb[J] + na[I] * ib[J]

    def decide_count():
        plan = estimate.CountPlan(np, crt.crt_thresholds("accurate", 20, log2p_ref),
                                estimate.Operands(np, a, bt), weights=num)
        ca = faithful.digit_sums(np, eng, ba)[0]
        cb = faithful.digit_sums(np, eng, bb)[0]
        got = crt_counts._bound_decision(np, eng, plan, planner.tiles, ca, cb, (ia, nb, na, ib), k)
        if got is None:
            q, scale = estimate.estimate(np, eng, xa, xb)
            plan.add_tile((0, 0), 0, 0, q, scale, engine=eng, num=(ia, nb, na, ib))
            got = plan.finish()[0]
        return got

    return best(decide_count, repeat)[0]


def measure_factorizations(n, repeat):
    rng = np.random.default_rng([n, 17])
    a = rng.standard_normal((n, n))
    spd = a @ a.T + n * np.eye(n)
    cases = [
        ("getrf", lambda: ozlinalg.lapack.getrf(a), lambda: sla.lu_factor(a, check_finite=False)),
        ("potrf", lambda: ozlinalg.lapack.potrf(spd),
         lambda: sla.cholesky(spd, check_finite=False)),
        ("geqrf", lambda: ozlinalg.lapack.geqrf(a),
         lambda: sla.qr(a, mode="raw", check_finite=False)),
    ]
    rows = []
    for name, emul, native in cases:
        emul()
        with ozlinalg.profile() as prof:
            t_e, _ = best(emul, repeat)
        t_n, _ = best(native, repeat)
        rows.append(dict(op=name, n=n, seconds=t_e, lapack_seconds=t_n, ratio=t_e / t_n,
                         slices=sorted(set(prof.slices)),
                         emulated_flop_share=prof.emulated_flop_share))
        print(f"  {name}: {t_e:7.3f} s, LAPACK {t_n:6.3f} s: {t_e / t_n:5.2f}x  "
              f"(slices {sorted(set(prof.slices))})", flush=True)
    return rows


def measure_memory(n, slices=8):
    import tracemalloc

    rng = np.random.default_rng([n, 19])
    a = random_matrix(rng, n, n, 0.5)
    b = random_matrix(rng, n, n, 0.5)
    out = {}
    for engine in ("sgemm", "onednn"):
        try:
            with ozlinalg.options(engine=engine):
                ozlinalg.matmul(a[:64, :64], b[:64, :64], slices=slices)  # warm
                # every buffer allocated during the call (no kept scratch buffers)
                pool = getattr(get_engine(np), "scratch", None)
                limit = pool.limit if pool is not None else None
                if pool is not None:
                    pool.limit = 0
                    pool.clear()
                tracemalloc.start()
                try:
                    ozlinalg.matmul(a, b, slices=slices)
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                    if pool is not None:
                        pool.limit = limit
        except Exception as exc:  # e.g. no oneDNN here
            out[engine] = repr(exc)
            continue
        out[engine] = peak - 8 * n * n
        print(f"  working memory, {slices} slices, {engine}: {out[engine] / 2**20:.0f} MiB",
              flush=True)
    if all(isinstance(v, int) for v in out.values()):
        out["ratio"] = out["onednn"] / out["sgemm"]
        print(f"  onednn / sgemm: {out['ratio']:.3f}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engine", default=None, help="onednn, sgemm or auto")
    ap.add_argument("--factorizations", action="store_true")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--peak-tops", type=float, default=None,
                    help="the INT8 peak of this CPU (TOPS), for the engine GEMM's share")
    add_arguments(ap)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    res = dict(machine=platform.processor() or platform.machine(), cores=os.cpu_count(),
               numpy=np.__version__, runs=[])
    with ozlinalg.options(engine=args.engine):
        eng = get_engine(np)
        configure(args, eng)
        res.update(engine=eng.describe(), threads=args.threads or os.cpu_count(),
                   clock=args.clock)
        print(f"engine: {res['engine']}")
        for n in args.n:
            load0 = os.getloadavg()[0]
            rng = np.random.default_rng([n, 11])
            x, y = rng.standard_normal((n, n)), rng.standard_normal((n, n))
            x @ y
            t_native, _ = best(lambda x=x, y=y: x @ y, args.repeat)
            t_gemm = engine_gemm_time(eng, n, args.repeat)
            tops = 2.0 * n**3 / t_gemm / 1e12
            run = dict(n=n, native_seconds=t_native, native_gflops=2.0 * n**3 / t_native / 1e9,
                       engine_gemm_seconds=t_gemm, engine_tops=tops)
            if args.peak_tops:
                run["engine_share_of_peak"] = tops / args.peak_tops
            print(f"n = {n}: native DGEMM {t_native:.3f} s ({run['native_gflops']:.0f} GFLOP/s), "
                  f"engine INT8 GEMM {t_gemm * 1e3:.1f} ms ({tops:.2f} TOPS, "
                  f"{t_native / t_gemm:.1f}x DGEMM's rate), load {load0:.2f}", flush=True)
            run["products"] = measure_products(n, args.repeat, eng, t_native, t_gemm)
            run["estimate"] = measure_estimate(n, args.repeat, eng, run["products"])
            if args.factorizations:
                run["factorizations"] = measure_factorizations(n, args.repeat)
            if args.memory:
                run["memory"] = measure_memory(n)
            run["load"] = [load0, os.getloadavg()[0]]
            print(f"  load {load0:.2f} -> {run['load'][1]:.2f}")
            res["runs"].append(run)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
