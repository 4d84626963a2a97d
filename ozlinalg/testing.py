"""Test matrices and an exact reference for judging accuracy.

``random_matrix`` draws the papers' inputs ``a_ij = (U(0,1) - 0.5) * exp(phi * N(0,1))``.
``exact_relative_errors`` measures ``|C_hat - C| / |C|`` for every entry against
the EXACT product (integer arithmetic after power-of-two scaling, with
python-flint's ``fmpz_mat`` doing the big-integer matrix product), never
against native DGEMM, which is itself off by up to ~1e-12 on these inputs.
Needs the optional test dependency ``python-flint``.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = [
    "random_matrix", "exact_product", "ExactReference", "exact_relative_errors", "error_stats",
    "textbook_matmul", "dot_error_bound", "exact_solve", "portable_exp",
]


# exp(x) = 2**k exp(r), r = x - k ln 2 (Cody and Waite's two-part ln 2, fdlibm's:
# _LN2_HI has 32 significant bits, so k * _LN2_HI is exact for |k| < 2**21)
_INV_LN2 = 1.44269504088896338700e+00
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_EXP_TAYLOR = tuple(1.0 / math.factorial(j) for j in range(14))  # |r| <= 0.35: 2**-60


def portable_exp(x):
    """``exp(x)`` from float64 additions and multiplications only: the same bits on
    every IEEE machine (within about 2 ulps of the true value).

    NumPy's ``np.exp`` takes a different SIMD implementation per CPU (AVX-512 and
    AVX2 builds differ in the last bit of about 5 % of the results), so inputs made
    with it, and whatever a test asserts about them, would depend on the machine.
    Finite ``x`` with ``|x| < 2**20``; others fall back to ``np.exp``.
    """
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    out = np.empty(flat.shape)
    step = 1 << 14  # blocks that stay in cache through the 30 passes
    for i in range(0, flat.size, step):
        out[i:i + step] = _exp_block(flat[i:i + step])
    return out.reshape(x.shape)


def _exp_block(x):
    ok = np.isfinite(x) & (np.abs(x) < 2.0**20)
    xs = np.where(ok, x, 0.0)
    k = np.rint(xs * _INV_LN2)
    r = xs - k * _LN2_HI
    r -= k * _LN2_LO
    p = np.full_like(r, _EXP_TAYLOR[-1])
    for c in _EXP_TAYLOR[-2::-1]:  # Horner: separate roundings, never fused
        p *= r
        p += c
    with np.errstate(over="ignore"):
        out = np.ldexp(p, k.astype(np.int64))
        return out if ok.all() else np.where(ok, out, np.exp(x))


def random_matrix(rng, m, n, phi=0.5):
    """``(U(0,1) - 0.5) * exp(phi * N(0,1))`` (Ootomo et al., Uchino et al.).

    The same matrix for the same generator state on every machine
    (:func:`portable_exp`, not ``np.exp``).
    """
    return (rng.random((m, n)) - 0.5) * portable_exp(phi * rng.standard_normal((m, n)))


def _int_rows(a):
    """Rows of ``a`` as Python integers times a per-row power of two.

    Returns ``(rows, shifts)`` with ``a[i, k] == rows[i][k] * 2**shifts[i]`` exactly.
    """
    a = np.asarray(a, dtype=np.float64)
    mant, exp = np.frexp(a)
    mint = (mant * 2.0**53).astype(np.int64)  # exact: 53-bit significands
    q = exp.astype(np.int64) - 53
    nz = mint != 0
    big = np.iinfo(np.int64).max
    qmin = np.where(nz, q, big).min(axis=1) if a.shape[1] else np.zeros(a.shape[0], np.int64)
    qmin = np.where(qmin == big, 0, qmin)
    shift = np.where(nz, q - qmin[:, None], 0)
    rows = []
    for mi, si in zip(mint.tolist(), shift.tolist()):
        rows.append([v << s for v, s in zip(mi, si)])
    return rows, qmin.tolist()


def exact_product(a, b):
    """Exact ``a @ b`` as ``(D, ea, eb)`` with ``C[i, j] == D[i][j] * 2**(ea[i] + eb[j])``.

    ``D`` is a list of lists of Python ints. Inputs must be finite.
    """
    import flint  # optional test dependency

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("exact_product: inputs must be finite")
    ra, ea = _int_rows(a)
    rb, eb = _int_rows(b.T)
    m, n = a.shape
    p = b.shape[1]
    if n == 0:
        return [[0] * p for _ in range(m)], ea, eb
    A = flint.fmpz_mat(m, n, [v for row in ra for v in row])
    Bt = flint.fmpz_mat(p, n, [v for row in rb for v in row])
    D = A * Bt.transpose()
    flat = [int(v) for v in D.entries()]
    return [flat[i * p:(i + 1) * p] for i in range(m)], ea, eb


class ExactReference:
    """The exact product of ``a`` and ``b``, computed once, to judge many results.

    The exact product is kept as an unevaluated sum ``hi + lo`` of two float64
    arrays (``hi`` the correctly rounded product, ``lo`` the correctly rounded
    remainder). For a result ``c`` close to ``hi``, ``c - hi`` is exact
    (Sterbenz), so ``|(c - hi) - lo| / |hi + lo|`` is the exact relative error
    up to one rounding of the error itself (a relative 2**-53 of it).

    >>> import numpy as np
    >>> a = np.array([[1.0, 2.0**-60]]); b = np.array([[1.0], [1.0]])
    >>> ref = ExactReference(a, b)
    >>> float(ref.relative_errors(np.array([[1.0]]))[0, 0]) == 2.0**-60
    True
    """

    def __init__(self, a, b):
        from fractions import Fraction

        D, ea, eb = exact_product(a, b)
        m, p = len(D), len(eb)
        self.hi = np.empty((m, p))
        self.lo = np.empty((m, p))
        for i, Di in enumerate(D):
            for j, d in enumerate(Di):
                exact = Fraction(d) * Fraction(2) ** (ea[i] + eb[j])
                try:
                    hi = float(exact)
                except OverflowError:
                    hi = float("inf") if exact > 0 else float("-inf")
                    self.hi[i, j], self.lo[i, j] = hi, 0.0
                    continue
                self.hi[i, j] = hi
                self.lo[i, j] = float(exact - Fraction(hi))

    def relative_errors(self, c):
        """Elementwise ``|c - a@b| / |a@b|`` (0 where both are 0, inf where only a@b is)."""
        c = np.asarray(c, dtype=np.float64)
        if c.shape != self.hi.shape:
            raise ValueError(f"result has shape {c.shape}, the reference {self.hi.shape}")
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            num = np.abs((c - self.hi) - self.lo)
            den = np.abs(self.hi)
            rel = num / den
        zero = den == 0
        rel[zero] = np.where(num[zero] == 0, 0.0, np.inf)
        same_inf = np.isinf(self.hi) & (c == self.hi)
        rel[same_inf] = 0.0
        rel[np.isnan(rel)] = np.inf
        return rel

    def rounded(self):
        """The exact product rounded to the nearest float64."""
        return self.hi.copy()

    def absolute_errors(self, c):
        """Elementwise ``|c - a@b|`` (up to one rounding of the error itself); inf
        where the result is not finite and the exact product is, 0 where both are
        the same infinity."""
        c = np.asarray(c, dtype=np.float64)
        if c.shape != self.hi.shape:
            raise ValueError(f"result has shape {c.shape}, the reference {self.hi.shape}")
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs((c - self.hi) - self.lo)
        err[np.isinf(self.hi) & (c == self.hi)] = 0.0
        err[np.isnan(err)] = np.inf
        return err


def exact_relative_errors(a, b, c):
    """Elementwise ``|c - a@b| / |a@b|`` against the exact product, as float64.

    Entries where the exact product is 0 give 0 if ``c`` is 0 there, else inf.
    """
    return ExactReference(a, b).relative_errors(c)


def error_stats(rel):
    """``(max, median)`` of relative errors (inf propagates)."""
    rel = np.asarray(rel)
    if rel.size == 0:
        return 0.0, 0.0
    return float(rel.max()), float(np.median(rel))


def textbook_matmul(a, b):
    """``a @ b`` for 2-D float64 (or complex128) operands by FP64 recursive summation.

    ``c = a[:, 0] b[0] + a[:, 1] b[1] + ...`` in this order, each product and each
    sum rounded once (separate NumPy multiplies and adds: no FMA, no blocking;
    complex products from their four real products). The result has the same
    bits on every machine, which native DGEMM does not (its error depends on the
    BLAS kernel: the order of the sums, FMA or not). The tests use its error
    against the exact product as the machine-independent "DGEMM level".
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"textbook_matmul: shapes {a.shape} and {b.shape} do not multiply")
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        a = a.astype(np.complex128)
        b = b.astype(np.complex128)
        ar, ai, br, bi = a.real, a.imag, b.real, b.imag
        re = np.zeros((a.shape[0], b.shape[1]))
        im = np.zeros_like(re)
        for k in range(a.shape[1]):
            x, y, u, v = ar[:, k:k + 1], ai[:, k:k + 1], br[k:k + 1], bi[k:k + 1]
            re += np.subtract(x * u, y * v)
            im += np.add(x * v, y * u)
        return re + 1j * im  # exact: adds zero to each part
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    c = np.zeros((a.shape[0], b.shape[1]))
    for k in range(a.shape[1]):
        c += a[:, k:k + 1] * b[k:k + 1]
    return c


def dot_error_bound(a, b):
    """Elementwise bound on ``|fl(a @ b) - a @ b|`` for any FP64 evaluation of the
    dot products, in any order, with or without FMA.

    ``gamma_n (|a| @ |b|)`` with ``gamma_n = n u / (1 - n u)``, ``u = 2**-53``, n
    the inner dimension (Higham, *Accuracy and Stability of Numerical
    Algorithms*, 2nd ed., eq. 3.5; complex operands: ``sqrt(2) gamma_(n+2)``,
    eq. 3.13), plus ``n 2**-1074`` for products that fall below the normal
    range; ``|a| @ |b|`` itself is computed in FP64, so it is enlarged by a
    further ``gamma_n``. A product "at DGEMM level" meets it entry by entry.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    n = a.shape[-1]
    u = 2.0**-53
    cplx = a.dtype.kind == "c" or b.dtype.kind == "c"
    k = n + 2 if cplx else n
    gamma = k * u / (1 - k * u)
    if cplx:
        gamma *= math.sqrt(2.0)
    with np.errstate(over="ignore", invalid="ignore"):
        mag = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    return gamma * (1 + 2 * n * u) * mag + n * 2.0**-1074


def _fmpq_mat(x):
    import flint  # optional test dependency

    rows, cols = x.shape
    return flint.fmpq_mat(rows, cols, [flint.fmpq(*v.as_integer_ratio())
                                       for v in x.ravel().tolist()])


def exact_solve(a, b):
    """The solution of ``a x = b``, exact for the given float entries and correctly
    rounded to float64 (complex128 for complex input).

    Float32 (or integer) inputs are taken at their exact values, so this is the
    reference for a float32 solve too. Rational arithmetic (python-flint's
    ``fmpq_mat``; complex systems as the real system of twice the order): meant
    for orders up to ~100. Raises ``ZeroDivisionError`` where ``a`` is singular.
    """
    from fractions import Fraction

    a = np.asarray(a)
    b = np.asarray(b)
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    n = a.shape[0]
    if a.ndim != 2 or a.shape[1] != n or b2.shape[0] != n:
        raise ValueError(f"exact_solve: shapes {a.shape} and {b.shape} do not match")
    cplx = a.dtype.kind == "c" or b.dtype.kind == "c"
    if cplx:
        a = a.astype(np.complex128)
        b2 = b2.astype(np.complex128)
        a = np.block([[a.real, -a.imag], [a.imag, a.real]])
        b2 = np.vstack([b2.real, b2.imag])
    if not (np.isfinite(a).all() and np.isfinite(b2).all()):
        raise ValueError("exact_solve: inputs must be finite")
    x = _fmpq_mat(np.asarray(a, np.float64)).solve(_fmpq_mat(np.asarray(b2, np.float64)))
    out = np.array([float(Fraction(int(v.p), int(v.q))) for v in x.entries()])
    out = out.reshape(b2.shape)
    if cplx:
        out = out[:n] + 1j * out[n:]
    return out[:, 0] if vec else out
