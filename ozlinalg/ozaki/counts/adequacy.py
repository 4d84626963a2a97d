"""Fixed slice and moduli counts: a side check that warns when the count is too small.

A count the caller fixes (``slices=9``; for the ``crt`` methods a moduli count) is
used as given, whatever the inputs: the result is the emulation with that count,
bit for bit the same with or without this check. But a fixed count may be far
from what the inputs need (columns of A spanning 2**(+-1000) against rows of B
scaled inversely: every entry's terms lie below the slices kept and C comes out
0), and that must not pass silently. So the driver asks, for every fixed-count
product in ``accuracy="dgemm"`` mode, whether ``slices="auto"`` would pick more
for these inputs (or send entries to native FP64, which it does for entries no
count up to ``max_slices`` serves), and if so it emits an
:class:`~ozlinalg.AccuracyWarning` naming auto's count.

What decides it
---------------
``auto``'s decision (:mod:`.decide`) is a function of the exact magnitudes
``q_ij = sum_k x_ik**2 y_jk**2`` of the normalized operands (Ozaki-II: of
``r_ij = q_ij / num_ij**2``): a count ``s`` serves the entries with
``q_ij >= Q_s``. The fixed count ``s`` falls short exactly when some entry that
is not a structural zero has ``q_ij < Q_s``. Deciding that exactly costs the
estimate GEMM of ``auto`` (its measured cost: docs/calibration.md). Rigorous
lower bounds settle the
common case, a count that is enough, for less, cheapest first:

1. :func:`q_floor`, no GEMM: a lower bound of ``min q_ij`` from

   * **a sample of the inner dimension.** ``q_ij >= sum_{k in S} x_ik**2 y_jk**2``
     for any subset S of the inner indices: the bound looks at ``SAMPLE`` of them
     (a few evenly spaced windows), so its cost is ``SAMPLE (m + p)`` element
     operations, not ``k (m + p)``;
   * **magnitude levels.** With ``c_il = #{k in S: |x_ik| < 2**-l}`` (zeros
     included), ``x**2 >= sum_l w_l [|x| >= 2**-l]`` (``w_l = 4**-l - 4**-(l+1)``,
     the last ``4**-L``) and at least ``|S| - c_il - d_jl'`` indices of S where
     both ``|x_ik| >= 2**-l`` and ``|y_jk| >= 2**-l'`` give

         q_ij >= sum_{l, l'} w_l w_l' max(0, |S| - C_l - D_l')

     with ``C_l = max_i c_il`` over the rows of A that are not zero (zero rows only
     make structural zeros), ``D_l'`` the same for B. The levels are read from the
     binary exponents of the sampled entries against each row's maximum (one
     ``frexp`` and a sort of small integers per operand).

   It must assume the worst alignment of small entries against large ones, so it
   settles only counts some slices above auto's. The CRT methods also try the
   accurate scaling's bound products W (:func:`ozlinalg.ozaki.counts.moduli._w_floor`, a
   pass over W).
2. :func:`sampled_settles`: an estimate GEMM over one inner index in ``SHARE``
   (1/16 of auto's GEMM, inner blocks of at least ``SHARE_MIN``), entry by entry,
   with the estimate's error bound (which counts each bound settles, measured:
   docs/calibration.md).
3. Otherwise the exact decision runs: ``auto``'s own plan
   (:func:`ozlinalg.ozaki.counts.slices.plan_auto`, or the ``moduli="auto"`` decision of
   :mod:`.crt`) with the cap raised to the fixed count if it is above
   ``max_slices``, and the warning is emitted only when that plan needs more than
   the fixed count or native entries.

Hence no warning for a count at or above auto's, and no miss: a short count passes
none of the bounds. Counts that are short, or operands that are sparse (the bounds
see no entry where an operand's sample is empty), pay auto's plan.

Faithful mode (``accuracy="faithful"``) does not check: every entry there is
certified by a deterministic bound and the entries it cannot certify are
recomputed exactly, so a small fixed count costs time, never accuracy.
"""
from __future__ import annotations

import math
import os
import sys
import warnings

import numpy as np

from ..._array import fp_errstate, row_blocks, to_numpy
from ..._exceptions import AccuracyWarning
from ..passes import passes_for
from .estimate import _SLACK as _EST_SLACK
from .estimate import EST_ABS, EST_REL, _interval, estimate

__all__ = ["LEVELS", "SAMPLE", "SHARE", "count_warning", "level_counts",
           "q_floor", "row_exponents", "sample_windows", "sampled_settles",
           "share_windows"]

#: Magnitude levels ``2**-1 .. 2**-LEVELS`` below each row's maximum that the bound
#: resolves; entries below the last count as zeros. 64 levels reach ``q`` down to
#: ``2**-256``, the thresholds of counts far beyond any ``max_slices``.
LEVELS = 64

#: Inner indices the bound samples per inner block (all of them for shorter blocks),
#: in ``_WINDOWS`` evenly spaced contiguous windows.
SAMPLE = 64
_WINDOWS = 4

#: Relative slack of the bound's float64 arithmetic (a sum of at most LEVELS**2
#: positive terms, each exact: far below 2**-30).
_SLACK = 2.0**-30

#: The ozlinalg package's directory (ozlinalg/ozaki/counts/ is three levels down):
#: frames below it are the library's, not the caller's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def sample_windows(k0, k1):
    """The inner indices in ``[k0, k1)`` the bound samples, as contiguous windows
    ``[(start, stop), ...]`` (the whole block when it is short)."""
    kb = k1 - k0
    if kb <= SAMPLE:
        return [(k0, k1)]
    width = SAMPLE // _WINDOWS
    starts = np.linspace(0, kb - width, _WINDOWS).astype(np.int64).tolist()
    return [(k0 + s, k0 + s + width) for s in starts]


def row_exponents(xp, x, top=None):
    """``(e, nonzero)``: ``e_i`` with ``max_k |x_ik| < 2**e_i`` (the exponent the
    normalization divides by, :func:`ozlinalg.ozaki.split.normalize_rows`) and the
    rows that are not zero; ``top``: the row maxima of ``|x|`` if already known."""
    if top is None:
        top = (xp.maximum(x.max(axis=1), -x.min(axis=1)) if x.shape[1]
               else xp.zeros(x.shape[0]))
    _, e = xp.frexp(top)
    return e.astype(xp.int32), top > 0


def level_counts(xp, x, e, nonzero, windows):
    """``C_l = max_i #{k in windows: |x_ik| < 2**(e_i - l)}`` for ``l = 1 .. LEVELS``
    over the rows where ``nonzero`` (a host int64 array), or None if there is no such
    row.

    ``e_i`` may exceed row i's exponent (the full row's for a block of it): the
    levels then sit lower against the normalized row and the counts only grow, so
    the bound stays a lower bound."""
    if not bool(nonzero.any()):
        return None
    parts = []
    for k0, k1 in windows:
        mant, ex = xp.frexp(x[:, k0:k1])
        # |x_ik| = |x| 2**-e_i lies in [2**(ex - e_i - 1), 2**(ex - e_i)): it reaches
        # level l (|x| >= 2**-l) when l >= e_i - ex + 1 =: dep + 1. Zeros reach none.
        dep = xp.clip(e[:, None] - ex, 0, LEVELS)  # (0: |x| >= 1/2, every level)
        dep[mant == 0] = LEVELS
        parts.append(dep.astype(xp.int8))
    dep = parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=1)
    dep[~nonzero] = 0  # zero rows: structural zeros only, never the worst row
    # max_i #{k: dep_ik >= l}: with each row sorted, the column maxima t_j of the
    # sorted rows reach l exactly at the positions where some row does
    # (max_i #{dep_i >= l} = #{j: t_j >= l}), so one sort replaces a histogram per row
    # (NumPy: "stable" is a radix sort for int8, several times its default's speed)
    ranked = xp.sort(dep, axis=1, kind="stable") if xp is np else xp.sort(dep, axis=1)
    top = ranked.max(axis=0)
    hist = np.bincount(to_numpy(top).astype(np.int64), minlength=LEVELS + 1)
    return np.cumsum(hist[::-1])[::-1][1:]


def _weights():
    l = np.arange(1, LEVELS + 1, dtype=np.float64)
    w = np.ldexp(3.0, -2 * (l.astype(np.int64) + 1))  # 4**-l - 4**-(l+1), exactly
    w[-1] = 4.0**-LEVELS
    return w


_W = _weights()


def q_floor(xp, a, ea, nz_a, bt, eb, nz_b, k0, k1):
    """Lower bound of ``min q_ij`` over the entries of ``a[:, k0:k1] @ bt[:, k0:k1].T``
    that are not structural zeros (module doc), ``q`` of the rows normalized by
    ``2**e`` (:func:`row_exponents`; exponents of the whole rows are fine for a
    block of them); ``inf`` when either operand has no nonzero row (every entry a
    structural zero)."""
    windows = sample_windows(k0, k1)
    ca = level_counts(xp, a, ea, nz_a, windows)
    if ca is None:
        return math.inf
    cb = level_counts(xp, bt, eb, nz_b, windows)
    if cb is None:
        return math.inf
    size = sum(stop - start for start, stop in windows)
    both = np.maximum(size - ca[:, None] - cb[None, :], 0).astype(np.float64)
    with fp_errstate(np, under="ignore"):
        return float(_W @ both @ _W) * (1.0 - _SLACK)


#: The second bound estimates ``q`` over one inner index in SHARE (windows of
#: ``_WIDE`` contiguous indices): an estimate GEMM 1/SHARE of auto's. Inner blocks
#: shorter than ``SHARE_MIN`` skip it (auto's plan is then not much more).
SHARE = 16
_WIDE = 64
SHARE_MIN = 1024


def share_windows(k0, k1):
    """The inner windows ``[(start, stop), ...]`` in ``[k0, k1)`` that
    :func:`sampled_settles` estimates over, or None for a block shorter than
    ``SHARE_MIN``."""
    kb = k1 - k0
    if kb < SHARE_MIN:
        return None
    count = max(1, kb // (SHARE * _WIDE))
    starts = np.linspace(0, kb - _WIDE, count).astype(np.int64).tolist()
    return [(k0 + s, k0 + s + _WIDE) for s in starts]


def _sampled_rows(xp, x, e, windows):
    """The columns ``windows`` of ``x`` normalized by ``2**e`` per row, a new array,
    as :func:`ozlinalg.ozaki.split.normalize_rows` scales (two exact factors)."""
    part = xp.concatenate([x[:, k0:k1] for k0, k1 in windows], axis=1)
    e1 = xp.clip(-e, -1022, 1000)
    e2 = -e - e1
    with fp_errstate(xp, under="ignore"):
        part *= xp.ldexp(xp.ones(e1.shape), e1)[:, None]
        if bool((e2 != 0).any()):
            part *= xp.ldexp(xp.ones(e2.shape), e2)[:, None]
    return part


def sampled_settles(xp, engine, a, ea, nz_a, bt, eb, nz_b, windows, threshold, row_tiles,
                    col_tiles, num=None):
    """True when every entry that is not a structural zero has ``r_ij >= threshold``,
    shown by an estimate GEMM over the inner ``windows`` only (:func:`share_windows`);
    False when that cannot show it.

    ``q_ij`` over a subset of the inner indices bounds ``q_ij`` from below, entry by
    entry, so the worst-case alignment :func:`q_floor` must assume is gone; the
    estimate's rigorous error bound (:mod:`.decide`: ``EST_REL``, ``EST_ABS``) turns
    it into a lower bound of ``r_ij = q_ij / num_ij**2`` (``num``: upper bounds of the
    divisors as the vectors ``(ia, nb, na, ib)``, or None for ``r = q``). ``row_tiles``
    / ``col_tiles``: ``(start, stop)`` ranges bounding the estimate's size."""
    if windows is None or not 0 < threshold < math.inf:
        return False
    k = sum(k1 - k0 for k0, k1 in windows)
    consts = (None, k * EST_ABS, (1.0 - _EST_SLACK) / (1.0 + EST_REL),
              (1.0 + _EST_SLACK) / (1.0 - EST_REL), _EST_SLACK, threshold)
    for i0, i1 in row_tiles:
        xa = _sampled_rows(xp, a[i0:i1], ea[i0:i1], windows)
        for j0, j1 in col_tiles:
            xb = _sampled_rows(xp, bt[j0:j1], eb[j0:j1], windows)
            q, scale = estimate(xp, engine, xa, xb)
            del xb
            sub = None if num is None else (num[0][i0:i1], num[1][j0:j1], num[2][i0:i1],
                                             num[3][j0:j1])
            if not _tile_settles(xp, engine, q, (1.0 / scale,) + consts[1:], sub,
                                 nz_a[i0:i1], nz_b[j0:j1]):
                return False
    return True


def _tile_settles(xp, engine, q, consts, num, nz_a, nz_b):
    """No entry of an estimate tile outside the zero rows and columns has a lower
    bound below the threshold (``consts[-1]``; the engine's fused classification, 0 =
    kept, where it has one)."""
    classify = passes_for(engine, xp).classify_estimate  # a route: None where none
    done = classify(q, consts, num) if classify is not None else None
    if done is not None:
        bad = done[0] != 0
    else:
        bad = xp.empty(q.shape, dtype=bool)
        for r0, r1 in row_blocks(*q.shape):
            blk = None if num is None else (num[0][r0:r1], num[1], num[2][r0:r1], num[3])
            _, lo, _ = _interval(xp, q[r0:r1], consts, blk)
            bad[r0:r1] = ~(lo >= consts[-1])
    if not (bool(nz_a.all()) and bool(nz_b.all())):  # zero lines: structural zeros
        bad &= nz_a[:, None] & nz_b[None, :]
    return not bool(bad.any())


def _caller_level():
    """``stacklevel`` of :func:`count_warning`'s ``warnings.warn`` that points at the
    first frame outside ozlinalg (the user's call, however deep the driver was)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def count_warning(count, need, natives, cap, entries, crt, method):
    """Emit the :class:`~ozlinalg.AccuracyWarning` for a fixed count ``count`` that
    falls short: ``need`` is auto's count (None when every entry needs native FP64),
    ``natives`` the number of entries no count up to ``cap`` serves."""
    unit = "moduli" if crt else "slices"
    given = f"{count} moduli (slices={count}) are" if crt else f"slices={count} is"
    if need is None:
        what = (f"no count up to {cap} {unit} serves any of its {entries} entries: "
                "slices='auto' computes them in native FP64")
    else:
        what = f"slices='auto' would use {need} {unit}"
        if natives:
            what += (f" and compute {natives} of the {entries} entries in native FP64 (no "
                     f"count up to {cap} {unit} serves them)")
    warnings.warn(
        f"ozlinalg.matmul: {given} too few for DGEMM-level accuracy with method="
        f"{method!r} on these inputs: {what}. The result was computed with {count} "
        f"{unit} as asked and may be inaccurate; pass slices='auto' (or a larger count)",
        AccuracyWarning, stacklevel=_caller_level())
