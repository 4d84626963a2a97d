/* Ozaki scheme II, the operands' side (ozlinalg.ozaki.crt): the residues of the scaled
 * inputs for every modulus, and the accurate scaling's bound operand and the exact maxima
 * of its bound products W. The residue route is in kcrt.h.
 *
 * Index arrays (slots, gid) are checked against the shapes they index, as NumPy would
 * (negative entries count from the end); a bad entry fails with OZK_BADLAYOUT, never a
 * write out of bounds.
 */
#include "kcrt.h"
#include "kfixed.h"

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
            /* the first column of the smallest bound (NaN never taken): the minimum in
             * vector lanes (x < m ? x : m is minpd's own rule, NaN passed over), then
             * its first column; none below Inf leaves column 0, as a scan's first
             * strict improvement would */
            double best = oz_min_skip_nan(buf, p);
            ptrdiff_t arg = 0;
            if (best < INFINITY)
                while (buf[arg] != best)
                    arg++;
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

/* ---------------------------------------------------------------------------------
 * The count phase's statistics of raw rows (ozlinalg.ozaki.crt.block), with no
 * normalized copy: each row's exponent (normalize_rows'), the fixed-point sum of its
 * normalized squares (fixed_row_sums'), and where asked the accurate scaling's bound
 * operand (crt_bound's -ceil(128 |x|)) and its digit sums (abs_row_sums'). The same
 * steps on the same values as those passes, so the same bits. */

/* One row: its maximum and factors as normalize_row, the normalized row into x (a
 * per-thread buffer of k), then the sums and the bound from it. */
OZ_INLINE void
stats_row(const double *a, ptrdiff_t s1, ptrdiff_t k, double *restrict x, int32_t *exp_out,
          double *fsq_out, int8_t *bnd, ptrdiff_t bs, double *dsum_out)
{
    double f1, f2;
    *exp_out = oz_row_factors(oz_line_absmax(a, s1, k), &f1, &f2);
    for (ptrdiff_t j = 0; j < k; j++)
        x[j] = (a[j * s1] * f1) * f2;
    *fsq_out = (double)(int64_t)fixed_row(x, 1, k, 1) * 0x1p-40;
    if (bnd != NULL) {
        if (bs == 1) {
            bound_run(x, 1, bnd, 1, k);
            *dsum_out = (double)abs_digit_sum(bnd, 1, k);
        } else {
            bound_run(x, 1, bnd, bs, k);
            *dsum_out = (double)abs_digit_sum(bnd, bs, k);
        }
    }
}

/* The arguments both row_stats kernels take (a, exps, fsq, bound, dsum): per line of a
 * (lines of them: a's rows, or its columns for row_stats_cols) an exponent, a sum and a
 * digit sum; the bound, where wanted (non-empty), a's shape. */
typedef struct {
    const double *a;
    int32_t *exps;
    double *fsq, *dsum;
    int8_t *bnd;
    ptrdiff_t a0, a1, e0, f0, b0, b1, d0;
    int want;
} stats_args;

static int
stats_read(ozval *v, ptrdiff_t lines, stats_args *s)
{
    stats_args r = {OZ_D(0), OZ_I32(1), OZ_D(2), OZ_D(4), OZ_I8(3), OZ_S(0, 0), OZ_S(0, 1),
                    OZ_S(1, 0), OZ_S(2, 0), OZ_S(3, 0), OZ_S(3, 1), OZ_S(4, 0), OZ_N(3, 0) > 0};
    if (OZ_N(1, 0) < lines || OZ_N(2, 0) < lines ||
        (r.want && (OZ_N(3, 0) < OZ_N(0, 0) || OZ_N(3, 1) < OZ_N(0, 1) || OZ_N(4, 0) < lines)))
        return OZK_BADLAYOUT;
    *s = r;
    return 0;
}

int
k_row_stats(ozval *v, int nt)
{
    ptrdiff_t rows = OZ_N(0, 0), k = OZ_N(0, 1);
    stats_args s;
    if (stats_read(v, rows, &s))
        return OZK_BADLAYOUT;
    int fail = 0;
    OZ_PARALLEL(nt)
    {
        double *x = malloc(sizeof(double) * (size_t)OZ_MAX(k, 1));
        if (x == NULL)
            OZ_FAIL(fail);
        OZ_FOR
        for (ptrdiff_t i = 0; i < rows; i++) {
            if (x == NULL)
                continue;
            int8_t *bi = s.want ? s.bnd + i * s.b0 : NULL;
            double *di = s.want ? s.dsum + i * s.d0 : NULL;
            const double *ai = s.a + i * s.a0;
            int32_t *ei = s.exps + i * s.e0;
            double *fi = s.fsq + i * s.f0;
            if (s.a1 == 1)
                stats_row(ai, 1, k, x, ei, fi, bi, s.b1, di);
            else
                stats_row(ai, s.a1, k, x, ei, fi, bi, s.b1, di);
        }
        free(x);
    }
    return fail ? OZK_NOMEM : 0;
}

/* The bound of a run of w normalized entries into o (stride os), and |bound| added to
 * the columns' digit sums ds. */
OZ_INLINE void
bound_sums_run(const double *x, int8_t *o, ptrdiff_t os, ptrdiff_t w, int64_t *ds)
{
    bound_run(x, 1, o, os, w);
    for (ptrdiff_t j = 0; j < w; j++) {
        int d = o[j * os];
        ds[j] += d < 0 ? -d : d;
    }
}

/* Columns per block of row_stats_cols, at least and at most: a block walks down at's
 * rows reading a run of its width from each, and its buffers (a normalized run, three
 * sums a column) stay in L2. One block a thread where that fits: each run a long
 * stretch of a row, which the prefetchers follow (256-column blocks read 2 KiB of
 * every row, half a page, and took twice row_stats' time on the same data). */
#define STATS_COLS_MIN 256
#define STATS_COLS_MAX 2048

/* row_stats of at.T (at: k x n, rows contiguous along n: the rows of B^T are B's
 * columns): the columns' maxima first (normalize_cols' factors), then column blocks in
 * parallel, each walked down at's rows: the run of the block normalized into a buffer,
 * its bound written, and the per-column sums taken as fixed_col_sums (fixed_fast, and
 * fixed_unit again for a block where that does not apply; integer sums, so the same
 * values as fixed_row's, whatever the blocks) and abs_col_sums do. boundt: k x n, the
 * bound's transpose. */
int
k_row_stats_cols(ozval *v, int nt)
{
    ptrdiff_t k = OZ_N(0, 0), n = OZ_N(0, 1);
    stats_args s;
    if (stats_read(v, n, &s))
        return OZK_BADLAYOUT;
    /* the columns' maxima where the caller has them (one pass over at fewer) */
    const double *top = OZ_N(5, 0) >= n ? OZ_D(5) : NULL;
    double *buf = oz_col_factors(s.a, k, n, s.a0, s.a1, s.exps, s.e0, NULL, top, OZ_S(5, 0), nt);
    if (buf == NULL)
        return OZK_NOMEM;
    const double *f1 = buf + n, *f2 = buf + 2 * n;
    ptrdiff_t bw = (n + OZ_MAX(nt, 1) - 1) / OZ_MAX(nt, 1);
    bw = OZ_MIN(STATS_COLS_MAX, OZ_MAX(STATS_COLS_MIN, (bw + 7) / 8 * 8));
    ptrdiff_t nb = (n + bw - 1) / bw;
    int fail = 0;
    OZ_PARALLEL_FOR(nt)
    for (ptrdiff_t b = 0; b < nb; b++) {
        ptrdiff_t j0 = b * bw, w = OZ_MIN(n, j0 + bw) - j0;
        /* x, then acc, bad and ds: w each */
        double *x = malloc((sizeof(double) + 2 * sizeof(uint64_t) + sizeof(int64_t)) *
                           (size_t)OZ_MAX(w, 1));
        if (x == NULL) {
            OZ_FAIL(fail);
            continue;
        }
        uint64_t *acc = (uint64_t *)(x + w), *bad = acc + w, any = 0;
        int64_t *ds = (int64_t *)(bad + w);
        for (ptrdiff_t j = 0; j < w; j++) {
            acc[j] = 0;
            bad[j] = 0;
            ds[j] = 0;
        }
        for (ptrdiff_t r = 0; r < k; r++) {
            const double *row = s.a + r * s.a0 + j0 * s.a1;
            for (ptrdiff_t j = 0; j < w; j++)
                x[j] = (row[j * s.a1] * f1[j0 + j]) * f2[j0 + j];
            for (ptrdiff_t j = 0; j < w; j++)
                acc[j] += fixed_fast(x[j], 1, bad + j);
            if (s.want) {
                int8_t *o = s.bnd + r * s.b0 + j0 * s.b1;
                if (s.b1 == 1)
                    bound_sums_run(x, o, 1, w, ds);
                else
                    bound_sums_run(x, o, s.b1, w, ds);
            }
        }
        for (ptrdiff_t j = 0; j < w; j++)
            any |= bad[j];
        if (OZ_FIXED_BAD(any)) { /* a value fixed_fast does not cover: fixed_unit's sums */
            for (ptrdiff_t j = 0; j < w; j++)
                acc[j] = 0;
            for (ptrdiff_t r = 0; r < k; r++) {
                const double *row = s.a + r * s.a0 + j0 * s.a1;
                for (ptrdiff_t j = 0; j < w; j++)
                    acc[j] += fixed_unit((row[j * s.a1] * f1[j0 + j]) * f2[j0 + j], 1);
            }
        }
        for (ptrdiff_t j = 0; j < w; j++) {
            s.fsq[(j0 + j) * s.f0] = (double)(int64_t)acc[j] * 0x1p-40;
            if (s.want)
                s.dsum[(j0 + j) * s.d0] = (double)ds[j];
        }
        free(x);
    }
    free(buf);
    return fail ? OZK_NOMEM : 0;
}
