/* The exact INT8 GEMM on AMX tiles (the oneDNN engine's GEMM where the CPU has AMX-INT8,
 * ozlinalg.engines.onednn.engine): c (+)= a @ b.T for int8 a (m x K), b (p x K) and an
 * int32 c, on tdpbssd.
 *
 * Why a GEMM of our own: on the 2-core AMX Xeon this was written on, oneDNN 3.2's
 * dnnl_gemm_s8s8s32 and its matmul primitive (brgemm AMX kernels, cached, plain or
 * pre-packed weights) took 10.9-12.4 ms for an n = 2048 product on one core, 1.4-1.6
 * TOPS; this kernel takes 7.2-7.5 ms, 2.3-2.4 TOPS, a third of the tile peak (7.4 TOPS
 * per core, benchmarks/studies/cpu_peak.py). Measured with
 * benchmarks/studies/amx_gemm.py (docs/performance.md, "AMX").
 *
 * Exactness: tdpbssd multiplies signed bytes and adds groups of four products into
 * int32 lanes without saturation (each group |sum| <= 4 * 128**2); the lanes wrap
 * modulo 2**32, so the int32 result is the exact integer product wherever that fits
 * int32 (the engine keeps every run below 2**31, as for oneDNN), independent of
 * blocking and thread count.
 *
 * Blocking: for each panel of NC columns of B and KC inner indices (a multiple of 64),
 * B's rows are packed in the tiles' VNNI layout, 16 rows per strip:
 * bp[(strip * KQ + q) * 64 + j * 4 + e] = b[j0 + 16 strip + j, k0 + 4 q + e], zeros past
 * p and kc (KQ = kc rounded up to 64, over 4). The register block is 32 x 32 of c in
 * four accumulator tiles (tmm0-3), with two tiles of A's rows (tmm4-5, 16 rows x 64
 * inner indices) and two strips of B (tmm6-7). Each thread copies its 32-row block of
 * A (KC inner indices, 32 KiB: L1) in tile order, zero-padded past m and kc, and runs
 * it past every strip pair of the B panel (1 MiB: L2). Block sizes measured on one
 * core: (KC, NC) = (1024, 1024) and (2048, 512) within 2 % of each other, A in tile
 * order or read in place; (2048, 2048) and (512, 256) 1.5-1.8x slower.
 *
 * gemm_amx_mod (Ozaki II's products): the product reduced mod p into int8 residues as it
 * goes. All of k is one panel (up to X_KMOD; the B panel kept at 1 MiB), so the sums
 * never go to memory; each 32 x 32 block is stored from the tiles into one of two
 * per-thread buffers, and reduced a row per step of the next block's inner loop (the
 * vector units convert and reduce while tdpbssd multiplies: reduced after the block
 * instead, it took as long as the separate crt_reduce pass it replaced).
 *
 * Threads: the B panel is packed by all threads, then (blocks of 32 rows) x (groups of
 * strip pairs) are shared out statically; each entry of c is written by one thread.
 * Every thread loads the tile configuration at the start of its region and releases
 * the tiles at the end (tile state is per thread; released, it costs context switches
 * nothing).
 *
 * Linux grants AMX's tile data per process on request (arch_prctl
 * ARCH_REQ_XCOMP_PERM, kernel 5.16 and up); amx_info asks for it, and the engine runs
 * this GEMM only where it was granted. Built into the x86-64-v4 build where the
 * compiler knows AMX (GCC 11 and up); elsewhere the kernel reports OZK_UNIMPLEMENTED.
 */
#include "kcrt.h"
#include "kgemm.h"

#if defined(__AVX512F__) && defined(__x86_64__) && defined(__linux__) && \
    defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define OZ_HAVE_AMX 1
#endif

#if defined(OZ_HAVE_AMX)
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8")
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define X_MR 32    /* rows of c per register block (two A tiles) */
#define X_NR 32    /* columns of c per register block (two B strips) */
#define X_KC 1024  /* inner indices per packed panel (multiple of 64) */
#define X_NC 1024  /* columns of B per packed panel (multiple of 32): 1 MiB at X_KC */
/* gemm_amx_mod takes all of k in one panel (no partial sums in memory) up to this */
#define X_KMOD 4096

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static void
tiles_on(void)
{
    tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.colsb[t] = 64;
        c.rows[t] = 16;
    }
    _tile_loadconfig(&c);
}

/* Groups q0 .. q1 of the strip of 16 rows r0 .. r0 + nr of x (inner indices k0 .. k0 +
 * kc) in VNNI layout, element by element: out[q * 64 + j * 4 + e] = x(r0 + j, k0 + 4 q +
 * e), zeros past nr and kc. */
static void
pack_groups(s8mat x, ptrdiff_t r0, ptrdiff_t nr, ptrdiff_t k0, ptrdiff_t kc, ptrdiff_t q0,
            ptrdiff_t q1, int8_t *restrict out)
{
    for (ptrdiff_t q = q0; q < q1; q++)
        for (ptrdiff_t j = 0; j < 16; j++)
            for (int e = 0; e < 4; e++) {
                ptrdiff_t kk = 4 * q + e;
                out[q * 64 + j * 4 + e] =
                    (j < nr && kk < kc) ? x.p[(r0 + j) * x.rs + (k0 + kk) * x.ks] : 0;
            }
}

/* The strip of 16 rows r0 .. r0 + nr of x in VNNI layout, kq groups (pack_groups' layout):
 * where x's rows are contiguous along k, four bytes of a row are one group. */
static void
pack_strip(s8mat x, ptrdiff_t r0, ptrdiff_t nr, ptrdiff_t k0, ptrdiff_t kc, ptrdiff_t kq,
           int8_t *restrict out)
{
    ptrdiff_t full = 0;
    if (x.ks == 1) {
        full = kc / 4;
        for (ptrdiff_t j = 0; j < 16; j++) {
            if (j >= nr) {
                for (ptrdiff_t q = 0; q < full; q++)
                    memset(out + q * 64 + j * 4, 0, 4);
                continue;
            }
            const int8_t *s = x.p + (r0 + j) * x.rs + k0;
            for (ptrdiff_t q = 0; q < full; q++)
                memcpy(out + q * 64 + j * 4, s + 4 * q, 4);
        }
    }
    pack_groups(x, r0, nr, k0, kc, full, kq, out);
}

/* Strips g0 .. g0 + ns of the panel whose columns start at r0 (nc columns in all), each
 * stripb bytes. Where x is stored k x rows, the whole strips are packed together, k row
 * by k row: four k rows of 16 bytes interleave into a strip's 16 groups of four, and the
 * strips of one cache line (64 columns) are read at once; strip by strip, each line
 * would be read four times, a strip's width at a time. */
static void
pack_strips(s8mat x, ptrdiff_t r0, ptrdiff_t nc, ptrdiff_t g0, ptrdiff_t ns, ptrdiff_t k0,
            ptrdiff_t kc, ptrdiff_t kq, ptrdiff_t stripb, int8_t *restrict out)
{
    ptrdiff_t whole = 0;
    if (x.rs == 1) {
        whole = OZ_MAX(0, OZ_MIN(ns, nc / 16 - g0));
        ptrdiff_t full = kc / 4;
        for (ptrdiff_t q = 0; q < full && whole; q++) {
            const int8_t *s = x.p + (k0 + 4 * q) * x.ks + r0 + g0 * 16;
            for (ptrdiff_t t = 0; t < whole; t++, s += 16) {
                __m128i v0 = _mm_loadu_si128((const __m128i *)s);
                __m128i v1 = _mm_loadu_si128((const __m128i *)(s + x.ks));
                __m128i v2 = _mm_loadu_si128((const __m128i *)(s + 2 * x.ks));
                __m128i v3 = _mm_loadu_si128((const __m128i *)(s + 3 * x.ks));
                __m128i t0 = _mm_unpacklo_epi8(v0, v1), t1 = _mm_unpacklo_epi8(v2, v3);
                __m128i t2 = _mm_unpackhi_epi8(v0, v1), t3 = _mm_unpackhi_epi8(v2, v3);
                __m128i *o = (__m128i *)(out + (g0 + t) * stripb + q * 64);
                _mm_storeu_si128(o, _mm_unpacklo_epi16(t0, t1));
                _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(t0, t1));
                _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(t2, t3));
                _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(t2, t3));
            }
        }
        for (ptrdiff_t t = 0; t < whole; t++)  /* the partial and zero groups */
            pack_groups(x, r0 + (g0 + t) * 16, 16, k0, kc, full, kq,
                        out + (g0 + t) * stripb);
    }
    for (ptrdiff_t t = g0 + whole; t < g0 + ns; t++)
        pack_strip(x, r0 + t * 16, OZ_MAX(0, OZ_MIN(16, nc - t * 16)), k0, kc, kq,
                   out + t * stripb);
}

/* Rows r0 .. r0 + mr (mr <= X_MR) of x, inner indices k0 .. k0 + kc, in tile order:
 * out[(q * X_MR + r) * 64 + e] = x(r0 + r, k0 + 64 q + e), zeros past mr and kc, nq
 * groups of 64 inner indices. A tile (16 rows of one group) is then 1 KiB of
 * consecutive lines. Read in place instead, rows a power-of-two bytes apart (k = 2048,
 * or the residues' 15 x 2048) fall into two of L1's 64 sets and evict each other. */
static void
pack_tiles(s8mat x, ptrdiff_t r0, ptrdiff_t mr, ptrdiff_t k0, ptrdiff_t kc, ptrdiff_t nq,
           int8_t *restrict out)
{
    for (ptrdiff_t r = 0; r < X_MR; r++) {
        if (r >= mr) {
            for (ptrdiff_t q = 0; q < nq; q++)
                memset(out + (q * X_MR + r) * 64, 0, 64);
            continue;
        }
        if (x.ks == 1) {
            const int8_t *s = x.p + (r0 + r) * x.rs + k0;
            ptrdiff_t q = 0;
            for (; q < kc / 64; q++)
                memcpy(out + (q * X_MR + r) * 64, s + 64 * q, 64);
            for (; q < nq; q++) {
                int8_t *o = out + (q * X_MR + r) * 64;
                ptrdiff_t have = OZ_MAX(0, OZ_MIN(64, kc - 64 * q));
                memcpy(o, s + 64 * q, (size_t)have);
                memset(o + have, 0, (size_t)(64 - have));
            }
        } else {
            const int8_t *s = x.p + (r0 + r) * x.rs + k0 * x.ks;
            for (ptrdiff_t q = 0; q < nq; q++)
                for (ptrdiff_t e = 0; e < 64; e++) {
                    ptrdiff_t kk = 64 * q + e;
                    out[(q * X_MR + r) * 64 + e] = kk < kc ? s[kk * x.ks] : 0;
                }
        }
    }
}

/* gemm_amx_mod's output: c's entries reduced mod pf (symmetric, int8) into o. */
typedef struct {
    int8_t *o;
    ptrdiff_t o0, o1;
    double pf;
    int pow2;
} mod_out;

/* A finished 32 x 32 block (ct, row stride X_NR) whose mr x nr corner is still to be
 * reduced into o, a row at a time; rows done so far: next. */
typedef struct {
    const int32_t *ct;
    int8_t *o;
    ptrdiff_t mr, nr, next;
} pending;

OZ_INLINE void
reduce_rows(pending *pd, const mod_out *red, ptrdiff_t upto)
{
    for (; pd->next < OZ_MIN(upto, pd->mr); pd->next++) {
        const int32_t *row = pd->ct + pd->next * X_NR;
        int8_t *o = pd->o + pd->next * red->o0;
        if (red->o1 == 1)
            reduce_run(row, 1, red->pf, red->pow2, o, 1, pd->nr);
        else
            reduce_run(row, 1, red->pf, red->pow2, o, red->o1, pd->nr);
    }
}

/* The 32 x 32 block of ap (tile order, nq groups) times the strips b0 and b0 + strip,
 * into c (row stride cs bytes), loaded first where add. Where pd holds a finished block
 * (gemm_amx_mod), its rows are reduced one per step of the inner loop meanwhile: the
 * vector units work on them while the tiles multiply, instead of after. */
OZ_INLINE void
block_32x32(const int8_t *ap, const int8_t *b0, ptrdiff_t strip, ptrdiff_t nq, int32_t *c,
            ptrdiff_t cs, int add, pending *pd, const mod_out *red)
{
    const int8_t *b1 = b0 + strip;
    int reducing = pd != NULL && pd->ct != NULL;
    if (add) {
        _tile_loadd(0, c, cs);
        _tile_loadd(1, c + 16, cs);
        _tile_loadd(2, (const char *)c + 16 * cs, cs);
        _tile_loadd(3, (const char *)c + 16 * cs + 64, cs);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (ptrdiff_t q = 0; q < nq; q++) {
        const int8_t *a = ap + q * X_MR * 64;
        _tile_loadd(4, a, 64);
        _tile_loadd(6, b0 + 1024 * q, 64);
        _tile_dpbssd(0, 4, 6);
        _tile_loadd(7, b1 + 1024 * q, 64);
        _tile_dpbssd(1, 4, 7);
        _tile_loadd(5, a + 1024, 64);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
        if (reducing)
            reduce_rows(pd, red, pd->next + 1);
    }
    if (reducing)
        reduce_rows(pd, red, X_MR);
    _tile_stored(0, c, cs);
    _tile_stored(1, c + 16, cs);
    _tile_stored(2, (char *)c + 16 * cs, cs);
    _tile_stored(3, (char *)c + 16 * cs + 64, cs);
}

/* c (+)= a @ b.T, or where red: (a @ b.T) mod p into red->o, all of k in one panel
 * (k <= X_KMOD; g->c unused). */
static int
gemm_amx(const gemm_args *g, int nt, const mod_out *red)
{
    ptrdiff_t m = g->m, p = g->p, k = g->k;
    if (red == NULL && gemm_trivial(g))
        return 0;
    if (red != NULL && (m <= 0 || p <= 0 || k <= 0)) {
        for (ptrdiff_t i = 0; i < m && p > 0; i++)  /* an empty sum: residue 0 */
            for (ptrdiff_t j = 0; j < p; j++)
                red->o[i * red->o0 + j * red->o1] = 0;
        return 0;
    }
    if (nt < 1)
        nt = 1;
    ptrdiff_t kc_max = OZ_MIN(red ? X_KMOD : X_KC, (k + 63) / 64 * 64);
    /* the B panel stays at 1 MiB (L2) whatever its depth */
    ptrdiff_t nc_cap = red ? OZ_MAX(X_NR, X_KC * X_NC / OZ_MAX(kc_max, 64) / X_NR * X_NR) : X_NC;
    ptrdiff_t nc_max = OZ_MIN(nc_cap, (p + X_NR - 1) / X_NR * X_NR);
    ptrdiff_t nblk = (m + X_MR - 1) / X_MR;
    /* per thread: a packed A block (X_MR x kc_max) and a c block (X_MR x X_NR int32) */
    /* two c blocks where red: one multiplied into while the other is reduced */
    size_t abytes = (size_t)X_MR * kc_max, tbytes = X_MR * X_NR * 4 * (red ? 2 : 1);
    size_t per = (abytes + tbytes + 63) / 64 * 64;
    int8_t *bpack = aligned_alloc(64, (size_t)kc_max * nc_max);
    int8_t *work = aligned_alloc(64, (size_t)nt * per);
    if (bpack == NULL || work == NULL) {
        free(bpack);
        free(work);
        return OZK_NOMEM;
    }
    OZ_PARALLEL(nt)
    {
#if defined(_OPENMP)
        int tid = omp_get_thread_num();
#else
        int tid = 0;
#endif
        int8_t *ap = work + (size_t)tid * per;
        int32_t *ct = (int32_t *)(ap + abytes);
        tiles_on();
        for (ptrdiff_t j0 = 0; j0 < p; j0 += nc_max) {
            ptrdiff_t nc = OZ_MIN(nc_max, p - j0);
            ptrdiff_t nstrip = (nc + 15) / 16, npair = (nstrip + 1) / 2;
            ptrdiff_t ngrp = nblk >= nt ? 1 : OZ_MIN(npair, (nt + nblk - 1) / nblk);
            for (ptrdiff_t k0 = 0; k0 < k; k0 += kc_max) {
                ptrdiff_t kc = OZ_MIN(kc_max, k - k0);
                ptrdiff_t nq = (kc + 63) / 64, kq = nq * 16, stripb = kq * 64;
                int add = !red && (g->beta || k0 > 0);
                OZ_FOR
                for (ptrdiff_t s = 0; s < 2 * npair; s += 4)
                    pack_strips(g->b, j0, nc, s, OZ_MIN(4, 2 * npair - s), k0, kc, kq, stripb,
                                bpack);
                OZ_FOR
                for (ptrdiff_t item = 0; item < nblk * ngrp; item++) {
                    ptrdiff_t ib = item / ngrp, gr = item % ngrp;
                    ptrdiff_t i0 = ib * X_MR, mr = OZ_MIN(X_MR, m - i0);
                    ptrdiff_t s0 = gr * npair / ngrp, s1 = (gr + 1) * npair / ngrp;
                    pack_tiles(g->a, i0, mr, k0, kc, nq, ap);
                    pending pd = {NULL, NULL, 0, 0, 0};
                    for (ptrdiff_t s = s0; s < s1; s++) {
                        ptrdiff_t jj = j0 + 32 * s, nr = OZ_MIN(X_NR, p - jj);
                        const int8_t *b0 = bpack + 2 * s * stripb;
                        if (red) {
                            int32_t *cur = ct + ((s - s0) & 1) * X_MR * X_NR;
                            block_32x32(ap, b0, stripb, nq, cur, X_NR * 4, 0, &pd, red);
                            pending nx = {cur, red->o + i0 * red->o0 + jj * red->o1, mr, nr, 0};
                            pd = nx;
                            continue;
                        }
                        int32_t *c = g->c + i0 * g->cs0 + jj * g->cs1;
                        if (mr == X_MR && nr == X_NR && g->cs1 == 1) {
                            block_32x32(ap, b0, stripb, nq, c, g->cs0 * 4, add, NULL, NULL);
                            continue;
                        }
                        /* an edge block or a strided c: the whole block into ct */
                        block_32x32(ap, b0, stripb, nq, ct, X_NR * 4, 0, NULL, NULL);
                        for (ptrdiff_t r = 0; r < mr; r++)
                            for (ptrdiff_t j = 0; j < nr; j++) {
                                int32_t *o = c + r * g->cs0 + j * g->cs1;
                                int32_t t = ct[r * X_NR + j];
                                /* wrapping int32 sums, as the tiles' */
                                *o = add ? (int32_t)((uint32_t)*o + (uint32_t)t) : t;
                            }
                    }
                    if (pd.ct != NULL)  /* the item's last block */
                        reduce_rows(&pd, red, X_MR);
                }
            }
        }
        _tile_release();
    }
    free(bpack);
    free(work);
    return 0;
}

/* 0: AMX-INT8 usable; 1: the CPU has no AMX-INT8; 2: the OS has not enabled tile state
 * (XCR0); 3: Linux refused the tile data permission (kernel before 5.16). */
static int amx_state = -1;

static int
amx_probe(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        return 1;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))  /* OSXSAVE */
        return 2;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))  /* XTILECFG, XTILEDATA */
        return 2;
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0 ||
        syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bits) != 0 ||
        !(bits & (1ul << XFEATURE_XTILEDATA)))
        return 3;
    return 0;
}

int
k_gemm_amx(ozval *v, int nt)
{
    gemm_args g;
    if (gemm_read_args(v, &g))
        return OZK_BADLAYOUT;
    if (amx_state != 0)
        return OZK_UNIMPLEMENTED;
    return gemm_amx(&g, nt, NULL);
}

/* out = (a @ b.T) mod pf, symmetric, int8 (pow2: pf a power of two), the product's
 * int32 sums reduced from the tiles as each 32 x 32 block ends: no int32 product in
 * memory and no pass over one. The caller keeps |a @ b.T| below 2**31 (the sums wrap as
 * gemm_amx's). out may share memory with b where its column j lies only on b's row j
 * (the Ozaki-II residues written into the dead slot of B's residues, b stored k x p and
 * out m x p on the same rows, m <= k): every panel of b's rows is packed whole before
 * any entry of out in those columns is written, and not read again. OZK_UNIMPLEMENTED
 * past X_KMOD inner indices or without AMX. */
int
k_gemm_amx_mod(ozval *v, int nt)
{
    ptrdiff_t m = OZ_N(0, 0), k = OZ_N(0, 1), p = OZ_N(1, 0);
    if (OZ_N(1, 1) != k || OZ_N(2, 0) != m || OZ_N(2, 1) != p)
        return OZK_BADLAYOUT;
    if (amx_state != 0 || k > X_KMOD)
        return OZK_UNIMPLEMENTED;
    gemm_args g = {{OZ_I8(0), OZ_S(0, 0), OZ_S(0, 1)}, {OZ_I8(1), OZ_S(1, 0), OZ_S(1, 1)},
                   NULL, m, p, k, 0, 0, 0};
    mod_out red = {OZ_I8(2), OZ_S(2, 0), OZ_S(2, 1), v[3].d, v[4].i != 0};
    return gemm_amx(&g, nt, &red);
}

int
k_amx_info(ozval *v, int nt)
{
    (void)nt;
    int64_t *info = OZ_I64(0);
    if (amx_state < 0)
        amx_state = amx_probe();
    info[0] = 1; /* built */
    info[OZ_S(0, 0)] = amx_state;
    return 0;
}

#pragma GCC pop_options

#else /* no AMX build */

int
k_gemm_amx(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_gemm_amx_mod(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_amx_info(ozval *v, int nt)
{
    (void)nt;
    int64_t *info = OZ_I64(0);
    info[0] = 0;
    info[OZ_S(0, 0)] = -1;
    return 0;
}

#endif
