/* Ozaki scheme II: residues, bounds, reduction and the CRT rebuild (ozlinalg.ozaki.crt). */
#include "kcommon.h"

/* TODO(port): stubs until ported from the numba kernels. */

int
k_crt_residues(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_crt_residues_cols(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_group_col_max(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_int_row_max(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_bound_r_min(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_crt_bound(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_crt_reduce(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_crt_combine(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}

int
k_crt_combine_faithful(ozval *v, int nt)
{
    (void)v;
    (void)nt;
    return OZK_UNIMPLEMENTED;
}
