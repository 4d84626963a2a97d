"""Exact low-precision matrix-product engines (see :mod:`.base`)."""
from . import (
    cpu,  # noqa: F401  (registers the NumPy engine)
    cublaslt,  # noqa: F401  (registers the CuPy engine; imports CuPy lazily)
)
from .base import Engine, get_engine, register_engine

__all__ = ["Engine", "get_engine", "register_engine"]
