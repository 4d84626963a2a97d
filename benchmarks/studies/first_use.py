"""First use: ``import ozlinalg`` and the first call of each method, each in a fresh process.

    python benchmarks/studies/first_use.py [--n 512] [--repeat 3] [--json out.json]

Every row runs in a new interpreter (nothing warm but the operating system's file
cache): the import, the engine's creation with its one-time exactness self-test,
and one call. Reported: the best of ``--repeat`` fresh processes, import and first
call separately, and the same call again in that process (warm). The budget for a
fresh install is 2 s for import plus first call (docs/process.md).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

CALLS = {
    "matmul hybrid-ef": "ozlinalg.matmul(a, b)",
    "matmul bitmask-ef": "ozlinalg.matmul(a, b, method='bitmask-ef')",
    "matmul bitmask": "ozlinalg.matmul(a, b, method='bitmask', slices=9)",
    "matmul rn": "ozlinalg.matmul(a, b, method='rn', slices=9)",
    "matmul splitfp": "ozlinalg.matmul(a, b, method='splitfp', slices=9)",
    "matmul crt": "ozlinalg.matmul(a, b, method='crt')",
    "matmul crt-fast": "ozlinalg.matmul(a, b, method='crt-fast')",
    "matmul hybrid-ef faithful": "ozlinalg.matmul(a, b, accuracy='faithful')",
    "matmul crt faithful": "ozlinalg.matmul(a, b, method='crt', accuracy='faithful')",
    "matmul complex": "ozlinalg.matmul(a + 1j * b, b)",
    "solve": "ozlinalg.solve(a, b[:, 0])",
    "cholesky": "ozlinalg.linalg.cholesky(a @ a.T + n * np.eye(n))",
    "qr": "ozlinalg.linalg.qr(a)",
}

_SCRIPT = """
    import json, time
    t0 = time.perf_counter()
    import numpy as np
    import ozlinalg
    t1 = time.perf_counter()
    n = {n}
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)); b = rng.standard_normal((n, n))
    t2 = time.perf_counter()
    {call}
    t3 = time.perf_counter()
    {call}
    t4 = time.perf_counter()
    print(json.dumps({{"import": t1 - t0, "first": t3 - t2, "warm": t4 - t3,
                      "engine": ozlinalg.engines.get_engine(np).describe()}}))
"""


def run(call, n):
    code = textwrap.dedent(_SCRIPT.format(n=n, call=call))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = {}
    engine = None
    for name, call in CALLS.items():
        best = min((run(call, args.n) for _ in range(args.repeat)),
                   key=lambda r: r["import"] + r["first"])
        rows[name] = best
        engine = best["engine"]
    print(f"engine: {engine}; n = {args.n}; best of {args.repeat} fresh processes")
    print(f"{'call':28s} {'import [s]':>10s} {'first [s]':>10s} {'total [s]':>10s} "
          f"{'warm [s]':>9s}")
    for name, r in rows.items():
        print(f"{name:28s} {r['import']:10.3f} {r['first']:10.3f} "
              f"{r['import'] + r['first']:10.3f} {r['warm']:9.3f}")
    worst = max(r["import"] + r["first"] for r in rows.values())
    print(f"slowest first use (import + first call): {worst:.3f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"n": args.n, "engine": engine, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
