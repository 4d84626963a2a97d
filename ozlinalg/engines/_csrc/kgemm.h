/* What the compiled INT8 GEMMs share (k_gemm16.c on AVX2, k_gemm_amx.c on AMX): their
 * operands, the reading of their arguments and the products with nothing to multiply.
 * Each computes c = a @ b.T (beta 0) or c += a @ b.T (beta 1) for int8 a (m x K),
 * b (p x K) and an int32 c, every one with any strides. */
#ifndef KGEMM_H
#define KGEMM_H

#include "ozk.h"

/* A strided int8 matrix: element (r, q) at p[r * rs + q * ks]. */
typedef struct {
    const int8_t *p;
    ptrdiff_t rs, ks;
} s8mat;

typedef struct {
    s8mat a, b;
    int32_t *c;
    ptrdiff_t m, p, k, cs0, cs1;
    int beta;
} gemm_args;

/* The arguments (a, b, c, beta) of a GEMM kernel into g; OZK_BADLAYOUT where the
 * shapes do not match, else 0. */
static inline int
gemm_read_args(ozval *v, gemm_args *g)
{
    ptrdiff_t m = OZ_N(0, 0), k = OZ_N(0, 1), p = OZ_N(1, 0);
    if (OZ_N(1, 1) != k || OZ_N(2, 0) != m || OZ_N(2, 1) != p)
        return OZK_BADLAYOUT;
    gemm_args r = {{OZ_I8(0), OZ_S(0, 0), OZ_S(0, 1)},
                   {OZ_I8(1), OZ_S(1, 0), OZ_S(1, 1)},
                   OZ_I32(2), m, p, k, OZ_S(2, 0), OZ_S(2, 1), (int)v[3].i};
    *g = r;
    return 0;
}

/* 1 where there is nothing to multiply (an empty c, or k = 0: c = 0 unless beta), with
 * c written; 0 otherwise. */
static inline int
gemm_trivial(const gemm_args *g)
{
    if (g->m <= 0 || g->p <= 0)
        return 1;
    if (g->k > 0)
        return 0;
    if (!g->beta)
        for (ptrdiff_t i = 0; i < g->m; i++)
            for (ptrdiff_t j = 0; j < g->p; j++)
                g->c[i * g->cs0 + j * g->cs1] = 0;
    return 1;
}

#endif
