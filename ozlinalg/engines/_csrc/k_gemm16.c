/* The exact INT8 GEMM of the AVX2 engine (ozlinalg.engines.avx2): c (+)= a @ b.T for
 * int8 a (m x K), b (p x K) and an int32 c, on vpmaddwd (_mm256_madd_epi16).
 *
 * Why not vpmaddubsw (what oneDNN runs below VNNI): it adds pairs of u8 x s8 products
 * into int16 with saturation, and 2 * 255 * 128 does not fit. vpmaddwd multiplies
 * int16 pairs and adds each pair into an int32 lane: for int8-range inputs
 * |a b + c d| <= 2 * 128**2 = 32768, exact. The lanes accumulate with vpaddd, which
 * wraps modulo 2**32: the int32 result is exact whenever the true sum fits in int32,
 * whatever the partial sums did (the caller keeps every run below 2**31, as it does
 * for oneDNN: ozlinalg.engines.onednn.engine). So the result is the exact integer
 * product, independent of blocking and thread count.
 *
 * Blocking (GotoBLAS / BLIS): for each panel of NC columns of B and KC inner indices,
 * B's rows are packed as int16 pairs, NR = 16 rows side by side per pair of inner
 * indices (bp[((strip * kcp + kk) * NR + j) * 2 + e] = b[j0 + strip * NR + j, k0 + 2 kk
 * + e]: one pair row is two ymm of 8 columns), zero-padded to whole strips and an
 * even KC. A's rows are packed the same way MR at a time, one MC x KC block per thread,
 * kept in L2 while every strip of the B panel (in L1, KC x NR) passes it. The
 * micro-kernel holds an MR x NR tile of int32 sums in 12 ymm registers: per pair of
 * inner indices two loads of B, MR broadcasts of A's pairs (vpbroadcastd), 2 MR vpmaddwd
 * and vpaddd.
 *
 * Threads: the B panel is packed by all threads, then (blocks of A's rows) x (groups of
 * B strips) are shared out statically; each entry of c is written by one thread. nt = 1
 * runs no parallel region.
 *
 * Arguments: a (m x K int8, any strides), b (p x K int8, any strides), c (m x p int32,
 * any strides), beta (0: c = a b^T, 1: c += a b^T). Only built where the compiler
 * targets AVX2 (the x86-64-v3 and v4 builds); elsewhere the kernel reports
 * OZK_UNIMPLEMENTED. gemm16_info() tells the engine which one it has. */
#include "kgemm.h"

#if defined(__AVX2__)
#include <immintrin.h>

#define G_MR 6
#define G_NR 16
/* Block sizes, measured on one Zen 2 core (32 KiB L1D, 512 KiB L2) through the engine
 * (n = 2048 and 1024 x 1024 x 9216): KC = 1024 99 - 101 Gops/s, 2048 96 - 98, 512 94 (its
 * four passes over c per 2048 inner indices cost more than its smaller strip gains); MC
 * 96 .. 240 within noise. The peak, one vpmaddwd a cycle, is 107. */
#define G_KC 1024 /* inner indices per packed block (even): a B strip of 32 KiB */
#define G_MC 120  /* rows of A per packed block (multiple of MR): 240 KiB of pairs in L2 */
#define G_NC 3072 /* columns of B per packed panel (multiple of NR): 6 MiB */

/* Rows r0 .. r0 + nr (nr <= R) of x, inner indices k0 .. k0 + kc, as int16 pairs R rows
 * wide: out[(kk * R + r) * 2 + e] = x(r0 + r, k0 + 2 kk + e), zeros past nr and kc. */
OZ_INLINE void
pack_rows(s8mat x, ptrdiff_t r0, ptrdiff_t nr, ptrdiff_t k0, ptrdiff_t kc, int R,
          int16_t *restrict out)
{
    ptrdiff_t kcp = (kc + 1) / 2;
    if (x.ks == 1) {
        /* rows contiguous along k: 16 bytes of a row sign-extend to 8 pairs (one ymm),
         * which go to every R-th pair of the packed block */
        uint32_t *o32 = (uint32_t *)out;
        for (int r = 0; r < R; r++) {
            uint32_t *d = o32 + r;
            if (r >= nr) {
                for (ptrdiff_t kk = 0; kk < kcp; kk++)
                    d[kk * R] = 0;
                continue;
            }
            const int8_t *src = x.p + (r0 + r) * x.rs + k0;
            ptrdiff_t q = 0;
            for (; q + 16 <= kc; q += 16) {
                uint32_t t[8];
                __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(src + q)));
                _mm256_storeu_si256((__m256i *)t, w);
                uint32_t *dq = d + (q / 2) * R;
                for (int e = 0; e < 8; e++)
                    dq[e * R] = t[e];
            }
            for (; q < kc; q += 2) {
                uint16_t lo = (uint16_t)(int16_t)src[q];
                uint16_t hi = q + 1 < kc ? (uint16_t)(int16_t)src[q + 1] : 0;
                d[(q / 2) * R] = (uint32_t)lo | ((uint32_t)hi << 16);
            }
        }
        return;
    }
    if (x.rs == 1 && nr == R && R % 16 == 0) {
        /* columns contiguous (the operand stored k x rows): two k rows of 16 bytes
         * interleave into 16 pairs, sign-extended to int16 */
        for (ptrdiff_t kk = 0; kk < kcp; kk++) {
            ptrdiff_t q = k0 + 2 * kk;
            int two = 2 * kk + 1 < kc;
            for (int r = 0; r < R; r += 16) {
                const int8_t *s0 = x.p + q * x.ks + r0 + r;
                __m128i v0 = _mm_loadu_si128((const __m128i *)s0);
                __m128i v1 = two ? _mm_loadu_si128((const __m128i *)(s0 + x.ks))
                                 : _mm_setzero_si128();
                __m128i lo = _mm_unpacklo_epi8(v0, v1), hi = _mm_unpackhi_epi8(v0, v1);
                int16_t *o = out + (kk * R + r) * 2;
                _mm256_storeu_si256((__m256i *)o, _mm256_cvtepi8_epi16(lo));
                _mm256_storeu_si256((__m256i *)(o + 16), _mm256_cvtepi8_epi16(hi));
            }
        }
        return;
    }
    for (ptrdiff_t kk = 0; kk < kcp; kk++)
        for (int r = 0; r < R; r++)
            for (int e = 0; e < 2; e++) {
                ptrdiff_t q = 2 * kk + e;
                out[(kk * R + r) * 2 + e] =
                    (r < nr && q < kc) ? x.p[(r0 + r) * x.rs + (k0 + q) * x.ks] : 0;
            }
}

/* The MR x NR tile of ap (MR rows' pairs) times bp (NR rows' pairs) over kcp pairs,
 * stored to c (row stride cs, unit column stride) as c = tile (add 0) or c += tile. */
static void
micro_6x16(ptrdiff_t kcp, const int16_t *restrict ap, const int16_t *restrict bp,
           int32_t *c, ptrdiff_t cs, int add)
{
    __m256i c00 = _mm256_setzero_si256(), c01 = _mm256_setzero_si256();
    __m256i c10 = _mm256_setzero_si256(), c11 = _mm256_setzero_si256();
    __m256i c20 = _mm256_setzero_si256(), c21 = _mm256_setzero_si256();
    __m256i c30 = _mm256_setzero_si256(), c31 = _mm256_setzero_si256();
    __m256i c40 = _mm256_setzero_si256(), c41 = _mm256_setzero_si256();
    __m256i c50 = _mm256_setzero_si256(), c51 = _mm256_setzero_si256();
    const int32_t *a = (const int32_t *)ap;
/* The sums stay in their registers step after step: without this GCC reassociates the
 * adds of an unrolled loop into trees of temporaries and spills them. */
#define G_KEEP()                                                                        \
    __asm__("" : "+x"(c00), "+x"(c01), "+x"(c10), "+x"(c11), "+x"(c20), "+x"(c21),     \
            "+x"(c30), "+x"(c31), "+x"(c40), "+x"(c41), "+x"(c50), "+x"(c51))
#define G_STEP(A, B)                                                                    \
    do {                                                                                \
        __m256i b0 = _mm256_load_si256((const __m256i *)(B));                           \
        __m256i b1 = _mm256_load_si256((const __m256i *)(B) + 1);                       \
        __m256i x;                                                                      \
        x = _mm256_set1_epi32((A)[0]);                                                  \
        c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(x, b0));                          \
        c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(x, b1));                          \
        x = _mm256_set1_epi32((A)[1]);                                                  \
        c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(x, b0));                          \
        c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(x, b1));                          \
        x = _mm256_set1_epi32((A)[2]);                                                  \
        c20 = _mm256_add_epi32(c20, _mm256_madd_epi16(x, b0));                          \
        c21 = _mm256_add_epi32(c21, _mm256_madd_epi16(x, b1));                          \
        x = _mm256_set1_epi32((A)[3]);                                                  \
        c30 = _mm256_add_epi32(c30, _mm256_madd_epi16(x, b0));                          \
        c31 = _mm256_add_epi32(c31, _mm256_madd_epi16(x, b1));                          \
        x = _mm256_set1_epi32((A)[4]);                                                  \
        c40 = _mm256_add_epi32(c40, _mm256_madd_epi16(x, b0));                          \
        c41 = _mm256_add_epi32(c41, _mm256_madd_epi16(x, b1));                          \
        x = _mm256_set1_epi32((A)[5]);                                                  \
        c50 = _mm256_add_epi32(c50, _mm256_madd_epi16(x, b0));                          \
        c51 = _mm256_add_epi32(c51, _mm256_madd_epi16(x, b1));                          \
        G_KEEP();                                                                       \
    } while (0)
    ptrdiff_t kk = 0;
    for (; kk + 4 <= kcp; kk += 4) {
        G_STEP(a, bp);
        G_STEP(a + 6, bp + 32);
        G_STEP(a + 12, bp + 64);
        G_STEP(a + 18, bp + 96);
        a += 24;
        bp += 128;
    }
    for (; kk < kcp; kk++) {
        G_STEP(a, bp);
        a += 6;
        bp += 32;
    }
#undef G_STEP
#undef G_KEEP
#define G_ROW(r, x0, x1)                                                                \
    do {                                                                                \
        __m256i *o = (__m256i *)(c + (r) * cs);                                         \
        if (add) {                                                                      \
            x0 = _mm256_add_epi32(x0, _mm256_loadu_si256(o));                           \
            x1 = _mm256_add_epi32(x1, _mm256_loadu_si256(o + 1));                       \
        }                                                                               \
        _mm256_storeu_si256(o, x0);                                                     \
        _mm256_storeu_si256(o + 1, x1);                                                 \
    } while (0)
    G_ROW(0, c00, c01);
    G_ROW(1, c10, c11);
    G_ROW(2, c20, c21);
    G_ROW(3, c30, c31);
    G_ROW(4, c40, c41);
    G_ROW(5, c50, c51);
#undef G_ROW
}

/* An edge tile (mr <= MR rows, nr <= NR columns) or a c with any strides: the full
 * tile into a buffer, then its mr x nr corner into c. */
static void
micro_edge(ptrdiff_t kcp, const int16_t *ap, const int16_t *bp, int32_t *c, ptrdiff_t cs0,
           ptrdiff_t cs1, ptrdiff_t mr, ptrdiff_t nr, int add)
{
    int32_t t[G_MR * G_NR] __attribute__((aligned(32)));
    micro_6x16(kcp, ap, bp, t, G_NR, 0);
    for (ptrdiff_t r = 0; r < mr; r++)
        for (ptrdiff_t j = 0; j < nr; j++) {
            int32_t *o = c + r * cs0 + j * cs1;
            /* wrapping int32 sums, as vpaddd: the exact result modulo 2**32 */
            *o = add ? (int32_t)((uint32_t)*o + (uint32_t)t[r * G_NR + j]) : t[r * G_NR + j];
        }
}

static int
gemm16(const gemm_args *g, int nt)
{
    ptrdiff_t m = g->m, p = g->p, k = g->k;
    if (gemm_trivial(g))
        return 0;
    if (nt < 1)
        nt = 1;
    ptrdiff_t kc_max = OZ_MIN(G_KC, (k + 1) / 2 * 2);
    ptrdiff_t nc_max = OZ_MIN(G_NC, (p + G_NR - 1) / G_NR * G_NR);
    /* blocks of A's rows: at most MC, at least one per thread where there are enough
     * rows, and a multiple of the thread count where there are several */
    ptrdiff_t nblk = (m + G_MC - 1) / G_MC;
    if (nt > 1)
        nblk = (nblk + nt - 1) / nt * nt;
    ptrdiff_t mc = (m + nblk - 1) / nblk;
    mc = OZ_MIN(G_MC, (mc + G_MR - 1) / G_MR * G_MR);
    nblk = (m + mc - 1) / mc;
    size_t apanel = (size_t)(kc_max * mc + 32); /* int16 per thread's A block */
    int16_t *bpack = aligned_alloc(64, (size_t)(kc_max * nc_max * 2 + 64) / 64 * 64);
    int16_t *apack = aligned_alloc(64, ((size_t)nt * apanel * 2 + 63) / 64 * 64);
    if (bpack == NULL || apack == NULL) {
        free(bpack);
        free(apack);
        return OZK_NOMEM;
    }
    int unit = g->cs1 == 1;
    OZ_PARALLEL(nt)
    {
#if defined(_OPENMP)
        int tid = omp_get_thread_num();
#else
        int tid = 0;
#endif
        int16_t *ap = apack + (size_t)tid * apanel;
        for (ptrdiff_t j0 = 0; j0 < p; j0 += nc_max) {
            ptrdiff_t nc = OZ_MIN(nc_max, p - j0);
            ptrdiff_t nstrip = (nc + G_NR - 1) / G_NR;
            /* groups of strips per block of rows: enough items for the threads */
            ptrdiff_t ngrp = nblk >= nt ? 1 : OZ_MIN(nstrip, (nt + nblk - 1) / nblk);
            for (ptrdiff_t k0 = 0; k0 < k; k0 += kc_max) {
                ptrdiff_t kc = OZ_MIN(kc_max, k - k0);
                ptrdiff_t kcp = (kc + 1) / 2;
                int add = g->beta || k0 > 0;
                OZ_FOR
                for (ptrdiff_t s = 0; s < nstrip; s++)
                    pack_rows(g->b, j0 + s * G_NR, OZ_MIN(G_NR, nc - s * G_NR), k0, kc, G_NR,
                              bpack + s * kcp * G_NR * 2);
                OZ_FOR
                for (ptrdiff_t item = 0; item < nblk * ngrp; item++) {
                    ptrdiff_t ib = item / ngrp, gr = item % ngrp;
                    ptrdiff_t i0 = ib * mc, mb = OZ_MIN(mc, m - i0);
                    ptrdiff_t s0 = gr * nstrip / ngrp, s1 = (gr + 1) * nstrip / ngrp;
                    for (ptrdiff_t r = 0; r < mb; r += G_MR)
                        pack_rows(g->a, i0 + r, OZ_MIN(G_MR, mb - r), k0, kc, G_MR,
                                  ap + r * kcp * 2);
                    for (ptrdiff_t s = s0; s < s1; s++) {
                        const int16_t *bs = bpack + s * kcp * G_NR * 2;
                        ptrdiff_t jj = j0 + s * G_NR, nr = OZ_MIN(G_NR, p - jj);
                        for (ptrdiff_t r = 0; r < mb; r += G_MR) {
                            ptrdiff_t mr = OZ_MIN(G_MR, mb - r);
                            int32_t *c = g->c + (i0 + r) * g->cs0 + jj * g->cs1;
                            if (unit && mr == G_MR && nr == G_NR)
                                micro_6x16(kcp, ap + r * kcp * 2, bs, c, g->cs0, add);
                            else
                                micro_edge(kcp, ap + r * kcp * 2, bs, c, g->cs0, g->cs1, mr,
                                           nr, add);
                        }
                    }
                }
            }
        }
    }
    free(bpack);
    free(apack);
    return 0;
}

int
k_gemm16(ozval *v, int nt)
{
    gemm_args g;
    if (gemm_read_args(v, &g))
        return OZK_BADLAYOUT;
    return gemm16(&g, nt);
}

int
k_gemm16_info(ozval *v, int nt)
{
    (void)nt;
    int64_t *info = OZ_I64(0);
    info[0] = 1;       /* built */
    info[OZ_S(0, 0)] = G_MR;
    info[2 * OZ_S(0, 0)] = G_NR;
    return 0;
}

#else /* no AVX2: not built at this level */

int
k_gemm16(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_gemm16_info(ozval *v, int nt)
{
    (void)nt;
    int64_t *info = OZ_I64(0);
    info[0] = 0;
    info[OZ_S(0, 0)] = 0;
    info[2 * OZ_S(0, 0)] = 0;
    return 0;
}

#endif
