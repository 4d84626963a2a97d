/* Normalization by powers of two and row / column maxima
 * (ozlinalg.ozaki.split.normalize_rows, ozlinalg.ozaki.balance.abs_max_generic). */
#include "kcommon.h"

/* NumPy's pairwise sum of a[0:n] (np.add.reduce of a contiguous float64 run): blocks
 * of at most 128 summed in eight interleaved partial sums, longer runs split in two
 * (the first part n / 2 rounded down to a multiple of 8) and the halves added. */
static double
pairwise_sum(const double *a, ptrdiff_t n)
{
    if (n < 8) {
        double res = 0.0;
        for (ptrdiff_t j = 0; j < n; j++)
            res += a[j];
        return res;
    }
    if (n <= 128) {
        double r0 = a[0], r1 = a[1], r2 = a[2], r3 = a[3];
        double r4 = a[4], r5 = a[5], r6 = a[6], r7 = a[7];
        ptrdiff_t m = n - n % 8, j;
        for (j = 8; j < m; j += 8) {
            r0 += a[j];
            r1 += a[j + 1];
            r2 += a[j + 2];
            r3 += a[j + 3];
            r4 += a[j + 4];
            r5 += a[j + 5];
            r6 += a[j + 6];
            r7 += a[j + 7];
        }
        double res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
        for (j = m; j < n; j++)
            res += a[j];
        return res;
    }
    ptrdiff_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

OZ_INLINE void
normalize_row(const double *a, ptrdiff_t s1, ptrdiff_t k, double *x, ptrdiff_t xs1, double *sq,
              int want, int32_t *exp_out, double *ss_out)
{
    double f1, f2;
    *exp_out = oz_row_factors(oz_line_absmax(a, s1, k), &f1, &f2);
    if (want) {
        for (ptrdiff_t j = 0; j < k; j++) {
            double v = (a[j * s1] * f1) * f2;
            x[j * xs1] = v;
            sq[j] = v * v;
        }
        *ss_out = pairwise_sum(sq, k);
    } else {
        for (ptrdiff_t j = 0; j < k; j++)
            x[j * xs1] = (a[j * s1] * f1) * f2;
    }
}

int
k_normalize_rows(ozval *v, int nt)
{
    const double *a = OZ_D(0);
    double *x = OZ_D(1), *ss = OZ_D(3);
    int32_t *exps = OZ_I32(2);
    ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1), a0 = OZ_S(0, 0), a1 = OZ_S(0, 1);
    ptrdiff_t x0 = OZ_S(1, 0), x1 = OZ_S(1, 1), e0 = OZ_S(2, 0), q0 = OZ_S(3, 0);
    int want = OZ_N(3, 0) > 0;
    int fail = 0;
    OZ_PARALLEL(nt)
    {
        double *sq = want ? malloc(sizeof(double) * (size_t)OZ_MAX(k, 1)) : NULL;
        if (want && sq == NULL)
            OZ_FAIL(fail);
        OZ_FOR
        for (ptrdiff_t i = 0; i < rows; i++) {
            if (want && sq == NULL)
                continue;
            double *ssi = want ? ss + i * q0 : NULL;
            if (a1 == 1 && x1 == 1)
                normalize_row(a + i * a0, 1, k, x + i * x0, 1, sq, want, exps + i * e0, ssi);
            else
                normalize_row(a + i * a0, a1, k, x + i * x0, x1, sq, want, exps + i * e0, ssi);
        }
        free(sq);
    }
    return fail ? OZK_NOMEM : 0;
}

OZ_INLINE void
scale_run(const double *src, ptrdiff_t s1, const double *f1, const double *f2, double *dst,
          ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++)
        dst[j] = (src[j * s1] * f1[j]) * f2[j];
}

int
k_normalize_cols(ozval *v, int nt)
{
    const double *at = OZ_D(0);
    double *xt = OZ_D(1);
    ptrdiff_t k = OZ_N(0, 0), n = OZ_N(0, 1), a0 = OZ_S(0, 0), a1 = OZ_S(0, 1);
    ptrdiff_t x0 = OZ_S(1, 0);
    if (OZ_S(1, 1) != 1)
        return OZK_BADLAYOUT;
    double *buf = oz_col_factors(at, k, n, a0, a1, OZ_I32(2), OZ_S(2, 0), NULL, NULL, 0, nt);
    if (buf == NULL)
        return OZK_NOMEM;
    const double *f1 = buf + n, *f2 = buf + 2 * n;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t r = 0; r < k; r++) {
        if (a1 == 1)
            scale_run(at + r * a0, 1, f1, f2, xt + r * x0, n);
        else
            scale_run(at + r * a0, a1, f1, f2, xt + r * x0, n);
    }
    free(buf);
    return 0;
}

int
k_normalize_cols_sumsq(ozval *v, int nt)
{
    const double *at = OZ_D(0);
    double *xt = OZ_D(1), *ss = OZ_D(3);
    ptrdiff_t k = OZ_N(0, 0), n = OZ_N(0, 1), a0 = OZ_S(0, 0), a1 = OZ_S(0, 1);
    ptrdiff_t x0 = OZ_S(1, 0), q0 = OZ_S(3, 0);
    ptrdiff_t nb = (ptrdiff_t)v[4].i;
    int fail = 0;
    if (OZ_S(1, 1) != 1 || nb < 1)
        return OZK_BADLAYOUT;
    double *buf = oz_col_factors(at, k, n, a0, a1, OZ_I32(2), OZ_S(2, 0), NULL, NULL, 0, nt);
    if (buf == NULL)
        return OZK_NOMEM;
    const double *f1 = buf + n, *f2 = buf + 2 * n;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t b = 0; b < nb; b++) {
        ptrdiff_t j0 = b * n / nb, j1 = (b + 1) * n / nb, w = j1 - j0;
        double *acc = calloc((size_t)OZ_MAX(w, 1), sizeof(double));
        if (acc == NULL) {
            OZ_FAIL(fail);
            continue;
        }
        for (ptrdiff_t r = 0; r < k; r++) {
            double *run = xt + r * x0 + j0;
            if (a1 == 1)
                scale_run(at + r * a0 + j0, 1, f1 + j0, f2 + j0, run, w);
            else
                scale_run(at + r * a0 + j0 * a1, a1, f1 + j0, f2 + j0, run, w);
            for (ptrdiff_t j = 0; j < w; j++)
                acc[j] = acc[j] + run[j] * run[j];
        }
        for (ptrdiff_t j = 0; j < w; j++)
            ss[(j0 + j) * q0] = acc[j];
        free(acc);
    }
    free(buf);
    return fail ? OZK_NOMEM : 0;
}

/* max |row| (inf where the row holds Inf or NaN). bad: NaN from Inf or NaN. */
OZ_INLINE double
abs_max_row(const double *row, ptrdiff_t s1, ptrdiff_t k)
{
    double top = 0.0, flag = 0.0;
    ptrdiff_t j = 0;
    if (s1 == 1) {
        oz_vd best0 = {0}, best1 = {0}, bad0 = {0}, bad1 = {0};
        for (; j + 2 * OZ_VL <= k; j += 2 * OZ_VL) {
            oz_vd x0 = oz_v_load(row + j), x1 = oz_v_load(row + j + OZ_VL);
            bad0 += x0 - x0;
            bad1 += x1 - x1;
            best0 = oz_v_max(oz_v_abs(x0), best0);
            best1 = oz_v_max(oz_v_abs(x1), best1);
        }
        for (int lane = 0; lane < OZ_VL; lane++) {
            top = best0[lane] > top ? best0[lane] : top;
            top = best1[lane] > top ? best1[lane] : top;
            flag += bad0[lane] + bad1[lane];
        }
    }
    for (; j < k; j++) {
        double x = row[j * s1];
        flag += x - x;
        double a = fabs(x);
        top = a > top ? a : top;
    }
    return flag == 0.0 ? top : INFINITY;
}

/* out[i] = REDUCE(row i of x), rows in parallel; contiguous rows take the unit-stride
 * call, which the compiler vectorizes. */
#define ROW_REDUCTION(NAME, REDUCE)                                                     \
    int                                                                                 \
    NAME(ozval *v, int nt)                                                              \
    {                                                                                   \
        const double *x = OZ_D(0);                                                      \
        double *out = OZ_D(1);                                                          \
        ptrdiff_t m = OZ_N(0, 0), k = OZ_N(0, 1), s0 = OZ_S(0, 0), s1 = OZ_S(0, 1);     \
        ptrdiff_t o0 = OZ_S(1, 0);                                                      \
        OZ_PARALLEL_FOR(nt)                                                             \
        for (ptrdiff_t i = 0; i < m; i++)                                               \
            out[i * o0] = s1 == 1 ? REDUCE(x + i * s0, 1, k) : REDUCE(x + i * s0, s1, k); \
        return 0;                                                                       \
    }

ROW_REDUCTION(k_abs_max_rows, abs_max_row)

/* The smallest nonzero |x| of a row (+inf where there is none); NaN compares false and
 * is passed over, as it is by the generic code's mask. */
OZ_INLINE double
abs_min_nonzero_row(const double *row, ptrdiff_t s1, ptrdiff_t k)
{
    double m = INFINITY;
    ptrdiff_t j = 0;
    if (s1 == 1) {
        oz_vd best0 = (oz_vd){0} + INFINITY, best1 = best0;
        for (; j + 2 * OZ_VL <= k; j += 2 * OZ_VL) {
            best0 = oz_v_min_pos(oz_v_abs(oz_v_load(row + j)), best0);
            best1 = oz_v_min_pos(oz_v_abs(oz_v_load(row + j + OZ_VL)), best1);
        }
        for (int lane = 0; lane < OZ_VL; lane++) {
            m = best0[lane] < m ? best0[lane] : m;
            m = best1[lane] < m ? best1[lane] : m;
        }
    }
    for (; j < k; j++) {
        double a = fabs(row[j * s1]);
        m = (a > 0.0 && a < m) ? a : m;
    }
    return m;
}

ROW_REDUCTION(k_abs_min_nonzero_rows, abs_min_nonzero_row)

/* The column maxima cols[j] = max_i |x[i, j]| of an (m x p) array with unit-stride
 * rows (row stride s0), and where rows is not NULL also the row maxima, in one read in
 * memory order, each with abs_max_rows' contract (inf where the line holds Inf or NaN).
 * The rows are cut into one block per thread; each block keeps its own column maxima
 * (NaN sticking), merged at the end (a maximum: exact in any order). */
static int
oz_abs_max_lines(const double *x, ptrdiff_t m, ptrdiff_t p, ptrdiff_t s0, double *rows,
                 ptrdiff_t r0, double *cols, ptrdiff_t c0, int nt)
{
    ptrdiff_t nb = nt > 1 ? nt : 1;
    if (nb > m)
        nb = m > 0 ? m : 1;
    double *acc = malloc(sizeof(double) * (size_t)(p > 0 ? p : 1) * (size_t)nb);
    if (!acc)
        return OZK_NOMEM;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t b = 0; b < nb; b++) {
        double *restrict best = acc + p * b;
        for (ptrdiff_t j = 0; j < p; j++)
            best[j] = 0.0;
        for (ptrdiff_t i = m * b / nb; i < m * (b + 1) / nb; i++) {
            const double *restrict row = x + i * s0;
            double top = 0.0;
            for (ptrdiff_t j0 = 0; j0 < p; j0 += 1024) {
                ptrdiff_t j1 = OZ_MIN(p, j0 + 1024);
                oz_col_update(row + j0, best + j0, j1 - j0);
                if (rows) {
                    /* the piece again, from the cache the update brought it into (a
                     * piece holding Inf / NaN gives inf, which no other piece exceeds) */
                    double t = abs_max_row(row + j0, 1, j1 - j0);
                    top = t > top ? t : top;
                }
            }
            if (rows)
                rows[i * r0] = top;
        }
    }
    for (ptrdiff_t j = 0; j < p; j++) {
        double top = 0.0;
        for (ptrdiff_t b = 0; b < nb; b++) {
            double t = acc[p * b + j];
            top = (t > top || t != t) ? t : top;
        }
        cols[j * c0] = isfinite(top) ? top : INFINITY;
    }
    free(acc);
    return 0;
}

/* Both maxima of x in one read: rows[i] = max_j |x[i, j]| and cols[j] = max_i |x[i, j]|. */
int
k_abs_max_both(ozval *v, int nt)
{
    ptrdiff_t p = OZ_N(0, 1);
    if (OZ_S(0, 1) != 1 && p > 1)
        return OZK_BADLAYOUT;
    return oz_abs_max_lines(OZ_D(0), OZ_N(0, 0), p, OZ_S(0, 0), OZ_D(1), OZ_S(1, 0), OZ_D(2),
                            OZ_S(2, 0), nt);
}

/* Column maxima, row by row in memory order (column strips of a row-major array read
 * a short piece of every row: each a new page for the prefetchers, 3-5x slower). */
int
k_abs_max_cols(ozval *v, int nt)
{
    ptrdiff_t p = OZ_N(0, 1);
    if (OZ_S(0, 1) != 1 && p > 1)
        return OZK_BADLAYOUT;
    return oz_abs_max_lines(OZ_D(0), OZ_N(0, 0), p, OZ_S(0, 0), NULL, 0, OZ_D(1),
                            OZ_S(1, 0), nt);
}
