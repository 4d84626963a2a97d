"""The GPU check (ozlinalg/tools/gpu_check.py; benchmarks/gpu/gpu_check.py runs it) end to end
on the host stand-ins (a dry run, every CI run).

The GPU session has minutes of device time; a crash in the report code would
waste them. Here ``cupy`` is :func:`host_cuda.host_cupy_for_scripts` and its
engine the GPU engine on the emulated cuBLASLt, so every part of the script
(environment, smoke check, raw INT8 rate, the table, the targets, the owed
run's driver) runs and writes its report; a fake ``nvmath`` stands in for
cuBLAS's FP64 emulation so that the baseline's path detection runs too. The
figures are meaningless, the code paths are not.
"""
import json
import sys
import types

import numpy as np
import pytest
from host_cuda import HostEngine, HostGPU, host_cupy_for_scripts

from ozlinalg._array import cupy_or_none
from ozlinalg.engines import base as engine_registry
from ozlinalg.tools import gpu_check as _gpu_check
from ozlinalg.tools import gpu_eigen as _gpu_eigen
from ozlinalg.tools import gpu_parts


@pytest.fixture
def gpu_check(monkeypatch):
    cp = host_cupy_for_scripts()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    eng = HostEngine(fused_split=False)
    eng.xp = cp
    monkeypatch.setitem(engine_registry._ENGINES, "hostcupy", eng)
    monkeypatch.delenv("CUBLAS_EMULATION_STRATEGY", raising=False)
    return _gpu_check, eng


def fake_nvmath(monkeypatch, tmp_path, emulates):
    """An ``nvmath`` whose "emulated" Matmul is native DGEMM (``emulates=False``:
    cuBLAS's fallback) or differs from it by one ulp and logs an IMMA kernel."""
    log_file = {}
    level = {"now": 0}

    class Algo:
        algorithm_id = 7

    class Matmul:
        def __init__(self, a, b, options=None):
            self.a, self.b = np.asarray(a), np.asarray(b)
            self.ct = options["compute_type"]
            self.logger = options.get("logger")

        def plan(self):
            self.logger.info(f"The compute type is {self.ct}.")
            if level["now"]:
                emu = self.ct == 79
                kernel = "sm90_xmma_gemm_i8i8_imma" if emulates and emu else "dgemm"
                name = "COMPUTE_64F_EMULATED_FIXEDPOINT" if emu else "COMPUTE_64F"
                with open(log_file["path"], "a") as fh:
                    fh.write(f"[cublasLt][trace][cublasLtMatmul] computeType={name} "
                             f"kernel={kernel}\n")
            return [Algo()]

        def execute(self):
            c = self.a @ self.b
            if emulates and self.ct == 79:
                c = np.nextafter(c, np.inf)
            return c

        def free(self):
            pass

    ct = types.SimpleNamespace(COMPUTE_64F=70, COMPUTE_64F_EMULATED_FIXEDPOINT=79)
    lt = types.SimpleNamespace(
        logger_open_file=lambda path: log_file.update(path=path),
        logger_set_level=lambda n: level.update(now=n), get_version=lambda: 130200)
    nv = types.ModuleType("nvmath")
    nv.__version__ = "fake"
    nv.linalg = types.ModuleType("nvmath.linalg")
    nv.linalg.advanced = types.ModuleType("nvmath.linalg.advanced")
    nv.linalg.advanced.Matmul = Matmul
    nv.linalg.advanced.MatmulComputeType = ct
    nv.bindings = types.ModuleType("nvmath.bindings")
    nv.bindings.cublasLt = lt
    for name, mod in (("nvmath", nv), ("nvmath.linalg", nv.linalg),
                      ("nvmath.linalg.advanced", nv.linalg.advanced),
                      ("nvmath.bindings", nv.bindings), ("nvmath.bindings.cublasLt", lt)):
        monkeypatch.setitem(sys.modules, name, mod)


def test_dry_run_writes_every_section(tmp_path, gpu_check, capsys):
    mod, eng = gpu_check
    out = tmp_path / "gpu.md"
    mod.main(["--sizes", "64", "--skip-tests", "--out", str(out)])
    text = out.read_text()
    data = json.loads((tmp_path / "gpu.json").read_text())
    for section in ("## Environment", "## Smoke check", "## cuBLAS FP64 emulation",
                    "## Speed and accuracy", "## Targets"):
        assert section in text, section
    approx = data["smoke"].pop("approx_matmul (BF16)")
    assert approx["max rel err"] < 2.0**-7  # the host has no BF16 GemmEx: the SGEMM fallback
    assert "approx BF16 GemmEx" in approx["fallbacks"]
    data["smoke"].pop("cupy int8@int8 exact (expected False)", None)
    assert all(v["exact"] for v in data["smoke"].values())
    assert {"40x36x200", "24x20x1000"} <= set(data["smoke"])  # odd k: unaligned slices
    assert data["int8_tops"]["64"] > 0
    methods = [r["method"] for r in data["rows"]]
    assert methods[0].startswith("native") and set(mod.METHODS) <= set(methods)
    for row in data["rows"]:
        assert "note" not in row, row  # nothing FAILED
        assert row["max_err"] < 1e-12
    ours = [r for r in data["rows"] if r["method"] in mod.METHODS]
    assert all(0 <= r["non_gemm"] <= 1 and r["gemm_tops"] > 0 for r in ours)
    assert all(r["int8_eff"] > 0 for r in ours if r["method"] != "splitfp")
    assert "int8_eff" not in next(r for r in ours if r["method"] == "splitfp")
    # Errors may only be the expected absence of nvmath (cuBLAS emulation unavailable).
    assert data["errors"] == []
    assert data["cublas_emulation"]["status"].startswith("unavailable")
    assert eng.lt.calls > 0  # the smoke check and the raw rate ran on the GPU engine
    assert "| 8192 | hybrid-ef | tflops | >= 30.0 | not measured |" in text
    assert "## Engine fallbacks" in text


def test_splitfp_gemm_rate_counts_its_inner_blocks(gpu_check):
    mod = gpu_parts
    prof = types.SimpleNamespace(slices=[6], time_split=0.1, time_int8=1.0,
                                 time_accumulate=0.1, time_other=0.0, time_total=1.2,
                                 int8_gemms=21 * 8, engine_calls=21 * 8)
    row = {}
    mod._profile_fields(row, prof, 8192, "splitfp", 1000.0, 1024)
    # 21 products per inner block of 1024, 8 blocks: 21 * 2 * 8192**3 operations.
    assert row["gemm_tops"] == pytest.approx(21 * 2.0 * 8192**3 / 1e12)
    assert "int8_eff" not in row
    row = {}
    mod._profile_fields(row, prof, 8192, "hybrid-ef", 1000.0, 1024)
    assert row["int8_eff"] == pytest.approx(row["gemm_tops"] / 1000.0)


@pytest.mark.parametrize("emulates", [False, True])
def test_cublas_emulation_row_says_which_path(tmp_path, gpu_check, monkeypatch, emulates):
    mod, _ = gpu_check
    fake_nvmath(monkeypatch, tmp_path, emulates)
    out = tmp_path / "gpu.md"
    mod.main(["--sizes", "64", "--skip-tests", "--methods", "cublas-emu,native",
              "--out", str(out)])
    data = json.loads((tmp_path / "gpu.json").read_text())
    assert data["errors"] == []
    native, emu = data["rows"]
    assert native["method"].startswith("native")
    ev = emu["path_evidence"]
    assert ev["bit-identical to cuBLASLt COMPUTE_64F"] is (not emulates)
    if emulates:
        assert emu["method"] == "cuBLAS FP64 emulation (emulated: INT8 kernels in its log)"
        assert {"i8i8", "imma"} <= set(ev["INT8 kernel words in cuBLASLt log"])
    else:
        assert "NOT emulated" in emu["method"]
        # The request's own compute type, echoed by the log, is not evidence.
        assert ev["INT8 kernel words in cuBLASLt log"] == "none"
    assert any("atmul" in line for line in emu["cublaslt_log_excerpt"])
    assert emu["method"] in out.read_text()


def test_owed_run_runs_every_part_within_the_deadline(tmp_path, gpu_check, monkeypatch):
    mod, _ = gpu_check
    ran = []

    def in_process(args, timeout):  # the parts' own arguments, at a host-sized n
        ran.append(list(args))
        args = ["64" if prev in ("--refine-sizes", "--eigh-sizes") else a
                for prev, a in zip([None] + args[:-1], args)]
        mod.main(args + ["--sizes", "64", "--skip-tests"])
        return "exit 0"

    done = mod.run_owed(str(tmp_path), 10_000, runner=in_process)
    assert [name for name, _ in done] == ["quick", "8192", "16384"]
    assert all(status.startswith("exit 0") for _, status in done)
    assert ran[0][0] == "--quick" and "--refine-sizes" in ran[1] and "--methods" in ran[2]
    refined = json.loads((tmp_path / "gpu-8192.json").read_text())
    assert refined["errors"] == [] and refined["refined"]
    assert {r["solver"] for r in refined["refined"]} == {
        "cuSOLVER", "emulated (refine=False)", "refined hybrid-ef", "refined crt"}
    assert all(r["eta"] < 1e-14 for r in refined["refined"])
    assert "--eigh-sizes" in ran[1] and "--deadline" in ran[1]  # each part its deadline
    check_eigh_rows(refined["eigh"], 64)
    assert _gpu_eigen.TITLE in (tmp_path / "gpu-8192.md").read_text()
    for name in ("quick", "8192", "16384"):
        data = json.loads((tmp_path / f"gpu-{name}.json").read_text())
        assert data["rows"] and data["errors"] == [], name
        assert data["env"]["estimate_s"] > 0
    methods = {r["method"] for r in json.loads((tmp_path / "gpu-16384.json").read_text())["rows"]}
    assert methods == {"native DGEMM (cupy)", "crt", "hybrid-ef"}  # no nvmath here
    # A part whose estimate does not fit is not started; later, smaller ones may be.
    done = dict(mod.run_owed(str(tmp_path / "short"), 100, runner=in_process))
    assert done["quick"].startswith("not started") and done["16384"].startswith("exit 0")


def test_owed_run_fits_a_ten_minute_call(gpu_check):
    mod, _ = gpu_check
    total = sum(mod.part_estimate(args) for _, args in mod.OWED_PARTS)
    assert total < 480 < 600  # the default deadline, inside one 10-minute call
    # the eigh step is in it: ~10-16 products and two syevd per matrix at n = 4096
    eigh = _gpu_eigen.estimate_seconds([4096])
    assert 15 < eigh < 60
    assert mod.part_estimate(["--eigh-step", "--eigh-sizes", "4096"]) > eigh


# ------------------------------------------------ the eigh step (--eigh-sizes)


#: The eigh and Dask steps' dry runs install the CuPy stand-in of host_cuda.HostGPU,
#: which would take real CuPy's place (in dask's dispatch too: tests/dask/test_dask_gpu.py).
needs_no_real_cupy = pytest.mark.skipif(cupy_or_none() is not None,
                                        reason="real CuPy present: the GPU runs the step")


def check_eigh_rows(rows, n):
    """Both solvers on both matrices, sane numbers, the profile's fields."""
    assert [(r["matrix"], r["solver"].split()[0]) for r in rows] == [
        ("random", "cuSOLVER"), ("random", "ozlinalg.linalg.eigh"),
        ("clustered", "cuSOLVER"), ("clustered", "ozlinalg.linalg.eigh")]
    for r in rows:
        assert r["n"] == n and "note" not in r, r
        assert r["time"] > 0 and r["ratio"] > 0
        assert r["residual"] < 4 * n * 2.0**-53 and r["orthogonality"] < 4 * n * 2.0**-53
    for r in rows[1::2]:  # ozlinalg's: the refinement ran on the emulated GEMM
        assert r["eig_agreement"] < 8 * n * 2.0**-53
        assert 8 <= r["products_n3"] <= 24 and r["int8_gemms"] >= 8 * 36
        assert 0 < r["emulated_share"] <= 1 and r["first_call"] > 0
        assert "ssyevd x1" in r["native"] and "fallback" not in r["native"]
        assert len(r["split"].split(" / ")) == 4


@needs_no_real_cupy
def test_eigh_step_on_the_gpu_stand_in(tmp_path):
    """The step alone (--eigh-step) with CuPy arrays: ozlinalg's eigh and the metrics'
    products on the GPU engine's code (the CPU engine refuses), the report written."""
    with HostGPU() as engine:
        _gpu_check.main(["--eigh-step", "--eigh-sizes", "64", "--out",
                         str(tmp_path / "gpu-eigh.md")])
    data = json.loads((tmp_path / "gpu-eigh.json").read_text())
    assert data["errors"] == []
    check_eigh_rows(data["eigh"], 64)
    assert engine.lt.calls > 0
    assert [e["matrix"] for e in data["eigh_estimates"]] == ["random", "clustered"]
    text = (tmp_path / "gpu-eigh.md").read_text()
    assert f"## {_gpu_eigen.TITLE}" in text and "| 64 | clustered | ozlinalg" in text


@needs_no_real_cupy
def test_eigh_step_skips_past_the_deadline(tmp_path):
    """A part whose deadline is too close: each matrix skipped, saying why; no failure."""
    with HostGPU() as engine:
        _gpu_check.main(["--eigh-step", "--eigh-sizes", "64", "--deadline", "1",
                         "--out", str(tmp_path / "gpu-eigh.md")])
    data = json.loads((tmp_path / "gpu-eigh.json").read_text())
    assert data["errors"] == [] and engine.lt.calls == 0
    assert [r["matrix"] for r in data["eigh"]] == ["random", "clustered"]
    assert all(r["note"].startswith("skipped: estimated ~") for r in data["eigh"])
    assert "before the part's deadline" in (tmp_path / "gpu-eigh.md").read_text()


def test_eigh_estimate_uses_the_part_measured_rate():
    rows = [{"n": 8192, "method": "hybrid-ef", "time": 0.04},
            {"n": 8192, "method": "crt", "time": 0.01},
            {"n": 16384, "method": "hybrid-ef", "note": "FAILED: ..."}]
    assert _gpu_eigen.product_seconds(4096, rows) == pytest.approx(0.005)
    assert _gpu_eigen.product_seconds(4096) == pytest.approx(
        _gpu_eigen.MODEL_PRODUCT_OPS * 2 * 4096**3)
    assert _gpu_eigen.matrix_seconds(4096, "random", 0.1) > \
        _gpu_eigen.matrix_seconds(4096, "random", 0.005)


# ------------------------------------------------ the multi-GPU Dask step (--dask-gpus)






def fake_dask_cuda(monkeypatch, made):
    """A ``dask_cuda`` whose LocalCUDACluster is a LocalCluster of threads in this
    process (where the GPU stand-in is installed); records its arguments."""
    distributed = pytest.importorskip("distributed")

    def LocalCUDACluster(n_workers=None, threads_per_worker=1, **kwargs):
        made.append(dict(kwargs, n_workers=n_workers, threads_per_worker=threads_per_worker))
        kwargs = {k: v for k, v in kwargs.items() if not k.startswith("rmm_")}
        return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                        processes=False, **kwargs)

    mod = types.ModuleType("dask_cuda")
    mod.__version__ = "fake"
    mod.LocalCUDACluster = LocalCUDACluster
    monkeypatch.setitem(sys.modules, "dask_cuda", mod)


def _dask_report(tmp_path, argv):
    mod = _gpu_check
    out = tmp_path / "gpu-dask.md"
    mod.main(["--dask-gpus", "--out", str(out)] + argv)
    return json.loads((tmp_path / "gpu-dask.json").read_text()), out.read_text()


@needs_no_real_cupy
def test_dask_gpus_skips_without_dask_cuda(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask_cuda", None)   # import dask_cuda fails
    with HostGPU(devices=4):
        data, text = _dask_report(tmp_path, [])
    assert data["dask_gpus"]["status"].startswith("skipped: dask-cuda does not import")
    assert data["errors"] == [] and "dask-cuda does not import" in text


@needs_no_real_cupy
def test_dask_gpus_skips_with_one_gpu(tmp_path, monkeypatch):
    made = []
    fake_dask_cuda(monkeypatch, made)
    with HostGPU(devices=1):
        data, _ = _dask_report(tmp_path, [])
    assert data["dask_gpus"]["status"] == "skipped: needs at least 2 GPUs, 1 visible"
    assert made == [] and data["errors"] == []


@needs_no_real_cupy
def test_dask_gpus_dry_run(tmp_path, monkeypatch):
    """Every row of the step on two stand-in GPUs (worker threads of this process)."""
    made = []
    fake_dask_cuda(monkeypatch, made)
    with HostGPU(devices=2) as engine:
        data, text = _dask_report(tmp_path, ["--dask-n", "64", "--dask-chunk", "32",
                                             "--dask-rmm-pool", "0.5"])
    assert made == [{"n_workers": 2, "threads_per_worker": 1, "dashboard_address": None,
                     "silence_logs": 40, "rmm_pool_size": "0.5",
                     "rmm_allocator_external_lib_list": ["cupy"]}]
    step = data["dask_gpus"]
    assert step["status"] == "ran" and step["bit_identical_block"] is True
    assert len(step["workers"]) == 2
    rows = {(r["op"], r["impl"]): r for r in step["rows"]}
    assert {op for op, _ in rows} == {"matmul", "LU solve", "Cholesky solve"}
    for op in ("matmul", "LU solve", "Cholesky solve"):
        ours = rows[op, "ozlinalg"]
        assert "note" not in ours, ours
        assert ours["chunk type"] == "cupy.ndarray"
        assert all(v > 0 for v in ours["launches per worker"].values())
        assert ours["accuracy"] < (1e-13 if op == "matmul" else 1e-15)
        assert ours["scaling"] > 0 and ours["workers holding result"] >= 1
        one = rows[op, "ozlinalg, 1 GPU, no dask"]
        assert "note" not in one and one["accuracy"] < 1e-13
    # dask's own graphs on CuPy chunks: the matmul runs; what fails is reported, not fatal
    assert "note" not in rows["matmul", "dask native"]
    assert engine.launches > 0
    assert "Dask on several GPUs" in text and "| matmul | ozlinalg | 2 | 64 / 32 |" in text
