"""Run scikit-learn's Lars, OMP, PCA and TruncatedSVD tests inside ``ozlinalg.backend()``.

Usage::

    pip install scikit-learn      # not a dependency of ozlinalg
    python benchmarks/compat/sklearn_tests_under_backend.py [--min-size 0] [--files ...] [-k EXPR]

Runs these scikit-learn test files plainly and with every test inside an
always-emulating backend (``strategy="eager"``), and prints both runs' counts
and every test whose outcome differs (plugin of
``numpy_tests_under_backend.py``):

* ``linear_model/tests/test_least_angle.py`` and ``test_omp.py``: the
  least-angle and orthogonal-matching-pursuit solvers grow a Cholesky factor
  with ``scipy.linalg.solve_triangular(L, b, lower=True, overwrite_b=True)``
  and ignore the return value: they rely on SciPy writing the solution into
  ``b``;
* ``decomposition/tests/test_pca.py`` and ``test_truncated_svd.py``: PCA's
  full solver is ``scipy.linalg.svd``, its covariance-eigh solver
  ``numpy.linalg.eigh`` (through the array API namespace), the randomized
  solvers' range finder ``scipy.linalg.qr`` / ``lu`` and their small SVD
  ``scipy.linalg.svd``.

Tests listed in :data:`DESELECT` are left out of both runs, each with its
reason (printed): a deliberate difference of docs/backend.md's table, an open
ozlinalg bug, or tests that cannot be collected twice in one process. Exits 0
with a note when scikit-learn is not installed.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_tests_under_backend import backend_options, print_differences, run  # noqa: E402

#: test files, relative to the sklearn package
FILES = (
    "linear_model/tests/test_least_angle.py",
    "linear_model/tests/test_omp.py",
    "decomposition/tests/test_pca.py",
    "decomposition/tests/test_truncated_svd.py",
)

_ARRAY_API = ("array API namespaces (array_api_strict, torch, cupy, ...) are parametrized "
              "from a generator consumed when the module is imported: the second pytest run "
              "in this process collects them as NOTSET (skipped). Not NumPy arrays: never "
              "routed")

#: test file -> [(node id prefix, relative to the sklearn package; reason)]: left
#: out of both runs
DESELECT = {
    "decomposition/tests/test_pca.py": [
        ("decomposition/tests/test_pca.py::test_pca_array_api_compliance", _ARRAY_API),
        ("decomposition/tests/test_pca.py::test_pca_mle_array_api_compliance", _ARRAY_API),
    ],
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-size", type=int, default=0)
    p.add_argument("--files", nargs="*", default=list(FILES))
    p.add_argument("-k", default=None, help="pytest -k expression")
    args = p.parse_args(argv)
    # located, not imported: the test modules must import after the shims
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        print("scikit-learn is not installed: nothing to run")
        return 0
    pkg = os.path.dirname(spec.origin)
    opts = backend_options(args.min_size)
    keys = ["passed", "failed", "skipped", "xfailed", "xpassed"]
    print(f"=== scikit-learn {importlib.metadata.version('scikit-learn')}; "
          f"backend options {opts}")
    for name in args.files:
        path = os.path.join(pkg, name)
        extra = ["-k", args.k] if args.k else []
        for nodeid, _ in DESELECT.get(name, ()):
            extra += ["--deselect", nodeid]
        # rootdir: the package, so that sklearn/conftest.py (global_random_seed, ...) loads
        base, under = run(path, None, extra, pkg), run(path, opts, extra, pkg)
        print(f"\n--- {name}")
        for label, rec in (("native", base), ("backend", under)):
            c = Counter(rec.outcomes.values())
            print(f"{label:10s}" + "".join(f"{k}={c.get(k, 0)} " for k in keys))
        reached = sum(1 for v in under.emulated.values() if v)
        print(f"tests that ran >= 1 emulated GEMM under the backend: {reached}")
        for nodeid, reason in DESELECT.get(name, ()):
            print(f"deselected: {nodeid}: {reason}")
        print_differences(base, under)
    return 0


if __name__ == "__main__":
    sys.exit(main())
