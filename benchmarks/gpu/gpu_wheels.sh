#!/usr/bin/env bash
# Wheels the owed GPU run carries (docs/gpu.md): the GPU image (Python 3.12, CuPy 14.2,
# cuda-bindings, cuda-core, cuda-pathfinder, nvidia-cublas) lacks nvmath-python and
# python-flint. cuda-core / cuda-pathfinder go to .whl/extra/, installed there only if
# nvmath-python does not import with the image's own (it needs cuda-core>=0.5,<2 and
# cuda-pathfinder>=1.5.1,<2). Run in the repository root on a machine with PyPI;
# .whl/ is ignored by git and travels with `carry: [".whl"]` (about 22 MB).
# DASK=1 also fetches what the multi-GPU Dask step needs (gpu_check.py --dask-gpus):
# dask-cuda and its closure into .whl/dask/, less what the image has (numpy,
# cuda-core, cuda-pathfinder) and the dashboard's plotting stack (about 22 MB more).
set -euo pipefail
PY=${PY:-3.12}
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" \
        --implementation cp "${plat[@]}" -d "$@"; }
rm -rf .whl && mkdir -p .whl/extra
get .whl nvmath-python==1.0.0 python-flint
get .whl/extra "cuda-core>=0.5,<2" "cuda-pathfinder>=1.5.1,<2"
if [ "${DASK:-0}" = 1 ]; then
  python3 -m pip download -q --only-binary=:all: --python-version "$PY" --implementation cp \
    "${plat[@]}" -d .whl/dask dask-cuda
  rm -f .whl/dask/{numpy,cuda_core,cuda_pathfinder,bokeh,pillow,contourpy,narwhals,xyzservices}-*.whl
fi
ls -l .whl .whl/extra
