"""CPU engine: exact INT8 products on the CPU's INT8 units through oneDNN.

``dnnl_gemm_s8s8s32`` (oneDNN's row-major BLAS-like INT8 GEMM) runs on AVX-512
VNNI / AVX-VNNI (``vpdpbusd``) or AMX-INT8 tiles where the CPU has them: 16-20x
native DGEMM's rate on the machines this project measured (docs/performance.md).
It is exact there. Where oneDNN's ISA is AMX the engine multiplies on a compiled
AMX GEMM of its own instead (``_csrc/k_gemm_amx.c``,
:func:`ozlinalg.engines.kernels.load_amx`: 1.5x oneDNN's on one core of the AMX
Xeon measured), under the same self-test. Below VNNI, oneDNN emulates it with
``vpmaddubsw``, which saturates to INT16 and is NOT exact for values near -128 /
127; so the engine never assumes: a one-time self-test at the extreme values
(:func:`.selftest.self_test`) decides, and the engine is only used where it passes
(:func:`ozlinalg.engines.select`). Running out of memory during that test is
not a verdict: the creation raises MemoryError, nothing is cached, and the next
call tests again.

Storage
-------
Slices are int8 (``slice_bytes = 1``: a quarter of the SGEMM engine's float32
slices). The slices of a product's operand live in a ``(rows, s, k)`` array,
slice index in the middle and B's slices in reverse order (the layout the GPU
engine uses), so the slices ``A_i, A_{i+1}, ...`` of one row lie side by side
along the inner dimension, as do ``B_{g-i}, B_{g-i-1}, ...``: the EF group
``sum_i A_i B_{g-i}^T`` is ONE GEMM with inner length ``count * k`` and leading
dimension ``s * k`` (docs/performance.md, "What it does"), as long as ``count * k * bound**2``
stays below 2**31; longer runs are several GEMMs accumulated in INT32 with
``beta = 1``, and a run that would pass 2**31 is added to an int64 buffer
(never needed with the driver's group limit ``r``; it keeps the engine exact
for any caller). SplitFP's floating slices stay on SGEMM (``float_matmul``).
Ozaki II's residues pair one modulus at a time: B's are kept in order, and the
INT8 residues of the finished products reuse B's dead slots (:class:`.crt._FusedCRT`).

The passes around the GEMMs are fused compiled kernels
(:mod:`ozlinalg.engines.kernels`, built at install time) where they are built, and
the generic array code otherwise; both give the same bits.

Files
-----
The class :class:`OneDNNEngine` (:mod:`.engine`: creation, storage, the INT8
GEMMs) is assembled from one mixin per pass family, each beside the compiled
kernels it calls and the generic code whose bits it must give:

==================  ==========================  ====================================================
module              kernels (``_csrc/``)        generic code (same bits)
==================  ==========================  ====================================================
:mod:`.normalize`   ``k_normalize.c``           ``ozaki/split.py``, ``ozaki/balance.py``
:mod:`.split`       ``k_split.c``               ``ozaki/split.py``
:mod:`.estimate`    ``k_estimate.c``            ``ozaki/counts/``
:mod:`.crt`         ``k_crt*.c``                ``ozaki/crt/``
:mod:`.accumulate`  ``k_accumulate.c``          ``ozaki/gemm.py``, ``ozaki/scaling.py``
:mod:`.faithful`    ``k_faithful.c``            ``ozaki/faithful.py``, ``ozaki/counts/estimate.py``
==================  ==========================  ====================================================

The one-call path of small products (``k_small.c``, generic code ``ozaki/small.py``)
is the SGEMM engine's :meth:`~ozlinalg.engines.sgemm.SGEMMEngine.small_product`,
inherited: its integer products do not use the large GEMM, so every CPU engine has it.

The one-time exactness self-test is :mod:`.selftest`.
"""
from ._common import EngineUnavailable
from .engine import ENV_FUSED, INT32_EXACT, OneDNNEngine  # noqa: F401  (ENV_FUSED: public here)
from .selftest import self_test

__all__ = ["EngineUnavailable", "OneDNNEngine", "INT32_EXACT", "self_test"]
