"""Exact low-precision matrix-product engines (see :mod:`.base`).

NumPy arrays: the oneDNN INT8 engine where it loads and passes its exactness
self-test, else the AVX2 engine (exact INT8 GEMM on ``vpmaddwd``) where the CPU has
AVX2, else the SGEMM engine (:mod:`.select`); CuPy arrays: cuBLASLt.
"""
from . import (
    cublaslt,  # noqa: F401  (registers the CuPy engine; imports CuPy lazily)
    select,  # noqa: F401  (registers the NumPy engines)
)
from ._process import native_threads
from ._scratch import free_scratch, release_after_oom, set_memory_limit_source
from .base import Engine, get_engine, on_register, register_engine

# the layers above use these (native_threads: the BLAS calls of the exact dot products;
# release_after_oom: a product's MemoryError; set_memory_limit_source: the one hook by
# which the options layer caps the scratch pools; on_register: caches of engine facts)
__all__ = ["Engine", "free_scratch", "get_engine", "native_threads", "on_register",
           "register_engine", "release_after_oom", "set_memory_limit_source"]
