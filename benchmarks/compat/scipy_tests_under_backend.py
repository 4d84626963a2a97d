"""Run SciPy's own linalg tests for the routed functions inside ``ozlinalg.backend()``.

Usage::

    python benchmarks/compat/scipy_tests_under_backend.py [--min-size 0] [--json out.json]
        [--files test_decomp.py ...] [-k EXPR]

Runs the test files shipped with the installed SciPy
(``scipy/linalg/tests``) that cover the functions ``ozlinalg.backend()``
routes (``solve``, ``solve_triangular``, ``inv``, ``det``, ``lstsq``,
``lu``, ``lu_factor``, ``lu_solve``, ``cholesky``, ``cho_factor``,
``cho_solve``, ``qr``, ``eigh``, ``eigvalsh``, ``svd``, ``svdvals``,
``pinv``, ``polar``) twice with pytest: once plainly (the baseline) and
once with every test's call phase inside ``ozlinalg.backend(min_size=...)``
(default 0: always emulate; ``strategy="eager"`` where that option exists).
Prints the outcome counts of both runs per file, how many tests reached the
emulation, and every test whose outcome differs, with the end of its error.
The plugin is the one of ``numpy_tests_under_backend.py``.

Tests listed in :data:`DESELECT` are left out of both runs, each with its
reason (printed): a deliberate difference of docs/backend.md's table, or an
open ozlinalg bug that cannot run on a shared machine (remove the entry when
it is fixed).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

import scipy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_tests_under_backend import backend_options, print_differences, run  # noqa: E402

#: test file -> pytest -k expression selecting the tests of the routed
#: functions (None: the whole file)
FILES = {
    # (pytest -k is case-insensitive: "inv" also selects TestPinv / TestPinvSymmetric)
    "test_basic.py": "Solve or Inv or Det or Lstsq or solve or inv or det or lstsq or Pinv",
    "test_decomp_lu.py": None,
    "test_decomp_cholesky.py": "not banded and not Banded",
    "test_decomp.py": ("(QR and not RQ and not qr_multiply and not QRMultiply)"
                       " or TestEigh or TestSVD or test_svd_gesdd or test_gesdd"
                       " or (TestOverwrite and (eigh or eigvalsh or svd))"),
    "test_decomp_polar.py": None,
    "test_batch.py": ("((solve or inv or det or lstsq or lu or cholesky or cho_ or qr)"
                      " and not banded and not eig and not toeplitz and not circulant)"
                      " or ((test_eigh or test_svd) and not tridiagonal) or test_polar"),
}

#: test file -> [(node id prefix, reason)]: left out of both runs
DESELECT: dict[str, list[tuple[str, str]]] = {}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-size", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--files", nargs="*", default=list(FILES))
    p.add_argument("-k", default=None,
                   help="pytest -k expression, and-ed with each file's own selection")
    args = p.parse_args(argv)
    tests = os.path.join(os.path.dirname(scipy.__file__), "linalg", "tests")
    opts = backend_options(args.min_size)
    keys = ["passed", "failed", "skipped", "xfailed", "xpassed"]
    summary = {}
    print(f"=== scipy {scipy.__version__} {tests}; backend options {opts}")
    for name in args.files:
        expr = FILES.get(name)
        if args.k:
            expr = f"({expr}) and ({args.k})" if expr else args.k
        # SciPy's own conftest (not loaded here) skips its 'xslow' tests,
        # e.g. a 47000 x 47000 Cholesky: deselect them
        extra = (["-k", expr] if expr else []) + ["-m", "not xslow"]
        for nodeid, _ in DESELECT.get(name, ()):
            extra += ["--deselect", nodeid]
        path = os.path.join(tests, name)
        base = run(path, None, extra)
        under = run(path, opts, extra)
        cb, cu = Counter(base.outcomes.values()), Counter(under.outcomes.values())
        reached = sum(1 for v in under.emulated.values() if v)
        print(f"\n--- {name}" + (f"  (-k '{expr}')" if expr else ""))
        print(f"{'':22s}" + "".join(f"{k:>9s}" for k in keys) + f"{'total':>9s}")
        for label, c in (("native", cb), ("backend", cu)):
            print(f"{label:22s}" + "".join(f"{c.get(k, 0):9d}" for k in keys)
                  + f"{sum(c.values()):9d}")
        print(f"tests that ran >= 1 emulated GEMM under the backend: {reached}")
        for nodeid, reason in DESELECT.get(name, ()):
            print(f"deselected: {nodeid}: {reason}")
        diff = print_differences(base, under)
        summary[name] = {"native": cb, "backend": cu, "differs": diff, "emulated_tests": reached,
                         "deselected": dict(DESELECT.get(name, ()))}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
