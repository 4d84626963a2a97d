/* A whole small Ozaki-I EF product in one call (ozlinalg.ozaki.small).
 *
 * For products of a few thousand entries the driver's per-step set-up costs far more
 * than the arithmetic. This kernel runs the driver's steps for the EF methods with
 * fixed per-row scales (hybrid-ef, bitmask-ef) and one inner block, with the same
 * IEEE operations in the same order, so the result has the driver's bits:
 *
 *   1. the inner dimension's power-of-two balancing (ozlinalg.ozaki.balance);
 *   2. row normalization of A and of B^T (ozlinalg.ozaki.split.normalize_rows);
 *   3. slices="auto": the count from q_ij = sum_k x_ik**2 y_jk**2 (ozlinalg.ozaki.counts.estimate):
 *      float64 bounds of every q_ij (relative (k + 8) 2**-52) decide it exactly when
 *      the smallest bounds fall between the same two thresholds and no entry is below the
 *      cap (structural zeros, entries with no nonzero term, take no part);
 *   4. the split into s slices;
 *   5. the exact group sums G_g = sum_{i+j=g} A_i B_j^T: with the slices of a row side by
 *      side (B's reversed, as the engine stores them) each entry of G_g is ONE int16
 *      dot product, exact in int32 within the driver's group limit;
 *   6. the accumulation: acc += 2**(-w g) G_g for g = s-1 .. 3, then
 *      top = G_2 + 2**w G_1 + 2**(2w) G_0, acc += 2**(-2w) top;
 *   7. the exponents: two exact multiplications where safe, else one ldexp.
 *
 * Where a step would take another route in the driver (Inf / NaN, entries left to
 * native arithmetic, an undecided count, a group split by the INT32 limit) the kernel
 * does nothing and reports it: the caller runs the driver. Structural zeros (entries
 * with no nonzero term) take no part in the count, as in the driver.
 *
 * info[0] = slices used, info[1] = status (0 done; 1 non-finite; 2 undecided or
 * native entries; 3 group limit; 4 no memory), info[2] = auto's count (thresholds T for
 * up to max(max_slices, the fixed count) slices: with a fixed count the caller warns
 * where auto's is larger); where info has 6 entries, info[3..5] = nanoseconds spent
 * splitting (with the balancing, normalization and decision), in the group sums, and
 * accumulating (ozlinalg.profile()'s time split).
 */
#include "kcommon.h"
#include <time.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

static inline int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define BAL_LIMIT 900 /* ozlinalg.ozaki.balance._LIMIT */
#define SAFE_EXP 1000 /* ozlinalg.ozaki.scaling._SAFE */
#define DEC_SLACK 9.094947017729282e-13 /* ozlinalg.ozaki.counts.estimate._SLACK = 2**-40 */

static inline int
frexp_e(double v)
{
    int e;
    frexp(v, &e);
    return e;
}

/* Python's floor division of ints */
static inline int
floordiv2(int x)
{
    return x >= 0 ? x / 2 : -((-x + 1) / 2);
}

/* The balancing shifts f_k (0 when the driver leaves the product as it is).
 * Returns 1 when balanced. */
static int
balance_shifts(const double *a, const double *bt, ptrdiff_t m, ptrdiff_t k, ptrdiff_t p,
               int min_shift, int *f, double *work)
{
    double *restrict ca = work, *restrict rb = work + k;
    double amin = INFINITY, bmin = INFINITY, camax = 0.0, rbmax = 0.0;
    for (ptrdiff_t kk = 0; kk < k; kk++)
        ca[kk] = rb[kk] = 0.0;
    for (ptrdiff_t i = 0; i < m; i++) { /* column maxima: elementwise, vectorizes */
        const double *restrict ai = a + i * k;
        for (ptrdiff_t kk = 0; kk < k; kk++) {
            double v = fabs(ai[kk]);
            ca[kk] = v > ca[kk] ? v : ca[kk];
        }
    }
    for (ptrdiff_t j = 0; j < p; j++) {
        const double *restrict bj = bt + j * k;
        for (ptrdiff_t kk = 0; kk < k; kk++) {
            double v = fabs(bj[kk]);
            rb[kk] = v > rb[kk] ? v : rb[kk];
        }
    }
    int fmax = 0, fmin = 0;
    for (ptrdiff_t kk = 0; kk < k; kk++) {
        int ok = ca[kk] > 0.0 && rb[kk] > 0.0;
        int ea = frexp_e(ok ? ca[kk] : 1.0), eb = frexp_e(ok ? rb[kk] : 1.0);
        f[kk] = floordiv2(ea - eb);
        if (kk == 0 || f[kk] > fmax)
            fmax = f[kk];
        if (kk == 0 || f[kk] < fmin)
            fmin = f[kk];
        if (ca[kk] > camax)
            camax = ca[kk];
        if (rb[kk] > rbmax)
            rbmax = rb[kk];
    }
    if (OZ_MAX(fmax, -fmin) < OZ_MAX(1, min_shift))
        return 0;
    /* the smallest nonzero magnitudes, only where the shifts would apply */
    for (ptrdiff_t i = 0; i < m * k; i++) {
        double v = fabs(a[i]);
        if (v > 0.0 && v < amin)
            amin = v;
    }
    for (ptrdiff_t i = 0; i < p * k; i++) {
        double v = fabs(bt[i]);
        if (v > 0.0 && v < bmin)
            bmin = v;
    }
    int lo_a = amin == INFINITY ? -2000 : frexp_e(amin) - 1;
    int lo_b = bmin == INFINITY ? -2000 : frexp_e(bmin) - 1;
    int hi_a = frexp_e(camax), hi_b = frexp_e(rbmax);
    if (lo_a - fmax < -BAL_LIMIT || hi_a - fmin > BAL_LIMIT || lo_b + fmin < -BAL_LIMIT ||
        hi_b + fmax > BAL_LIMIT)
        return 0;
    return 1;
}

/* A contiguous copy of the operand (rows x k, any strides); returns nonzero when it
 * holds Inf or NaN (x - x is NaN exactly there). */
static int
gather(const double *a, ptrdiff_t a0, ptrdiff_t a1, ptrdiff_t rows, ptrdiff_t k,
       double *restrict x)
{
    for (ptrdiff_t i = 0; i < rows; i++) {
        const double *ai = a + i * a0;
        double *restrict xi = x + i * k;
        if (a1 == 1)
            memcpy(xi, ai, sizeof(double) * (size_t)k);
        else
            for (ptrdiff_t kk = 0; kk < k; kk++)
                xi[kk] = ai[kk * a1];
    }
    double bad[8] = {0}; /* eight lanes: the loop vectorizes */
    ptrdiff_t n = rows * k, n8 = n - n % 8;
    for (ptrdiff_t e = 0; e < n8; e += 8)
        for (int l = 0; l < 8; l++)
            bad[l] += x[e + l] - x[e + l];
    for (ptrdiff_t e = n8; e < n; e++)
        bad[0] += x[e] - x[e];
    double flag = 0.0;
    for (int l = 0; l < 8; l++)
        flag += bad[l];
    return flag != 0.0;
}

/* The balanced (x * 2**(sign f_k): exact, the shifts keep every value normal) and
 * row-normalized operand (x = (x * f1) * f2, max in [0.5, 1)), in place. */
static void
normalize(double *x, ptrdiff_t rows, ptrdiff_t k, const int *f, int sign, double *fk,
          int32_t *exps)
{
    if (f)
        for (ptrdiff_t kk = 0; kk < k; kk++)
            fk[kk] = ldexp(1.0, sign * f[kk]);
    for (ptrdiff_t i = 0; i < rows; i++) {
        double *restrict xi = x + i * k;
        if (f)
            for (ptrdiff_t kk = 0; kk < k; kk++)
                xi[kk] = xi[kk] * fk[kk];
        double m = oz_row_absmax(xi, k); /* (finite: the lanes' order gives the same) */
        double f1, f2;
        exps[i] = oz_row_factors(m, &f1, &f2);
        for (ptrdiff_t kk = 0; kk < k; kk++)
            xi[kk] = (xi[kk] * f1) * f2;
    }
}

/* Index of the first threshold at or below v (len when none): CountPlan._bucket. */
static ptrdiff_t
bucket(double v, const double *T, ptrdiff_t nt, ptrdiff_t ts)
{
    for (ptrdiff_t n = 0; n < nt; n++)
        if (v >= T[n * ts])
            return n;
    return nt;
}

/* True when every term a_kk b_kk is zero: a structural zero of the product (the operands
 * as given: normalization may have taken a tiny entry to zero). */
static int
structural_zero(const double *a, ptrdiff_t a1, const double *b, ptrdiff_t b1, ptrdiff_t k)
{
    for (ptrdiff_t kk = 0; kk < k; kk++)
        if (a[kk * a1] != 0.0 && b[kk * b1] != 0.0)
            return 0;
    return 1;
}

/* slices="auto": the count index, or -1 when the bounds do not decide it. Every entry's
 * float64 q (any summation order: nonnegative terms) is within relative (k + 8) 2**-52
 * of the exact one (CountPlan's host bounds); the bounds are monotone in q, so those of
 * the smallest computed q bound the smallest exact one. Structural zeros (q = 0 with no
 * nonzero term in the operands as given, a / bt with their strides) take no part, as in
 * CountPlan.finish (its ``pattern``); only structural zeros: index 0 (one slice, as
 * plan_auto). ``work`` holds k p + p doubles. */
static ptrdiff_t
decide_count(const double *xa, const double *xb, ptrdiff_t m, ptrdiff_t p, ptrdiff_t k,
             const double *T, ptrdiff_t nt, ptrdiff_t ts, double *work, const double *a,
             ptrdiff_t a0, ptrdiff_t a1, const double *bt, ptrdiff_t b0, ptrdiff_t b1)
{
    double *restrict y2t = work, *restrict q = work + k * p;
    for (ptrdiff_t j = 0; j < p; j++)
        for (ptrdiff_t kk = 0; kk < k; kk++) {
            double y = xb[j * k + kk];
            y2t[kk * p + j] = y * y;
        }
    double qmin = INFINITY;
    for (ptrdiff_t i = 0; i < m; i++) {
        const double *x = xa + i * k;
        for (ptrdiff_t j = 0; j < p; j++)
            q[j] = 0.0;
        ptrdiff_t j0 = 0;
#if defined(__AVX512F__)
        /* 32 columns in four registers across the inner loop (an FMA rounds less than a
         * product and a sum: the bound holds all the more) */
        for (; j0 + 32 <= p; j0 += 32) {
            __m512d c0 = _mm512_setzero_pd(), c1 = _mm512_setzero_pd();
            __m512d c2 = _mm512_setzero_pd(), c3 = _mm512_setzero_pd();
            for (ptrdiff_t kk = 0; kk < k; kk++) {
                __m512d x2 = _mm512_set1_pd(x[kk] * x[kk]);
                const double *yr = y2t + kk * p + j0;
                c0 = _mm512_fmadd_pd(x2, _mm512_loadu_pd(yr), c0);
                c1 = _mm512_fmadd_pd(x2, _mm512_loadu_pd(yr + 8), c1);
                c2 = _mm512_fmadd_pd(x2, _mm512_loadu_pd(yr + 16), c2);
                c3 = _mm512_fmadd_pd(x2, _mm512_loadu_pd(yr + 24), c3);
            }
            _mm512_storeu_pd(q + j0, c0);
            _mm512_storeu_pd(q + j0 + 8, c1);
            _mm512_storeu_pd(q + j0 + 16, c2);
            _mm512_storeu_pd(q + j0 + 24, c3);
        }
#elif defined(__AVX2__)
        /* 16 columns in four registers (no FMA: -ffp-contract=off; a product and a sum
         * round as the loop below does) */
        for (; j0 + 16 <= p; j0 += 16) {
            __m256d c0 = _mm256_setzero_pd(), c1 = _mm256_setzero_pd();
            __m256d c2 = _mm256_setzero_pd(), c3 = _mm256_setzero_pd();
            for (ptrdiff_t kk = 0; kk < k; kk++) {
                __m256d x2 = _mm256_set1_pd(x[kk] * x[kk]);
                const double *yr = y2t + kk * p + j0;
                c0 = _mm256_add_pd(c0, _mm256_mul_pd(x2, _mm256_loadu_pd(yr)));
                c1 = _mm256_add_pd(c1, _mm256_mul_pd(x2, _mm256_loadu_pd(yr + 4)));
                c2 = _mm256_add_pd(c2, _mm256_mul_pd(x2, _mm256_loadu_pd(yr + 8)));
                c3 = _mm256_add_pd(c3, _mm256_mul_pd(x2, _mm256_loadu_pd(yr + 12)));
            }
            _mm256_storeu_pd(q + j0, c0);
            _mm256_storeu_pd(q + j0 + 4, c1);
            _mm256_storeu_pd(q + j0 + 8, c2);
            _mm256_storeu_pd(q + j0 + 12, c3);
        }
#endif
        for (ptrdiff_t kk = 0; kk < k; kk++) {
            double x2 = x[kk] * x[kk];
            const double *restrict yr = y2t + kk * p;
            for (ptrdiff_t j = j0; j < p; j++)
                q[j] = q[j] + x2 * yr[j];
        }
        for (ptrdiff_t j = 0; j < p; j++) {
            if (q[j] == 0.0 && structural_zero(a + i * a0, a1, bt + j * b0, b1, k))
                continue;
            qmin = q[j] < qmin ? q[j] : qmin;
        }
    }
    if (qmin == INFINITY)
        return 0;
    double rel = (double)(k + 8) * 2.220446049250313e-16;          /* (k + 8) 2**-52 */
    double absf = 8.0 * (double)(k + 4) * 4.9406564584124654e-324; /* 8 (k + 4) 2**-1074 */
    double L = OZ_MAX(qmin - absf, 0.0) / (1.0 + rel) * (1.0 - DEC_SLACK);
    double H = (qmin + absf) / (1.0 - rel) * (1.0 + DEC_SLACK) + absf;
    double cap = T[(nt - 1) * ts];
    if (!(L > 0.0) || !(L >= cap))
        return -1; /* a zero entry, or entries that may be native */
    ptrdiff_t b = bucket(H, T, nt, ts);
    return b == bucket(L, T, nt, ts) ? b : -1;
}

/* One digit of each of k values: d = trunc / rint(x) as int16, x = (x - d) 2**w. Inlined
 * with a constant trunc_, so that the loop is one rounding instruction per vector. */
OZ_INLINE void
digits(double *restrict x, int16_t *restrict d, ptrdiff_t k, double unit, int trunc_)
{
    for (ptrdiff_t kk = 0; kk < k; kk++) {
        double r = trunc_ ? trunc(x[kk]) : rint(x[kk]);
        d[kk] = (int16_t)r;
        x[kk] = (x[kk] - r) * unit;
    }
}

/* Two digits (inner indices 2 kp and 2 kp + 1) of each of p columns, packed into one
 * uint32 per column as group_sums_block reads them; r1 NULL: the second is zero. */
OZ_INLINE void
digit_pairs(double *restrict r0, double *restrict r1, uint32_t *restrict o, ptrdiff_t p,
            double unit, int trunc_)
{
    if (r1) {
        for (ptrdiff_t j = 0; j < p; j++) {
            double d0 = trunc_ ? trunc(r0[j]) : rint(r0[j]);
            double d1 = trunc_ ? trunc(r1[j]) : rint(r1[j]);
            r0[j] = (r0[j] - d0) * unit;
            r1[j] = (r1[j] - d1) * unit;
            o[j] = (uint32_t)(uint16_t)(int16_t)d0 | ((uint32_t)(uint16_t)(int16_t)d1 << 16);
        }
    } else {
        for (ptrdiff_t j = 0; j < p; j++) {
            double d0 = trunc_ ? trunc(r0[j]) : rint(r0[j]);
            r0[j] = (r0[j] - d0) * unit;
            o[j] = (uint32_t)(uint16_t)(int16_t)d0;
        }
    }
}

/* Slices of normalized rows x (consumed) as int16, row i's slices side by side along
 * the inner dimension: d[(i * s + slot) * k + kk], slot t (or s - 1 - t where
 * reversed: B's, so that B_g, ..., B_0 are adjacent), and the unit of slice 0 of
 * each row (hybrid: the row's grid; bitmask: 2**-w). */
static void
split_rows(double *x, ptrdiff_t rows, ptrdiff_t k, int s, int width, int trunc_, int reversed,
           int16_t *d, double *base)
{
    double unit = ldexp(1.0, width);
    for (ptrdiff_t i = 0; i < rows; i++) {
        double *xi = x + i * k;
        double f;
        if (trunc_) {
            f = unit;
            base[i] = ldexp(1.0, -width);
        } else {
            double b = oz_grid(oz_row_absmax(xi, k), width);
            base[i] = b;
            f = 1.0 / b;
        }
        for (ptrdiff_t kk = 0; kk < k; kk++)
            xi[kk] = xi[kk] * f;
        for (int t = 0; t < s; t++) {
            int16_t *dt = d + ((ptrdiff_t)i * s + (reversed ? s - 1 - t : t)) * k;
            if (trunc_)
                digits(xi, dt, k, unit, 1);
            else
                digits(xi, dt, k, unit, 0);
        }
    }
}

/* B's slices straight into the pair layout of group_sums_block: the same digits as
 * split_rows (x scaled by the row's factor, then rint / trunc and the residual in units of
 * the next digit, per element), worked through a transposed copy vt (k x p, in ``work``)
 * so that two inner indices' digits are packed into one int32 per column and stored in
 * runs over the columns. */
static void
split_pairs(const double *xb, ptrdiff_t p, ptrdiff_t k, int s, int width, int trunc_,
            double *base, double *restrict vt, uint32_t *restrict bq, ptrdiff_t kp2,
            ptrdiff_t p32)
{
    double unit = ldexp(1.0, width);
    for (ptrdiff_t j = 0; j < p; j++) {
        const double *xj = xb + j * k;
        double f;
        if (trunc_) {
            f = unit;
            base[j] = ldexp(1.0, -width);
        } else {
            double b = oz_grid(oz_row_absmax(xj, k), width);
            base[j] = b;
            f = 1.0 / b;
        }
        for (ptrdiff_t kk = 0; kk < k; kk++)
            vt[kk * p + j] = xj[kk] * f;
    }
    for (int t = 0; t < s; t++) {
        for (ptrdiff_t kp = 0; kp < kp2; kp++) {
            double *r0 = vt + 2 * kp * p;
            double *r1 = 2 * kp + 1 < k ? r0 + p : NULL;
            uint32_t *o = bq + ((ptrdiff_t)t * kp2 + kp) * p32;
            if (trunc_)
                digit_pairs(r0, r1, o, p, unit, 1);
            else
                digit_pairs(r0, r1, o, p, unit, 0);
        }
    }
}

#if defined(__AVX512BW__)
#define SMALL_SIMD 1
/* The group sums of four rows of A (i0 .. i0 + 3; rows past m are zero) against every
 * column, 32 columns at a time, with no horizontal sum: B's slices are stored as
 * bq[((u * kp2 + kk / 2) * p32 + j) * 2 + kk % 2] (pairs of inner indices side by side,
 * zero-padded to kp2 pairs and p32 columns), each A pair (a_kk, a_kk+1) broadcast, and
 * vpmaddwd adds a_kk b_kk,j + a_kk+1 b_kk+1,j into 16 int32 lanes: 4 x 2 accumulators in
 * registers share each load. gi[(r * s + g) * p32 + j] = G_g[i0 + r, j]. A's rows (slot
 * stride k, row stride s k) are read a pair at a time: the element after a slot's last
 * one meets a zero of B. */
/* (generated twice below: vpmaddwd + vpaddd, and AVX-512 VNNI's vpdpwssd, which adds the
 * same int16 pair products into the int32 lanes in one instruction; both wrap modulo
 * 2**32 alike, and the sums fit INT32, so the bits are the same) */
#define GROUP_SUMS_BLOCK(NAME, ATTR, MAC) \
static ATTR void                                                                    \
NAME(const int16_t *ar, const int16_t *bq, ptrdiff_t k, ptrdiff_t kp2,              \
                 ptrdiff_t p32, int s, int32_t *gi)                                 \
{                                                                                   \
    ptrdiff_t rs = (ptrdiff_t)s * k; /* row stride of A's digits */                 \
    for (int g = 0; g < s; g++) {                                                   \
        for (ptrdiff_t jb = 0; jb < p32; jb += 32) {                                \
            __m512i c00 = _mm512_setzero_si512(), c01 = _mm512_setzero_si512();     \
            __m512i c10 = _mm512_setzero_si512(), c11 = _mm512_setzero_si512();     \
            __m512i c20 = _mm512_setzero_si512(), c21 = _mm512_setzero_si512();     \
            __m512i c30 = _mm512_setzero_si512(), c31 = _mm512_setzero_si512();     \
            for (int t = 0; t <= g; t++) {                                          \
                const int16_t *a0 = ar + (ptrdiff_t)t * k;                          \
                const int16_t *b = bq + ((ptrdiff_t)(g - t) * kp2 * p32 + jb) * 2;  \
                for (ptrdiff_t kp = 0; kp < kp2; kp++) {                            \
                    const int16_t *bk = b + kp * p32 * 2;                           \
                    __m512i b0 = _mm512_loadu_si512((const void *)bk);              \
                    __m512i b1 = _mm512_loadu_si512((const void *)(bk + 32));       \
                    int32_t q0, q1, q2, q3;                                         \
                    memcpy(&q0, a0 + 2 * kp, sizeof q0);                            \
                    memcpy(&q1, a0 + rs + 2 * kp, sizeof q1);                       \
                    memcpy(&q2, a0 + 2 * rs + 2 * kp, sizeof q2);                   \
                    memcpy(&q3, a0 + 3 * rs + 2 * kp, sizeof q3);                   \
                    __m512i x0 = _mm512_set1_epi32(q0), x1 = _mm512_set1_epi32(q1); \
                    __m512i x2 = _mm512_set1_epi32(q2), x3 = _mm512_set1_epi32(q3); \
                    MAC(c00, x0, b0);                                               \
                    MAC(c01, x0, b1);                                               \
                    MAC(c10, x1, b0);                                               \
                    MAC(c11, x1, b1);                                               \
                    MAC(c20, x2, b0);                                               \
                    MAC(c21, x2, b1);                                               \
                    MAC(c30, x3, b0);                                               \
                    MAC(c31, x3, b1);                                               \
                }                                                                   \
            }                                                                       \
            int32_t *o = gi + (ptrdiff_t)g * p32 + jb;                              \
            ptrdiff_t rstride = (ptrdiff_t)s * p32;                                 \
            _mm512_storeu_si512((void *)o, c00);                                    \
            _mm512_storeu_si512((void *)(o + 16), c01);                             \
            _mm512_storeu_si512((void *)(o + rstride), c10);                        \
            _mm512_storeu_si512((void *)(o + rstride + 16), c11);                   \
            _mm512_storeu_si512((void *)(o + 2 * rstride), c20);                    \
            _mm512_storeu_si512((void *)(o + 2 * rstride + 16), c21);               \
            _mm512_storeu_si512((void *)(o + 3 * rstride), c30);                    \
            _mm512_storeu_si512((void *)(o + 3 * rstride + 16), c31);               \
        }                                                                           \
    }                                                                               \
}

#define MAC_MADD(c, x, b) c = _mm512_add_epi32(c, _mm512_madd_epi16(x, b))
#define MAC_VNNI(c, x, b) c = _mm512_dpwssd_epi32(c, x, b)
GROUP_SUMS_BLOCK(group_sums_madd, , MAC_MADD)
GROUP_SUMS_BLOCK(group_sums_vnni, __attribute__((target("avx512f,avx512bw,avx512vnni"))),
                 MAC_VNNI)

/* The x86-64-v4 build runs on AVX-512 CPUs without VNNI (Skylake-X): VNNI where the CPU
 * has it, asked once. */
static int small_vnni = -1; /* -1: not asked yet (small_simd() may set 0 for the tests) */

static int
small_has_vnni(void)
{
    return __builtin_cpu_supports("avx512vnni") ? 1 : 0;
}

/* Inner dimensions from which the VNNI sums run: on a 2-core Ice Lake Xeon they made 16 x
 * 16 to 64 x 64 products 10-40 % faster, but the 8 x 8 solve by name (products of k = 4)
 * 20 % slower as a whole, its Python and LAPACK parts included (the core's AVX-512
 * frequency, most likely; not pinned down), where the sums themselves take a few hundred
 * cycles either way. */
#define SMALL_VNNI_MIN_K 16

static void
group_sums_block(const int16_t *ar, const int16_t *bq, ptrdiff_t k, ptrdiff_t kp2,
                 ptrdiff_t p32, int s, int32_t *gi)
{
    if (small_vnni < 0)
        small_vnni = small_has_vnni();
    if (small_vnni && k >= SMALL_VNNI_MIN_K)
        group_sums_vnni(ar, bq, k, kp2, p32, s, gi);
    else
        group_sums_madd(ar, bq, k, kp2, p32, s, gi);
}
#elif defined(__AVX2__)
#define SMALL_SIMD 1
/* group_sums_block of the AVX-512 build on 256-bit registers: the same storage and
 * output, 16 columns at a time (two registers of 8 int32 lanes), 4 x 2 accumulators.
 * The group sums are exact integers (each below the INT32 group limit, and so is every
 * partial sum of their products), so the order of the additions does not change them. */
static void
group_sums_block(const int16_t *ar, const int16_t *bq, ptrdiff_t k, ptrdiff_t kp2,
                 ptrdiff_t p32, int s, int32_t *gi)
{
    ptrdiff_t rs = (ptrdiff_t)s * k; /* row stride of A's digits */
    for (int g = 0; g < s; g++) {
        for (ptrdiff_t jb = 0; jb < p32; jb += 16) {
            __m256i c00 = _mm256_setzero_si256(), c01 = _mm256_setzero_si256();
            __m256i c10 = _mm256_setzero_si256(), c11 = _mm256_setzero_si256();
            __m256i c20 = _mm256_setzero_si256(), c21 = _mm256_setzero_si256();
            __m256i c30 = _mm256_setzero_si256(), c31 = _mm256_setzero_si256();
            for (int t = 0; t <= g; t++) {
                const int16_t *a0 = ar + (ptrdiff_t)t * k;
                const int16_t *b = bq + ((ptrdiff_t)(g - t) * kp2 * p32 + jb) * 2;
                for (ptrdiff_t kp = 0; kp < kp2; kp++) {
                    const int16_t *bk = b + kp * p32 * 2;
                    __m256i b0 = _mm256_loadu_si256((const __m256i *)bk);
                    __m256i b1 = _mm256_loadu_si256((const __m256i *)(bk + 16));
                    int32_t q0, q1, q2, q3;
                    memcpy(&q0, a0 + 2 * kp, sizeof q0);
                    memcpy(&q1, a0 + rs + 2 * kp, sizeof q1);
                    memcpy(&q2, a0 + 2 * rs + 2 * kp, sizeof q2);
                    memcpy(&q3, a0 + 3 * rs + 2 * kp, sizeof q3);
                    __m256i x0 = _mm256_set1_epi32(q0), x1 = _mm256_set1_epi32(q1);
                    __m256i x2 = _mm256_set1_epi32(q2), x3 = _mm256_set1_epi32(q3);
                    c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(x0, b0));
                    c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(x0, b1));
                    c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(x1, b0));
                    c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(x1, b1));
                    c20 = _mm256_add_epi32(c20, _mm256_madd_epi16(x2, b0));
                    c21 = _mm256_add_epi32(c21, _mm256_madd_epi16(x2, b1));
                    c30 = _mm256_add_epi32(c30, _mm256_madd_epi16(x3, b0));
                    c31 = _mm256_add_epi32(c31, _mm256_madd_epi16(x3, b1));
                }
            }
            int32_t *o = gi + (ptrdiff_t)g * p32 + jb;
            ptrdiff_t rstride = (ptrdiff_t)s * p32;
            _mm256_storeu_si256((__m256i *)o, c00);
            _mm256_storeu_si256((__m256i *)(o + 8), c01);
            _mm256_storeu_si256((__m256i *)(o + rstride), c10);
            _mm256_storeu_si256((__m256i *)(o + rstride + 8), c11);
            _mm256_storeu_si256((__m256i *)(o + 2 * rstride), c20);
            _mm256_storeu_si256((__m256i *)(o + 2 * rstride + 8), c21);
            _mm256_storeu_si256((__m256i *)(o + 3 * rstride), c30);
            _mm256_storeu_si256((__m256i *)(o + 3 * rstride + 8), c31);
        }
    }
}
#else
#define SMALL_SIMD 0
#endif

/* Columns of B the SIMD group sums take at a time (B's pair layout is padded to a
 * multiple), and the fewest columns for which they run: below it the padding would be
 * most of their work (a matrix-vector product pads one column to 16 or 32), and the
 * dots below run instead (the same integer sums, so the same bits). */
#if defined(__AVX512BW__)
#define SMALL_PBLK 32
#else
#define SMALL_PBLK 16
#endif
#define SMALL_SIMD_MIN_P 4

/* sum x[e] y[e]: the integer dot product (|sum| < 2**31: the INT32 group limit). */
static int32_t
dot16(const int16_t *restrict x, const int16_t *restrict y, ptrdiff_t n)
{
    int32_t acc = 0;
    for (ptrdiff_t e = 0; e < n; e++)
        acc += (int32_t)x[e] * (int32_t)y[e];
    return acc;
}

/* The whole product on raw strided arrays (the kernel below, and the one-level LU of
 * k_one_level.c, which runs its products through it): a (m x k, strides a0, a1), bt (p x k),
 * out (m x p); T holds nthr thresholds at stride ts; info at stride i1 (3 entries, or 6
 * where timed). Returns 0, or OZK_BADLAYOUT. */
int
oz_small_ef(const double *a, ptrdiff_t a0, ptrdiff_t a1, ptrdiff_t m, ptrdiff_t k,
            const double *bt, ptrdiff_t b0, ptrdiff_t b1, ptrdiff_t p, double *out,
            ptrdiff_t o0, ptrdiff_t o1, int trunc_, int width, int s_fixed, const double *T,
            ptrdiff_t nthr, ptrdiff_t ts, int min_shift, int64_t *info, ptrdiff_t i1, int timed)
{
    int64_t t_start = timed ? now_ns() : 0, t_int8 = 0, t_acc = 0, t_mark = 0;
    if (m == 0 || p == 0 || k == 0 || nthr < 1)
        return OZK_BADLAYOUT;
    info[0] = 0;
    info[i1] = SMALL_DONE;

    int smax = OZ_MAX(s_fixed, (int)nthr);
    size_t nx = (size_t)(m + p) * (size_t)k;
    size_t need = nx + 2 * (size_t)smax + 2 * (size_t)k + (size_t)(m + p) + (size_t)(k + 2) * p;
    double *buf = malloc(sizeof(double) * need);
    ptrdiff_t m4 = (m + 3) / 4 * 4; /* A's rows padded for the 4-row blocks */
    int16_t *dig = calloc((size_t)smax * (size_t)(m4 + p) * (size_t)k + 2, sizeof(int16_t));
    int *f = malloc(sizeof(int) * (size_t)k);
    int32_t *ex = malloc(sizeof(int32_t) * (size_t)(m + p));
    if (buf == NULL || dig == NULL || f == NULL || ex == NULL) {
        free(buf);
        free(dig);
        free(f);
        free(ex);
        info[i1] = SMALL_NOMEM;
        return 0;
    }
    double *xa = buf, *xb = buf + (size_t)m * k;
    double *g = xb + (size_t)p * k;               /* s: one entry's group sums */
    double *gscale = g + smax;                    /* s: 2**(-w g) */
    double *work = gscale + smax;                 /* 2 k */
    double *base = work + 2 * k;                  /* m + p */
    double *dwork = base + m + p;                 /* (k + 1) p: the decision */
    double *rowbuf = dwork + (size_t)(k + 1) * p; /* p: a row's accumulators */
    (void)rowbuf; /* (the SIMD path's) */
    int32_t *ea = ex, *eb = ex + m;
    int status = SMALL_DONE;

    if (gather(a, a0, a1, m, k, xa) || gather(bt, b0, b1, p, k, xb)) {
        status = SMALL_NONFINITE;
        goto done;
    }
    int bal = min_shift > 0 && balance_shifts(xa, xb, m, k, p, min_shift, f, work);
    normalize(xa, m, k, bal ? f : NULL, -1, work, ea);
    normalize(xb, p, k, bal ? f : NULL, 1, work, eb);

    /* auto's count (with a fixed count too: the driver warns when it is larger) */
    ptrdiff_t n_auto = decide_count(xa, xb, m, p, k, T, nthr, ts, dwork, a, a0, a1, bt, b0, b1);
    if (n_auto < 0) {
        status = SMALL_UNDECIDED;
        goto done;
    }
    int s = s_fixed > 0 ? s_fixed : (int)n_auto + 1;
    /* ozlinalg.ozaki.params.group_limit: one engine call per group (no chunks) */
    {
        int lk = 0;
        while (((ptrdiff_t)1 << lk) < k)
            lk++;
        int e = 31 - 2 * width - lk;
        if (e < 31 && (e < 0 || ((int64_t)1 << e) < s)) {
            status = SMALL_GROUPS;
            goto done;
        }
    }

    int16_t *da = dig, *db = dig + (size_t)s * m4 * k;
    split_rows(xa, m, k, s, width, trunc_, 0, da, base);
    ptrdiff_t kp2 = (k + 1) / 2, p32 = (p + SMALL_PBLK - 1) / SMALL_PBLK * SMALL_PBLK;
    int16_t *bq = NULL;
    int32_t *gi = NULL;
    int simd = SMALL_SIMD && p >= SMALL_SIMD_MIN_P;
    if (simd) {
        bq = calloc((size_t)s * kp2 * p32 * 2, sizeof(int16_t));
        gi = malloc(sizeof(int32_t) * 4 * (size_t)s * p32);
        if (bq == NULL || gi == NULL) {
            free(bq);
            free(gi);
            status = SMALL_NOMEM;
            goto done;
        }
        split_pairs(xb, p, k, s, width, trunc_, base + m, dwork, (uint32_t *)bq, kp2, p32);
    } else {
        split_rows(xb, p, k, s, width, trunc_, 1, db, base + m);
    }

    /* the exponents of the result, and whether two multiplications are exact */
    int ea_min = 0, ea_max = 0, eb_min = 0, eb_max = 0;
    for (ptrdiff_t i = 0; i < m; i++) {
        ea[i] += frexp_e(base[i]) - 1;
        if (i == 0 || ea[i] < ea_min)
            ea_min = ea[i];
        if (i == 0 || ea[i] > ea_max)
            ea_max = ea[i];
    }
    for (ptrdiff_t j = 0; j < p; j++) {
        eb[j] += frexp_e(base[m + j]) - 1;
        if (j == 0 || eb[j] < eb_min)
            eb_min = eb[j];
        if (j == 0 || eb[j] > eb_max)
            eb_max = eb[j];
    }
    double lo = (double)(-width * (s - 1)) + (double)(-width * (s - 1)) -
                (double)(2 * (width + 1) * s);
    double hi = ((log2((double)k) + (double)(2 * width)) + log2((double)(s * s + 1))) + 2.0;
    int safe = (ea_max + hi < SAFE_EXP) && (ea_min + lo > -SAFE_EXP) &&
               (ea_max + eb_max + hi < SAFE_EXP) && (ea_min + eb_min + lo > -SAFE_EXP) &&
               (-SAFE_EXP < eb_min) && (eb_max < SAFE_EXP);

    double w1 = ldexp(1.0, width), w0 = ldexp(1.0, 2 * width), alpha = ldexp(1.0, -2 * width);
    for (int gg = 0; gg < s; gg++)
        gscale[gg] = ldexp(1.0, -width * gg);
    if (timed) {
        t_mark = now_ns();
        info[3 * i1] = t_mark - t_start;
    }
    double *fb = base + m; /* B's bases are no longer needed: 2**eb */
    for (ptrdiff_t j = 0; j < p; j++)
        fb[j] = ldexp(1.0, eb[j]);
    for (ptrdiff_t i = 0; i < m; i++) {
        const int16_t *ar = da + (ptrdiff_t)i * s * k; /* A_0, ..., A_{s-1} of row i */
        double fa = ldexp(1.0, ea[i]);
#if SMALL_SIMD
        if (simd) {
        if (i % 4 == 0) {
            group_sums_block(ar, bq, k, kp2, p32, s, gi);
            if (timed) {
                int64_t t = now_ns();
                t_int8 += t - t_mark;
                t_mark = t;
            }
        }
        /* the accumulation, per entry the driver's operations in its order; over a row's
         * columns at once (elementwise: the same bits, and the loops vectorize) */
        const int32_t *gr = gi + (ptrdiff_t)(i % 4) * s * p32;
        double *restrict accr = rowbuf;
        for (ptrdiff_t j = 0; j < p; j++)
            accr[j] = 0.0;
        for (int gg = s - 1; gg >= 3; gg--) {
            const int32_t *restrict gv = gr + (ptrdiff_t)gg * p32;
            double sc = gscale[gg];
            for (ptrdiff_t j = 0; j < p; j++)
                accr[j] = accr[j] + sc * (double)gv[j];
        }
        const int32_t *g0 = gr, *g1 = s > 1 ? gr + p32 : NULL, *g2 = s > 2 ? gr + 2 * p32 : NULL;
        double *oi = out + i * o0;
        for (ptrdiff_t j = 0; j < p; j++) {
            double t = 1.0 * (g2 ? (double)g2[j] : 0.0);
            t = t + w1 * (g1 ? (double)g1[j] : 0.0);
            t = t + w0 * (double)g0[j];
            double val = accr[j] + alpha * t;
            if (safe)
                val = (val * fa) * fb[j];
            else
                val = ldexp(val, ea[i] + eb[j]);
            oi[j * o1] = val;
        }
        } else
#endif
        for (ptrdiff_t j = 0; j < p; j++) {
            const int16_t *br = db + (ptrdiff_t)j * s * k; /* B_{s-1}, ..., B_0 of row j */
            /* G_g = A_0 B_g + ... + A_g B_0: one dot of the adjacent slices */
            for (int gg = 0; gg < s; gg++)
                g[gg] = (double)dot16(ar, br + (ptrdiff_t)(s - 1 - gg) * k,
                                      (ptrdiff_t)(gg + 1) * k);
            double acc = 0.0;
            for (int gg = s - 1; gg >= 3; gg--)
                acc = acc + gscale[gg] * g[gg];
            double g2 = s > 2 ? g[2] : 0.0, g1 = s > 1 ? g[1] : 0.0;
            double t = 1.0 * g2;
            t = t + w1 * g1;
            t = t + w0 * g[0];
            double val = acc + alpha * t;
            if (safe)
                val = (val * fa) * fb[j];
            else
                val = ldexp(val, ea[i] + eb[j]);
            out[i * o0 + j * o1] = val;
        }
        if (timed) {
            int64_t t = now_ns();
            t_acc += t - t_mark; /* (without SIMD: the dots too) */
            t_mark = t;
        }
    }
    info[0] = s;
    info[2 * i1] = n_auto + 1;
    if (timed) {
        info[4 * i1] = simd ? t_int8 : t_acc;
        info[5 * i1] = simd ? t_acc : 0;
    }
    free(bq);
    free(gi);
done:
    info[i1] = status;
    free(buf);
    free(dig);
    free(f);
    free(ex);
    return 0;
}

int
k_small_ef_product(ozval *v, int nt)
{
    (void)nt;
    ptrdiff_t m = OZ_N(0, 0), k = OZ_N(0, 1), p = OZ_N(1, 0);
    if (OZ_N(1, 1) != k || OZ_N(2, 0) != m || OZ_N(2, 1) != p || OZ_N(8, 0) < 3)
        return OZK_BADLAYOUT;
    return oz_small_ef(OZ_D(0), OZ_S(0, 0), OZ_S(0, 1), m, k, OZ_D(1), OZ_S(1, 0), OZ_S(1, 1),
                       p, OZ_D(2), OZ_S(2, 0), OZ_S(2, 1), (int)v[3].i, (int)v[4].i,
                       (int)v[5].i, OZ_D(6), OZ_N(6, 0), OZ_S(6, 0), (int)v[7].i, OZ_I64(8),
                       OZ_S(8, 0), OZ_N(8, 0) >= 6);
}

/* Which group sums the small product runs (tests): info[0] in: 0 vpmaddwd + vpaddd, 1
 * VNNI where the CPU has it, else unchanged; out: info[0] the SIMD block's columns (0:
 * none, 16: AVX2, 32: AVX-512), info[1] 1 where VNNI's vpdpwssd runs. */
int
k_small_simd(ozval *v, int nt)
{
    (void)nt;
    int64_t *info = OZ_I64(0);
    if (OZ_N(0, 0) < 2)
        return OZK_BADLAYOUT;
#if defined(__AVX512BW__)
    if (info[0] == 0)
        small_vnni = 0;
    else if (info[0] == 1)
        small_vnni = small_has_vnni();
    else if (small_vnni < 0)
        small_vnni = small_has_vnni();
    info[0] = SMALL_PBLK;
    info[1] = small_vnni;
#elif SMALL_SIMD
    info[0] = SMALL_PBLK;
    info[1] = 0;
#else
    info[0] = 0;
    info[1] = 0;
#endif
    return 0;
}
