"""Run scikit-learn's Lars and OMP tests inside ``ozlinalg.backend()`` (optional).

Usage::

    pip install scikit-learn      # not a dependency of ozlinalg
    python benchmarks/compat/sklearn_tests_under_backend.py [--min-size 0]

scikit-learn's least-angle and orthogonal-matching-pursuit solvers grow a
Cholesky factor with ``scipy.linalg.solve_triangular(L, b, lower=True,
overwrite_b=True)`` and ignore the return value: they rely on SciPy writing
the solution into ``b``. This runs their test files
(``sklearn/linear_model/tests/test_least_angle.py`` and ``test_omp.py``)
plainly and with every test inside an always-emulating backend, and prints
both runs' counts and every test whose outcome differs (plugin of
``numpy_tests_under_backend.py``). Exits 0 with a note when scikit-learn is
not installed.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_tests_under_backend import backend_options, print_differences, run  # noqa: E402

FILES = ("test_least_angle.py", "test_omp.py")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-size", type=int, default=0)
    args = p.parse_args(argv)
    try:
        import sklearn
    except ImportError:
        print("scikit-learn is not installed: nothing to run")
        return 0
    tests = os.path.join(os.path.dirname(sklearn.__file__), "linear_model", "tests")
    opts = backend_options(args.min_size)
    keys = ["passed", "failed", "skipped", "xfailed", "xpassed"]
    print(f"=== scikit-learn {sklearn.__version__}; backend options {opts}")
    for name in FILES:
        path = os.path.join(tests, name)
        base, under = run(path, None, []), run(path, opts, [])
        print(f"\n--- {name}")
        for label, rec in (("native", base), ("backend", under)):
            c = Counter(rec.outcomes.values())
            print(f"{label:10s}" + "".join(f"{k}={c.get(k, 0)} " for k in keys))
        reached = sum(1 for v in under.emulated.values() if v)
        print(f"tests that ran >= 1 emulated GEMM under the backend: {reached}")
        print_differences(base, under)
    return 0


if __name__ == "__main__":
    sys.exit(main())
