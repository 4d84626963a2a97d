"""Run SciPy's own linalg tests for the routed functions inside ``ozlinalg.backend()``.

Usage::

    python benchmarks/compat/scipy_tests_under_backend.py [--min-size 0] [--json out.json]

Runs the test files shipped with the installed SciPy
(``scipy/linalg/tests``) that cover the functions ``ozlinalg.backend()``
routes (``solve``, ``solve_triangular``, ``inv``, ``det``, ``lstsq``,
``lu``, ``lu_factor``, ``lu_solve``, ``cholesky``, ``cho_factor``,
``cho_solve``, ``qr``) twice with pytest: once plainly (the baseline) and
once with every test's call phase inside ``ozlinalg.backend(min_size=...)``
(default 0: always emulate; ``strategy="eager"`` where that option exists).
Prints the outcome counts of both runs per file, how many tests reached the
emulation, and every test whose outcome differs, with the end of its error.
The plugin is the one of ``numpy_tests_under_backend.py``.
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
    "test_basic.py": "Solve or Inv or Det or Lstsq or solve or inv or det or lstsq",
    "test_decomp_lu.py": None,
    "test_decomp_cholesky.py": "not banded and not Banded",
    "test_decomp.py": "QR and not RQ and not qr_multiply and not QRMultiply",
    "test_batch.py": ("(solve or inv or det or lstsq or lu or cholesky or cho_ or qr)"
                      " and not banded and not eig and not toeplitz and not circulant"),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-size", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--files", nargs="*", default=list(FILES))
    args = p.parse_args(argv)
    tests = os.path.join(os.path.dirname(scipy.__file__), "linalg", "tests")
    opts = backend_options(args.min_size)
    keys = ["passed", "failed", "skipped", "xfailed", "xpassed"]
    summary = {}
    print(f"=== scipy {scipy.__version__} {tests}; backend options {opts}")
    for name in args.files:
        expr = FILES.get(name)
        # SciPy's own conftest (not loaded here) skips its 'xslow' tests,
        # e.g. a 47000 x 47000 Cholesky: deselect them
        extra = (["-k", expr] if expr else []) + ["-m", "not xslow"]
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
        diff = print_differences(base, under)
        summary[name] = {"native": cb, "backend": cu, "differs": diff, "emulated_tests": reached}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
