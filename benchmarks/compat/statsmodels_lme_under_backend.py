"""statsmodels' linear mixed model tests, natively and with every call emulated (optional).

Usage::

    pip install statsmodels pytest-randomly      # not dependencies of ozlinalg
    python benchmarks/compat/statsmodels_lme_under_backend.py [--repeat 2] [--native-order 16]
                                                        [--show-profile]

Runs ``statsmodels/regression/tests/test_lme.py`` (many small solves, Cholesky
factorizations and products per fit) as a user would: plain ``python -m pytest``,
and through the launcher, ``python -m ozlinalg run --strategy eager --profile -m
pytest``, which routes every ``np.linalg`` / ``scipy.linalg`` call of the process to
the emulation. The two runs alternate (``--repeat`` pairs, the order swapped each
time); printed: each side's best wall time, their ratio (the target is 5x), the
pytest counts of both sides, and the emulated calls the launcher's profile counted
and how many routed calls were emulated or ran natively (a run where nothing is
routed, or no test ran, exits 1). ``--native-order`` sets eager's ``native_order`` for
the launcher (``OZLINALG_NATIVE_ORDER``; 0 emulates every routed LU / Cholesky call).
Exits 0 with a note when statsmodels is not installed.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

TARGET = 5.0


def _pytest_args(path):
    # statsmodels' conftest and pytest settings live in its package directory
    return ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "randomly",
            "--randomly-seed=1", path]


def _run(cmd, cwd, env):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, proc


def _counts(out):
    line = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    return line[-1].strip() if line else "(no summary)"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--native-order", type=int, default=16,
                    help="eager's native_order (0: every routed LU / Cholesky emulated)")
    ap.add_argument("--show-profile", action="store_true",
                    help="print the end of the launcher's profile (routing by order)")
    args = ap.parse_args(argv)
    try:
        import statsmodels
    except ImportError:
        print("statsmodels is not installed: nothing to run")
        return 0
    root = os.path.dirname(os.path.dirname(statsmodels.__file__))
    path = os.path.join("statsmodels", "regression", "tests", "test_lme.py")
    native = [sys.executable, *_pytest_args(path)]
    eager = [sys.executable, "-m", "ozlinalg", "run", "--strategy", "eager", "--profile",
             *_pytest_args(path)]
    env = dict(os.environ, OZLINALG_NATIVE_ORDER=str(args.native_order))
    times = {"native": [], "eager": []}
    last = {}
    for r in range(args.repeat):
        order = ("native", "eager") if r % 2 == 0 else ("eager", "native")
        for side in order:
            t, proc = _run(native if side == "native" else eager, root, env)
            times[side].append(t)
            last[side] = proc
    nat, eag = min(times["native"]), min(times["eager"])
    prof = last["eager"].stderr
    calls = re.search(r"emulated GEMM calls\s*:\s*(\d+)", prof)
    routed = re.search(r"backend routing\s*:\s*(\d+) emulated, (\d+) native", prof)
    print(f"statsmodels {statsmodels.__version__}, {path}; load {os.getloadavg()}")
    print(f"native: {nat:.1f} s ({_counts(last['native'].stdout)})")
    print(f"eager : {eag:.1f} s ({_counts(last['eager'].stdout)})")
    print(f"ratio : {eag / nat:.2f}x native (target <= {TARGET:g}x); emulated GEMM calls "
          f"in the launcher's profile (main thread): {calls.group(1) if calls else '?'}")
    if routed:
        print(f"routed: {routed.group(1)} calls emulated, {routed.group(2)} run natively "
              f"(native_order {args.native_order}: see the profile below)")
    if args.show_profile:
        print(prof[-6000:])
    # a run where the tests did not run, or nothing was routed, proves nothing
    for side, proc in last.items():
        if _counts(proc.stdout) == "(no summary)":
            print(f"{side}: pytest ran no tests (exit {proc.returncode}); its output ends:\n"
                  + (proc.stdout + proc.stderr)[-2000:], file=sys.stderr)
            return 1
    if not routed or int(routed.group(1)) + int(routed.group(2)) == 0:
        print("eager: nothing was routed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
