"""The GPU check's eigendecomposition step: ``ozlinalg.linalg.eigh`` on CuPy arrays
against cuSOLVER ``syevd`` (``cupy.linalg.eigh`` in float64).

NOT YET RUN ON A GPU when written. The owed run's 8192 part runs it after its benchmark
(``--eigh-sizes 4096``); alone::

    python3 benchmarks/gpu/gpu_check.py --eigh-step --eigh-sizes 4096 --out $OUT/gpu-eigh.md

For each n, on the device, the same input to both solvers: ``random`` (``(G + G^T) / 2``,
G standard normal) and, if the part's time allows, ``clustered`` (``Q diag(lam) Q^T``, Q
the Q factor of a Gaussian matrix: 100 equal eigenvalues, 100 spaced 1e-9, the rest
uniform in [-1, 1]). Rows:

* cuSOLVER: ``cupy.linalg.eigh`` (``syevd``, float64): best of ``reps`` synchronized runs
  after one warm-up;
* ozlinalg: ``ozlinalg.linalg.eigh`` (a float32 ``syevd`` start refined by Ogita-Aishima
  steps whose O(n^3) work runs on the emulated GEMM; the default options): the same,
  plus the first call (kernel compilation included) and one profiled run
  (``ozlinalg.profile()``): the emulated products, their n^3 equivalent, INT8 GEMMs,
  the time split, the share of the profiled time spent in them, the native calls
  (``ssyevd``, a cluster's ``syevd``, ``lapack fallback`` where it did not converge).

Accuracy of both results, on the device, with the emulated products at DGEMM level
(``ozlinalg.matmul``, FP64 accumulation of exact INT8 products): residual
``||A V - V diag(w)||_F / ||A||_F`` (``A V`` emulated, less ``V diag(w)`` in FP64) and
orthogonality ``||V^T V - I||_F``. On the CPU at n = 1024 (dsyevd's vectors, random
matrix) both are within 0.04 % of an extended-precision reference, as close as with
``A V`` faithful (``accuracy="faithful"``); native DGEMM's are 2.6 % and 1.5 % off.
Not faithful (:data:`RESIDUAL_ACCURACY`): the faithful mode recomputes the entries its
bound leaves exactly on the host, and on the device machine that is the generic NumPy
path (the checkout's compiled kernels are not built for its Python): 0.15 % of ``A V``'s
entries at n = 2048, 842 entries at n = 1024 in 0.6 s on 2 cores, so tens of seconds a
product at n = 4096; ``V^T V`` would leave every off-diagonal entry (they cancel to
about u). Eigenvalues: ``max |w - w_syevd| / ||A||_2`` (agreement, not an error).

Time budget. The step is estimated before each matrix (:func:`matrix_seconds`) and
skipped, saying why, when the estimate does not fit the time the part has left
(``time_left``: the owed run passes each part its own deadline). At n = 4096 the model
says ~7.5 s for the random matrix, ~9 s for the clustered one and ~8 s of first use:
~25 s, most of it ``syevd`` (float64 for cuSOLVER, float32 for ozlinalg's start); in
the run, the clustered matrix's estimate is the random one's measured time x 1.5.
"""
from __future__ import annotations

import time

import numpy as np

from .gpu_baselines import best_of

TITLE = "Eigendecomposition on the GPU (ozlinalg.linalg.eigh against cuSOLVER syevd)"

MATRICES = ("random", "clustered")

# A rough H100 / H200 model for the estimate (not measurements).
#: cuSOLVER syevd's effective rate (its 9 n^3 flops / time), float64 and float32: at
#: n = 4096 about 1.5 s and 1.0 s (the tridiagonal reduction is memory bound).
SYEVD_FLOPS = {"float64": 0.4e12, "float32": 0.6e12}
#: Emulated n x n x n products of one ozlinalg eigh, in DGEMM-level products' worth of
#: INT8 work: 4 per refinement step (``A X``, ``X^T (A X)``, ``X^T X``, ``X + X E``).
#: Counted on the CPU at n = 512 and 1024: random, 2 steps (8 products, 380 INT8 GEMMs
#: at n = 1024: 8.4 products of 45); clustered, 3 steps (12, and the clusters' smaller
#: products; some with more slices: 14 products' INT8 work). A margin on both.
PRODUCTS = {"random": 12, "clustered": 16}
#: One DGEMM-level product when the part measured none: hybrid-ef's ~55 n^3 INT8
#: GEMMs at ~1e15 OPS, times 1.5 for splitting and accumulation.
MODEL_PRODUCT_OPS = 55 * 1.5 / 1e15
#: The residual's product ``A V``: "dgemm" (see the module's notes), or "faithful"
#: (each entry within one ulp; then add its host recomputation to the estimate).
RESIDUAL_ACCURACY = "dgemm"
#: The refinement's O(n^2) passes, host syncs and cluster loop, seconds at n = 4096
#: per eigh (x2 on the clustered matrix, whose clusters are diagonalised one by one).
PASSES_S = 0.3
#: First use: the refinement's elementwise kernels compiled, cuSOLVER workspaces.
FIRST_USE_S = 8.0
#: The clustered matrix's inputs: a QR of an n x n Gaussian matrix (s at n = 4096).
QR_S = 0.5


def product_seconds(n, rows=(), method="hybrid-ef"):
    """Seconds of one n x n x n DGEMM-level product: the part's own measured row of
    ``method`` (scaled by (n / size)^3 from the largest size measured), else the model."""
    got = [(r["n"], r["time"]) for r in rows
           if r.get("method") == method and r.get("time") and not r.get("note")]
    if got:
        size, t = max(got)
        return t * (n / size) ** 3
    return MODEL_PRODUCT_OPS * 2.0 * n**3


def matrix_seconds(n, kind="random", product_s=None, reps=1):
    """Estimated seconds of one matrix of the step (both solvers and the metrics)."""
    product_s = product_seconds(n) if product_s is None else product_s
    flops, sq = 9.0 * n**3, (n / 4096) ** 2
    passes = PASSES_S * sq * (2 if kind == "clustered" else 1)
    ours = flops / SYEVD_FLOPS["float32"] + PRODUCTS[kind] * product_s + passes
    theirs = flops / SYEVD_FLOPS["float64"]
    metrics = 2 * 2 * product_s
    inputs = QR_S * (n / 4096) ** 3 if kind == "clustered" else 0.0
    return inputs + (1 + reps) * theirs + (2 + reps) * ours + metrics


def estimate_seconds(sizes, kinds=MATRICES, product_s=None, reps=1):
    """Estimated seconds of the whole step (first use included)."""
    return FIRST_USE_S + sum(matrix_seconds(n, k, product_s, reps)
                             for n in sizes for k in kinds)


def _matrix(cp, n, kind, seed):
    rs = cp.random.RandomState(seed)
    if kind == "random":
        g = rs.standard_normal((n, n))
        return (g + g.T) / 2
    k = min(100, n // 8)
    lam = np.concatenate([np.ones(k), 0.5 + 1e-9 * np.arange(k),
                          np.random.default_rng(seed).uniform(-1, 1, n - 2 * k)])
    q = cp.linalg.qr(rs.standard_normal((n, n)))[0]
    a = (q * cp.asarray(lam)[None, :]) @ q.T
    return (a + a.T) / 2


def _accuracy(cp, a, w, v, norm_a):
    """(residual, orthogonality, entries a faithful ``A V`` recomputed exactly)."""
    import ozlinalg

    with ozlinalg.profile() as prof:
        av = ozlinalg.matmul(a, v, accuracy=RESIDUAL_ACCURACY)
    res = float(cp.linalg.norm(av - v * w[None, :])) / norm_a
    del av
    vtv = ozlinalg.matmul(v.T, v)
    orth = float(cp.linalg.norm(vtv - cp.eye(v.shape[1])))
    return res, orth, prof.entries_recomputed


def _profile_fields(prof, n, t_prof):
    n3 = sum(c.shape[0] * c.shape[1] * c.shape[2] for c in prof.calls) / n**3
    faithful = sum(c.accuracy == "faithful" for c in prof.calls)
    how = f"; {faithful} faithful, {prof.entries_recomputed} entries recomputed" \
        if faithful else ""
    return {
        "products": f"{prof.emulated_gemm_calls} ({n3:.1f} n^3{how})",
        "products_n3": n3, "int8_gemms": prof.int8_gemms, "faithful_products": faithful,
        "faithful_recomputed": prof.entries_recomputed,
        "slices": ",".join(str(s) for s in sorted(set(prof.slices))),
        "methods": dict(prof.methods),
        "split": (f"{prof.time_split:.3f} / {prof.time_int8:.3f} / "
                  f"{prof.time_accumulate:.3f} / {prof.time_other:.3f}"),
        "emulated_share": prof.time_total / t_prof if t_prof > 0 else None,
        "native": ", ".join(f"{k} x{v}" for k, v in sorted(prof.native_calls.items())),
        "profiled_time": t_prof,
    }


def _case(cp, n, kind, reps, seed):
    """The two rows of one matrix: cuSOLVER, then ozlinalg."""
    import ozlinalg
    from ozlinalg.linalg import eigh

    a = _matrix(cp, n, kind, seed)
    norm_a = float(cp.linalg.norm(a))
    base = dict(n=n, matrix=kind)

    def native():
        return cp.linalg.eigh(a)

    native()  # warm-up
    t_nat, (w_nat, v_nat) = best_of(cp, native, reps)
    res, orth, rec = _accuracy(cp, a, w_nat, v_nat, norm_a)
    del v_nat
    rows = [dict(base, solver="cuSOLVER syevd (cupy.linalg.eigh)", time=t_nat, ratio=1.0,
                 residual=res, orthogonality=orth, recomputed=rec)]
    t_first, _ = best_of(cp, lambda: eigh(a), 1)  # first use: kernels compiled
    t_ours, _ = best_of(cp, lambda: eigh(a), reps)
    with ozlinalg.profile() as prof:
        t_prof, (w, v) = best_of(cp, lambda: eigh(a), 1)
    res, orth, rec = _accuracy(cp, a, w, v, norm_a)
    norm2 = float(cp.abs(w_nat).max()) or 1.0
    agree = float(cp.abs(w - w_nat).max()) / norm2
    rows.append(dict(base, solver="ozlinalg.linalg.eigh", time=t_ours, ratio=t_ours / t_nat,
                     residual=res, orthogonality=orth, recomputed=rec, eig_agreement=agree,
                     first_call=t_first, **_profile_fields(prof, n, t_prof)))
    return rows


def _fmt(v, spec):
    return "" if v is None else format(v, spec)


def table(rows):
    out = ["| n | matrix | solver | time (s) | ratio | residual | orthogonality | "
           "max abs(w - w_syevd) / norm2(A) | emulated products | INT8 GEMMs | "
           "split / GEMM / acc / other (s) | emulated share | native calls | note |",
           "|" + "---|" * 14]
    for r in rows:
        out.append(
            f"| {r['n']} | {r['matrix']} | {r.get('solver', '')} | {_fmt(r.get('time'), '.3f')} | "
            f"{_fmt(r.get('ratio'), '.2f')} | {_fmt(r.get('residual'), '.1e')} | "
            f"{_fmt(r.get('orthogonality'), '.1e')} | {_fmt(r.get('eig_agreement'), '.1e')} | "
            f"{r.get('products', '')} | {r.get('int8_gemms', '')} | {r.get('split', '')} | "
            f"{_fmt(r.get('emulated_share'), '.1%')} | {r.get('native', '')} | "
            f"{r.get('note', '')} |")
    return "\n".join(out)


NOTES = (
    "ratio: time / cuSOLVER syevd's on the same matrix in the same run (best of the "
    "timed runs after a warm-up; ozlinalg's first call, kernel compilation included, is "
    "in the JSON as first_call). Residual ||A V - V diag(w)||_F / ||A||_F (A V emulated, "
    "V diag(w) subtracted in FP64) and orthogonality ||V^T V - I||_F, the products on the "
    "emulated GEMM at DGEMM level: both within 0.04 % of an extended-precision reference "
    "on the CPU at n = 1024 (native DGEMM's: 2.6 % and 1.5 % off); not faithful, whose "
    "exact recomputation runs on the host (ozlinalg/tools/gpu_eigen.py). Emulated products: "
    "calls of the emulated GEMM in one profiled eigh (its n^3 equivalent: sum m k p / "
    "n^3; the faithful ones, the clusters' rotations, and the entries their bound left "
    "to the exact recomputation on the host); split / GEMM / acc / other: "
    "ozlinalg.profile()'s time split of that run; emulated share: their total / the "
    "profiled run's time (the rest: the float32 syevd start, O(n^2) passes, the "
    "clusters); native calls: ssyevd = the start, syevd = a "
    "cluster's block, 'lapack fallback' = the refinement did not converge.")


def run_step(rep, log, sizes, time_left=None, kinds=MATRICES, reps=1, method="hybrid-ef"):
    """Every row into ``rep.data["eigh"]`` and the section :data:`TITLE`; a matrix whose
    estimate exceeds ``time_left()`` seconds is skipped (its row says why)."""
    import cupy as cp

    rows = rep.data.setdefault("eigh", [])
    pool = cp.get_default_memory_pool()
    first = True
    for n in sizes:
        product_s = product_seconds(n, rep.data.get("rows", ()), method)
        per_matrix = None  # measured seconds of this size's first matrix
        for i, kind in enumerate(kinds):
            est = matrix_seconds(n, kind, product_s, reps) + (FIRST_USE_S if first else 0.0)
            if per_matrix is not None:  # this run's own measure, more for clusters
                est = per_matrix * (1.5 if kind == "clustered" else 1.0)
            left = float("inf") if time_left is None else time_left()
            rep.data.setdefault("eigh_estimates", []).append(
                {"n": n, "matrix": kind, "estimate_s": round(est, 1),
                 "left_s": None if left == float("inf") else round(left, 1),
                 "product_s": product_s})
            if est > left:
                note = (f"skipped: estimated ~{est:.0f} s, {left:.0f} s left before the "
                        "part's deadline")
                rows.append({"n": n, "matrix": kind, "note": note})
                log(f"eigh n={n} {kind}: {note}")
            else:
                t = time.perf_counter()
                try:
                    new = _case(cp, n, kind, reps, 4096 + n + i)
                    rows.extend(new)
                    log(f"eigh n={n} {kind}:", ", ".join(
                        f"{r['solver']} {r['time']:.3f} s res {r['residual']:.1e} "
                        f"orth {r['orthogonality']:.1e}" for r in new))
                except Exception as exc:
                    rows.append({"n": n, "matrix": kind, "note": f"FAILED: {exc!r}"[:200]})
                    rep.data["errors"].append(f"eigh n={n} {kind}: {exc!r}")
                finally:
                    pool.free_all_blocks()
                first = False
                if per_matrix is None:
                    per_matrix = time.perf_counter() - t
            rep.add(TITLE, table(rows) + "\n\n" + NOTES)
