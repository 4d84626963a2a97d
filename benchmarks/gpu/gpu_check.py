#!/usr/bin/env python3
"""The GPU check (docs/gpu.md): the command; the code is :mod:`ozlinalg.tools.gpu_check`.

    python3 benchmarks/gpu/gpu_check.py --owed --out-dir $OUT    # ~6 min on one H200
    python3 benchmarks/gpu/gpu_check.py --dask-gpus --out $OUT/gpu-dask.md
    python3 benchmarks/gpu/gpu_check.py --help                   # every part and option
"""
import os
import sys

# This checkout's ozlinalg, also without PYTHONPATH (the device machine runs it in place).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from ozlinalg.tools.gpu_check import main  # noqa: E402

if __name__ == "__main__":
    main()
