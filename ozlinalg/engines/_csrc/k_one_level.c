/* One recursion level of the LU, the Cholesky factorization and the triangular solve in
 * one call each (ozlinalg.lapack.compiled_steps).
 *
 * For orders below a few dozen the Python steps of one level (native blocks, their
 * interchanges, triangular solves, one or two emulated products) cost ten times their
 * arithmetic. These kernels run the same steps in the same order on the same
 * primitives, so the results have the Python code's bits:
 *
 *   - LAPACK dgetrf / dpotrf and BLAS dtrsm through the function pointers SciPy
 *     exports (scipy.linalg.cython_lapack / cython_blas: the library SciPy's own
 *     wrappers call), each on a packed copy of its block, as SciPy's wrappers pass them
 *     (leading dimension the block's rows; dpotrf's other triangle zeroed, clean=1);
 *   - LAPACK's sequential row interchanges;
 *   - the emulated products through oz_small_ef (k_small.c), the small-product path that
 *     ozlinalg.ozaki.small takes for them, then c = c - product per entry.
 *
 * Where a product would take another route there (Inf / NaN, an undecided count, a
 * fixed count below auto's: the driver warns), a diagonal block is not positive
 * definite, or memory is short, the kernel stops and reports it in info[1]; the caller
 * then runs the Python steps on a fresh copy. tests/linalg/test_lu_one_level.py and
 * test_one_level_cholesky.py compare both ways bit for bit.
 */
#include "kcommon.h"

typedef void (*oz_getrf_fn)(int *m, int *n, double *a, int *lda, int *ipiv, int *info);
typedef void (*oz_trsm_fn)(char *side, char *uplo, char *transa, char *diag, int *m, int *n,
                           double *alpha, double *a, int *lda, double *b, int *ldb);
typedef void (*oz_potrf_fn)(char *uplo, int *n, double *a, int *lda, int *info);

/* info[1]: oz_small_ef's status (kcommon.h: SMALL_DONE, ...), or one of these */
#define LU_COUNT 5 /* a fixed count below auto's: the Python steps warn */
#define LU_NOT_PD 6 /* a diagonal block is not positive definite: the Python steps raise */

/* dst (rows x cols, column-major, leading dimension rows) = src (strides s0, s1) */
static void
pack(double *dst, const double *src, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t rows,
     ptrdiff_t cols)
{
    for (ptrdiff_t j = 0; j < cols; j++)
        for (ptrdiff_t i = 0; i < rows; i++)
            dst[j * rows + i] = src[i * s0 + j * s1];
}

static void
unpack(double *dst, ptrdiff_t s0, ptrdiff_t s1, const double *src, ptrdiff_t rows,
       ptrdiff_t cols)
{
    for (ptrdiff_t j = 0; j < cols; j++)
        for (ptrdiff_t i = 0; i < rows; i++)
            dst[i * s0 + j * s1] = src[j * rows + i];
}

/* Rows offset + i <-> offset + piv[i] (0-based, in order) of the columns [c0, c1). */
static void
swap_rows(double *a, ptrdiff_t s0, ptrdiff_t s1, const int32_t *piv, ptrdiff_t npiv,
          ptrdiff_t offset, ptrdiff_t c0, ptrdiff_t c1)
{
    for (ptrdiff_t i = 0; i < npiv; i++) {
        ptrdiff_t r = offset + i, q = offset + piv[i];
        if (q == r)
            continue;
        for (ptrdiff_t j = c0; j < c1; j++) {
            double t = a[r * s0 + j * s1];
            a[r * s0 + j * s1] = a[q * s0 + j * s1];
            a[q * s0 + j * s1] = t;
        }
    }
}

/* LAPACK getrf of the rows x cols block at a (strides s0, s1), in place: piv 0-based. */
static int
getrf_block(oz_getrf_fn getrf, double *a, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t rows,
            ptrdiff_t cols, int32_t *piv, double *work)
{
    int m = (int)rows, n = (int)cols, lda = m, info = 0;
    pack(work, a, s0, s1, rows, cols);
    getrf(&m, &n, work, &lda, piv, &info);
    unpack(a, s0, s1, work, rows, cols);
    for (ptrdiff_t i = 0; i < OZ_MIN(rows, cols); i++)
        piv[i] -= 1;
    return info;
}

/* b (q x cols) = t^{-1} b for the q x q triangle t (lower or upper, unit or not). */
static void
trsm_block(oz_trsm_fn trsm, const double *t, ptrdiff_t t0, ptrdiff_t t1, double *b,
           ptrdiff_t b0, ptrdiff_t b1, ptrdiff_t q, ptrdiff_t cols, int lower, int unit,
           double *wt, double *wb)
{
    int m = (int)q, n = (int)cols, ld = m;
    double one = 1.0;
    char side = 'L', uplo = lower ? 'L' : 'U', trans = 'N', diag = unit ? 'U' : 'N';
    pack(wt, t, t0, t1, q, q);
    pack(wb, b, b0, b1, q, cols);
    trsm(&side, &uplo, &trans, &diag, &m, &n, &one, wt, &ld, wb, &ld);
    unpack(b, b0, b1, wb, q, cols);
}

/* LAPACK potrf (lower) of the q x q block at a, in place, the upper triangle zeroed; its
 * info. */
static int
potrf_block(oz_potrf_fn potrf, double *a, ptrdiff_t s0, ptrdiff_t s1, ptrdiff_t q,
            double *work)
{
    int n = (int)q, lda = n, info = 0;
    char uplo = 'L';
    pack(work, a, s0, s1, q, q);
    potrf(&uplo, &n, work, &lda, &info);
    for (ptrdiff_t j = 1; j < q; j++)
        for (ptrdiff_t i = 0; i < j; i++)
            work[j * q + i] = 0.0;
    unpack(a, s0, s1, work, q, q);
    return info;
}

typedef struct {
    int trunc_, width, s_fixed, min_shift;
    const double *T;
    ptrdiff_t nthr, ts;
} small_args;

/* c (r x cols) = c - a (r x q) @ b (q x cols) by the small EF product; its status. */
static int
update(const small_args *sa, double *c, ptrdiff_t c0, ptrdiff_t c1, const double *a,
       ptrdiff_t a0, ptrdiff_t a1, const double *b, ptrdiff_t b0, ptrdiff_t b1, ptrdiff_t r,
       ptrdiff_t q, ptrdiff_t cols, double *out)
{
    int64_t info[3];
    if (oz_small_ef(a, a0, a1, r, q, b, b1, b0, cols, out, 1, r, sa->trunc_, sa->width,
                    sa->s_fixed, sa->T, sa->nthr, sa->ts, sa->min_shift, info, 1, 0))
        return OZK_BADLAYOUT;
    if (info[1] != SMALL_DONE)
        return (int)info[1];
    if (info[2] > info[0])
        return LU_COUNT;
    for (ptrdiff_t j = 0; j < cols; j++)
        for (ptrdiff_t i = 0; i < r; i++)
            c[i * c0 + j * c1] = c[i * c0 + j * c1] - out[j * r + i];
    return SMALL_DONE;
}

/* The kernel's scratch (doubles), or NULL with info[1] = SMALL_NOMEM. */
static double *
scratch(size_t doubles, int64_t *info)
{
    double *w = malloc(sizeof(double) * doubles);
    if (w == NULL)
        info[1] = SMALL_NOMEM;
    return w;
}

/* The kernel's end: scratch freed, the status in info[1]; the dispatcher's code. */
static int
finish(double *work, int64_t *info, int st)
{
    free(work);
    info[1] = st;
    return st == OZK_BADLAYOUT ? st : 0;
}

/* x (n x k) = m^{-1} x for the triangle m (lower or upper, unit or not) split at n1: the
 * leading (lower) or trailing (upper) diagonal block, one coupling product, the other
 * diagonal block (trsm's recursion at one level); its status. work: max(n1, n - n1)^2
 * doubles, wb and out: max(n1, n - n1) k each. */
static int
solve_level(oz_trsm_fn trsm, const small_args *sa, const double *m, ptrdiff_t m0,
            ptrdiff_t m1, ptrdiff_t n, ptrdiff_t n1, double *x, ptrdiff_t x0, ptrdiff_t x1,
            ptrdiff_t k, int lower, int unit, double *work, double *wb, double *out)
{
    ptrdiff_t n2 = n - n1;
    const double *d11 = m, *d22 = m + n1 * m0 + n1 * m1;
    double *top = x, *bottom = x + n1 * x0;
    int st;
    if (lower) {
        trsm_block(trsm, d11, m0, m1, top, x0, x1, n1, k, 1, unit, work, wb);
        st = update(sa, bottom, x0, x1, m + n1 * m0, m0, m1, top, x0, x1, n2, n1, k, out);
        if (st == SMALL_DONE)
            trsm_block(trsm, d22, m0, m1, bottom, x0, x1, n2, k, 1, unit, work, wb);
    } else {
        trsm_block(trsm, d22, m0, m1, bottom, x0, x1, n2, k, 0, unit, work, wb);
        st = update(sa, top, x0, x1, m + n1 * m1, m0, m1, bottom, x0, x1, n1, n2, k, out);
        if (st == SMALL_DONE)
            trsm_block(trsm, d11, m0, m1, top, x0, x1, n1, k, 0, unit, work, wb);
    }
    return st;
}

int
k_lu_one_level_factor(ozval *v, int nt)
{
    (void)nt;
    double *lu = OZ_D(0);
    int32_t *piv = OZ_I32(1);
    ptrdiff_t s = v[2].i, n = OZ_N(0, 0), l0 = OZ_S(0, 0), l1 = OZ_S(0, 1);
    small_args sa = {(int)v[3].i, (int)v[4].i, (int)v[5].i, (int)v[7].i, OZ_D(6),
                     OZ_N(6, 0), OZ_S(6, 0)};
    oz_getrf_fn getrf = (oz_getrf_fn)(uintptr_t)v[8].i;
    oz_trsm_fn trsm = (oz_trsm_fn)(uintptr_t)v[9].i;
    int64_t *info = OZ_I64(10);
    if (OZ_N(0, 1) != n || OZ_N(1, 0) != n || OZ_S(1, 0) != 1 || OZ_N(10, 0) < 2 || s < 1 ||
        s >= n || getrf == NULL || trsm == NULL || sa.nthr < 1)
        return OZK_BADLAYOUT;
    ptrdiff_t r = n - s;
    /* the packed panels and blocks, and the update's product */
    double *work = scratch((size_t)(n * s + s * s + s * r + r * r), info);
    if (work == NULL)
        return 0;
    double *wt = work + n * s, *wb = wt + s * s, *out = wb + s * r;
    int inf1 = getrf_block(getrf, lu, l0, l1, n, s, piv, work);
    swap_rows(lu, l0, l1, piv, s, 0, s, n);
    /* U12 = L11^{-1} A12 */
    trsm_block(trsm, lu, l0, l1, lu + s * l1, l0, l1, s, r, 1, 1, wt, wb);
    int st = update(&sa, lu + s * l0 + s * l1, l0, l1, lu + s * l0, l0, l1, lu + s * l1, l0,
                    l1, r, s, r, out);
    if (st != SMALL_DONE)
        return finish(work, info, st);
    int inf2 = getrf_block(getrf, lu + s * l0 + s * l1, l0, l1, r, r, piv + s, work);
    swap_rows(lu, l0, l1, piv + s, r, s, 0, s);
    for (ptrdiff_t i = s; i < n; i++)
        piv[i] += (int32_t)s;
    info[0] = inf1 ? inf1 : (inf2 ? inf2 + s : 0);
    return finish(work, info, SMALL_DONE);
}

int
k_lu_one_level_solve(ozval *v, int nt)
{
    (void)nt;
    const double *lu = OZ_D(0);
    const int32_t *piv = OZ_I32(1);
    double *x = OZ_D(2);
    ptrdiff_t s = v[3].i, n = OZ_N(0, 0), l0 = OZ_S(0, 0), l1 = OZ_S(0, 1);
    ptrdiff_t k = OZ_N(2, 1), x0 = OZ_S(2, 0), x1 = OZ_S(2, 1);
    small_args lower = {(int)v[4].i, (int)v[5].i, (int)v[7].i, (int)v[10].i, OZ_D(8),
                        OZ_N(8, 0), OZ_S(8, 0)};
    small_args upper = {(int)v[4].i, (int)v[6].i, (int)v[7].i, (int)v[10].i, OZ_D(9),
                        OZ_N(9, 0), OZ_S(9, 0)};
    oz_trsm_fn trsm = (oz_trsm_fn)(uintptr_t)v[11].i;
    int64_t *info = OZ_I64(12);
    ptrdiff_t npiv = OZ_N(1, 0); /* 0: x's rows interchanged already */
    if (OZ_N(0, 1) != n || (npiv != n && npiv != 0) || OZ_S(1, 0) != 1 || OZ_N(2, 0) != n ||
        k < 1 || OZ_N(12, 0) < 2 || s < 1 || s >= n || trsm == NULL || lower.nthr < 1 ||
        upper.nthr < 1)
        return OZK_BADLAYOUT;
    ptrdiff_t q = OZ_MAX(s, n - s);
    double *work = scratch((size_t)(q * q + 2 * q * k), info);
    if (work == NULL)
        return 0;
    double *wb = work + q * q, *out = wb + q * k;
    swap_rows(x, x0, x1, piv, npiv, 0, 0, k);
    int st = solve_level(trsm, &lower, lu, l0, l1, n, s, x, x0, x1, k, 1, 1, work, wb, out);
    if (st == SMALL_DONE)
        st = solve_level(trsm, &upper, lu, l0, l1, n, s, x, x0, x1, k, 0, 0, work, wb, out);
    return finish(work, info, st);
}

/* ozlinalg.lapack.potrf's recursion at one level, on the lower factor's view c (n x n,
 * any strides): L11 = potrf(A11), L21 = A21 L11^{-T} (trsm of L11 on the view A21^T),
 * A22 = A22 - L21 L21^T (the whole block), L22 = potrf(A22); the upper triangles of the
 * diagonal blocks zeroed (the caller zeroes the rest: keep_triangle). */
int
k_potrf_one_level(ozval *v, int nt)
{
    (void)nt;
    double *c = OZ_D(0);
    ptrdiff_t s = v[1].i, n = OZ_N(0, 0), c0 = OZ_S(0, 0), c1 = OZ_S(0, 1);
    small_args sa = {(int)v[2].i, (int)v[3].i, (int)v[4].i, (int)v[6].i, OZ_D(5),
                     OZ_N(5, 0), OZ_S(5, 0)};
    oz_potrf_fn potrf = (oz_potrf_fn)(uintptr_t)v[7].i;
    oz_trsm_fn trsm = (oz_trsm_fn)(uintptr_t)v[8].i;
    int64_t *info = OZ_I64(9);
    if (OZ_N(0, 1) != n || OZ_N(9, 0) < 2 || s < 1 || s >= n || potrf == NULL ||
        trsm == NULL || sa.nthr < 1)
        return OZK_BADLAYOUT;
    ptrdiff_t r = n - s;
    double *work = scratch((size_t)(s * s + s * r + r * r), info);
    if (work == NULL)
        return 0;
    double *wb = work + s * s, *out = wb + s * r;
    int st = SMALL_DONE;
    info[0] = potrf_block(potrf, c, c0, c1, s, work);
    if (info[0] > 0)
        st = LU_NOT_PD;
    if (st == SMALL_DONE) {
        /* A21^T (s x r) is the view at c + s c0 with strides (c1, c0) */
        trsm_block(trsm, c, c0, c1, c + s * c0, c1, c0, s, r, 1, 0, work, wb);
        const double *l21 = c + s * c0;
        st = update(&sa, c + s * c0 + s * c1, c0, c1, l21, c0, c1, l21, c1, c0, r, s, r, out);
    }
    if (st == SMALL_DONE) {
        int inf2 = potrf_block(potrf, c + s * c0 + s * c1, c0, c1, r, work);
        if (inf2 > 0) {
            info[0] = s + inf2;
            st = LU_NOT_PD;
        }
    }
    return finish(work, info, st);
}

/* ozlinalg.lapack.trsm's recursive solve at one level: x (n x k, any strides) =
 * m^{-1} x for the triangle m (n x n, any strides; lower or upper, unit or not) split at
 * n1: the leading (lower) or trailing (upper) diagonal block, one coupling product
 * x_other = x_other - m_coupling x_solved, the other diagonal block. */
int
k_trsm_one_level(ozval *v, int nt)
{
    (void)nt;
    const double *m = OZ_D(0);
    double *x = OZ_D(1);
    ptrdiff_t n1 = v[2].i, n = OZ_N(0, 0), m0 = OZ_S(0, 0), m1 = OZ_S(0, 1);
    ptrdiff_t k = OZ_N(1, 1), x0 = OZ_S(1, 0), x1 = OZ_S(1, 1);
    int lower = (int)v[3].i, unit = (int)v[4].i;
    small_args sa = {(int)v[5].i, (int)v[6].i, (int)v[7].i, (int)v[9].i, OZ_D(8),
                     OZ_N(8, 0), OZ_S(8, 0)};
    oz_trsm_fn trsm = (oz_trsm_fn)(uintptr_t)v[10].i;
    int64_t *info = OZ_I64(11);
    if (OZ_N(0, 1) != n || OZ_N(1, 0) != n || k < 1 || OZ_N(11, 0) < 2 || n1 < 1 ||
        n1 >= n || trsm == NULL || sa.nthr < 1)
        return OZK_BADLAYOUT;
    ptrdiff_t q = OZ_MAX(n1, n - n1);
    double *work = scratch((size_t)(q * q + 2 * q * k), info);
    if (work == NULL)
        return 0;
    double *wb = work + q * q, *out = wb + q * k;
    int st = solve_level(trsm, &sa, m, m0, m1, n, n1, x, x0, x1, k, lower, unit, work, wb,
                         out);
    return finish(work, info, st);
}
