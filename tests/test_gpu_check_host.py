"""benchmarks/gpu_check.py end to end on the host stand-ins (a dry run, every CI run).

The GPU session has minutes of device time; a crash in the report code would
waste them. Here ``cupy`` is :func:`host_cuda.host_cupy_for_scripts` and its
engine the GPU engine on the emulated cuBLASLt, so every part of the script
(environment, smoke check, raw INT8 rate, the table, the targets) runs and
writes its report. The figures are meaningless, the code paths are not.
"""
import importlib.util
import json
import os
import sys

import pytest
from host_cuda import host_cupy_for_scripts
from test_engine_cublaslt import HostEngine

from ozlinalg.engines import base as engine_registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def gpu_check(monkeypatch):
    cp = host_cupy_for_scripts()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    eng = HostEngine(fused_split=False)
    eng.xp = cp
    monkeypatch.setitem(engine_registry._ENGINES, "hostcupy", eng)
    monkeypatch.delenv("CUBLAS_EMULATION_STRATEGY", raising=False)
    spec = importlib.util.spec_from_file_location(
        "gpu_check_dry", os.path.join(ROOT, "benchmarks", "gpu_check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, eng


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
    assert all(v["exact"] for v in data["smoke"].values())
    assert data["int8_tops"]["64"] > 0
    methods = [r["method"] for r in data["rows"]]
    assert methods[0].startswith("native") and set(mod.METHODS) <= set(methods)
    for row in data["rows"]:
        assert "note" not in row, row  # nothing FAILED
        assert row["max_err"] < 1e-12
    ours = [r for r in data["rows"] if r["method"] in mod.METHODS]
    assert all(0 <= r["non_gemm"] <= 1 and r["int8_eff"] > 0 for r in ours)
    # Errors may only be the expected absence of nvmath (cuBLAS emulation unavailable).
    assert data["errors"] == []
    assert eng.lt.calls > 0  # the smoke check and the raw rate ran on the GPU engine
    assert "| 8192 | hybrid-ef | tflops | >= 30.0 | not measured |" in text
    assert "## Engine fallbacks" in text
