"""Exact low-precision matrix-product engines (see :mod:`.base`).

NumPy arrays: the oneDNN INT8 engine where it loads and passes its exactness
self-test, else the AVX2 engine (exact INT8 GEMM on ``vpmaddwd``) where the CPU has
AVX2, else the SGEMM engine (:mod:`.select`); CuPy arrays: cuBLASLt.
"""
from . import (
    cublaslt,  # noqa: F401  (registers the CuPy engine; imports CuPy lazily)
    select,  # noqa: F401  (registers the NumPy engines)
)
from ._scratch import free_scratch
from .base import Engine, get_engine, register_engine

__all__ = ["Engine", "free_scratch", "get_engine", "register_engine"]
