"""The AVX2 engine: exact INT8 products on ``vpmaddwd`` for CPUs without VNNI.

Below AVX-512 VNNI / AVX-VNNI, oneDNN computes its s8s8s32 GEMM with ``vpmaddubsw``,
which adds pairs of u8 x s8 products into INT16 with saturation: not exact at
-128 / 127, so its self-test rejects it (:mod:`ozlinalg.engines.onednn`). This
engine's GEMM (``_csrc/k_gemm16.c``, compiled into the x86-64-v3 and v4 builds of the
kernels, :func:`ozlinalg.engines.kernels.load_gemm`) widens the int8 slices to int16
while packing them and multiplies with ``vpmaddwd`` (``_mm256_madd_epi16``: int16 x
int16 pairs summed into an int32 lane, ``|a b + c d| <= 2 * 128**2``, exact), adding
the lanes with ``vpaddd``: INT32 accumulation over the whole inner dimension, cache-
and register-blocked (6 x 16 int32 tile), on the OpenMP threads of the compiled passes.

Everything else is the oneDNN engine's (:class:`~ozlinalg.engines.onednn.engine.Int8Engine`):
int8 slice storage, EF groups as one GEMM over the stacked slices, the INT32 run
limit with the int64 spill, the fused passes, and the same one-time exactness
self-test (extremes at k = 2**17 - 1024). The magnitude estimates of ``auto`` are
the SGEMM engine's FP32 GEMM of the squares (oneDNN's BF16 GEMM is not assumed).
Exact products and the same passes give the same bits as every other engine.

Raises :class:`~ozlinalg.engines.onednn.EngineUnavailable` where the compiled GEMM
is missing (no build, no AVX2, ``OZLINALG_KERNELS_ISA=x86-64``) or fails the
self-test. Selection: :mod:`ozlinalg.engines.select` (``OZLINALG_ENGINE=avx2``,
``ozlinalg.options(engine="avx2")``).
"""
from __future__ import annotations

from . import kernels
from .onednn import EngineUnavailable
from .onednn.engine import Int8Engine

__all__ = ["AVX2Engine"]

#: GEMMs of fewer INT8 operations run on one thread: the oneDNN engine's threshold
#: (``onednn._common.GEMM_PARALLEL_MIN``, 2**30) is a few milliseconds of its VNNI
#: GEMM; ``vpmaddwd`` multiplies about 4x slower per core, so the same time is 2**28
#: operations here. At 2**30 the 256 x 256 x 2048 tiles of a product under a 64 MiB
#: memory limit (2.7e8 operations, 5 ms each on one Zen 2 core) ran on one thread.
GEMM_PARALLEL_MIN = 1 << 28


class AVX2Engine(Int8Engine):
    """Exact INT8 GEMMs on AVX2 ``vpmaddwd`` (module docstring) for NumPy arrays.

    ``fused=False``: the passes as NumPy code (the GEMM stays compiled). ``gemm``: a
    ``(module, reason)`` of :func:`~ozlinalg.engines.kernels.load_gemm` (tests).
    """

    name = "cpu-avx2"
    label = "AVX2"
    #: The instruction the products run on (the engine line, the tuning key).
    isa = "avx2 (vpmaddwd)"
    #: Never: one core issues one ``vpmaddwd`` a cycle on the Zen 2 machine this was
    #: measured on, the INT8 GEMM runs at 2.3x DGEMM's rate, and a DGEMM-level product
    #: needs 16 (crt) to 45 INT8 GEMMs: 7.6-21x native DGEMM's time at n = 2048
    #: (docs/performance.md, "The AVX2 engine").
    crossovers: dict = {}
    #: Why ``"auto"`` chose this engine (the oneDNN verdict), set by
    #: :func:`ozlinalg.engines.select.cpu_engine`; None otherwise.
    selection_reason = selection_verdict = None

    def __init__(self, threads: int | None = None, fused: bool | None = None, gemm=None):
        self._setup(threads, fused)
        mod, reason = gemm if gemm is not None else kernels.load_gemm()
        if mod is None:
            raise EngineUnavailable(f"no compiled AVX2 INT8 GEMM: {reason}")
        self.gemm_kernels, self.gemm_reason = mod, reason
        ok, detail = self._run_self_test()
        self.self_test = detail
        if not ok:
            raise EngineUnavailable(
                f"the AVX2 INT8 GEMM ({reason}) failed the INT8 exactness self-test: {detail}")

    # -- what ran ---------------------------------------------------------------------

    def int8_peak_ratio(self):
        """An upper bound of the INT8 rate over DGEMM's: ``vpmaddwd`` does 16 products
        per instruction against an FP64 FMA's 4, so 4x on a core that issues two of
        each per cycle; 2x where it issues one ``vpmaddwd`` per cycle against two FMAs
        (measured on Zen 2, docs/performance.md "The AVX2 engine")."""
        return 4.0

    def tuning_facts(self):
        """The tuning cache's key here: the SGEMM engine's, the instruction and the
        builds of the GEMM and of the passes."""
        return {**super().tuning_facts(), "isa": self.isa, "gemm": self.gemm_kernels.isa,
                "kernels": self.kernels.isa if self.kernels is not None else None,
                "libraries": {}}

    def describe(self):
        why = self.selection_reason
        return (f"{self.name} (exact INT8 GEMM on AVX2 vpmaddwd, {self.gemm_reason}, "
                f"int8 self-test passed, passes: {self._passes_text()}"
                f"{'; ' + why if why else ''})")

    # -- the GEMM ---------------------------------------------------------------------

    def _run_gemm(self, la, i, lb, j, k0, k1, out, colmajor, beta):
        self._compiled_gemm(self.gemm_kernels, "gemm16", GEMM_PARALLEL_MIN, la, i, lb, j, k0,
                            k1, out, colmajor, beta)
