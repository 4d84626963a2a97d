"""Accuracy of ``ozlinalg.linalg.eigh`` / ``svd`` against LAPACK ``dsyevd`` / ``dgesdd``.

    python benchmarks/studies/eigen_accuracy.py [--n 256 512] [--ref-n 64]
        [--md FILE] [--json FILE]

For each test matrix the emulated decomposition (:func:`ozlinalg.linalg.eigh`,
:func:`ozlinalg.linalg.svd`, the default options) and LAPACK's
(``scipy.linalg.eigh(driver="evd")``, ``scipy.linalg.svd(lapack_driver="gesdd")``) run
on the same input. The metrics:

* eigh: residual ``||A V - V diag(w)||_F / ||A||_F``, orthogonality ``||V^H V - I||_F``;
* svd: residual ``||A - U diag(s) V^H||_F / ||A||_F``, ``||U^H U - I||_F``,
  ``||V^H V - I||_F``;

each evaluated as ONE faithfully rounded product (``ozlinalg.matmul(...,
accuracy="faithful")``) of concatenated exact operands (``[A, V] [V; -diag(w)]``,
``[V^H, I] [V; -I]``, ``[A, -hi, -lo] [I; V^H; V^H]`` with ``U diag(s) = hi + lo``
split exactly by TwoProduct), so that every entry of the residual is the exact one
rounded once: the metric is not limited by DGEMM's rounding.

Eigenvalue / singular value errors ``max |w - w_ref| / ||A||_2`` are against a
higher-precision reference only where it is cheap: mpmath (``eigsy`` / ``eighe`` /
``svd_r`` / ``svd_c``, 40 digits) on the rounded double matrix, at the orders
``<= --ref-n`` (the tiny matrices, and every family again at ``--ref-n``, default 64,
its clusters scaled down). At the larger orders the column is the agreement with
LAPACK, ``max |w - w_LAPACK| / ||A||_2``, not an error (the residual bounds each
computed eigenvalue's distance to the spectrum).

The refinement steps are counted from :func:`ozlinalg.profile`: the emulated
products of order n x n x n, 4 per eigh step (``X^H (A X)``: 2, ``X^H X``, ``X + X E``)
and 6 per svd step; products of a cluster's block are of smaller shapes. A
decomposition that fell back to LAPACK's double precision shows in the profile's
``native_calls`` as ``"lapack fallback"`` and in the table as such.

Verdict ("ok"): each residual / orthogonality of the emulated result at most
2x LAPACK's plus ``sqrt(n) eps`` (the floor of rounding the output to double: an
exactly orthogonal V rounded entrywise has ``||V^H V - I||_F`` and residual up to
about ``sqrt(n) eps``); each eigenvalue error (against a reference) at most 2x LAPACK's
plus ``eps``. A violation is printed as "VIOLATION" and the exit status is 1.

The matrices (A = Q diag(lam) Q^H with Q a random orthogonal matrix, A rounded then
symmetrized; svd: U diag(sigma) V^T):

* ``random``: (G + G^T) / 2, G standard normal (svd: G);
* ``clustered``: 100 equal eigenvalues (1.0), 100 spaced 1e-9 (from 0.5), the rest
  uniform in [-1, 1] (svd: 1.0, from 0.5, [0, 1]); at ``--ref-n`` n/4 and n/4;
* ``graded``: eigenvalues 1 ... 1e-13 log-spaced, random signs (svd: no signs);
* ``rank-def``: half the eigenvalues (singular values) zero, the rest standard normal;
* ``complex``: (G + G^H) / 2, G complex standard normal (svd: G);
* ``tiny``: n = 1, 2, 3, random.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time

import numpy as np
import scipy
import scipy.linalg as sla
from report import write_report  # the studies' report writer (this folder)

import ozlinalg
from ozlinalg.linalg import eigh, svd

EPS = 2.0**-52
FALLBACK = "lapack fallback"  # ozlinalg.linalg._spectral.FALLBACK
try:  # clusters of at least this order are refined by the routine itself (recursion)
    from ozlinalg.linalg._spectral import RECURSE_MIN
except ImportError:  # pragma: no cover
    RECURSE_MIN = 192
FAMILIES = ("random", "clustered", "graded", "rank-def", "complex")


# ----------------------------------------------------------------- the machine


def cpu_class():
    """A short name of this CPU (vendor, model, microarchitecture where known, ISA)."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    k, v = (s.strip() for s in line.split(":", 1))
                    info.setdefault(k, v)
    except OSError:
        return platform.processor() or platform.machine()
    name = info.get("model name", platform.machine())
    flags = set(info.get("flags", "").split())
    fam, model = int(info.get("cpu family", 0)), int(info.get("model", 0))
    arch = ""
    if info.get("vendor_id") == "AuthenticAMD":
        if fam == 23:
            arch = "Zen 2" if model >= 0x30 else "Zen / Zen+"
        elif fam == 25:
            arch = "Zen 4" if 0x10 <= model <= 0x1F or 0x60 <= model <= 0xAF else "Zen 3"
        elif fam == 26:
            arch = "Zen 5"
    isa = ("AVX-512" + (" VNNI" if "avx512_vnni" in flags else "")
           if "avx512f" in flags else "AVX2+FMA, no AVX-512" if "avx2" in flags else "SSE")
    arch = f"{arch}, " if arch else ""
    return f"{name} ({arch}family {fam} model {model}; {isa}; {os.cpu_count()} cores)"


def machine_tag():
    """The short machine word of the result files' names (benchmarks/results/README.md)."""
    c = cpu_class()
    for word in ("Zen 5", "Zen 4", "Zen 3", "Zen 2"):
        if word in c:
            return word.replace(" ", "").lower()
    return platform.machine()


# ----------------------------------------------------------------- inputs


def _orthogonal(rng, n, complex_=False):
    g = rng.standard_normal((n, n))
    if complex_:
        g = g + 1j * rng.standard_normal((n, n))
    q, r = np.linalg.qr(g)
    return q * (np.diagonal(r) / np.abs(np.diagonal(r)))


def _spectrum(rng, n, family, svd_=False):
    """The eigenvalues (singular values) of a constructed family member."""
    if family == "clustered":
        k = 100 if n >= 256 else max(2, n // 4)
        rest = rng.uniform(0.0 if svd_ else -1.0, 1.0, n - 2 * k)
        return np.concatenate([np.ones(k), 0.5 + 1e-9 * np.arange(k), rest])
    if family == "graded":
        lam = np.logspace(0, -13, n)
        return lam if svd_ else lam * rng.choice([-1.0, 1.0], n)
    if family == "rank-def":
        lam = rng.standard_normal(n - n // 2)
        return np.concatenate([np.abs(lam) if svd_ else lam, np.zeros(n // 2)])
    raise ValueError(family)


def sym_matrix(rng, n, family):
    if family in ("random", "tiny"):
        g = rng.standard_normal((n, n))
        return (g + g.T) / 2
    if family == "complex":
        g = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
        return (g + g.conj().T) / 2
    q = _orthogonal(rng, n)
    a = (q * _spectrum(rng, n, family)) @ q.T
    return (a + a.T) / 2


def gen_matrix(rng, n, family):
    if family in ("random", "tiny"):
        return rng.standard_normal((n, n))
    if family == "complex":
        return rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
    u, v = _orthogonal(rng, n), _orthogonal(rng, n)
    return (u * _spectrum(rng, n, family, svd_=True)) @ v.T


# ----------------------------------------------------------------- metrics


def fmm(a, b):
    """The product rounded faithfully (each entry one of the two doubles around the
    exact value)."""
    return ozlinalg.matmul(a, b, accuracy="faithful")


def _ct(x):
    return x.conj().T


def _split(a):
    c = 134217729.0 * a  # Veltkamp: 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_prod_real(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def two_prod(x, s):
    """``x * s = hi + lo`` exactly (x real or complex, s real; no overflow)."""
    if x.dtype.kind != "c":
        return _two_prod_real(x, s)
    rh, rl = _two_prod_real(x.real, s)
    ih, il = _two_prod_real(x.imag, s)
    return rh + 1j * ih, rl + 1j * il


def orth(v):
    """``||V^H V - I||_F`` from one faithful product of ``[V^H, I] [V; -I]``."""
    k = v.shape[1]
    eye = np.eye(k, dtype=v.dtype)
    return float(np.linalg.norm(fmm(np.hstack([_ct(v), eye]), np.vstack([v, -eye]))))


def eig_residual(a, w, v):
    """``||A V - V diag(w)||_F / ||A||_F``: ``[A, V] [V; -diag(w)]``, one faithful product."""
    d = np.diag(-w).astype(v.dtype)
    r = fmm(np.hstack([a, v]), np.vstack([v, d]))
    return float(np.linalg.norm(r) / np.linalg.norm(a))


def svd_residual(a, u, s, vh):
    """``||A - U diag(s) V^H||_F / ||A||_F``: ``U diag(s) = hi + lo`` exactly, then
    ``[A, -hi, -lo] [I; V^H; V^H]``, one faithful product."""
    hi, lo = two_prod(u, s[None, :])
    eye = np.eye(a.shape[1], dtype=a.dtype)
    dt = np.result_type(a, hi, vh)
    r = fmm(np.hstack([a, -hi, -lo]).astype(dt), np.vstack([eye, vh, vh]).astype(dt))
    return float(np.linalg.norm(r) / np.linalg.norm(a))


def mp_eigvals(a):
    """Eigenvalues of the Hermitian double matrix ``a`` (as given) to 40 digits."""
    import mpmath

    with mpmath.workdps(40):
        m = mpmath.matrix(a.tolist())
        e = mpmath.eighe(m, eigvals_only=True) if a.dtype.kind == "c" else \
            mpmath.eigsy(m, eigvals_only=True)
        return np.sort(np.array([float(x) for x in e]))


def mp_svdvals(a):
    import mpmath

    with mpmath.workdps(40):
        m = mpmath.matrix(a.tolist())
        s = mpmath.svd_c(m, compute_uv=False) if a.dtype.kind == "c" else \
            mpmath.svd_r(m, compute_uv=False)
        return np.sort(np.array([float(x) for x in s]))[::-1]


# ----------------------------------------------------------------- one case


def _profiled(fn):
    with ozlinalg.profile() as prof:
        t = time.perf_counter()
        out = fn()
        t = time.perf_counter() - t
    return out, prof, t


def _order(shape):
    """k of a square k x k x k product (a complex one is recorded as 2k x k x 2k), or None."""
    m, k, p = shape
    return k if m == p and m in (k, 2 * k) else None


def _steps(prof, n, per_step):
    """Refinement steps: the n x n x n products over the products per step."""
    return sum(1 for c in prof.calls if _order(c.shape) == n) / per_step


def _notes(prof, n):
    notes = []
    if prof.native_calls.get(FALLBACK):
        notes.append("LAPACK FALLBACK")
    small = sum(v for k, v in prof.native_calls.items() if k in ("syevd", "gesdd"))
    if small:
        notes.append(f"{small} cluster block(s) by LAPACK")
    sub = sorted({k for c in prof.calls if (k := _order(c.shape)) is not None and k != n})
    rec = [k for k in sub if k >= RECURSE_MIN]
    if sub:
        notes.append("emulated cluster products k=" + ",".join(map(str, sub)))
    if rec:
        notes.append("recursion k=" + ",".join(map(str, rec)))
    return notes


def _verdict(row, n, ref):
    floor = math.sqrt(n) * EPS
    bad = [k for k in row["metrics"]
           if row["metrics"][k][0] > 2.0 * row["metrics"][k][1] + floor]
    if ref and row["val_err"][0] > 2.0 * row["val_err"][1] + EPS:
        bad.append("values")
    if any("FALLBACK" in x for x in row["notes"]):
        bad.append("fallback")
    return "ok" if not bad else "VIOLATION (" + ", ".join(bad) + ")"


def case_eigh(a, family, ref):
    n = a.shape[0]
    (w, v), prof, t = _profiled(lambda: eigh(a))
    t0 = time.perf_counter()
    w0, v0 = sla.eigh(a, driver="evd")
    t0 = time.perf_counter() - t0
    nrm2 = max(float(np.max(np.abs(w0))), np.finfo(float).tiny)
    if ref:
        wr = mp_eigvals(a)
        val = (float(np.max(np.abs(w - wr))) / nrm2, float(np.max(np.abs(w0 - wr))) / nrm2)
    else:
        val = (float(np.max(np.abs(w - w0))) / nrm2, 0.0)
    row = dict(op="eigh", family=family, n=n, dtype=str(a.dtype), ref=bool(ref),
               metrics={"residual": (eig_residual(a, w, v), eig_residual(a, w0, v0)),
                        "orth V": (orth(v), orth(v0))},
               val_err=val, steps=_steps(prof, n, 4), calls=prof.emulated_gemm_calls,
               notes=_notes(prof, n), time=t, time_lapack=t0)
    row["verdict"] = _verdict(row, n, ref)
    return row


def case_svd(a, family, ref):
    n = a.shape[0]
    (u, s, vh), prof, t = _profiled(lambda: svd(a))
    t0 = time.perf_counter()
    u0, s0, vh0 = sla.svd(a, lapack_driver="gesdd")
    t0 = time.perf_counter() - t0
    nrm2 = max(float(s0[0]), np.finfo(float).tiny)
    if ref:
        sr = mp_svdvals(a)
        val = (float(np.max(np.abs(s - sr))) / nrm2, float(np.max(np.abs(s0 - sr))) / nrm2)
    else:
        val = (float(np.max(np.abs(s - s0))) / nrm2, 0.0)
    row = dict(op="svd", family=family, n=n, dtype=str(a.dtype), ref=bool(ref),
               metrics={"residual": (svd_residual(a, u, s, vh), svd_residual(a, u0, s0, vh0)),
                        "orth U": (orth(u), orth(u0)),
                        "orth V": (orth(_ct(vh)), orth(_ct(vh0)))},
               val_err=val, steps=_steps(prof, n, 6), calls=prof.emulated_gemm_calls,
               notes=_notes(prof, n), time=t, time_lapack=t0)
    row["verdict"] = _verdict(row, n, ref)
    return row


def cases(n, seed, ref_n):
    """(op, family, matrix, with reference) of one order n."""
    out = []
    for op, make in (("eigh", sym_matrix), ("svd", gen_matrix)):
        for fam in FAMILIES:
            rng = np.random.default_rng([seed, n, FAMILIES.index(fam), op == "svd"])
            out.append((op, fam, make(rng, n, fam), n <= ref_n))
    return out


def tiny_cases(seed):
    out = []
    for op, make in (("eigh", sym_matrix), ("svd", gen_matrix)):
        for n in (1, 2, 3):
            rng = np.random.default_rng([seed, n, 99, op == "svd"])
            out.append((op, "tiny", make(rng, n, "tiny"), True))
    return out


# ----------------------------------------------------------------- output


def fmt(x):
    return f"{x:.1e}"


def table(rows):
    out = ["| op | matrix | n | residual: emulated (LAPACK) | orthogonality: emulated (LAPACK) "
           "| value error: emulated (LAPACK) | steps | emulated GEMMs | notes | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["metrics"]
        res = f"{fmt(m['residual'][0])} ({fmt(m['residual'][1])})"
        orths = " / ".join(f"{k[-1]}: {fmt(m[k][0])} ({fmt(m[k][1])})"
                           for k in m if k.startswith("orth"))
        if r["ref"]:
            val = f"{fmt(r['val_err'][0])} ({fmt(r['val_err'][1])})"
        else:
            val = f"vs LAPACK {fmt(r['val_err'][0])}"
        steps = f"{r['steps']:g}"
        out.append(f"| {r['op']} | {r['family']} | {r['n']} | {res} | {orths} | {val} | "
                   f"{steps} | {r['calls']} | {'; '.join(r['notes']) or '-'} | "
                   f"{r['verdict']} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--ref-n", type=int, default=64,
                    help="order of the mpmath-referenced run of every family (0: none)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--md", help="write the markdown report here")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    eng = ozlinalg.engines.get_engine(np)
    head = (f"CPU: {cpu_class()}; engine: {eng.describe()}; numpy {np.__version__}, "
            f"scipy {scipy.__version__}, "
            f"ozlinalg {ozlinalg.__version__}")
    print(head, flush=True)
    t_start = time.perf_counter()
    todo = tiny_cases(args.seed)
    if args.ref_n:
        todo += cases(args.ref_n, args.seed, args.ref_n)
    for n in args.n:
        todo += cases(n, args.seed, args.ref_n)
    rows = []
    for op, fam, a, ref in todo:
        r = (case_eigh if op == "eigh" else case_svd)(a, fam, ref)
        rows.append(r)
        m = r["metrics"]
        print(f"{op:4s} {fam:9s} n={r['n']:4d} "
              + " ".join(f"{k} {fmt(x)} ({fmt(y)})" for k, (x, y) in m.items())
              + f" values {fmt(r['val_err'][0])} ({fmt(r['val_err'][1])})"
              + f" steps {r['steps']:g} calls {r['calls']} {r['time']:.2f}s"
              + f" ({r['time_lapack']:.3f}s) {'; '.join(r['notes'])} {r['verdict']}",
              flush=True)
    cmd = "python benchmarks/studies/eigen_accuracy.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    md = "\n".join([
        f"Generated by `{cmd.strip()}` on {time.strftime('%Y-%m-%d')} in "
        f"{time.perf_counter() - t_start:.0f} s.",
        "",
        head + ".",
        "",
        "Residual / orthogonality: Frobenius norms, each residual one faithfully rounded "
        "product; value error: max |w − w_ref| / ‖A‖₂ against mpmath (40 digits) on the "
        "rounded matrix where a reference is given, else the agreement with LAPACK. "
        "Verdict: emulated ≤ 2 × LAPACK + √n·eps (values: + eps).",
        "",
        table(rows),
        "",
    ])
    write_report(md, head, cmd, rows, args.md, args.json)
    return 0 if all(r["verdict"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
