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

/* x y = h + r exactly for |h| >= 2**-960 (or x y = 0): one FMA where the ISA has it
 * (a single rounding of an exact value: the same pair), else Dekker's product. */
OZ_INLINE void
two_prod_fast(double x, double y, double *h_out, double *r_out)
{
#if defined(__FMA__)
    double h = x * y;
    *h_out = h;
    *r_out = fma(x, y, -h);
#else
    two_prod(x, y, h_out, r_out);
#endif
}

/* Dot2 in DOT2_LANES interleaved lanes (lane l takes k = l mod DOT2_LANES within each
 * run of DOT2_LANES, the tail lane by lane), for contiguous rows: the lanes' chains
 * are independent, so the loop vectorizes. Every product x y = h + r (exact,
 * two_prod_fast: |h| >= 2**-960 or an input zero, else the entry goes to the exact path:
 * also where a scaled input underflowed, x y then being below 2**-1022) and
 * every p + h = t + q (TwoSum) is error-free, so the exact dot product is
 * sum_l p_l + sum (q + r); the lanes' p_l are added with TwoSums too, their errors
 * joining the sum of the q + r. That sum S is the only inexact part: each of its
 * floating additions z = fl(x + y) errs by at most u |z| (round to nearest; zero
 * when z is subnormal), so |S_exact - S| <= u A with A the exact sum of those |z|.
 * The kernel adds the |z| in floating point too (nonnegative terms: the computed sum
 * is at least (1 - u)**N times the exact one, N < 2**20 terms), so
 * u A <= u fl(A) (1 + 2**-30); the product rounds up by 2**-1074 at most. With
 * P + S = r2 + rem (TwoSum), |exact - r2| <= |rem| + u fl(A) (1 + 2**-30) + 2**-1074
 * and r2 is the correctly rounded value when this is below half the distance to its
 * neighbours (the 2**-40 slack for the sum's own rounding), as dot2_entry. An a
 * posteriori bound, below dot2_entry's gamma_2k**2 sum |x y| on these inputs. */
#define DOT2_LANES 8

/* One term a b of lane l: TwoProd, TwoSum into p[l], the error q + r into s[l] and the
 * magnitudes of that sum's additions into acc[l] (the bound's A); bad / any flag an
 * underflowed scaled input and a nonzero term. The vector loop and the tail share it. */
OZ_INLINE void
dot2_lane_step(double av, double bv, double fa, double fb, int l, double *restrict p,
               double *restrict s, double *restrict acc, int64_t *restrict bad,
               int64_t *restrict any)
{
    double x = av * fa, y = bv * fb;
    double h, r;
    two_prod_fast(x, y, &h, &r);
    /* of the inputs: a scaled entry that underflows leaves |h| < 2**-960 */
    int64_t nz = (av != 0.0) & (bv != 0.0);
    bad[l] |= nz & (fabs(h) < 0x1p-960);
    any[l] |= nz;
    double t = p[l] + h;
    double bb = t - p[l];
    double q = (p[l] - (t - bb)) + (h - bb);
    p[l] = t;
    double w = q + r;
    double sn = s[l] + w;
    s[l] = sn;
    acc[l] = acc[l] + (fabs(w) + fabs(sn));
}

OZ_INLINE void
dot2_lanes_entry(const double *restrict ai, const double *restrict bj, ptrdiff_t k,
                 double fa, double fb, int64_t eab, double *out, uint8_t *ok)
{
    double p[DOT2_LANES], s[DOT2_LANES], acc[DOT2_LANES];
    int64_t bad[DOT2_LANES], any[DOT2_LANES];
    for (int l = 0; l < DOT2_LANES; l++) {
        p[l] = s[l] = acc[l] = 0.0;
        bad[l] = any[l] = 0;
    }
    ptrdiff_t kv = k - k % DOT2_LANES;
    for (ptrdiff_t kk = 0; kk < kv; kk += DOT2_LANES) {
        for (int l = 0; l < DOT2_LANES; l++)
            dot2_lane_step(ai[kk + l], bj[kk + l], fa, fb, l, p, s, acc, bad, any);
    }
    for (ptrdiff_t kk = kv; kk < k; kk++)
        dot2_lane_step(ai[kk], bj[kk], fa, fb, (int)(kk - kv), p, s, acc, bad, any);
    int64_t fail = 0, some = 0;
    for (int l = 0; l < DOT2_LANES; l++) {
        fail |= bad[l];
        some |= any[l];
    }
    if (fail) { /* an error term may be inexact */
        *ok = 0;
        return;
    }
    if (!some) { /* every product exactly zero */
        *out = 0.0;
        *ok = 1;
        return;
    }
    double P = p[0], S = s[0], A = acc[0];
    for (int l = 1; l < DOT2_LANES; l++) {
        double t = P + p[l];
        double bb = t - P;
        double e = (P - (t - bb)) + (p[l] - bb);
        P = t;
        S = S + s[l];
        A = A + fabs(S);
        S = S + e;
        A = A + fabs(S);
        A = A + acc[l];
    }
    double r2 = P + S;
    double bb = r2 - P;
    double rem = (P - (r2 - bb)) + (S - bb);
    if (r2 == 0.0) {
        *ok = 0;
        return;
    }
    double bound = A * (0x1p-53 * (1.0 + 0x1p-30)) + 0x1p-1074;
    int ex;
    double mant = nb_frexp(fabs(r2), &ex);
    int64_t ee = (int64_t)ex + eab;
    if (ee < -967 || ee > 1023) {
        *ok = 0;
        return;
    }
    double half = nb_ldexp(1.0, ex - 54 - (mant == 0.5 ? 1 : 0));
    if (fabs(rem) + bound < half * (1.0 - 0x1p-40)) {
        *out = nb_ldexp(r2, (int)eab);
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
            dot2_lanes_entry(a + i * a0, bt + j * b0, k, sa[i * sa0], sb[j * sb0], eab,
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
