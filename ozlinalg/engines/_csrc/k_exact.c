/* Exact recomputation of single entries (ozlinalg.ozaki.exactdot). */
#include "kcommon.h"

/* TODO(port): stubs until ported from the numba kernels. */

int
k_exact_dot_limbs(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_exact_digits(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_dot2_nearest(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_gather_cols(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}
