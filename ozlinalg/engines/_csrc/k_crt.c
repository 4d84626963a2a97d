/* Ozaki scheme II: residues, bounds, reduction and the CRT rebuild (ozlinalg.ozaki.crt).
 *
 * Residues are unique (the symmetric residue of an integer is the one integer in
 * [-h, p - 1 - h], h = floor(p / 2)), so any exact route gives the generic
 * symmetric_mod's value. The route here has no branch and no division, so every
 * inner loop vectorizes:
 *
 * - odd p, integer a with |a| < 2**51: a - rint(a * fl(1/p)) * p. The product is
 *   within |a / p| 2**-52 < 1 / (2 p) of a / p, which is at least 1 / (2 p) away from
 *   every half-integer (2 (a mod p) - p is odd), so rint gives the nearest integer to
 *   a / p and the difference (exact) lies in [-(p - 1) / 2, (p - 1) / 2];
 * - p a power of two: a - floor((a + h) / p) * p (every step exact).
 *
 * The rebuild's products are exact (integers below 2**53 times small integers, or
 * powers of two) except the quotient's, which is added in the generic order.
 *
 * Index arrays (slots, gid) are checked against the shapes they index, as NumPy would
 * (negative entries count from the end); a bad entry fails with OZK_BADLAYOUT, never a
 * write out of bounds.
 */
#include "kcommon.h"

/* int8 of an integer-valued double in [-128, 127] (a symmetric residue or a bound). */
OZ_INLINE int8_t
to_i8(double x)
{
    return (int8_t)x;
}

/* a * b + c where the product a * b is exact (integers below 2**53, powers of two):
 * one rounding either way, so an FMA, where the ISA has one, gives the same value in
 * one instruction (numba's helpers for these steps allow the contraction). */
OZ_INLINE double
xfma(double a, double b, double c)
{
#if defined(__FMA__)
    return fma(a, b, c);
#else
    return a * b + c;
#endif
}

/* An index into an axis of length n as NumPy takes it, or -1 when out of range. */
static inline ptrdiff_t
axis_index(long long idx, ptrdiff_t n)
{
    if (idx < 0)
        idx += n;
    return (idx >= 0 && idx < n) ? (ptrdiff_t)idx : -1;
}

/* ---------------------------------------------------------------------------------
 * Residues of rint|trunc(x * mult) for every modulus. */

/* orow[j] = symmetric residue mod pf of lo[j], lo[j] + h1[j] c1 or (lo[j] + h1[j] c1) +
 * h2[j] c2 (ndig 0, 1, 2; the generic sum's order, all terms exact integers). */
OZ_INLINE void
residue_run(const double *restrict lo, const double *restrict h1, double c1,
            const double *restrict h2, double c2, int ndig, double pf, double inv, int pow2,
            int8_t *restrict orow, ptrdiff_t os, ptrdiff_t n)
{
    double h = 0.5 * pf;
    for (ptrdiff_t j = 0; j < n; j++) {
        double acc = lo[j];
        if (ndig >= 1)
            acc = xfma(h1[j], c1, acc);
        if (ndig >= 2)
            acc = xfma(h2[j], c2, acc);
        double q = pow2 ? floor((acc + h) * inv) : rint(acc * inv);
        orow[j * os] = to_i8(xfma(-q, pf, acc));
    }
}

OZ_INLINE void
residue_run_any(const double *lo, const double *h1, double c1, const double *h2, double c2,
                int ndig, double pf, double inv, int pow2, int8_t *orow, ptrdiff_t os,
                ptrdiff_t n)
{
    /* each form its own loop (no branch inside) */
#define OZ_RUN(nd, p2) residue_run(lo, h1, c1, h2, c2, nd, pf, inv, p2, orow, os, n)
    if (pow2)
        ndig == 0 ? OZ_RUN(0, 1) : ndig == 1 ? OZ_RUN(1, 1) : OZ_RUN(2, 1);
    else
        ndig == 0 ? OZ_RUN(0, 0) : ndig == 1 ? OZ_RUN(1, 0) : OZ_RUN(2, 0);
#undef OZ_RUN
}

typedef struct {
    int d, count, nmod, mid;
    const double *pf, *inv, *coefs;
    const uint8_t *pow2;
    ptrdiff_t pf0, inv0, c0, c1, p20;
    int8_t *o;
    ptrdiff_t o0, o1, o2;
    const ptrdiff_t *slot; /* checked slot indices */
} residue_plan;

/* Columns per step of the residues: v's and the digits' runs stay in L1 while every
 * modulus reads them. */
#define RES_BLOCK 1024

/* The residues of the integers v (one row of n, consumed) into o[i, slot] (mid) or
 * o[slot, i]: v (|v| < 2**(count d)) cut top-down into count signed digits of d bits
 * (exact truncations), sum_t digit_t (2**(d t) mod p) (|sum| < 2**51, added in t order)
 * reduced exactly; two digits a pass, the last pass fused with the reduction. dig holds
 * rows 1 .. count - 1 (n each), acc RES_BLOCK entries. */
OZ_INLINE void
residues_of_row(const residue_plan *pl, double *restrict v, double *restrict dig,
                double *restrict acc, ptrdiff_t n, ptrdiff_t i, ptrdiff_t os)
{
    int count = pl->count;
    for (int t = count - 1; t > 0; t--) {
        long long e = (long long)pl->d * t;
        double scale = ldexp(1.0, (int)OZ_MAX(OZ_MIN(e, 100000LL), -100000LL));
        double inv_scale = 1.0 / scale;
        double *dt = dig + (ptrdiff_t)(t - 1) * n;
        for (ptrdiff_t j = 0; j < n; j++) {
            double top = trunc(v[j] * inv_scale);
            dt[j] = top;
            v[j] = xfma(-top, scale, v[j]);
        }
    }
    for (ptrdiff_t b0 = 0; b0 < n; b0 += RES_BLOCK) {
        ptrdiff_t bw = OZ_MIN(RES_BLOCK, n - b0);
        for (int idx = 0; idx < pl->nmod; idx++) {
            ptrdiff_t s = pl->slot[idx];
            int8_t *orow = (pl->mid ? pl->o + i * pl->o0 + s * pl->o1
                                    : pl->o + s * pl->o0 + i * pl->o1) + b0 * os;
            double pf = pl->pf[idx * pl->pf0], inv = pl->inv[idx * pl->inv0];
            int pow2 = pl->pow2[idx * pl->p20] != 0;
            const double *cf = pl->coefs + idx * pl->c0;
            const double *src = v + b0;
            int t = 1;
            while (count - t > 2) {
                const double *d1 = dig + (ptrdiff_t)(t - 1) * n + b0, *d2 = d1 + n;
                double k1 = cf[t * pl->c1], k2 = cf[(t + 1) * pl->c1];
                for (ptrdiff_t j = 0; j < bw; j++)
                    acc[j] = xfma(d2[j], k2, xfma(d1[j], k1, src[j]));
                src = acc;
                t += 2;
            }
            int left = count - t; /* 0, 1 or 2 digits to add */
            const double *d1 = left >= 1 ? dig + (ptrdiff_t)(t - 1) * n + b0 : src;
            const double *d2 = left >= 2 ? d1 + n : src;
            double k1 = left >= 1 ? cf[t * pl->c1] : 0.0;
            double k2 = left >= 2 ? cf[(t + 1) * pl->c1] : 0.0;
            residue_run_any(src, d1, k1, d2, k2, left, pf, inv, pow2, orow, os, bw);
        }
    }
}

/* Checks the moduli's arrays (arguments 4 .. 7, slots at 9) against o (argument 8),
 * whose slot axis is slot_axis and whose other axes take rows x n; fills pl and the
 * slot indices (freed by the caller). */
static int
residue_setup(ozval *v, int slot_axis, ptrdiff_t rows, ptrdiff_t n, residue_plan *pl,
              ptrdiff_t **slot_out)
{
    int nmod = (int)OZ_N(6, 0);
    int count = (int)OZ_N(6, 1);
    int row_axis = slot_axis == 0 ? 1 : 0;
    *slot_out = NULL;
    if (OZ_N(4, 0) < nmod || OZ_N(5, 0) < nmod || OZ_N(7, 0) < nmod || OZ_N(9, 0) < nmod)
        return OZK_BADLAYOUT;
    if (nmod > 0 && (count < 1 || OZ_N(8, row_axis) < rows || OZ_N(8, 2) < n))
        return OZK_BADLAYOUT;
    ptrdiff_t *slot = malloc(sizeof(ptrdiff_t) * (size_t)OZ_MAX(nmod, 1));
    if (slot == NULL)
        return OZK_NOMEM;
    const int64_t *sl = OZ_I64(9);
    for (int idx = 0; idx < nmod; idx++) {
        slot[idx] = axis_index(sl[idx * OZ_S(9, 0)], OZ_N(8, slot_axis));
        if (slot[idx] < 0) {
            free(slot);
            return OZK_BADLAYOUT;
        }
    }
    pl->d = (int)OZ_MAX(OZ_MIN(v[3].i, 1 << 20), -(1 << 20));
    pl->count = count;
    pl->nmod = nmod;
    pl->mid = slot_axis == 1;
    pl->pf = OZ_D(4);
    pl->pf0 = OZ_S(4, 0);
    pl->inv = OZ_D(5);
    pl->inv0 = OZ_S(5, 0);
    pl->coefs = OZ_D(6);
    pl->c0 = OZ_S(6, 0);
    pl->c1 = OZ_S(6, 1);
    pl->pow2 = OZ_B(7);
    pl->p20 = OZ_S(7, 0);
    pl->o = OZ_I8(8);
    pl->o0 = OZ_S(8, 0);
    pl->o1 = OZ_S(8, 1);
    pl->o2 = OZ_S(8, 2);
    pl->slot = slot;
    *slot_out = slot;
    return 0;
}

/* Per-thread scratch of a residue pass over rows of n: v, count - 1 digits, acc. */
static double *
residue_scratch(const residue_plan *pl, ptrdiff_t n)
{
    size_t rowsz = (size_t)OZ_MAX(n, 1);
    return malloc(sizeof(double) * (rowsz * (size_t)OZ_MAX(pl->count, 1) + RES_BLOCK));
}

OZ_INLINE void
scaled_row_rint(const double *restrict x, ptrdiff_t s1, double mlt, int round_, double *restrict v,
                ptrdiff_t k)
{
    if (round_) {
        for (ptrdiff_t j = 0; j < k; j++)
            v[j] = rint(x[j * s1] * mlt);
    } else {
        for (ptrdiff_t j = 0; j < k; j++)
            v[j] = trunc(x[j * s1] * mlt);
    }
}

int
k_crt_residues(ozval *v, int nt)
{
    const double *x = OZ_D(0), *mult = OZ_D(1);
    const uint8_t *rnd = OZ_B(2);
    ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);
    ptrdiff_t m0 = OZ_S(1, 0), r0 = OZ_S(2, 0);
    int mid = v[10].i != 0;
    residue_plan pl;
    ptrdiff_t *slot;
    if (OZ_N(1, 0) < rows || OZ_N(2, 0) < rows)
        return OZK_BADLAYOUT;
    int st = residue_setup(v, mid ? 1 : 0, rows, k, &pl, &slot);
    if (st != 0)
        return st;
    int fail = 0;
    OZ_PARALLEL(nt)
    {
        double *buf = residue_scratch(&pl, k);
        if (buf == NULL)
            OZ_FAIL(fail);
        double *vr = buf, *dig = buf + OZ_MAX(k, 1);
        double *acc = buf + OZ_MAX(k, 1) * OZ_MAX(pl.count, 1);
        OZ_FOR
        for (ptrdiff_t i = 0; i < rows; i++) {
            if (buf == NULL)
                continue;
            int round_ = rnd[i * r0] != 0;
            if (x1 == 1)
                scaled_row_rint(x + i * x0, 1, mult[i * m0], round_, vr, k);
            else
                scaled_row_rint(x + i * x0, x1, mult[i * m0], round_, vr, k);
            if (pl.o2 == 1)
                residues_of_row(&pl, vr, dig, acc, k, i, 1);
            else
                residues_of_row(&pl, vr, dig, acc, k, i, pl.o2);
        }
        free(buf);
    }
    free(slot);
    return fail ? OZK_NOMEM : 0;
}

OZ_INLINE void
scaled_cols_row(const double *restrict xt, ptrdiff_t s1, const double *restrict mult,
                ptrdiff_t ms, const uint8_t *restrict rnd, ptrdiff_t rs, double *restrict v,
                ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++) {
        double w = xt[j * s1] * mult[j * ms];
        double rn = rint(w);
        double tr = trunc(w);
        v[j] = rnd[j * rs] ? rn : tr;
    }
}

int
k_crt_residues_cols(ozval *v, int nt)
{
    const double *xt = OZ_D(0), *mult = OZ_D(1);
    const uint8_t *rnd = OZ_B(2);
    ptrdiff_t k = OZ_N(0, 0), n = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);
    ptrdiff_t m0 = OZ_S(1, 0), r0 = OZ_S(2, 0);
    residue_plan pl;
    ptrdiff_t *slot;
    if (OZ_N(1, 0) < n || OZ_N(2, 0) < n)
        return OZK_BADLAYOUT;
    int st = residue_setup(v, 0, k, n, &pl, &slot);
    if (st != 0)
        return st;
    int fail = 0;
    OZ_PARALLEL(nt)
    {
        double *buf = residue_scratch(&pl, n);
        if (buf == NULL)
            OZ_FAIL(fail);
        double *vr = buf, *dig = buf + OZ_MAX(n, 1);
        double *acc = buf + OZ_MAX(n, 1) * OZ_MAX(pl.count, 1);
        OZ_FOR
        for (ptrdiff_t r = 0; r < k; r++) {
            if (buf == NULL)
                continue;
            if (x1 == 1 && m0 == 1 && r0 == 1)
                scaled_cols_row(xt + r * x0, 1, mult, 1, rnd, 1, vr, n);
            else
                scaled_cols_row(xt + r * x0, x1, mult, m0, rnd, r0, vr, n);
            if (pl.o2 == 1)
                residues_of_row(&pl, vr, dig, acc, n, r, 1);
            else
                residues_of_row(&pl, vr, dig, acc, n, r, pl.o2);
        }
        free(buf);
    }
    free(slot);
    return fail ? OZK_NOMEM : 0;
}

/* ---------------------------------------------------------------------------------
 * The accurate scaling's bound products W (int32). */

OZ_INLINE void
max_into(int64_t *restrict dst, ptrdiff_t ds, const int32_t *restrict run, ptrdiff_t rs,
         ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++) {
        int64_t a = run[j * rs], b = dst[j * ds];
        dst[j * ds] = a > b ? a : b;
    }
}

int
k_group_col_max(ozval *v, int nt)
{
    const int32_t *w = OZ_I32(0);
    const int64_t *gid = OZ_I64(1);
    int64_t *cm = OZ_I64(2);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1), w0 = OZ_S(0, 0), w1 = OZ_S(0, 1);
    ptrdiff_t g0 = OZ_S(1, 0), ng = OZ_N(2, 0), c0 = OZ_S(2, 0), c1 = OZ_S(2, 1);
    long long nb = v[3].i;
    if (nb <= 0 || m == 0 || p == 0)
        return 0;
    if (OZ_N(1, 0) < m || OZ_N(2, 1) < p)
        return OZK_BADLAYOUT;
    ptrdiff_t *row = malloc(sizeof(ptrdiff_t) * (size_t)m);
    if (row == NULL)
        return OZK_NOMEM;
    for (ptrdiff_t i = 0; i < m; i++) {
        row[i] = axis_index(gid[i * g0], ng);
        if (row[i] < 0) {
            free(row);
            return OZK_BADLAYOUT;
        }
    }
    /* column blocks in parallel, each walked down the rows (a maximum: any split) */
    OZ_PARALLEL_FOR(nt)
    for (long long b = 0; b < nb; b++) {
        ptrdiff_t j0 = (ptrdiff_t)(b * p / nb), j1 = (ptrdiff_t)((b + 1) * p / nb);
        for (ptrdiff_t i = 0; i < m; i++) {
            int64_t *dst = cm + row[i] * c0 + j0 * c1;
            const int32_t *run = w + i * w0 + j0 * w1;
            if (c1 == 1 && w1 == 1)
                max_into(dst, 1, run, 1, j1 - j0);
            else
                max_into(dst, c1, run, w1, j1 - j0);
        }
    }
    free(row);
    return 0;
}

/* max_j run[j] (n >= 1) */
OZ_INLINE int32_t
int_max(const int32_t *run, ptrdiff_t s, ptrdiff_t n)
{
    int32_t best = run[0];
    for (ptrdiff_t j = 1; j < n; j++) {
        int32_t a = run[j * s];
        best = a > best ? a : best;
    }
    return best;
}

int
k_int_row_max(ozval *v, int nt)
{
    const int32_t *w = OZ_I32(0);
    double *out = OZ_D(1);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1), w0 = OZ_S(0, 0), w1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(1, 0);
    if (p == 0)
        return 0;
    if (OZ_N(1, 0) < m)
        return OZK_BADLAYOUT;
    /* float64 of int32 is exact and monotone, so the first float(w) above out[i] in a
     * scan and the scan's result come from max_j w[i, j] (an integer reduction, which
     * vectorizes): the same value, NaN and -0.0 in out left alone as the scan does */
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < m; i++) {
        double top = (double)(w1 == 1 ? int_max(w + i * w0, 1, p) : int_max(w + i * w0, w1, p));
        double best = out[i * o0];
        if (top > best)
            out[i * o0] = top;
    }
    return 0;
}

typedef struct {
    const double *ca, *cb, *ia, *nb, *na, *ib;
    ptrdiff_t ca0, cb0, ia0, nb0, na0, ib0;
    double inv_k;
} bound_args;

/* buf[j] = max(w_j - ca_i - cb_j, 0)**2 inv_k / num_j**2, 0 without a divisor in the
 * normal range (branch-free: vectorizes); ws .. ibs: the strides along j. */
OZ_INLINE void
bound_row(const bound_args *a, const int32_t *restrict w, ptrdiff_t ws, ptrdiff_t i,
          ptrdiff_t p, ptrdiff_t cbs, ptrdiff_t nbs, ptrdiff_t ibs, double *restrict buf)
{
    double cai = a->ca[i * a->ca0], iai = a->ia[i * a->ia0], nai = a->na[i * a->na0];
    const double *restrict cb = a->cb, *restrict nb = a->nb, *restrict ib = a->ib;
    double inv_k = a->inv_k;
    for (ptrdiff_t j = 0; j < p; j++) {
        double d = (double)w[j * ws] - cai - cb[j * cbs];
        double n = iai * nb[j * nbs] + nai * ib[j * ibs];
        double nn = n * n;
        int ok = (d > 0.0) & (nn >= 0x1p-1000) & (nn < INFINITY);
        double val = (d * d) * inv_k / (ok ? nn : 1.0);
        buf[j] = ok ? val : 0.0;
    }
}

int
k_bound_r_min(ozval *v, int nt)
{
    const int32_t *w = OZ_I32(0);
    bound_args a = {OZ_D(1), OZ_D(2), OZ_D(3), OZ_D(4), OZ_D(5), OZ_D(6),
                    OZ_S(1, 0), OZ_S(2, 0), OZ_S(3, 0), OZ_S(4, 0), OZ_S(5, 0), OZ_S(6, 0),
                    v[7].d};
    double *rmin = OZ_D(8);
    int64_t *rarg = OZ_I64(9);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1), w0 = OZ_S(0, 0), w1 = OZ_S(0, 1);
    ptrdiff_t r0 = OZ_S(8, 0), g0 = OZ_S(9, 0);
    if (OZ_N(8, 0) < m || OZ_N(9, 0) < m)
        return OZK_BADLAYOUT;
    if (p > 0 && (OZ_N(1, 0) < m || OZ_N(3, 0) < m || OZ_N(5, 0) < m || OZ_N(2, 0) < p ||
                  OZ_N(4, 0) < p || OZ_N(6, 0) < p))
        return OZK_BADLAYOUT;
    int unit = w1 == 1 && a.cb0 == 1 && a.nb0 == 1 && a.ib0 == 1;
    int fail = 0;
    OZ_PARALLEL(nt)
    {
        double *buf = malloc(sizeof(double) * (size_t)OZ_MAX(p, 1));
        if (buf == NULL)
            OZ_FAIL(fail);
        OZ_FOR
        for (ptrdiff_t i = 0; i < m; i++) {
            if (buf == NULL)
                continue;
            if (p > 0 && unit)
                bound_row(&a, w + i * w0, 1, i, p, 1, 1, 1, buf);
            else if (p > 0)
                bound_row(&a, w + i * w0, w1, i, p, a.cb0, a.nb0, a.ib0, buf);
            /* the first column of the smallest bound (NaN never taken) */
            double best = INFINITY;
            ptrdiff_t arg = 0;
            for (ptrdiff_t j = 0; j < p; j++) {
                if (buf[j] < best) {
                    best = buf[j];
                    arg = j;
                }
            }
            rmin[i * r0] = best;
            rarg[i * g0] = arg;
        }
        free(buf);
    }
    return fail ? OZK_NOMEM : 0;
}

OZ_INLINE void
bound_run(const double *restrict x, ptrdiff_t xs, int8_t *restrict o, ptrdiff_t os, ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++)
        o[j * os] = to_i8(-ceil(fabs(x[j * xs]) * 128.0));
}

int
k_crt_bound(ozval *v, int nt)
{
    const double *x = OZ_D(0);
    int8_t *out = OZ_I8(1);
    ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1), x0 = OZ_S(0, 0), x1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(1, 0), o1 = OZ_S(1, 1);
    if (OZ_N(1, 0) < rows || OZ_N(1, 1) < k)
        return OZK_BADLAYOUT;
    /* elementwise: walk the axis both arrays store contiguously innermost */
    if (x1 != 1 && o1 != 1 && x0 == 1 && o0 == 1) {
        OZ_PARALLEL_FOR(nt)
        for (ptrdiff_t j = 0; j < k; j++)
            bound_run(x + j * x1, 1, out + j * o1, 1, rows);
        return 0;
    }
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < rows; i++) {
        if (x1 == 1 && o1 == 1)
            bound_run(x + i * x0, 1, out + i * o0, 1, k);
        else
            bound_run(x + i * x0, x1, out + i * o0, o1, k);
    }
    return 0;
}

OZ_INLINE void
reduce_run(const int32_t *restrict prod, ptrdiff_t ps, double pf, int pow2, int8_t *restrict out,
           ptrdiff_t os, ptrdiff_t n)
{
    double inv = 1.0 / pf;
    double h = 0.5 * pf;
    if (pow2) {
        for (ptrdiff_t j = 0; j < n; j++) {
            double a = (double)prod[j * ps];
            out[j * os] = to_i8(xfma(-floor((a + h) * inv), pf, a));
        }
    } else {
        for (ptrdiff_t j = 0; j < n; j++) {
            double a = (double)prod[j * ps];
            out[j * os] = to_i8(xfma(-rint(a * inv), pf, a));
        }
    }
}

int
k_crt_reduce(ozval *v, int nt)
{
    const int32_t *prod = OZ_I32(0);
    double pf = v[1].d;
    int pow2 = v[2].i != 0;
    int8_t *out = OZ_I8(3);
    ptrdiff_t m = OZ_N(0, 0), p = OZ_N(0, 1), p0 = OZ_S(0, 0), p1 = OZ_S(0, 1);
    ptrdiff_t o0 = OZ_S(3, 0), o1 = OZ_S(3, 1);
    if (OZ_N(3, 0) < m || OZ_N(3, 1) < p)
        return OZK_BADLAYOUT;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t i = 0; i < m; i++) {
        if (p1 == 1 && o1 == 1)
            reduce_run(prod + i * p0, 1, pf, pow2, out + i * o0, 1, p);
        else
            reduce_run(prod + i * p0, p1, pf, pow2, out + i * o0, o1, p);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------
 * The CRT rebuild: C' per entry from the residues of every modulus. */

/* Output columns per step (the row buffers stay in L1). */
#define COMBINE_CHUNK 1024
/* The stride of the row buffers (quotient, limbs): rows 8 KiB apart alias in the
 * 4 KiB store-to-load check and stall the sums' loads behind the previous row's
 * stores; 192 bytes more spread them over the page. */
#define ROW (COMBINE_CHUNK + 24)

static const int8_t zero_residues[COMBINE_CHUNK];

typedef struct {
    const int8_t *res;
    ptrdiff_t nmod, m, p, r0, r1, r2;
    const double *frac, *wl, *plimbs, *powers; /* frac, wl: packed, padded to 4 moduli */
    ptrdiff_t pl0, pw0;
    int nlb, nl; /* limb rows (wlimbs' columns, at least 3) and limbs of P */
    double unit, cu;
    double *out, *slop;
    ptrdiff_t o0, o1, s0, s1;
} combine_args;

/* Four moduli's residues c_u into the quotient qt += f_u c_u (in turn: the generic
 * order, these products round) and the limbs lb[l] += sum_u wl[u][l] c_u (exact
 * integers, any order gives the same sum), entries j0 .. w: each residue read and
 * converted once for the quotient and the first three limbs, once more per further
 * limb. s0 .. s3: the residues' strides (0 or 1 for a missing modulus' zeros); ls: the
 * limb rows' stride. */
OZ_INLINE void
combine4_scalar(double *restrict qt, double *restrict lbuf, ptrdiff_t ls, int nlb,
                const int8_t *restrict r0, const int8_t *restrict r1, const int8_t *restrict r2,
                const int8_t *restrict r3, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t s2,
                ptrdiff_t s3, const double *f, const double *wl, ptrdiff_t j0, ptrdiff_t w)
{
    double *restrict l0 = lbuf, *restrict l1 = lbuf + ls, *restrict l2 = lbuf + 2 * ls;
    double f0 = f[0], f1 = f[1], f2 = f[2], f3 = f[3];
    double a0 = wl[0], a1 = wl[nlb], a2 = wl[2 * nlb], a3 = wl[3 * nlb];
    double b0 = wl[1], b1 = wl[nlb + 1], b2 = wl[2 * nlb + 1], b3 = wl[3 * nlb + 1];
    double c0 = wl[2], c1 = wl[nlb + 2], c2 = wl[2 * nlb + 2], c3 = wl[3 * nlb + 2];
    for (ptrdiff_t j = j0; j < w; j++) {
        double v0 = (double)r0[j * s0];
        double v1 = (double)r1[j * s1];
        double v2 = (double)r2[j * s2];
        double v3 = (double)r3[j * s3];
        double q = qt[j] + f0 * v0;
        q = q + f1 * v1;
        q = q + f2 * v2;
        qt[j] = q + f3 * v3;
        l0[j] = l0[j] + xfma(a3, v3, xfma(a2, v2, xfma(a1, v1, a0 * v0)));
        l1[j] = l1[j] + xfma(b3, v3, xfma(b2, v2, xfma(b1, v1, b0 * v0)));
        l2[j] = l2[j] + xfma(c3, v3, xfma(c2, v2, xfma(c1, v1, c0 * v0)));
    }
    for (int l = 3; l < nlb; l++) {
        double *restrict lb = lbuf + (ptrdiff_t)l * ls;
        double e0 = wl[l], e1 = wl[nlb + l], e2 = wl[2 * nlb + l], e3 = wl[3 * nlb + l];
        for (ptrdiff_t j = j0; j < w; j++)
            lb[j] = lb[j] + xfma(e3, (double)r3[j * s3],
                                 xfma(e2, (double)r2[j * s2],
                                      xfma(e1, (double)r1[j * s1], e0 * (double)r0[j * s0])));
    }
}

/* Contiguous residues: explicit float64 vectors (GCC vectorizes the loop above at the
 * int8 width, 64 lanes on AVX-512, eight registers per float64 value, and spills); the
 * lanes do the scalar operations above, no contraction (-ffp-contract=off). */
#if defined(__SSE2__)
#include <immintrin.h>
#if defined(__AVX512F__)
#define OZV_N 8
typedef __m512d ozv;
OZ_INLINE ozv
ozv_i8(const int8_t *p)
{
    return _mm512_cvtepi32_pd(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
#elif defined(__AVX2__)
#define OZV_N 4
typedef __m256d ozv;
OZ_INLINE ozv
ozv_i8(const int8_t *p)
{
    int32_t w;
    memcpy(&w, p, sizeof w);
    return _mm256_cvtepi32_pd(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(w)));
}
#else
#define OZV_N 2
typedef __m128d ozv;
OZ_INLINE ozv
ozv_i8(const int8_t *p)
{
    return _mm_set_pd((double)p[1], (double)p[0]);
}
#endif

OZ_INLINE ozv
ozv_ld(const double *p)
{
    ozv v;
    memcpy(&v, p, sizeof v);
    return v;
}

OZ_INLINE void
ozv_st(double *p, ozv v)
{
    memcpy(p, &v, sizeof v);
}

/* xfma of the lanes (a: a scalar) */
OZ_INLINE ozv
ozv_xfma(double a, ozv b, ozv c)
{
#if defined(__AVX512F__)
    return _mm512_fmadd_pd(_mm512_set1_pd(a), b, c);
#elif defined(__AVX2__) && defined(__FMA__)
    return _mm256_fmadd_pd(_mm256_set1_pd(a), b, c);
#else
    return a * b + c;
#endif
}

OZ_INLINE void
combine4(double *restrict qt, double *restrict lbuf, ptrdiff_t ls, int nlb,
         const int8_t *restrict r0, const int8_t *restrict r1, const int8_t *restrict r2,
         const int8_t *restrict r3, const double *f, const double *wl, ptrdiff_t w)
{
    double *restrict l0 = lbuf, *restrict l1 = lbuf + ls, *restrict l2 = lbuf + 2 * ls;
    double f0 = f[0], f1 = f[1], f2 = f[2], f3 = f[3];
    double a0 = wl[0], a1 = wl[nlb], a2 = wl[2 * nlb], a3 = wl[3 * nlb];
    double b0 = wl[1], b1 = wl[nlb + 1], b2 = wl[2 * nlb + 1], b3 = wl[3 * nlb + 1];
    double c0 = wl[2], c1 = wl[nlb + 2], c2 = wl[2 * nlb + 2], c3 = wl[3 * nlb + 2];
    ptrdiff_t wv = w - w % OZV_N;
    for (ptrdiff_t j = 0; j < wv; j += OZV_N) {
        ozv v0 = ozv_i8(r0 + j), v1 = ozv_i8(r1 + j), v2 = ozv_i8(r2 + j), v3 = ozv_i8(r3 + j);
        ozv q = ozv_ld(qt + j) + f0 * v0;
        q = q + f1 * v1;
        q = q + f2 * v2;
        ozv_st(qt + j, q + f3 * v3);
        ozv s0 = ozv_xfma(a3, v3, ozv_xfma(a2, v2, ozv_xfma(a1, v1, a0 * v0)));
        ozv s1 = ozv_xfma(b3, v3, ozv_xfma(b2, v2, ozv_xfma(b1, v1, b0 * v0)));
        ozv s2 = ozv_xfma(c3, v3, ozv_xfma(c2, v2, ozv_xfma(c1, v1, c0 * v0)));
        ozv_st(l0 + j, ozv_ld(l0 + j) + s0);
        ozv_st(l1 + j, ozv_ld(l1 + j) + s1);
        ozv_st(l2 + j, ozv_ld(l2 + j) + s2);
    }
    for (int l = 3; l < nlb; l++) {
        double *restrict lb = lbuf + (ptrdiff_t)l * ls;
        double e0 = wl[l], e1 = wl[nlb + l], e2 = wl[2 * nlb + l], e3 = wl[3 * nlb + l];
        for (ptrdiff_t j = 0; j < wv; j += OZV_N) {
            ozv t = ozv_xfma(e1, ozv_i8(r1 + j), e0 * ozv_i8(r0 + j));
            t = ozv_xfma(e3, ozv_i8(r3 + j), ozv_xfma(e2, ozv_i8(r2 + j), t));
            ozv_st(lb + j, ozv_ld(lb + j) + t);
        }
    }
    combine4_scalar(qt, lbuf, ls, nlb, r0, r1, r2, r3, 1, 1, 1, 1, f, wl, wv, w);
}
#else
OZ_INLINE void
combine4(double *restrict qt, double *restrict lbuf, ptrdiff_t ls, int nlb,
         const int8_t *restrict r0, const int8_t *restrict r1, const int8_t *restrict r2,
         const int8_t *restrict r3, const double *f, const double *wl, ptrdiff_t w)
{
    combine4_scalar(qt, lbuf, ls, nlb, r0, r1, r2, r3, 1, 1, 1, 1, f, wl, 0, w);
}
#endif

/* q = rint(quotient), limbs - q P and carries to balanced limbs (every product exact). */
OZ_INLINE void
crt_balance(double *restrict qt, double *restrict lbuf, const combine_args *a, ptrdiff_t w)
{
    int nl = a->nl;
    double unit = a->unit, inv_unit = 1.0 / unit;
    for (ptrdiff_t j = 0; j < w; j++)
        qt[j] = rint(qt[j]);
    for (int l = 0; l < nl; l++) {
        double pl = a->plimbs[l * a->pl0];
        double *restrict lb = lbuf + (ptrdiff_t)l * ROW;
        for (ptrdiff_t j = 0; j < w; j++)
            lb[j] = xfma(-qt[j], pl, lb[j]);
    }
    for (int l = 0; l < nl - 1; l++) {
        double *restrict la = lbuf + (ptrdiff_t)l * ROW;
        double *restrict lb = la + ROW;
        for (ptrdiff_t j = 0; j < w; j++) {
            double carry = rint(la[j] * inv_unit);
            la[j] = xfma(-carry, unit, la[j]);
            lb[j] = lb[j] + carry;
        }
    }
}

/* The balanced limbs combined top-down into orow (exact products). */
OZ_INLINE void
crt_finish(const double *restrict lbuf, const combine_args *a, double *restrict orow,
           ptrdiff_t os, ptrdiff_t w)
{
    int nl = a->nl;
    double unit = a->unit;
    const double *restrict top = lbuf + (ptrdiff_t)(nl - 1) * ROW;
    for (ptrdiff_t j = 0; j < w; j++)
        orow[j * os] = top[j];
    for (int l = nl - 2; l >= 0; l--) {
        const double *restrict lb = lbuf + (ptrdiff_t)l * ROW;
        for (ptrdiff_t j = 0; j < w; j++)
            orow[j * os] = xfma(orow[j * os], unit, lb[j]);
    }
}

/* Columns 0 .. w of the balanced limbs summed top limb first with TwoSums into orow and
 * their error bounds into srow: per column the generic operations in the generic order,
 * the loops over the columns (they vectorize). s, e, eb: scratch rows. */
OZ_INLINE void
faithful_combine(const double *restrict lbuf, const combine_args *a, double *restrict s,
                 double *restrict e, double *restrict eb, double *restrict orow, ptrdiff_t os,
                 double *restrict srow, ptrdiff_t ss, ptrdiff_t w)
{
    int nl = a->nl;
    double cu = a->cu;
    const double *restrict top = lbuf + (ptrdiff_t)(nl - 1) * ROW;
    double ptop = a->powers[(nl - 1) * a->pw0];
    for (ptrdiff_t j = 0; j < w; j++) {
        s[j] = top[j] * ptop;
        e[j] = 0.0;
        eb[j] = 0.0;
    }
    for (int l = nl - 2; l >= 0; l--) {
        double pw = a->powers[l * a->pw0];
        const double *restrict lb = lbuf + (ptrdiff_t)l * ROW;
        for (ptrdiff_t j = 0; j < w; j++) {
            double t = lb[j] * pw;
            double r = s[j] + t;
            double bb = r - s[j];
            double err = (s[j] - (r - bb)) + (t - bb);
            s[j] = r;
            e[j] = e[j] + err;
            eb[j] = eb[j] + fabs(e[j]);
        }
    }
    for (ptrdiff_t j = 0; j < w; j++) {
        double sj = s[j];
        double r2 = sj + e[j];
        double bb = r2 - sj;
        double e2 = (sj - (r2 - bb)) + (e[j] - bb);
        orow[j * os] = r2;
        srow[j * ss] = fabs(e2) + cu * eb[j];
    }
}

/* Row i's entries j0 .. j0 + w: the sums of every modulus, four per pass (a missing
 * one is a row of zeros of weight 0: exact zeros added), then the finish. */
OZ_INLINE void
rebuild_chunk(const combine_args *a, ptrdiff_t i, ptrdiff_t j0, ptrdiff_t w, double *qt,
              double *lbuf, double *sc, int faithful, ptrdiff_t rs, ptrdiff_t os, ptrdiff_t ss)
{
    for (ptrdiff_t j = 0; j < w; j++)
        qt[j] = 0.0;
    for (int l = 0; l < a->nlb; l++)
        memset(lbuf + (ptrdiff_t)l * ROW, 0, sizeof(double) * (size_t)w);
    const int8_t *base = a->res + i * a->r1 + j0 * rs;
    for (ptrdiff_t t = 0; t < a->nmod; t += 4) {
        const int8_t *r[4];
        ptrdiff_t st[4];
        for (int u = 0; u < 4; u++) {
            r[u] = t + u < a->nmod ? base + (t + u) * a->r0 : zero_residues;
            st[u] = t + u < a->nmod ? rs : (rs == 1 ? 1 : 0);
        }
        const double *f = a->frac + t, *wl = a->wl + t * a->nlb;
        if (rs == 1)
            combine4(qt, lbuf, ROW, a->nlb, r[0], r[1], r[2], r[3], f, wl, w);
        else
            combine4_scalar(qt, lbuf, ROW, a->nlb, r[0], r[1], r[2], r[3], st[0], st[1],
                            st[2], st[3], f, wl, 0, w);
    }
    crt_balance(qt, lbuf, a, w);
    if (faithful) {
        /* qt is free again: the TwoSum's error sums live there */
        faithful_combine(lbuf, a, sc, qt, sc + ROW, a->out + i * a->o0 + j0 * os, os,
                         a->slop + i * a->s0 + j0 * ss, ss, w);
    } else {
        crt_finish(lbuf, a, a->out + i * a->o0 + j0 * os, os, w);
    }
}

static int
crt_rebuild(ozval *v, int nt, int faithful)
{
    combine_args a;
    a.res = OZ_I8(0);
    a.nmod = OZ_N(0, 0);
    a.m = OZ_N(0, 1);
    a.p = OZ_N(0, 2);
    a.r0 = OZ_S(0, 0);
    a.r1 = OZ_S(0, 1);
    a.r2 = OZ_S(0, 2);
    a.nlb = (int)OZ_N(2, 1);
    a.plimbs = OZ_D(3);
    a.pl0 = OZ_S(3, 0);
    a.nl = (int)OZ_N(3, 0);
    a.unit = v[4].d;
    int ko = faithful ? 7 : 5;
    a.powers = faithful ? OZ_D(5) : NULL;
    a.pw0 = faithful ? OZ_S(5, 0) : 0;
    a.cu = faithful ? v[6].d : 0.0;
    a.out = OZ_D(ko);
    a.o0 = OZ_S(ko, 0);
    a.o1 = OZ_S(ko, 1);
    a.slop = faithful ? OZ_D(8) : NULL;
    a.s0 = faithful ? OZ_S(8, 0) : 0;
    a.s1 = faithful ? OZ_S(8, 1) : 0;
    ptrdiff_t padded = (a.nmod + 3) / 4 * 4;
    /* the numba kernel's preconditions: frac and wlimbs padded to four moduli, at least
     * three limb rows, 1 <= nl <= wlimbs' columns */
    if (a.m == 0 || a.p == 0)
        return 0;
    if (OZ_N(1, 0) < padded || OZ_N(2, 0) < padded || a.nlb < 3 || a.nl < 1 || a.nl > a.nlb ||
        OZ_N(ko, 0) < a.m || OZ_N(ko, 1) < a.p)
        return OZK_BADLAYOUT;
    if (faithful && (OZ_N(5, 0) < a.nl || OZ_N(8, 0) < a.m || OZ_N(8, 1) < a.p))
        return OZK_BADLAYOUT;
    /* frac and the weights' rows of the moduli (with the padding) packed once */
    double *pk = malloc(sizeof(double) * (size_t)(padded * (1 + a.nlb)));
    if (pk == NULL)
        return OZK_NOMEM;
    for (ptrdiff_t t = 0; t < padded; t++) {
        pk[t] = OZ_D(1)[t * OZ_S(1, 0)];
        for (int l = 0; l < a.nlb; l++)
            pk[padded + t * a.nlb + l] = OZ_D(2)[t * OZ_S(2, 0) + l * OZ_S(2, 1)];
    }
    a.frac = pk;
    a.wl = pk + padded;
    int unit = a.r2 == 1 && a.o1 == 1 && (!faithful || a.s1 == 1);
    int fail = 0;
    OZ_PARALLEL(nt)
    {
        /* qt, the limb rows, and for the faithful sum two more rows */
        size_t rows = 1 + (size_t)a.nlb + (faithful ? 2 : 0);
        double *buf = malloc(sizeof(double) * ROW * rows);
        if (buf == NULL)
            OZ_FAIL(fail);
        double *qt = buf, *lbuf = buf + ROW;
        double *sc = lbuf + (ptrdiff_t)a.nlb * ROW;
        OZ_FOR
        for (ptrdiff_t i = 0; i < a.m; i++) {
            if (buf == NULL)
                continue;
            for (ptrdiff_t j0 = 0; j0 < a.p; j0 += COMBINE_CHUNK) {
                ptrdiff_t w = OZ_MIN(COMBINE_CHUNK, a.p - j0);
                if (unit && faithful)
                    rebuild_chunk(&a, i, j0, w, qt, lbuf, sc, 1, 1, 1, 1);
                else if (unit)
                    rebuild_chunk(&a, i, j0, w, qt, lbuf, sc, 0, 1, 1, 1);
                else
                    rebuild_chunk(&a, i, j0, w, qt, lbuf, sc, faithful, a.r2, a.o1, a.s1);
            }
        }
        free(buf);
    }
    free(pk);
    return fail ? OZK_NOMEM : 0;
}

int
k_crt_combine(ozval *v, int nt)
{
    return crt_rebuild(v, nt, 0);
}

int
k_crt_combine_faithful(ozval *v, int nt)
{
    return crt_rebuild(v, nt, 1);
}
