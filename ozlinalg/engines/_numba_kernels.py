"""Fused, multi-threaded passes of the CPU INT8 engine (numba).

At INT8 speed the NumPy passes around the GEMMs (normalization, splitting,
residues, FP64 accumulation, CRT rebuild) cost more than the GEMMs. Each
kernel here does in ONE pass over memory what the generic array code
(:mod:`ozlinalg.ozaki.split`, :mod:`ozlinalg.ozaki.crt`, ``Engine.axpy``) does
in several, row-parallel (``prange``) on the OpenMP pool that oneDNN uses too.

Bit-identity with the generic code is the contract (tests/test_engine_onednn.py
compares every kernel with it): each kernel performs the generic code's IEEE
operations, per element, in the generic order. numba does not contract
``a * b + c`` into an FMA without ``fastmath``; only helpers whose products are
all exact allow it (``_EXACT``), where an FMA gives the same bits.

Importing this module imports numba (~0.15 s) and loads compiled kernels from
numba's on-disk cache (``cache=True``); the first process after an install
compiles them (a few seconds, see docs/performance.md).
"""
from __future__ import annotations

import math
import threading

import numba
import numpy as np
from numba import njit, prange

_OPTS = dict(cache=True, nogil=True)
_PAR = dict(parallel=True, **_OPTS)
#: For helpers whose every product is exact (integers below 2**53 times small
#: integers, or powers of two): an FMA then rounds exactly as a multiply and an add
#: do, so letting LLVM fuse them cannot change a bit. Kernels whose products round
#: (the CRT quotient, the splits) never carry it; numba compiles each function with
#: its own flags, so a helper's contraction does not spread to its caller.
_EXACT = dict(fastmath={"contract"}, **_OPTS)

MIN_GRID_EXP = -1000  # ozlinalg.exact.MIN_GRID_EXP (checked by the tests)


_THREADS = threading.local()


def set_threads(n):
    """Threads of the next kernels called from this thread (numba's setting is per
    thread; remembered here, since asking numba costs ~10 us a call)."""
    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    if getattr(_THREADS, "n", None) != n:
        numba.set_num_threads(n)
        _THREADS.n = n


def threads():
    """The thread count :func:`set_threads` last set in this thread."""
    n = getattr(_THREADS, "n", None)
    return n if n is not None else numba.get_num_threads()


# ---------------------------------------------------------------------------
# Layout. Every pass comes in two forms: "rows" reads an operand whose rows are
# contiguous (x is rows x k, C order) and "cols" one whose columns are (x.T is
# k x rows, C order: B in its own row-major layout, or a Fortran-ordered A).
# Both write slices that follow the input's order, so no pass ever transposes
# (a transposing copy of a 2048 x 2048 matrix costs ~55 ms on the 2-core
# test machine, as much as 15 row-order passes).


@njit(**_PAR)
def col_absmax(xt):
    """``max_r |xt[r, j]|`` per column of a row-major (k x n) array (row-parallel
    partial maxima, then a reduction: every read streams)."""
    k, n = xt.shape
    nb = max(1, min(k, 64))
    part = np.zeros((nb, n))
    for b in prange(nb):
        for r in range(b * k // nb, (b + 1) * k // nb):
            for j in range(n):
                v = abs(xt[r, j])
                if v > part[b, j]:
                    part[b, j] = v
    out = np.zeros(n)
    for b in range(nb):
        for j in range(n):
            if part[b, j] > out[j]:
                out[j] = part[b, j]
    return out


@njit(**_OPTS)
def _absmax(x, i):
    m = 0.0
    for j in range(x.shape[1]):
        v = abs(x[i, j])
        if v > m:
            m = v
    return m


# ---------------------------------------------------------------------------
# normalization (ozlinalg.ozaki.split.normalize_rows)


@njit(**_OPTS)
def _pairwise_block(a, lo, n):
    """A leaf of :func:`_pairwise_sum`: ``n <= 128`` values from ``a[lo]`` (indexed
    through a slice by range variables, so numba drops its negative-index checks)."""
    blk = a[lo:lo + n]
    if n < 8:
        res = 0.0
        for j in range(n):
            res += blk[j]
        return res
    r0, r1, r2, r3 = blk[0], blk[1], blk[2], blk[3]
    r4, r5, r6, r7 = blk[4], blk[5], blk[6], blk[7]
    m = n - n % 8
    for j in range(8, m, 8):
        r0 += blk[j]
        r1 += blk[j + 1]
        r2 += blk[j + 2]
        r3 += blk[j + 3]
        r4 += blk[j + 4]
        r5 += blk[j + 5]
        r6 += blk[j + 6]
        r7 += blk[j + 7]
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for j in range(m, n):
        res += blk[j]
    return res


@njit(**_OPTS)
def _pairwise_sum(a, n, los, ns, vals):
    """NumPy's pairwise sum of ``a[:n]`` (``np.add.reduce`` of a contiguous float64
    run): blocks of at most 128 summed in eight interleaved partial sums, longer
    runs split in two (the first part ``n // 2`` rounded down to a multiple of 8)
    and the halves' sums added. Walked with explicit stacks (numba's cache does
    not take recursive functions): ``los`` / ``ns`` (int64) and ``vals`` hold at
    least 128 entries (a depth of 40 levels)."""
    if n <= 128:
        return _pairwise_block(a, 0, n)
    top = 1  # pending nodes (lo, n); n < 0 marks "add the top two sums"
    nv = 0
    los[0] = 0
    ns[0] = n
    while top:
        top -= 1
        lo = los[top]
        m = ns[top]
        if m < 0:
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
        elif m <= 128:
            vals[nv] = _pairwise_block(a, lo, m)
            nv += 1
        else:
            m2 = m // 2
            m2 -= m2 % 8
            los[top], ns[top] = 0, -1
            los[top + 1], ns[top + 1] = lo + m2, m - m2
            los[top + 2], ns[top + 2] = lo, m2
            top += 3
    return vals[0]


@njit(**_OPTS)
def _row_factors(m):
    """frexp exponent of the row maximum and the generic code's two power-of-two factors."""
    e = math.frexp(m)[1]
    e1 = min(max(-e, -1022), 1000)
    e2 = -e - e1
    return e, math.ldexp(1.0, e1), math.ldexp(1.0, e2)


@njit(**_PAR)
def normalize_rows(a, x, exps, ss):
    """``x[i] = a[i] * 2**-e_i`` with ``max |x[i]| in [0.5, 1)``; ``exps[i] = e_i``; where
    ``ss`` is not empty also ``ss[i] = (x[i] * x[i]).sum()`` in NumPy's order (Ozaki-II's
    row norms, without a second pass or a squared temporary)."""
    rows, k = a.shape
    want = ss.shape[0] > 0
    nb = min(rows, 64)
    for blk in prange(nb):
        sq = np.empty(k if want else 0)  # scratch of this block of rows
        los = np.empty(128, np.int64)
        ns = np.empty(128, np.int64)
        vals = np.empty(128)
        for i in range(blk * rows // nb, (blk + 1) * rows // nb):
            e, f1, f2 = _row_factors(_absmax(a, i))
            exps[i] = e
            if want:
                for j in range(k):
                    v = (a[i, j] * f1) * f2
                    x[i, j] = v
                    sq[j] = v * v
                ss[i] = _pairwise_sum(sq, k, los, ns, vals)
            else:
                for j in range(k):
                    x[i, j] = (a[i, j] * f1) * f2


@njit(**_OPTS)
def _col_factors(at, exps):
    """Column maxima of ``at`` and the normalization factors of each column
    (:func:`_row_factors`); ``exps[j]`` = the column's exponent."""
    n = at.shape[1]
    mx = col_absmax(at)
    f1 = np.empty(n)
    f2 = np.empty(n)
    for j in range(n):
        e, g1, g2 = _row_factors(mx[j])
        exps[j] = e
        f1[j] = g1
        f2[j] = g2
    return mx, f1, f2


@njit(**_PAR)
def normalize_cols(at, xt, exps):
    """:func:`normalize_rows` of ``at.T``: ``xt[:, j] = at[:, j] * 2**-e_j``."""
    k, n = at.shape
    _, f1, f2 = _col_factors(at, exps)
    for r in prange(k):
        for j in range(n):
            xt[r, j] = (at[r, j] * f1[j]) * f2[j]


@njit(**_OPTS)
def _scale_run(src, f1, f2, dst):
    for j in range(dst.shape[0]):
        dst[j] = (src[j] * f1[j]) * f2[j]


@njit(**_OPTS)
def _add_squares(acc, run):
    for j in range(acc.shape[0]):
        acc[j] = acc[j] + run[j] * run[j]


@njit(**_PAR)
def normalize_cols_sumsq(at, xt, exps, ss, nb):
    """:func:`normalize_cols` and ``ss[j] = sum_r xt[r, j]**2`` added in r order (NumPy's
    order for ``(x * x).sum(axis=1)`` of the Fortran-ordered ``x = xt.T``): ``nb`` blocks
    of columns in parallel (one per thread: every step down the rows reads a long run),
    each walked down the rows."""
    k, n = at.shape
    _, f1, f2 = _col_factors(at, exps)
    for b in prange(nb):
        j0 = b * n // nb
        j1 = (b + 1) * n // nb
        acc = np.zeros(j1 - j0)
        for r in range(k):
            run = xt[r, j0:j1]
            _scale_run(at[r, j0:j1], f1[j0:j1], f2[j0:j1], run)
            _add_squares(acc, run)
        ss[j0:j1] = acc


# ---------------------------------------------------------------------------
# splits (ozlinalg.ozaki.split)


@njit(**_OPTS)
def _grid(m, width):
    """``ozlinalg.exact.residual_grid`` of one row with maximum m."""
    if not m > 0.0:
        return 1.0
    f, e = math.frexp(m)
    if f == 0.5:
        e -= 1
    return math.ldexp(1.0, max(e + 1 - width, MIN_GRID_EXP))


@njit(**_OPTS)
def _digits(v, s, unit, out, i, trunc):
    """``out[t, i]`` = digit t of the row ``v`` (consumed: the residual in units of the
    current digit), t = 0 .. s - 1, by ``rint`` (hybrid) or ``trunc`` (bitmask)."""
    for t in range(s):
        for j in range(v.shape[0]):
            r = np.trunc(v[j]) if trunc else np.rint(v[j])
            out[t, i, j] = np.int8(r)
            v[j] = (v[j] - r) * unit


@njit(**_OPTS)
def _row_digits(x, i, factor, s, unit, out, trunc):
    """:func:`_digits` of row i of ``x`` times ``factor`` (a row buffer holds the residual
    in units of the current slice)."""
    v = np.empty(x.shape[1])
    for j in range(x.shape[1]):
        v[j] = x[i, j] * factor
    _digits(v, s, unit, out, i, trunc)


@njit(**_PAR)
def split_hybrid(x, s, width, out, base):
    """Hybrid split: ``base[i]`` = grid of row i, ``out[t, i] = rint`` digits (int8)."""
    unit = 2.0**width
    for i in prange(x.shape[0]):
        b = _grid(_absmax(x, i), width)
        base[i] = b
        _row_digits(x, i, 1.0 / b, s, unit, out, False)


@njit(**_PAR)
def split_hybrid_cols(xt, s, width, outt, base):
    """:func:`split_hybrid` of ``xt.T`` into ``outt`` (s, k, rows): ``outt[t].T`` is slice t."""
    k, n = xt.shape
    unit = 2.0**width
    mx = col_absmax(xt)
    inv = np.empty(n)
    for j in range(n):
        base[j] = _grid(mx[j], width)
        inv[j] = 1.0 / base[j]
    for r in prange(k):
        v = np.empty(n)
        for j in range(n):
            v[j] = xt[r, j] * inv[j]
        _digits(v, s, unit, outt, r, False)


@njit(**_PAR)
def split_hybrid_raw(a, s, width, out, base, exps):
    """:func:`normalize_rows` and :func:`split_hybrid` in one pass, with no normalized
    copy: row i is scaled by ``2**-e_i`` (the same two roundings) on the fly."""
    rows, k = a.shape
    unit = 2.0**width
    for i in prange(rows):
        m = _absmax(a, i)
        e, f1, f2 = _row_factors(m)
        exps[i] = e
        b = _grid((m * f1) * f2, width)  # the normalized row's maximum, exactly
        base[i] = b
        inv = 1.0 / b
        v = np.empty(k)
        for j in range(k):
            v[j] = ((a[i, j] * f1) * f2) * inv
        _digits(v, s, unit, out, i, False)


@njit(**_PAR)
def split_hybrid_raw_cols(at, s, width, outt, base, exps):
    """:func:`split_hybrid_raw` of ``at.T`` (column-contiguous rows)."""
    k, n = at.shape
    unit = 2.0**width
    mx, f1, f2 = _col_factors(at, exps)
    inv = np.empty(n)
    for j in range(n):
        base[j] = _grid((mx[j] * f1[j]) * f2[j], width)
        inv[j] = 1.0 / base[j]
    for r in prange(k):
        v = np.empty(n)
        for j in range(n):
            v[j] = ((at[r, j] * f1[j]) * f2[j]) * inv[j]
        _digits(v, s, unit, outt, r, False)


@njit(**_PAR)
def split_bitmask(x, s, width, out):
    """Bitmask split: truncated ``width``-bit chunks (int8). Elementwise, so it also
    serves the column layout (called on the transposes)."""
    unit = 2.0**width
    for i in prange(x.shape[0]):
        _row_digits(x, i, unit, s, unit, out, True)


@njit(**_PAR)
def split_rn(x, s, width, out, mus):
    """Round-to-nearest split with per-slice grids (``x`` is left as the residual)."""
    rows, k = x.shape
    c = 0.75 * 2.0**53
    for i in prange(rows):
        for t in range(s):
            mu = _grid(_absmax(x, i), width)
            mus[t, i] = mu
            sigma = c * mu
            inv = 1.0 / mu
            for j in range(k):
                tmp = (x[i, j] + sigma) - sigma
                x[i, j] = x[i, j] - tmp
                out[t, i, j] = np.int8(tmp * inv)


@njit(**_PAR)
def split_rn_cols(xt, s, width, outt, mus):
    """:func:`split_rn` of ``xt.T`` (``xt`` is left as the residual's transpose)."""
    k, n = xt.shape
    c = 0.75 * 2.0**53
    sigma = np.empty(n)
    inv = np.empty(n)
    for t in range(s):
        mx = col_absmax(xt)
        for j in range(n):
            mu = _grid(mx[j], width)
            mus[t, j] = mu
            sigma[j] = c * mu
            inv[j] = 1.0 / mu
        for r in prange(k):
            for j in range(n):
                tmp = (xt[r, j] + sigma[j]) - sigma[j]
                xt[r, j] = xt[r, j] - tmp
                outt[t, r, j] = np.int8(tmp * inv[j])


# ---------------------------------------------------------------------------
# Ozaki scheme II (ozlinalg.ozaki.crt)
#
# Residues are unique (the symmetric residue of an integer is the one integer in
# [-h, p - 1 - h], h = floor(p / 2)), so any exact route gives the generic
# ``symmetric_mod``'s value. The route here has no branch and no division, so
# every inner loop vectorizes (AVX-512: 8 lanes, int8 stores of contiguous runs):
#
# * odd p, integer ``a`` with |a| < 2**51: ``a - rint(a * fl(1/p)) * p``. The product
#   is within |a / p| 2**-52 < 1 / (2 p) of a / p, and a / p is at least 1 / (2 p) away
#   from every half-integer (2 (a mod p) - p is odd), so ``rint`` returns the nearest
#   integer to a / p and the difference (exact: integers below 2**53) lies in
#   [-(p - 1) / 2, (p - 1) / 2], the symmetric range of an odd p.
# * p a power of two: ``a - floor((a + h) / p) * p`` (every step exact).


@njit(**_EXACT)
def _residue_run(hi, lo, two, c, pf, inv, pow2, orow):
    """``orow[j]`` = symmetric residue mod p of ``hi[j] c + lo[j]`` (``two``) or of
    ``lo[j]`` (all values exact integers whose |sum| < 2**51)."""
    n = lo.shape[0]
    if pow2:
        h = 0.5 * pf
        if two:
            for j in range(n):
                acc = hi[j] * c + lo[j]
                orow[j] = np.int8(acc - np.floor((acc + h) * inv) * pf)
        else:
            for j in range(n):
                acc = lo[j]
                orow[j] = np.int8(acc - np.floor((acc + h) * inv) * pf)
    elif two:
        for j in range(n):
            acc = hi[j] * c + lo[j]
            orow[j] = np.int8(acc - np.rint(acc * inv) * pf)
    else:
        for j in range(n):
            acc = lo[j]
            orow[j] = np.int8(acc - np.rint(acc * inv) * pf)


@njit(**_OPTS)
def _residues_of_row(v, dig, acc, d, pf, inv, coefs, pow2, o, slots, mid, i):
    """Residues of the integers ``v`` (one row, consumed) for every modulus into
    ``o[i, slots[idx]]`` (``mid``) or ``o[slots[idx], i]``.

    ``v`` (|v| < 2**(count d)) is cut into ``count = coefs.shape[1]`` signed digits
    of d bits, top-down as ``residues_into`` does (each an exact truncation), and
    ``sum_t digit_t (2**(d t) mod p)`` (|sum| < 2**51 by the choice of d) is reduced
    exactly: two digits in registers, more in the row buffer ``acc``."""
    nmod, count = coefs.shape
    n = v.shape[0]
    for t in range(count - 1, 0, -1):
        scale = 2.0 ** (d * t)
        inv_scale = 1.0 / scale
        dt = dig[t]
        for j in range(n):
            top = np.trunc(v[j] * inv_scale)
            dt[j] = top
            v[j] = v[j] - top * scale
    for idx in range(nmod):
        orow = o[i, slots[idx]] if mid else o[slots[idx], i]
        if count <= 2:
            _residue_run(dig[1], v, count == 2, coefs[idx, count - 1], pf[idx], inv[idx],
                         pow2[idx], orow)
            continue
        for j in range(n):
            acc[j] = v[j]
        for t in range(1, count):
            ct = coefs[idx, t]
            dt = dig[t]
            for j in range(n):
                acc[j] = acc[j] + dt[j] * ct
        _residue_run(acc, acc, False, 0.0, pf[idx], inv[idx], pow2[idx], orow)


@njit(**_PAR)
def crt_residues(x, mult, round_rows, d, pf, inv, coefs, pow2, o, slots, mid):
    """Symmetric residues (int8) of ``rint|trunc(x * mult[:, None])`` for every modulus
    (:func:`_residues_of_row`); ``coefs[idx, t] = 2**(d t) mod p_idx``."""
    rows, k = x.shape
    count = coefs.shape[1]
    for i in prange(rows):
        mlt = mult[i]
        v = np.empty(k)
        if round_rows[i]:
            for j in range(k):
                v[j] = np.rint(x[i, j] * mlt)
        else:
            for j in range(k):
                v[j] = np.trunc(x[i, j] * mlt)
        _residues_of_row(v, np.empty((max(count, 2), k)), np.empty(k), d, pf, inv, coefs,
                         pow2, o, slots, mid, i)


@njit(**_PAR)
def crt_residues_cols(xt, mult, round_cols, d, pf, inv, coefs, pow2, o, slots):
    """:func:`crt_residues` of ``xt.T`` into ``o[slots[idx]]`` (k x rows each)."""
    k, n = xt.shape
    count = coefs.shape[1]
    for r in prange(k):
        v = np.empty(n)
        for j in range(n):
            w = xt[r, j] * mult[j]
            rn = np.rint(w)
            tr = np.trunc(w)
            v[j] = rn if round_cols[j] else tr
        _residues_of_row(v, np.empty((max(count, 2), n)), np.empty(n), d, pf, inv, coefs,
                         pow2, o, slots, False, r)


@njit(**_OPTS)
def _max_into(dst, run):
    for j in range(dst.shape[0]):
        if run[j] > dst[j]:
            dst[j] = run[j]


@njit(**_PAR)
def group_col_max(w, gid, cm, nb):
    """``cm[g, j] = max(cm[g, j], max of w[i, j] over the rows i with gid[i] == g)``:
    the accurate scaling's bound products summarized per group of equal row shift
    (``nb`` column blocks in parallel, each walked down the rows)."""
    m, p = w.shape
    for b in prange(nb):
        j0 = b * p // nb
        j1 = (b + 1) * p // nb
        for i in range(m):
            _max_into(cm[gid[i], j0:j1], w[i, j0:j1])


@njit(**_PAR)
def int_row_max(w, out):
    """``out[i] = max(out[i], max_j w[i, j])`` (float64 of an integer tile)."""
    m, p = w.shape
    for i in prange(m):
        best = out[i]
        for j in range(p):
            v = float(w[i, j])
            if v > best:
                best = v
        out[i] = best


@njit(**_PAR)
def abs_max_rows(x, out):
    """``out[i] = max_k |x[i, k]|`` for finite rows; a non-finite value (inf) where a
    row holds Inf or NaN (``ozlinalg.ozaki.balance._abs_max``'s contract)."""
    m, k = x.shape
    k8 = k - k % 8
    for i in prange(m):
        best = np.zeros(8)  # eight lanes: the loop vectorizes (no float reduction)
        bad = np.zeros(8)
        row = x[i]
        for j in range(0, k8, 8):
            for lane in range(8):
                v = row[j + lane]
                bad[lane] += v - v  # NaN from Inf or NaN, 0 otherwise
                a = abs(v)
                best[lane] = a if a > best[lane] else best[lane]
        for j in range(k8, k):
            v = row[j]
            bad[0] += v - v
            a = abs(v)
            best[0] = a if a > best[0] else best[0]
        top = 0.0
        flag = 0.0
        for lane in range(8):
            top = best[lane] if best[lane] > top else top
            flag += bad[lane]
        out[i] = top if flag == 0.0 else np.inf


@njit(**_PAR)
def abs_max_cols(x, out):
    """``out[j] = max_i |x[i, j]|`` per column of a C-contiguous ``x`` (column blocks in
    parallel, walked down the rows), with :func:`abs_max_rows`' contract."""
    m, p = x.shape
    nb = (p + 255) // 256
    for b in prange(nb):
        j0 = b * 256
        w = min(p, j0 + 256) - j0
        best = np.zeros(w)
        bad = np.zeros(w)
        for i in range(m):
            row = x[i, j0:j0 + w]
            for j in range(w):
                v = row[j]
                bad[j] += v - v
                a = abs(v)
                best[j] = a if a > best[j] else best[j]
        for j in range(w):
            out[j0 + j] = best[j] if bad[j] == 0.0 else np.inf


@njit(**_PAR)
def gather_cols(b, idx, out):
    """``out[r, :] = b[:, idx[r]]`` for a C-contiguous ``b`` (k x p): the columns of a
    row-major matrix as contiguous rows, in 64 x 64 blocks (a transposing copy that
    reads ``b`` a row at a time)."""
    k = b.shape[0]
    n = idx.shape[0]
    nb = (n + 63) // 64
    for blk in prange(nb):
        r0 = blk * 64
        r1 = min(n, r0 + 64)
        for k0 in range(0, k, 64):
            for kk in range(k0, min(k, k0 + 64)):
                brow = b[kk]
                for r in range(r0, r1):
                    out[r, kk] = brow[idx[r]]


@njit(**_PAR)
def bound_r_min(w, ca, cb, ia, nb, na, ib, inv_k, rmin, rarg):
    """Per row of a bound-product tile ``w`` (int32): the smallest lower bound
    ``max(w_ij - ca_i - cb_j, 0)**2 inv_k / num_ij**2`` (``num_ij = ia_i nb_j + na_i
    ib_j``; 0 without a divisor in float64's normal range) and its first column
    (``ozlinalg.ozaki.crt._bound_r_min``'s generic code, the same operations per
    entry)."""
    m, p = w.shape
    for i in prange(m):
        buf = np.empty(p)
        cai, iai, nai = ca[i], ia[i], na[i]
        for j in range(p):  # branch-free: vectorizes
            d = float(w[i, j]) - cai - cb[j]
            n = iai * nb[j] + nai * ib[j]
            nn = n * n
            ok = (d > 0.0) & (nn >= 2.0**-1000) & (nn < np.inf)
            v = (d * d) * inv_k / (nn if ok else 1.0)
            buf[j] = v if ok else 0.0
        best = np.inf
        arg = 0
        for j in range(p):
            if buf[j] < best:
                best = buf[j]
                arg = j
        rmin[i] = best
        rarg[i] = arg


@njit(**_PAR)
def crt_bound(x, out):
    """``out[i, j] = -ceil(128 |x[i, j]|)`` (int8): the accurate scaling's bound operand
    (elementwise: the column layout passes the transposes)."""
    rows, k = x.shape
    for i in prange(rows):
        for j in range(k):
            out[i, j] = np.int8(-np.ceil(abs(x[i, j]) * 128.0))


@njit(**_EXACT)
def _reduce_row(prod, pf, pow2, out):
    inv = 1.0 / pf
    h = 0.5 * pf
    if pow2:
        for j in range(prod.shape[0]):
            a = float(prod[j])
            out[j] = np.int8(a - np.floor((a + h) * inv) * pf)
    else:
        for j in range(prod.shape[0]):
            a = float(prod[j])
            out[j] = np.int8(a - np.rint(a * inv) * pf)


@njit(**_PAR)
def crt_reduce(prod, pf, pow2, out):
    """``out = prod mod p`` (symmetric, int8) of an INT32 product (|prod| < 2**31)."""
    for i in prange(prod.shape[0]):
        _reduce_row(prod[i], pf, pow2, out[i])


#: Output columns per step of :func:`crt_combine` (its row buffers stay in L1).
COMBINE_CHUNK = 1024


@njit(**_EXACT)
def _dot4(acc, w0, w1, w2, w3, v0, v1, v2, v3):
    """``acc + (w0 v0 + w1 v1 + w2 v2 + w3 v3)`` of exact integers below 2**53."""
    return acc + (w0 * v0 + w1 * v1 + w2 * v2 + w3 * v3)


@njit(**_OPTS)
def _combine4(qt, lbuf, r0, r1, r2, r3, f, wl):
    """Four moduli's residues into the quotient ``qt += f_u c_u`` (in turn: the generic
    order, no FMA, these products round) and the limbs ``lbuf[l] += sum_u wl[u, l] c_u``
    (exact integers, any order): each residue read and converted once for the quotient
    and the first three limbs, once more per further limb."""
    w = qt.shape[0]
    l0 = lbuf[0, :w]
    l1 = lbuf[1, :w]
    l2 = lbuf[2, :w]
    f0, f1, f2, f3 = f[0], f[1], f[2], f[3]
    a0, a1, a2, a3 = wl[0, 0], wl[1, 0], wl[2, 0], wl[3, 0]
    b0, b1, b2, b3 = wl[0, 1], wl[1, 1], wl[2, 1], wl[3, 1]
    c0, c1, c2, c3 = wl[0, 2], wl[1, 2], wl[2, 2], wl[3, 2]
    for j in range(w):
        v0 = float(r0[j])
        v1 = float(r1[j])
        v2 = float(r2[j])
        v3 = float(r3[j])
        q = qt[j] + f0 * v0
        q = q + f1 * v1
        q = q + f2 * v2
        qt[j] = q + f3 * v3
        l0[j] = _dot4(l0[j], a0, a1, a2, a3, v0, v1, v2, v3)
        l1[j] = _dot4(l1[j], b0, b1, b2, b3, v0, v1, v2, v3)
        l2[j] = _dot4(l2[j], c0, c1, c2, c3, v0, v1, v2, v3)
    for l in range(3, lbuf.shape[0]):
        lb = lbuf[l, :w]
        a0, a1, a2, a3 = wl[0, l], wl[1, l], wl[2, l], wl[3, l]
        for j in range(w):
            lb[j] = _dot4(lb[j], a0, a1, a2, a3, float(r0[j]), float(r1[j]), float(r2[j]),
                          float(r3[j]))


@njit(**_EXACT)
def _crt_balance(qt, lbuf, plimbs, unit, w):
    """``q = rint(quotient)``, limbs ``- q P`` and carries to balanced limbs, on the
    first ``w`` columns: the generic steps; every product here is exact (integers
    below 2**53, powers of two), so FMAs round as they do."""
    nl = plimbs.shape[0]
    inv_unit = 1.0 / unit
    for j in range(w):
        qt[j] = np.rint(qt[j])
    for l in range(nl):
        pl = plimbs[l]
        lb = lbuf[l, :w]
        for j in range(w):
            lb[j] = lb[j] - qt[j] * pl
    for l in range(nl - 1):
        la = lbuf[l, :w]
        lb = lbuf[l + 1, :w]
        for j in range(w):
            carry = np.rint(la[j] * inv_unit)
            la[j] = la[j] - carry * unit
            lb[j] = lb[j] + carry


@njit(**_EXACT)
def _crt_finish(qt, lbuf, plimbs, unit, orow):
    """:func:`_crt_balance` and the top-down combination into ``orow`` (the generic
    steps; exact products, as there)."""
    nl = plimbs.shape[0]
    w = orow.shape[0]
    _crt_balance(qt, lbuf, plimbs, unit, w)
    orow[:] = lbuf[nl - 1, :w]
    for l in range(nl - 2, -1, -1):
        lb = lbuf[l, :w]
        for j in range(w):
            orow[j] = orow[j] * unit + lb[j]


@njit(**_OPTS)
def _crt_sums(res, frac, wlimbs, i, j0, w, qt, lbuf, zero):
    """The quotient ``qt`` and the limb sums ``lbuf[:, :w]`` of row ``i``'s entries
    ``j0 .. j0 + w`` from every modulus' residues, four moduli per pass (a missing one
    is a zero row of weight 0, which adds exact zeros)."""
    nmod = res.shape[0]
    qt[:] = 0.0
    lbuf[:, :w] = 0.0
    for t in range(0, nmod, 4):
        r0 = res[t, i, j0:j0 + w]
        r1 = res[t + 1, i, j0:j0 + w] if t + 1 < nmod else zero[:w]
        r2 = res[t + 2, i, j0:j0 + w] if t + 2 < nmod else zero[:w]
        r3 = res[t + 3, i, j0:j0 + w] if t + 3 < nmod else zero[:w]
        _combine4(qt, lbuf, r0, r1, r2, r3, frac[t:t + 4], wlimbs[t:t + 4])


@njit(**_OPTS)
def crt_combine(res, frac, wlimbs, plimbs, unit, out):
    """C' from the residues ``res[t]`` of every modulus: the generic CRTAccumulator's
    values (quotient ``sum_t frac_t c_t`` added in t order, exact limbs, ``- q P``,
    carries, top-down combination), ``COMBINE_CHUNK`` output entries of a row at a
    time, four moduli per pass (:func:`_combine4`; a missing one is a zero row of
    weight 0, which adds exact zeros). ``frac`` and ``wlimbs`` (at least three limb
    columns, zeros past ``plimbs.shape[0]``) have a multiple of four rows, zeros past
    the moduli."""
    _crt_rebuild(res, frac, wlimbs, plimbs, unit, np.zeros(1), 0.0, out, np.zeros((1, 1)),
                 False)


@njit(**_OPTS)
def crt_combine_faithful(res, frac, wlimbs, plimbs, unit, powers, cu, out, slop):
    """C' as :func:`crt_combine`, rebuilt with TwoSums top limb first (``powers[l] =
    unit**l``), and the bound ``slop`` of its error: the generic
    ``CRTAccumulator.faithful_result``'s operations in its order."""
    _crt_rebuild(res, frac, wlimbs, plimbs, unit, powers, cu, out, slop, True)


@njit(**_PAR)
def _crt_rebuild(res, frac, wlimbs, plimbs, unit, powers, cu, out, slop, faithful):
    """:func:`crt_combine` (``faithful`` False) or :func:`crt_combine_faithful`."""
    nmod, m, p = res.shape
    nl = plimbs.shape[0]
    ch = COMBINE_CHUNK
    zero = np.zeros(ch, np.int8)
    for i in prange(m):
        qbuf = np.empty(ch)
        lbuf = np.empty((wlimbs.shape[1], ch))
        for j0 in range(0, p, ch):
            w = min(ch, p - j0)
            qt = qbuf[:w]
            _crt_sums(res, frac, wlimbs, i, j0, w, qt, lbuf, zero)
            if faithful:
                _crt_balance(qt, lbuf[:nl], plimbs, unit, w)
                # qbuf is free again: the TwoSum's error sum lives there
                _faithful_combine(lbuf, nl, w, powers, cu, qbuf, out[i, j0:j0 + w],
                                  slop[i, j0:j0 + w])
            else:
                _crt_finish(qt, lbuf[:nl], plimbs, unit, out[i, j0:j0 + w])


@njit(**_OPTS)
def _faithful_combine(lbuf, nl, w, powers, cu, ebuf, orow, srow):
    """Columns ``0 .. w`` of the balanced limbs summed top limb first with TwoSums into
    ``orow``, and their error bounds into ``srow`` (``ebuf``: room for the error sums).
    Per column the operations of the generic code in its order; the loops run over the
    columns, so they vectorize."""
    s = orow
    e = ebuf[:w]
    eb = srow
    for jj in range(w):
        s[jj] = lbuf[nl - 1, jj] * powers[nl - 1]
        e[jj] = 0.0
        eb[jj] = 0.0
    for l in range(nl - 2, -1, -1):
        pw = powers[l]
        for jj in range(w):
            t = lbuf[l, jj] * pw
            r = s[jj] + t
            bb = r - s[jj]
            err = (s[jj] - (r - bb)) + (t - bb)
            s[jj] = r
            e[jj] = e[jj] + err
            eb[jj] = eb[jj] + abs(e[jj])
    for jj in range(w):
        sj = s[jj]
        r2 = sj + e[jj]
        bb = r2 - sj
        e2 = (sj - (r2 - bb)) + (e[jj] - bb)
        orow[jj] = r2
        srow[jj] = abs(e2) + cu * eb[jj]


# ---------------------------------------------------------------------------
# FP64 accumulation


@njit(**_PAR)
def axpy(alpha, x, acc):
    """``acc += alpha * x`` (x int32 / int64 / float64), as ``acc += alpha * x``."""
    m, p = acc.shape
    for i in prange(m):
        for j in range(p):
            acc[i, j] = acc[i, j] + alpha * float(x[i, j])


@njit(**_PAR)
def axpy_outer(x, fa, fb, acc):
    """``acc += (x * fa[:, None]) * fb[None, :]`` (the per-slice scales of the
    round-to-nearest split; two separately rounded products, then the add)."""
    m, p = acc.shape
    for i in prange(m):
        f = fa[i]
        for j in range(p):
            acc[i, j] = acc[i, j] + (float(x[i, j]) * f) * fb[j]


@njit(**_PAR)
def finish_ef(acc, g2, g1, g0, w2, w1, w0, alpha, fa, fb, scale):
    """The end of an EF product in one pass: ``top = w2 G2 + w1 G1 + w0 G0`` (exact
    integers, added in this order), ``acc += alpha * top``, and where ``scale``
    ``acc = (acc * fa[:, None]) * fb[None, :]``."""
    m, p = acc.shape
    for i in prange(m):
        f = fa[i]
        for j in range(p):
            t = w2 * float(g2[i, j])
            t = t + w1 * float(g1[i, j])
            t = t + w0 * float(g0[i, j])
            v = acc[i, j] + alpha * t
            if scale:
                v = (v * f) * fb[j]
            acc[i, j] = v


@njit(**_PAR)
def scale_outer(acc, fa, fb):
    """``acc *= fa[:, None]; acc *= fb[None, :]`` (two separately rounded products)."""
    m, p = acc.shape
    for i in prange(m):
        f = fa[i]
        for j in range(p):
            acc[i, j] = (acc[i, j] * f) * fb[j]


# ---------------------------------------------------------------------------
# magnitude estimates (slices="auto")


@njit(**_PAR)
def squares_bf16(x, scale, out):
    """``out = bf16(float32((x * x) * scale))`` (round to nearest even): scaled in
    float64 before the casts, as ``Engine.approx_operand`` does, so that tiny squares
    (down to 2**-149 of the row maximum) are normal numbers on every engine."""
    rows, k = x.shape
    for i in prange(rows):
        for j in range(k):
            f = np.float32((x[i, j] * x[i, j]) * scale)
            u = np.uint32(f.view(np.uint32))
            u = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
            out[i, j] = np.uint16(u >> np.uint32(16))


@njit(**_PAR)
def to_float64(c, scale, out):
    """``out = float64(c) * scale`` (the estimate back from its scaled FP32 form)."""
    m, p = c.shape
    for i in prange(m):
        for j in range(p):
            out[i, j] = float(c[i, j]) * scale


@njit(**_OPTS)
def _interval(v, inv, absf, c_lo, c_hi, slack, d):
    """Bounds of ``r = q / d`` from the estimate ``v`` (``q ~ v * inv``; see
    ``ozlinalg.ozaki.decide.CountPlan``); ``d = 1`` for Ozaki-I."""
    w = v * inv
    lo = (w - absf) * c_lo
    hi = (w + absf) * c_hi
    if d != 1.0:
        ok = d > 0.0 and d < np.inf  # else no divisor to bound with: undecided
        lo = lo / d * (1.0 - slack) if ok else 0.0
        hi = hi / d * (1.0 + slack) if ok else np.inf
    return w, lo, hi


@njit(**_OPTS)
def _num2(ia, nb, na, ib, i, j, has_num):
    if not has_num:
        return 1.0
    n = ia[i] * nb[j] + na[i] * ib[j]
    return n * n


@njit(**_PAR)
def classify_estimate(q, inv, absf, c_lo, c_hi, slack, cap, ia, nb, na, ib, has_num, codes,
                      row_lo, row_hi):
    """Per entry of an estimate: ``codes`` 0 kept (``r >= cap`` for sure), 1 native for
    sure (``r < cap``), 2 undecided (near the cap, or an estimate too small to bound
    below); per row the smallest lower and upper bounds of the kept entries."""
    m, p = q.shape
    for i in prange(m):
        lmin = np.inf
        hmin = np.inf
        lo_r = np.empty(p)
        hi_r = np.empty(p)
        for j in range(p):  # the bounds first, without stores that depend on them (30 %)
            w, lo, hi = _interval(float(q[i, j]), inv, absf, c_lo, c_hi, slack,
                                  _num2(ia, nb, na, ib, i, j, has_num))
            lo_r[j] = 0.0 if w <= 0.0 else lo
            hi_r[j] = hi
        for j in range(p):
            lo = lo_r[j]
            hi = hi_r[j]
            if lo <= 0.0:
                codes[i, j] = 2
            elif hi < cap:
                codes[i, j] = 1
            elif lo < cap:
                codes[i, j] = 2
            else:
                codes[i, j] = 0
                if lo < lmin:
                    lmin = lo
                if hi < hmin:
                    hmin = hi
        row_lo[i] = lmin
        row_hi[i] = hmin


@njit(**_PAR)
def kept_below(q, inv, absf, c_lo, c_hi, slack, ia, nb, na, ib, has_num, codes, bound, row_lo,
               out):
    """``out = codes == 0 and lower bound < bound``: the kept entries that may hold the
    smallest ``r`` (see :func:`classify_estimate`; ``row_lo`` its per-row smallest lower
    bounds: a row whose smallest is not below ``bound`` has no such entry)."""
    m, p = q.shape
    for i in prange(m):
        if not row_lo[i] < bound:
            out[i, :] = False
            continue
        for j in range(p):
            if codes[i, j] == 0:
                _, lo, _ = _interval(float(q[i, j]), inv, absf, c_lo, c_hi, slack,
                                     _num2(ia, nb, na, ib, i, j, has_num))
                out[i, j] = lo < bound
            else:
                out[i, j] = False


# ---------------------------------------------------------------------------
# faithful mode (ozlinalg.ozaki.faithful): the generic operations, in its order


@njit(**_PAR)
def axpy_twosum(alpha, x, acc, comp):
    """``acc + comp += alpha * x`` by TwoSum (``alpha * x`` exact)."""
    m, p = acc.shape
    for i in prange(m):
        for j in range(p):
            v = float(x[i, j]) * alpha
            a = acc[i, j]
            s = a + v
            bb = s - a
            comp[i, j] = comp[i, j] + ((a - (s - bb)) + (v - bb))
            acc[i, j] = s


@njit(**_PAR)
def finish_twosum(acc, comp, top, alpha, cu, slop):
    """``acc <- fl(r + e)`` with ``acc + alpha top = r + e1`` (TwoSum), ``e = e1 + comp``;
    ``slop = |remainder| + cu |e|``."""
    m, p = acc.shape
    for i in prange(m):
        for j in range(p):
            a = acc[i, j]
            t = top[i, j] * alpha
            r = a + t
            bb = r - a
            e1 = (a - (r - bb)) + (t - bb)
            e = e1 + comp[i, j]
            r2 = r + e
            bb = r2 - r
            e2 = (r - (r2 - bb)) + (e - bb)
            acc[i, j] = r2
            slop[i, j] = abs(e2) + cu * abs(e)


@njit(**_PAR)
def abs_row_sums(d, out):
    """``out[i] = sum_k |d[i, k]|`` (int8 digits, exact)."""
    rows, k = d.shape
    for i in prange(rows):
        acc = 0
        for kk in range(k):
            v = np.int64(d[i, kk])
            acc += v if v >= 0 else -v
        out[i] = float(acc)


@njit(**_PAR)
def abs_col_sums(dt, out):
    """``out[r] = sum_k |dt[k, r]|`` (int8 digits stored k x rows, exact)."""
    k, rows = dt.shape
    nb = (rows + 255) // 256
    for b in prange(nb):
        r0 = b * 256
        w = min(rows, r0 + 256) - r0
        acc = np.zeros(w, np.int64)
        for kk in range(k):
            row = dt[kk, r0:r0 + w]  # as in fixed_col_sums
            for r in range(w):
                v = np.int64(row[r])
                acc[r] += v if v >= 0 else -v
        for r in range(w):
            out[r0 + r] = float(acc[r])


@njit(**_OPTS)
def _fixed_unit(v, square):
    """``ceil(w * 2**40)`` as int64 for ``w = v * v`` or ``|v|`` (``decide._fixed_sum``'s
    operations: the product rounds once, the scaling is exact)."""
    w = v * v if square else abs(v)
    return np.int64(math.ceil(w * 2.0**40))


@njit(**_PAR)
def fixed_row_sums(x, square, out):
    """``out[i] = sum_k ceil(w_ik 2**40) 2**-40`` (``w = x**2`` or ``|x|``), the integer
    sum exact in int64: ``ozlinalg.ozaki.decide._fixed_sum``'s value, any order."""
    rows, k = x.shape
    for i in prange(rows):
        acc = 0
        for kk in range(k):
            acc += _fixed_unit(x[i, kk], square)
        out[i] = float(acc) * 2.0**-40


@njit(**_PAR)
def fixed_col_sums(xt, square, out):
    """:func:`fixed_row_sums` of ``xt.T`` (rows stored as columns)."""
    k, rows = xt.shape
    nb = (rows + 255) // 256
    for b in prange(nb):
        r0 = b * 256
        w = min(rows, r0 + 256) - r0
        acc = np.zeros(w, np.int64)
        for kk in range(k):
            row = xt[kk, r0:r0 + w]  # a contiguous slice: the loop vectorizes (4x)
            for r in range(w):
                acc[r] += _fixed_unit(row[r], square)
        for r in range(w):
            out[r0 + r] = float(acc[r]) * 2.0**-40


@njit(**_OPTS)
def _certified(r, bnd, E, slack):
    """The faithful certificate of one entry (``ozlinalg.ozaki.faithful.certify_core``)."""
    if r == 0.0:
        return bnd == 0.0
    mant, e = math.frexp(abs(r))
    ee = e + E
    if ee < -967 or ee > 1023:
        return False
    gap = math.ldexp(1.0, e - 53 - (1 if mant == 0.5 else 0))
    return bnd < gap * (1.0 - slack)


@njit(**_PAR)
def ef_certify(r, slop, sa, wa, ma, nza, sb, wb, mb, nzb, c1, c0, c2, ea, eb, slack, out):
    """Certificate of an EF product (``ozlinalg.ozaki.faithful.EFBound``), one pass."""
    m, p = r.shape
    for i in prange(m):
        for j in range(p):
            if nza[i] and nzb[j]:
                t1 = min(sa[i] + wb[j], sb[j] + wa[i])
                d = c1 * t1 + c0 + c2 * min(ma[i], mb[j])
            else:
                d = 0.0
            bnd = (slop[i, j] + d) * (1.0 + slack)
            out[i, j] = _certified(r[i, j], bnd, ea[i] + eb[j], slack)


@njit(**_PAR)
def crt_certify(r, slop, pa, pb, ra, rb, za, zb, k, ea, eb, slack, out):
    """Certificate of an Ozaki-II product (``ozlinalg.ozaki.faithful.crt_delta``)."""
    m, p = r.shape
    for i in prange(m):
        for j in range(p):
            if za[i] or zb[j]:
                d = 0.0
            else:
                d = (ra[i] * pb[j] + rb[j] * (pa[i] + k * ra[i])) * (1.0 + 2.0**-30)
            bnd = (slop[i, j] + d) * (1.0 + slack)
            out[i, j] = _certified(r[i, j], bnd, ea[i] + eb[j], slack)


@njit(**_PAR)
def exact_dot_limbs(xd, xs, yd, ys, rows, cols, acc):
    """Exact limb sums of dot products (``ozlinalg.ozaki.exactdot``): for entry e,
    ``acc[e, g] = sum`` of the products of the 20-bit digits of ``x = xd[rows[e]]`` and
    ``y = yd[cols[e]]`` whose limb indices (starts ``xs``, ``ys`` plus digit position)
    add up to g. Integers: the order of the additions does not matter."""
    n = rows.shape[0]
    k = xd.shape[1]
    for e in prange(n):
        r = rows[e]
        c = cols[e]
        for kk in range(k):
            bx = xs[r, kk]
            by = ys[c, kk]
            for i in range(4):
                li = xd[r, kk, i]
                if li == 0:
                    continue
                for j in range(4):
                    lj = yd[c, kk, j]
                    if lj != 0:
                        acc[e, bx + by + i + j] += li * lj


@njit(**_PAR)
def exact_digits(rows, digits, start, qmin):
    """``ozlinalg.ozaki.exactdot._digits`` in one pass per row: ``rows[r, k] =
    sum_j digits[r, k, j] 2**(20 (start[r, k] + j) + qmin[r])`` exactly."""
    n, k = rows.shape
    mask = (1 << 20) - 1
    for r in prange(n):
        qm = np.int64(1) << 40
        for kk in range(k):
            v = rows[r, kk]
            if v != 0.0:
                _, e = math.frexp(v)
                if e - 53 < qm:
                    qm = e - 53
        if qm == np.int64(1) << 40:
            qm = 0
        qmin[r] = qm
        for kk in range(k):
            v = rows[r, kk]
            if v == 0.0:
                start[r, kk] = 0
                for j in range(4):
                    digits[r, kk, j] = 0
                continue
            mant, e = math.frexp(abs(v))
            m = np.int64(math.ldexp(mant, 53))
            sh = np.int64(e - 53) - qm
            st = sh // 20
            off = sh - st * 20
            start[r, kk] = st
            sg = -1 if v < 0.0 else 1
            digits[r, kk, 0] = sg * (((m & mask) << off) & mask)
            for j in range(1, 4):
                digits[r, kk, j] = sg * ((m >> (20 * j - off)) & mask)


@njit(**_OPTS)
def _two_prod(x, y):
    """``x y = h + r`` exactly (Dekker: no FMA; |x|, |y| <= 1, no underflow)."""
    h = x * y
    c = 134217729.0 * x  # 2**27 + 1
    xh = c - (c - x)
    xl = x - xh
    c = 134217729.0 * y
    yh = c - (c - y)
    yl = y - yh
    r = xl * yl - (((h - xh * yh) - xl * yh) - xh * yl)
    return h, r


@njit(**_PAR)
def dot2_nearest(a, bt, rows, cols, sa, sb, ea, eb, g2, out, ok):
    """Dot products ``a[rows[e]] . bt[cols[e]]`` by Ogita-Rump-Oishi's Dot2 (TwoProduct,
    TwoSum), rows scaled by the powers of two ``sa``/``sb`` (maxima below 1, exactly),
    kept only where the result is CERTIFIED to be the correctly rounded one:
    ``|p + s - a.b| <= g2 sum |a b|`` (``g2 = gamma_2k**2``) plus the final rounding
    stay below the distance to the nearest rounding boundary, the result is a normal
    number (its exponent with ``ea + eb``), and no product underflowed. ``ok[e]``
    False: use the exact path."""
    n = rows.shape[0]
    k = a.shape[1]
    for e in prange(n):
        i = rows[e]
        j = cols[e]
        fa = sa[i]
        fb = sb[j]
        p = 0.0
        s = 0.0
        absum = 0.0
        safe = True
        for kk in range(k):
            av = a[i, kk]
            bv = bt[j, kk]
            if av == 0.0 or bv == 0.0:
                continue
            x = av * fa
            y = bv * fb
            h, r = _two_prod(x, y)
            if abs(h) < 2.0**-960:  # the error term may be inexact
                safe = False
                break
            t = p + h
            bb = t - p
            q = (p - (t - bb)) + (h - bb)
            p = t
            s = s + (q + r)
            absum = absum + abs(h)
        if not safe:
            ok[e] = False
            continue
        if absum == 0.0:
            out[e] = 0.0
            ok[e] = True
            continue
        r2 = p + s
        bb = r2 - p
        rem = (p - (r2 - bb)) + (s - bb)
        bound = g2 * absum * (1.0 + 2.0**-30)
        if r2 == 0.0:
            ok[e] = False
            continue
        mant, ex = math.frexp(abs(r2))
        ee = ex + ea[i] + eb[j]
        if ee < -967 or ee > 1023:
            ok[e] = False
            continue
        half = math.ldexp(1.0, ex - 54 - (1 if mant == 0.5 else 0))
        if abs(rem) + bound < half * (1.0 - 2.0**-40):
            out[e] = math.ldexp(r2, ea[i] + eb[j])
            ok[e] = True
        else:
            ok[e] = False
