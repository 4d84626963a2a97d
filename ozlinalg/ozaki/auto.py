"""``slices="auto"``: the smallest slice count that reaches DGEMM-level accuracy.

Why the exponent spread decides it
-----------------------------------
After normalizing row i of A by its power-of-two maximum (``max |x_i| in
[0.5, 1)``), s slices of w bits leave a residual below ``2**(-w s)`` in every
entry, and the products skipped by the triangular rule (``i + j > s + 1``) are
each bounded by the same quantity times the row maximum of the other operand.
So the emulation's error in ``C_ij`` is at most about

    (s + 1) * 2**(-w s) * 2**(e_i + f_j) * k          (worst case)

where ``2**e_i`` and ``2**f_j`` are the power-of-two maxima of row i of A and
column j of B. Native DGEMM's error scales with ``u * sum_k |a_ik| |b_kj|``
(u = 2**-53). For a row and a column whose magnitudes are not correlated,
``sum_k |a_ik||b_kj| ~ ||a_i||_1 ||b_j||_1 / k``, so the ratio of the two
bounds is governed by the *spreads*

    spread_A(i) = k * 2**e_i / ||a_i||_1,    spread_B(j) = k * 2**f_j / ||b_j||_1

(1 for a row of equal magnitudes, large when a few entries dominate). The
count chosen is the smallest s with

    w s - log2(s + 1) >= 53 + log2 max_i spread_A(i) + log2 max_j spread_B(j) + c_method

where ``c_method`` is a constant per method, calibrated once with
``benchmarks/accuracy.py`` against an exact reference (the rounding-to-nearest
splits keep about half a bit more per slice than truncation).

What it guarantees
------------------
With that s, every entry satisfies

    |C_ij - fl(C)_ij| <= 2**-c' * u * ||a_i||_1 ||b_j||_1 / k  (+ u |C_ij| from the final rounding)

i.e. an error of the same form as DGEMM's own bound ``u sum_k |a_ik||b_kj|``
with the average term in place of the exact sum. For inputs whose rows of A
and columns of B are not magnitude-correlated (the papers' test matrices, and
most dense data) the measured max relative error is at or below native
DGEMM's (see docs/accuracy.md). For structured inputs where a row's large
entries meet a column's small ones (e.g. an identity times a matrix whose
columns span many binades) the normwise bound holds but the componentwise
relative error can exceed native's; pass a larger explicit ``slices`` there.
The cost of the decision is one pass over A and B (row sums of |x| computed
during normalization); no extra GEMM.
"""
from __future__ import annotations

import math
import warnings

from .._exceptions import AccuracyWarning

__all__ = ["choose_slices", "SAFETY_BITS", "spread_bits"]

#: Extra bits per method on top of the bound above (calibrated; see module doc).
SAFETY_BITS = {
    "bitmask": 0.0,
    "rn": 0.0,
    "hybrid": 0.0,
    "fp": 0.0,
}

FP64_BITS = 53


def spread_bits(xp, rowsum, k):
    """``log2 max_i (k / ||x_i||_1)`` over the non-zero normalized rows (0 if none)."""
    nz = rowsum > 0
    if not bool(nz.any()):
        return 0.0
    smallest = float(rowsum[nz].min())
    return max(0.0, math.log2(k / smallest))


def choose_slices(split, width, k, bits_a, bits_b, max_slices):
    """Smallest slice count meeting the DGEMM-level criterion of the module doc."""
    need = FP64_BITS + bits_a + bits_b + SAFETY_BITS[split]
    for s in range(1, max_slices + 1):
        if width * s - math.log2(s + 1) >= need:
            return s
    warnings.warn(
        f"ozlinalg: slices='auto' needs more than max_slices={max_slices} slices of "
        f"{width} bits for this input (exponent spread {bits_a:.1f} + {bits_b:.1f} bits); "
        f"using {max_slices}, so the result may be less accurate than FP64",
        AccuracyWarning,
        stacklevel=4,
    )
    return max_slices
