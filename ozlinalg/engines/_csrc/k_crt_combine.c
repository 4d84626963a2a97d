/* Ozaki scheme II, the products' side (ozlinalg.ozaki.crt): each INT32 product reduced
 * to its int8 residues, and the CRT rebuild of C' from the residues of every modulus.
 * The residue route is in kcrt.h.
 *
 * The rebuild's products are exact (integers below 2**53 times small integers, or
 * powers of two) except the quotient's, which is added in the generic order.
 */
#include "kcrt.h"

/* ---------------------------------------------------------------------------------
 * The INT32 products reduced mod p (symmetric, int8). */

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
    /* faithful == 2: the certificate's vectors (columns: unit stride) and its output */
    const double *pa, *pb, *ra, *rb;
    const uint8_t *za, *zb;
    const int64_t *ea, *eb;
    ptrdiff_t pa0, ra0, za0, ea0;
    double kk, slack;
    uint8_t *ok;
    ptrdiff_t k0, k1;
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

/* The levels of one row's reconstruction summed top down with TwoSum: s the sum,
 * e the running sum of the rounding errors, eb the sum of |e| (the bound's terms).
 * Shared by the plain and the certifying faithful rebuilds. */
OZ_INLINE void
twosum_levels(const double *restrict lbuf, const combine_args *a, int nl,
              double *restrict s, double *restrict e, double *restrict eb, ptrdiff_t w)
{
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
    twosum_levels(lbuf, a, nl, s, e, eb, w);
    for (ptrdiff_t j = 0; j < w; j++) {
        double sj = s[j];
        double r2 = sj + e[j];
        double bb = r2 - sj;
        double e2 = (sj - (r2 - bb)) + (e[j] - bb);
        orow[j * os] = r2;
        srow[j * ss] = fabs(e2) + cu * eb[j];
    }
}

/* ozlinalg.ozaki.faithful.certify_core of one entry (libm's frexp / ldexp). */
OZ_INLINE uint8_t
certified_scalar(double r, double bnd, int64_t E, double slack)
{
    if (r == 0.0)
        return bnd == 0.0;
    if (!isfinite(r)) { /* nb_frexp's convention: the value itself, exponent 0 */
        double gap = 0x1p-53;
        return E >= -967 && E <= 1023 && bnd < gap * (1.0 - slack);
    }
    int e;
    double mant = frexp(fabs(r), &e);
    int64_t ee = (int64_t)e + E;
    if (ee < -967 || ee > 1023)
        return 0;
    double gap = ldexp(1.0, e - 53 - (mant == 0.5 ? 1 : 0));
    return bnd < gap * (1.0 - slack);
}

/* faithful_combine's finish with the Ozaki-II certificate of each entry instead of its
 * slop (ozlinalg.ozaki.faithful.crt_certify: the same operations, so the same truth
 * values): the entry's bound (slop + delta) (1 + slack) against the distance to its
 * neighbouring floats, read off the bits of |r| (frexp's exponent and the mantissa's
 * zero test) where r is a normal number of biased exponent >= 54 (the gap a normal
 * power of two), by libm otherwise. Row i, columns j0 .. j0 + w. */
OZ_INLINE void
faithful_certify_finish(const combine_args *a, ptrdiff_t i, ptrdiff_t j0, const double *s,
                        const double *e, const double *eb, double *restrict orow, ptrdiff_t os,
                        uint8_t *restrict okrow, ptrdiff_t ks, ptrdiff_t w)
{
    double cu = a->cu, kk = a->kk, slack = a->slack, one_s = 1.0 + slack;
    double lim = 1.0 - slack;
    double pai = a->pa[i * a->pa0], rai = a->ra[i * a->ra0];
    int zi = a->za[i * a->za0] != 0;
    int64_t eai = a->ea[i * a->ea0];
    const double *restrict pb = a->pb + j0, *restrict rb = a->rb + j0;
    const uint8_t *restrict zb = a->zb + j0;
    const int64_t *restrict ebj = a->eb + j0;
    int special = 0;
    for (ptrdiff_t j = 0; j < w; j++) {
        double sj = s[j];
        double r2 = sj + e[j];
        double bb = r2 - sj;
        double e2 = (sj - (r2 - bb)) + (e[j] - bb);
        orow[j * os] = r2;
        double slop = fabs(e2) + cu * eb[j];
        double d = (rai * pb[j] + rb[j] * (pai + kk * rai)) * (1.0 + 0x1p-30);
        d = (zi | (zb[j] != 0)) ? 0.0 : d;
        double bnd = (slop + d) * one_s;
        double ar = fabs(r2);
        uint64_t bits;
        memcpy(&bits, &ar, sizeof bits);
        int64_t be = (int64_t)(bits >> 52);
        uint64_t pow2 = (bits & 0xFFFFFFFFFFFFFull) == 0;
        uint64_t gbits = (uint64_t)(be - 52 - (int64_t)pow2) << 52;
        double gap;
        memcpy(&gap, &gbits, sizeof gap);
        int64_t ee = be - 1022 + eai + ebj[j];
        uint8_t nz = (ee >= -967) & (ee <= 1023) & (bnd < gap * lim);
        uint8_t zr = bnd == 0.0;
        okrow[j * ks] = r2 != 0.0 ? nz : zr;
        special |= (be < 54) | (be == 2047);
    }
    if (special) {
        for (ptrdiff_t j = 0; j < w; j++) {
            double r2 = orow[j * os];
            double ar = fabs(r2);
            uint64_t bits;
            memcpy(&bits, &ar, sizeof bits);
            int64_t be = (int64_t)(bits >> 52);
            if (!(be < 54 || be == 2047) || r2 == 0.0)
                continue;
            double sj = s[j];
            double bb = r2 - sj;
            double e2 = (sj - (r2 - bb)) + (e[j] - bb);
            double slop = fabs(e2) + cu * eb[j];
            double d = (rai * pb[j] + rb[j] * (pai + kk * rai)) * (1.0 + 0x1p-30);
            d = (zi | (zb[j] != 0)) ? 0.0 : d;
            okrow[j * ks] = certified_scalar(r2, (slop + d) * one_s, eai + ebj[j], slack);
        }
    }
}

/* faithful_combine up to the last TwoSum, then faithful_certify_finish. */
OZ_INLINE void
faithful_combine_certify(const double *restrict lbuf, const combine_args *a, ptrdiff_t i,
                         ptrdiff_t j0, double *restrict s, double *restrict e,
                         double *restrict eb, double *restrict orow, ptrdiff_t os,
                         uint8_t *restrict okrow, ptrdiff_t ks, ptrdiff_t w)
{
    int nl = a->nl;
    twosum_levels(lbuf, a, nl, s, e, eb, w);
    faithful_certify_finish(a, i, j0, s, e, eb, orow, os, okrow, ks, w);
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
    if (faithful == 2) {
        faithful_combine_certify(lbuf, a, i, j0, sc, qt, sc + ROW,
                                 a->out + i * a->o0 + j0 * os, os,
                                 a->ok + i * a->k0 + j0 * ss, ss, w);
    } else if (faithful) {
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
    a.slop = faithful == 1 ? OZ_D(8) : NULL;
    a.s0 = faithful == 1 ? OZ_S(8, 0) : 0;
    a.s1 = faithful == 1 ? OZ_S(8, 1) : 0;
    a.ok = NULL;
    if (faithful == 2) {
        /* res frac wl plimbs unit powers cu out | pa pb ra rb za zb k ea eb slack ok */
        a.pa = OZ_D(8);
        a.pb = OZ_D(9);
        a.ra = OZ_D(10);
        a.rb = OZ_D(11);
        a.za = OZ_B(12);
        a.zb = OZ_B(13);
        a.kk = v[14].d;
        a.ea = OZ_I64(15);
        a.eb = OZ_I64(16);
        a.slack = v[17].d;
        a.ok = OZ_B(18);
        a.pa0 = OZ_S(8, 0);
        a.ra0 = OZ_S(10, 0);
        a.za0 = OZ_S(12, 0);
        a.ea0 = OZ_S(15, 0);
        a.k0 = OZ_S(18, 0);
        a.k1 = OZ_S(18, 1);
        a.s1 = a.k1; /* the certificate's column stride takes the slop's place */
    }
    ptrdiff_t padded = (a.nmod + 3) / 4 * 4;
    /* the numba kernel's preconditions: frac and wlimbs padded to four moduli, at least
     * three limb rows, 1 <= nl <= wlimbs' columns */
    if (a.m == 0 || a.p == 0)
        return 0;
    if (OZ_N(1, 0) < padded || OZ_N(2, 0) < padded || a.nlb < 3 || a.nl < 1 || a.nl > a.nlb ||
        OZ_N(ko, 0) < a.m || OZ_N(ko, 1) < a.p)
        return OZK_BADLAYOUT;
    if (faithful && OZ_N(5, 0) < a.nl)
        return OZK_BADLAYOUT;
    if (faithful == 1 && (OZ_N(8, 0) < a.m || OZ_N(8, 1) < a.p))
        return OZK_BADLAYOUT;
    if (faithful == 2 && (OZ_N(8, 0) < a.m || OZ_N(10, 0) < a.m || OZ_N(12, 0) < a.m
                          || OZ_N(15, 0) < a.m || OZ_N(9, 0) < a.p || OZ_N(11, 0) < a.p
                          || OZ_N(13, 0) < a.p || OZ_N(16, 0) < a.p || OZ_N(18, 0) < a.m
                          || OZ_N(18, 1) < a.p))
        return OZK_BADLAYOUT;
    /* the columns' vectors are read with unit stride */
    if (faithful == 2 && a.p > 1 && (OZ_S(9, 0) != 1 || OZ_S(11, 0) != 1 || OZ_S(13, 0) != 1
                                     || OZ_S(16, 0) != 1))
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
                if (unit && faithful == 2)
                    rebuild_chunk(&a, i, j0, w, qt, lbuf, sc, 2, 1, 1, 1);
                else if (unit && faithful)
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

int
k_crt_combine_certify(ozval *v, int nt)
{
    return crt_rebuild(v, nt, 2);
}
