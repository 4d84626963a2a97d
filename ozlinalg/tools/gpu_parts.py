"""The parts of the GPU check: the environment, the GPU tests, the smoke check of the
exact INT8 GEMM, and the speed and accuracy benchmark of every method against native
DGEMM and cuBLAS's own FP64 emulation (:mod:`ozlinalg.tools.gpu_baselines`).

Each part writes its section of the :class:`~ozlinalg.tools.gpu_report.Report`;
:mod:`ozlinalg.tools.gpu_check` runs them in order. Every GPU library is imported
inside the part that uses it.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
import traceback

import numpy as np

from .gpu_baselines import classify_emulation, raw_int8_tops, timed
from .gpu_report import SubsetReference, elapsed, log

#: The checkout this package is in: the GPU tests run there (``pytest -m gpu tests``).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Our methods, most important first (a late timeout loses the tail).
METHODS = ("hybrid-ef", "crt", "bitmask-ef", "crt-fast", "bitmask", "rn", "splitfp")
#: The baselines' names for ``--methods``.
BASELINES = ("native", "cublas-emu")
#: Methods whose products are INT8 GEMMs (SplitFP's are FP16 GemmEx).
INT8_METHODS = tuple(m for m in METHODS if m != "splitfp")


def runs_for(n):
    """Timed runs per method at size n (plus one warm-up and, for ours, one profiled)."""
    return 3 if n <= 4096 else (2 if n <= 8192 else 1)


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
    try:  # CuPy's int8 @ int8 wraps modulo 256 (why the engine never uses it)
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
        if elapsed() > budget_s:
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


