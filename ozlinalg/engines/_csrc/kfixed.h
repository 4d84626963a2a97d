/* Exact sums: the fixed-point sums (ozlinalg.ozaki.counts.estimate._fixed_sum) and the
 * sums of |digits| (ozlinalg.ozaki.faithful.digit_sums), shared by the faithful mode's
 * passes (k_faithful.c) and the Ozaki-II count phase's row statistics
 * (k_crt_residues.c). */
#ifndef OZK_KFIXED_H
#define OZK_KFIXED_H
#include "kcommon.h"

/* ceil(w * 2**40) as int64, w = v * v or |v| (the product rounds once, the scaling is
 * exact). The integer sums wrap as numba's int64 does: they are kept as uint64. Values
 * past the int64 range (w >= 2**23, Inf, NaN: never from the callers' normalized
 * operands) give INT64_MIN, as numba's conversion (cvttsd2si / vcvttpd2qq) does; C
 * leaves that conversion undefined (gcc's inline lceil gives INT64_MIN + 1), so it is
 * spelled out. */
OZ_INLINE uint64_t
fixed_unit(double x, int square)
{
    double w = square ? x * x : fabs(x);
    double c = ceil(w * 0x1p40);
    return c < 0x1p63 ? (uint64_t)(int64_t)c : (uint64_t)INT64_MIN;
}

/* The bits of x. */
OZ_INLINE uint64_t
oz_bits(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

/* fixed_unit by packed integer and float arithmetic at every ISA level (only AVX-512
 * converts float64 to int64 in vectors, and SSE2 has neither a packed ceil nor 64-bit
 * compares), valid for 0 <= y = w 2**40 < 2**51: t = y + 2**52 holds r = rint(y) in its
 * low mantissa bits (t - 2**52 = r exactly), d = y - r is exact, and ceil(y) = r + 1
 * exactly where d > 0, i.e. where 0 - d is negative (0 - 0 is +0). The same integers as
 * fixed_unit's. *bad collects (the sign and exponent bits of y) + 0xBCE, whose bit 12 is
 * set where y >= 2**51, is NaN or negative: the caller then sums with fixed_unit. */
OZ_INLINE uint64_t
fixed_fast(double x, int square, uint64_t *bad)
{
    double w = square ? x * x : fabs(x);
    double y = w * 0x1p40;
    double t = y + 0x1p52;
    double d = y - (t - 0x1p52);
    *bad |= (oz_bits(y) >> 52) + 0xBCE;
    return (oz_bits(t) - UINT64_C(0x4330000000000000)) + (oz_bits(0.0 - d) >> 63);
}

#define OZ_FIXED_BAD(b) ((b) >> 12)

/* At AVX-512, with the packed conversion, in 32 partial sums (independent vector
 * accumulators: integer sums, so any order gives the same value); elsewhere by
 * fixed_fast, and again by fixed_unit where that does not apply. */
OZ_INLINE uint64_t
fixed_row(const double *x, ptrdiff_t s1, ptrdiff_t k, int square)
{
    uint64_t acc = 0;
#if defined(__AVX512DQ__)
    uint64_t part[32] = {0};
    ptrdiff_t k32 = k - k % 32, j;
    for (j = 0; j < k32; j += 32)
        for (int l = 0; l < 32; l++)
            part[l] += fixed_unit(x[(j + l) * s1], square);
    for (; j < k; j++)
        part[0] += fixed_unit(x[j * s1], square);
    for (int l = 0; l < 32; l++)
        acc += part[l];
#else
    uint64_t bad = 0;
    for (ptrdiff_t j = 0; j < k; j++)
        acc += fixed_fast(x[j * s1], square, &bad);
    if (OZ_FIXED_BAD(bad)) {
        acc = 0;
        for (ptrdiff_t j = 0; j < k; j++)
            acc += fixed_unit(x[j * s1], square);
    }
#endif
    return acc;
}

/* Digits summed in int32 before the int64 total: 2**16 of them stay below 2**23. */
#define OZ_DIGIT_RUN 65536

/* sum |d[j * s1]| over j < k (exact). */
OZ_INLINE int64_t
abs_digit_sum(const int8_t *d, ptrdiff_t s1, ptrdiff_t k)
{
    int64_t total = 0;
    for (ptrdiff_t j0 = 0; j0 < k; j0 += OZ_DIGIT_RUN) {
        ptrdiff_t j1 = OZ_MIN(k, j0 + OZ_DIGIT_RUN);
        int32_t part = 0;
        for (ptrdiff_t j = j0; j < j1; j++) {
            int32_t x = d[j * s1];
            part += x >= 0 ? x : -x;
        }
        total += part;
    }
    return total;
}

#endif
