/* FP64 accumulation of the exact INT8 products (ozlinalg.ozaki.gemm). */
#include "kcommon.h"

/* TODO(port): stubs until ported from the numba kernels. */

int
k_axpy(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_axpy_outer(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_finish_ef(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_scale_outer(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}
