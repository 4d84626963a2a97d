"""Would the tests catch a wrong answer? A fault-injection check per test family.

    python benchmarks/studies/fault_injection.py --delta-ulps 16 [--delta 1e-12]
        [--families matmul lu ...] [--points front-door ozaki-1 ...] [--markdown]

For each injection point of :mod:`fault_plugin` in turn (the front door of the emulated
products, the Ozaki-I core, the Ozaki-II core, the refined solve's residual), every
test family whose code goes through that point runs a subset of its tests with the
point's values multiplied by ``1 + delta`` (``delta = N * 2**-52`` for
``--delta-ulps N``, or ``--delta`` as given). A family *catches* the fault when at
least one of its tests fails, and *misses* it when all pass. Each family also runs
once without a fault first: a subset that fails clean proves nothing, and is reported
as such. One line per family and point; the exit status is 1 when any family misses
(or fails clean), 0 otherwise.

The subsets are the tests of each family that check values (exact or
higher-precision references, backward errors against LAPACK's); they take a few
minutes in all on 2 cores. Dask's process-based tests are left out (a worker process
would not carry the fault).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from fault_plugin import POINTS  # noqa: E402

ALL = tuple(POINTS)
INT8_I = ("front-door", "ozaki-1")  # products of the default method (hybrid-ef)

#: family -> (pytest arguments: paths and -k, the points its code goes through)
FAMILIES = {
    "matmul": (["tests/ozaki/test_matmul.py", "tests/ozaki/test_crt.py", "-k",
                "TestMethods or TestAccuracyOrdering or TestShapesAndDtypes or "
                "TestThroughMatmul"],
               ("front-door", "ozaki-1", "ozaki-2")),
    "crt": (["tests/ozaki/test_crt.py", "-k",
             "TestAccuracy or TestModuliKeyword or TestThroughMatmul"],
            ("front-door", "ozaki-2")),
    "lu": (["tests/linalg/test_lapack.py", "tests/linalg/test_checked_products.py", "-k",
            "TestGetrf"], INT8_I),
    "cholesky": (["tests/linalg/test_lapack.py", "tests/linalg/test_checked_products.py", "-k",
            "TestPotrf"], INT8_I),
    "qr": (["tests/linalg/test_lapack.py", "tests/linalg/test_checked_products.py", "-k",
            "TestGeqrf"], INT8_I),
    "trsm": (["tests/linalg/test_lapack.py", "tests/linalg/test_checked_products.py", "-k",
            "TestTrsm"], INT8_I),
    # the refined solve corrects its factors' errors by design (a product a few ulps
    # off there is no wrong answer: the LU and Cholesky families check those products);
    # its own arithmetic is the residual
    "refined": (["tests/linalg/test_refine.py", "-k",
                 "TestRefinedSolveAccuracy or TestExactResidual"], ("residual",)),
    "linalg": (["tests/linalg/test_linalg_scipy.py",
                "tests/linalg/test_checked_products.py::TestScipyNamespace", "-k",
                "solve or inv or det or lstsq"], INT8_I),
    "numpy_linalg": (["tests/linalg/test_linalg_numpy.py",
                      "tests/linalg/test_checked_products.py::TestNumpyNamespace", "-k",
                      "solve or inv or det or lstsq or cholesky or qr"], INT8_I),
    "dask": (["tests/dask/test_dask.py", "-k",
              "TestMatmul or TestLU or TestCholesky or TestQR or TestSolve"], INT8_I),
    "eigen": (["tests/linalg/test_eigen_svd.py", "-k",
               "TestEigh or TestSvd or TestPinv or TestPolar"], INT8_I),
}

_COUNTS = re.compile(r"(\d+) (passed|failed|error|errors|skipped|deselected)")


def run_family(args, point=None, delta=0.0, timeout=900):
    """``(failed, passed, seconds)`` of one family's subset, with a fault or without."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    env.pop("OZLINALG_FAULT_POINT", None)
    if point is not None:
        env["OZLINALG_FAULT_POINT"] = point
        env["OZLINALG_FAULT_DELTA"] = repr(delta)
    # (test files this checkout lacks are left out: an older tree, for a "before" table)
    args = [x for x in args if not x.startswith("tests/") or os.path.exists(
        os.path.join(ROOT, x.split("::")[0]))]
    cmd = [sys.executable, "-m", "pytest", "-q", "--tb=no", "-p", "fault_plugin",
           "-p", "no:cacheprovider", "-o", "addopts=", *args]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    t = time.perf_counter() - t
    counts = {}
    for num, what in _COUNTS.findall(proc.stdout.splitlines()[-1] if proc.stdout else ""):
        counts[what.rstrip("s") if what.startswith("error") else what] = int(num)
    failed = counts.get("failed", 0) + counts.get("error", 0)
    if proc.returncode not in (0, 1) and not failed:  # collection / usage error
        failed = -1
    return failed, counts.get("passed", 0), t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--delta-ulps", type=float, help="relative error in units of 2**-52")
    g.add_argument("--delta", type=float, help="relative error as a number")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--points", nargs="+", default=list(ALL), choices=list(ALL))
    ap.add_argument("--markdown", action="store_true", help="also print a markdown table")
    args = ap.parse_args(argv)
    delta = args.delta if args.delta is not None else args.delta_ulps * 2.0**-52
    label = (f"{args.delta_ulps:g} ulps" if args.delta_ulps is not None else f"{delta:g}")
    print(f"fault injection: delta = {delta:.3g} ({label}); families {', '.join(args.families)}")
    bad = 0
    rows = []
    for fam in args.families:
        fargs, points = FAMILIES[fam]
        failed, passed, t = run_family(fargs)
        if failed:
            print(f"{fam:13s} {'(no fault)':12s} FAILS CLEAN ({failed} failing): not a check",
                  flush=True)
            rows.append((fam, "(no fault)", "fails clean", failed, passed, t))
            bad += 1
            continue
        print(f"{fam:13s} {'(no fault)':12s} clean: {passed} passed in {t:.0f} s", flush=True)
        for point in args.points:
            if point not in points:
                rows.append((fam, point, "n/a", 0, 0, 0.0))
                continue
            failed, passed, t = run_family(fargs, point, delta)
            verdict = "caught" if failed else "missed"
            bad += verdict == "missed"
            print(f"{fam:13s} {point:12s} {verdict}: {max(failed, 0)} failing, {passed} passed "
                  f"({t:.0f} s)", flush=True)
            rows.append((fam, point, verdict, failed, passed, t))
    if args.markdown:
        print(f"\n| family | {' | '.join(args.points)} |")
        print("|---|" + "---|" * len(args.points))
        for fam in args.families:
            cells = []
            for point in args.points:
                r = next((r for r in rows if r[0] == fam and r[1] == point), None)
                if r is None:
                    r = next(r for r in rows if r[0] == fam)
                cells.append(r[2] if r[2] in ("n/a", "fails clean")
                             else f"{r[2]} ({r[3]} of {r[3] + r[4]})")
            print(f"| {fam} | {' | '.join(cells)} |")
    print(f"\n{'every family caught it' if not bad else f'{bad} misses'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
