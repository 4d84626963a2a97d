"""The emulated DGEMM: parameters, splits, slice-count choice and driver.

This layer knows nothing of the options in force: its functions take the parts of
a call's plan (method, count, options value, balancing, engine) as arguments.
:func:`ozlinalg.matmul` (:mod:`ozlinalg._matmul`), which resolves the plan, is above
it.
"""
# the modules that register the generic passes (ozaki/passes.py), imported with the layer
from . import balance, faithful, scaling, split  # noqa: F401
from .counts import estimate, moduli  # noqa: F401
from .counts.slices import choose_slices
from .crt import reconstruct, shifts  # noqa: F401
from .params import DEFAULT_METHOD, METHODS, Method, fp_slice_width, group_limit, slice_width

__all__ = ["choose_slices", "METHODS", "Method", "DEFAULT_METHOD",
           "slice_width", "group_limit", "fp_slice_width"]

