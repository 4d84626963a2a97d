"""Blocked LAPACK-style factorizations whose BLAS-3 work runs on the emulated GEMM.

Each routine is written once against the array namespace (NumPy or CuPy):
narrow panels and small diagonal blocks run natively in FP64 (LAPACK through
:mod:`scipy.linalg.lapack` on the host, cuSOLVER/cuBLAS through CuPy on a
GPU), and the trailing updates, triangular-solve couplings and block
reflector applications go through :func:`ozlinalg.matmul`, so that at
n = 2048 with the default block size more than 90% of the flops are
emulated (see docs/factorizations.md). Results use LAPACK's storage formats,
so a :mod:`scipy.linalg`-compatible layer can be built on top.

=========  ==============================================================
getrf      LU with partial pivoting (``scipy.linalg.lu_factor`` format)
getrs      solve from ``getrf``'s factors
potrf      Cholesky, lower or upper
potrs      solve from ``potrf``'s factor
geqrf      Householder QR, LAPACK compact form ``(qr, tau)``
orgqr      form Q from ``(qr, tau)``
ormqr      apply Q or Q^T (Q^H) from ``(qr, tau)``
trsm       triangular solve with many right-hand sides
=========  ==============================================================

The helpers that blocked graphs built elsewhere (:mod:`ozlinalg.dask`) reuse
are public too: ``larft`` and ``unit_lower`` (compact-WY block reflectors),
``Runner`` (runs a blocked algorithm's GEMMs), ``conj_t``,
``first_zero_diagonal``, ``swaps_to_rows``, ``trans_code`` and ``work_dtype`` (the
computing dtype: complex128 for complex input, else float64).

Every routine takes ``block_size`` (panel width, default
:data:`DEFAULT_BLOCK_SIZE`), ``slices`` and ``method`` (passed to
:func:`ozlinalg.matmul`) and ``min_size`` (below this order the whole call is
native LAPACK, default :data:`DEFAULT_MIN_SIZE`; ``min_size=0`` emulates at
every size; the name of ``ozlinalg.options(min_size=...)``). Its former name
``crossover=`` is still accepted, with a ``DeprecationWarning``: "crossover" now
means only an engine's measured order from which emulation is faster
(:meth:`ozlinalg.engines.Engine.crossover`, the backend's "performant" strategy).

Real input is computed in float64, complex input (complex64 / complex128) in
complex128: ``z`` LAPACK panels, conjugate transposes where the algorithm
needs them (``L L^H``, ``I - V T V^H``, ``trans=2``), and complex products
built from real emulated ones (:mod:`ozlinalg.ozaki.complex`).
"""
from ._common import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MIN_SIZE,
    Runner,
    conj_t,
    first_zero_diagonal,
    swaps_to_rows,
    trans_code,
    work_dtype,
)
from .geqrf import geqrf, larft, orgqr, ormqr, unit_lower
from .getrf import getrf, getrs
from .potrf import potrf, potrs
from .trsm import trsm

__all__ = [
    "getrf",
    "getrs",
    "potrf",
    "potrs",
    "geqrf",
    "orgqr",
    "ormqr",
    "trsm",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MIN_SIZE",
    # helpers of blocked graphs built elsewhere (ozlinalg.dask), and the computing
    # dtype that ozlinalg.linalg and ozlinalg.dask share
    "work_dtype",
    "larft",
    "unit_lower",
    "Runner",
    "conj_t",
    "first_zero_diagonal",
    "swaps_to_rows",
    "trans_code",
]
