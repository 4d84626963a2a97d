/* Exact recomputation of single entries (ozlinalg.ozaki.exactdot): 20-bit digits of
 * float64 rows, their exact limb products, Dot2 with a certificate, and a gather of
 * columns. Entries (or rows) are independent, so they run in parallel. Integer sums
 * wrap as numba's int64 arithmetic does (they are formed in uint64), and indices wrap
 * as numba's (a negative index counts from the end). */
#include "kcommon.h"

/* numba's math.frexp / math.ldexp (its helper library): zero, Inf and NaN come back
 * unchanged, with exponent 0; ldexp by 0 returns x itself. */
OZ_INLINE double
nb_frexp(double x, int *e)
{
    if (!isfinite(x) || x == 0.0) {
        *e = 0;
        return x;
    }
    return frexp(x, e);
}

OZ_INLINE double
nb_ldexp(double x, int e)
{
    if (isfinite(x) && x != 0.0 && e != 0)
        return ldexp(x, e);
    return x;
}

OZ_INLINE ptrdiff_t
wrap(int64_t i, ptrdiff_t n)
{
    return i < 0 ? (ptrdiff_t)i + n : (ptrdiff_t)i;
}

/* Python's (and numba's) a // b for b > 0: rounded toward -inf, where C truncates. */
OZ_INLINE int64_t
floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* ---- exact_dot_limbs ----------------------------------------------------------------- */

/* The limb products of entry e into its row ae of acc (the inner strides are 1 in the
 * callers' C-contiguous arrays: that form is instantiated separately). Where the limbs
 * bx + by .. bx + by + 6 lie in the row (always, from exact_digits' starts), the 16 products
 * of an element pair are summed per diagonal first and each of the 7 limbs is updated
 * once: the same wrapping integer sums, in another order, which cannot change them
 * (a zero product adds nothing). Otherwise, numba's loop, index wraparound included. */
OZ_INLINE void
dot_limbs_entry(const int64_t *xr, ptrdiff_t xd1, ptrdiff_t xd2, const int64_t *xsr,
                ptrdiff_t xs1, const int64_t *yc, ptrdiff_t yd1, ptrdiff_t yd2,
                const int64_t *ysc, ptrdiff_t ys1, ptrdiff_t k, uint64_t *ae, ptrdiff_t a1,
                ptrdiff_t width)
{
    for (ptrdiff_t kk = 0; kk < k; kk++) {
        int64_t bx = xsr[kk * xs1], by = ysc[kk * ys1];
        const int64_t *xk = xr + kk * xd1, *yk = yc + kk * yd1;
        uint64_t x0 = (uint64_t)xk[0], x1 = (uint64_t)xk[xd2], x2 = (uint64_t)xk[2 * xd2],
                 x3 = (uint64_t)xk[3 * xd2];
        if ((x0 | x1 | x2 | x3) == 0)
            continue;
        uint64_t y0 = (uint64_t)yk[0], y1 = (uint64_t)yk[yd2], y2 = (uint64_t)yk[2 * yd2],
                 y3 = (uint64_t)yk[3 * yd2];
        if ((y0 | y1 | y2 | y3) == 0)
            continue;
        if (bx + by >= 0 && bx + by + 6 < width) {
            uint64_t *o = ae + (bx + by) * a1;
            o[0] += x0 * y0;
            o[a1] += x0 * y1 + x1 * y0;
            o[2 * a1] += x0 * y2 + x1 * y1 + x2 * y0;
            o[3 * a1] += x0 * y3 + x1 * y2 + x2 * y1 + x3 * y0;
            o[4 * a1] += x1 * y3 + x2 * y2 + x3 * y1;
            o[5 * a1] += x2 * y3 + x3 * y2;
            o[6 * a1] += x3 * y3;
            continue;
        }
        for (int i = 0; i < 4; i++) {
            int64_t li = xk[i * xd2];
            if (li == 0)
                continue;
            for (int j = 0; j < 4; j++) {
                int64_t lj = yk[j * yd2];
                if (lj != 0) {
                    ptrdiff_t g = wrap(bx + by + i + j, width);
                    ae[g * a1] += (uint64_t)li * (uint64_t)lj;
                }
            }
        }
    }
}

int
k_exact_dot_limbs(ozval *v, int nt)
{
    const int64_t *xd = OZ_I64(0), *xs = OZ_I64(1), *yd = OZ_I64(2), *ys = OZ_I64(3);
    const int64_t *rows = OZ_I64(4), *cols = OZ_I64(5);
    int64_t *acc = OZ_I64(6);
    ptrdiff_t n = OZ_N(4, 0), k = OZ_N(0, 1), nx = OZ_N(0, 0), ny = OZ_N(2, 0);
    ptrdiff_t width = OZ_N(6, 1);
    ptrdiff_t xd0 = OZ_S(0, 0), xd1 = OZ_S(0, 1), xd2 = OZ_S(0, 2);
    ptrdiff_t xs0 = OZ_S(1, 0), xs1 = OZ_S(1, 1);
    ptrdiff_t yd0 = OZ_S(2, 0), yd1 = OZ_S(2, 1), yd2 = OZ_S(2, 2);
    ptrdiff_t ys0 = OZ_S(3, 0), ys1 = OZ_S(3, 1);
    ptrdiff_t r0 = OZ_S(4, 0), c0 = OZ_S(5, 0), a0 = OZ_S(6, 0), a1 = OZ_S(6, 1);
    if (OZ_N(5, 0) < n || OZ_N(6, 0) < n || OZ_N(0, 2) < 4 || OZ_N(2, 2) < 4
        || OZ_N(2, 1) < k || OZ_N(1, 1) < k || OZ_N(3, 1) < k)
        return OZK_BADLAYOUT;
    int unit = xd2 == 1 && yd2 == 1 && xd1 == 4 && yd1 == 4 && xs1 == 1 && ys1 == 1 && a1 == 1;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t e = 0; e < n; e++) {
        ptrdiff_t r = wrap(rows[e * r0], nx), c = wrap(cols[e * c0], ny);
        uint64_t *ae = (uint64_t *)(acc + e * a0);
        if (unit)
            dot_limbs_entry(xd + r * xd0, 4, 1, xs + r * xs0, 1, yd + c * yd0, 4, 1,
                            ys + c * ys0, 1, k, ae, 1, width);
        else
            dot_limbs_entry(xd + r * xd0, xd1, xd2, xs + r * xs0, xs1, yd + c * yd0, yd1,
                            yd2, ys + c * ys0, ys1, k, ae, a1, width);
    }
    return 0;
}

/* ---- exact_digits -------------------------------------------------------------------- */

OZ_INLINE void
digits_row(const double *row, ptrdiff_t x1, ptrdiff_t k, int64_t *digits, ptrdiff_t d1,
           ptrdiff_t d2, int64_t *start, ptrdiff_t s1, int64_t *qmin)
{
    const int64_t mask = (INT64_C(1) << 20) - 1, none = INT64_C(1) << 40;
    int64_t qm = none;
    for (ptrdiff_t kk = 0; kk < k; kk++) {
        double x = row[kk * x1];
        if (x != 0.0) {
            int e;
            nb_frexp(x, &e);
            if ((int64_t)e - 53 < qm)
                qm = (int64_t)e - 53;
        }
    }
    if (qm == none)
        qm = 0;
    *qmin = qm;
    for (ptrdiff_t kk = 0; kk < k; kk++) {
        double x = row[kk * x1];
        int64_t *dig = digits + kk * d1;
        if (x == 0.0) {
            start[kk * s1] = 0;
            for (int j = 0; j < 4; j++)
                dig[j * d2] = 0;
            continue;
        }
        int e;
        double mant = nb_frexp(fabs(x), &e);
        double md = nb_ldexp(mant, 53);
        /* Inf / NaN (never from the callers' finite rows): INT64_MIN, as numba's
         * conversion gives; C leaves it undefined */
        int64_t m = md < 0x1p63 ? (int64_t)md : INT64_MIN;
        int64_t sh = ((int64_t)e - 53) - qm;
        int64_t st = floor_div(sh, 20);
        int64_t off = sh - st * 20;
        start[kk * s1] = st;
        int64_t sg = x < 0.0 ? -1 : 1;
        dig[0] = sg * (((m & mask) << off) & mask);
        for (int j = 1; j < 4; j++)
            dig[j * d2] = sg * ((m >> (20 * j - off)) & mask);
    }
}

int
k_exact_digits(ozval *v, int nt)
{
    const double *rows = OZ_D(0);
    int64_t *digits = OZ_I64(1), *start = OZ_I64(2), *qmin = OZ_I64(3);
    ptrdiff_t n = OZ_N(0, 0), k = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);
    ptrdiff_t d0 = OZ_S(1, 0), d1 = OZ_S(1, 1), d2 = OZ_S(1, 2);
    ptrdiff_t s0 = OZ_S(2, 0), s1 = OZ_S(2, 1), q0 = OZ_S(3, 0);
    if (OZ_N(1, 0) < n || OZ_N(1, 1) < k || OZ_N(1, 2) < 4 || OZ_N(2, 0) < n
        || OZ_N(2, 1) < k || OZ_N(3, 0) < n)
        return OZK_BADLAYOUT;
    int unit = x1 == 1 && d1 == 4 && d2 == 1 && s1 == 1;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t r = 0; r < n; r++) {
        if (unit)
            digits_row(rows + r * x0, 1, k, digits + r * d0, 4, 1, start + r * s0, 1,
                       qmin + r * q0);
        else
            digits_row(rows + r * x0, x1, k, digits + r * d0, d1, d2, start + r * s0, s1,
                       qmin + r * q0);
    }
    return 0;
}

/* ---- dot2_nearest -------------------------------------------------------------------- */

/* x y = h + r exactly (Dekker, no FMA: the build never contracts). */
OZ_INLINE void
two_prod(double x, double y, double *h_out, double *r_out)
{
    double h = x * y;
    double c = 134217729.0 * x; /* 2**27 + 1 */
    double xh = c - (c - x);
    double xl = x - xh;
    c = 134217729.0 * y;
    double yh = c - (c - y);
    double yl = y - yh;
    *h_out = h;
    *r_out = xl * yl - (((h - xh * yh) - xl * yh) - xh * yl);
}

OZ_INLINE void
dot2_entry(const double *ai, const double *bj, ptrdiff_t as, ptrdiff_t bs, ptrdiff_t k,
           double fa, double fb, int64_t eab, double g2, double *out, uint8_t *ok)
{
    double p = 0.0, s = 0.0, absum = 0.0;
    for (ptrdiff_t kk = 0; kk < k; kk++) {
        double av = ai[kk * as], bv = bj[kk * bs];
        if (av == 0.0 || bv == 0.0)
            continue;
        double h, r;
        two_prod(av * fa, bv * fb, &h, &r);
        if (fabs(h) < 0x1p-960) { /* the error term may be inexact */
            *ok = 0;
            return;
        }
        double t = p + h;
        double bb = t - p;
        double q = (p - (t - bb)) + (h - bb);
        p = t;
        s = s + (q + r);
        absum = absum + fabs(h);
    }
    if (absum == 0.0) {
        *out = 0.0;
        *ok = 1;
        return;
    }
    double r2 = p + s;
    double bb = r2 - p;
    double rem = (p - (r2 - bb)) + (s - bb);
    double bound = g2 * absum * (1.0 + 0x1p-30);
    if (r2 == 0.0) {
        *ok = 0;
        return;
    }
    int ex;
    double mant = nb_frexp(fabs(r2), &ex);
    int64_t ee = (int64_t)ex + eab;
    if (ee < -967 || ee > 1023) {
        *ok = 0;
        return;
    }
    double half = nb_ldexp(1.0, ex - 54 - (mant == 0.5 ? 1 : 0));
    if (fabs(rem) + bound < half * (1.0 - 0x1p-40)) {
        *out = nb_ldexp(r2, (int)eab); /* numba passes the int64 sum as a C int */
        *ok = 1;
    } else {
        *ok = 0;
    }
}

int
k_dot2_nearest(ozval *v, int nt)
{
    const double *a = OZ_D(0), *bt = OZ_D(1), *sa = OZ_D(4), *sb = OZ_D(5);
    const int64_t *rows = OZ_I64(2), *cols = OZ_I64(3), *ea = OZ_I64(6), *eb = OZ_I64(7);
    double g2 = v[8].d;
    double *out = OZ_D(9);
    uint8_t *ok = OZ_B(10);
    ptrdiff_t n = OZ_N(2, 0), k = OZ_N(0, 1), na = OZ_N(0, 0), nbt = OZ_N(1, 0);
    ptrdiff_t a0 = OZ_S(0, 0), a1 = OZ_S(0, 1), b0 = OZ_S(1, 0), b1 = OZ_S(1, 1);
    ptrdiff_t r0 = OZ_S(2, 0), c0 = OZ_S(3, 0), sa0 = OZ_S(4, 0), sb0 = OZ_S(5, 0);
    ptrdiff_t ea0 = OZ_S(6, 0), eb0 = OZ_S(7, 0), o0 = OZ_S(9, 0), k0 = OZ_S(10, 0);
    if (OZ_N(1, 1) < k || OZ_N(3, 0) < n || OZ_N(9, 0) < n || OZ_N(10, 0) < n
        || OZ_N(4, 0) < na || OZ_N(6, 0) < na || OZ_N(5, 0) < nbt || OZ_N(7, 0) < nbt)
        return OZK_BADLAYOUT;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t e = 0; e < n; e++) {
        ptrdiff_t i = wrap(rows[e * r0], na), j = wrap(cols[e * c0], nbt);
        int64_t eab = ea[i * ea0] + eb[j * eb0];
        if (a1 == 1 && b1 == 1)
            dot2_entry(a + i * a0, bt + j * b0, 1, 1, k, sa[i * sa0], sb[j * sb0], eab, g2,
                       out + e * o0, ok + e * k0);
        else
            dot2_entry(a + i * a0, bt + j * b0, a1, b1, k, sa[i * sa0], sb[j * sb0], eab, g2,
                       out + e * o0, ok + e * k0);
    }
    return 0;
}

/* ---- gather_cols --------------------------------------------------------------------- */

/* out[r, :] = b[:, idx[r]] (b is k x p) in 64 x 64 blocks: a transposing copy that reads
 * b a row at a time. */
int
k_gather_cols(ozval *v, int nt)
{
    const double *b = OZ_D(0);
    const int64_t *idx = OZ_I64(1);
    double *out = OZ_D(2);
    ptrdiff_t k = OZ_N(0, 0), p = OZ_N(0, 1), n = OZ_N(1, 0);
    ptrdiff_t b0 = OZ_S(0, 0), b1 = OZ_S(0, 1), i0 = OZ_S(1, 0);
    ptrdiff_t o0 = OZ_S(2, 0), o1 = OZ_S(2, 1);
    ptrdiff_t nb = (n + 63) / 64;
    if (OZ_N(2, 0) < n || OZ_N(2, 1) < k)
        return OZK_BADLAYOUT;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t blk = 0; blk < nb; blk++) {
        ptrdiff_t r0 = blk * 64, w = OZ_MIN(n, r0 + 64) - r0;
        ptrdiff_t col[64];
        for (ptrdiff_t r = 0; r < w; r++)
            col[r] = wrap(idx[(r0 + r) * i0], p) * b1;
        for (ptrdiff_t k0 = 0; k0 < k; k0 += 64) {
            ptrdiff_t k1 = OZ_MIN(k, k0 + 64);
            for (ptrdiff_t kk = k0; kk < k1; kk++) {
                const double *brow = b + kk * b0;
                double *ocol = out + r0 * o0 + kk * o1;
                for (ptrdiff_t r = 0; r < w; r++)
                    ocol[r * o0] = brow[col[r]];
            }
        }
    }
    return 0;
}
