/* Shared definitions of the compiled kernels of the CPU INT8 engine.
 *
 * Every kernel has the signature ``int k_<name>(ozval *v, int nt)``: ``v`` holds the
 * arguments in the order of its entry in kernels.def, already checked by the
 * dispatcher (module.c) against the entry's signature, and ``nt`` the number of
 * OpenMP threads of the calling Python thread (``set_threads``). A kernel returns 0,
 * or OZK_NOMEM when a scratch allocation failed (the dispatcher raises MemoryError).
 *
 * Bit-identity with the generic NumPy code is the contract: each kernel performs the
 * generic code's IEEE operations per element in the generic order. The build turns off
 * floating-point contraction (-ffp-contract=off) and never enables fast-math, so no
 * compiler, ISA level or thread count changes a bit.
 */
#ifndef OZK_H
#define OZK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OZK_MAXDIM 3
#define OZK_NOMEM (-1)
#define OZK_BADLAYOUT (-2)
#define OZK_UNIMPLEMENTED (-3)

typedef struct {
    char *p;                   /* first element */
    Py_ssize_t n[OZK_MAXDIM];  /* shape */
    Py_ssize_t s[OZK_MAXDIM];  /* strides in ELEMENTS (an axis of length <= 1: 1) */
    int ndim;
    char t;                    /* type code: d f b i l H ? */
} ozarr;

typedef struct {
    ozarr a;
    long long i;
    double d;
} ozval;

typedef int (*ozkernel)(ozval *v, int nt);

/* Typed views of an argument. */
#define OZ_D(k) ((double *)v[k].a.p)
#define OZ_F(k) ((float *)v[k].a.p)
#define OZ_I8(k) ((int8_t *)v[k].a.p)
#define OZ_I32(k) ((int32_t *)v[k].a.p)
#define OZ_I64(k) ((int64_t *)v[k].a.p)
#define OZ_U16(k) ((uint16_t *)v[k].a.p)
#define OZ_B(k) ((uint8_t *)v[k].a.p)
#define OZ_N(k, d) (v[k].a.n[d])
#define OZ_S(k, d) (v[k].a.s[d])

/* A per-row (or per-block) body instantiated for a unit inner stride and for any
 * stride: the compiler specializes the first and vectorizes it. */
#define OZ_INLINE static inline __attribute__((always_inline))

/* OpenMP: a parallel region only when there is more than one thread. */
#if defined(_OPENMP)
#include <omp.h>
#define OZ_PRAGMA(x) _Pragma(#x)
#define OZ_PARALLEL_FOR(nt) OZ_PRAGMA(omp parallel for num_threads(nt) schedule(static) if(nt > 1))
#define OZ_PARALLEL(nt) OZ_PRAGMA(omp parallel num_threads(nt) if(nt > 1))
#define OZ_FOR OZ_PRAGMA(omp for schedule(static))
#else
#define OZ_PARALLEL_FOR(nt)
#define OZ_PARALLEL(nt)
#define OZ_FOR
#endif

/* A failure flag that parallel blocks set (then skip their work). */
#define OZ_FAIL(flag) do { _Pragma("omp atomic write") flag = 1; } while (0)

#define OZ_MIN(a, b) ((a) < (b) ? (a) : (b))
#define OZ_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ozlinalg.exact.MIN_GRID_EXP */
#define OZ_MIN_GRID_EXP (-1000)

#endif
