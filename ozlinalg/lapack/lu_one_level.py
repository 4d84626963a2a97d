"""LU and its solve for the orders that the recursion takes in one level.

:func:`~ozlinalg.lapack.getrf` halves the columns down to panels of at most ``nb``.
For ``nb < n <= 2 nb`` that is one level: a native panel, its interchanges, one
triangular solve, one emulated update, a second panel and its interchanges. Its
solve (:func:`~ozlinalg.lapack.getrs`) is two diagonal blocks and one emulated
coupling per triangle. The scipy-compatible namespace factors every order below 256
this way (its block size there is ``ceil(n / 2)``, so that small matrices still have
an emulated update), and at such orders the recursion's bookkeeping (a frame,
slicing and a :class:`~ozlinalg.lapack._common.Runner` per step, a copy and a check
per triangular solve) is a good part of the time: ``getrf`` and ``getrs`` took 236 us
of a 358 us ``solve`` at n = 8 on a Zen 2 core, about 35 us of them this
bookkeeping.

These functions run the same steps in the same order on the same primitives (LAPACK
``getrf`` and BLAS ``trsm`` through ``native_*``, the interchanges through
``swap_rows``, the update through the routine's ``Runner.gemm``), so the results are
the recursion's bit for bit (tests/linalg/test_lu_one_level.py compares them on
every order and shape they take), with none of its set-up.

Where every update takes the one-call small-product path, a square factorization and
its solve run as one compiled call each (:mod:`~ozlinalg.lapack.compiled_steps`): at
n = 8 the Python steps took 39 us (factor) and 38 us (solve) on an AMX Xeon core, the
compiled calls about a tenth of it.
"""
from __future__ import annotations

import numpy as np

from .._profile import active_profiles
from . import compiled_steps
from ._common import (
    NATIVE_LIMIT_FROM,
    flops_getrf,
    flops_trsm,
    native_getrf,
    native_trsm_left,
    swap_rows,
)

__all__ = ["getrf_one_level", "getrs_one_level", "one_level"]


def one_level(m, n, nb):
    """True when the recursive LU of an ``m x n`` matrix (``m >= n``) with panels of at
    most ``nb`` columns is one level: ``nb < n <= 2 nb``."""
    return m >= n and nb < n <= 2 * nb


def _factor_compiled(run, lu, nb, piv):
    """:func:`getrf_one_level` in one compiled call: its info, or None where the kernel
    does not apply or declined (``lu`` and ``piv`` then hold what they held)."""
    m, n = lu.shape
    r = n - nb
    small = m == n and m * nb < NATIVE_LIMIT_FROM
    got = compiled_steps.arguments(run, lu, (r, nb, r)) if small else None
    if got is None:
        return None
    ker, fns, kind, fixed, shift, [(width, thr)] = got
    return compiled_steps.run(ker.lu_one_level_factor, lu, lu, piv, nb, kind, width, fixed,
                              thr, shift, fns["dgetrf"], fns["dtrsm"])


_NO_INTERCHANGES = np.empty(0, np.int32)


def _solve_compiled(run, lu, x, nb, piv):
    """:func:`getrs_one_level` (after ``piv``'s interchanges, if any) in one compiled
    call: True, or False where the kernel does not apply or declined (``x`` then
    unchanged)."""
    n, k = lu.shape[0], x.shape[1]
    r = n - nb
    small = (nb * k < NATIVE_LIMIT_FROM and lu.dtype.char == "d"
             and piv.dtype == np.int32 and piv.flags.c_contiguous)
    got = compiled_steps.arguments(run, x, (r, nb, k), (nb, r, k)) if small else None
    if got is None:
        return False
    ker, fns, kind, fixed, shift, [(w_low, t_low), (w_up, t_up)] = got
    return compiled_steps.run(ker.lu_one_level_solve, x, lu, piv, x, nb, kind, w_low, w_up,
                              fixed, t_low, t_up, shift, fns["dtrsm"]) is not None


def getrf_one_level(run, lu, nb, piv):
    """Factor ``lu`` (``m x n``, :func:`one_level`) in place, writing LAPACK's 0-based
    interchanges into ``piv``; returns LAPACK's info (1-based index of the first
    exactly zero pivot, or 0). The recursion's ``factor(0, n)``: the split is at
    ``nb`` (a multiple of ``nb`` and at least ``nb``)."""
    info = _factor_compiled(run, lu, nb, piv)
    if info is not None:
        return info
    xp, engine = run.xp, run.engine
    m, n = lu.shape
    s = nb
    f, p, info = native_getrf(xp, lu[:, :s], engine=engine)
    lu[:, :s] = f
    piv[:s] = p
    swap_rows(xp, lu, p, 0, slice(s, n), engine=engine)
    # U12 = L11^{-1} A12 (unit lower; the upper part of L11 holds U11, unread)
    lu[:s, s:] = native_trsm_left(xp, lu[:s, :s], lu[:s, s:], True, True, engine=engine)
    lu[s:, s:] -= run.gemm(lu[s:, :s], lu[:s, s:], like=lu)
    f, p, info2 = native_getrf(xp, lu[s:, s:], engine=engine)
    lu[s:, s:] = f
    piv[s:] = p + s
    swap_rows(xp, lu, p, s, slice(0, s), engine=engine)
    # the native work as the recursion records it (one entry per native call), where a
    # profile records it (the counts cost more than a small panel)
    if active_profiles():
        run.native(flops_getrf(m, s), "getrf panel")
        run.native(flops_trsm(s, n - s), "trsm diagonal block")
        run.native(flops_getrf(m - s, n - s), "getrf panel")
    return info or (info2 + s if info2 else 0)


def getrs_one_level(run, lu, x, nb, piv=None):
    """Overwrite the 2-D ``x`` with ``U^{-1} L^{-1} x`` for the factors ``lu`` of order
    ``n`` (``nb < n <= 2 nb``): the recursive triangular solves of
    :func:`~ozlinalg.lapack.trsm` at leaf order ``nb``. ``piv``: LAPACK's 0-based
    interchanges, applied to ``x``'s rows first (None: applied already)."""
    if _solve_compiled(run, lu, x, nb, _NO_INTERCHANGES if piv is None else piv):
        return x
    xp, engine = run.xp, run.engine
    if piv is not None:
        swap_rows(xp, x, piv, 0, slice(None))
    s = nb
    top, bottom = x[:s], x[s:]
    d11, d22 = lu[:s, :s], lu[s:, s:]  # diagonal blocks: L's below, U's above
    top[...] = native_trsm_left(xp, d11, top, True, True, engine=engine)
    bottom -= run.gemm(lu[s:, :s], top, like=x)
    bottom[...] = native_trsm_left(xp, d22, bottom, True, True, engine=engine)
    bottom[...] = native_trsm_left(xp, d22, bottom, False, False, engine=engine)
    top -= run.gemm(lu[:s, s:], bottom, like=x)
    top[...] = native_trsm_left(xp, d11, top, False, False, engine=engine)
    if active_profiles():
        n, k = lu.shape[0], x.shape[1]
        for order in (s, n - s, n - s, s):
            run.native(flops_trsm(order, k), "trsm diagonal block")
    return x

