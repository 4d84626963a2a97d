/* Helpers of the Ozaki-II kernels (k_crt_residues.c: the inputs' residues;
 * k_crt_combine.c: the INT32 products' residues and the rebuild).
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
 */
#ifndef OZK_KCRT_H
#define OZK_KCRT_H
#include "kcommon.h"

/* int8 of an integer-valued double in [-128, 127] (a symmetric residue or a bound).
 * x + 1.5 * 2**52 holds x (|x| < 2**51) in its low mantissa bits, two's complement:
 * its low byte is x. Vectorized, that is one add and one narrowing (vpmovqb), where the
 * cast's double -> int32 -> int8 chain took a conversion and two shuffles a vector. */
OZ_INLINE int8_t
to_i8(double x)
{
    double y = x + 6755399441055744.0;
    int64_t bits;
    memcpy(&bits, &y, sizeof bits);
    return (int8_t)bits;
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

/* The int32 products prod[j * ps] (exact integers: |prod| < 2**31, so exact as doubles)
 * reduced to their symmetric residues mod pf into out[j * os], by the routes above. */
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

#endif
