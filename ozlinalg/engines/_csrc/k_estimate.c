/* Magnitude estimates of slices="auto" / moduli="auto" (ozlinalg.ozaki.counts.estimate). */
#include "kcommon.h"

/* bf16 bits of f (round to nearest even; uint32 arithmetic wraps as NumPy's does). */
OZ_INLINE uint16_t
bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = u + 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

OZ_INLINE uint16_t
square_bf16(double x, double scale)
{
    return bf16_bits((float)((x * x) * scale));
}

/* float32((x * x) * scale): the bits of NumPy's (x * x * scale).astype(float32), scale a
 * power of two (the FP32 estimate's operand). */
OZ_INLINE float
square_f32(double x, double scale)
{
    return (float)((x * x) * scale);
}

/* out[i, j] = CONV(x[i, j], scale) for the 2-D x and out of arguments 0 and 2 (row
 * loops split over the threads, a unit-stride run where both rows are contiguous). */
#define SQUARES_KERNEL(NAME, OUT_T, OUT_ARG, CONV)                                         \
    OZ_INLINE void NAME##_run(const double *restrict x, ptrdiff_t xs, double scale,        \
                              OUT_T *restrict o, ptrdiff_t os, ptrdiff_t n)                \
    {                                                                                      \
        for (ptrdiff_t j = 0; j < n; j++)                                                  \
            o[j * os] = CONV(x[j * xs], scale);                                            \
    }                                                                                      \
    int k_##NAME(ozval *v, int nt)                                                         \
    {                                                                                      \
        const double *x = OZ_D(0);                                                         \
        double scale = v[1].d;                                                             \
        OUT_T *out = OUT_ARG(2);                                                           \
        ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);     \
        ptrdiff_t o0 = OZ_S(2, 0), o1 = OZ_S(2, 1);                                        \
        if (OZ_N(2, 0) < rows || OZ_N(2, 1) < k)                                           \
            return OZK_BADLAYOUT;                                                          \
        OZ_PARALLEL_FOR(nt)                                                                \
        for (ptrdiff_t i = 0; i < rows; i++) {                                             \
            if (x1 == 1 && o1 == 1)                                                        \
                NAME##_run(x + i * x0, 1, scale, out + i * o0, 1, k);                      \
            else                                                                           \
                NAME##_run(x + i * x0, x1, scale, out + i * o0, o1, k);                    \
        }                                                                                  \
        return 0;                                                                          \
    }

SQUARES_KERNEL(squares_bf16, uint16_t, OZ_U16, square_bf16)
SQUARES_KERNEL(squares_f32, float, OZ_F, square_f32)

OZ_INLINE void
widen_run(const float *restrict c, ptrdiff_t cs, double scale, double *restrict o, ptrdiff_t os,
          ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++)
        o[j * os] = (double)c[j * cs] * scale;
}

int
k_to_float64(ozval *v, int nt)
{
    const float *c = OZ_F(0);
    double scale = v[1].d;
    double *out = OZ_D(2);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1), c0 = OZ_S(0, 0), c1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(2, 0), o1 = OZ_S(2, 1);
    if (OZ_N(2, 0) < m || OZ_N(2, 1) < p)
        return OZK_BADLAYOUT;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < m; i++) {
        if (c1 == 1 && o1 == 1)
            widen_run(c + i * c0, 1, scale, out + i * o0, 1, p);
        else
            widen_run(c + i * c0, c1, scale, out + i * o0, o1, p);
    }
    return 0;
}

/* The interval constants of an estimate (ozlinalg.ozaki.counts.estimate.CountPlan) and the
 * divisor operands num = (ia, nb, na, ib), read only where has_num. */
typedef struct {
    double inv, absf, c_lo, c_hi, slack;
    const double *ia, *nb, *na, *ib;
    ptrdiff_t ia0, nb0, na0, ib0;
    int has_num;
} est_args;

/* Bounds (lo, hi) of r = q / d from the estimate value (q ~ value * inv), w = value *
 * inv; d = (ia_i nb_j + na_i ib_j)**2, or 1 without num (then no division). The
 * generic operations: both branches computed and one selected (the same values). */
OZ_INLINE double
interval(const est_args *a, double val, double d, int has_num, double *w_out, double *hi_out)
{
    double w = val * a->inv;
    double lo = (w - a->absf) * a->c_lo;
    double hi = (w + a->absf) * a->c_hi;
    if (has_num) {
        int ok = (d > 0.0) & (d < INFINITY);
        double lod = lo / d * (1.0 - a->slack);
        double hid = hi / d * (1.0 + a->slack);
        int div = d != 1.0;
        lo = div ? (ok ? lod : 0.0) : lo;
        hi = div ? (ok ? hid : INFINITY) : hi;
    }
    *w_out = w;
    *hi_out = hi;
    return lo;
}

/* s: 1, or 0 for the arrays' own strides */
OZ_INLINE double
num2(const est_args *a, ptrdiff_t i, ptrdiff_t j, int s)
{
    ptrdiff_t jb = s ? j : j * a->nb0, ji = s ? j : j * a->ib0;
    double n = a->ia[i * a->ia0] * a->nb[jb] + a->na[i * a->na0] * a->ib[ji];
    return n * n;
}

/* lo_r, hi_r of row i (lo 0 where w <= 0): no stores that depend on the bounds. */
OZ_INLINE void
row_bounds(const est_args *a, const float *restrict q, ptrdiff_t qs, ptrdiff_t i, ptrdiff_t p,
           int has_num, int s, double *restrict lo_r, double *restrict hi_r)
{
    for (ptrdiff_t j = 0; j < p; j++) {
        double w, hi;
        double d = has_num ? num2(a, i, j, s) : 1.0;
        double lo = interval(a, (double)q[j * qs], d, has_num, &w, &hi);
        lo_r[j] = w <= 0.0 ? 0.0 : lo;
        hi_r[j] = hi;
    }
}

/* Reads num (arguments kn .. kn + 3, has_num kn + 4) into a; *unit: whether nb and ib
 * are contiguous (or not read). */
static int
est_setup(ozval *v, int kn, ptrdiff_t m, ptrdiff_t p, est_args *a, int *unit)
{
    a->ia = OZ_D(kn);
    a->nb = OZ_D(kn + 1);
    a->na = OZ_D(kn + 2);
    a->ib = OZ_D(kn + 3);
    a->ia0 = OZ_S(kn, 0);
    a->nb0 = OZ_S(kn + 1, 0);
    a->na0 = OZ_S(kn + 2, 0);
    a->ib0 = OZ_S(kn + 3, 0);
    a->has_num = v[kn + 4].i != 0;
    *unit = !a->has_num || (a->nb0 == 1 && a->ib0 == 1);
    if (a->has_num && m > 0 && p > 0 &&
        (OZ_N(kn, 0) < m || OZ_N(kn + 2, 0) < m || OZ_N(kn + 1, 0) < p || OZ_N(kn + 3, 0) < p))
        return OZK_BADLAYOUT;
    return 0;
}

int
k_classify_estimate(ozval *v, int nt)
{
    const float *q = OZ_F(0);
    est_args a;
    a.inv = v[1].d;
    a.absf = v[2].d;
    a.c_lo = v[3].d;
    a.c_hi = v[4].d;
    a.slack = v[5].d;
    double cap = v[6].d;
    int8_t *codes = OZ_I8(12);
    double *row_lo = OZ_D(13), *row_hi = OZ_D(14);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1), q0 = OZ_S(0, 0), q1 = OZ_S(0, 1);
    ptrdiff_t k0 = OZ_S(12, 0), k1 = OZ_S(12, 1), l0 = OZ_S(13, 0), h0 = OZ_S(14, 0);
    int s;
    int st = est_setup(v, 7, m, p, &a, &s);
    if (st != 0)
        return st;
    if (OZ_N(12, 0) < m || OZ_N(12, 1) < p || OZ_N(13, 0) < m || OZ_N(14, 0) < m)
        return OZK_BADLAYOUT;
    int unit = q1 == 1 && s == 1;
    int fail = 0;
    OZ_PARALLEL(nt)
    {
        double *buf = malloc(sizeof(double) * 2 * (size_t)OZ_MAX(p, 1));
        if (buf == NULL)
            OZ_FAIL(fail);
        double *lo_r = buf, *hi_r = buf + OZ_MAX(p, 1);
        OZ_FOR
        for (ptrdiff_t i = 0; i < m; i++) {
            if (buf == NULL)
                continue;
            const float *qi = q + i * q0;
            if (unit && a.has_num)
                row_bounds(&a, qi, 1, i, p, 1, 1, lo_r, hi_r);
            else if (unit)
                row_bounds(&a, qi, 1, i, p, 0, 1, lo_r, hi_r);
            else
                row_bounds(&a, qi, q1, i, p, a.has_num, 0, lo_r, hi_r);
            double lmin = INFINITY, hmin = INFINITY;
            int8_t *ci = codes + i * k0;
            for (ptrdiff_t j = 0; j < p; j++) {
                double lo = lo_r[j], hi = hi_r[j];
                int8_t c;
                if (lo <= 0.0) {
                    c = 2;
                } else if (hi < cap) {
                    c = 1;
                } else if (lo < cap) {
                    c = 2;
                } else {
                    c = 0;
                    if (lo < lmin)
                        lmin = lo;
                    if (hi < hmin)
                        hmin = hi;
                }
                ci[j * k1] = c;
            }
            row_lo[i * l0] = lmin;
            row_hi[i * h0] = hmin;
        }
        free(buf);
    }
    return fail ? OZK_NOMEM : 0;
}

OZ_INLINE void
below_row(const est_args *a, const float *restrict q, ptrdiff_t qs, const int8_t *restrict ci,
          ptrdiff_t cs, ptrdiff_t i, ptrdiff_t p, int has_num, int s, double bound,
          uint8_t *restrict o, ptrdiff_t os)
{
    for (ptrdiff_t j = 0; j < p; j++) {
        double w, hi;
        double d = has_num ? num2(a, i, j, s) : 1.0;
        double lo = interval(a, (double)q[j * qs], d, has_num, &w, &hi);
        o[j * os] = ci[j * cs] == 0 ? lo < bound : 0;
    }
}

int
k_kept_below(ozval *v, int nt)
{
    const float *q = OZ_F(0);
    est_args a;
    a.inv = v[1].d;
    a.absf = v[2].d;
    a.c_lo = v[3].d;
    a.c_hi = v[4].d;
    a.slack = v[5].d;
    const int8_t *codes = OZ_I8(11);
    double bound = v[12].d;
    const double *row_lo = OZ_D(13);
    uint8_t *out = OZ_B(14);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1), q0 = OZ_S(0, 0), q1 = OZ_S(0, 1);
    ptrdiff_t k0 = OZ_S(11, 0), k1 = OZ_S(11, 1), l0 = OZ_S(13, 0);
    ptrdiff_t o0 = OZ_S(14, 0), o1 = OZ_S(14, 1);
    int s;
    int st = est_setup(v, 6, m, p, &a, &s);
    if (st != 0)
        return st;
    if (OZ_N(11, 0) < m || OZ_N(11, 1) < p || OZ_N(13, 0) < m || OZ_N(14, 0) < m ||
        OZ_N(14, 1) < p)
        return OZK_BADLAYOUT;
    int unit = q1 == 1 && s == 1 && k1 == 1 && o1 == 1;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < m; i++) {
        uint8_t *oi = out + i * o0;
        if (!(row_lo[i * l0] < bound)) {
            for (ptrdiff_t j = 0; j < p; j++)
                oi[j * o1] = 0;
            continue;
        }
        const float *qi = q + i * q0;
        const int8_t *ci = codes + i * k0;
        if (unit && a.has_num)
            below_row(&a, qi, 1, ci, 1, i, p, 1, 1, bound, oi, 1);
        else if (unit)
            below_row(&a, qi, 1, ci, 1, i, p, 0, 1, bound, oi, 1);
        else
            below_row(&a, qi, q1, ci, k1, i, p, a.has_num, 0, bound, oi, o1);
    }
    return 0;
}
