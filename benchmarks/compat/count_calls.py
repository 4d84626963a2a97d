"""Count a test suite's numpy.linalg / scipy.linalg calls and how many reach the emulation.

Usage::

    python benchmarks/compat/count_calls.py [--paths P ...] [-k EXPR] [--min-order 64]
        [--drop-route numpy.linalg.svd ...] [--json FILE]

Wraps every public function of ``numpy.linalg`` and ``scipy.linalg`` (their
``__all__``) with a counter, then runs a pytest selection of a client suite
twice, each in a fresh process: natively, and with every test's call phase inside
``ozlinalg.backend(strategy="eager", min_size=0)``. The default suite is
scikit-learn's decomposition tests of PCA, TruncatedSVD and KernelPCA, its
covariance tests and its cross-decomposition tests (``--paths`` relative to
the installed ``sklearn`` package, or absolute).

The counters are installed after ozlinalg's shims and before pytest imports
the suite, so names the client binds at import (``from scipy.linalg import
eigh``) are counters around the shims. Only the outermost call is counted: a
``numpy.linalg`` call made inside a counted call (by SciPy, NumPy or
ozlinalg itself) is part of it. A call records its function, its matrix order
(the smallest of the last two dimensions of its first argument with two or
more: the first entry of a tuple / list argument, as ``lu_solve((lu, piv), b)``
or ``multi_dot([a, b])``) and, under the backend, an ``ozlinalg.profile()``
of the call alone, which says what happened to it:

``emulated``
    routed to ozlinalg (a :class:`ozlinalg._profile.Route` with ``emulated``)
    and at least one emulated GEMM ran;
``fell back``
    routed and emulated GEMMs ran, but the eigen / SVD refinement did not
    converge and LAPACK's double-precision answer was returned
    (``Profile.native_calls["lapack fallback"]``);
``routed, no GEMM``
    routed, but ozlinalg answered with the native function (empty or
    non-finite input, a numerically singular matrix, ...);
``native: <reason>``
    screened by the backend and left native (``Route.reason``);
``not routed (why)``
    no route for the function, a call from a worker thread (the backend
    block is the test's thread's), or arguments the backend does not take
    (other array types, dtypes): the native function ran unscreened.

Prints, for calls of order at least ``--min-order`` (64), the calls per
function in both runs and what happened to them under the backend; the
share that reached the emulation, over every counted function and over the
dense O(n^3) functions only (:data:`HELPERS`, norms, products and matrix
constructors, are left out of that share); and a few test ids per function
and outcome of the calls that did not reach it. ``--drop-route`` removes routes
from ``ozlinalg.routing.ROUTES`` before the shims are installed: e.g. the
registry before the eigen / SVD routes (``docs/backend.md``).
"""
from __future__ import annotations

import argparse
import contextvars
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict

import numpy as np
import pytest

import ozlinalg
from ozlinalg._emulable import emulable
from ozlinalg.routing import ROUTES
from ozlinalg.routing._install import installed

MODULES = ("numpy.linalg", "scipy.linalg")

#: The default client suite: paths relative to the ``sklearn`` package.
SKLEARN_PATHS = (
    "decomposition/tests/test_pca.py",
    "decomposition/tests/test_truncated_svd.py",
    "decomposition/tests/test_kernel_pca.py",
    "covariance/tests",
    "cross_decomposition/tests",
)

#: Functions left out of the O(n^3) share: norms, products, traces, matrix
#: constructors, BLAS / LAPACK lookups and structure checks (O(n^2) or less,
#: or nothing to factor).
HELPERS = frozenset({
    "numpy.linalg." + n for n in (
        "norm", "matrix_norm", "vector_norm", "trace", "diagonal", "cross", "outer",
        "tensordot", "matmul", "matrix_transpose", "vecdot")} | {
    "scipy.linalg." + n for n in (
        "norm", "block_diag", "get_blas_funcs", "get_lapack_funcs", "find_best_blas_type",
        "bandwidth", "ishermitian", "issymmetric", "diagsvd", "circulant", "companion",
        "convolution_matrix", "dft", "fiedler", "fiedler_companion", "hadamard", "hankel",
        "helmert", "hilbert", "invhilbert", "invpascal", "khatri_rao", "leslie", "pascal",
        "toeplitz", "matmul_toeplitz", "clarkson_woodruff_transform")}
)

FALLBACK = "lapack fallback"  # ozlinalg.linalg._spectral.FALLBACK
EMULATED, FELL_BACK, NO_GEMM, NOT_ROUTED = "emulated", "fell back", "routed, no GEMM", "not routed"

_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("count_calls_depth", default=0)


def matrix_order(args, kwargs):
    """The smallest of the last two dimensions of the first argument with two
    or more (of the first entry of a tuple / list argument); None if none."""
    for x in (*args, *kwargs.values()):
        if isinstance(x, (tuple, list)) and x and hasattr(x[0], "shape"):
            x = x[0]
        shape = getattr(x, "shape", None)
        if shape is None or not isinstance(shape, tuple):
            continue
        if len(shape) >= 2:
            return int(min(shape[-2:]))
    return None


def _unroutable(qualname, args, kwargs):
    """Why a call got no routing decision: no route for the function, not the
    backend's thread, or the type / dtype of the first argument the backend
    does not take."""
    if qualname not in _ROUTED:
        return "no route"
    if threading.current_thread() is not threading.main_thread():
        return "in a worker thread"
    for x in (*args, *kwargs.values()):
        if isinstance(x, (tuple, list)) and x:
            x = x[0]
        if type(x) is np.ndarray:
            if not emulable(x.dtype, half=False):
                return f"dtype {x.dtype}"
            continue
        if hasattr(x, "__array_function__") or hasattr(x, "__array__"):
            return f"type {type(x).__module__}.{type(x).__qualname__}"
    return "arguments"


class Counts:
    """The calls of one run: (function, order, what happened) -> count, and a
    few test ids per (function, what happened) of the calls at or above the
    order that was asked for."""

    def __init__(self, under_backend, min_order=64):
        self.under_backend = under_backend
        self.min_order = min_order
        self.calls = Counter()
        self.examples = defaultdict(list)
        self.test = None

    def add(self, qualname, order, what):
        self.calls[(qualname, order, what)] += 1
        if order is not None and order >= self.min_order and what != EMULATED:
            ex = self.examples[(qualname, what)]
            if len(ex) < 3 and self.test not in ex:
                ex.append(self.test)

    def outcome(self, prof, qualname, args, kwargs):
        routes = list(prof.routing)
        if not routes:
            return f"{NOT_ROUTED} ({_unroutable(qualname, args, kwargs)})"
        route = routes[0]
        if not route.emulated:
            return f"native: {route.reason}"
        if not prof.emulated_gemm_calls:
            return NO_GEMM
        return FELL_BACK if prof.native_calls.get(FALLBACK) else EMULATED


_RUN: list = [None]  # the Counts of the run in progress
_ROUTED: set = set()  # the routed names ("numpy.linalg.solve", ...)


def counter(qualname, fn):
    @functools.wraps(fn)
    def counted(*args, **kwargs):
        run = _RUN[0]
        if run is None or _DEPTH.get():
            return fn(*args, **kwargs)
        order = matrix_order(args, kwargs)
        token = _DEPTH.set(1)
        try:
            if not run.under_backend:
                run.add(qualname, order, "native run")
                return fn(*args, **kwargs)
            with ozlinalg.profile() as prof:
                try:
                    return fn(*args, **kwargs)
                finally:
                    run.add(qualname, order, run.outcome(prof, qualname, args, kwargs))
        finally:
            _DEPTH.reset(token)

    counted._count_calls = True
    return counted


def install_counters():
    """ozlinalg's shims first (entering a backend block installs them), then a
    counter around every public function of :data:`MODULES`."""
    with ozlinalg.backend():
        pass
    _ROUTED.update(installed())
    wrapped = []
    for mod_name in MODULES:
        mod = importlib.import_module(mod_name)
        for name in getattr(mod, "__all__", ()):
            fn = getattr(mod, name, None)
            if not callable(fn) or isinstance(fn, type) or getattr(fn, "_count_calls", False):
                continue
            setattr(mod, name, counter(f"{mod_name}.{name}", fn))
            wrapped.append(f"{mod_name}.{name}")
    return wrapped


def drop_routes(names):
    for qualname in names:
        mod_name, _, fn = qualname.rpartition(".")
        if ROUTES.get(mod_name, {}).pop(fn, None) is None:
            raise SystemExit(f"--drop-route {qualname}: no such route")


class Plugin:
    """Runs each test's call phase under the backend (or not) with this run's counts."""

    def __init__(self, counts, backend_opts):
        self.counts, self.backend_opts = counts, backend_opts
        self.outcomes = Counter()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        _RUN[0] = self.counts
        self.counts.test = item.nodeid
        try:
            if self.backend_opts is None:
                yield
            else:
                with ozlinalg.backend(**self.backend_opts):
                    yield
        finally:
            _RUN[0] = None

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.outcomes["xfailed" if hasattr(report, "wasxfail") and report.skipped
                          else report.outcome] += 1


def run_suite(paths, rootdir, k, backend_opts, min_order=64):
    counts = Counts(backend_opts is not None, min_order)
    plugin = Plugin(counts, backend_opts)
    args = [*paths, "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            "-W", "ignore::DeprecationWarning", "--rootdir", rootdir]
    if k:
        args += ["-k", k]
    t0 = time.perf_counter()
    pytest.main(args, plugins=[plugin])
    return counts, plugin.outcomes, time.perf_counter() - t0


def summarize(native, under, min_order):
    """Per function (order >= min_order): native calls, backend calls, and the
    backend calls per outcome."""
    rows = defaultdict(lambda: {"native": 0, "backend": 0, "outcomes": Counter()})
    for (fn, order, _), c in native.calls.items():
        if order is not None and order >= min_order:
            rows[fn]["native"] += c
    for (fn, order, what), c in under.calls.items():
        if order is not None and order >= min_order:
            rows[fn]["backend"] += c
            rows[fn]["outcomes"][what] += c
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]["backend"]))


def shares(rows):
    def share(fns):
        total = sum(rows[f]["backend"] for f in fns)
        emu = sum(rows[f]["outcomes"][EMULATED] for f in fns)
        return emu, total
    return share(list(rows)), share([f for f in rows if f not in HELPERS])


def print_report(rows, min_order):
    print(f"\ncalls of order >= {min_order}, by function (backend run: what happened)")
    print(f"{'function':34s}{'native':>8s}{'backend':>9s}{'emulated':>10s}  other")
    for fn, r in rows.items():
        other = ", ".join(f"{w}: {c}" for w, c in r["outcomes"].most_common() if w != EMULATED)
        mark = " (helper)" if fn in HELPERS else ""
        print(f"{fn + mark:34s}{r['native']:8d}{r['backend']:9d}"
              f"{r['outcomes'][EMULATED]:10d}  {other}")
    (e_all, t_all), (e_dense, t_dense) = shares(rows)

    def pct(e, t):
        return f"{100 * e / t:.1f}%" if t else "-"

    print(f"\nreached the emulation: {e_dense} of {t_dense} dense O(n^3) calls "
          f"({pct(e_dense, t_dense)}); {e_all} of {t_all} counting norms, products and "
          f"constructors ({pct(e_all, t_all)})")


def _counts_from(d, under_backend, min_order):
    c = Counts(under_backend, min_order)
    c.calls = Counter({(fn, o, w): n for fn, o, w, n in d["calls"]})
    c.examples = defaultdict(list, {tuple(k.split("\t")): v for k, v in d["examples"].items()})
    return c


def one_run(args, paths, rootdir, opts, out):
    """One pass (native, or under the backend when `opts`) in this process:
    counters, the suite, the counts written to `out` (JSON)."""
    drop_routes(args.drop_route)
    wrapped = install_counters()
    counts, outcomes, seconds = run_suite(paths, rootdir, args.k, opts, args.min_order)
    with open(out, "w") as f:
        json.dump({"wrapped": len(wrapped), "outcomes": outcomes, "seconds": seconds,
                   "calls": [[fn, o, w, n] for (fn, o, w), n in counts.calls.items()],
                   "examples": {f"{fn}\t{w}": t for (fn, w), t in counts.examples.items()}},
                  f)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paths", nargs="*", default=None,
                   help="test files / folders, relative to the sklearn package or absolute "
                        "(default: PCA, TruncatedSVD, KernelPCA, covariance, cross_decomposition)")
    p.add_argument("--rootdir", default=None, help="pytest rootdir (default: the sklearn package)")
    p.add_argument("-k", default=None, help="pytest -k expression")
    p.add_argument("--min-order", type=int, default=64)
    p.add_argument("--min-size", type=int, default=0, help="the backend's min_size")
    p.add_argument("--drop-route", nargs="*", default=[], metavar="MODULE.FUNCTION",
                   help="routes removed before the shims are installed")
    p.add_argument("--native-only", action="store_true", help="skip the backend run")
    p.add_argument("--json", default=None)
    p.add_argument("--one-run", choices=("native", "backend"), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)

    # find the suite without importing it: it must import after the counters
    spec = importlib.util.find_spec("sklearn")
    pkg = os.path.dirname(spec.origin) if spec and spec.origin else None
    if args.paths is None and pkg is None:
        print("scikit-learn is not installed: give --paths")
        return 0
    paths = [x if os.path.isabs(x) else os.path.join(pkg, x)
             for x in (args.paths if args.paths is not None else SKLEARN_PATHS)]
    rootdir = args.rootdir or pkg or os.path.commonpath(paths)
    opts = {"strategy": "eager", "min_size": args.min_size}
    if args.one_run:
        return one_run(args, paths, rootdir,
                       opts if args.one_run == "backend" else None, args.out)

    # each pass in a process of its own: a test module imported by the first pass
    # would keep state into the second (parametrizations built from consumed
    # generators, caches)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("native",) + (() if args.native_only else ("backend",)):
            out = os.path.join(tmp, mode + ".json")
            subprocess.run([sys.executable, os.path.abspath(__file__), *argv,
                            "--one-run", mode, "--out", out], check=False)
            if not os.path.exists(out):
                print(f"the {mode} pass wrote no result")
                return 1
            with open(out) as f:
                results[mode] = json.load(f)
    native = _counts_from(results["native"], False, args.min_order)
    empty = {"calls": [], "examples": {}, "outcomes": {}, "seconds": 0.0, "wrapped": 0}
    res_b = results.get("backend", empty)
    under = _counts_from(res_b, True, args.min_order)
    nat_out, und_out = Counter(results["native"]["outcomes"]), Counter(res_b["outcomes"])
    t_nat, t_und = results["native"]["seconds"], res_b["seconds"]

    versions = {d: importlib.metadata.version(d) for d in
                ("numpy", "scipy", "scikit-learn") if importlib.util.find_spec(
                    "sklearn" if d == "scikit-learn" else d)}
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    with ozlinalg.profile() as prof:   # the engine the emulation ran on
        ozlinalg.matmul(np.ones((16, 16)), np.ones((16, 16)))
    engine = next(iter(prof.engines), "?").split(" (")[0]
    print(f"\n=== {versions}; {results['native']['wrapped']} functions counted; backend "
          f"options {opts}; routes dropped: {args.drop_route or 'none'}; CPU: {cpu}, "
          f"{os.cpu_count()} cores; engine {engine}")
    for label, out, t in (("native", nat_out, t_nat), ("backend", und_out, t_und)):
        print(f"{label:8s} tests: " + ", ".join(f"{k}={v}" for k, v in sorted(out.items()))
              + f" ({t:.0f} s)")
    for label, counts in (("native", native), ("backend", under)):
        total = sum(counts.calls.values())
        big = sum(c for (_, o, _), c in counts.calls.items()
                  if o is not None and o >= args.min_order)
        print(f"{label:8s} calls counted: {total}, of order >= {args.min_order}: {big}")
    rows = summarize(native, under, args.min_order)
    print_report(rows, args.min_order)
    if under.examples:
        print(f"\ntests with calls of order >= {args.min_order} that did not reach the "
              "emulation (a few per function and outcome):")
        for (fn, what), tests in sorted(under.examples.items()):
            print(f"  {fn}, {what}: " + ", ".join(tests))
    if args.json:
        (e_all, t_all), (e_dense, t_dense) = shares(rows)
        with open(args.json, "w") as f:
            json.dump({"versions": versions, "cpu": cpu, "engine": engine, "paths": paths,
                       "k": args.k,
                       "min_order": args.min_order, "dropped_routes": args.drop_route,
                       "tests": {"native": nat_out, "backend": und_out},
                       "seconds": {"native": t_nat, "backend": t_und},
                       "share_dense": [e_dense, t_dense], "share_all": [e_all, t_all],
                       "functions": {fn: {"native": r["native"], "backend": r["backend"],
                                          "outcomes": dict(r["outcomes"])}
                                     for fn, r in rows.items()},
                       "calls": [[fn, o, w, c] for (fn, o, w), c in
                                 sorted(under.calls.items(), key=str)],
                       "examples": {f"{fn}, {w}": t for (fn, w), t in under.examples.items()}},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
