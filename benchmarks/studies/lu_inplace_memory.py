"""Peak memory of ``lu_factor(a, overwrite_a=True)``: the factors land in the
caller's buffer without a second full-size array.

Usage::

    python benchmarks/studies/lu_inplace_memory.py [--sizes 2048 4096] [--chunks 16]

For each order n, an F-ordered float64 matrix (diagonally dominant random)
is factored by ``ozlinalg.linalg.lu_factor`` with ``overwrite_a=True`` and
with ``overwrite_a=False``, and by native ``scipy.linalg.lu_factor`` the same
two ways, each under ``tracemalloc`` (NumPy reports its array allocations to
it; LAPACK's own small workspaces are not seen). Printed: the peak of memory
allocated *during the call* (the input matrix itself excluded), as a
multiple of the matrix's size, whether the factors share the caller's
buffer, the time, and ``--chunks`` (``ozlinalg.lapack.getrf.TRAILING_CHUNKS``,
the number of column chunks the trailing update is split into; 1 = one
product per panel step, as before the in-place work).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
import tracemalloc

import numpy as np
import scipy.linalg as sl

from ozlinalg.linalg import lu_factor

getrf_mod = importlib.import_module("ozlinalg.lapack.getrf")  # the module, not the function


def _native(f):
    while getattr(f, "_ozlinalg_shim", False):
        f = f.__wrapped__
    return f


def measure(func, a, overwrite):
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    lu, piv = func(a, overwrite_a=overwrite)
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak, bool(np.shares_memory(lu, a)), dt, lu


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[2048])
    p.add_argument("--chunks", type=int, default=getrf_mod.TRAILING_CHUNKS)
    args = p.parse_args(argv)
    getrf_mod.TRAILING_CHUNKS = args.chunks
    print(f"TRAILING_CHUNKS = {args.chunks}")
    print(f"{'n':>6s} {'call':28s} {'peak / matrix':>14s} {'shares a':>9s} {'time s':>8s}")
    for n in args.sizes:
        rng = np.random.default_rng(n)
        a0 = np.asfortranarray(rng.standard_normal((n, n)) + np.sqrt(n) * np.eye(n))
        size = a0.nbytes
        ref = None
        for label, func in (("scipy native", _native(sl.lu_factor)),
                            ("ozlinalg", lu_factor)):
            for overwrite in (True, False):
                a = a0.copy(order="F")
                peak, shares, dt, lu = measure(func, a, overwrite)
                if ref is None:
                    ref = lu.copy()
                err = float(np.abs(lu - ref).max() / np.abs(ref).max())
                print(f"{n:6d} {label + (' overwrite_a' if overwrite else ''):28s} "
                      f"{peak / size:14.3f} {str(shares):>9s} {dt:8.2f}   (max diff vs "
                      f"native {err:.1e})")
                del a, lu
    return 0


if __name__ == "__main__":
    sys.exit(main())
