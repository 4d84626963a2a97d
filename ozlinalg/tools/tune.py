"""``python -m ozlinalg tune``: measure where emulation pays on this machine.

For the current NumPy engine it times, per operation of
:data:`ozlinalg._tuning.TUNED_OPS`, the emulated call at DGEMM-level accuracy
(``slices="auto"``) with each method of :data:`ozlinalg._tuning.TUNABLE_METHODS`
against native NumPy / SciPy in the same run, interleaved (native, each method,
native again; the fastest native time counts, with the BLAS's threads or one thread:
the baseline is native FP64 at its best), at a few orders (256, 512, ...,
``--max-n``). A size whose predicted time (the last one's, times 8 per doubling)
would not fit the operation's share of the time budget (40 s, ``--quick`` 12 s)
is skipped, and the ratio trend ``r(n) = a + b / n`` of the last two sizes is
extrapolated up to ``--max-n``. Between a size where emulation loses and the next
where it wins, the same fit interpolates the crossover. Each operation's entry
records its crossover (None: never within ``--max-n``), the fastest method, and
the measured ratio of every method at every size tried; the refined solves are
recorded as "not measured" where ``ozlinalg.solve`` has no ``refine=`` keyword, the
spectral decompositions (``syevd``: ``ozlinalg.linalg.eigh`` against
``scipy.linalg.eigh(driver="evd")``; ``gesdd``: ``ozlinalg.linalg.svd`` against
``scipy.linalg.svd(lapack_driver="gesdd")``) where ``ozlinalg.linalg`` lacks them.

The result goes to the tuning cache (:mod:`ozlinalg._tuning`, docs/tuning.md)
unless ``--dry-run``; ``--json`` prints the file's content. A directory that
cannot be written is reported (exit status 1); the library then falls back on
the model.
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import time

import numpy as np

from .. import _tuning

__all__ = ["main", "measure"]

SIZES = (256, 512, 1024, 2048, 4096)
BUDGET_S = 40.0
QUICK_BUDGET_S = 12.0
#: A method is kept only where its result is this close to native's (relative, max
#: norm): both meet the DGEMM-level contract by their count rules; this catches a
#: broken run, not rounding.
SANITY = 1e-8
#: The trend is extrapolated only from a last measured ratio this close to 1, and only
#: where its asymptote ``a`` is positive (two noisy points far from 1 give any slope).
EXTRAPOLATE_FROM = 1.5
#: An op's first size runs whenever it is predicted to take at most this (seconds), or to
#: fit what is left of the budget: each op gets a ratio unless one size would overrun it.
FIRST_SIZE_S = 5.0


def _best(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _native_best(native):
    """``(seconds, result)``: the faster of one native run on the BLAS's own threads and
    one on a single BLAS thread (as benchmarks/calibration/crossover.py): the baseline
    is native FP64 at its best. On a busy machine a multithreaded LAPACK call can take
    10-100x its time (threads spinning at barriers for a descheduled peer); the emulation
    runs its panels on one BLAS thread, so without this it would look faster than it is.
    The single-thread run is a threadpoolctl limit around that call, restored after."""
    t, out = _best(native, 1)
    ctl = _controller()
    if ctl is None:
        return t, out
    with ctl.limit(limits=1, user_api="blas"):
        return min(t, _best(native, 1)[0]), out


_CONTROLLER: list = []


def _controller():
    """threadpoolctl's controller of the loaded libraries (found once), or None."""
    if not _CONTROLLER:
        try:
            from threadpoolctl import ThreadpoolController  # noqa: PLC0415

            _CONTROLLER.append(ThreadpoolController())
        except Exception:  # noqa: BLE001 (not installed, or failing: no one-thread run)
            _CONTROLLER.append(None)
    return _CONTROLLER[0]


def _has_refine():
    import ozlinalg  # noqa: PLC0415

    try:
        return "refine" in inspect.signature(ozlinalg.solve).parameters
    except (TypeError, ValueError):
        return False


#: spectral op -> the ``ozlinalg.linalg`` function it times
_SPECTRAL = {"syevd": "eigh", "gesdd": "svd"}


def _missing(op, refine):
    """Why `op` cannot be measured with this ozlinalg (None: it can)."""
    if op in _tuning.REFINED_OPS and not refine:
        return "ozlinalg.solve has no refine= keyword here"
    if op in _SPECTRAL:
        import ozlinalg.linalg  # noqa: PLC0415

        if not callable(getattr(ozlinalg.linalg, _SPECTRAL[op], None)):
            return f"ozlinalg.linalg has no {_SPECTRAL[op]} here"
    return None


def _problem(op, n, rng):
    a = rng.standard_normal((n, n))
    if op in ("potrf", "posv_refined"):  # symmetric, diagonally dominant: SPD, cheap
        a = (a + a.T) / 2 + n * np.eye(n)
    elif op == "syevd":  # symmetric, a spread spectrum
        a = (a + a.T) / 2
    elif op not in ("matmul", "gesdd"):
        a += np.sqrt(n) * np.eye(n)
    b = rng.standard_normal((n, n)) if op == "matmul" else rng.standard_normal(n)
    return a, b


def _calls(op, a, b):
    """``(native(), emulated(method))`` of `op` on the problem ``(a, b)``."""
    import scipy.linalg as sla  # noqa: PLC0415
    from scipy.linalg import lapack as sll  # noqa: PLC0415

    import ozlinalg  # noqa: PLC0415
    import ozlinalg.linalg as ol  # noqa: PLC0415
    from ozlinalg import lapack  # noqa: PLC0415

    native = {
        "matmul": lambda: a @ b,
        "getrf": lambda: sll.dgetrf(a)[0],
        "potrf": lambda: sll.dpotrf(a)[0],
        "geqrf": lambda: sll.dgeqrf(a)[0],
        "gesv_refined": lambda: sla.solve(a, b),
        "posv_refined": lambda: sla.solve(a, b, assume_a="pos"),
        "syevd": lambda: sla.eigh(a, driver="evd"),
        "gesdd": lambda: sla.svd(a, lapack_driver="gesdd"),
    }[op]
    emul = {
        "matmul": lambda: ozlinalg.matmul(a, b),
        "getrf": lambda: lapack.getrf(a)[0],
        "potrf": lambda: lapack.potrf(a),
        "geqrf": lambda: lapack.geqrf(a)[0],
        "gesv_refined": lambda: ozlinalg.solve(a, b, refine=True),
        "posv_refined": lambda: ozlinalg.solve(a, b, assume_a="pos", refine=True),
        "syevd": lambda: ol.eigh(a),
        "gesdd": lambda: ol.svd(a),
    }[op]

    def emulated(method):
        with ozlinalg.options(method=method):
            return emul()

    return native, emulated


#: spectral op -> the index of its values (eigenvalues, singular values) in the result
_VALUES = {"syevd": 0, "gesdd": 1}


def _sane(op, got, want):
    if op in _VALUES:  # the values are unique, the vectors only up to signs
        if not all(np.all(np.isfinite(x)) for x in got):
            return False
        got, want = got[_VALUES[op]], want[_VALUES[op]]
        return float(np.abs(got - want).max()) <= SANITY * (float(np.abs(want).max()) or 1.0)
    got = np.asarray(got)
    if not np.all(np.isfinite(got)):
        return False
    if op in ("matmul", "gesv_refined", "posv_refined"):
        scale = float(np.abs(want).max()) or 1.0
        return float(np.abs(got - want).max()) <= SANITY * scale
    return True  # factors: pivots may differ from LAPACK's; finite is the check


def _fit(n0, r0, n1, r1):
    """``(a, b)`` of ``r(n) = a + b / n`` through two measured points."""
    b = (r0 - r1) / (1.0 / n0 - 1.0 / n1)
    return r1 - b / n1, b


def _round_up(x, step):
    return int(math.ceil(x / step) * step)


def _crossover(best, max_n):
    """``(order or None, extrapolated, note)`` from ``{n: best ratio}``."""
    ns = sorted(best)
    cross = None
    for n in reversed(ns):
        if best[n] > 1.0:
            break
        cross = n
    if cross is not None:
        i = ns.index(cross)
        if i == 0:
            return cross, False, "pays at every order tried"
        n0, n1 = ns[i - 1], cross
        a, b = _fit(n0, best[n0], n1, best[n1])
        if a < 1.0 and b > 0:
            cross = min(n1, max(n0 + 1, _round_up(b / (1.0 - a), 16)))
        return cross, False, f"interpolated between {n0} and {n1}"
    if len(ns) >= 2 and ns[-1] < max_n and best[ns[-1]] <= EXTRAPOLATE_FROM:
        a, b = _fit(ns[-2], best[ns[-2]], ns[-1], best[ns[-1]])
        if 0.0 < a < 1.0 / 1.1 and b > 0:
            n_star = _round_up(b / (1.0 - a), 64)
            if n_star <= max_n:
                return n_star, True, (f"extrapolated from {ns[-2]} and {ns[-1]} "
                                      f"(ratio ~ {a:.2f} + {b:.0f}/n)")
            return None, False, (f"the trend ({a:.2f} + {b:.0f}/n) reaches 1 only at about "
                                 f"{n_star}, beyond --max-n {max_n}")
    return None, False, "slower than native at every order tried" + (
        f" (no extrapolation from {best[ns[-1]]:.2f}x)" if len(ns) >= 2 else "")


def measure(engine, *, sizes=SIZES, max_n=4096, budget_s=BUDGET_S, quick=False, ops=None,
            log=print, seed=0):
    """``{op: entry}`` (the cache's ``ops``, :func:`ozlinalg._tuning.validate`)."""
    rng = np.random.default_rng(seed)
    ops = list(ops or _tuning.TUNED_OPS)
    refine = _has_refine()
    methods = _tuning.TUNABLE_METHODS
    sizes = [n for n in sizes if n <= max_n] or [max_n]
    start = time.perf_counter()
    out = {}
    missing = {op: _missing(op, refine) for op in ops}
    todo = [op for op in ops if missing[op] is None]
    for op in ops:
        if op not in todo:
            out[op] = {"crossover": None, "method": None, "measured": False, "ratios": {},
                       "note": f"not measured: {missing[op]}"}
            log(f"  {op:<13} not measured ({missing[op]})")
    first = {}
    for op in todo:  # warm-up: first calls load kernels, fill the scratch pool; then one
        # timed round at the same order, which predicts the first size's time
        n_w = min(64, max_n)
        native, emulated = _calls(op, *_problem(op, n_w, rng))
        for _ in range(2):  # untimed, then timed
            t = time.perf_counter()
            native()
            for m in methods:
                emulated(m)
        first[op] = (n_w, time.perf_counter() - t)
    for k, op in enumerate(todo):
        share = max(0.5, (budget_s - (time.perf_counter() - start)) / (len(todo) - k))
        op_start = time.perf_counter()
        ratios, best, last = {}, {}, first[op]
        skipped = ""
        for n in sizes:
            repeat = (3 if n <= 512 else 2 if n <= 1024 else 1) - (1 if quick and n > 256 else 0)
            # the last size's time per repetition, scaled as n^3, within the op's share;
            # the first size from the warm-up's (its fixed costs overstate the scaling:
            # skipped only where it would overrun FIRST_SIZE_S and what is left of the budget)
            last_n, once = last
            if ratios:
                left = share - (time.perf_counter() - op_start)
            else:
                left = max(share, FIRST_SIZE_S, budget_s - (time.perf_counter() - start))
            if once * (n / last_n) ** 3 * repeat > left:
                log(f"  {op:<13} n = {n}: skipped (would not fit the time budget)")
                skipped = (f"n = {n} would take about {once * (n / last_n) ** 3 * repeat:.0f}"
                           f" s, {max(left, 0.0):.0f} s of the budget left")
                break
            a, b = _problem(op, n, rng)
            native, emulated = _calls(op, a, b)
            # interleaved, native first and last: a busy spell hits both sides
            t_size = time.perf_counter()
            t_nat, want = _native_best(native)
            times = {m: float("inf") for m in methods}
            for _ in range(repeat):
                for m in list(times):
                    t_m, got = _best(lambda m=m, f=emulated: f(m), 1)
                    if not _sane(op, got, want):
                        log(f"  {op:<13} n = {n}: {m} dropped (result differs from native)")
                        del times[m]
                        continue
                    times[m] = min(times[m], t_m)
                t_nat = min(t_nat, _native_best(native)[0])
            per = times
            last = (n, (time.perf_counter() - t_size) / (repeat + 0.5))
            if not per:
                break
            ratios[str(n)] = {m: round(t / t_nat, 4) for m, t in per.items()}
            best[n] = min(ratios[str(n)].values())
            log(f"  {op:<13} n = {n:>5}: native {1e3 * t_nat:9.1f} ms, " + ", ".join(
                f"{m} {r:.2f}x" for m, r in ratios[str(n)].items())
                + f"   [{time.perf_counter() - start:5.1f} s]")
        cross, extrapolated, note = _crossover(best, max_n) if best else (
            None, False, "no size ran" + (f": {skipped}" if skipped else ""))
        method = None
        if best:  # the fastest where it starts to pay (else at the largest order tried)
            pays = [n for n in best if cross is not None and n >= cross]
            at = str(min(pays) if pays else max(best))
            method = min(ratios[at], key=ratios[at].get)
        out[op] = {"crossover": cross, "method": method, "measured": True,
                   "extrapolated": extrapolated, "ratios": ratios, "note": note}
    return {op: out[op] for op in ops}


def _table(ops, path_line, elapsed, engine_line):
    lines = [f"engine: {engine_line}",
             f"{'op':<13} {'pays from':>10} {'method':>9}  ratios (emulated / native)"]
    for op, e in ops.items():
        cross = "never" if e["crossover"] is None else str(e["crossover"])
        if e.get("extrapolated"):
            cross += "*"
        if not e.get("measured", True):
            cross = "-"
        ratios = "  ".join(f"{n}: " + "/".join(f"{r:.2f}" for r in per.values())
                           for n, per in e["ratios"].items())
        lines.append(f"{op:<13} {cross:>10} {e['method'] or '-':>9}  {ratios or e['note']}")
    lines.append("(* extrapolated; ratios per method in the order "
                 + "/".join(_tuning.TUNABLE_METHODS) + ")")
    lines.append(f"took {elapsed:.1f} s; {path_line}")
    return "\n".join(lines)


def _show(engine, as_json):
    """The crossovers "performant" uses now (cache, constants, model, never)."""
    rows = {op: engine.tuned(op)._asdict() for op in _tuning.TUNED_OPS}
    if as_json:
        json.dump({"engine": engine.name, "ops": rows}, sys.stdout, indent=1)
        print()
        return 0
    print(f"engine: {engine.describe()}")
    print(f"{'op':<13} {'pays from':>10} {'method':>9}  source")
    for op, t in rows.items():
        cross = "never" if t["order"] is None else str(t["order"])
        print(f"{op:<13} {cross:>10} {t['method'] or '-':>9}  {t['source']}")
    return 0


def _load_note():
    """A warning where other processes keep the CPUs busy (their share of the cores skews
    multithreaded native LAPACK more than the emulation), else ''."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return ""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    if load <= 1.25 * cpus:
        return ""
    return (f"load average {load:.1f} on {cpus} CPUs: other processes share the cores, the "
            "ratios may be off; run tune again on a quiet machine")


def main(argv=None, prog="python -m ozlinalg tune"):
    ap = argparse.ArgumentParser(
        prog=prog, description="Measure where emulation pays on this machine (the crossovers "
                               "of the backend's performant strategy) and write the tuning "
                               "cache; see docs/tuning.md.")
    ap.add_argument("--quick", action="store_true",
                    help=f"one repetition per size, up to 1024, a {QUICK_BUDGET_S:.0f} s budget")
    ap.add_argument("--max-n", type=int, default=None,
                    help="largest order measured or extrapolated to (default 4096; "
                         "--quick: 1024)")
    ap.add_argument("--budget", type=float, default=None, metavar="S",
                    help=f"seconds for all measurements (default {BUDGET_S:.0f}; "
                         f"--quick: {QUICK_BUDGET_S:.0f})")
    ap.add_argument("--json", action="store_true", help="print the cache file's content")
    ap.add_argument("--cache-dir", default=None,
                    help="where to write (default: OZLINALG_CACHE_DIR or the user cache dir)")
    ap.add_argument("--dry-run", action="store_true",
                    help="measure and print, but do not write the cache")
    ap.add_argument("--show", action="store_true",
                    help="measure nothing: print the crossovers the library uses now and "
                         "where they come from (cache, engine constants, model)")
    args = ap.parse_args(argv)
    from .._options import current_engine  # noqa: PLC0415

    engine = current_engine(np)
    if args.show:
        return _show(engine, args.json)
    max_n = args.max_n or (1024 if args.quick else 4096)
    if max_n < 1:
        ap.error("--max-n must be positive")
    budget = args.budget if args.budget is not None else (
        QUICK_BUDGET_S if args.quick else BUDGET_S)
    path = _tuning.cache_path(engine, args.cache_dir)
    err = sys.stderr
    print(f"ozlinalg tune: {engine.describe()}", file=err)
    print(f"  key: {json.dumps(_tuning.key_for(engine), sort_keys=True)}", file=err)
    load = _load_note()
    if load:
        print(f"  warning: {load}", file=err)
    print(f"  sizes up to {max_n}, budget {budget:.0f} s, methods "
          f"{', '.join(_tuning.TUNABLE_METHODS)} against native NumPy / SciPy", file=err)
    t0 = time.perf_counter()
    ops = measure(engine, max_n=max_n, budget_s=budget, quick=args.quick,
                  log=lambda line: print(line, file=err, flush=True))
    elapsed = time.perf_counter() - t0
    load = load or _load_note()
    if load:
        for e in ops.values():
            if e.get("measured", True):
                e["note"] = f"{e['note']}; {load}"
    status = 0
    if args.dry_run:
        path_line = f"--dry-run: not written (would be {path})"
    else:
        try:
            path = _tuning.store(engine, ops, elapsed, args.cache_dir)
            path_line = f"cache written: {path}"
        except OSError as exc:
            status = 1
            path_line = (f"cannot write the cache {path}: {exc}; the library uses the model "
                         "(docs/tuning.md)")
    if args.json:
        data = {"schema": _tuning.SCHEMA, "key": _tuning.key_for(engine),
                "elapsed_s": round(elapsed, 3), "ops": ops}
        json.dump(data, sys.stdout, indent=1, sort_keys=True)
        print()
        print(path_line, file=err)
    else:
        print(_table(ops, path_line, elapsed, engine.describe()))
    return status
