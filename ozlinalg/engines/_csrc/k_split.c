/* Splits into int8 slices (ozlinalg.ozaki.split): hybrid (fixed grid per row, round to
 * nearest), bitmask (truncation), rn (per-slice grids). Rows are split in parallel; the
 * "_cols" forms take the transpose of a column-contiguous operand and write slices in
 * its memory order (outt is (s, k, rows)). */
#include "kcommon.h"

/* out[t * o0 + j * o2] = digit t of the row v (consumed: the residual in units of the
 * current digit), by rint (hybrid) or trunc (bitmask). */
OZ_INLINE void
digits(double *restrict v, ptrdiff_t n, int s, double unit, int8_t *restrict out, ptrdiff_t o0,
       ptrdiff_t o2, int trunc_)
{
    for (int t = 0; t < s; t++) {
        int8_t *restrict o = out + t * o0;
        for (ptrdiff_t j = 0; j < n; j++) {
            double r = trunc_ ? trunc(v[j]) : rint(v[j]);
            o[j * o2] = (int8_t)r;
            v[j] = (v[j] - r) * unit;
        }
    }
}

static void
digits_any(double *v, ptrdiff_t n, int s, double unit, int8_t *out, ptrdiff_t o0,
           ptrdiff_t o2, int trunc_)
{
    if (o2 == 1) {
        if (trunc_)
            digits(v, n, s, unit, out, o0, 1, 1);
        else
            digits(v, n, s, unit, out, o0, 1, 0);
    } else {
        digits(v, n, s, unit, out, o0, o2, trunc_);
    }
}

OZ_INLINE void
scaled_row(const double *restrict x, ptrdiff_t s1, ptrdiff_t k, double f, double *restrict v)
{
    for (ptrdiff_t j = 0; j < k; j++)
        v[j] = x[j * s1] * f;
}

/* Row splits (hybrid, bitmask): a per-thread row buffer holds the residual. */
static int
split_rows_common(ozval *v, int nt, int trunc_)
{
    const double *x = OZ_D(0);
    int s = (int)v[1].i, width = (int)v[2].i;
    int8_t *out = OZ_I8(3);
    double *base = trunc_ ? NULL : OZ_D(4);
    ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(3, 0), o1 = OZ_S(3, 1), o2 = OZ_S(3, 2);
    ptrdiff_t b0 = trunc_ ? 0 : OZ_S(4, 0);
    double unit = ldexp(1.0, width);
    int fail = 0;
    OZ_PARALLEL(nt)
    {
        double *buf = malloc(sizeof(double) * (size_t)OZ_MAX(k, 1));
        if (buf == NULL)
            OZ_FAIL(fail);
        OZ_FOR
        for (ptrdiff_t i = 0; i < rows; i++) {
            if (buf == NULL)
                continue;
            const double *xi = x + i * x0;
            double f;
            if (trunc_) {
                f = unit;
            } else {
                double b = oz_grid(oz_line_absmax(xi, x1, k), width);
                base[i * b0] = b;
                f = 1.0 / b;
            }
            if (x1 == 1)
                scaled_row(xi, 1, k, f, buf);
            else
                scaled_row(xi, x1, k, f, buf);
            digits_any(buf, k, s, unit, out + i * o1, o0, o2, trunc_);
        }
        free(buf);
    }
    return fail ? OZK_NOMEM : 0;
}

int
k_split_hybrid(ozval *v, int nt)
{
    return split_rows_common(v, nt, 0);
}

int
k_split_bitmask(ozval *v, int nt)
{
    return split_rows_common(v, nt, 1);
}

/* Column forms: per-column factors, rows of xt (k x n) in parallel. mode 0: hybrid of
 * normalized columns; 1: raw (normalize on the fly, exps written). */
static int
split_cols_common(ozval *v, int nt, int raw)
{
    const double *xt = OZ_D(0);
    int s = (int)v[1].i, width = (int)v[2].i;
    int8_t *out = OZ_I8(3);
    double *base = OZ_D(4);
    ptrdiff_t k = OZ_N(0, 0), n = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(3, 0), o1 = OZ_S(3, 1), o2 = OZ_S(3, 2), b0 = OZ_S(4, 0);
    double unit = ldexp(1.0, width);
    int fail = 0;
    double *fac = malloc(sizeof(double) * (size_t)OZ_MAX(4 * n, 1));
    if (fac == NULL)
        return OZK_NOMEM;
    double *mx = fac, *f1 = fac + n, *f2 = fac + 2 * n, *inv = fac + 3 * n;
    if (oz_col_absmax(xt, k, n, x0, x1, mx, nt) != 0) {
        free(fac);
        return OZK_NOMEM;
    }
    if (raw) {
        int32_t *exps = OZ_I32(5);
        ptrdiff_t e0 = OZ_S(5, 0);
        for (ptrdiff_t j = 0; j < n; j++) {
            exps[j * e0] = oz_row_factors(mx[j], f1 + j, f2 + j);
            double b = oz_grid((mx[j] * f1[j]) * f2[j], width);
            base[j * b0] = b;
            inv[j] = 1.0 / base[j * b0];
        }
    } else {
        for (ptrdiff_t j = 0; j < n; j++) {
            base[j * b0] = oz_grid(mx[j], width);
            inv[j] = 1.0 / base[j * b0];
        }
    }
    OZ_PARALLEL(nt)
    {
        double *buf = malloc(sizeof(double) * (size_t)OZ_MAX(n, 1));
        if (buf == NULL)
            OZ_FAIL(fail);
        OZ_FOR
        for (ptrdiff_t r = 0; r < k; r++) {
            if (buf == NULL)
                continue;
            const double *row = xt + r * x0;
            if (raw) {
                for (ptrdiff_t j = 0; j < n; j++)
                    buf[j] = ((row[j * x1] * f1[j]) * f2[j]) * inv[j];
            } else {
                for (ptrdiff_t j = 0; j < n; j++)
                    buf[j] = row[j * x1] * inv[j];
            }
            digits_any(buf, n, s, unit, out + r * o1, o0, o2, 0);
        }
        free(buf);
    }
    free(fac);
    return fail ? OZK_NOMEM : 0;
}

int
k_split_hybrid_cols(ozval *v, int nt)
{
    return split_cols_common(v, nt, 0);
}

int
k_split_hybrid_raw_cols(ozval *v, int nt)
{
    return split_cols_common(v, nt, 1);
}

int
k_split_hybrid_raw(ozval *v, int nt)
{
    const double *a = OZ_D(0);
    int s = (int)v[1].i, width = (int)v[2].i;
    int8_t *out = OZ_I8(3);
    double *base = OZ_D(4);
    int32_t *exps = OZ_I32(5);
    ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1), a0 = OZ_S(0, 0), a1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(3, 0), o1 = OZ_S(3, 1), o2 = OZ_S(3, 2);
    ptrdiff_t b0 = OZ_S(4, 0), e0 = OZ_S(5, 0);
    double unit = ldexp(1.0, width);
    int fail = 0;
    OZ_PARALLEL(nt)
    {
        double *buf = malloc(sizeof(double) * (size_t)OZ_MAX(k, 1));
        if (buf == NULL)
            OZ_FAIL(fail);
        OZ_FOR
        for (ptrdiff_t i = 0; i < rows; i++) {
            if (buf == NULL)
                continue;
            const double *ai = a + i * a0;
            double f1, f2;
            double m = oz_line_absmax(ai, a1, k);
            exps[i * e0] = oz_row_factors(m, &f1, &f2);
            double b = oz_grid((m * f1) * f2, width);  /* the normalized maximum, exactly */
            base[i * b0] = b;
            double inv = 1.0 / b;
            if (a1 == 1) {
                for (ptrdiff_t j = 0; j < k; j++)
                    buf[j] = ((ai[j] * f1) * f2) * inv;
            } else {
                for (ptrdiff_t j = 0; j < k; j++)
                    buf[j] = ((ai[j * a1] * f1) * f2) * inv;
            }
            digits_any(buf, k, s, unit, out + i * o1, o0, o2, 0);
        }
        free(buf);
    }
    return fail ? OZK_NOMEM : 0;
}

OZ_INLINE void
rn_row(double *x, ptrdiff_t s1, ptrdiff_t k, int s, int width, int8_t *out, ptrdiff_t o0,
       ptrdiff_t o2, double *mus, ptrdiff_t m0)
{
    const double c = 0.75 * 9007199254740992.0;  /* 0.75 * 2**53 */
    for (int t = 0; t < s; t++) {
        double mu = oz_grid(oz_line_absmax(x, s1, k), width);
        mus[t * m0] = mu;
        double sigma = c * mu, inv = 1.0 / mu;
        int8_t *o = out + t * o0;
        for (ptrdiff_t j = 0; j < k; j++) {
            double tmp = (x[j * s1] + sigma) - sigma;
            x[j * s1] = x[j * s1] - tmp;
            o[j * o2] = (int8_t)(tmp * inv);
        }
    }
}

int
k_split_rn(ozval *v, int nt)
{
    double *x = OZ_D(0);
    int s = (int)v[1].i, width = (int)v[2].i;
    int8_t *out = OZ_I8(3);
    double *mus = OZ_D(4);
    ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(3, 0), o1 = OZ_S(3, 1), o2 = OZ_S(3, 2);
    ptrdiff_t m0 = OZ_S(4, 0), m1 = OZ_S(4, 1);
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < rows; i++) {
        if (x1 == 1 && o2 == 1)
            rn_row(x + i * x0, 1, k, s, width, out + i * o1, o0, 1, mus + i * m1, m0);
        else
            rn_row(x + i * x0, x1, k, s, width, out + i * o1, o0, o2, mus + i * m1, m0);
    }
    return 0;
}

int
k_split_rn_cols(ozval *v, int nt)
{
    double *xt = OZ_D(0);
    int s = (int)v[1].i, width = (int)v[2].i;
    int8_t *out = OZ_I8(3);
    double *mus = OZ_D(4);
    ptrdiff_t k = OZ_N(0, 0), n = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(3, 0), o1 = OZ_S(3, 1), o2 = OZ_S(3, 2);
    ptrdiff_t m0 = OZ_S(4, 0), m1 = OZ_S(4, 1);
    const double c = 0.75 * 9007199254740992.0;
    double *buf = malloc(sizeof(double) * (size_t)OZ_MAX(3 * n, 1));
    if (buf == NULL)
        return OZK_NOMEM;
    double *mx = buf, *sigma = buf + n, *inv = buf + 2 * n;
    for (int t = 0; t < s; t++) {
        if (oz_col_absmax(xt, k, n, x0, x1, mx, nt) != 0) {
            free(buf);
            return OZK_NOMEM;
        }
        for (ptrdiff_t j = 0; j < n; j++) {
            double mu = oz_grid(mx[j], width);
            mus[t * m0 + j * m1] = mu;
            sigma[j] = c * mu;
            inv[j] = 1.0 / mu;
        }
        int8_t *ot = out + t * o0;
        OZ_PARALLEL_FOR(nt)
        for (ptrdiff_t r = 0; r < k; r++) {
            double *row = xt + r * x0;
            int8_t *o = ot + r * o1;
            if (x1 == 1 && o2 == 1) {
                for (ptrdiff_t j = 0; j < n; j++) {
                    double tmp = (row[j] + sigma[j]) - sigma[j];
                    row[j] = row[j] - tmp;
                    o[j] = (int8_t)(tmp * inv[j]);
                }
            } else {
                for (ptrdiff_t j = 0; j < n; j++) {
                    double tmp = (row[j * x1] + sigma[j]) - sigma[j];
                    row[j * x1] = row[j * x1] - tmp;
                    o[j * o2] = (int8_t)(tmp * inv[j]);
                }
            }
        }
    }
    free(buf);
    return 0;
}
