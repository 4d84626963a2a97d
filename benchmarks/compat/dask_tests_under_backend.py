"""Run Dask's own linalg test module natively and with ``ozlinalg.install()`` active.

Usage::

    python benchmarks/compat/dask_tests_under_backend.py [--min-size 0] [-k EXPR] [--json out.json]
    PYTHONPATH=. python benchmarks/compat/dask_tests_under_backend.py   # this checkout's ozlinalg

Runs ``dask/array/tests/test_linalg.py`` of the installed Dask twice, each in
its own ``python -m pytest`` process: once plainly (the baseline) and once
with this file loaded as a pytest plugin that calls
``ozlinalg.install(strategy="eager", min_size=...)`` when the plugin loads,
before pytest imports the test module (so names it binds at import are the
shims, as for a program run under ``python -m ozlinalg run``), and wraps
every test's call phase in ``ozlinalg.profile()`` to count the calls the
backend routed to ozlinalg. Two processes rather than two ``pytest.main``
calls in one, because the test module and dask stay imported after the
first run and the second must see them imported after ``install()``.

Prints the outcome counts of both runs, how many tests had at least one
call routed to the emulation, and every test whose outcome differs, with
the end of its error. Exits 1 when no test ran or no dask call was routed
(a run that routes nothing proves nothing about the backend: NumPy calls
inside the tests are routed too, but are not counted).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = ["passed", "failed", "skipped", "xfailed", "xpassed"]
_ENV_OUT = "OZLINALG_DASK_TESTS_OUT"
_ENV_OPTS = "OZLINALG_DASK_TESTS_BACKEND"


class Recorder:
    """Per-test outcomes, the end of each failure, and (under the backend)
    the calls routed to the emulation during the call phase."""

    def __init__(self, under_backend):
        self.under_backend = under_backend
        self.outcomes, self.routed, self.routed_all, self.longrepr = {}, {}, {}, {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        if not self.under_backend:
            yield
            return
        import ozlinalg

        with ozlinalg.profile() as prof:
            yield
        self.routed[item.nodeid] = sum(c for r, c in prof.routing.items()
                                       if r.emulated and r.function.startswith("dask."))
        self.routed_all[item.nodeid] = prof.routed_emulated   # NumPy's and SciPy's too

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if hasattr(report, "wasxfail"):
                out = "xfailed" if report.skipped else "xpassed"
            else:
                out = report.outcome
            self.outcomes[report.nodeid] = out
            if report.failed:
                self.longrepr[report.nodeid] = str(report.longrepr)[-1500:]

    def pytest_sessionfinish(self, session):
        with open(os.environ[_ENV_OUT], "w") as f:
            json.dump({"outcomes": self.outcomes, "routed": self.routed,
                       "routed_all": self.routed_all, "longrepr": self.longrepr}, f)


def pytest_configure(config):
    """Plugin entry (``-p dask_tests_under_backend``): install the backend
    first when asked to, then register the recorder."""
    opts = os.environ.get(_ENV_OPTS)
    if opts:
        import ozlinalg

        opts = json.loads(opts)
        if opts.pop("import_dask_first", False):
            import dask.array  # noqa: F401
        ozlinalg.install(**opts)
    config.pluginmanager.register(Recorder(bool(opts)), "oz-dask-recorder")


def test_module():
    """Path of the test module shipped with the installed Dask."""
    import dask

    return os.path.join(os.path.dirname(dask.__file__), "array", "tests", "test_linalg.py")


def _ozlinalg_root():
    """The directory holding the ``ozlinalg`` package this process imports."""
    import ozlinalg

    return os.path.dirname(os.path.dirname(os.path.abspath(ozlinalg.__file__)))


def run(path, backend_opts, extra):
    """One pytest process over ``path``; returns its recorded outcomes."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "outcomes.json")
        env = dict(os.environ, **{_ENV_OUT: out})
        env.pop(_ENV_OPTS, None)
        if backend_opts is not None:
            env[_ENV_OPTS] = json.dumps(backend_opts)
        # the plugin is this file; the ozlinalg is the one this runner imports
        # (set PYTHONPATH to a checkout to test that checkout), whatever the
        # working directory pytest runs in
        env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, _ozlinalg_root(),
                                                        env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-m", "pytest", path, "-q", "-p", "no:cacheprovider",
               "-p", "no:randomly", "-p", "dask_tests_under_backend",
               "-W", "ignore::DeprecationWarning", "--rootdir", os.path.dirname(path), *extra]
        subprocess.run(cmd, env=env, cwd=os.path.dirname(path), stdout=subprocess.DEVNULL,
                       check=False)
        if not os.path.exists(out):
            raise SystemExit(f"pytest wrote no outcomes: {' '.join(cmd)}")
        with open(out) as f:
            return json.load(f)


def print_counts(label, rec):
    c = Counter(rec["outcomes"].values())
    print(f"{label:28s}" + "".join(f"{c.get(k, 0):9d}" for k in KEYS) + f"{sum(c.values()):9d}")
    return c


def print_differences(base, under):
    """The tests whose outcome differs from the baseline, with the end of each error."""
    diff = sorted(n for n, o in under["outcomes"].items() if o != base["outcomes"].get(n))
    print(f"tests whose outcome differs: {len(diff)}")
    for n in diff:
        print(f"  {base['outcomes'].get(n)} -> {under['outcomes'][n]}: {n}")
        last = [ln for ln in under["longrepr"].get(n, "").splitlines() if ln.strip()][-3:]
        for ln in last:
            print("      " + ln[:200])
    return diff


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-size", type=int, default=0)
    p.add_argument("-k", default=None, help="pytest -k expression")
    p.add_argument("--json", default=None)
    p.add_argument("--import-dask-first", action="store_true",
                   help="import dask.array before install() (a program that imports dask "
                        "first); by default the tests import it after install()")
    args = p.parse_args(argv)
    import dask

    path = test_module()
    extra = ["-k", args.k] if args.k else []
    opts = {"strategy": "eager", "min_size": args.min_size}
    base = run(path, None, extra)
    under = run(path, dict(opts, import_dask_first=args.import_dask_first), extra)
    print(f"=== dask {dask.__version__} {path}; ozlinalg of {_ozlinalg_root()}; "
          f"install({opts})")
    print(f"{'':28s}" + "".join(f"{k:>9s}" for k in KEYS) + f"{'total':>9s}")
    cb = print_counts("native", base)
    cu = print_counts("install(strategy='eager')", under)
    reached = sum(1 for v in under["routed"].values() if v)
    calls = sum(under["routed"].values())
    print(f"dask calls routed to the emulation: {calls} in {reached} tests")
    every = under["routed_all"]
    print(f"all calls routed to the emulation (NumPy's in the tests too): "
          f"{sum(every.values())} in {sum(1 for v in every.values() if v)} tests")
    diff = print_differences(base, under)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"native": cb, "backend": cu, "differs": diff, "routed_tests": reached,
                       "routed_calls": calls}, f, indent=1)
    if not base["outcomes"] or not under["outcomes"]:
        print("no test ran")
        return 1
    if not calls:
        print("no dask call was routed to the emulation")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
