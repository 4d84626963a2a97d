"""Exact low-precision matrix-product engines (see :mod:`.base`)."""
from .base import Engine, get_engine, register_engine
from . import cpu  # noqa: F401  (registers the NumPy engine)

__all__ = ["Engine", "get_engine", "register_engine"]
