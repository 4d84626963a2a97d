"""Run NumPy's own linalg test-suite with every test inside ``ozlinalg.backend()``.

Usage::

    python benchmarks/compat/numpy_tests_under_backend.py [--min-size 0] [--json out.json]
        [--files linalg/tests/test_linalg.py ...] [-k EXPR]

Runs ``numpy/linalg/tests/test_linalg.py`` and
``numpy/matrixlib/tests/test_matrix_linalg.py`` (:data:`FILES`) of the installed
NumPy twice with
pytest: once plainly (the baseline) and once with a plugin whose
``pytest_runtest_call`` hook wraps each test's call phase in
``ozlinalg.backend(strategy="eager", min_size=...)`` (default 0: emulation
forced at every size) and ``ozlinalg.profile()``. Prints passed / failed / skipped / xfailed for
both runs, the tests whose outcome differs, and how many tests actually
reached the emulation (at least one emulated GEMM inside the test).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

import numpy as np
import pytest

import ozlinalg


class Recorder:
    """Collects each test's outcome; optionally runs the call phase under the backend."""

    def __init__(self, backend_opts=None):
        self.backend_opts = backend_opts
        self.outcomes = {}
        self.emulated = {}
        self.longrepr = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        if self.backend_opts is None:
            yield
            return
        with ozlinalg.backend(**self.backend_opts), ozlinalg.profile() as prof:
            yield
        self.emulated[item.nodeid] = prof.emulated_gemm_calls

    def pytest_runtest_logreport(self, report):
        nid = report.nodeid
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if hasattr(report, "wasxfail"):
                out = "xfailed" if report.skipped else "xpassed"
            else:
                out = report.outcome
            self.outcomes[nid] = out
            if report.failed:
                self.longrepr[nid] = str(report.longrepr)[-1500:]


def backend_options(min_size):
    """Always-emulate backend options: ``strategy="eager"`` (emulate every
    call, not only where it pays) and ``min_size``."""
    return {"strategy": "eager", "min_size": min_size}


def install_shims():
    """Install the backend's shims before any test module is imported, so
    that names a test module binds at import (``from scipy.linalg import
    cholesky``) are the shims, which route inside a backend block and call
    the original outside one (entering a block installs them once)."""
    with ozlinalg.backend():
        pass


def run(path, backend_opts, extra, rootdir=None):
    """One pytest run of `path` (under the backend when `backend_opts`); pytest's
    rootdir is `rootdir` (default: the folder of `path`; a suite whose fixtures
    live in a conftest.py further up, as scikit-learn's, needs that folder)."""
    install_shims()
    rec = Recorder(backend_opts)
    args = [path, "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
            "--rootdir", rootdir or os.path.dirname(path), *extra]
    pytest.main(args, plugins=[rec])
    return rec


def print_differences(base, under):
    """Print the tests whose outcome under the backend differs from the
    baseline run (None: not collected in that run), with the last lines of
    each failure; return their ids."""
    diff = sorted(n for n in base.outcomes.keys() | under.outcomes.keys()
                  if under.outcomes.get(n) != base.outcomes.get(n))
    print(f"tests whose outcome differs: {len(diff)}")
    for n in diff:
        print(f"  {base.outcomes.get(n)} -> {under.outcomes.get(n)}: {n}")
        if n in under.longrepr:
            last = [ln for ln in under.longrepr[n].splitlines() if ln.strip()][-3:]
            for ln in last:
                print("      " + ln[:200])
    return diff


#: the NumPy test files run, relative to the installed package: its linalg tests,
#: and its np.matrix linalg tests (matrices are routed; results keep NumPy's types)
FILES = ("linalg/tests/test_linalg.py", "matrixlib/tests/test_matrix_linalg.py")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-size", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("-k", default=None, help="pytest -k expression")
    p.add_argument("--files", nargs="*", default=list(FILES),
                   help="test files relative to the numpy package")
    args = p.parse_args(argv)
    extra = ["-k", args.k] if args.k else []
    keys = ["passed", "failed", "skipped", "xfailed", "xpassed"]
    report = {}
    for rel in args.files:
        path = os.path.join(os.path.dirname(np.__file__), rel)
        base = run(path, None, extra)
        under = run(path, backend_options(args.min_size), extra)
        cb, cu = (Counter(rec.outcomes.values()) for rec in (base, under))
        print("\n=== numpy", np.__version__, path)
        print(f"{'':28s}" + "".join(f"{k:>9s}" for k in keys) + f"{'total':>9s}")
        for name, c in (("native (no backend)", cb), (f"backend(min_size={args.min_size})", cu)):
            print(f"{name:28s}" + "".join(f"{c.get(k, 0):9d}" for k in keys)
                  + f"{sum(c.values()):9d}")
        reached = sum(1 for v in under.emulated.values() if v)
        print(f"tests that ran >= 1 emulated GEMM under the backend: {reached} of "
              f"{len(under.emulated)} ({sum(under.emulated.values())} emulated GEMM calls)")
        diff = print_differences(base, under)
        report[rel] = {"native": cb, "backend": cu, "differs": diff, "emulated_tests": reached}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
