"""First-call cost of the INT8 engine's numba kernels: compiled, then from the cache.

Runs two fresh processes on one empty ``NUMBA_CACHE_DIR``: the first compiles
every kernel the methods use (both memory orders), the second loads them from
the cache. Each prints the import time, the engine's creation (``import numba``
and the exactness self-test) and the first and second rounds of small products.

Usage::

    python benchmarks/cpu_jit_cost.py
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile

CHILD = r"""
import time
t0 = time.perf_counter()
import numpy as np
import ozlinalg
from ozlinalg.engines import get_engine
t1 = time.perf_counter()
eng = get_engine(np)
t2 = time.perf_counter()
rng = np.random.default_rng(0)
a, b = rng.standard_normal((300, 200)), rng.standard_normal((200, 250))
rounds = []
for _ in range(2):
    t = time.perf_counter()
    for m in ("hybrid-ef", "bitmask", "rn", "crt", "crt-fast"):
        ozlinalg.matmul(a, b, method=m)
        ozlinalg.matmul(np.asfortranarray(a), np.asfortranarray(b), method=m, slices=8)
    rounds.append(time.perf_counter() - t)
print(f"{eng.name}: import {t1 - t0:.2f} s, engine {t2 - t1:.2f} s, "
      f"first products {rounds[0]:.2f} s, again {rounds[1]:.2f} s")
"""


def main():
    root = pathlib.Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache,
                   PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for label in ("compiling", "cached"):
            out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                                 text=True, check=True).stdout.strip()
            print(f"{label:>9}: {out}")


if __name__ == "__main__":
    main()
