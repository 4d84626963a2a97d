/* Magnitude estimates of slices="auto" / moduli="auto" (ozlinalg.ozaki.decide). */
#include "kcommon.h"

/* TODO(port): stubs until ported from the numba kernels. */

int
k_squares_bf16(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_to_float64(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_classify_estimate(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_kept_below(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}
