"""The GPU check's refined-solve step: ``ozlinalg.solve(refine=True)`` on CuPy arrays.

NOT YET RUN ON A GPU when written. Run by::

    python3 benchmarks/gpu/gpu_check.py --refine-step --sizes 4096 --out $OUT/gpu-refine.md

For each n and κ (random matrices with geometrically spaced singular values and a known
solution ``x``, ``b = A x``), general and positive definite, on the device:

* the native baselines, cuSOLVER through CuPy: ``cupy.linalg.solve`` (``getrf`` +
  ``getrs``) and ``cupyx.lapack.posv`` (``potrf`` + ``potrs``);
* ozlinalg's DGEMM-level solve (``refine=False``);
* the refined solve per method (``hybrid-ef``, ``crt``): the counts it factored at and
  its refinement steps (``ozlinalg.profile()``).

Columns: best time of ``reps`` synchronized runs, its ratio to the native baseline,
normwise backward error ``||b - A x||_inf / (||A||_inf ||x||_inf + ||b||_inf)`` and
forward error ``||x - x_true||_inf / ||x_true||_inf`` (both on the host in FP64).
"""
from __future__ import annotations

import numpy as np

from .gpu_baselines import best_of

TITLE = "Refined solves on the GPU (ozlinalg.solve(refine=True) against cuSOLVER)"

#: A rough H200 time per size (for the owed run's estimate; not a measurement): the
#: host-side test matrices and the first-use plans dominate.
SECONDS_PER_SIZE = 45.0


def _matrix(rng, n, kappa, spd):
    q1 = np.linalg.qr(rng.standard_normal((n, n)))[0]
    q2 = q1 if spd else np.linalg.qr(rng.standard_normal((n, n)))[0]
    a = (q1 * np.logspace(0, -np.log10(kappa), n)) @ q2.T
    return (a + a.T) / 2 if spd else a


def _errors(a, b, x, x_true):
    r = np.abs(b - a @ x).max()
    eta = r / (np.abs(a).sum(axis=1).max() * np.abs(x).max() + np.abs(b).max())
    return float(eta), float(np.abs(x - x_true).max() / np.abs(x_true).max())


def _native(cp, a, b, spd):
    """cuSOLVER's solve: ``potrf`` + ``potrs`` (``cupyx.lapack.posv``) for positive
    definite matrices where CuPy has it, else ``getrf`` + ``getrs``."""
    if spd:
        try:
            from cupyx.lapack import posv
        except ImportError:
            posv = None
        if posv is not None:
            return posv(a, b)
    return cp.linalg.solve(a, b)


def table(rows):
    out = ["| n | matrix | κ | solver | time (s) | ratio | backward error | forward error | "
           "counts | steps |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['n']} | {r['kind']} | {r['kappa']:.0e} | {r['solver']} | "
                   f"{r['time']:.4f} | {r['ratio']:.2f} | {r['eta']:.1e} | {r['fwd']:.1e} | "
                   f"{r['counts']} | {r['steps']} |")
    return "\n".join(out)


def _case(cp, rng, n, kind, kappa, reps, methods):
    """The rows of one matrix: the native baseline, then ozlinalg's solves."""
    import ozlinalg

    spd = kind == "pos"
    a_h = _matrix(rng, n, kappa, spd)
    x_true = rng.standard_normal(n)
    b_h = a_h @ x_true
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    assume = "pos" if spd else "gen"

    def native():
        return _native(cp, a, b, spd)

    def ours(refine):
        return ozlinalg.solve(a, b, assume_a=assume, refine=refine)

    native()  # warm-up
    t_nat, x = best_of(cp, native, reps)
    base = dict(n=n, kind=kind, kappa=kappa)
    eta, fwd = _errors(a_h, b_h, cp.asnumpy(x), x_true)
    rows = [dict(base, solver="cuSOLVER", time=t_nat, ratio=1.0, eta=eta, fwd=fwd,
                 counts="", steps="")]
    runs = [("emulated (refine=False)", methods[0], False)]
    runs += [(f"refined {m}", m, True) for m in methods]
    for name, method, refine in runs:
        with ozlinalg.options(method=method):
            ours(refine)  # warm-up
            with ozlinalg.profile() as prof:
                t, x = best_of(cp, lambda r=refine: ours(r), reps)
        rec = prof.refined[-1] if prof.refined else None
        eta, fwd = _errors(a_h, b_h, cp.asnumpy(x), x_true)
        steps = "" if rec is None else ("fell back" if rec.fell_back else (
            f"{rec.iterations}" + (f"+{rec.gmres_steps}g" if rec.gmres_steps else "")))
        rows.append(dict(base, solver=name, time=t, ratio=t / t_nat, eta=eta, fwd=fwd,
                         counts="/".join(map(str, rec.counts)) if rec else "auto",
                         steps=steps))
    return rows


def run_step(rep, log, sizes, kappas=(1e2, 1e6, 1e10), reps=3,
             methods=("hybrid-ef", "crt")):
    """Every row into ``rep.data["refined"]`` and the section :data:`TITLE`."""
    import cupy as cp

    rows = rep.data.setdefault("refined", [])
    rng = np.random.default_rng(7)
    for n in sizes:
        for kind in ("gen", "pos"):
            for kappa in kappas:
                try:
                    new = _case(cp, rng, n, kind, kappa, reps, methods)
                    rows.extend(new)
                    log(f"refined n={n} {kind} kappa={kappa:.0e}:",
                        ", ".join(f"{r['solver']} {r['ratio']:.2f}x" for r in new))
                except Exception as exc:
                    rep.data["errors"].append(f"refined n={n} {kind} kappa={kappa:.0e}: "
                                              f"{exc!r}")
                rep.add(TITLE, table(rows) + "\n\nratio: time / the cuSOLVER baseline of "
                        "the same matrix (getrf + getrs, or potrf + potrs), measured in "
                        "the same run; errors on the host in FP64 against the known x.")
