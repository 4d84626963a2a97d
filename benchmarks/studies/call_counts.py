"""Python calls made by one public call, and what they spend them on.

For each public call of a fixed set (``ozlinalg.matmul`` 8 x 8, ``ozlinalg.solve``
8 x 8, ``ozlinalg.linalg.solve(refine=False)`` at 256 and 512, ``np.linalg.solve``
8 x 8 under the eager backend entered once), after one warm-up call, this counts
with :func:`sys.setprofile`:

* ``calls``: Python function calls (``"call"`` events; C functions not counted);
* ``files``: the distinct source files those calls run in;
* ``options``: reads of the options in force (calls of ``get_options`` /
  ``current_engine`` or of the functions the plan replaced them with);
* ``engine``: engine lookups (calls of ``get_engine``);
* ``checks``: re-validations of the operands (``as_float_matrix``) and of the
  method / slice count (``validate_method``, ``validate_slices``).

It also times entering and leaving ``ozlinalg.backend(strategy="eager")``, best of
5 rounds of 2000 entries.

    python benchmarks/studies/call_counts.py            # a markdown table
    python benchmarks/studies/call_counts.py --json F   # and the figures as JSON
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

#: function names counted per column (qualified by module where a name is common)
OPTION_READS = {"get_options", "current_engine", "_memory_limit_in_force", "resolve"}
ENGINE_LOOKUPS = {"get_engine"}
CHECKS = {"as_float_matrix", "validate_method", "validate_slices"}


def count(fn):
    """``{calls, files, options, engine, checks}`` of one call of ``fn``."""
    tally = {"calls": 0, "options": 0, "engine": 0, "checks": 0}
    files = set()

    def prof(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        tally["calls"] += 1
        files.add(code.co_filename)
        name = code.co_name
        if name in OPTION_READS and "ozlinalg" in code.co_filename:
            tally["options"] += 1
        elif name in ENGINE_LOOKUPS and "ozlinalg" in code.co_filename:
            tally["engine"] += 1
        elif name in CHECKS and "ozlinalg" in code.co_filename:
            tally["checks"] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    tally["files"] = len(files)
    return tally


def cases():
    import ozlinalg
    import ozlinalg.linalg as oz

    rng = np.random.default_rng(7)

    def problem(n):
        return rng.standard_normal((n, n)) + n * np.eye(n), rng.standard_normal(n)

    a8, b8 = problem(8)
    a256, b256 = problem(256)
    a512, b512 = problem(512)
    out = {
        "ozlinalg.matmul 8x8": lambda: ozlinalg.matmul(a8, a8),
        "ozlinalg.solve 8x8": lambda: ozlinalg.solve(a8, b8),
        "ozlinalg.linalg.solve 256": lambda: oz.solve(a256, b256),
        "ozlinalg.linalg.solve(refine=False) 512": lambda: oz.solve(a512, b512, refine=False),
    }
    return out


def routed_case():
    """np.linalg.solve 8 x 8 inside one eager block (entered outside the count)."""
    import ozlinalg

    rng = np.random.default_rng(8)
    a = rng.standard_normal((8, 8)) + 8 * np.eye(8)
    b = rng.standard_normal(8)
    with ozlinalg.backend(strategy="eager", native_order=0):
        np.linalg.solve(a, b)
        return count(lambda: np.linalg.solve(a, b))


def backend_entry_us(rounds=5, loop=2000):
    import ozlinalg

    with ozlinalg.backend(strategy="eager"):
        pass
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(loop):
            with ozlinalg.backend(strategy="eager"):
                pass
        best = min(best, (time.perf_counter() - t) / loop)
    return best * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="FILE", help="write the figures here too")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    from ozlinalg.engines import get_engine

    rows = {}
    for name, fn in cases().items():
        fn()
        rows[name] = count(fn)
    rows["np.linalg.solve 8x8 (eager block)"] = routed_case()
    entry = backend_entry_us()
    print(f"# engine: {get_engine(np).describe()}; pid {os.getpid()}")
    print("| public call | Python calls | files | options reads | engine lookups "
          "| operand / option re-checks |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['calls']} | {r['files']} | {r['options']} | {r['engine']} "
              f"| {r['checks']} |")
    print(f"\nentering and leaving `ozlinalg.backend(strategy=\"eager\")`: {entry:.1f} us "
          "(best of 5 x 2000)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"calls": rows, "backend_entry_us": entry}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
