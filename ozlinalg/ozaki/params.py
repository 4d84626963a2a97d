"""Parameters of the Ozaki scheme: slice width, group size, method table.

Formulas (docs/ozaki.md, "Parameters"; n = inner dimension of the product):

* INT8 slice width  ``beta = min(7, floor((31 - log2 n) / 2))``: n products of
  magnitude 2**(2*beta) never overflow an INT32 accumulator.
* Group size for error-free accumulation
  ``r = max(1, 2**(31 - 2*beta - ceil(log2 n)))``: at most r INT8 products of a
  group are summed in one INT32 accumulator.
* SplitFP slice width ``alpha = floor((-log2 u_acc - log2 n) / 2)`` with FP32
  accumulation (``u_acc = 2**-24``), at most 12 (the FP16 significand).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

__all__ = [
    "Method",
    "METHODS",
    "DEFAULT_METHOD",
    "INT8_INNER_BLOCK",
    "FP16_INNER_BLOCK",
    "slice_width",
    "group_limit",
    "fp_slice_width",
    "validate_method",
    "validate_slices",
    "pairs_by_group",
    "count_from_moduli",
]

#: Inner-dimension block of the INT8 methods: ``slice_width`` stays 7 up to
#: 2**17 (n * 127**2 < 2**31); longer inner dimensions are cut into blocks whose
#: FP64 results are summed.
INT8_INNER_BLOCK = 1 << 17

#: Inner-dimension block of SplitFP: keeps ``fp_slice_width`` at 7 bits.
FP16_INNER_BLOCK = 1024


def slice_width(n: int) -> int:
    """``beta = min(7, floor((31 - log2 n) / 2))`` for an INT8 product of inner length n."""
    n = max(int(n), 1)
    if n <= _FULL_WIDTH_UP_TO:  # every small product: no logarithm to take
        return 7
    return int(min(7, math.floor((31 - math.log2(n)) / 2)))


#: The longest inner dimension with the full 7-bit width: 2 * 7 + log2 n <= 31.
_FULL_WIDTH_UP_TO = 1 << 17


def group_limit(n: int, beta: int) -> int:
    """``r = max(1, 2**(31 - 2 beta - ceil(log2 n)))``: products per INT32 accumulator."""
    n = max(int(n), 1)
    return int(max(1, 2 ** (31 - 2 * beta - math.ceil(math.log2(n)))))


def fp_slice_width(n: int, acc_bits: int = 24) -> int:
    """``alpha = floor((-log2 u_acc - log2 n) / 2)`` (FP32: -log2 u_acc = 24), capped at 12."""
    n = max(int(n), 1)
    return int(max(1, min(12, math.floor((acc_bits - math.log2(n)) / 2))))


@dataclass(frozen=True)
class Method:
    """One emulated-GEMM variant.

    Attributes
    ----------
    name : str
        Canonical name.
    split : {"bitmask", "rn", "hybrid", "fp", "crt", "crt-fast"}
        How slices are cut (see :mod:`ozlinalg.ozaki.split`); the ``crt``
        kinds are Ozaki scheme II (residues, :mod:`ozlinalg.ozaki.crt`), where
        "slices" counts moduli.
    groupwise : bool
        True: error-free group-wise INT32 accumulation (EF), one FP64 pass per
        group of equal ``i + j``; False: one FP64 pass per product.
    engine : {"int8", "float"}
        Exact INT8 engine, or the FP16-input / FP32-accumulate float engine.
    aliases : tuple of str
        Other accepted names (the peers' names).
    summary : str
        One line for tables and ``--help``.
    """

    name: str
    split: str
    groupwise: bool
    engine: str
    aliases: tuple
    summary: str


METHODS = {
    m.name: m
    for m in (
        Method("bitmask", "bitmask", False, "int8", ("ozimmu",),
               "bitmask (truncating) split, FP64 accumulation per product (ozIMMU)"),
        Method("rn", "rn", False, "int8", ("ozimmu_rn",),
               "round-to-nearest split, per-slice scales, FP64 accumulation per product"),
        Method("bitmask-ef", "bitmask", True, "int8", ("ozimmu_ef",),
               "bitmask split, group-wise error-free INT32 accumulation (ozIMMU_EF)"),
        Method("hybrid-ef", "hybrid", True, "int8", ("ozimmu_h", "hybrid"),
               "hybrid round-to-nearest split with fixed scales + EF accumulation (ozIMMU_H)"),
        Method("splitfp", "fp", False, "float", ("ootomo", "fp16"),
               "SplitFP floating slices on an FP16 engine with FP32 accumulation (Ootomo)"),
        Method("crt", "crt", False, "int8", ("ozaki2", "gemmul8", "ozaki-ii"),
               "Ozaki scheme II: CRT over INT8 moduli, accurate scaling (one bound GEMM)"),
        Method("crt-fast", "crt-fast", False, "int8", ("gemmul8-fast", "ozaki2-fast"),
               "Ozaki scheme II with fast (Cauchy-Schwarz) scaling"),
    )
}

DEFAULT_METHOD = "hybrid-ef"

_ALIASES = {alias: m.name for m in METHODS.values() for alias in (m.name,) + m.aliases}


def validate_method(method) -> str:
    """Canonical method name for ``method`` (a name or alias), or ValueError."""
    if isinstance(method, Method):
        return method.name
    if not isinstance(method, str):
        raise TypeError(f"ozlinalg: method must be a string, "
                        f"got {method!r} ({type(method).__name__})")
    key = method.strip().lower().replace("_", "-")
    for cand in (key, key.replace("-", "_")):
        if cand in _ALIASES:
            return _ALIASES[cand]
    raise ValueError(
        f"ozlinalg: unknown method {method!r}; choose one of "
        + ", ".join(sorted(METHODS)) + " (aliases: "
        + ", ".join(sorted(a for a in _ALIASES if a not in METHODS)) + ")"
    )


def validate_slices(slices) -> None:
    """Raise if ``slices`` is neither ``"auto"`` nor an integer in [1, 64]."""
    if isinstance(slices, str):
        if slices != "auto":
            raise ValueError(f"ozlinalg: slices must be 'auto' or an integer, got {slices!r}")
        return
    try:
        if isinstance(slices, bool):
            raise TypeError
        s = operator.index(slices)
    except TypeError:
        raise TypeError(
            f"ozlinalg: slices must be 'auto' or an integer, "
            f"got {slices!r} ({type(slices).__name__})"
        ) from None
    if not 1 <= s <= 64:
        raise ValueError(f"ozlinalg: slices must be between 1 and 64, got {s}")


def pairs_by_group(s: int):
    """Slice pairs of the triangular product, grouped by ``g = i + j`` (0-based).

    Only pairs with ``i + j <= s - 1`` (the papers' ``i + j <= s + 1`` counted
    from one) are formed: ``s (s + 1) / 2`` products. Groups are returned from
    the smallest terms (largest g) to the largest, the order in which the FP64
    accumulation adds them.
    """
    return [[(i, g - i) for i in range(g + 1)] for g in range(s - 1, -1, -1)]


def count_from_moduli(method, slices, moduli, fname="ozlinalg.matmul"):
    """The count of a product given as ``moduli=`` (the crt methods' name for it):
    ``slices`` unchanged when ``moduli`` is None; ``moduli`` for a crt method when
    ``slices`` is None; ValueError otherwise (another method, or both given)."""
    if moduli is None:
        return slices
    meth = METHODS[validate_method(method)]
    if meth.split not in ("crt", "crt-fast"):
        raise ValueError(f"{fname}: moduli= is the count of the crt methods; method "
                         f"{meth.name!r} counts slices (use slices=)")
    if slices is not None:
        raise ValueError(f"{fname}: give moduli= or slices=, not both (for the crt methods "
                         "they are the same count)")
    return moduli
