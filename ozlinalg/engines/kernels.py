"""The compiled passes of the CPU INT8 engine: which build runs here.

The fused passes around the INT8 GEMMs (normalization, splits, residues, FP64
accumulation, CRT rebuild, estimates, the faithful mode's certificates) are C
kernels (``ozlinalg/engines/_csrc``) compiled when ozlinalg is installed, once per
x86-64 ISA level: ``x86-64`` (any x86-64 CPU), ``x86-64-v3`` (AVX2, FMA) and
``x86-64-v4`` (AVX-512). :func:`load` picks the highest level the CPU and the OS
support; every level gives the same bits (the build never contracts into FMAs
nor uses fast-math, and tests/engines/test_engine_onednn.py compares each kernel with the
generic NumPy code). Where no build exists (another platform, no compiler at
install time) the engine runs the generic passes, with the same results.

Threads: each kernel runs on the OpenMP threads that ``set_threads(n)`` last set
in the calling thread (a parallel region only when ``n > 1``; the engine passes
one thread to small passes and in forked children, see
:mod:`ozlinalg.engines._process`). Calls from several Python threads run
concurrently, each on its own OpenMP team; the GIL is released during a call.

Environment:

* ``OZLINALG_FUSED=0`` (``no``, ``off``, ``false``): no compiled passes;
* ``OZLINALG_KERNELS_ISA=x86-64|x86-64-v3|x86-64-v4``: the highest level to load
  (tests of the lower builds on a newer CPU);
* ``OZLINALG_AMX=0``: the oneDNN engine multiplies on oneDNN's GEMM where the CPU has
  AMX, not on the compiled AMX GEMM (:func:`load_amx`).

The builds from x86-64-v3 on also hold the AVX2 engine's exact INT8 GEMM
(``gemm16``, :func:`load_gemm`; :mod:`ozlinalg.engines.avx2`), and the x86-64-v4 build
the oneDNN engine's exact INT8 GEMM on AMX tiles (``gemm_amx``, :func:`load_amx`),
which it runs where the CPU has AMX-INT8.

Any other value of either raises ValueError naming it (:mod:`ozlinalg._env`).
"""
from __future__ import annotations

import importlib

import numpy as np

from .._env import env_flag, env_text, invalid
from ._process import fork_safe_lock

__all__ = ["ENV_AMX", "ENV_FUSED", "ENV_ISA", "LEVELS", "check_environment", "load", "load_amx",
           "load_gemm"]

ENV_FUSED = "OZLINALG_FUSED"
ENV_ISA = "OZLINALG_KERNELS_ISA"
ENV_AMX = "OZLINALG_AMX"

#: ISA level -> build name (setup.py builds ``_kernels_<name with underscores>``).
LEVELS = {1: "x86-64", 3: "x86-64-v3", 4: "x86-64-v4"}

_LOCK = fork_safe_lock()
_LOADED: dict = {}


def _module(level):
    name = "_kernels_" + LEVELS[level].replace("-", "_")
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        return None


def _cap():
    """The highest level to load: ``OZLINALG_KERNELS_ISA`` (ValueError if invalid)."""
    env = env_text(ENV_ISA)
    if env is None:
        return max(LEVELS)
    for level, name in LEVELS.items():
        if env.lower() == name:
            return level
    raise invalid(ENV_ISA, env, "one of " + ", ".join(LEVELS.values()))


def check_environment():
    """Check ``OZLINALG_FUSED``, ``OZLINALG_KERNELS_ISA`` and ``OZLINALG_AMX`` without
    loading anything (ValueError naming the variable, as every ``OZLINALG_*`` variable:
    :mod:`ozlinalg._env`); returns ``(fused, cap)``."""
    env_flag(ENV_AMX, True)
    return env_flag(ENV_FUSED, True), _cap()


def _choose():
    fused, cap = check_environment()
    if not fused:
        return None, f"{ENV_FUSED}={env_text(ENV_FUSED)}"
    base = _module(1)
    if base is None:
        return None, ("compiled kernels not built (ozlinalg was installed without a C "
                      "compiler with OpenMP, or on a platform other than x86-64 Linux)")
    level = min(base.cpu_level(), cap)
    for lv in sorted(LEVELS, reverse=True):
        if lv <= level:
            mod = base if lv == 1 else _module(lv)
            if mod is not None:
                return mod, f"compiled, {mod.isa}"
    return base, f"compiled, {base.isa}"


def _choose_gemm():
    _, cap = check_environment()
    base = _module(1)
    if base is None:
        return None, ("compiled kernels not built (ozlinalg was installed without a C "
                      "compiler with OpenMP, or on a platform other than x86-64 Linux)")
    level = min(base.cpu_level(), cap)
    if level < 3:
        why = (f"{ENV_ISA}={env_text(ENV_ISA)}" if cap < 3 else
               "this CPU has no AVX2 (x86-64-v3)")
        return None, why
    info = np.zeros(3, np.int64)
    for lv in sorted(LEVELS, reverse=True):
        mod = _module(lv) if 3 <= lv <= level else None
        if mod is not None:
            mod.gemm16_info(info)
            if info[0]:
                return mod, f"compiled, {mod.isa}"
    return None, "the x86-64-v3 build of the compiled kernels is missing"


def load_gemm():
    """``(module or None, reason)``: the build whose exact INT8 GEMM (``gemm16``,
    ``_csrc/k_gemm16.c``, AVX2 ``vpmaddwd``) the AVX2 engine runs: the highest level
    from x86-64-v3 on that the CPU supports, capped by :data:`ENV_ISA` (decided once).
    :data:`ENV_FUSED` does not apply: it turns off the passes around the GEMMs, and
    this is the GEMM."""
    with _LOCK:
        if "gemm" not in _LOADED:
            _LOADED["gemm"] = _choose_gemm()
        return _LOADED["gemm"]


#: ``amx_info``'s verdicts (``_csrc/k_gemm_amx.c``).
_AMX_STATES = {1: "this CPU has no AMX-INT8", 2: "the OS has not enabled the AMX tile state",
               3: "Linux refused the AMX tile data permission (kernel before 5.16?)"}


def _choose_amx():
    _, cap = check_environment()
    if not env_flag(ENV_AMX, True):
        return None, f"{ENV_AMX}={env_text(ENV_AMX)}"
    base = _module(1)
    if base is None:
        return None, "compiled kernels not built"
    if cap < 4:
        return None, f"{ENV_ISA}={env_text(ENV_ISA)}"
    if base.cpu_level() < 4:
        return None, "this CPU has no AVX-512 (x86-64-v4)"
    mod = _module(4)
    if mod is None or not hasattr(mod, "amx_info"):
        return None, "the x86-64-v4 build of the compiled kernels is missing"
    info = np.zeros(2, np.int64)
    mod.amx_info(info)
    if not info[0]:
        return None, "the compiled kernels were built without AMX (a compiler before GCC 11)"
    if info[1]:
        return None, _AMX_STATES.get(int(info[1]), f"AMX unavailable ({int(info[1])})")
    return mod, f"compiled, {mod.isa}"


def load_amx():
    """``(module or None, reason)``: the build whose exact INT8 GEMM on AMX tiles
    (``gemm_amx``, ``_csrc/k_gemm_amx.c``) the oneDNN engine runs where the CPU has
    AMX-INT8: the x86-64-v4 build, where the CPU, the OS and :data:`ENV_ISA` allow it
    (decided once; asks Linux for the tile data the first time)."""
    with _LOCK:
        if "amx" not in _LOADED:
            _LOADED["amx"] = _choose_amx()
        return _LOADED["amx"]


def load():
    """``(module or None, reason)``: the compiled kernels this process uses (decided once).

    Raises ValueError for an invalid :data:`ENV_FUSED` / :data:`ENV_ISA` (read once,
    the first time).
    """
    with _LOCK:
        if "kernels" not in _LOADED:
            _LOADED["kernels"] = _choose()
        return _LOADED["kernels"]
