"""Working memory of one emulated product against ``options(memory_limit=...)``.

For each method (and the faithful mode), a few shapes and limits from the engine's
default down to the smallest plan, this measures the product's working memory two
ways and prints a markdown table of limit, planned bytes, measured peak and
peak / limit:

* tracemalloc (NumPy's buffers and the scratch pool's): the peak traced during the
  call minus the result (the inputs exist before tracing starts);
* the resident set: the process's peak (``VmHWM``, reset through
  ``/proc/self/clear_refs``) minus the resident size before the call and the
  result, with glibc's allocator told to return every large block at once
  (``mallopt``), so that what oneDNN and the compiled kernels allocate natively
  counts too. It runs separately (tracemalloc's own bookkeeping is resident memory).

The measured peak is the larger of the two. Every result is compared bit for bit
with the unlimited one. ``--check`` exits non-zero if any peak exceeds the
documented bound, ``limit (1 + SLACK_FRACTION) + SLACK_BYTES``
(:mod:`ozlinalg.ozaki.memory`), or a result differs.

    python benchmarks/studies/memory_bound.py [--engine onednn|sgemm] [--quick | --large] [--check]

Runs in a fresh process per engine; takes a few minutes (``--quick``: one shape).
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import os
import sys
import tracemalloc
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ozlinalg  # noqa: E402
from ozlinalg import AccuracyWarning  # noqa: E402
from ozlinalg._matmul import memory_plan  # noqa: E402
from ozlinalg.engines import get_engine  # noqa: E402
from ozlinalg.engines._scratch import free_scratch  # noqa: E402
from ozlinalg.ozaki.memory import SLACK_BYTES, SLACK_FRACTION  # noqa: E402

#: (method, slices, accuracy)
CASES = [
    ("hybrid-ef", 6, "dgemm"), ("hybrid-ef", "auto", "dgemm"), ("bitmask-ef", "auto", "dgemm"),
    ("bitmask", 6, "dgemm"), ("rn", "auto", "dgemm"), ("splitfp", "auto", "dgemm"),
    ("crt", 15, "dgemm"), ("crt", "auto", "dgemm"), ("crt-fast", "auto", "dgemm"),
    ("hybrid-ef", "auto", "faithful"), ("bitmask-ef", 9, "faithful"),
    ("crt", "auto", "faithful"), ("crt-fast", 16, "faithful"),
]
SHAPES = [(240, 150, 260), (600, 300, 500), (1000, 64, 1000)]
#: Inner dimensions beyond one inner block: SplitFP's (1024) and the INT8 methods' (2**17).
LONG = {"splitfp": (100, 2500, 120)}
LONG_INT8 = (12, 140000, 10)
LONG_CASES = {("hybrid-ef", "auto", "dgemm"), ("crt", 15, "dgemm"),
              ("hybrid-ef", "auto", "faithful"), ("crt", "auto", "faithful")}

#: ``--large``: the order-2048 products of the report that started this (crt 75.6 MiB under
#: 64 MiB before), under 64 and 16 MiB.
LARGE = (2048, 2048, 2048)
LARGE_CASES = [("hybrid-ef", "auto", "dgemm"), ("crt", "auto", "dgemm"),
               ("hybrid-ef", "auto", "faithful"), ("crt", "auto", "faithful")]
LARGE_LIMITS = [64 << 20, 16 << 20]

_LIBC = ctypes.CDLL("libc.so.6") if sys.platform.startswith("linux") else None


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def _quiet_allocator():
    """glibc: large blocks mmap'ed and unmapped at free (fixed thresholds), so that the
    resident set follows what is allocated, not what the allocator keeps."""
    if _LIBC is not None:
        _LIBC.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
        _LIBC.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD


def _settle():
    free_scratch()
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def rss_peak(fn):
    """Peak resident bytes of ``fn()`` above the resident size before it (and its result)."""
    _settle()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None, fn()
    base = _status("VmRSS")
    out = fn()
    return _status("VmHWM") - base, out


def traced_peak(fn):
    """Peak bytes tracemalloc sees during ``fn()``, and its result."""
    _settle()
    tracemalloc.start()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def limits_for(m, n, p, method, slices, accuracy, engine, quick):
    """The engine's default, fractions of the one-tile plan, and the smallest plan."""
    top = memory_plan(m, n, p, method, slices, accuracy, 1 << 50, engine)
    low = top.minimum
    out = [None]
    for div in ((4,) if quick else (2, 8, 32)):
        lim = top.need // div
        if lim > low:
            out.append(int(lim))
    out.append(int(low))
    return out


def measure(engine_name, quick, large=False):
    """Rows ``(case, shape, limit, plan, traced, rss, same)``."""
    rows = []
    rng = np.random.default_rng(0)
    engine = get_engine(np, engine_name)  # (the options' engine is not get_engine's default)
    for method, slices, accuracy in (LARGE_CASES if large else CASES):
        shapes = SHAPES[:1] if quick else list(SHAPES)
        if large:
            shapes = [LARGE]
        elif not quick:
            if method in LONG:
                shapes.append(LONG[method])
            if (method, slices, accuracy) in LONG_CASES:
                shapes.append(LONG_INT8)
        for m, n, p in shapes:
            a = rng.standard_normal((m, n))
            b = rng.standard_normal((n, p))
            kw = dict(method=method, slices=slices)
            with ozlinalg.options(engine=engine_name, accuracy=accuracy):
                want = ozlinalg.matmul(a, b, **kw)
                limits = (LARGE_LIMITS if large else
                          limits_for(m, n, p, method, slices, accuracy, engine, quick))
                for limit in limits:
                    lim = limit if limit is not None else engine.memory_limit()
                    plan = memory_plan(m, n, p, method, slices, accuracy, lim, engine)
                    with ozlinalg.options(memory_limit=limit):
                        # once first: oneDNN compiles and caches a kernel per new GEMM shape
                        # (native memory kept for the process, not the call's working set)
                        call = functools.partial(ozlinalg.matmul, a, b, **kw)
                        call()
                        rss, got = rss_peak(call)
                        same = np.array_equal(got, want)
                        del got
                        traced, got = traced_peak(call)
                        same = same and np.array_equal(got, want)
                        res = got.nbytes
                        del got
                    rows.append(((method, slices, accuracy), (m, n, p), lim, plan,
                                 traced - res, None if rss is None else rss - res, same))
                    print(_row(engine_name, rows[-1]), flush=True)
    return rows


def bound(limit):
    """The documented bound of the working memory under ``limit``."""
    return limit * (1 + SLACK_FRACTION) + SLACK_BYTES


def _mib(v):
    return f"{v / 2**20:.2f}"


def _row(engine_name, row):
    (method, slices, accuracy), (m, n, p), lim, plan, traced, rss, same = row
    peak = max(traced, rss or 0)
    mt, pt = plan.tiles
    keep = "" if method != "crt" else (" W kept" if plan.keep_bounds else " W per pass")
    flag = "" if peak <= bound(lim) and same else (" **over**" if same else " **bits differ**")
    return (f"| {engine_name} | {method} | {slices} | {accuracy} | {m} x {n} x {p} | "
            f"{_mib(lim)} | {mt} x {pt}{keep} | {_mib(plan.need)} | {_mib(traced)} | "
            f"{'-' if rss is None else _mib(rss)} | {peak / lim:.2f}{flag} |")


HEADER = ("| engine | method | slices | accuracy | m x n x p | limit MiB | tiles | "
          "planned MiB | traced MiB | resident MiB | peak / limit |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="onednn", choices=["onednn", "sgemm"])
    ap.add_argument("--quick", action="store_true", help="one shape, three limits")
    ap.add_argument("--large", action="store_true",
                    help="order 2048 under 64 and 16 MiB instead (a few minutes more)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a peak exceeds the bound or a result differs")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", AccuracyWarning)  # fixed counts below auto's: on purpose
    _quiet_allocator()
    print(f"bound: limit (1 + {SLACK_FRACTION}) + {SLACK_BYTES / 2**20:.0f} MiB; "
          f"{get_engine(np).describe() if args.engine == 'onednn' else 'cpu-sgemm'}")
    print(HEADER)
    rows = measure(args.engine, args.quick, args.large)
    bad = [r for r in rows if max(r[4], r[5] or 0) > bound(r[2]) or not r[6]]
    worst = max(max(r[4], r[5] or 0) / r[2] for r in rows)
    print(f"\n{len(rows)} products, worst peak / limit {worst:.2f}, {len(bad)} over the bound "
          "or not bit-identical")
    if args.check and bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
