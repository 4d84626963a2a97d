"""Exact low-precision matrix-product engines (see :mod:`.base`)."""
from . import cpu  # noqa: F401  (registers the NumPy engine)
from .base import Engine, get_engine, register_engine

__all__ = ["Engine", "get_engine", "register_engine"]
