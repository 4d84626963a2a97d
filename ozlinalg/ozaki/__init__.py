"""The emulated DGEMM: parameters, splits, slice-count choice and driver.

This layer knows nothing of the options in force: its functions take an options
value. :func:`ozlinalg.matmul` (:mod:`ozlinalg._matmul`), which reads them, is
above it; ``ozlinalg.ozaki.matmul`` names it for compatibility.
"""
from .auto import choose_slices
from .params import DEFAULT_METHOD, METHODS, Method, fp_slice_width, group_limit, slice_width

__all__ = ["matmul", "choose_slices", "METHODS", "Method", "DEFAULT_METHOD",
           "slice_width", "group_limit", "fp_slice_width"]


def __getattr__(name):
    # the one upward import of this layer (pyproject.toml, [tool.importlinter]): a
    # name of the old layout, resolved at first use so that the layer loads alone
    if name == "matmul":
        from .._matmul import matmul

        return matmul
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
