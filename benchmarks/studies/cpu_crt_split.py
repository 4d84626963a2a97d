"""Where the INT8 engine's Ozaki-II product (``method="crt"``, ``moduli="auto"``) spends
its time, pass by pass, with native DGEMM and one engine GEMM in the same run.

Every compiled kernel of the engine (:mod:`ozlinalg.engines.kernels`) and its INT8 and
BF16 GEMMs are timed where they are called, in process CPU time split into user and
system time (``getrusage``): the system time is the kernel's share, in practice the
first-touch page faults of freshly allocated arrays, which on a VM whose freed pages go
back to the host cost up to ~1 ms per MiB. What no kernel covers (NumPy and Python in
the driver) is the rest. Best of ``--repeat`` calls by total CPU time. ``--clock wall``
times the same places in wall-clock seconds instead (all of it shown as "user"): for
several threads, where CPU time adds up over the threads.

Usage::

    python benchmarks/studies/cpu_crt_split.py --n 2048 4096 --threads 1
    python benchmarks/studies/cpu_crt_split.py --n 2048 --clock wall      # 2 threads
    ONEDNN_MAX_CPU_ISA=AVX2 OZLINALG_KERNELS_ISA=x86-64-v3 \
        python benchmarks/studies/cpu_crt_split.py --n 2048 --threads 1  # AVX2 engine
"""
from __future__ import annotations

import argparse
import collections
import os
import resource
import time

import numpy as np
from cpu_timing import add_arguments, configure

import ozlinalg
from ozlinalg.engines import get_engine
from ozlinalg.testing import random_matrix

#: True: wall-clock seconds instead of CPU time (``--clock wall``).
WALL = [False]


def _cpu():
    if WALL[0]:
        return time.perf_counter(), 0.0
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


class _Timed:
    """``fn`` that adds its user / system CPU time to ``into[name]``."""

    def __init__(self, name, fn, into):
        self.name, self.fn, self.into = name, fn, into

    def __call__(self, *args, **kw):
        u0, s0 = _cpu()
        try:
            return self.fn(*args, **kw)
        finally:
            u1, s1 = _cpu()
            rec = self.into[self.name]
            rec[0] += u1 - u0
            rec[1] += s1 - s0
            rec[2] += 1

    def __getattr__(self, attr):  # the wrapped function's attributes stay reachable
        return getattr(self.fn, attr)


def instrument(eng, into):
    """Time the engine's kernels and GEMMs (for the life of the process)."""
    ker = eng.kernels
    if ker is None:
        raise SystemExit("no compiled kernels here (not built, or OZLINALG_FUSED=0)")
    for name in dir(ker):
        fn = getattr(ker, name)
        # gemm16 / gemm_amx(_mod): the AVX2 / AMX INT8 GEMMs, timed within
        # int_matmul_sum / int_matmul_mod below
        if (not name.startswith("_") and callable(fn)
                and name not in ("set_threads", "threads", "cpu_level", "openmp", "gemm16",
                                 "gemm_amx", "gemm_amx_mod", "amx_info")):
            setattr(ker, name, _Timed(name, fn, into))
    cls = type(eng)
    for name, label in (("int_matmul_sum", "INT8 GEMMs"), ("_bf16_scaled", "BF16 GEMM"),
                        ("int_matmul_mod", "INT8 GEMMs reduced mod p")):
        method = getattr(cls, name, None)
        if method is None:
            continue
        setattr(cls, name, (lambda m, lab: lambda self, *a, **k: _Timed(
            lab, lambda *a2, **k2: m(self, *a2, **k2), into)(*a, **k))(method, label))


def measure(n, repeat, eng, into):
    rng = np.random.default_rng([n, 13])
    a = random_matrix(rng, n, n, 0.5)
    b = random_matrix(rng, n, n, 0.5)
    t_native = min(_timed(lambda: a @ b) for _ in range(repeat))
    q = eng.empty_slices(1, n, n, "bitmask")
    q[...] = rng.integers(-128, 128, q.shape)
    ws = eng.workspace(n, n)
    eng.int_matmul_sum(q, q, [(0, 0)], 128, 128, ws=ws)
    t_gemm = min(_timed(lambda: eng.int_matmul_sum(q, q, [(0, 0)], 128, 128, ws=ws))
                 for _ in range(repeat))
    ozlinalg.matmul(a, b, method="crt", slices="auto")  # warm (JIT cache, pages)
    best = None
    for _ in range(max(1, repeat)):
        into.clear()
        u0, s0 = _cpu()
        with ozlinalg.profile() as prof:
            ozlinalg.matmul(a, b, method="crt", slices="auto")
        u1, s1 = _cpu()
        if best is None or (u1 - u0) + (s1 - s0) < best[0] + best[1]:
            best = (u1 - u0, s1 - s0, {k: list(v) for k, v in into.items()}, prof.calls[-1])
    user, sys_, parts, rec = best
    total = user + sys_
    gemms = rec.int8_gemms
    clock = "wall" if WALL[0] else "CPU"
    print(f"n = {n}: crt auto ({rec.slices} moduli, {gemms} INT8 GEMMs) {total:.3f} s {clock} "
          f"(system {sys_:.3f} s), native DGEMM {t_native:.3f} s: {total / t_native:.2f}x; "
          f"one engine GEMM {t_gemm * 1e3:.1f} ms: cost-model ratio "
          f"{total / (gemms * t_gemm):.2f} ({user / (gemms * t_gemm):.2f} on user time); "
          f"load {os.getloadavg()[0]:.2f}")
    covered = 0.0
    for name, (u, s, calls) in sorted(parts.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
        covered += u + s
        print(f"  {name:<24} x{calls:<3} {u + s:7.4f} s  (system {s:.4f})  "
              f"{100 * (u + s) / total:5.1f} %")
    print(f"  {'rest (NumPy, Python)':<28} {total - covered:7.4f} s  "
          f"{100 * (total - covered) / total:5.1f} %", flush=True)
    return dict(n=n, cpu_seconds=total, system_seconds=sys_, native_seconds=t_native,
                engine_gemm_seconds=t_gemm, int8_gemms=gemms, moduli=rec.slices,
                parts={k: dict(user=v[0], system=v[1], calls=v[2]) for k, v in parts.items()})


def _timed(fn):
    u0, s0 = _cpu()
    fn()
    u1, s1 = _cpu()
    return (u1 - u0) + (s1 - s0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engine", default=None,
                    help="an INT8 engine's name (onednn, avx2; default: the one this "
                         "machine selects)")
    add_arguments(ap)
    ap.set_defaults(clock="cpu")  # CPU time unless --clock wall
    args = ap.parse_args(argv)
    WALL[0] = args.clock == "wall"
    if args.threads != 1 and not WALL[0]:
        print("note: CPU time of several threads adds up; --threads 1 compares with "
              "single-thread native DGEMM, --clock wall times several", flush=True)
    with ozlinalg.options(**({"engine": args.engine} if args.engine else {})):
        eng = get_engine(np, args.engine) if args.engine else get_engine(np)
        print(f"engine: {eng.describe()}", flush=True)
        configure(args, eng)
        into = collections.defaultdict(lambda: [0.0, 0.0, 0])
        instrument(eng, into)
        return [measure(n, args.repeat, eng, into) for n in args.n]


if __name__ == "__main__":
    main()
