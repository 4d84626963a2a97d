#!/usr/bin/env python3
"""The GPU check: GPU tests, then speed and accuracy side by side, in parts.

NOT YET RUN ON A GPU when written. The owed run, one command (docs/gpu.md)::

    python3 benchmarks/gpu/gpu_check.py --owed --out-dir $OUT    # ~6 min on one H200

runs three parts, each in its own process (a CUDA fault in one cannot take
the others down), each writing its own report (``gpu-<part>.md`` and
``.json``), each announcing its estimated time before it starts, and stops
starting parts that would not end before ``--deadline`` (480 s):

* ``quick``: ``--quick`` -- ``pytest -m gpu tests`` (capped at 200 s), the smoke check,
  every method at n = 2048 and 4096;
* ``8192``: ``--skip-tests --sizes 8192 --refine-sizes 4096 --eigh-sizes 4096`` -- every
  method, then the refined solves and ``eigh`` at n = 4096 (ozlinalg/tools/gpu_refine.py,
  ozlinalg/tools/gpu_eigen.py; the latter skips, saying why, past the part's deadline);
* ``16384``: ``--skip-tests --sizes 16384 --methods crt,hybrid-ef,native,cublas-emu``.

The multi-GPU step (ozlinalg's Dask graphs on CuPy chunks,
one dask-cuda worker per GPU; ozlinalg/tools/gpu_dask.py) is its own command,
for the first machine with two or more GPUs; elsewhere it writes a report
saying why it skipped::

    python3 benchmarks/gpu/gpu_check.py --dask-gpus --out $OUT/gpu-dask.md

Each part can be run alone the same way (``--out`` names its report). For
square n x n x n products at phi = 0.5: effective TFLOPS (2 n^3 / time), max /
median relative error on a 32 x 32 subset of entries against the EXACT product
(python-flint, or Python integers when flint is missing: same exactness,
slower), ``ozlinalg.profile()``'s time split, and the baselines: native DGEMM
(``cupy.matmul``) and cuBLAS's own FP64 emulation (``COMPUTE_64F_EMULATED_
FIXEDPOINT`` through nvmath-python's stateful ``Matmul``: planned once,
``execute()`` timed), whose row says which path cuBLAS took (its cuBLASLt
log, the result against cuBLASLt's native FP64 on the same inputs, time and
error against native). Every part is in try/except; the report is rewritten
after each row, so a crash or a timeout keeps what was measured.

The code lives in the package, not in benchmarks/, so that
tests/test_gpu_check_host.py can dry-run it on the host stand-ins by importing it;
benchmarks/gpu/gpu_check.py is the command. This module runs the parts and the steps
(the command line, the estimates, the owed run); what they measure is in
:mod:`ozlinalg.tools.gpu_parts` and the steps' modules, the report in
:mod:`ozlinalg.tools.gpu_report`. Importing it imports no CuPy: every GPU library is
imported inside the part that uses it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback

from . import gpu_report
from .gpu_baselines import emulation_probe
from .gpu_parts import (
    BASELINES,
    METHODS,
    ROOT,
    part_bench,
    part_env,
    part_smoke,
    part_tests,
    runs_for,
)
from .gpu_report import Report, SubsetReference, elapsed, log

#: The owed run: (name, arguments), in order.
OWED_PARTS = (
    ("quick", ["--quick"]),
    ("8192", ["--skip-tests", "--sizes", "8192", "--refine-sizes", "4096",
              "--eigh-sizes", "4096"]),
    ("16384", ["--skip-tests", "--sizes", "16384", "--methods",
               "crt,hybrid-ef,native,cublas-emu"]),
)

# A rough H200 model for the time estimates printed before each part (not a
# measurement): peak-ish rates, equivalent n^3 GEMM counts with slices="auto"
# at phi = 0.5, and a fixed cost per method and size (first-use kernel
# compilation, plans, allocation, the profiled run's synchronizations).
_RATE = {"int8": 1.0e15, "fp16": 0.6e15, "fp64": 50e12}
_GEMMS = {"hybrid-ef": ("int8", 55), "bitmask-ef": ("int8", 55), "bitmask": ("int8", 55),
          "rn": ("int8", 55), "crt": ("int8", 18), "crt-fast": ("int8", 17),
          "splitfp": ("fp16", 36), "native": ("fp64", 1), "cublas-emu": ("fp64", 1)}
_PER_METHOD_S = 4.0
#: Cap of the GPU test run (``pytest -m gpu tests``: 83 tests when written).
TESTS_TIMEOUT_S = 200
_START_S = 15.0  # interpreter, CuPy import, CUDA context, environment, smoke check


def estimate_seconds(sizes, methods, tests_timeout):
    """Rough wall time of one part on an H200 (see the model above)."""
    total = _START_S + (tests_timeout or 0)
    for n in sizes:
        total += 2.0 + n / 4096.0  # inputs, exact reference, raw INT8 rate
        for m in methods:
            unit, count = _GEMMS[m]
            runs = runs_for(n) + (2 if m in METHODS else 3)
            total += _PER_METHOD_S + runs * count * 2.0 * n**3 / _RATE[unit]
    return total


def run_part(args, rep):
    sizes = [2048, 4096] if args.quick else [2048, 4096, 8192, 16384]
    if args.sizes:
        sizes = [int(v) for v in args.sizes.split(",")]
    refine_sizes = [int(v) for v in args.refine_sizes.split(",")] if args.refine_sizes \
        else sizes
    eigh_sizes = [int(v) for v in args.eigh_sizes.split(",")] if args.eigh_sizes else sizes
    if args.refine_step:
        return run_refine_step(args, rep, refine_sizes)
    if args.eigh_step:
        return run_eigh_step(args, rep, eigh_sizes)
    methods = list(BASELINES) + list(METHODS)
    if args.methods:
        methods = [m.strip() for m in args.methods.split(",")]
        bad = sorted(set(methods) - set(BASELINES) - set(METHODS))
        if bad:
            raise SystemExit(f"unknown methods {bad}; choose from {BASELINES + METHODS}")
        # native first: the emulation row compares against it
        methods.sort(key=lambda m: (m != "native", m != "cublas-emu"))
    tests_timeout = None if args.skip_tests else TESTS_TIMEOUT_S
    est = estimate_seconds(sizes, methods, tests_timeout)
    rep.data["env"]["argv"] = list(sys.argv[1:] if args.argv is None else args.argv)
    rep.data["env"]["estimate_s"] = round(est)
    log(f"part: sizes {sizes}, methods {methods}, tests "
        f"{'skipped' if tests_timeout is None else f'<= {tests_timeout} s'}; "
        f"estimated ~{est:.0f} s on an H200 (rough model, see estimate_seconds)")
    for part in (lambda: part_env(rep),
                 (lambda: None) if tests_timeout is None else
                 (lambda: part_tests(rep, tests_timeout)),
                 lambda: part_smoke(rep)):
        try:
            part()
        except Exception as exc:
            rep.data["errors"].append(repr(exc))
            rep.write()
            traceback.print_exc()
    emu = None
    if "cublas-emu" in methods:
        try:
            emu = emulation_probe(rep)
            log("cuBLAS emulation:", rep.data["cublas_emulation"].get("status"))
            rep.add("cuBLAS FP64 emulation (COMPUTE_64F_EMULATED_FIXEDPOINT)",
                    f"- status: {rep.data['cublas_emulation'].get('status')}\n"
                    f"- CUBLAS_EMULATION_STRATEGY={os.environ.get('CUBLAS_EMULATION_STRATEGY')}\n"
                    "- planned once with nvmath's Matmul, execute() timed; the row's label "
                    "and note say which path cuBLAS took (result vs cuBLASLt's native FP64 "
                    "on the same inputs, cuBLASLt's log, time and error vs native)")
        except Exception as exc:
            rep.data["errors"].append(f"emulation probe: {exc!r}")
    try:  # no new size starts after 1.5 x the estimate (+ 60 s)
        part_bench(rep, sizes, methods, est * 1.5 + 60, emu)
    except Exception as exc:
        rep.data["errors"].append(f"benchmark: {exc!r}")
        traceback.print_exc()
    if args.refine_sizes:
        run_refine_step(args, rep, refine_sizes, env=False)
    if args.eigh_sizes:
        run_eigh_step(args, rep, eigh_sizes, env=False)
    try:
        import cupy as cp

        from ozlinalg.engines import get_engine

        eng = get_engine(cp)
        rep.data["env"]["engine_fallbacks"] = dict(eng.fallbacks)
        rep.data["env"]["padded_copy_bytes"] = eng.padded_copy_bytes
        rep.add("Engine fallbacks (fast paths that failed)",
                "\n".join(f"- {k}: {v}" for k, v in rep.data["env"]["engine_fallbacks"].items())
                or "- none")
    except Exception as exc:
        rep.data["errors"].append(f"fallbacks: {exc!r}")
    rep.write()


def run_refine_step(args, rep, sizes, env=True):
    """The refined-solve step (ozlinalg/tools/gpu_refine.py); alone (``env``: after the
    environment), or after a part's benchmark (``--refine-sizes``)."""
    from . import gpu_refine as step

    _run_step(args, rep, "refine", env and step.SECONDS_PER_SIZE * len(sizes),
              lambda: step.run_step(rep, log, sizes))


def run_eigh_step(args, rep, sizes, env=True):
    """The eigh step (ozlinalg/tools/gpu_eigen.py), the same way (``--eigh-sizes``); it skips
    what would end after ``--deadline`` seconds from this part's start."""
    from . import gpu_eigen as step

    def time_left():
        return args.deadline - elapsed()

    _run_step(args, rep, "eigh", env and step.estimate_seconds(sizes),
              lambda: step.run_step(rep, log, sizes, time_left=time_left))


def _run_step(args, rep, name, alone_s, run):
    """A step's run; alone (``alone_s``: its estimate) after the environment."""
    if alone_s:
        rep.data["env"]["argv"] = list(sys.argv[1:] if args.argv is None else args.argv)
        rep.data["env"]["estimate_s"] = round(_START_S + alone_s)
        try:
            part_env(rep)
        except Exception as exc:
            rep.data["errors"].append(f"env: {exc!r}")
    try:
        run()
    except Exception as exc:
        rep.data["errors"].append(f"{name}: {exc!r}")
        traceback.print_exc()
    rep.write()


def part_estimate(args):
    """:func:`estimate_seconds` of one part of :data:`OWED_PARTS` (its arguments)."""
    ns = build_parser().parse_args(args)
    sizes = ([2048, 4096] if ns.quick else [2048, 4096, 8192, 16384]) if not ns.sizes \
        else [int(v) for v in ns.sizes.split(",")]
    from .gpu_eigen import estimate_seconds as eigh_seconds
    from .gpu_refine import SECONDS_PER_SIZE

    refine = len(ns.refine_sizes.split(",")) if ns.refine_sizes else 0
    eigh = [int(v) for v in ns.eigh_sizes.split(",")] if ns.eigh_sizes else []
    if ns.refine_step:
        return _START_S + SECONDS_PER_SIZE * (refine or len(sizes))
    if ns.eigh_step:
        return _START_S + eigh_seconds(eigh or sizes)
    methods = ns.methods.split(",") if ns.methods else list(BASELINES) + list(METHODS)
    return (estimate_seconds(sizes, methods, None if ns.skip_tests else TESTS_TIMEOUT_S)
            + SECONDS_PER_SIZE * refine + (eigh_seconds(eigh) if eigh else 0.0))


def run_owed(out_dir, deadline, runner=None):
    """The owed GPU run: every part of :data:`OWED_PARTS` in order, each in its own
    process (``runner(args, timeout)``), while its estimate fits before ``deadline``
    seconds. Returns ``[(part, status)]``."""
    runner = runner or _subprocess_runner
    start = time.perf_counter()
    done = []
    for name, args in OWED_PARTS:
        est = part_estimate(args)
        left = deadline - (time.perf_counter() - start)
        if est > left:
            log(f"owed part {name}: estimated ~{est:.0f} s, {left:.0f} s left: NOT started")
            done.append((name, f"not started (estimate {est:.0f} s > {left:.0f} s left)"))
            continue
        out = os.path.join(out_dir, f"gpu-{name}.md")
        log(f"owed part {name}: estimated ~{est:.0f} s ({left:.0f} s left) -> {out}")
        t = time.perf_counter()
        timeout = max(30, int(left - 5))  # the part's own deadline: its steps skip past it
        status = runner(args + ["--out", out, "--deadline", str(timeout)], timeout)
        done.append((name, f"{status} in {time.perf_counter() - t:.0f} s"))
        log(f"owed part {name}: {status}")
    log("owed run:", done)
    return done


def _subprocess_runner(args, timeout):
    cmd = [sys.executable, "-m", "ozlinalg.tools.gpu_check"] + args
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    try:
        return f"exit {subprocess.run(cmd, timeout=timeout, env=env).returncode}"
    except subprocess.TimeoutExpired:
        return f"TIMEOUT after {timeout} s (its report keeps what ran)"


def run_dask_gpus(args, rep, cluster_factory=None):
    """The multi-GPU Dask step (ozlinalg/tools/gpu_dask.py), after the environment."""
    from . import gpu_dask as step

    try:
        part_env(rep)
    except Exception as exc:
        rep.data["errors"].append(f"env: {exc!r}")
    rep.data["env"]["argv"] = list(sys.argv[1:] if args.argv is None else args.argv)
    try:
        step.run_step(rep, log, SubsetReference, n=args.dask_n, chunk=args.dask_chunk,
                      rmm_pool_size=args.dask_rmm_pool, cluster_factory=cluster_factory)
    except Exception as exc:
        rep.data["errors"].append(f"dask-gpus: {exc!r}")
        traceback.print_exc()
    rep.write()


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None,
                    help="report path (default $OUT/gpu.md; .json beside it)")
    ap.add_argument("--quick", action="store_true",
                    help="sizes 2048 and 4096 (the GPU tests run unless --skip-tests)")
    ap.add_argument("--sizes", type=str, default=None, help="comma-separated n (overrides)")
    ap.add_argument("--methods", type=str, default=None,
                    help="comma-separated subset of " + ",".join(BASELINES + METHODS))
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--owed", action="store_true",
                    help="the owed run: every part of OWED_PARTS, each in its own process")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "."),
                    help="--owed: where the parts' reports go (default $OUT)")
    ap.add_argument("--deadline", type=float, default=480.0,
                    help="--owed: start no part whose estimate ends after this many "
                         "seconds; a part: skip the eigh step's matrices that would")
    ap.add_argument("--refine-sizes", type=str, default=None,
                    help="comma-separated n: after the benchmark, the refined-solve step "
                         "(ozlinalg.solve(refine=True) against cuSOLVER) at these sizes")
    ap.add_argument("--refine-step", action="store_true",
                    help="only the refined-solve step, at --refine-sizes (else --sizes)")
    ap.add_argument("--eigh-sizes", type=str, default=None,
                    help="comma-separated n: after the benchmark (and refined solves), the "
                         "eigh step (ozlinalg.linalg.eigh against cuSOLVER syevd)")
    ap.add_argument("--eigh-step", action="store_true",
                    help="only the eigh step, at --eigh-sizes (else --sizes)")
    ap.add_argument("--dask-gpus", action="store_true",
                    help="only the multi-GPU Dask step (dask-cuda LocalCUDACluster, one "
                         "worker per GPU; skips without dask-cuda or a second GPU)")
    ap.add_argument("--dask-n", type=int, default=8192, help="--dask-gpus: matrix order")
    ap.add_argument("--dask-chunk", type=int, default=2048, help="--dask-gpus: block size")
    ap.add_argument("--dask-rmm-pool", default=None,
                    help="--dask-gpus: RMM pool per worker (bytes, '40GB' or a fraction of "
                         "the device memory); default: CuPy's own pool")
    return ap


def main(argv=None):
    # cuBLAS decides per call whether to emulate ("performant", the default, may keep
    # native FP64 on a GPU with fast FP64 such as the H200); "eager" always emulates
    # where the library can. Must be set before cuBLAS initializes, which no import
    # of this module does: the parts import CuPy.
    os.environ.setdefault("CUBLAS_EMULATION_STRATEGY", "eager")
    # The log's clock and the time budget count from this run's start, not from the
    # import (a test process imports the module once and runs it many times).
    gpu_report.restart_clock()
    args = build_parser().parse_args(argv)
    args.argv = argv
    if args.owed:
        run_owed(args.out_dir, args.deadline)
        return
    out = args.out or os.path.join(os.environ.get("OUT", "."),
                                   "gpu-dask.md" if args.dask_gpus else "gpu.md")
    rep = Report(out)
    log("report ->", out)
    if args.dask_gpus:
        run_dask_gpus(args, rep)
    else:
        run_part(args, rep)
    log("done; report at", out)
    print(open(out).read(), flush=True)


if __name__ == "__main__":
    main()
