"""Build of the compiled passes of the CPU INT8 engine (everything else is in pyproject.toml).

The kernels in ozlinalg/engines/_csrc are built once per x86-64 ISA level (baseline,
v3 = AVX2/FMA, v4 = AVX-512) with OpenMP; ozlinalg.engines.kernels loads the best one
the CPU runs. The extensions are optional: where they cannot be built (no C compiler or
OpenMP, another platform) the engine runs the same passes as NumPy code, with the same
bits. ``OZLINALG_BUILD_LEVELS`` (e.g. "1,4") limits the levels built.
"""
import os
import platform
import sys
from glob import glob

from setuptools import Extension, setup

LEVELS = {1: "x86-64", 3: "x86-64-v3", 4: "x86-64-v4"}
# IEEE semantics the bit-identity depends on: no contraction into FMAs, no fast-math.
# errno and trapping are not observed by the kernels, so dropping them changes no value.
FLAGS = ["-O3", "-std=gnu11", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-fopenmp", "-fvisibility=hidden"]


def kernel_extensions():
    if not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")):
        return []
    wanted = os.environ.get("OZLINALG_BUILD_LEVELS", "1,3,4")
    levels = sorted({int(x) for x in wanted.replace(" ", "").split(",") if x} | {1})
    src = sorted(glob("ozlinalg/engines/_csrc/*.c"))
    exts = []
    for level in levels:
        isa = LEVELS[level]
        name = "_kernels_" + isa.replace("-", "_")
        exts.append(Extension(
            f"ozlinalg.engines.{name}", src,
            depends=glob("ozlinalg/engines/_csrc/*.h") + glob("ozlinalg/engines/_csrc/*.def"),
            define_macros=[("OZK_MODNAME", name), ("OZK_ISA", f'"{isa}"')],
            extra_compile_args=FLAGS + [f"-march={isa}", "-mtune=generic"],
            extra_link_args=["-fopenmp"], optional=True))
    return exts


setup(ext_modules=kernel_extensions())
