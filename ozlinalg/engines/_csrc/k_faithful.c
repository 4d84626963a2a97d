/* The faithful mode's passes (ozlinalg.ozaki.faithful): the generic operations in its
 * order, one pass each. TwoSums are elementwise, the exact sums are integer sums (any
 * order gives the same value), so rows or column blocks run in parallel. */
#include "kcommon.h"
#include "kfixed.h"

/* Elements per parallel block of an elementwise pass over C-contiguous operands. */
#define OZ_RUN 16384

#define OZ_CONTIG2(k) (OZ_S(k, 1) == 1 && (OZ_N(k, 0) <= 1 || OZ_S(k, 0) == OZ_N(k, 1)))
#define OZ_SAME_SHAPE(a, b) (OZ_N(a, 0) == OZ_N(b, 0) && OZ_N(a, 1) == OZ_N(b, 1))

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

/* Python's min(a, b) (numba keeps its order): b only where b < a. */
OZ_INLINE double
py_min(double a, double b)
{
    return b < a ? b : a;
}

/* ---- axpy_twosum: acc + comp += float(x) * alpha --------------------------------------- */

#define OZ_TWOSUM(T, SUF)                                                                \
    OZ_INLINE void                                                                      \
    twosum_run_##SUF(double alpha, const T *x, ptrdiff_t xs, double *acc, ptrdiff_t as, \
                     double *comp, ptrdiff_t cs, ptrdiff_t n)                           \
    {                                                                                   \
        for (ptrdiff_t j = 0; j < n; j++) {                                             \
            double val = (double)x[j * xs] * alpha;                                     \
            double a = acc[j * as];                                                     \
            double s = a + val;                                                         \
            double bb = s - a;                                                          \
            comp[j * cs] = comp[j * cs] + ((a - (s - bb)) + (val - bb));                \
            acc[j * as] = s;                                                            \
        }                                                                               \
    }                                                                                   \
                                                                                        \
    static void                                                                         \
    axpy_twosum_##SUF(ozval *v, int nt)                                                 \
    {                                                                                   \
        double alpha = v[0].d;                                                          \
        const T *x = (const T *)v[1].a.p;                                               \
        double *acc = OZ_D(2), *comp = OZ_D(3);                                         \
        ptrdiff_t m = OZ_N(2, 0), p = OZ_N(2, 1);                                       \
        if (OZ_CONTIG2(1) && OZ_CONTIG2(2) && OZ_CONTIG2(3)) {                          \
            ptrdiff_t total = m * p, nb = (total + OZ_RUN - 1) / OZ_RUN;                \
            OZ_PARALLEL_FOR(nt)                                                         \
            for (ptrdiff_t b = 0; b < nb; b++) {                                        \
                ptrdiff_t j0 = b * OZ_RUN;                                              \
                twosum_run_##SUF(alpha, x + j0, 1, acc + j0, 1, comp + j0, 1,           \
                                 OZ_MIN(total, j0 + OZ_RUN) - j0);                      \
            }                                                                           \
            return;                                                                     \
        }                                                                               \
        ptrdiff_t x0 = OZ_S(1, 0), x1 = OZ_S(1, 1), a0 = OZ_S(2, 0), a1 = OZ_S(2, 1);   \
        ptrdiff_t c0 = OZ_S(3, 0), c1 = OZ_S(3, 1);                                     \
        OZ_PARALLEL_FOR(nt)                                                             \
        for (ptrdiff_t i = 0; i < m; i++) {                                             \
            if (x1 == 1 && a1 == 1 && c1 == 1)                                          \
                twosum_run_##SUF(alpha, x + i * x0, 1, acc + i * a0, 1, comp + i * c0,  \
                                 1, p);                                                 \
            else                                                                        \
                twosum_run_##SUF(alpha, x + i * x0, x1, acc + i * a0, a1,               \
                                 comp + i * c0, c1, p);                                 \
        }                                                                               \
    }

OZ_TWOSUM(int32_t, i)
OZ_TWOSUM(int64_t, l)
OZ_TWOSUM(double, d)

int
k_axpy_twosum(ozval *v, int nt)
{
    if (!OZ_SAME_SHAPE(1, 2) || !OZ_SAME_SHAPE(2, 3))
        return OZK_BADLAYOUT;
    switch (v[1].a.t) {
    case 'i': axpy_twosum_i(v, nt); break;
    case 'l': axpy_twosum_l(v, nt); break;
    default: axpy_twosum_d(v, nt); break;
    }
    return 0;
}

/* ---- finish_twosum ------------------------------------------------------------------- */

OZ_INLINE void
finish_twosum_run(double *acc, ptrdiff_t as, const double *comp, ptrdiff_t cs,
                  const double *top, ptrdiff_t ts, double alpha, double cu, double *slop,
                  ptrdiff_t ss, ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++) {
        double a = acc[j * as];
        double t = top[j * ts] * alpha;
        double r = a + t;
        double bb = r - a;
        double e1 = (a - (r - bb)) + (t - bb);
        double e = e1 + comp[j * cs];
        double r2 = r + e;
        bb = r2 - r;
        double e2 = (r - (r2 - bb)) + (e - bb);
        acc[j * as] = r2;
        slop[j * ss] = fabs(e2) + cu * fabs(e);
    }
}

int
k_finish_twosum(ozval *v, int nt)
{
    double *acc = OZ_D(0), *slop = OZ_D(5);
    const double *comp = OZ_D(1), *top = OZ_D(2);
    double alpha = v[3].d, cu = v[4].d;
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1);
    if (!OZ_SAME_SHAPE(0, 1) || !OZ_SAME_SHAPE(0, 2) || !OZ_SAME_SHAPE(0, 5))
        return OZK_BADLAYOUT;
    if (OZ_CONTIG2(0) && OZ_CONTIG2(1) && OZ_CONTIG2(2) && OZ_CONTIG2(5)) {
        ptrdiff_t total = m * p, nb = (total + OZ_RUN - 1) / OZ_RUN;
        OZ_PARALLEL_FOR(nt)
        for (ptrdiff_t b = 0; b < nb; b++) {
            ptrdiff_t j0 = b * OZ_RUN;
            finish_twosum_run(acc + j0, 1, comp + j0, 1, top + j0, 1, alpha, cu, slop + j0,
                              1, OZ_MIN(total, j0 + OZ_RUN) - j0);
        }
        return 0;
    }
    ptrdiff_t a0 = OZ_S(0, 0), a1 = OZ_S(0, 1), c0 = OZ_S(1, 0), c1 = OZ_S(1, 1);
    ptrdiff_t t0 = OZ_S(2, 0), t1 = OZ_S(2, 1), s0 = OZ_S(5, 0), s1 = OZ_S(5, 1);
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < m; i++) {
        if (a1 == 1 && c1 == 1 && t1 == 1 && s1 == 1)
            finish_twosum_run(acc + i * a0, 1, comp + i * c0, 1, top + i * t0, 1, alpha, cu,
                              slop + i * s0, 1, p);
        else
            finish_twosum_run(acc + i * a0, a1, comp + i * c0, c1, top + i * t0, t1, alpha,
                              cu, slop + i * s0, s1, p);
    }
    return 0;
}

/* ---- exact sums of |digits|: abs_digit_sum (kfixed.h) ---- */

int
k_abs_row_sums(ozval *v, int nt)
{
    const int8_t *d = OZ_I8(0);
    double *out = OZ_D(1);
    ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1), d0 = OZ_S(0, 0), d1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(1, 0);
    if (OZ_N(1, 0) < rows)
        return OZK_BADLAYOUT;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < rows; i++) {
        int64_t acc = d1 == 1 ? abs_digit_sum(d + i * d0, 1, k)
                              : abs_digit_sum(d + i * d0, d1, k);
        out[i * o0] = (double)acc;
    }
    return 0;
}

/* Column sums of dt (k x rows) in blocks of 256 columns, as the numba kernel. */
#define OZ_COLS 256

OZ_INLINE void
abs_col_block(const int8_t *dt, ptrdiff_t k, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t w,
              int64_t *acc)
{
    int32_t part[OZ_COLS];
    for (ptrdiff_t r = 0; r < w; r++)
        acc[r] = 0;
    for (ptrdiff_t k0 = 0; k0 < k; k0 += OZ_DIGIT_RUN) {
        ptrdiff_t k1 = OZ_MIN(k, k0 + OZ_DIGIT_RUN);
        for (ptrdiff_t r = 0; r < w; r++)
            part[r] = 0;
        for (ptrdiff_t kk = k0; kk < k1; kk++) {
            const int8_t *row = dt + kk * s0;
            for (ptrdiff_t r = 0; r < w; r++) {
                int32_t x = row[r * s1];
                part[r] += x >= 0 ? x : -x;
            }
        }
        for (ptrdiff_t r = 0; r < w; r++)
            acc[r] += part[r];
    }
}

int
k_abs_col_sums(ozval *v, int nt)
{
    const int8_t *dt = OZ_I8(0);
    double *out = OZ_D(1);
    ptrdiff_t k = OZ_N(0, 0), rows = OZ_N(0, 1), s0 = OZ_S(0, 0), s1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(1, 0), nb = (rows + OZ_COLS - 1) / OZ_COLS;
    if (OZ_N(1, 0) < rows)
        return OZK_BADLAYOUT;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t b = 0; b < nb; b++) {
        ptrdiff_t r0 = b * OZ_COLS, w = OZ_MIN(rows, r0 + OZ_COLS) - r0;
        int64_t acc[OZ_COLS];
        if (s1 == 1)
            abs_col_block(dt + r0, k, s0, 1, w, acc);
        else
            abs_col_block(dt + r0 * s1, k, s0, s1, w, acc);
        for (ptrdiff_t r = 0; r < w; r++)
            out[(r0 + r) * o0] = (double)acc[r];
    }
    return 0;
}

/* ---- exact fixed-point sums: fixed_unit, fixed_fast and fixed_row (kfixed.h) ---- */

int
k_fixed_row_sums(ozval *v, int nt)
{
    const double *x = OZ_D(0);
    int square = v[1].i != 0;
    double *out = OZ_D(2);
    ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(2, 0);
    if (OZ_N(2, 0) < rows)
        return OZK_BADLAYOUT;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < rows; i++) {
        const double *xi = x + i * x0;
        uint64_t acc;
        if (x1 == 1)
            acc = square ? fixed_row(xi, 1, k, 1) : fixed_row(xi, 1, k, 0);
        else
            acc = fixed_row(xi, x1, k, square);
        out[i * o0] = (double)(int64_t)acc * 0x1p-40;
    }
    return 0;
}

/* Column sums of a block of w columns (as fixed_row: the packed conversion at AVX-512,
 * elsewhere fixed_fast, then fixed_unit for the whole block where that does not apply). */
OZ_INLINE void
fixed_col_block(const double *xt, ptrdiff_t k, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t w,
                int square, uint64_t *acc)
{
    for (ptrdiff_t r = 0; r < w; r++)
        acc[r] = 0;
#if !defined(__AVX512DQ__)
    uint64_t bad[OZ_COLS], any = 0;
    for (ptrdiff_t r = 0; r < w; r++)
        bad[r] = 0;
    for (ptrdiff_t kk = 0; kk < k; kk++) {
        const double *row = xt + kk * s0;
        for (ptrdiff_t r = 0; r < w; r++)
            acc[r] += fixed_fast(row[r * s1], square, bad + r);
    }
    for (ptrdiff_t r = 0; r < w; r++)
        any |= bad[r];
    if (!OZ_FIXED_BAD(any))
        return;
    for (ptrdiff_t r = 0; r < w; r++)
        acc[r] = 0;
#endif
    for (ptrdiff_t kk = 0; kk < k; kk++) {
        const double *row = xt + kk * s0;
        for (ptrdiff_t r = 0; r < w; r++)
            acc[r] += fixed_unit(row[r * s1], square);
    }
}

int
k_fixed_col_sums(ozval *v, int nt)
{
    const double *xt = OZ_D(0);
    int square = v[1].i != 0;
    double *out = OZ_D(2);
    ptrdiff_t k = OZ_N(0, 0), rows = OZ_N(0, 1), s0 = OZ_S(0, 0), s1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(2, 0), nb = (rows + OZ_COLS - 1) / OZ_COLS;
    if (OZ_N(2, 0) < rows)
        return OZK_BADLAYOUT;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t b = 0; b < nb; b++) {
        ptrdiff_t r0 = b * OZ_COLS, w = OZ_MIN(rows, r0 + OZ_COLS) - r0;
        uint64_t acc[OZ_COLS];
        if (s1 == 1 && square)
            fixed_col_block(xt + r0, k, s0, 1, w, 1, acc);
        else if (s1 == 1)
            fixed_col_block(xt + r0, k, s0, 1, w, 0, acc);
        else
            fixed_col_block(xt + r0 * s1, k, s0, s1, w, square, acc);
        for (ptrdiff_t r = 0; r < w; r++)
            out[(r0 + r) * o0] = (double)(int64_t)acc[r] * 0x1p-40;
    }
    return 0;
}

/* ---- certificates -------------------------------------------------------------------- */

/* ozlinalg.ozaki.faithful.certify_core of one entry. A normal |r| of biased exponent
 * be in [54, 2046] has frexp's exponent be - 1022 and mantissa 0.5 exactly when its
 * fraction bits are zero; the gap 2**(be - 1075 - pow2) is then a normal number,
 * built from its bits (the same value as ldexp, without the libm calls). */
OZ_INLINE uint8_t
certified(double r, double bnd, int64_t E, double slack)
{
    if (r == 0.0)
        return bnd == 0.0;
    double ar = fabs(r);
    uint64_t bits;
    memcpy(&bits, &ar, sizeof bits);
    int64_t be = (int64_t)(bits >> 52);
    if (be >= 54 && be <= 2046) {
        int64_t pow2 = (bits & 0xFFFFFFFFFFFFFull) == 0;
        int64_t ee = be - 1022 + E;
        uint64_t gbits = (uint64_t)(be - 52 - pow2) << 52;
        double gap;
        memcpy(&gap, &gbits, sizeof gap);
        return (ee >= -967) & (ee <= 1023) & (bnd < gap * (1.0 - slack));
    }
    int e;
    double mant = nb_frexp(fabs(r), &e);
    int64_t ee = (int64_t)e + E;
    if (ee < -967 || ee > 1023)
        return 0;
    double gap = nb_ldexp(1.0, e - 53 - (mant == 0.5 ? 1 : 0));
    return bnd < gap * (1.0 - slack);
}

int
k_ef_certify(ozval *v, int nt)
{
    const double *r = OZ_D(0), *slop = OZ_D(1);
    const double *sa = OZ_D(2), *wa = OZ_D(3), *ma = OZ_D(4);
    const uint8_t *nza = OZ_B(5);
    const double *sb = OZ_D(6), *wb = OZ_D(7), *mb = OZ_D(8);
    const uint8_t *nzb = OZ_B(9);
    double c1 = v[10].d, c0 = v[11].d, c2 = v[12].d;
    const int64_t *ea = OZ_I64(13), *eb = OZ_I64(14);
    double slack = v[15].d;
    uint8_t *out = OZ_B(16);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1);
    if (!OZ_SAME_SHAPE(0, 1) || !OZ_SAME_SHAPE(0, 16))
        return OZK_BADLAYOUT;
    for (int q = 2; q <= 5; q++)
        if (OZ_N(q, 0) < m || OZ_N(q + 4, 0) < p)
            return OZK_BADLAYOUT;
    if (OZ_N(13, 0) < m || OZ_N(14, 0) < p)
        return OZK_BADLAYOUT;
    ptrdiff_t r0 = OZ_S(0, 0), r1 = OZ_S(0, 1), l0 = OZ_S(1, 0), l1 = OZ_S(1, 1);
    ptrdiff_t o0 = OZ_S(16, 0), o1 = OZ_S(16, 1);
    ptrdiff_t sa0 = OZ_S(2, 0), wa0 = OZ_S(3, 0), ma0 = OZ_S(4, 0), na0 = OZ_S(5, 0);
    ptrdiff_t sb0 = OZ_S(6, 0), wb0 = OZ_S(7, 0), mb0 = OZ_S(8, 0), nb0 = OZ_S(9, 0);
    ptrdiff_t ea0 = OZ_S(13, 0), eb0 = OZ_S(14, 0);
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < m; i++) {
        double sai = sa[i * sa0], wai = wa[i * wa0], mai = ma[i * ma0];
        int nzi = nza[i * na0] != 0;
        int64_t eai = ea[i * ea0];
        for (ptrdiff_t j = 0; j < p; j++) {
            double d;
            if (nzi && nzb[j * nb0]) {
                double t1 = py_min(sai + wb[j * wb0], sb[j * sb0] + wai);
                d = c1 * t1 + c0 + c2 * py_min(mai, mb[j * mb0]);
            } else {
                d = 0.0;
            }
            double bnd = (slop[i * l0 + j * l1] + d) * (1.0 + slack);
            out[i * o0 + j * o1] = certified(r[i * r0 + j * r1], bnd, eai + eb[j * eb0], slack);
        }
    }
    return 0;
}

int
k_crt_certify(ozval *v, int nt)
{
    const double *r = OZ_D(0), *slop = OZ_D(1);
    const double *pa = OZ_D(2), *pb = OZ_D(3), *ra = OZ_D(4), *rb = OZ_D(5);
    const uint8_t *za = OZ_B(6), *zb = OZ_B(7);
    double k = v[8].d;
    const int64_t *ea = OZ_I64(9), *eb = OZ_I64(10);
    double slack = v[11].d;
    uint8_t *out = OZ_B(12);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1);
    if (!OZ_SAME_SHAPE(0, 1) || !OZ_SAME_SHAPE(0, 12))
        return OZK_BADLAYOUT;
    if (OZ_N(2, 0) < m || OZ_N(4, 0) < m || OZ_N(6, 0) < m || OZ_N(9, 0) < m
        || OZ_N(3, 0) < p || OZ_N(5, 0) < p || OZ_N(7, 0) < p || OZ_N(10, 0) < p)
        return OZK_BADLAYOUT;
    ptrdiff_t r0 = OZ_S(0, 0), r1 = OZ_S(0, 1), l0 = OZ_S(1, 0), l1 = OZ_S(1, 1);
    ptrdiff_t o0 = OZ_S(12, 0), o1 = OZ_S(12, 1);
    ptrdiff_t pa0 = OZ_S(2, 0), pb0 = OZ_S(3, 0), ra0 = OZ_S(4, 0), rb0 = OZ_S(5, 0);
    ptrdiff_t za0 = OZ_S(6, 0), zb0 = OZ_S(7, 0), ea0 = OZ_S(9, 0), eb0 = OZ_S(10, 0);
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < m; i++) {
        double pai = pa[i * pa0], rai = ra[i * ra0];
        int zi = za[i * za0] != 0;
        int64_t eai = ea[i * ea0];
        for (ptrdiff_t j = 0; j < p; j++) {
            double d;
            if (zi || zb[j * zb0])
                d = 0.0;
            else
                d = (rai * pb[j * pb0] + rb[j * rb0] * (pai + k * rai)) * (1.0 + 0x1p-30);
            double bnd = (slop[i * l0 + j * l1] + d) * (1.0 + slack);
            out[i * o0 + j * o1] = certified(r[i * r0 + j * r1], bnd, eai + eb[j * eb0], slack);
        }
    }
    return 0;
}
