"""Complex products (ZGEMM) from real emulated products.

``complex_matmul(real_matmul, a, b, scheme="4m")`` computes ``a @ b`` for
complex (or mixed real/complex) 2-D operands from products of real float64
matrices done by ``real_matmul`` (any callable ``real_matmul(x, y) -> x @ y``
for real float64 2-D arrays: the emulated DGEMM, or ``numpy.matmul``).
With ``A = Ar + i Ai`` and ``B = Br + i Bi``:

``"4m"`` (default): the four real products, formed as ONE real product of
    stacked operands ``[[Ar], [Ai]] @ [[Br, Bi]] = [[ArBr, ArBi], [AiBr, AiBi]]``
    (2m x n times n x 2p, the work of four m x n x p products; each operand
    split once). Rows of Ar and Ai and columns of Br and Bi keep their own
    power-of-two scales, so every product is at DGEMM level against its own
    exact value whatever the relative scale of the parts; then
    ``Cr = ArBr - AiBi`` and ``Ci = ArBi + AiBr`` in FP64 (one rounding each,
    an error bound ``~u (|ArBr| + |AiBi|)`` like native ZGEMM's).
``"4m-fused"``: ``[[Ar, -Ai], [Ai, Ar]] @ [[Br], [Bi]] = [[Cr], [Ci]]``
    (2m x 2n times 2n x p): the sums happen INSIDE the exact emulation, so
    with parts of comparable scale each part of C is nearly correctly
    rounded even under cancellation; but a row ``[Ai, Ar]`` shares one scale,
    so when the parts differ in scale (``Ai = 1e-8 Ar``) the small cross terms
    lose the bits the scale difference spans (the Ozaki-I ``auto`` sees it and
    adds slices; a fixed moduli count does not).
``"3m"`` (Karatsuba / Gauss): three real products
    ``P1 = Ar Br``, ``P2 = Ai Bi``, ``P3 = (Ar + Ai)(Br + Bi)``,
    ``Cr = P1 - P2``, ``Ci = P3 - P1 - P2``: 25% fewer INT8 GEMMs, but the
    imaginary part is a difference of products whose size is
    ``|Ar + Ai| |Br + Bi|``: when ``Ci`` is much smaller than that (parts of
    different scale, or cancellation) its relative error grows by the ratio,
    and ``Ar + Ai``, ``Br + Bi`` are rounded in FP64 before multiplying.

Why 4m is the default (measured, ``tests/ozaki/test_complex.py``, 40 x 300 x 30,
phi = 1, exact reference per part): with parts of equal scale all schemes are
at or below native ZGEMM's max error; with ``Ai = 1e-8 Ar`` and
``Bi = 1e-8 Br`` the imaginary part's max relative error is ~1e-5 for 3m
(native ZGEMM: ~1e-12; NumPy's own 3m: ~1e-4), ~5e-10 for 4m-fused with 18
CRT moduli, and DGEMM level for 4m. 3m is offered for speed when the caller
knows the parts are comparable.

Mixed operands: a real ``a`` times complex ``b`` is ``a @ [Br, Bi]`` (one
product of twice the width); complex ``a`` times real ``b`` is
``[Ar; Ai] @ b``. Both real: one real product, returned as complex128.

The functions are written against the array namespace of the inputs (NumPy
or CuPy).
"""
from __future__ import annotations

from .._array import array_namespace

__all__ = ["complex_matmul", "COMPLEX_SCHEMES"]

COMPLEX_SCHEMES = ("4m", "4m-fused", "3m")


def _parts(xp, x):
    if x.dtype.kind == "c":
        return xp.ascontiguousarray(x.real, dtype=xp.float64), \
            xp.ascontiguousarray(x.imag, dtype=xp.float64), True
    return x.astype(xp.float64, copy=False), None, False


def _combine(xp, cr, ci):
    out = xp.empty(cr.shape, dtype=xp.complex128)
    out.real = cr
    out.imag = ci
    return out


def complex_matmul(real_matmul, a, b, scheme="4m"):
    """``a @ b`` for complex 2-D operands from real float64 products.

    Parameters
    ----------
    real_matmul : callable
        ``real_matmul(x, y)`` returns ``x @ y`` for real float64 2-D arrays
        (the emulated DGEMM, e.g. ``lambda x, y: ozlinalg.matmul(x, y)``).
    a, b : arrays (NumPy or CuPy), 2-D, shapes (m, n) and (n, p)
        Complex or real; at least one is usually complex.
    scheme : {"4m", "4m-fused", "3m"}
        ``"4m"`` (default): the four real products as one real product of
        stacked operands (rows [Ar; Ai], columns [Br, Bi]), each at DGEMM
        level. ``"4m-fused"``: sums inside one product of inner length 2n.
        ``"3m"``: Karatsuba's three products, 25% cheaper, less accurate when
        the real and imaginary parts differ in scale (see the module doc).

    Returns
    -------
    c : complex128 array, shape (m, p)
    """
    if scheme not in COMPLEX_SCHEMES:
        raise ValueError(
            f"ozlinalg: complex scheme must be one of {', '.join(COMPLEX_SCHEMES)}, got {scheme!r}"
        )
    xp = array_namespace(a, b)
    a = xp.asarray(a)
    b = xp.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("ozlinalg: complex_matmul takes 2-D operands")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"ozlinalg: inner dimensions differ: a has shape {a.shape}, b has shape {b.shape}"
        )
    m, n = a.shape
    p = b.shape[1]
    ar, ai, a_cplx = _parts(xp, a)
    br, bi, b_cplx = _parts(xp, b)
    if not a_cplx and not b_cplx:
        return real_matmul(ar, br).astype(xp.complex128)
    if not a_cplx:
        c = real_matmul(ar, xp.concatenate([br, bi], axis=1))
        return _combine(xp, c[:, :p], c[:, p:])
    if not b_cplx:
        c = real_matmul(xp.concatenate([ar, ai], axis=0), br)
        return _combine(xp, c[:m], c[m:])
    if scheme == "4m":
        c = real_matmul(xp.concatenate([ar, ai], axis=0), xp.concatenate([br, bi], axis=1))
        return _combine(xp, c[:m, :p] - c[m:, p:], c[:m, p:] + c[m:, :p])
    if scheme == "4m-fused":
        big = xp.empty((2 * m, 2 * n))
        big[:m, :n] = ar
        big[:m, n:] = -ai
        big[m:, :n] = ai
        big[m:, n:] = ar
        c = real_matmul(big, xp.concatenate([br, bi], axis=0))
        return _combine(xp, c[:m], c[m:])
    # 3m (Karatsuba / Gauss)
    p1 = real_matmul(ar, br)
    p2 = real_matmul(ai, bi)
    p3 = real_matmul(ar + ai, br + bi)
    return _combine(xp, p1 - p2, p3 - p1 - p2)
