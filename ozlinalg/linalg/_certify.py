"""Certified eigenvalue bounds of a Hermitian matrix at GEMM cost: :func:`certify_eigh`.

Two faithful products (``ozlinalg.matmul(..., accuracy="faithful")``, every entry
within one ulp of the exact product, certified: docs/guarantees.md) and O(n**2)
elementwise work rounded outward (plus one native product that only places the
products' offsets) turn any approximate eigenpairs ``(w, v)`` into rigorous
enclosures of the exact eigenvalues.
"""
from __future__ import annotations

import numpy as np

from .._array import to_numpy
from .._emulable import emulable
from .._matmul import product
from .._options import get_options, resolve
from ..ozaki.faithful import FAITHFUL_METHODS

__all__ = ["certify_eigh"]

_NAME = "ozlinalg.certify_eigh"
#: unit roundoff of float64
_U = 2.0 ** -53
_MAX = np.finfo(np.float64).max
#: The offset added to each column of ``A V`` lies this many bits below the column's
#: largest term magnitude (see the Notes of :func:`certify_eigh`).
OFFSET_BITS = 8


def certify_eigh(a, w, v, *, lower=None):
    """Certified radii ``r`` of the exact eigenvalues of a Hermitian matrix around ``w``.

    Given any approximate eigenvalues `w` and eigenvectors `v` of the Hermitian
    matrix `a` (ozlinalg's, :func:`numpy.linalg.eigh`'s, a float32 solver's, ...),
    returns radii such that, rigorously for the exact matrix given in floating point:

    (a) every eigenvalue of `a` lies in the union of the intervals
        ``[w[i] - r[i], w[i] + r[i]]``, and
    (b) every interval ``[w[i] - r[i], w[i] + r[i]]`` contains an eigenvalue of `a`.

    The cost is two faithful products of ``n x (n + 1) x n`` on the emulated GEMM,
    one native product ``|A| |V|`` and O(n**2) elementwise work.

    Parameters
    ----------
    a : (n, n) array_like
        Real symmetric or complex Hermitian matrix (bool, integer, float16/32/64,
        complex64/128; converted exactly to float64 / complex128). Finite.
    w : (n,) array_like
        Real approximate eigenvalues, in any order (a complex array is accepted only
        when every imaginary part is zero). Finite.
    v : (n, n) array_like
        Approximate eigenvectors, ``v[:, i]`` belonging to ``w[i]``, real or complex,
        finite. They need to be nearly orthonormal: the radii are finite only where
        ``||v^H v - I||_F < 1`` is certified (normalize the columns of a solver that
        does not; the certificate is for the `v` given).
    lower : bool or None, optional
        Which triangle of `a` defines the Hermitian matrix: ``True`` the lower,
        ``False`` the upper (the other triangle is not read, and, as in LAPACK, the
        imaginary parts of the diagonal are taken as zero). ``None`` (the default):
        `a` must be exactly Hermitian (``a == a.conj().T`` bit for bit).

    Returns
    -------
    r : (n,) ndarray of float64
        Nonnegative radii, ``+inf`` where nothing can be certified (see Notes). The
        intervals are the exact real intervals: round outward if you form their
        endpoints in floating point.

    Raises
    ------
    ValueError
        `a` not 2-D square, `w` not of shape ``(n,)``, `v` not of shape ``(n, n)``,
        non-finite entries, a `w` with a nonzero imaginary part, an integer entry that
        float64 cannot hold exactly, `lower` not ``None`` / ``True`` / ``False``, or,
        with ``lower=None``, an `a` that is not exactly Hermitian.
    TypeError
        A dtype the emulation does not take (long double, non-numeric).

    Notes
    -----
    *Method.* With ``W = diag(w)``, the residual ``R = A V - V W`` and the departure
    from orthonormality ``G = V^H V - I`` are bounded entry by entry from two faithful
    products (complex: each real part of each entry is ONE certified real product,
    the 4M scheme of the faithful mode), each with one extra inner term:

        ``P = [A, c 1] [V; g^T] = A V + c 1 g^T``, ``Y = [V^H, 1] [V; 1^T] = V^H V + J``

    (complex: the extra rows are ``(1 + i) g^T`` and ``(1 + i) 1^T``, so that both
    real parts get the offset). The offsets keep the certificate cheap: a faithful
    entry is certified against its OWN magnitude, and the entries of ``V^H V`` off
    the diagonal (and of ``A V`` in the columns of eigenvalues far below ``||A||``)
    cancel to far below their terms, so without an offset nearly all of them would
    be recomputed exactly (measured: every off-diagonal entry of ``V^H V``, about 20x
    the cost of the product at n = 256). With it each entry is about as large as its
    terms and is certified to within ``ulp`` of the offset, which costs no accuracy
    here: ``c`` is a power of two of the size of `a`'s entries, and ``o_j = c g_j``
    the power of two ``2**-8`` below ``max_i (|A| |V|)_ij`` (a native estimate; the
    proof takes ``c`` and ``g`` as the floats they are), so its ulp is ``2**-7 u``
    of the terms, far below the rounding errors in any computed eigenvector's
    residual; ``J`` adds at most ``ulp(1)`` to ``G``, which moves the radii by a
    factor ``1 + O(n u)``.
    For each real part of ``R`` (``p`` the faithful entry of ``P``):

        ``|R_ij| <= |d| + ulp(d) + ulp(p) + ulp(t) + ulp(tv) + ulp(o_j)``,
        ``tv = fl(v_ij w_j)``, ``t = fl(tv + o_j)``, ``d = fl(p - t)``,

    since faithfulness gives ``|p - P_ij| <= ulp(p)`` (``ulp(x)``: the gap from ``|x|``
    to the next larger float, ``2**-1074`` at zero, which also covers the underflow
    of a product, and of ``o_j = fl(c g_j)``, exact but where it underflows) and each
    rounding to nearest errs by at most half an ulp of its result. ``G`` likewise,
    from ``y - J - I`` (exact subtrahends); and ``||V e_i||_2**2 = Y_ii - 1 >=
    y_ii - ulp(y_ii) - 1``. Every later operation is
    rounded outward: each result is moved one float up (``numpy.nextafter`` toward
    ``+inf``) or down, which bounds one rounding to nearest. The Frobenius norms are
    sums of ``N`` nonnegative squares scaled by a power of two, multiplied by
    ``1 + 2 N u`` (``u = 2**-53``; at least ``1 / (1 - gamma_(N-1))``, the error of a
    floating-point sum in any order), then rounded up: ``rho_R >= ||R||_F`` and
    ``eps >= ||G||_F``.

    *Uniform radius.* If ``eps >= 1``, nothing is certified and every radius is
    ``+inf`` (`v` may be singular). Otherwise ``||G||_2 <= eps`` gives
    ``sigma_min(V)**2 = lambda_min(I + G) >= 1 - eps``, so `v` is invertible and
    ``V^-1 A V = W + E`` with ``E = V^-1 R``, ``||E||_2 <= rho = rho_R / sqrt(1 - eps)``
    (rounded up). (a): by Bauer-Fike for the normal ``W``, every eigenvalue of ``A``
    lies within ``||E||_2 <= rho`` of some ``w_i``. (b): for Hermitian ``A``, any
    ``x != 0`` and real ``t``, ``min_j |lambda_j - t| <= ||A x - t x||_2 / ||x||_2``
    (expand ``x`` in an orthonormal eigenbasis); with ``x = V e_i``, ``t = w_i``:
    ``||R e_i||_2 / ||V e_i||_2 <= ||R||_F / sqrt(1 - |G_ii|) <= rho``. So ``r_i = rho``
    satisfies (a) and (b).

    *Sharper radii for isolated intervals (proved).* Let ``b_i`` be an upper bound of
    ``||R e_i||_2 / ||V e_i||_2`` (the column norm of the bounds of ``R``, divided by a
    lower bound of ``sqrt(Y_ii - 1)``); ``[w_i - b_i, w_i + b_i]`` contains an eigenvalue
    (the Rayleigh bound above). Counting: for ``s`` in ``[0, 1]`` every eigenvalue of
    ``W + s E`` lies in the union ``U`` of the closed disks of radius ``rho`` around the
    ``w_j`` (Bauer-Fike again). The eigenvalues depend continuously on ``s`` and the
    connected components of ``U`` are at positive distances, so each component holds
    the same number of eigenvalues for every ``s``: at ``s = 0``, the number of centers
    in it. At ``s = 1`` the eigenvalues are ``A``'s, real; a component of disks of one
    radius centered on the real line meets it in a component of the intervals
    ``[w_j - rho, w_j + rho]``. If the interval of ``i`` is isolated (``|w_j - w_i| >
    2 rho`` for all ``j != i``, tested with the differences rounded down), it holds
    exactly one eigenvalue ``lambda`` of ``A``, simple. If ``b_i <= rho`` the eigenvalue
    within ``b_i`` of ``w_i`` lies in that interval, so it is ``lambda``, and replacing
    the interval by ``[w_i - b_i, w_i + b_i]`` keeps (a) (``lambda`` was the only
    eigenvalue it had to cover) and (b). So ``r_i = min(rho, b_i)`` where the interval
    is isolated, ``rho`` elsewhere; each isolated radius is shrunk against the uniform
    ``rho``, never against another shrunk one, so the argument applies to all at once.
    For well-separated spectra this gains about ``sqrt(n)`` over ``rho``.

    *Scope.* The exact matrix is the one `a` holds (or its triangle); `w` and `v` are
    taken exactly as given. A product entry at the float64 limit (``|p| = max``,
    where faithfulness bounds nothing) or an overflow in the bounds gives ``+inf``
    radii. The faithful products use the method in force
    (:func:`ozlinalg.options`) when it has a faithful mode, ``"hybrid-ef"``
    otherwise. Inputs are never modified.

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> a = np.array([[2., 1., 0.], [1., 2., 0.], [0., 0., -4.]])
    >>> w, v = np.linalg.eigh(a)
    >>> r = ozlinalg.certify_eigh(a, w, v)
    >>> bool(np.all(r < 1e-14))
    True
    >>> bool(np.all(np.abs(w - np.array([-4., 1., 3.])) <= r))  # the exact eigenvalues
    True
    >>> w32, v32 = np.linalg.eigh(a.astype(np.float32))  # float32 pairs, as given
    >>> bool(np.all(ozlinalg.certify_eigh(a, w32, v32) < 1e-5))
    True
    """
    a, w, v = _validated(a, w, v, lower)
    n = w.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.float64)
    unknown = np.full(n, np.inf)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        bounds = _entry_bounds_of(a, w, v)
        if bounds is None:
            return unknown
        rb, gb, vn2 = bounds
        eps = _norm_up(gb)
        if not eps < 1.0:
            return unknown
        smin = _down(np.sqrt(_down(1.0 - eps)))
        rho = _up(_norm_up(rb) / smin)
        if not (smin > 0.0 and np.isfinite(rho)):
            return unknown
        # per column: ||R e_i|| / ||V e_i||
        vn = _down(np.sqrt(vn2))
        col = np.where(vn > 0.0, _up(_norm_up(rb, axis=0) / vn), np.inf)
        isolated = _isolated(w, 2.0 * rho)
    return np.where(isolated, np.minimum(rho, col), rho).astype(np.float64)


def _entry_bounds_of(a, w, v):
    """``(rb, gb, vn2)``: upper bounds of the real parts of ``R = A V - V diag(w)``
    (``(parts * n, n)``) and of ``G = V^H V - I``, and lower bounds of
    ``||V e_i||_2**2``, from the two faithful products; None where a product entry
    reaches the float64 limit or a bound overflows."""
    n = w.shape[0]
    opts = get_options()
    plan = resolve(np, opts=opts, accuracy="faithful", balance="auto",
                   method=opts.method if opts.method in FAITHFUL_METHODS else "hybrid-ef")
    unit = 1.0 + 1.0j if a.dtype.kind == "c" or v.dtype.kind == "c" else 1.0
    ones = np.ones((n, 1))
    c, g = _offsets(a, v)
    # P = A V + c 1 g^T and Y = V^H V + J (both real parts), each part of each entry
    # faithful
    p = product(plan, np.concatenate([a, c * ones], axis=1),
                np.concatenate([v, unit * g[None, :]], axis=0))
    y = product(plan, np.concatenate([v.conj().T, ones], axis=1),
                np.concatenate([v, np.full((1, n), unit)], axis=0))
    rb = _residual_bounds(p, v, w, c * g)
    gb = _gram_bounds(y)
    if rb is None or gb is None:
        return None
    yd = y.diagonal().real  # ||V e_i||**2 = Y_ii - 1 exactly
    return rb, gb, np.maximum(_down(_down(yd - _ulp(yd)) - 1.0), 0.0)


# -- validation -------------------------------------------------------------------------


def _exact_float(x, argname):
    """``x`` as float64 / complex128 (exact), or TypeError / ValueError."""
    x = to_numpy(x)
    if not emulable(x.dtype):
        raise TypeError(f"{_NAME}: {argname} has unsupported dtype {x.dtype}")
    if x.dtype.kind in "iu" and x.dtype.itemsize > 4 and x.size:
        # int64 / uint64 beyond 2**53 need not be floats: convert only what is exact
        big = x[(x > 2 ** 53) | ((x < -(2 ** 53)) if x.dtype.kind == "i" else False)]
        if any(int(float(e)) != int(e) for e in big.tolist()):
            raise ValueError(f"{_NAME}: {argname} has integers that float64 cannot hold "
                             "exactly")
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _validated(a, w, v, lower):
    """Float64 / complex128 copies: the Hermitian matrix, real `w`, `v`."""
    if lower is not None and not isinstance(lower, (bool, np.bool_)):
        raise ValueError(f"{_NAME}: lower must be None, True or False, got {lower!r}")
    a, w, v = _exact_float(a, "a"), _exact_float(w, "w"), _exact_float(v, "v")
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{_NAME}: a must be a square 2-D array, got shape {a.shape}")
    n = a.shape[0]
    if w.shape != (n,):
        raise ValueError(f"{_NAME}: w must have shape ({n},) to match a {a.shape}, "
                         f"got {w.shape}")
    if v.shape != (n, n):
        raise ValueError(f"{_NAME}: v must have shape {(n, n)} to match a, got {v.shape}")
    for name, x in (("a", a), ("w", w), ("v", v)):
        if not np.isfinite(x).all():
            raise ValueError(f"{_NAME}: {name} must not contain infs or NaNs")
    if w.dtype.kind == "c":
        if np.any(w.imag != 0):
            raise ValueError(f"{_NAME}: w must be real (it has nonzero imaginary parts)")
        w = np.ascontiguousarray(w.real)
    if lower is None:
        bad = np.argwhere(a != a.conj().T)
        if bad.size:
            i, j = (int(k) for k in bad[0])
            raise ValueError(
                f"{_NAME}: a is not exactly Hermitian (a[{i}, {j}] != conj(a[{j}, {i}])); "
                "pass lower=True or lower=False to take one triangle")
        return a, w, v
    tri, strict = (np.tril(a), np.tril(a, -1)) if lower else (np.triu(a), np.triu(a, 1))
    h = tri + strict.conj().T  # each entry plus an exact zero: exact
    if h.dtype.kind == "c":
        np.fill_diagonal(h, h.diagonal().real)
    return h, w, v


# -- rounding outward -------------------------------------------------------------------


def _up(x):
    """An upper bound of the exact result of ONE operation rounded to nearest, ``x``."""
    return np.nextafter(x, np.inf)


def _down(x):
    """A lower bound of the exact result of ONE operation rounded to nearest, ``x``."""
    return np.nextafter(x, -np.inf)


def _ulp(x):
    """The gap from ``|x|`` to the next larger float (``2**-1074`` at zero): bounds the
    error of a faithful ``x`` and (doubled) of a rounding to nearest that gave ``x``."""
    return np.spacing(np.abs(x))


def _parts(x):
    return (x.real, x.imag) if x.dtype.kind == "c" else (x,)


def _offsets(a, v):
    """``(c, g)``: the extra inner term ``c g_j`` of ``A V``'s column ``j``, powers of
    two: ``c`` of the size of `a`'s entries (so the extra column of ``[A, c]`` keeps
    its rows' scales), ``c g_j`` ``2**-OFFSET_BITS`` below the largest term magnitude
    ``max_i (|A| |V|)_ij`` (a native estimate: the proof takes ``c g_j`` as the float
    it is, and needs nothing of this choice)."""
    e_c = np.frexp(np.max(np.abs(a)))[1] - 1  # 2**e_c <= max|a| (a == 0: 2**-1)
    m = np.max(np.abs(a) @ np.abs(v), axis=0)
    ok = np.isfinite(m) & (m > 0)
    e = np.frexp(np.where(ok, m, 1.0))[1] - OFFSET_BITS - e_c
    return np.ldexp(1.0, e_c), np.where(ok, np.ldexp(1.0, e), 0.0)


def _entry_bounds(p, t, t_ulps=()):
    """Upper bounds of ``|X - T|`` for a faithful ``p`` of ``X`` and a float ``t``
    with ``|T - t| <= sum(t_ulps)``; None where ``p`` reaches the float64 limit (where
    faithfulness bounds nothing) or a bound is not finite."""
    if not np.all(np.abs(p) < _MAX):
        return None
    d = p - t
    b = _up(_up(np.abs(d) + _ulp(d)) + _ulp(p))
    for e in t_ulps:
        b = _up(b + e)
    return b if np.all(np.isfinite(b)) else None


def _residual_bounds(p, v, w, off):
    """``(parts * n, n)`` bounds of the real parts of ``R = A V - V diag(w)``, from
    ``p``, faithful of ``A V + 1 o^T`` in each real part (``o = c g``, exact but where
    it underflows: within ``ulp(off)`` of the float ``off``)."""
    vparts = _parts(v)
    out = []
    for k, pk in enumerate(_parts(p)):
        tv = vparts[k] * w[None, :] if k < len(vparts) else np.zeros_like(pk)
        t = tv + off[None, :]  # |o_j + v_ij w_j - t| <= ulp(t) + ulp(tv) + ulp(off_j)
        b = _entry_bounds(pk, t, (_ulp(t), _ulp(tv), _ulp(off)[None, :]))
        if b is None:
            return None
        out.append(b)
    return np.concatenate(out, axis=0)


def _gram_bounds(y):
    """Bounds of the real parts of ``G = V^H V - I`` from ``y``, faithful of
    ``V^H V + J`` (``J``: ones in each real part)."""
    parts = _parts(y)
    n = y.shape[0]
    out = [_entry_bounds(parts[0], 1.0 + np.eye(n))]
    out += [_entry_bounds(x, np.ones((n, n))) for x in parts[1:]]
    return None if any(b is None for b in out) else np.concatenate(out, axis=0)


def _norm_up(b, axis=None):
    """Upper bound of the 2-norm of the nonnegative finite ``b`` (whole: Frobenius;
    ``axis``: of each slice along it), in any summation order."""
    count = b.size if axis is None else b.shape[axis]
    if count * _U > 0.25:  # never for a matrix that fits in memory
        return np.inf if axis is None else np.full(b.shape[1 - axis], np.inf)
    _, e = np.frexp(np.max(b, axis=axis, keepdims=True))  # max <= 2**e
    x = _up(np.ldexp(b, -e))  # >= b 2**-e, at most 1 + 2u: no overflow, exact squares' sum
    total = np.sum(_up(x * x), axis=axis, keepdims=True)
    total = _up(total * _up(1.0 + 2.0 * count * _U))  # >= total / (1 - gamma_(count-1))
    r = _up(np.ldexp(_up(np.sqrt(total)), e))
    return float(r.reshape(())) if axis is None else r.reshape(-1)


def _isolated(w, two_rho):
    """Whether ``|w_j - w_i| > two_rho`` for every ``j != i`` (differences rounded down,
    so that True is proved)."""
    n = w.shape[0]
    order = np.argsort(w, kind="stable")
    sep = _down(np.diff(w[order])) > two_rho
    iso = np.ones(n, dtype=bool)
    iso[1:] &= sep
    iso[:-1] &= sep
    out = np.empty(n, dtype=bool)
    out[order] = iso
    return out
