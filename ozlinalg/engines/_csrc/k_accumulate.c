/* FP64 accumulation of the exact INT8 products (ozlinalg.ozaki.gemm): the generic
 * code's operations per element, in its order. Every pass is elementwise (or a
 * product with per-row and per-column factors), so rows run in parallel and no thread
 * count changes a bit. The axpy and finish_ef passes run once per product over the
 * whole output: their unit-stride bodies must vectorize (int32 -> double conversion,
 * multiply, add), the general-stride forms serve the other layouts. */
#include "kcommon.h"

/* Elements per parallel block of a pass over C-contiguous operands, taken as one run
 * (so an m x 1 or 1 x p output splits as well as a square one). */
#define OZ_RUN 16384

/* Whether argument k (2-D) is C-contiguous: its rows follow each other. */
#define OZ_CONTIG2(k) (OZ_S(k, 1) == 1 && (OZ_N(k, 0) <= 1 || OZ_S(k, 0) == OZ_N(k, 1)))

#define OZ_SAME_SHAPE(a, b) (OZ_N(a, 0) == OZ_N(b, 0) && OZ_N(a, 1) == OZ_N(b, 1))

/* ---- axpy: acc = acc + alpha * float(x) ---------------------------------------------- */

#define OZ_AXPY(T, SUF)                                                                  \
    OZ_INLINE void                                                                      \
    axpy_run_##SUF(double alpha, const T *x, ptrdiff_t xs, double *acc, ptrdiff_t as,   \
                   ptrdiff_t n)                                                         \
    {                                                                                   \
        for (ptrdiff_t j = 0; j < n; j++)                                               \
            acc[j * as] = acc[j * as] + alpha * (double)x[j * xs];                      \
    }                                                                                   \
                                                                                        \
    static void                                                                         \
    axpy_##SUF(ozval *v, int nt)                                                        \
    {                                                                                   \
        double alpha = v[0].d;                                                          \
        const T *x = (const T *)v[1].a.p;                                               \
        double *acc = OZ_D(2);                                                          \
        ptrdiff_t m = OZ_N(2, 0), p = OZ_N(2, 1);                                       \
        if (OZ_CONTIG2(1) && OZ_CONTIG2(2)) {                                           \
            ptrdiff_t total = m * p, nb = (total + OZ_RUN - 1) / OZ_RUN;                \
            OZ_PARALLEL_FOR(nt)                                                         \
            for (ptrdiff_t b = 0; b < nb; b++) {                                        \
                ptrdiff_t j0 = b * OZ_RUN;                                              \
                axpy_run_##SUF(alpha, x + j0, 1, acc + j0, 1,                           \
                               OZ_MIN(total, j0 + OZ_RUN) - j0);                        \
            }                                                                           \
            return;                                                                     \
        }                                                                               \
        ptrdiff_t x0 = OZ_S(1, 0), x1 = OZ_S(1, 1), a0 = OZ_S(2, 0), a1 = OZ_S(2, 1);   \
        OZ_PARALLEL_FOR(nt)                                                             \
        for (ptrdiff_t i = 0; i < m; i++) {                                             \
            if (x1 == 1 && a1 == 1)                                                     \
                axpy_run_##SUF(alpha, x + i * x0, 1, acc + i * a0, 1, p);               \
            else                                                                        \
                axpy_run_##SUF(alpha, x + i * x0, x1, acc + i * a0, a1, p);             \
        }                                                                               \
    }

OZ_AXPY(int32_t, i)
OZ_AXPY(int64_t, l)
OZ_AXPY(double, d)

int
k_axpy(ozval *v, int nt)
{
    if (!OZ_SAME_SHAPE(1, 2))
        return OZK_BADLAYOUT;
    switch (v[1].a.t) {
    case 'i': axpy_i(v, nt); break;
    case 'l': axpy_l(v, nt); break;
    default: axpy_d(v, nt); break;
    }
    return 0;
}

/* ---- axpy_outer: acc = acc + (float(x) * fa[i]) * fb[j] -------------------------------- */

#define OZ_AXPY_OUTER(T, SUF)                                                            \
    OZ_INLINE void                                                                      \
    outer_run_##SUF(const T *x, ptrdiff_t xs, double f, const double *fb, ptrdiff_t bs, \
                    double *acc, ptrdiff_t as, ptrdiff_t n)                             \
    {                                                                                   \
        for (ptrdiff_t j = 0; j < n; j++)                                               \
            acc[j * as] = acc[j * as] + ((double)x[j * xs] * f) * fb[j * bs];           \
    }                                                                                   \
                                                                                        \
    static void                                                                         \
    axpy_outer_##SUF(ozval *v, int nt)                                                  \
    {                                                                                   \
        const T *x = (const T *)v[0].a.p;                                               \
        const double *fa = OZ_D(1), *fb = OZ_D(2);                                      \
        double *acc = OZ_D(3);                                                          \
        ptrdiff_t m = OZ_N(3, 0), p = OZ_N(3, 1);                                       \
        ptrdiff_t x0 = OZ_S(0, 0), x1 = OZ_S(0, 1), fa0 = OZ_S(1, 0), fb0 = OZ_S(2, 0); \
        ptrdiff_t a0 = OZ_S(3, 0), a1 = OZ_S(3, 1);                                     \
        OZ_PARALLEL_FOR(nt)                                                             \
        for (ptrdiff_t i = 0; i < m; i++) {                                             \
            double f = fa[i * fa0];                                                     \
            if (x1 == 1 && a1 == 1 && fb0 == 1)                                         \
                outer_run_##SUF(x + i * x0, 1, f, fb, 1, acc + i * a0, 1, p);           \
            else                                                                        \
                outer_run_##SUF(x + i * x0, x1, f, fb, fb0, acc + i * a0, a1, p);       \
        }                                                                               \
    }

OZ_AXPY_OUTER(int32_t, i)
OZ_AXPY_OUTER(float, f)

int
k_axpy_outer(ozval *v, int nt)
{
    if (!OZ_SAME_SHAPE(0, 3) || OZ_N(1, 0) < OZ_N(3, 0) || OZ_N(2, 0) < OZ_N(3, 1))
        return OZK_BADLAYOUT;
    if (v[0].a.t == 'i')
        axpy_outer_i(v, nt);
    else
        axpy_outer_f(v, nt);
    return 0;
}

/* ---- finish_ef: top = w2 G2 + w1 G1 + w0 G0; acc = acc + alpha top; [acc = (acc fa) fb] */

typedef struct {
    double w2, w1, w0, alpha;
} ef_weights;

OZ_INLINE void
finish_run(double *acc, ptrdiff_t as, const int32_t *g2, ptrdiff_t s2, const int32_t *g1,
           ptrdiff_t s1, const int32_t *g0, ptrdiff_t s0, ef_weights w, double f,
           const double *fb, ptrdiff_t bs, int scale, ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++) {
        double t = w.w2 * (double)g2[j * s2];
        t = t + w.w1 * (double)g1[j * s1];
        t = t + w.w0 * (double)g0[j * s0];
        double val = acc[j * as] + w.alpha * t;
        if (scale)
            val = (val * f) * fb[j * bs];
        acc[j * as] = val;
    }
}

int
k_finish_ef(ozval *v, int nt)
{
    double *acc = OZ_D(0);
    const int32_t *g2 = OZ_I32(1), *g1 = OZ_I32(2), *g0 = OZ_I32(3);
    ef_weights w = {v[4].d, v[5].d, v[6].d, v[7].d};
    const double *fa = OZ_D(8), *fb = OZ_D(9);
    int scale = v[10].i != 0;
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1);
    if (!OZ_SAME_SHAPE(0, 1) || !OZ_SAME_SHAPE(0, 2) || !OZ_SAME_SHAPE(0, 3))
        return OZK_BADLAYOUT;
    if (scale && (OZ_N(8, 0) < m || OZ_N(9, 0) < p))
        return OZK_BADLAYOUT;
    ptrdiff_t a0 = OZ_S(0, 0), a1 = OZ_S(0, 1);
    ptrdiff_t s20 = OZ_S(1, 0), s21 = OZ_S(1, 1), s10 = OZ_S(2, 0), s11 = OZ_S(2, 1);
    ptrdiff_t s00 = OZ_S(3, 0), s01 = OZ_S(3, 1), fa0 = OZ_S(8, 0), fb0 = OZ_S(9, 0);
    int unit = a1 == 1 && s21 == 1 && s11 == 1 && s01 == 1 && fb0 == 1;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < m; i++) {
        double *ai = acc + i * a0;
        const int32_t *r2 = g2 + i * s20, *r1 = g1 + i * s10, *r0 = g0 + i * s00;
        /* fa is read only when scaling (the unscaled call passes a 1-element dummy) */
        double f = scale ? fa[i * fa0] : 1.0;
        if (unit && scale)
            finish_run(ai, 1, r2, 1, r1, 1, r0, 1, w, f, fb, 1, 1, p);
        else if (unit)
            finish_run(ai, 1, r2, 1, r1, 1, r0, 1, w, f, fb, 1, 0, p);
        else
            finish_run(ai, a1, r2, s21, r1, s11, r0, s01, w, f, fb, fb0, scale, p);
    }
    return 0;
}

/* ---- scale_outer: acc = (acc * fa[i]) * fb[j] ------------------------------------------- */

OZ_INLINE void
scale_run(double *acc, ptrdiff_t as, double f, const double *fb, ptrdiff_t bs, ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++)
        acc[j * as] = (acc[j * as] * f) * fb[j * bs];
}

int
k_scale_outer(ozval *v, int nt)
{
    double *acc = OZ_D(0);
    const double *fa = OZ_D(1), *fb = OZ_D(2);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1);
    ptrdiff_t a0 = OZ_S(0, 0), a1 = OZ_S(0, 1), fa0 = OZ_S(1, 0), fb0 = OZ_S(2, 0);
    if (OZ_N(1, 0) < m || OZ_N(2, 0) < p)
        return OZK_BADLAYOUT;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < m; i++) {
        double f = fa[i * fa0];
        if (a1 == 1 && fb0 == 1)
            scale_run(acc + i * a0, 1, f, fb, 1, p);
        else
            scale_run(acc + i * a0, a1, f, fb, fb0, p);
    }
    return 0;
}
