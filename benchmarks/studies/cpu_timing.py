"""Timing helpers of the CPU benchmark scripts (cpu_targets, cpu_engines).

``--clock cpu --threads 1`` measures this process's CPU time on one core:
robust to the other processes of a shared machine, where wall-clock figures
of two threads vary by 2-4x with the load. ``--threads`` sets the thread
count of BLAS (threadpoolctl), oneDNN and the fused passes together.
"""
from __future__ import annotations

import time

#: The clock in use (``use_clock``).
CLOCK = [time.perf_counter]


def add_arguments(ap):
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for BLAS, oneDNN and the passes (default: all cores)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: process CPU time (with --threads 1: robust to machine load)")


def configure(args, engine=None):
    """Apply ``--clock`` and ``--threads`` (to BLAS and to ``engine``)."""
    CLOCK[0] = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
        if engine is not None:
            engine.threads = args.threads
            if getattr(engine, "kernels", None) is not None:
                engine.kernels.set_threads(args.threads)


def best(fn, repeat):
    """``(best time, last result)`` of ``repeat`` calls on the configured clock."""
    out, t_best = None, float("inf")
    for _ in range(max(1, repeat)):
        t = CLOCK[0]()
        out = fn()
        t_best = min(t_best, CLOCK[0]() - t)
    return t_best, out
