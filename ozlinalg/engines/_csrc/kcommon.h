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
                for (ptrdiff_t j = 0; j < n; j++) {
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

#endif
