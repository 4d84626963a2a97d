"""Slicing a matrix into low-precision pieces, one row scale at a time.

Every function here takes ``x``, rows of the input already normalized by an
exact power of two so that each non-zero row has ``max |x| in [0.5, 1)``
(:func:`normalize_rows`), cuts it into ``s`` slices written to ``out[t]`` (an
array of the engine's storage dtype holding small integers) and writes the
value of one unit of slice t of row i to ``scales[t, i]``. ``x`` is consumed
(overwritten with the residual). The code is written against the array
namespace ``xp`` so NumPy and CuPy run the same lines; the driver may call it
on row blocks (for cache locality and threads on the CPU).

Splits (docs/ozaki.md, "Methods"):

* bitmask (ozIMMU): truncate the aligned mantissa into beta-bit chunks;
  row scale fixed, ``|slice| <= 2**beta - 1``.
* rn (Uchino et al.): round to nearest with ``mu = 2**ceil(log2 max|r|) * 2**(1-beta)``
  from the current residual, ``sigma = 0.75 * 2**53 * mu``; scales change per slice.
* hybrid (Uchino et al.): ``mu''`` from the original row once, the shrink moved
  into ``sigma_s = 0.75 * 2**(53 - beta (s-1)) * mu''``; fixed scales, so
  group-wise accumulation is legal.
* fp (Ootomo et al., SplitFP): the rn recurrence with alpha bits, last slice the
  whole residual rounded to FP16.
"""
from __future__ import annotations

from ..exact import residual_grid
from .passes import generic, passes_for

__all__ = ["normalize_rows", "split_operand", "split_rows", "slice_layout", "SPLITS"]


def normalize_rows(xp, a, engine=None):
    """Scale each row of ``a`` by a power of two so that ``max |row| in [0.5, 1)``.

    Returns ``(x, exps)``: the normalized copy (float64, never aliasing ``a``)
    and the integer exponents with ``a = x * 2**exps[:, None]`` (0 for zero rows).
    Exact except for entries more than ~2**1000 below their row maximum, which
    underflow; they lie far below any slice. ``engine``: one whose fused
    ``normalize_rows`` (same values, one pass) runs where it applies
    (:mod:`.passes`).
    """
    return passes_for(engine, xp).normalize_rows(a)


@generic("normalize_rows")
def normalize_generic(xp, a):
    """:func:`normalize_rows` as array code (the engines' fused pass gives its bits)."""
    # max |a| per row without materializing |a| (one read, no temporary)
    rowmax = (xp.maximum(a.max(axis=1), -a.min(axis=1)) if a.shape[1]
              else xp.zeros(a.shape[0]))
    _, e = xp.frexp(rowmax)
    e = e.astype(xp.int32)
    # Two factors keep each power of two representable (rows of subnormals
    # need 2**1073); each multiplication is exact.
    e1 = xp.clip(-e, -1022, 1000)
    e2 = -e - e1
    x = a * xp.ldexp(xp.ones(e1.shape), e1)[:, None]
    if bool((e2 != 0).any()):
        x *= xp.ldexp(xp.ones(e2.shape), e2)[:, None]
    return x, e


@generic("slice_storage")
def empty_slices(engine, x, s, kind, operand=None):
    """Storage for ``s`` slices of the rows of ``x``, ``(s, rows, k)``: the generic form
    of an engine's ``empty_slices_like`` (which lays them out in ``x``'s memory order,
    no transposing pass for column-contiguous operands). ``operand`` ("a" / "b") lets
    the engine group the slices for its products."""
    return engine.empty_slices(s, x.shape[0], x.shape[1], kind, operand)


@generic("split_operand")
def split_operand(xp, engine, kind, x, s, width, operand):
    """Slices (s, rows, k) and their units (s, rows) of normalized rows ``x`` (consumed).

    ``operand`` ("a" or "b") lets the engine lay the slices out for its products
    (the GPU engine stores them so that a whole EF group is one GEMM); the engine's
    fused split, where it applies, gives the generic split's slices bit for bit
    (tests/engines/test_passes.py).
    """
    passes = passes_for(engine, xp)
    rows, k = x.shape
    data = passes.slice_storage(x, s, kind, operand)
    scales = xp.empty((s, rows))
    split = passes.split_rows

    def block(r0, r1):
        split(kind, x[r0:r1], s, width, data[:, r0:r1], scales[:, r0:r1])

    engine.map_rows(block, rows, k)
    return data, scales


def _split_bitmask(xp, x, s, width, out, scales):
    unit = float(2**width)
    x *= unit
    chunk = xp.empty_like(x)
    for t in range(s):
        xp.trunc(x, out=chunk)
        out[t] = chunk
        x -= chunk
        x *= unit
        scales[t] = 2.0 ** (-width * (t + 1))


def _rn_step(xp, x, mu, out_t, tmp):
    """One round-to-nearest slice on the grid ``mu`` (rows,): out_t = rn(x/mu), x -= slice."""
    sigma = (0.75 * 2.0**53) * mu[:, None]
    xp.add(x, sigma, out=tmp)
    xp.subtract(tmp, sigma, out=tmp)  # tmp = x rounded to the grid mu (exact)
    xp.subtract(x, tmp, out=x)
    xp.multiply(tmp, (1.0 / mu)[:, None], out=tmp)
    out_t[...] = tmp


def _split_rn(xp, x, s, width, out, scales):
    tmp = xp.empty_like(x)
    for t in range(s):
        mu = residual_grid(xp, x, width)
        _rn_step(xp, x, mu, out[t], tmp)
        scales[t] = mu


def _split_hybrid(xp, x, s, width, out, scales):
    # mu'' from the original row, once. Slice t is the hybrid split's
    # A_t = (r + sigma_t) - sigma_t, sigma_t = 0.75 * 2**(53 - width*t) * mu'',
    # i.e. r rounded to nearest-even on the grid mu'' * 2**(-width*t). Working in
    # units of that grid (y = r / grid, exact), the same value is rint(y) and
    # the next residual (y - rint(y)) * 2**width: identical slices in fewer
    # passes (tests/ozaki/test_split.py checks them against the sigma formula).
    base = residual_grid(xp, x, width)
    x *= (1.0 / base)[:, None]
    tmp = xp.empty_like(x)
    unit = float(2**width)
    for t in range(s):
        xp.rint(x, out=tmp)
        out[t] = tmp
        x -= tmp
        x *= unit
        scales[t] = base * 2.0 ** (-width * t)


def _split_fp(xp, x, s, width, out, scales):
    tmp = xp.empty_like(x)
    for t in range(s - 1):
        mu = residual_grid(xp, x, width)
        _rn_step(xp, x, mu, out[t], tmp)
        scales[t] = mu
    # M^(s) = R: the remainder itself, as an FP16 value on its own row scale.
    mu = residual_grid(xp, x, width)
    out[s - 1] = (x / mu[:, None]).astype(xp.float16)
    scales[s - 1] = mu


SPLITS = {
    "bitmask": _split_bitmask,
    "rn": _split_rn,
    "hybrid": _split_hybrid,
    "fp": _split_fp,
}


@generic("split_rows")
def split_rows(xp, kind, x, s, width, out, scales):
    """Cut normalized rows ``x`` into ``s`` slices of ``width`` bits.

    Writes slice values to ``out`` (s, rows, k) and the unit of each slice to
    ``scales`` (s, rows); ``x`` is overwritten with the residual.
    """
    SPLITS[kind](xp, x, s, width, out, scales)


def slice_layout(kind, width):
    """``(step, bound)`` of a split: fixed scale step (or None) and max |value|."""
    return {
        "bitmask": (width, 2**width - 1),
        "rn": (None, 2 ** (width - 1)),
        "hybrid": (width, 2 ** (width - 1)),
        "fp": (None, 2**11),
    }[kind]
