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
from ..engines import kernels, native_threads

__all__ = ["LIMB", "Rows", "exact_dots", "in_place", "round_scaled"]

#: Bits per limb: products of limbs stay below 2**40.
LIMB = 20
#: Inner pieces: 2**12 products below 2**40 sum exactly in float64 (< 2**53).
_PIECE = 1 << 12


def round_scaled(v: int, e: int) -> float:
    """``v * 2**e`` rounded to the nearest float64 (ties to even), +-inf on overflow."""
    try:
        if e >= 0:
            return float(v << e)
        return v / (1 << -e)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def _digits(rows, qmin=None):
    """``(digits, start, qmin)``: each entry ``rows[r, k]`` is ``sum_j digits[r, k, j]
    2**(LIMB (start[r, k] + j) + qmin[r])`` exactly (four signed 20-bit digits);
    ``qmin``: the rows' smallest exponents where already known (:func:`_exponent_range`
    of the whole rows, for a piece of them), else those of ``rows``."""
    n, k = rows.shape
    mant, ex = np.frexp(rows)
    m = np.ldexp(np.abs(mant), 53)  # integers below 2**53
    q = ex.astype(np.int64) - 53
    nz = m != 0
    if qmin is None:
        big = np.iinfo(np.int64).max
        qmin = np.where(nz, q, big).min(axis=1) if k else np.zeros(n, np.int64)
        qmin = np.where(qmin == big, 0, qmin)
    sh = np.where(nz, q - qmin[:, None], 0)
    start = sh // LIMB
    rest = np.ldexp(m, (sh - start * LIMB).astype(np.int32))  # exact: below 2**72
    sign = np.where(mant < 0, -1.0, 1.0)
    unit = float(1 << LIMB)
    digits = np.empty((n, k, 4), np.int64)
    for j in range(4):
        top = np.floor(rest / unit)
        digits[:, :, j] = sign * (rest - top * unit)  # exact (both integers, close)
        rest = top
    return digits, start, qmin


def _limbs(rows, qmin=None, T=None):
    """``(limbs, qmin)``: integer limbs ``(n, T, k)`` (float64, signed) and exponents
    with ``rows[r, k] == sum_l limbs[r, l, k] 2**(LIMB l + qmin[r])`` exactly;
    ``qmin``, ``T``: those of the whole rows (:func:`_exponent_range`) when ``rows`` is
    a piece of them."""
    n, k = rows.shape
    digits, start, qmin = _digits(rows, qmin)
    if T is None:
        T = int(start.max()) + 4 if start.size else 4
    out = np.zeros((n, T, k))
    r_idx = np.broadcast_to(np.arange(n)[:, None], (n, k))
    k_idx = np.broadcast_to(np.arange(k)[None, :], (n, k))
    for j in range(4):
        out[r_idx, start + j, k_idx] = digits[:, :, j]
    return out, qmin


def _exponent_range(xp, x, idx, width):
    """``(qmin, T)`` of the rows ``idx`` of ``x`` as :func:`_limbs` finds them for the
    whole rows, from pieces of ``width`` columns (never a copy of the whole rows):
    ``qmin`` per row, ``T`` = 4 + the largest limb offset of any entry."""
    n, k = len(idx), x.shape[1]
    big = np.iinfo(np.int64).max
    lo = np.full(n, big, np.int64)
    hi = np.full(n, -big, np.int64)
    for k0 in range(0, k, width):
        piece = to_numpy(x[xp.asarray(idx), k0:k0 + width]).astype(np.float64, copy=False)
        mant, ex = np.frexp(piece)
        q = ex.astype(np.int64) - 53
        nz = mant != 0
        lo = np.minimum(lo, np.where(nz, q, big).min(axis=1, initial=big))
        hi = np.maximum(hi, np.where(nz, q, -big).max(axis=1, initial=-big))
    none = lo == big
    qmin = np.where(none, 0, lo)
    span = np.where(none, 0, hi - qmin)
    return qmin, int((span // LIMB).max(initial=0)) + 4


#: Bytes per row (or column) and inner entry that one piece of the NumPy path may hold
#: beside its limbs: the float64 piece, the digits and the temporaries of :func:`_digits`.
_PIECE_OVERHEAD = 112


def _piece_width(n, t_sum, k):
    """Inner length of one piece of the NumPy path for ``n`` rows and columns whose limb
    counts add up to ``t_sum``: its limbs and temporaries within 12 bytes per entry of
    the whole rows (what the driver's memory plan gives a tile's operands), at most
    :data:`_PIECE` (the exactness of the limb GEMMs) and at least 64."""
    per = _PIECE_OVERHEAD * n + 8 * t_sum
    return int(max(64, min(_PIECE, (12 * n * max(k, 1)) // max(per, 1))))


def _kernels():
    """The engines' compiled kernels (None: the NumPy path)."""
    return kernels.load()[0]


def _digits_fused(ker, rows):
    n, k = rows.shape
    digits = np.empty((n, k, 4), np.int64)
    start = np.empty((n, k), np.int64)
    qmin = np.empty(n, np.int64)
    ker.exact_digits(np.ascontiguousarray(rows), digits, start, qmin)
    return digits, start, qmin


def _exact_dots_fused(ker, xa, xb, ri, ci):
    """Exact values through the compiled kernel (digits of the needed vectors once)."""
    ker.set_threads(native_threads() if (xa.size + xb.size) > (1 << 16) else 1)
    xd, xs, qa = _digits_fused(ker, xa)
    yd, ys, qb = _digits_fused(ker, xb)
    width = int(xs.max(initial=0)) + int(ys.max(initial=0)) + 8
    acc = np.zeros((ri.size, width), np.int64)
    ker.set_threads(native_threads() if ri.size * xa.shape[1] > (1 << 16) else 1)
    ker.exact_dot_limbs(xd, xs, yd, ys, ri, ci, acc)
    out = np.empty(ri.size)
    for t, row in enumerate(acc.tolist()):
        total = 0
        for g, d in enumerate(row):
            if d:
                total += d << (LIMB * g)
        out[t] = round_scaled(total, int(qa[ri[t]]) + int(qb[ci[t]]))
    return out


def _diagonals(prods):
    """``G[:, g] = sum_{i + j = g} prods[i, :, j]`` for ``prods`` (Tx, n, Ty) int64 (at
    most 32 terms below 2**58 each); None when there are more terms than int64 holds."""
    tx, n, ty = prods.shape
    if min(tx, ty) > 32:
        return None
    out = np.zeros((n, tx + ty - 1), np.int64)
    for i in range(tx):
        out[:, i:i + ty] += prods[i]
    return out


def _combine(prods, qa, qb):
    """Correctly rounded values of the limb products ``prods`` (Tx, n, Ty) of one row
    (exponent ``qa``) against n columns (exponents ``qb``)."""
    diag = _diagonals(prods)
    out = np.empty(prods.shape[1])
    for t in range(prods.shape[1]):
        if diag is not None:
            terms = diag[t].tolist()
        else:
            pt = prods[:, t, :]
            terms = [sum(int(pt[i, g - i]) for i in range(max(0, g - pt.shape[1] + 1),
                                                         min(g, pt.shape[0] - 1) + 1))
                     for g in range(sum(pt.shape) - 1)]
        total = 0
        for g, d in enumerate(terms):
            if d:
                total += d << (LIMB * g)
        out[t] = round_scaled(total, int(qa) + int(qb[t]))
    return out


#: Rows (and columns) whose limbs are formed together.
_ROWS = 64
_COLS = 256


def _gathered(xp, x, idx, scratch=None):
    """The rows ``idx`` of ``x`` as a C-contiguous float64 host array; ``x`` itself
    when it is one already and most of its rows are asked for, else a copy (in a
    buffer of the engine's ``scratch`` pool for a NumPy ``x``): at n = 4096 the fresh
    pages of a gathered operand cost more than the dots."""
    if isinstance(x, np.ndarray) and x.dtype == np.float64 and x.ndim == 2:
        if x.flags.c_contiguous and 2 * idx.size >= x.shape[0]:
            return x
        ker = _kernels()
        if ker is not None and x.T.flags.c_contiguous:  # rows of B^T: columns of B
            out = (scratch.empty((idx.size, x.shape[1]), np.float64) if scratch is not None
                   else np.empty((idx.size, x.shape[1])))
            ker.gather_cols(x.T, np.ascontiguousarray(idx, np.int64), out)
            return out
    return np.ascontiguousarray(to_numpy(x[xp.asarray(idx)]), np.float64)


def _scales(ker, x, threads=1):
    """Dot2's power-of-two scales of the rows of the host array ``x``: ``(2**-e, e)`` with
    ``max |x_r| 2**-e`` in [0.5, 1)."""
    mx = np.zeros(x.shape[0])
    if x.shape[1]:  # max |x| per row, one parallel pass (the same values as abs(x).max)
        ker.set_threads(max(1, threads or 1) if x.size > (1 << 16) else 1)
        ker.abs_max_rows(x, mx)
    _, e = np.frexp(mx)
    # rows of tiny entries (a scale past 2**1000) stay as they are: their products
    # underflow and the kernel hands them to the exact path
    e = np.where((mx > 0) & (e > -1000), e, 0).astype(np.int64)
    return np.ldexp(1.0, (-e).astype(np.int32)), e


def in_place(x):
    """True where :class:`Rows` reads ``x`` (NumPy, float64, C-contiguous) without a copy."""
    return (isinstance(x, np.ndarray) and x.dtype == np.float64 and x.ndim == 2
            and x.flags.c_contiguous)


class Rows:
    """Rows of one operand (A, or B^T: the columns of B) for several :func:`exact_dots`
    calls, with their Dot2 scales computed once: the whole ``x`` read in place
    (``idx=None``; :func:`in_place` operands), or the rows ``idx`` (sorted, unique)
    gathered once (:func:`_gathered`, in the ``scratch`` pool). Only the compiled Dot2
    path reads them; the same values either way."""

    def __init__(self, xp, x, idx=None, scratch=None, threads=1):
        ker = _kernels()
        if idx is None:
            if not in_place(x):
                raise ValueError("ozlinalg: Rows(x) of the whole x needs a C-contiguous "
                                 "float64 NumPy array")
            self.x, self.idx = x, None
        else:
            idx = np.asarray(idx, np.int64)
            self.x = _gathered(xp, x, idx, scratch)
            self.idx = None if self.x is x else idx
        self.scale, self.exp = _scales(ker, self.x, threads)

    def local(self, rows):
        """The positions in :attr:`x` of the operand's rows ``rows``."""
        return rows if self.idx is None else np.searchsorted(self.idx, rows)


def _dot2_first(ker, xp, a, bt, rows, cols, out, threads, scratch=None, prepared=None):
    """The entries Dot2 (compensated, in a compiled kernel) proves correctly rounded, into
    ``out``; returns the mask of those entries (the others need the exact path). Same
    values as the exact path: only certified round-to-nearest results are kept.
    ``prepared``: a pair of :class:`Rows` of A and B^T holding every row asked for (or
    None: gathered here)."""
    if prepared is not None:
        pa, pb = prepared
    else:
        pa = Rows(xp, a, np.unique(rows), scratch, threads)
        pb = Rows(xp, bt, np.unique(cols), scratch, threads)
    xa, xb = pa.x, pb.x
    ri, ci = pa.local(rows), pb.local(cols)
    k = xa.shape[1]

    ker.set_threads(max(1, threads or 1) if rows.size * k > (1 << 16) else 1)
    sa, ea = pa.scale, pa.exp
    sb, eb = pb.scale, pb.exp
    gam = 2 * k * 2.0**-53
    g2 = (gam / (1.0 - gam)) ** 2
    vals = np.empty(rows.size)
    ok = np.zeros(rows.size, np.bool_)
    ker.dot2_nearest(xa, xb, ri.astype(np.int64), ci.astype(np.int64), sa, sb, ea, eb, g2,
                     vals, ok)
    out[ok] = vals[ok]
    return ok


def exact_dots(xp, a, bt, rows, cols, dot2=True, threads=None, scratch=None,
               prepared=None):
    """Correctly rounded ``a[rows[t]] . bt[cols[t]]`` for every t (finite float64 inputs;
    ``bt`` holds the columns of B as rows; ``threads``: the engine's, for the Dot2
    kernel; ``scratch``: the engine's pool of large buffers, or None; ``prepared``: the
    :class:`Rows` of A and B^T that hold every row asked for, gathered and scaled once
    for several calls, or None). Returns a host float64 array.

    With the compiled kernels, Dot2 (Ogita, Rump & Oishi 2005: TwoProduct and TwoSum,
    error of the unevaluated result at most ``gamma_2k**2 sum |a b|``) settles first the entries
    it proves correctly rounded (nearly all: these entries' cancellation is far
    below ``1 / gamma_2k**2``); the rest take the exact limb products. Either way
    the value is the correctly rounded one, so the two paths give the same bits.

    Without them, entries are taken a block of rows and of columns at a time (limbs of at
    most ``_ROWS + _COLS`` vectors, inner pieces of 2**12), and each row is multiplied
    with the limbs of its columns in one float64 GEMM."""
    rows = np.asarray(rows, np.int64)
    cols = np.asarray(cols, np.int64)
    out = np.empty(rows.size)
    if rows.size == 0:
        return out
    k = a.shape[1]
    ker = _kernels()
    if dot2 and ker is not None and k <= (1 << 17):
        done = _dot2_first(ker, xp, a, bt, rows, cols, out, threads, scratch, prepared)
        rest = np.nonzero(~done)[0]
        if rest.size:
            out[rest] = exact_dots(xp, a, bt, rows[rest], cols[rest], dot2=False)
        return out
    if ker is not None and k <= (1 << 17):
        urows, ri = np.unique(rows, return_inverse=True)
        ucols, ci = np.unique(cols, return_inverse=True)
        for c0 in range(0, rows.size, 1 << 16):
            sel = slice(c0, c0 + (1 << 16))
            ur, rr = np.unique(ri[sel], return_inverse=True)
            uc, cc = np.unique(ci[sel], return_inverse=True)
            xa = to_numpy(a[xp.asarray(urows[ur])]).astype(np.float64, copy=False)
            xb = to_numpy(bt[xp.asarray(ucols[uc])]).astype(np.float64, copy=False)
            out[sel] = _exact_dots_fused(ker, xa, xb, rr, cc)
        return out
    order = np.lexsort((cols, rows))
    urows = np.unique(rows)
    for r0 in range(0, urows.size, _ROWS):
        rsel = urows[r0:r0 + _ROWS]
        in_rows = order[np.isin(rows[order], rsel)]
        ucols = np.unique(cols[in_rows])
        qa, tx = _exponent_range(xp, a, rsel, _PIECE)
        for c0 in range(0, ucols.size, _COLS):
            csel = ucols[c0:c0 + _COLS]
            ent = in_rows[np.isin(cols[in_rows], csel)]
            if ent.size == 0:
                continue
            qb, ty = _exponent_range(xp, bt, csel, _PIECE)
            ri = np.searchsorted(rsel, rows[ent])
            ci = np.searchsorted(csel, cols[ent])
            groups = [(r, ri == r) for r in np.unique(ri)]
            accs = [np.zeros((tx, int(sel.sum()) * ty), np.int64) for _, sel in groups]
            # the limbs a piece of the inner dimension at a time (rows of many limbs over
            # a long inner dimension would not fit beside the product otherwise); each
            # piece's limb GEMMs are exact, and their int64 sums do not depend on the cut
            width = _piece_width(rsel.size + csel.size, rsel.size * tx + csel.size * ty, k)
            for k0 in range(0, max(k, 1), width):
                xl, _ = _limbs(to_numpy(a[xp.asarray(rsel), k0:k0 + width]).astype(
                    np.float64, copy=False), qa, tx)
                yl, _ = _limbs(to_numpy(bt[xp.asarray(csel), k0:k0 + width]).astype(
                    np.float64, copy=False), qb, ty)
                for (r, sel), acc in zip(groups, accs):
                    cj = ci[sel]
                    ys = yl[cj].reshape(cj.size * ty, -1)
                    acc += (xl[r] @ ys.T).astype(np.int64)
                del xl, yl
            for (r, sel), acc in zip(groups, accs):
                cj = ci[sel]
                out[ent[sel]] = _combine(acc.reshape(tx, cj.size, ty), qa[r], qb[cj])
    return out
