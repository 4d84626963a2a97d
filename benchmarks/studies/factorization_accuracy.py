"""Backward errors of ozlinalg.lapack's factorizations against LAPACK (scipy).

For each matrix class and size, the emulated factorization (``min_size=0``,
so the trailing updates always go through ``ozlinalg.matmul``) and LAPACK run
on the same input; the table lists both backward errors and their ratio
(within 4x of LAPACK's), the slice counts that
``slices="auto"`` chose, the emulated-flop share from ``ozlinalg.profile()``
and, for the largest size, the time of the emulated GEMMs against the cost
model (INT8 GEMM count x time of one engine GEMM).

Usage::

    python benchmarks/studies/factorization_accuracy.py                 # n = 256 1024 2048
    python benchmarks/studies/factorization_accuracy.py --sizes 256 --out /tmp/f.md

The generated tables replace the block between the markers
``<!-- BEGIN GENERATED -->`` / ``<!-- END GENERATED -->`` in ``--out``
(default docs/factorizations.md); the rest of the file is kept.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import scipy.linalg as sla

import ozlinalg
from ozlinalg.lapack import geqrf, getrf, getrs, orgqr, ormqr, potrf, potrs, trsm

BEGIN = "<!-- BEGIN GENERATED -->"
END = "<!-- END GENERATED -->"
FACTOR = 4.0


# ----------------------------------------------------------------- inputs


def general(rng, m, n, kind):
    if kind == "random":
        return rng.standard_normal((m, n))
    if kind.startswith("kappa"):
        kappa = float(kind[5:])
        k = min(m, n)
        u, _ = np.linalg.qr(rng.standard_normal((m, k)))
        v, _ = np.linalg.qr(rng.standard_normal((n, k)))
        return (u * np.logspace(0, -np.log10(kappa), k)) @ v.T
    if kind == "phi4":  # badly scaled entries, the papers' phi = 4
        return (rng.random((m, n)) - 0.5) * np.exp(4 * rng.standard_normal((m, n)))
    if kind == "rows":  # badly scaled rows
        return rng.standard_normal((m, n)) * np.exp(4 * rng.standard_normal((m, 1)))
    raise ValueError(kind)


def spd(rng, n, kind):
    if kind == "random":
        g = rng.standard_normal((n, n))
        return g @ g.T / n + np.eye(n)
    if kind.startswith("kappa"):
        q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        a = (q * np.logspace(0, -np.log10(float(kind[5:])), n)) @ q.T
        return (a + a.T) / 2
    if kind == "scaled":  # D S D with D = exp(4 N(0,1))
        d = np.exp(4 * rng.standard_normal(n))
        g = rng.standard_normal((n, n))
        s = g @ g.T / n + np.eye(n)
        return d[:, None] * s * d[None, :]
    raise ValueError(kind)


# ----------------------------------------------------------------- metrics


def n1(x):
    return float(np.linalg.norm(x, 1))


#: Product used to evaluate residuals; set in main(). "accurate" uses the
#: emulation with 12 slices (84 bits: error far below FP64 rounding), so
#: that the check does not replay the rounding errors of the LAPACK run it
#: checks (the same BLAS kernels in the same order, which hides most of
#: LAPACK's error: see docs/factorizations.md).
MM = np.matmul


def mm(a, b):
    return MM(a, b)


def lu_err(a, lu, piv):
    m, n = a.shape
    k = min(m, n)
    pa = a.copy()
    for i, p in enumerate(piv):
        if p != i:
            pa[[i, p]] = pa[[p, i]]
    l_ = np.tril(lu[:, :k], -1) + np.eye(m, k)
    return n1(pa - mm(l_, np.triu(lu[:k]))) / n1(a)


def resid(a, x, b):
    xm = x[:, None] if x.ndim == 1 else x
    r = mm(a, xm)[:, 0] - b if x.ndim == 1 else mm(a, x) - b
    return n1(r) / (n1(a) * n1(x) + n1(b))


def run_profiled(fn):
    t0 = time.perf_counter()
    with ozlinalg.profile() as p:
        out = fn()
    return out, p, time.perf_counter() - t0


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# ----------------------------------------------------------------- cases


def case_lu(rng, n, kind, nb, kw):
    a = general(rng, n, n, kind)
    b = rng.standard_normal(n)
    (lu, piv), p, t = run_profiled(lambda: getrf(a, block_size=nb, min_size=0, **kw))
    x = getrs(lu, piv, b, block_size=nb, min_size=0, **kw)
    (lu0, piv0), t0 = timed(lambda: sla.lu_factor(a))
    x0 = sla.lu_solve((lu0, piv0), b)
    return dict(op="getrf", kind=kind, shape=f"{n}x{n}",
                err=lu_err(a, lu, piv), ref=lu_err(a, lu0, piv0),
                res=resid(a, x, b), res_ref=resid(a, x0, b),
                prof=p, time=t, time_ref=t0)


def case_chol(rng, n, kind, nb, kw):
    a = spd(rng, n, kind)
    b = rng.standard_normal(n)
    c, p, t = run_profiled(lambda: potrf(a, lower=True, block_size=nb, min_size=0, **kw))
    x = potrs(c, b, lower=True, block_size=nb, min_size=0, **kw)
    c0, t0 = timed(lambda: sla.cholesky(a, lower=True))
    x0 = sla.cho_solve((c0, True), b)
    return dict(op="potrf", kind=kind, shape=f"{n}x{n}",
                err=n1(a - mm(c, c.T)) / n1(a), ref=n1(a - mm(c0, c0.T)) / n1(a),
                res=resid(a, x, b), res_ref=resid(a, x0, b),
                prof=p, time=t, time_ref=t0)


def case_qr(rng, n, kind, nb, kw, tall=False):
    m = 4 * n if tall else n
    a = general(rng, m, n, kind)
    (qr, tau), p, t = run_profiled(lambda: geqrf(a, block_size=nb, min_size=0, **kw))
    q = orgqr(qr, tau, block_size=nb, min_size=0, **kw)
    r = np.triu(qr[:n])
    (q0, r0), t0 = timed(lambda: sla.qr(a, mode="economic"))
    eye = np.eye(n)
    out = dict(op="geqrf", kind=("tall " if tall else "") + kind, shape=f"{m}x{n}",
               err=n1(a - mm(q, r)) / n1(a), ref=n1(a - mm(q0, r0)) / n1(a),
               orth=n1(mm(q.T, q) - eye), orth_ref=n1(mm(q0.T, q0) - eye),
               prof=p, time=t, time_ref=t0)
    if not tall:
        b = rng.standard_normal(n)
        y = ormqr(qr, tau, b, block_size=nb, min_size=0, **kw)
        x = trsm(qr, y, lower=False, block_size=nb, min_size=0, **kw)
        x0 = sla.solve_triangular(r0, q0.T @ b)
        out.update(res=resid(a, x, b), res_ref=resid(a, x0, b))
    return out


# ----------------------------------------------------------------- cost model


def engine_rate(n=2048, method="hybrid-ef"):
    """Ops/s of ONE exact INT8 product on the engine (n x n x n, best of 3)."""
    from ozlinalg.engines import get_engine
    from ozlinalg.ozaki import params
    from ozlinalg.ozaki.split import slice_layout

    eng = get_engine(np)
    meth = params.METHODS[params.validate_method(method)]
    width = params.slice_width(n)
    _, bound = slice_layout(meth.split, width)
    rng = np.random.default_rng(0)
    da = eng.empty_slices(1, n, n, meth.split)
    db = eng.empty_slices(1, n, n, meth.split)
    da[...] = rng.integers(-bound, bound + 1, da.shape)
    db[...] = rng.integers(-bound, bound + 1, db.shape)
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        eng.int_matmul_sum(da, db, [(0, 0)], bound, bound)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def cost_model(prof, rate):
    model = sum(c.int8_gemms * 2.0 * c.shape[0] * c.shape[1] * c.shape[2] for c in prof.calls)
    return model / rate


# ----------------------------------------------------------------- report


def fmt(x):
    return f"{x:.2e}"


def ratio(a, b):
    """ours / LAPACK, unfloored (a tiny guard only against 0 / 0)."""
    return a / max(b, 1e-300) if a > 0 else 0.0


def verdict(*rs):
    return "ok" if all(r <= FACTOR for r in rs) else "**> 4x**"


def table(rows):
    out = [
        "| op | matrix | shape | backward error | LAPACK | ratio | ‖QᵀQ−I‖ (LAPACK) | "
        "solve residual | LAPACK | ratio | slices | emulated flops | time (LAPACK) s | |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rs = [ratio(r["err"], r["ref"])]
        orth = "–"
        if "orth" in r:
            rs.append(ratio(r["orth"], r["orth_ref"]))
            orth = f"{fmt(r['orth'])} ({fmt(r['orth_ref'])})"
        if "res" in r:
            rr = ratio(r["res"], r["res_ref"])
            rs.append(rr)
            res = (fmt(r["res"]), fmt(r["res_ref"]), f"{rr:.2f}")
        else:
            res = ("–", "–", "–")
        sl = sorted(set(r["prof"].slices))
        sl = f"{sl[0]}" if len(sl) == 1 else f"{sl[0]}–{sl[-1]}"
        out.append(
            f"| {r['op']} | {r['kind']} | {r['shape']} | {fmt(r['err'])} | {fmt(r['ref'])} | "
            f"{rs[0]:.2f} | {orth} | {res[0]} | {res[1]} | {res[2]} | {sl} | "
            f"{100 * r['prof'].emulated_flop_share:.1f}% | {r['time']:.2f} ({r['time_ref']:.3f}) | "
            f"{verdict(*rs)} |"
        )
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 2048])
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--slices", default="auto")
    ap.add_argument("--method", default="hybrid-ef")
    ap.add_argument("--out", default="docs/factorizations.md")
    ap.add_argument("--json", default=None, help="also dump the raw numbers here")
    ap.add_argument("--seed", type=int, default=2025)
    ap.add_argument("--tall-phi4-max", type=int, default=1024,
                    help="largest n with the tall phi=4 QR case (the 4n x n runs are slow on CPU)")
    ap.add_argument("--check", choices=["accurate", "native"], default="accurate",
                    help="how residual products are evaluated (default: emulated, 12 slices)")
    ap.add_argument("--no-balance", action="store_true",
                    help="disable the inner-dimension balancing of the emulated GEMMs")
    args = ap.parse_args(argv)
    global MM
    if args.check == "accurate":
        # Balanced like the factorizations' own products, else badly scaled
        # inputs (D S D times x ~ D^-1) make the check itself inaccurate.
        MM = lambda x, y: ozlinalg.matmul(x, y, slices=12, balance=True)  # noqa: E731
    if args.no_balance:
        import ozlinalg.lapack._common as common

        common.BALANCE_INNER = False
    slices = args.slices if args.slices == "auto" else int(args.slices)
    kw = dict(slices=slices, method=args.method)
    nb = args.block_size

    t_start = time.perf_counter()
    rows = []
    for n in args.sizes:
        rng = np.random.default_rng([args.seed, n])
        cases = []
        cases += [lambda k=k, rng=rng, n=n: case_lu(rng, n, k, nb, kw)
                  for k in ("random", "kappa1e8", "kappa1e12", "phi4", "rows")]
        cases += [lambda k=k, rng=rng, n=n: case_chol(rng, n, k, nb, kw)
                  for k in ("random", "kappa1e8", "kappa1e12", "scaled")]
        cases += [lambda k=k, rng=rng, n=n: case_qr(rng, n, k, nb, kw)
                  for k in ("random", "kappa1e8", "kappa1e12", "phi4", "rows")]
        tall_kinds = ("random", "phi4") if n <= args.tall_phi4_max else ("random",)
        cases += [lambda k=k, rng=rng, n=n: case_qr(rng, n, k, nb, kw, tall=True)
                  for k in tall_kinds]
        for c in cases:
            r = c()
            r["n"] = n
            rows.append(r)
            print(f"{r['op']:6s} {r['kind']:14s} {r['shape']:>10s} err {fmt(r['err'])} "
                  f"(LAPACK {fmt(r['ref'])}) res {fmt(r.get('res', 0.0))} "
                  f"(LAPACK {fmt(r.get('res_ref', 0.0))}) slices {sorted(set(r['prof'].slices))} "
                  f"share {100 * r['prof'].emulated_flop_share:.1f}% {r['time']:.2f}s",
                  flush=True)

    nmax = max(args.sizes)
    rate = engine_rate(min(nmax, 2048), args.method)
    lines = []
    cmd = "python benchmarks/studies/factorization_accuracy.py " + " ".join(argv or sys.argv[1:])
    try:
        import threadpoolctl

        threads = {i["internal_api"]: i["num_threads"]
                   for i in threadpoolctl.threadpool_info()}
    except Exception:  # pragma: no cover
        threads = {}
    lines += [
        BEGIN,
        f"Generated by `{cmd.strip()}` in {time.perf_counter() - t_start:.0f} s on "
        f"{platform.machine()} / {os.cpu_count()} cores (BLAS threads {threads}), "
        f"numpy {np.__version__}, block size {nb}, slices={args.slices}, method={args.method}, "
        f"inner balancing {'off' if args.no_balance else 'on'}, residual products "
        f"{'emulated with 12 slices (accurate)' if args.check == 'accurate' else 'native'}, "
        "`min_size=0`. Norms are 1-norms; solve residual = ‖Ax−b‖/(‖A‖‖x‖+‖b‖); "
        "ratio = ours / LAPACK (target ≤ 4).",
        "",
    ]
    for n in args.sizes:
        lines += [f"### n = {n}", "", table([r for r in rows if r["n"] == n]), ""]

    big = [r for r in rows if r["n"] == nmax and r["kind"] in ("random", "tall random")]
    lines += [
        f"### Emulated-flop share and cost model at n = {nmax}",
        "",
        f"Engine: one exact INT8 product of {min(nmax, 2048)}³ runs at "
        f"{rate / 1e9:.1f} Gop/s on this CPU. Model = Σ over the emulated GEMM calls of "
        "(INT8 GEMMs of the call) × (2mnp / that rate).",
        "",
        "| op | shape | emulated flop share | emulated GEMM calls | INT8 GEMMs | model s | "
        "INT8 time s (÷ model) | split s | accumulate s | all emulated GEMM time s (÷ model) "
        "| factorization s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in big:
        p = r["prof"]
        model = cost_model(p, rate)
        lines.append(
            f"| {r['op']} | {r['shape']} | {100 * p.emulated_flop_share:.1f}% | "
            f"{p.emulated_gemm_calls} | {p.int8_gemms} | {model:.2f} | "
            f"{p.time_int8:.2f} ({p.time_int8 / model:.2f}) | {p.time_split:.2f} | "
            f"{p.time_accumulate:.2f} | {p.time_total:.2f} ({p.time_total / model:.2f}) | "
            f"{r['time']:.2f} |"
        )
    lines += ["", END]
    block = "\n".join(lines)

    if os.path.exists(args.out):
        text = open(args.out).read()
        if BEGIN in text and END in text:
            text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
    else:
        text = "# Factorizations\n\n" + block + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    if args.json:
        dump = [{k: v for k, v in r.items() if k != "prof"}
                | {"slices": sorted(set(r["prof"].slices)),
                   "share": r["prof"].emulated_flop_share} for r in rows]
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1)
    worst = max(max(ratio(r["err"], r["ref"]), ratio(r.get("res", 0), r.get("res_ref", 1)),
                    ratio(r.get("orth", 0), r.get("orth_ref", 1))) for r in rows)
    print(f"worst ratio to LAPACK: {worst:.2f}; wrote {args.out}")


if __name__ == "__main__":
    main()
