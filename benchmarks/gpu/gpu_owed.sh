#!/usr/bin/env bash
# The owed GPU run, one command on the device machine (docs/gpu.md):
#   run(command="bash benchmarks/gpu/gpu_owed.sh", carry=[".whl"], timeout_s=600)
# Installs the carried wheels (benchmarks/gpu/gpu_wheels.sh made them), then runs
# benchmarks/gpu/gpu_check.py --owed: parts quick, 8192 (+ refined solves, eigh), 16384, each in its own
# process, none started past the 480 s deadline; reports gpu-<part>.md/.json and
# this log (gpu-owed.log) under $OUT, 7 files.
#   bash benchmarks/gpu/gpu_owed.sh --dask-gpus
# runs the multi-GPU Dask step instead (gpu_check.py --dask-gpus: gpu-dask.md/.json and
# gpu-dask-gpus.log; it skips, saying why, without dask-cuda or a second GPU); the wheels of
# .whl/dask/ (DASK=1 bash benchmarks/gpu/gpu_wheels.sh) are installed when carried.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
MODE=${1:-owed}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  echo "== $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
  python3 --version
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
    if ls .whl/dask/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/dask/*.whl
    fi
  else
    echo "no .whl/: nvmath-python and python-flint must already be installed"
    export PYTHONPATH=$PWD
  fi
  if ! python3 -c "from nvmath.bindings import cublasLt; print('cublasLt', cublasLt.get_version())"; then
    echo "nvmath-python does not import with the image's cuda-core/cuda-pathfinder: .whl/extra"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site-extra .whl/extra/*.whl && export PYTHONPATH=/tmp/site-extra:$PYTHONPATH
    python3 -c "from nvmath.bindings import cublasLt; print('cublasLt', cublasLt.get_version())"
  fi
  if [ "$MODE" = "--dask-gpus" ]; then
    nvidia-smi -L 2>&1
    python3 benchmarks/gpu/gpu_check.py --dask-gpus --out "$OUT/gpu-dask.md"
  else
    python3 benchmarks/gpu/gpu_check.py --owed --out-dir "$OUT" --deadline "${DEADLINE:-480}"
  fi
} 2>&1 | tee "$OUT/gpu-${MODE#--}.log"
