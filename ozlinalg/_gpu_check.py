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
  method, then the refined solves and ``eigh`` at n = 4096 (ozlinalg/_gpu_refine.py,
  ozlinalg/_gpu_eigen.py; the latter skips, saying why, past the part's deadline);
* ``16384``: ``--skip-tests --sizes 16384 --methods crt,hybrid-ef,native,cublas-emu``.

The multi-GPU step (ozlinalg's Dask graphs on CuPy chunks,
one dask-cuda worker per GPU; ozlinalg/_gpu_dask.py) is its own command,
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
benchmarks/gpu/gpu_check.py is the command. Importing it imports no CuPy: every
GPU library is imported inside the part that uses it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from fractions import Fraction

import numpy as np

from ._gpu_baselines import classify_emulation, emulation_probe, raw_int8_tops, timed

#: The checkout this package is in: the GPU tests run there (``pytest -m gpu tests``).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

T0 = time.perf_counter()


def log(*args):
    print(f"[{time.perf_counter() - T0:7.1f}s]", *args, flush=True)


#: Our methods, most important first (a late timeout loses the tail).
METHODS = ("hybrid-ef", "crt", "bitmask-ef", "crt-fast", "bitmask", "rn", "splitfp")
#: The baselines' names for ``--methods``.
BASELINES = ("native", "cublas-emu")
#: Methods whose products are INT8 GEMMs (SplitFP's are FP16 GemmEx).
INT8_METHODS = tuple(m for m in METHODS if m != "splitfp")

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


def runs_for(n):
    """Timed runs per method at size n (plus one warm-up and, for ours, one profiled)."""
    return 3 if n <= 4096 else (2 if n <= 8192 else 1)


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


class Report:
    def __init__(self, path):
        self.path = path
        self.sections = []
        self.data = {"env": {}, "tests": {}, "smoke": {}, "rows": [], "errors": [],
                     "int8_tops": {}, "cublas_emulation": {}}

    def add(self, title, body):
        """Add a section, or replace the one of the same title (a part's table
        grows row by row)."""
        for i, (t, _) in enumerate(self.sections):
            if t == title:
                self.sections[i] = (title, body)
                break
        else:
            self.sections.append((title, body))
        self.write()

    def write(self):
        lines = ["# ozlinalg GPU check", "",
                 f"Generated by benchmarks/gpu/gpu_check.py in {time.perf_counter() - T0:.0f} s "
                 f"({' '.join(self.data['env'].get('argv', []))}).", ""]
        for title, body in self.sections:
            lines += [f"## {title}", "", body.rstrip(), ""]
        if self.data["rows"]:
            lines += ["## Speed and accuracy (phi = 0.5, square n)", "",
                      table(self.data["rows"]), "",
                      "Errors: max / median of |C - C_exact| / |C_exact| over a random 32 x 32 "
                      "subset of entries (exact reference: "
                      f"{self.data['env'].get('reference', '?')}). TFLOPS = 2 n^3 / best time. "
                      "Split / GEMM / acc / other: ozlinalg.profile() time split of one extra "
                      "(synchronized, so slightly slower) run; non-GEMM share = 1 - GEMM / "
                      "total of that run. GEMM rate = the operations of the products actually "
                      "run (products x 2 n^2 k, k = the inner block: n for the INT8 methods, "
                      "1024 for SplitFP's FP16 products) / GEMM time; for the INT8 methods "
                      "also as a share of the engine's bare n x n x n INT8 GEMM rate measured "
                      "in the same run (" + ", ".join(
                          f"n={k}: {v:.4g} TOPS" for k, v in self.data["int8_tops"].items())
                      + ").", "",
                      "## Targets (issue #3 / #8)", "", targets_table(self.data["rows"]), ""]
        if self.data["errors"]:
            lines += ["## Failures", ""] + [f"- {e}" for e in self.data["errors"]] + [""]
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            with open(self.path, "w") as fh:
                fh.write("\n".join(lines))
            with open(os.path.splitext(self.path)[0] + ".json", "w") as fh:
                json.dump(self.data, fh, indent=1, default=str)
        except Exception as exc:  # never lose the run over the report
            log("could not write the report:", exc)


def table(rows):
    head = ("| n | method | slices | time (s) | TFLOPS | max rel err | median rel err | "
            "split / GEMM / acc / other (s) | non-GEMM share | GEMMs / launches | "
            "GEMM rate (TOPS) | vs raw INT8 | note |")
    out = [head, "|" + "---|" * 13]
    for r in rows:
        out.append(
            f"| {r['n']} | {r['method']} | {r.get('slices', '')} | {fmt(r.get('time'), '.4f')} | "
            f"{fmt(r.get('tflops'), '.2f')} | {fmt(r.get('max_err'), '.2e')} | "
            f"{fmt(r.get('med_err'), '.2e')} | {r.get('split', '')} | "
            f"{fmt(r.get('non_gemm'), '.1%')} | {r.get('gemms', '')} | "
            f"{fmt(r.get('gemm_tops'), '.4g')} | {fmt(r.get('int8_eff'), '.1%')} | "
            f"{r.get('note', '')} |")
    return "\n".join(out)


#: Issue targets on one H200 (benchmarks, not tests): (n, method, what, bound).
TARGETS = [
    (8192, "hybrid-ef", "tflops", 30.0, ">="),
    (8192, "hybrid-ef", "non_gemm", 0.20, "<="),
    (8192, "hybrid-ef", "int8_eff", 0.70, ">="),
    (16384, "crt", "tflops", 80.0, ">="),
]


def targets_table(rows):
    """Each target against the measured row (missing rows say so)."""
    out = ["| n | method | quantity | target | measured | met |", "|---|---|---|---|---|---|"]
    for n, meth, key, bound, op in TARGETS:
        row = next((r for r in rows if r["n"] == n and r["method"] == meth), None)
        val = None if row is None else row.get(key)
        if val is None:
            out.append(f"| {n} | {meth} | {key} | {op} {bound} | not measured | - |")
            continue
        met = val >= bound if op == ">=" else val <= bound
        out.append(f"| {n} | {meth} | {key} | {op} {bound} | {val:.3g} | "
                   f"{'yes' if met else 'NO'} |")
    native = {r["n"]: r.get("tflops") for r in rows if r["method"].startswith("native")}
    for r in rows:
        if r["method"] == "crt" and r.get("tflops") and native.get(r["n"]):
            out.append(f"| {r['n']} | crt | TFLOPS / native DGEMM | > 1 | "
                       f"{r['tflops'] / native[r['n']]:.3g} | "
                       f"{'yes' if r['tflops'] > native[r['n']] else 'NO'} |")
    return "\n".join(out)


def fmt(v, spec):
    return "" if v is None else format(v, spec)


# --------------------------------------------------------------------------- reference

class SubsetReference:
    """Exact product on rows ``ri`` x columns ``ci``: hi + lo float64 (as ozlinalg.testing)."""

    def __init__(self, a_rows, b_cols):
        try:
            import flint  # noqa: F401

            from ozlinalg.testing import ExactReference

            ref = ExactReference(a_rows, b_cols)
            self.hi, self.lo, self.kind = ref.hi, ref.lo, "python-flint"
            return
        except ImportError:
            pass
        from ozlinalg.testing import _int_rows

        ra, ea = _int_rows(a_rows)
        rb, eb = _int_rows(np.ascontiguousarray(b_cols.T))
        m, p = len(ra), len(rb)
        self.hi = np.empty((m, p))
        self.lo = np.empty((m, p))
        for i in range(m):
            for j in range(p):
                d = sum(x * y for x, y in zip(ra[i], rb[j]))
                exact = Fraction(d) * Fraction(2) ** (ea[i] + eb[j])
                hi = float(exact)
                self.hi[i, j] = hi
                self.lo[i, j] = float(exact - Fraction(hi))
        self.kind = "Python integers (python-flint not importable)"

    def errors(self, c):
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.abs((c - self.hi) - self.lo) / np.abs(self.hi)
        rel[~np.isfinite(rel)] = np.inf
        return float(rel.max()), float(np.median(rel))


# --------------------------------------------------------------------------- parts

def part_env(rep):
    env = rep.data["env"]
    env["python"] = platform.python_version()
    env["CUBLAS_EMULATION_STRATEGY"] = os.environ.get("CUBLAS_EMULATION_STRATEGY")
    try:
        import cupy as cp

        env["cupy"] = cp.__version__
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        env["device"] = name.decode() if isinstance(name, bytes) else name
        env["compute_capability"] = dev.compute_capability
        env["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
        env["cuda_driver"] = cp.cuda.runtime.driverGetVersion()
        free, total = cp.cuda.runtime.memGetInfo()
        env["gpu_mem_gib"] = f"{free / 2**30:.1f} free / {total / 2**30:.1f} total"
    except Exception as exc:
        env["cupy"] = f"NOT USABLE: {exc!r}"
    try:
        import nvmath
        from nvmath.bindings import cublasLt

        env["nvmath"] = getattr(nvmath, "__version__", "?")
        env["cublasLt"] = cublasLt.get_version()
    except Exception as exc:
        env["nvmath"] = f"NOT USABLE: {exc!r}"
    try:
        import flint

        env["python-flint"] = flint.__version__
    except Exception:
        env["python-flint"] = "missing (exact reference falls back to Python integers)"
    rep.add("Environment", "\n".join(f"- {k}: {v}" for k, v in env.items()))
    log("env:", env)


def part_tests(rep, timeout):
    log(f"running GPU tests (timeout {timeout} s) ...")
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "tests", "-q", "-p", "no:warnings",
           "-p", "no:cacheprovider", "--tb=short"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        out = proc.stdout + proc.stderr
        rc = proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        out += f"\n*** TIMEOUT after {timeout} s ***"
        rc = "timeout"
    tail = "\n".join(out.strip().splitlines()[-60:])
    rep.data["tests"] = {"rc": rc, "tail": tail}
    rep.add("GPU tests: " + " ".join(cmd[2:]), f"exit status: {rc}\n\n```\n{tail}\n```")
    log("tests exit status", rc)
    print(tail[-3000:], flush=True)


def part_smoke(rep):
    """The exact INT8 GEMM once more, outside pytest (a crash there loses nothing here)."""
    import cupy as cp

    from ozlinalg.engines import get_engine

    eng = get_engine(cp)
    rng = np.random.default_rng(1)
    res = {}
    # 200 and 1000: k padded to 208 / 1008, slices at 16-byte (not 256) offsets.
    for m, p, k in [(64, 48, 128), (33, 31, 77), (40, 36, 200), (24, 20, 1000)]:
        a = rng.integers(-127, 128, size=(2, m, k)).astype(np.int8)
        b = rng.integers(-127, 128, size=(2, p, k)).astype(np.int8)
        out, calls = eng.int_matmul_sum(cp.asarray(a), cp.asarray(b), [(0, 1), (1, 0)], 127, 127)
        want = a[0].astype(np.int64) @ b[1].astype(np.int64).T + a[1].astype(np.int64) @ b[0].T
        ok = bool(np.array_equal(cp.asnumpy(out).astype(np.int64), want))
        res[f"{m}x{p}x{k}"] = {"exact": ok, "calls": calls, "dtype": str(out.dtype)}
    try:  # DESIGN.md: CuPy's int8 @ int8 wraps modulo 256 (never used by the engine)
        a = rng.integers(-127, 128, size=(64, 128)).astype(np.int8)
        wrap = cp.asnumpy(cp.asarray(a) @ cp.asarray(a).T).astype(np.int64)
        res["cupy int8@int8 exact (expected False)"] = bool(
            np.array_equal(wrap, a.astype(np.int64) @ a.astype(np.int64).T))
    except Exception as exc:
        res["cupy int8@int8"] = f"raised {type(exc).__name__}"
    try:  # the BF16 tensor-core estimate behind slices="auto" (falls back to SGEMM)
        qa, qb = rng.random((256, 512)), rng.random((192, 512))
        qa[0] = 2.0**-135  # below FP32's normal range: kept by the float64 prescale
        q = cp.asnumpy(eng.approx_matmul(cp.asarray(qa), cp.asarray(qb)))
        want = qa @ qb.T
        res["approx_matmul (BF16)"] = {
            "max rel err": float(np.max(np.abs(q - want) / want)),
            "fallbacks": dict(eng.fallbacks) or "none"}
    except Exception as exc:
        res["approx_matmul (BF16)"] = f"raised {exc!r}"
    rep.data["smoke"] = res
    rep.add("Smoke check: cuBLASLt INT8 GEMM vs NumPy int64",
            "\n".join(f"- {k}: {v}" for k, v in res.items()))
    log("smoke:", res)


def part_bench(rep, sizes, methods, budget_s, emu):
    import cupy as cp

    import ozlinalg
    from ozlinalg.ozaki import params

    phi = 0.5
    pool = cp.get_default_memory_pool()
    for n in sizes:
        if time.perf_counter() - T0 > budget_s:
            rep.data["errors"].append(f"n={n}: skipped, time budget ({budget_s} s) spent")
            rep.write()
            continue
        log(f"n = {n}: generating inputs")
        try:
            rs = cp.random.RandomState(1234 + n)
            a = (rs.random_sample((n, n)) - 0.5) * cp.exp(phi * rs.standard_normal((n, n)))
            b = (rs.random_sample((n, n)) - 0.5) * cp.exp(phi * rs.standard_normal((n, n)))
            sel = np.random.default_rng(n)
            ri = np.sort(sel.choice(n, 32, replace=False))
            ci = np.sort(sel.choice(n, 32, replace=False))
            t = time.perf_counter()
            ref = SubsetReference(cp.asnumpy(a[ri]), cp.asnumpy(b[:, ci]))
            rep.data["env"]["reference"] = ref.kind
            log(f"  exact reference ({ref.kind}) in {time.perf_counter() - t:.1f} s")
        except Exception as exc:
            rep.data["errors"].append(f"n={n}: input/reference failed: {exc!r}")
            traceback.print_exc()
            continue
        if any(m in INT8_METHODS for m in methods):
            try:
                rep.data["int8_tops"][n] = raw_int8_tops(cp, n)
                log(f"  raw INT8 GEMM: {rep.data['int8_tops'][n]:.0f} TOPS")
            except Exception as exc:
                rep.data["errors"].append(f"n={n}: raw INT8 rate: {exc!r}")
                traceback.print_exc()
        reps = runs_for(n)
        free = cp.cuda.runtime.memGetInfo()[0]
        limit = int(min(64 * 2**30, 0.6 * free))
        native_row = None
        for name in methods:
            if name == "cublas-emu" and emu is None:
                continue
            row = {"n": n, "method": name}
            try:
                if name == "native":
                    row["method"] = "native DGEMM (cupy)"
                    row["time"], c = timed(cp, lambda a=a, b=b: cp.matmul(a, b), reps)
                    native_row = row
                elif name == "cublas-emu":
                    _emulation_row(cp, emu, a, b, reps, row, ref, ri, ci, native_row)
                    c = None
                else:
                    def ours(a=a, b=b, mm=name):
                        return ozlinalg.matmul(a, b, method=mm, slices="auto")

                    with ozlinalg.options(memory_limit=limit):
                        row["time"], c = timed(cp, ours, reps)
                if c is not None:
                    row["max_err"], row["med_err"] = ref.errors(cp.asnumpy(c[ri][:, ci]))
                    c = None
                row["tflops"] = 2.0 * n**3 / row["time"] / 1e12
                if name in METHODS:
                    with ozlinalg.options(memory_limit=limit), ozlinalg.profile() as prof:
                        c = ozlinalg.matmul(a, b, method=name, slices="auto")
                        cp.cuda.Device().synchronize()
                    c = None
                    _profile_fields(row, prof, n, name, rep.data["int8_tops"].get(n),
                                    params.FP16_INNER_BLOCK)
            except Exception as exc:
                row["note"] = f"FAILED: {type(exc).__name__}: {str(exc)[:160]}"
                rep.data["errors"].append(f"n={n} {name}: {exc!r}")
                traceback.print_exc()
            finally:
                c = None
                pool.free_all_blocks()
            rep.data["rows"].append(row)
            rep.write()
            log(f"  {row['method']}: {row}")
        a = b = None
        pool.free_all_blocks()


def _profile_fields(row, prof, n, name, raw_tops, fp16_block):
    row["slices"] = ",".join(str(s) for s in sorted(set(prof.slices)))
    row["split"] = (f"{prof.time_split:.3f} / {prof.time_int8:.3f} / "
                    f"{prof.time_accumulate:.3f} / {prof.time_other:.3f}")
    row["gemms"] = f"{prof.int8_gemms} / {prof.engine_calls}"
    if prof.time_total > 0:
        row["non_gemm"] = 1.0 - prof.time_int8 / prof.time_total
    if prof.time_int8 > 0:
        # SplitFP's products are n x 1024 x n FP16 GEMMs (its inner blocks), the
        # INT8 methods' n x n x n.
        inner = min(n, fp16_block) if name == "splitfp" else n
        row["gemm_tops"] = prof.int8_gemms * 2.0 * n * n * inner / prof.time_int8 / 1e12
        if name in INT8_METHODS and raw_tops:
            row["int8_eff"] = row["gemm_tops"] / raw_tops


def _emulation_row(cp, emu, a, b, reps, row, ref, ri, ci, native_row):
    """Time cuBLAS's emulation (planned once) and say which path it took."""
    mm, info = emu.plan(a, b)
    nat = None
    try:
        row["time"], c = timed(cp, mm.execute, reps)
        row["max_err"], row["med_err"] = ref.errors(cp.asnumpy(c[ri][:, ci]))
        nat, nat_info = emu.plan(a, b, native=True)
        t_lt, c_nat = timed(cp, nat.execute, 1)
        lines = emu.lt_lines(info["log_offset"], nat_info["log_offset"])
        label, evidence = classify_emulation(
            c, c_nat, row["time"], (native_row or {}).get("time"), row["max_err"],
            (native_row or {}).get("max_err"), lines + info["nvmath_log"])
        evidence["time / cuBLASLt COMPUTE_64F"] = row["time"] / t_lt if t_lt else None
        evidence["algorithm ids (emulated / native request)"] = (info["algorithm_ids"],
                                                                 nat_info["algorithm_ids"])
        row["method"] = label
        row["note"] = "; ".join(f"{k}: {format(v, '.3g') if isinstance(v, float) else v}"
                                for k, v in evidence.items())
        row["path_evidence"] = evidence
        row["cublaslt_log_excerpt"] = [ln for ln in lines if "atmul" in ln][-40:]
        row["nvmath_log"] = info["nvmath_log"][-20:]
        del c, c_nat
    finally:
        for obj in (mm, nat):
            try:
                if obj is not None:
                    obj.free()
            except Exception:
                pass


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
    """The refined-solve step (ozlinalg/_gpu_refine.py); alone (``env``: after the
    environment), or after a part's benchmark (``--refine-sizes``)."""
    from ozlinalg import _gpu_refine as step

    _run_step(args, rep, "refine", env and step.SECONDS_PER_SIZE * len(sizes),
              lambda: step.run_step(rep, log, sizes))


def run_eigh_step(args, rep, sizes, env=True):
    """The eigh step (ozlinalg/_gpu_eigen.py), the same way (``--eigh-sizes``); it skips
    what would end after ``--deadline`` seconds from this part's start."""
    from ozlinalg import _gpu_eigen as step

    def time_left():
        return args.deadline - (time.perf_counter() - T0)

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
    from ozlinalg._gpu_eigen import estimate_seconds as eigh_seconds
    from ozlinalg._gpu_refine import SECONDS_PER_SIZE

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
    cmd = [sys.executable, "-m", "ozlinalg._gpu_check"] + args
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    try:
        return f"exit {subprocess.run(cmd, timeout=timeout, env=env).returncode}"
    except subprocess.TimeoutExpired:
        return f"TIMEOUT after {timeout} s (its report keeps what ran)"


def run_dask_gpus(args, rep, cluster_factory=None):
    """The multi-GPU Dask step (ozlinalg/_gpu_dask.py), after the environment."""
    from ozlinalg import _gpu_dask as step

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
    global T0
    T0 = time.perf_counter()
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
