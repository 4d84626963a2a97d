"""Correctly rounded dot products of float64 vectors, for a few entries of a product.

The faithful mode (:mod:`.faithful`) recomputes here the entries its bound cannot
certify, and the entries ``auto`` would otherwise hand to native FP64. The
result is the exact dot product rounded to nearest (ties to even), over the
whole float64 range: subnormal results round once, results beyond the range
are infinities, and no intermediate overflows or underflows.

Method. Each vector is written EXACTLY as integers: ``x_k = M_k 2**(q_k)`` with
53-bit significands ``M_k``; relative to the vector's smallest exponent
``q_min`` every entry is the integer ``M_k 2**(q_k - q_min)``, cut into limbs of
``LIMB`` = 20 bits (a few limbs per entry, placed by its exponent: a row whose
entries span ``E`` bits needs ``(E + 53) / 20 + 4`` limbs). The dot product of
two such limb matrices is one float64 GEMM per entry that is exact whatever
the summation order: every product of limbs is below 2**40 and inner
dimensions are cut into pieces of at most 2**12, so each partial sum is an
integer below 2**53. The limb products are combined with Python integers and
rounded once with Python's correctly rounded integer division.

Cost: ``2 T_x T_y k`` flops per entry (``T`` limbs per row: 4 to 6 on the
papers' inputs), batched into NumPy matmuls; gathered on the host.
"""
from __future__ import annotations

import numpy as np

from .._array import to_numpy

__all__ = ["LIMB", "exact_dots", "round_scaled"]

#: Bits per limb: products of limbs stay below 2**40.
LIMB = 20
#: Inner pieces: 2**12 products below 2**40 sum exactly in float64 (< 2**53).
_PIECE = 1 << 12
#: Entries per batched product.
_BATCH = 64


def round_scaled(v: int, e: int) -> float:
    """``v * 2**e`` rounded to the nearest float64 (ties to even), +-inf on overflow."""
    try:
        if e >= 0:
            return float(v << e)
        return v / (1 << -e)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def _limbs(rows):
    """``(limbs, qmin)``: integer limbs ``(n, T, k)`` (float64, signed) and exponents
    with ``rows[r, k] == sum_l limbs[r, l, k] 2**(LIMB l + qmin[r])`` exactly."""
    n, k = rows.shape
    mant, ex = np.frexp(rows)
    m = np.ldexp(np.abs(mant), 53)  # integers below 2**53
    q = ex.astype(np.int64) - 53
    nz = m != 0
    big = np.iinfo(np.int64).max
    qmin = np.where(nz, q, big).min(axis=1) if k else np.zeros(n, np.int64)
    qmin = np.where(qmin == big, 0, qmin)
    sh = np.where(nz, q - qmin[:, None], 0)
    l0 = sh // LIMB
    off = sh - l0 * LIMB
    v = np.ldexp(m, off.astype(np.int32))  # exact: below 2**72
    T = int(l0.max()) + 4 if l0.size else 4
    out = np.zeros((n, T, k))
    sign = np.where(mant < 0, -1.0, 1.0)
    r_idx = np.broadcast_to(np.arange(n)[:, None], (n, k))
    k_idx = np.broadcast_to(np.arange(k)[None, :], (n, k))
    unit = float(1 << LIMB)
    rest = v
    for j in range(4):
        top = np.floor(rest / unit)
        digit = rest - top * unit  # exact (Sterbenz: both integers, close)
        out[r_idx, l0 + j, k_idx] = sign * digit
        rest = top
    return out, qmin


def _products(xl, yl):
    """Exact ``xl[e] @ yl[e].T`` as int64 (n, Tx, Ty), the inner dimension in pieces."""
    n, tx, k = xl.shape
    ty = yl.shape[1]
    acc = np.zeros((n, tx, ty), np.int64)
    for k0 in range(0, max(k, 1), _PIECE):
        part = np.matmul(xl[:, :, k0:k0 + _PIECE], yl[:, :, k0:k0 + _PIECE].transpose(0, 2, 1))
        acc += part.astype(np.int64)
    return acc


def _limb_count(rows):
    """Limbs :func:`_limbs` needs for each row."""
    mant, ex = np.frexp(rows)
    nz = mant != 0
    if rows.shape[1] == 0:
        return np.full(rows.shape[0], 4)
    hi = np.where(nz, ex, -(1 << 20)).max(axis=1)
    lo = np.where(nz, ex, 1 << 20).min(axis=1)
    return np.where(nz.any(axis=1), (hi - lo) // LIMB + 4, 4)


def _diagonals(prods):
    """``G[:, g] = sum_{i + j = g} prods[:, i, j]`` (int64: at most 32 terms below 2**58
    each) or None when the limbs are too many for int64."""
    n, tx, ty = prods.shape
    if min(tx, ty) > 32:
        return None
    out = np.zeros((n, tx + ty - 1), np.int64)
    for i in range(tx):
        out[:, i:i + ty] += prods[:, i, :]
    return out


def exact_dots(xp, a, bt, rows, cols):
    """Correctly rounded ``a[rows[t]] . bt[cols[t]]`` for every t (finite float64 inputs;
    ``bt`` holds the columns of B as rows). Returns a host float64 array."""
    rows = np.asarray(rows, np.int64)
    cols = np.asarray(cols, np.int64)
    out = np.empty(rows.size)
    if rows.size == 0:
        return out
    k = a.shape[1]
    # Entries in order of their limb counts, in batches of bounded memory.
    ta = _limb_count(to_numpy(a[xp.asarray(rows)]))
    tb = _limb_count(to_numpy(bt[xp.asarray(cols)]))
    order = np.argsort(np.maximum(ta, tb), kind="stable")
    start = 0
    while start < order.size:
        stop = start + 1
        while (stop < order.size and stop - start < _BATCH
               and (stop + 1 - start) * (ta[order[start:stop + 1]].max()
                                         + tb[order[start:stop + 1]].max()) * max(k, 1)
               <= (1 << 23)):
            stop += 1
        sel = order[start:stop]
        xa = to_numpy(a[xp.asarray(rows[sel])]).astype(np.float64, copy=False)
        xb = to_numpy(bt[xp.asarray(cols[sel])]).astype(np.float64, copy=False)
        xl, qa = _limbs(xa)
        yl, qb = _limbs(xb)
        prods = _products(xl, yl)
        diag = _diagonals(prods)
        for t in range(sel.size):
            if diag is not None:
                terms = diag[t].tolist()
            else:
                pt = prods[t]
                terms = [sum(int(pt[i, g - i]) for i in range(max(0, g - pt.shape[1] + 1),
                                                             min(g, pt.shape[0] - 1) + 1))
                         for g in range(sum(pt.shape) - 1)]
            total = 0
            for g, d in enumerate(terms):
                if d:
                    total += d << (LIMB * g)
            out[sel[t]] = round_scaled(total, int(qa[t]) + int(qb[t]))
        start = stop
    return out
