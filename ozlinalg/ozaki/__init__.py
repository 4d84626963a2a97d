"""The emulated DGEMM: parameters, splits, slice-count choice and driver."""
from .auto import choose_slices
from .gemm import matmul
from .params import DEFAULT_METHOD, METHODS, Method, fp_slice_width, group_limit, slice_width

__all__ = ["matmul", "choose_slices", "METHODS", "Method", "DEFAULT_METHOD",
           "slice_width", "group_limit", "fp_slice_width"]
