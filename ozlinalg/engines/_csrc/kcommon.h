/* Helpers shared by the kernel files (the generic code's scalar steps). */
#ifndef OZK_KCOMMON_H
#define OZK_KCOMMON_H
#include "ozk.h"

/* frexp exponent of a row maximum m and the generic code's two power-of-two factors
 * (ozlinalg.ozaki.split.normalize_rows): x * f1 * f2 = x * 2**-e, each step exact. */
OZ_INLINE int32_t
oz_row_factors(double m, double *f1, double *f2)
{
    int e;
    frexp(m, &e);
    int e1 = OZ_MIN(OZ_MAX(-e, -1022), 1000);
    int e2 = -e - e1;
    *f1 = ldexp(1.0, e1);
    *f2 = ldexp(1.0, e2);
    return (int32_t)e;
}

/* ozlinalg.exact.residual_grid of a row with maximum m. */
OZ_INLINE double
oz_grid(double m, int width)
{
    if (!(m > 0.0))
        return 1.0;
    int e;
    double f = frexp(m, &e);
    if (f == 0.5)
        e -= 1;
    return ldexp(1.0, OZ_MAX(e + 1 - width, OZ_MIN_GRID_EXP));
}

/* Vectors of doubles (GCC's vector extensions; four lanes with AVX, two on baseline
 * x86-64): the reductions below are written with them, since the compilers this was
 * built with left the scalar eight-lane form scalar (2.8-3.9 ms for a 2048 x 2048 pass
 * against NumPy's 1.2-1.9 ms for a plain max). Lanes are reduced at the end: a maximum,
 * a minimum or a sum of zeros and NaN does not depend on the order. */
#ifdef __AVX__
#define OZ_VL 4
#else
#define OZ_VL 2
#endif
typedef double oz_vd __attribute__((vector_size(8 * OZ_VL)));
typedef long long oz_vl __attribute__((vector_size(8 * OZ_VL)));

OZ_INLINE oz_vd
oz_v_load(const double *p)
{
    oz_vd v;
    memcpy(&v, p, sizeof v);
    return v;
}

OZ_INLINE void
oz_v_store(double *p, oz_vd v)
{
    memcpy(p, &v, sizeof v);
}

OZ_INLINE oz_vd
oz_v_abs(oz_vd x)
{
    return (oz_vd)((oz_vl)x & ((oz_vl){0} + INT64_MAX));
}

/* a > b ? a : b per lane (NaN in a: b, as the scalar expression) */
OZ_INLINE oz_vd
oz_v_max(oz_vd a, oz_vd b)
{
    oz_vl m = a > b;
    return (oz_vd)((m & (oz_vl)a) | (~m & (oz_vl)b));
}

/* max |row[j]| of a unit-stride row of k, NaN passed over: the value of the scalar loop
 * "if (|x| > m) m = |x|" from m = 0 (which the compiler leaves scalar, one compare's
 * latency an element), in independent lanes (a maximum does not depend on the order). */
OZ_INLINE double
oz_row_absmax(const double *row, ptrdiff_t k)
{
    double top = 0.0;
    ptrdiff_t j = 0;
    if (k >= 4 * OZ_VL) {
        oz_vd b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        for (; j + 4 * OZ_VL <= k; j += 4 * OZ_VL) {
            b0 = oz_v_max(oz_v_abs(oz_v_load(row + j)), b0);
            b1 = oz_v_max(oz_v_abs(oz_v_load(row + j + OZ_VL)), b1);
            b2 = oz_v_max(oz_v_abs(oz_v_load(row + j + 2 * OZ_VL)), b2);
            b3 = oz_v_max(oz_v_abs(oz_v_load(row + j + 3 * OZ_VL)), b3);
        }
        b0 = oz_v_max(b1, b0);
        b2 = oz_v_max(b3, b2);
        b0 = oz_v_max(b2, b0);
        for (int lane = 0; lane < OZ_VL; lane++)
            top = b0[lane] > top ? b0[lane] : top;
    }
    for (; j < k; j++) {
        double a = fabs(row[j]);
        if (a > top)
            top = a;
    }
    return top;
}

/* max |row[j * s1]| over j < k, NaN passed over: oz_row_absmax where the row is
 * contiguous, the scalar loop otherwise. */
OZ_INLINE double
oz_line_absmax(const double *row, ptrdiff_t s1, ptrdiff_t k)
{
    if (s1 == 1)
        return oz_row_absmax(row, k);
    double m = 0.0;
    for (ptrdiff_t j = 0; j < k; j++) {
        double a = fabs(row[j * s1]);
        if (a > m)
            m = a;
    }
    return m;
}

/* (a > 0 && a < b) ? a : b per lane */
OZ_INLINE oz_vd
oz_v_min_pos(oz_vd a, oz_vd b)
{
    oz_vl m = (a > 0.0) & (a < b);
    return (oz_vd)((m & (oz_vl)a) | (~m & (oz_vl)b));
}

/* a > b || a != a ? a : b per lane: the maximum, NaN once a NaN came (it stays: no
 * value compares greater than NaN) */
OZ_INLINE oz_vd
oz_v_max_nan(oz_vd a, oz_vd b)
{
    oz_vl m = (a > b) | (a != a);
    return (oz_vd)((m & (oz_vl)a) | (~m & (oz_vl)b));
}

/* best[j] = max(best[j], |row[j]|) for j < w, NaN sticking (the column maxima of a
 * block of rows, one row at a time; a column that held Inf or NaN ends non-finite) */
OZ_INLINE void
oz_col_update(const double *restrict row, double *restrict best, ptrdiff_t w)
{
    ptrdiff_t j = 0;
    for (; j + OZ_VL <= w; j += OZ_VL)
        oz_v_store(best + j, oz_v_max_nan(oz_v_abs(oz_v_load(row + j)), oz_v_load(best + j)));
    for (; j < w; j++) {
        double a = fabs(row[j]);
        best[j] = (a > best[j] || a != a) ? a : best[j];
    }
}

/* max_r |xt[r, j]| per column of a (k x n) array: partial maxima of row blocks in
 * parallel, then a reduction (a maximum does not depend on the order). */
static inline int
oz_col_absmax(const double *xt, ptrdiff_t k, ptrdiff_t n, ptrdiff_t s0, ptrdiff_t s1,
              double *out, int nt)
{
    ptrdiff_t nb = OZ_MAX(1, OZ_MIN(k, 64));
    double *part = calloc((size_t)OZ_MAX(nb * n, 1), sizeof(double));
    if (part == NULL)
        return OZK_NOMEM;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t b = 0; b < nb; b++) {
        double *pb = part + b * n;
        for (ptrdiff_t r = b * k / nb; r < (b + 1) * k / nb; r++) {
            const double *row = xt + r * s0;
            if (s1 == 1) {
                ptrdiff_t j = 0;
                for (; j + OZ_VL <= n; j += OZ_VL)
                    oz_v_store(pb + j, oz_v_max(oz_v_abs(oz_v_load(row + j)), oz_v_load(pb + j)));
                for (; j < n; j++) {
                    double a = fabs(row[j]);
                    if (a > pb[j])
                        pb[j] = a;
                }
            } else {
                for (ptrdiff_t j = 0; j < n; j++) {
                    double a = fabs(row[j * s1]);
                    if (a > pb[j])
                        pb[j] = a;
                }
            }
        }
    }
    for (ptrdiff_t j = 0; j < n; j++)
        out[j] = 0.0;
    for (ptrdiff_t b = 0; b < nb; b++)
        for (ptrdiff_t j = 0; j < n; j++)
            if (part[b * n + j] > out[j])
                out[j] = part[b * n + j];
    free(part);
    return 0;
}

/* a < b ? a : b per lane (NaN in a: b, as the scalar expression) */
OZ_INLINE oz_vd
oz_v_min(oz_vd a, oz_vd b)
{
    oz_vl m = a < b;
    return (oz_vd)((m & (oz_vl)a) | (~m & (oz_vl)b));
}

/* min(x[0 .. n), Inf), NaN passed over: the value of the scalar loop "m = x < m ? x :
 * m" from m = Inf (one compare's latency an element) in independent lanes, as
 * oz_row_absmax takes its maximum (a minimum does not depend on the order). */
OZ_INLINE double
oz_min_skip_nan(const double *restrict x, ptrdiff_t n)
{
    double best = INFINITY;
    ptrdiff_t j = 0;
    if (n >= 4 * OZ_VL) {
        oz_vd inf = (oz_vd){0} + INFINITY;
        oz_vd b0 = inf, b1 = inf, b2 = inf, b3 = inf;
        for (; j + 4 * OZ_VL <= n; j += 4 * OZ_VL) {
            b0 = oz_v_min(oz_v_load(x + j), b0);
            b1 = oz_v_min(oz_v_load(x + j + OZ_VL), b1);
            b2 = oz_v_min(oz_v_load(x + j + 2 * OZ_VL), b2);
            b3 = oz_v_min(oz_v_load(x + j + 3 * OZ_VL), b3);
        }
        b0 = oz_v_min(b1, b0);
        b2 = oz_v_min(b3, b2);
        b0 = oz_v_min(b2, b0);
        for (int lane = 0; lane < OZ_VL; lane++)
            best = b0[lane] < best ? b0[lane] : best;
    }
    for (; j < n; j++)
        best = x[j] < best ? x[j] : best;
    return best;
}

/* Factors of the columns of at (k x n): f1, f2 and exps per column; NULL on failure.
 * top (stride t0): the columns' maxima of |at| where the caller has them, else NULL:
 * read here. */
static inline double *
oz_col_factors(const double *at, ptrdiff_t k, ptrdiff_t n, ptrdiff_t s0, ptrdiff_t s1,
               int32_t *exps, ptrdiff_t e0, double **mx_out, const double *top,
               ptrdiff_t t0, int nt)
{
    double *buf = malloc(sizeof(double) * (size_t)OZ_MAX(3 * n, 1));
    if (buf == NULL)
        return NULL;
    double *mx = buf, *f1 = buf + n, *f2 = buf + 2 * n;
    if (top != NULL)
        for (ptrdiff_t j = 0; j < n; j++)
            mx[j] = top[j * t0];
    else if (oz_col_absmax(at, k, n, s0, s1, mx, nt) != 0) {
        free(buf);
        return NULL;
    }
    for (ptrdiff_t j = 0; j < n; j++)
        exps[j * e0] = oz_row_factors(mx[j], f1 + j, f2 + j);
    if (mx_out)
        *mx_out = mx;
    return buf;
}

/* oz_small_ef's status (info[1]); k_one_level.c's kernels report them too. */
#define SMALL_DONE 0
#define SMALL_NONFINITE 1
#define SMALL_UNDECIDED 2
#define SMALL_GROUPS 3
#define SMALL_NOMEM 4

/* A whole small EF product on raw strided arrays (k_small.c; ozlinalg.ozaki.small). */
int oz_small_ef(const double *a, ptrdiff_t a0, ptrdiff_t a1, ptrdiff_t m, ptrdiff_t k,
                const double *bt, ptrdiff_t b0, ptrdiff_t b1, ptrdiff_t p, double *out,
                ptrdiff_t o0, ptrdiff_t o1, int trunc_, int width, int s_fixed,
                const double *T, ptrdiff_t nthr, ptrdiff_t ts, int min_shift, int64_t *info,
                ptrdiff_t i1, int timed);

#endif
