"""Shared plumbing of the blocked factorizations: validation, defaults, the
GEMM runner (emulated or native), and the thin native-panel layer.

Everything above :class:`Runner` is written once against the array namespace
``xp`` (NumPy or CuPy). The functions named ``native_*`` are the only
device-specific code: on NumPy they call :mod:`scipy.linalg.lapack`; on CuPy
they call cuSOLVER through ``cupy.linalg`` / ``cupyx.scipy.linalg`` (the CuPy
branches are kept to a few lines each and are not exercised by the CPU test
suite).
"""
from __future__ import annotations

import dataclasses as _dataclasses
import functools
import operator
import warnings

import numpy as np
from scipy.linalg import blas as _blas
from scipy.linalg import lapack as _lapack

from .._array import array_namespace
from .._emulable import original  # native panels call the original behind a shim
from .._exceptions import LinAlgError, LinAlgWarning
from .._matmul import product as _product
from .._options import Plan, resolve
from .._profile import record_native_flops

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MIN_SIZE",
]

#: Default panel width (columns factored natively per step). With nb = 128
#: the native panel work of an n = 2048 LU / Cholesky / QR stays below 6% of
#: the flops (see docs/factorizations.md), and the trailing updates are large
#: enough to amortize the splitting of each emulated GEMM.
DEFAULT_BLOCK_SIZE = 128

#: Below this order (``min(m, n)`` of the factored matrix, the triangular
#: order for trsm) the whole call runs in native FP64 LAPACK. See the
#: "Crossover" section of docs/factorizations.md for how it was chosen: on a
#: CPU the emulation is never faster than native DGEMM, so this value is a
#: policy (emulate from moderately large sizes on, so that results do not
#: change character between n = 255 and n = 257 for typical use), not a
#: break-even point. Pass ``min_size=0`` to emulate at every size.
DEFAULT_MIN_SIZE = 256


# --------------------------------------------------------------------------
# validation


def _fname(name):
    return f"ozlinalg.lapack.{name}"


def as_float_matrix(a, fname, argname="a", *, check_finite=True, ndim=(2,), square=False):
    """Validate ``a`` and return ``(xp, a)``; ``a`` keeps its dtype here.

    Real (bool, integer, float up to float64) and complex (complex64,
    complex128) inputs are accepted; the computation is in float64 or
    complex128 (:func:`work_dtype`).
    """
    xp = array_namespace(a)
    if not hasattr(a, "dtype") or not hasattr(a, "ndim"):
        a = xp.asarray(a)
    kind = a.dtype.kind
    if kind not in "biufc" or (kind == "f" and a.dtype.itemsize > 8) \
            or (kind == "c" and a.dtype.itemsize > 16):
        raise TypeError(f"{_fname(fname)}: {argname} has unsupported dtype {a.dtype}")
    if a.ndim not in ndim:
        want = " or ".join(f"{d}-D" for d in ndim)
        raise ValueError(
            f"{_fname(fname)}: expected a {want} array for {argname}, got shape {a.shape}"
        )
    if square and a.shape[0] != a.shape[1]:
        raise ValueError(
            f"{_fname(fname)}: expected a square matrix for {argname}, got shape {a.shape}"
        )
    if check_finite and a.size and not bool(xp.isfinite(a).all()):
        raise ValueError("array must not contain infs or NaNs")
    return xp, a


def is_complex(*arrays):
    """True if any of ``arrays`` has a complex dtype."""
    for x in arrays:
        if x.dtype.kind == "c":
            return True
    return False


def work_dtype(*arrays):
    """The computing dtype of ``arrays`` (NumPy, CuPy or dask arrays): complex128 if
    any is complex, else float64."""
    return np.dtype(np.complex128 if is_complex(*arrays) else np.float64)


def conj_t(x):
    """Conjugate transpose ``x^H`` (the plain transpose view for real ``x``)."""
    return x.conj().T if x.dtype.kind == "c" else x.T


def work_copy(xp, a, overwrite, dtype=None):
    """Working array in ``dtype`` (default :func:`work_dtype` of ``a``): ``a``
    itself when allowed and possible, else a copy.

    Copies are Fortran-ordered (LAPACK's layout: panels are column blocks).
    """
    dtype = work_dtype(a) if dtype is None else dtype
    if (
        overwrite
        and a.dtype == dtype
        and isinstance(a, xp.ndarray)
        and (xp is not np or a.flags.writeable)
    ):
        return a
    if xp is np and a.ndim == 2 and a.size >= BLOCKED_COPY_FROM and not a.flags.f_contiguous:
        # a few rows at a time: NumPy's whole-matrix copy into the other memory order
        # strides across memory (4096 x 4096 C to F: 206 ms on a Zen 2 core, 68 ms so)
        out = np.empty(a.shape, dtype=dtype, order="F")
        for i in range(0, a.shape[0], BLOCKED_COPY_ROWS):
            out[i:i + BLOCKED_COPY_ROWS] = a[i:i + BLOCKED_COPY_ROWS]
        return out
    return xp.array(a, dtype=dtype, order="F", copy=True)


#: :func:`work_copy` copies a NumPy matrix of at least this many entries that is not
#: Fortran-ordered :data:`BLOCKED_COPY_ROWS` rows at a time.
BLOCKED_COPY_FROM = 1 << 16
BLOCKED_COPY_ROWS = 16


def _check_int_option(value, default, minimum, name, fname):
    """``value`` (``default`` if None) as an int >= ``minimum``, or TypeError / ValueError."""
    v = default if value is None else value
    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{_fname(fname)}: {name} must be an integer, got {v!r}") from None
    if v < minimum:
        raise ValueError(f"{_fname(fname)}: {name} must be >= {minimum}, got {v}")
    return v


def check_block_size(block_size, fname, engine=None, order=None):
    """``block_size``, or the default: the `engine`'s (``Engine.block_size``: the panel
    width its trailing updates amortize best; at most a quarter of the matrix
    ``order``, so that small matrices still go through several emulated updates)
    else :data:`DEFAULT_BLOCK_SIZE`."""
    default = DEFAULT_BLOCK_SIZE
    if block_size is None and engine is not None:
        nb = engine.block_size
        if nb:
            default = nb if order is None else min(nb, max(DEFAULT_BLOCK_SIZE, order // 4))
    return _check_int_option(block_size, default, 1, "block_size", fname)


def check_min_size(min_size, fname, crossover=None):
    """``min_size`` (below this order the whole call is native LAPACK), or the default
    :data:`DEFAULT_MIN_SIZE`. ``crossover``: its former name, still accepted with a
    ``DeprecationWarning`` ("crossover" now means only an engine's measured order
    from which emulation is faster, :meth:`ozlinalg.engines.Engine.crossover`)."""
    if crossover is not None:
        if min_size is not None:
            raise TypeError(f"{_fname(fname)}: give min_size, not both min_size and its "
                            "former name crossover")
        warnings.warn(f"{_fname(fname)}: crossover= is now called min_size= (the same "
                      "meaning: below this order the call runs in native LAPACK)",
                      DeprecationWarning, stacklevel=3)
        min_size = crossover
    return _check_int_option(min_size, DEFAULT_MIN_SIZE, 0, "min_size", fname)


def trans_code(trans, fname):
    """0/'N' -> 0, 1/'T' -> 1 (transpose), 2/'C' -> 2 (conjugate transpose;
    the same as 1 for real matrices)."""
    if isinstance(trans, str):
        t = trans.upper()
        if t in ("N", "T", "C"):
            return "NTC".index(t)
    elif trans in (0, 1, 2) and not isinstance(trans, bool):
        return int(trans)
    raise ValueError(f"{_fname(fname)}: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")


def check_side(side, fname):
    if isinstance(side, str) and side.upper() in ("L", "R"):
        return side.upper()
    raise ValueError(f"{_fname(fname)}: side must be 'L' or 'R', got {side!r}")


# --------------------------------------------------------------------------
# GEMM runner

#: Balance the inner dimension of every emulated product by powers of two
#: (:func:`ozlinalg.ozaki.balance.balance_inner`, whatever the size of the
#: imbalance). Measured effect: docs/factorizations.md.
BALANCE_INNER = True

def routine_plan(xp, plan, slices, method, accuracy, fname):
    """The :class:`~ozlinalg._options.Plan` a routine runs under: `plan`, handed down by
    the front door of the call (then `slices`, `method` and `accuracy` are not given),
    else the options in force with those arguments (a direct call of
    :mod:`ozlinalg.lapack`)."""
    if plan is None:
        return resolve(xp, method=method, slices=slices, accuracy=accuracy,
                       fname=_fname(fname))
    if not isinstance(plan, Plan):
        raise TypeError(f"{_fname(fname)}: plan must be an ozlinalg Plan, got "
                        f"{type(plan).__name__}")
    if slices is not None or method is not None or accuracy is not None:
        raise TypeError(f"{_fname(fname)}: give plan= or slices= / method= / accuracy=, "
                        "not both")
    return plan


class Runner:
    """Runs the GEMMs of a blocked algorithm under a plan: emulated, or native FP64.

    ``emulate=False`` is the native path of the CuPy fallback below
    ``min_size`` (the NumPy fallback calls LAPACK directly); its GEMM flops are
    recorded as native so that :func:`ozlinalg.profile` stays truthful. The
    products balance their inner dimension (:data:`BALANCE_INNER`).
    """

    __slots__ = ("xp", "plan", "engine", "emulate")

    def __init__(self, plan, emulate=True):
        self.xp = plan.xp
        self.plan = plan.balanced if BALANCE_INNER else _dataclasses.replace(
            plan, min_shift=None)
        self.engine = plan.engine
        self.emulate = emulate

    def gemm(self, a, b, like=None):
        """``a @ b`` (2-D float64 or complex128); in the memory order of ``like``
        (the array it updates: no transposing pass in ``like -= a @ b``)."""
        if self.emulate:
            order = "F" if like is not None and _column_major(like) else "C"
            return _product(self.plan, a, b, order=order)
        record_native_flops(2.0 * a.shape[0] * a.shape[1] * b.shape[1], "gemm (native path)")
        return self.xp.matmul(a, b)

    @staticmethod
    def native(flops, what):
        record_native_flops(flops, what)


def _column_major(x):
    """True when ``x`` (maybe a view) steps through memory down its columns."""
    return x.ndim == 2 and not x.flags.c_contiguous and (
        x.flags.f_contiguous or abs(x.strides[0]) < abs(x.strides[1]))


# --------------------------------------------------------------------------
# flop counts (LAPACK working notes 41; one multiply-add = 2 flops)


def flops_getrf(m, n):
    k = min(m, n)
    return 2.0 * (m * n * k - (m + n) * k * k / 2.0 + k ** 3 / 3.0)


def flops_potrf(n):
    return n ** 3 / 3.0


def flops_geqrf(m, n):
    if m >= n:
        return 2.0 * m * n * n - 2.0 * n ** 3 / 3.0
    return 2.0 * n * m * m - 2.0 * m ** 3 / 3.0


def flops_trsm(n, nrhs):
    return float(n) * n * nrhs


# --------------------------------------------------------------------------
# native kernels (the device-specific layer)


#: Native calls on fewer entries than this run without the engine's BLAS limit: OpenBLAS
#: runs them on one thread itself (its LAPACK interfaces thread from about 10^4 entries
#: on), so no worker of theirs spins afterwards, and the limit's get / set calls would
#: cost more than the call (tens of microseconds).
NATIVE_LIMIT_FROM = 10_000


def _native(engine, x, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, a native call on ``x`` that shares the cores with the
    `engine`'s GEMMs (:meth:`ozlinalg.engines.base.Engine.native_blas`) from
    :data:`NATIVE_LIMIT_FROM` entries on (an ``engine`` of None: no limit). A plain
    call below: a context manager's entry and exit cost more than a small panel."""
    if engine is None or x.size < NATIVE_LIMIT_FROM:
        return fn(*args, **kwargs)
    with engine.native_blas():
        return fn(*args, **kwargs)


def _lwork(func, *args):
    """Optimal workspace size from a LAPACK workspace query."""
    out = func(*args, lwork=-1)
    work, info = out[-2], out[-1]
    if info != 0:
        raise ValueError(f"internal LAPACK workspace query failed (info={info})")
    return max(1, int(work[0].real))


def native_getrf(xp, a, overwrite=False, engine=None):
    """LU with partial pivoting of the m x b block ``a``.

    Returns ``(lu, piv, info)``: ``piv`` a host int32 array of 0-based
    interchanges, ``info`` the 1-based index of the first exactly-zero
    pivot (0 if none), as in LAPACK. ``a`` is not modified unless
    ``overwrite`` (then LAPACK factors a Fortran-contiguous host ``a`` in
    place and ``lu`` is ``a``).
    """
    if xp is np:
        getrf = _lapack.zgetrf if a.dtype.kind == "c" else _lapack.dgetrf
        lu, piv, info = _native(engine, a, getrf, a, overwrite_a=bool(overwrite))
        if info < 0:
            raise ValueError(f"illegal value in argument {-info} of internal getrf")
        return lu, piv.astype(np.int32, copy=False), int(info)
    from cupyx.scipy.linalg import lu_factor  # cuSOLVER getrf

    lu_factor = original(lu_factor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LinAlgWarning)
        # CuPy 14 reports a zero pivot with a plain RuntimeWarning; info carries it
        # here, as on the CPU path, which never warns.
        warnings.filterwarnings("ignore", "Diagonal number .* is exactly zero", RuntimeWarning)
        lu, piv = lu_factor(a, check_finite=False)
    d = xp.diagonal(lu)
    zero = np.flatnonzero(xp.asnumpy(d == 0))
    return lu, xp.asnumpy(piv).astype(np.int32), int(zero[0]) + 1 if zero.size else 0


def native_potrf(xp, a, lower, engine=None):
    """Cholesky factor of the (small) block ``a``; returns ``(c, info)``.

    Complex ``a``: Hermitian, ``a = L L^H`` / ``U^H U`` (LAPACK ``zpotrf``).
    """
    potrf = _lapack.zpotrf if a.dtype.kind == "c" else _lapack.dpotrf
    if xp is np:
        c, info = _native(engine, a, potrf, a, lower=int(lower), clean=1)
        if info < 0:
            raise ValueError(f"illegal value in argument {-info} of internal potrf")
        return c, int(info)
    # CuPy: the diagonal block is small (b x b); factor it on the host so the
    # failing leading minor is reported exactly as LAPACK does.
    c, info = potrf(xp.asnumpy(a), lower=int(lower), clean=1)
    return xp.asarray(c), int(info)


def native_geqrf(xp, a, engine=None):
    """Householder QR of the block ``a``; returns ``(qr, tau)`` in LAPACK format.

    Complex ``a``: ``H_i = I - tau_i v_i v_i^H`` (LAPACK ``zgeqrf``).
    """
    if xp is np:
        geqrf = _lapack.zgeqrf if a.dtype.kind == "c" else _lapack.dgeqrf
        qr, tau, _, info = _native(engine, a, geqrf, a, lwork=_lwork(geqrf, a))
        if info < 0:
            raise ValueError(f"illegal value in argument {-info} of internal geqrf")
        return qr, tau
    h, tau = xp.linalg.qr(a, mode="raw")  # cuSOLVER geqrf; h is stored transposed
    return h.T, tau


def native_trsm_left(xp, m, b, lower, unit, engine=None):
    """Solve ``m x = b`` for a triangular block ``m`` (a view, maybe transposed).

    BLAS ``trsm`` on the host: no singularity check (a zero on the diagonal
    gives Inf / NaN, as in LAPACK's ``getrs`` / ``potrs``), and never routed
    by a backend block; callers that must raise check the diagonal first.
    """
    if xp is np:
        trsm = _blas.ztrsm if (m.dtype.kind == "c" or b.dtype.kind == "c") else _blas.dtrsm
        return _native(engine, b, trsm, 1.0, m, b, lower=int(lower), diag=int(unit))
    from cupyx.scipy.linalg import solve_triangular

    return original(solve_triangular)(m, b, lower=lower, unit_diagonal=unit,
                                      check_finite=False)


#: Orders up to this one read their triangles through cached masks (:func:`band_masks`):
#: ``np.tril`` / ``np.triu`` build theirs on every call (about 5 us each at order 8).
MASKED_UP_TO = 64


@functools.lru_cache(maxsize=MASKED_UP_TO + 1)
def band_masks(n):
    """Read-only boolean masks of an order-``n`` matrix, by the offset ``d = j - i`` of
    each entry from the diagonal: ``d < 0``, ``d > 0``, ``d < -1``, ``d > 1``, ``d <= 0``,
    ``d >= 0``."""
    i = np.arange(n)
    d = i[None, :] - i[:, None]
    masks = (d < 0, d > 0, d < -1, d > 1, d <= 0, d >= 0)
    for m in masks:
        m.flags.writeable = False
    return masks


def keep_triangle(xp, c, lower, block=256):
    """``c[...] = tril(c)`` (``lower``) or ``triu(c)`` for a square ``c``, in place,
    a column block at a time (``xp.tril`` of the whole matrix builds full-size
    masks and temporaries: 0.4 s at n = 4096, more than the Cholesky's own
    bookkeeping)."""
    n = c.shape[0]
    if xp is np and n <= MASKED_UP_TO:
        c[band_masks(n)[1 if lower else 0]] = 0  # what tril / triu leave there
        return
    for j0 in range(0, n, block):
        j1 = min(n, j0 + block)
        d = c[j0:j1, j0:j1]
        if lower:
            c[:j0, j0:j1] = 0
            d[...] = xp.tril(d)
        else:
            c[j1:, j0:j1] = 0
            d[...] = xp.triu(d)


def first_zero_diagonal(xp, a):
    """0-based index of the first zero on the diagonal of ``a``, or -1."""
    d = xp.diagonal(a)
    if d.size == 0:
        return -1
    zero = d == 0
    if not bool(zero.any()):
        return -1
    return int(xp.argmax(zero))


def raise_not_pd(minor):
    raise LinAlgError(f"{minor}-th leading minor of the array is not positive definite")


def swap_rows(xp, a, piv, offset, cols, engine=None):
    """Apply LAPACK's sequential row interchanges ``i <-> piv[i]`` (0-based, of rows
    ``offset + ...``) to the columns ``cols`` (a slice) of ``a``, in place.

    A column-major NumPy ``a`` goes through LAPACK ``dlaswp`` (column by column:
    contiguous memory), 40x faster there than a fancy-indexed row gather, which
    strides across every column (23 ms per 256 swaps of 3840 columns at n = 4096);
    otherwise the gather.
    """
    blk = a[:, cols]
    if blk.shape[1] == 0 or len(piv) == 0:
        return
    if xp is np and blk.size < NATIVE_LIMIT_FROM:
        # one gather of every row by a Python list: index arrays of the moved rows
        # alone cost more to build than a small block takes to copy
        order = list(range(blk.shape[0]))
        moved = False
        for i, p in enumerate(piv.tolist() if isinstance(piv, np.ndarray) else
                              [int(v) for v in piv]):
            if p != i:
                i, p = i + offset, p + offset
                order[i], order[p] = order[p], order[i]
                moved = True
        if moved:
            blk[...] = blk.take(np.array(order), axis=0)
        return
    # (OpenBLAS's laswp runs on all its threads whatever the size: a small block is
    # gathered instead)
    if (xp is np and blk.flags.f_contiguous and blk.dtype in (np.float64, np.complex128)
            and blk.size >= NATIVE_LIMIT_FROM):
        laswp = _lapack.zlaswp if blk.dtype.kind == "c" else _lapack.dlaswp
        ipiv = np.zeros(offset + len(piv), dtype=np.int32)  # SciPy's wrapper: 0-based
        ipiv[offset:] = np.asarray(piv, dtype=np.int32) + offset
        out = _native(engine, blk, laswp, blk, ipiv, k1=offset, k2=offset + len(piv) - 1,
                      off=0, inc=1, overwrite_a=1)
        # laswp swaps in place or returns a fresh copy: bounds decide (np.shares_memory
        # solves an integer program, milliseconds per call)
        if out is blk or np.may_share_memory(out, blk):
            return
        blk[...] = out
        return
    dst, src = swaps_to_rows(piv, offset)
    if dst.size:
        blk[dst] = blk[src]


def swaps_to_rows(piv, offset=0):
    """Rows that move under LAPACK's sequential interchanges ``piv``.

    Returns ``(dst, src)`` host index arrays such that applying the swaps
    ``i <-> piv[i]`` (in order) to rows ``offset + ...`` equals
    ``rows[dst] = rows[src]``; only rows that actually move are listed.
    """
    # Python ints: a short loop, no per-element NumPy calls
    piv = piv.tolist() if isinstance(piv, np.ndarray) else np.asarray(piv).tolist()
    perm = None
    for i, p in enumerate(piv):
        if p != i:
            if perm is None:
                perm = list(range(max(len(piv), max(piv) + 1)))
            perm[i], perm[p] = perm[p], perm[i]
    if perm is None:  # no row moves (no pivoting was needed)
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
    moved = [i for i, v in enumerate(perm) if v != i]
    src = [perm[i] + offset for i in moved]
    if offset:
        moved = [i + offset for i in moved]
    return np.array(moved, dtype=np.intp), np.array(src, dtype=np.intp)
