"""Ozaki scheme II's count decision: ``moduli="auto"``'s count from the exact
``r_ij = q_ij / num_ij**2`` (:mod:`ozlinalg.ozaki.counts.estimate`), decided from the accurate
scaling's bound products W alone where they suffice (:func:`_bound_decision`), and the
check of a fixed count against it (:func:`_fixed_short`, :mod:`ozlinalg.ozaki.counts.adequacy`)."""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from ..._array import fp_errstate, row_blocks, to_numpy
from ..crt.moduli import AUTO_REF_MODULI, MARGIN_BITS, MODULI_RULE, crt_constants
from ..crt.shifts import block_shifts, quiet_fp
from ..passes import generic, passes_for
from .adequacy import count_warning, q_floor, sampled_settles, share_windows
from .estimate import CountPlan, Operands, estimate, moduli_table

__all__ = ["check_fixed", "crt_thresholds", "decide_auto"]


def crt_thresholds(scaling, max_moduli, log2p_ref):
    """``(R_1, ..., R_max)``: ``N`` moduli serve the entries with ``q / num**2 >= R_N``
    (:func:`choose_moduli` read as a threshold on ``2**(-2 rho)``;
    :func:`.decide.moduli_table`)."""
    products = tuple(crt_constants(n).P for n in range(1, int(max_moduli) + 1))
    return moduli_table(MODULI_RULE, scaling, products, log2p_ref)



#: Entries (the smallest lower bounds) evaluated in float64 to bound auto's smallest r
#: from above in :func:`_bound_decision`.
_BOUND_PROBES = 16


def _bound_decision(xp, engine, plan, w_tiles, ca, cb, num, k):
    """``moduli="auto"``'s count index decided from the accurate scaling's bound
    products W alone, or None (the estimate GEMM decides, as before).

    The decision (:class:`ozlinalg.ozaki.counts.estimate.CountPlan`) is a function of the exact
    ``r_ij = q_ij / num_ij**2``, ``q = (X**2)(Y**2)^T``, through its smallest value. W
    bounds it from below with no further GEMM: ``ceil(128 |x|) < 128 |x| + 1`` gives
    ``W_ij - ca_i - cb_j < 2**14 S_ij`` (``S = |X| |Y|^T``, ``ca_i = sum_k ceil(128
    |x_ik|)``, exact integers), and Cauchy-Schwarz ``q_ij >= S_ij**2 / k``. So
    ``r_ij >= L_ij = max(W_ij - ca_i - cb_j, 0)**2 / (2**28 k num_ij**2)`` (rounded
    down). When every ``L_ij`` is at least the native cap (no entry native, none a
    structural zero) and the float64 evaluation of the entries with the smallest
    ``L`` (upper bounds of ``min r``) falls in the same threshold interval as
    ``min L``, that interval holds ``min r``: the count is the one the estimate
    route would reach, bit for bit. Typical of dense operands with a narrow exponent
    range (phi <= 0.5: ``min L`` about 4x below ``min r``, the thresholds 2**11
    apart); wide ranges make ``W``'s rounding slack dominate and fall back."""
    ia, nb, na, ib = num
    # (d * d) * inv_k / (num * num): four roundings and num's own (the same IEEE
    # operations as the plan's weights), far inside the 2**-40 taken off
    inv_k = 2.0**-28 / k * (1.0 - 2.0**-40)
    low = math.inf
    probes = []
    for i0, i1, j0, j1, w in w_tiles:
        if w.size == 0:
            continue
        rmin, rarg = _bound_r_min(xp, engine, w, ca[i0:i1], cb[j0:j1],
                                  (ia[i0:i1], nb[j0:j1], na[i0:i1], ib[j0:j1]), inv_k)
        rmin, rarg = to_numpy(rmin), to_numpy(rarg)
        tile_low = float(rmin.min())
        if not (tile_low >= plan.cap and tile_low > 0):
            return None
        low = min(low, tile_low)
        sel = np.argsort(rmin, kind="stable")[:_BOUND_PROBES]
        probes.append((rmin[sel], sel + i0, rarg[sel] + j0))
    if not probes:
        return None
    vals = np.concatenate([v[0] for v in probes])
    order = np.argsort(vals, kind="stable")[:_BOUND_PROBES]
    rows = np.concatenate([v[1] for v in probes])[order]
    cols = np.concatenate([v[2] for v in probes])[order]
    return plan.decide_from_lower(low, rows, cols)


def decide_auto(blk, rows, bounds, cap, from_bounds):
    """``moduli="auto"``'s ``(n_idx, natives, plan)`` for the inner block ``blk``
    (:mod:`.block`; ``rows``, ``bounds``: its row vectors and bound products) with the
    cap ``cap``. ``from_bounds``: try :func:`_bound_decision` first (the accurate
    scaling's W and digit sums), which often decides with no estimate GEMM."""
    xp, engine, counts = blk.xp, blk.engine, blk.counts
    na, nb = rows.na, rows.nb
    ref = crt_constants(AUTO_REF_MODULI).log2P
    mu, nu = block_shifts(blk, rows, bounds, ref)
    ia = xp.ldexp(xp.ones(mu.shape), (-mu).astype(xp.int32))
    ib = xp.ldexp(xp.ones(nu.shape), (-nu).astype(xp.int32))

    def num(I, J):  # the predicted error's divisor of the entries (I, J)
        I, J = xp.asarray(I), xp.asarray(J)
        return ia[I] * nb[J] + na[I] * ib[J]

    # One count for the whole product, decided exactly from the estimates
    # (ozlinalg.ozaki.counts.estimate): entries no count up to the cap serves (or whose
    # terms normalization lost) are computed natively.
    plan = CountPlan(xp, crt_thresholds(blk.scaling, cap, ref), Operands(xp, blk.a, blk.bt),
                     weights=num)
    n_idx = None
    if from_bounds:
        n_idx = _bound_decision(xp, engine, plan, bounds.view(), bounds.ca, bounds.cb,
                                (ia, nb, na, ib), blk.k)
    if n_idx is not None:
        counts["bound_decided"] = counts.get("bound_decided", 0) + 1
        return n_idx, {}, plan
    for i0, i1 in blk.rtiles:
        xa = blk.normalized("a", i0, i1)
        for j0, j1 in blk.ctiles:
            xb = blk.normalized("b", j0, j1)
            q, scale = estimate(xp, engine, xa, xb)
            plan.add_tile((i0, j0), i0, j0, q, scale, engine=engine,
                          num=(ia[i0:i1], nb[j0:j1], na[i0:i1], ib[j0:j1]))
            del q
            counts["float_gemms"] += 1
    return (*plan.finish(), plan)


def _bound_r_min(xp, engine, w, ca, cb, num, inv_k):
    """``(rmin, rarg)`` per row of a W tile: the smallest lower bound ``L_ij`` of
    :func:`_bound_decision` and its first column (0 where ``L_ij`` has no positive
    value: no divisor in float64's normal range, or no positive ``W_ij - ca_i -
    cb_j``)."""
    return passes_for(engine, xp).bound_r_min(w, ca, cb, num, inv_k)


@generic("bound_r_min")
def bound_r_min_generic(xp, w, ca, cb, num, inv_k):
    """:func:`_bound_r_min` as array code (the engines' fused pass gives its bits)."""
    ia, nb, na, ib = num
    rows = w.shape[0]
    rmin = xp.empty(rows)
    rarg = xp.empty(rows, dtype=xp.int64)
    for r0, r1 in row_blocks(*w.shape):
        with quiet_fp(xp):
            d = w[r0:r1].astype(xp.float64) - ca[r0:r1, None] - cb[None, :]
            n = ia[r0:r1, None] * nb[None, :] + na[r0:r1, None] * ib[None, :]
            nn = n * n
            ok = (d > 0) & (nn >= 2.0**-1000) & (nn < xp.inf)
            v = xp.where(ok, (d * d) * inv_k / xp.where(ok, nn, 1.0), 0.0)
        arg = xp.argmin(v, axis=1)
        rarg[r0:r1] = arg
        rmin[r0:r1] = xp.take_along_axis(v, arg[:, None], axis=1)[:, 0]
    return rmin, rarg



def _fixed_short(scaling, moduli, cap, entries, checks, decide):
    """``(need, natives)`` when the fixed count ``moduli`` falls short of
    ``moduli="auto"``'s decision for this inner block, else None (:mod:`.adequacy`).

    auto's decision is that of the exact ``r_ij = q_ij / num_ij**2``, ``num`` from the
    shifts for the reference count: ``moduli`` serves every entry when ``min r >=
    R_moduli``. ``checks``, cheapest first, each show that from bounds
    (``check(R_moduli)`` True); only when none does does ``decide`` (auto's own
    decision, with the cap ``cap``) run. ``need`` is auto's count (None when every
    entry is native), ``natives`` the number of native entries."""
    threshold = crt_thresholds(scaling, cap, crt_constants(AUTO_REF_MODULI).log2P)[moduli - 1]
    if any(check(threshold) for check in checks):
        return None
    n_idx, natives, _ = decide(cap, False)
    count = sum(int(mask.sum()) for mask in natives.values())
    if n_idx is None:
        return (None, entries) if natives else None
    if n_idx + 1 <= moduli and count == 0:
        return None
    return n_idx + 1, count


def check_fixed(blk, rows, bounds, mu, nu, log2p, max_moduli, verdicts):
    """Append ``(need, natives)`` to ``verdicts`` when the fixed count ``blk.moduli``
    (shifts ``mu``, ``nu`` for ``P = 2**log2p``) falls short of ``moduli="auto"``'s
    decision for the inner block ``blk`` (:func:`_fixed_short`)."""
    moduli = blk.moduli
    short = _fixed_short(blk.scaling, moduli, max(max_moduli, moduli), blk.m * blk.p,
                         _fixed_checks(blk, rows, mu, nu, log2p, bounds.view()),
                         partial(decide_auto, blk, rows, bounds))
    if short is not None:
        verdicts.append(short)


def _fixed_checks(blk, rows, mu, nu, log2p, w_tiles):
    """The bounds that may show a fixed count enough for the inner block ``blk``
    (:mod:`.block`), cheapest first (each a callable of the threshold, True when it
    does): :func:`_r_floor` (no GEMM), :func:`_w_floor` (the accurate scaling: a pass
    over W, ``w_tiles``) and :func:`.adequacy.sampled_settles` (an estimate GEMM over a
    sixteenth of the inner dimension). ``mu``, ``nu``: the fixed count's shifts, for
    ``P = 2**log2p``."""
    xp, engine, a, bt, scaling = blk.xp, blk.engine, blk.a, blk.bt, blk.scaling
    ea, eb, na, nb = rows.ea, rows.eb, rows.na, rows.nb
    k = a.shape[1]
    checks = [lambda t: _r_floor(xp, a, bt, ea, eb, na, nb, mu, nu, log2p, scaling) >= t]
    if scaling == "accurate":
        checks.append(lambda t: _w_floor(xp, engine, w_tiles, na, nb, mu, nu, log2p, k) >= t)
    checks.append(lambda t: sampled_settles(
        xp, engine, a, ea.astype(xp.int32), na > 0, bt, eb.astype(xp.int32), nb > 0,
        share_windows(0, k), t, blk.rtiles, blk.ctiles,
        _ref_divisors(xp, mu, nu, na, nb, log2p, scaling)))
    return checks


def _ref_divisors(xp, mu, nu, na, nb, log2p, scaling):
    """``(ia, nb, na, ib)``: the vectors of auto's divisors ``num_ij = ia_i nb_j +
    na_i ib_j``, ``ia``, ``ib`` upper bounds from the fixed count's shifts
    (:func:`_ref_offsets`), so ``num`` is bounded from above entry by entry."""
    dmu, dnu = _ref_offsets(log2p, scaling)
    ia = xp.ldexp(xp.ones(mu.shape), (-(mu + dmu)).astype(xp.int32))
    ib = xp.ldexp(xp.ones(nu.shape), (-(nu + dnu)).astype(xp.int32))
    return ia, nb, na, ib


#: Slack for the float differences of the shift offsets in :func:`_r_floor`.
_HAIR = 2.0**-20


def _ref_offsets(log2p, scaling):
    """``(dmu, dnu)`` with ``mu' >= mu + dmu`` and ``nu' >= nu + dnu`` for the shifts
    ``mu'``, ``nu'`` of the reference count and ``mu``, ``nu`` of ``P = 2**log2p``
    (:func:`_r_floor`)."""
    ref = crt_constants(AUTO_REF_MODULI).log2P
    if scaling == "fast":
        d = (ref - 1.0 - MARGIN_BITS) / 2.0 - (log2p - 1.0 - MARGIN_BITS) / 2.0
        return math.floor(d - _HAIR), math.floor(d - _HAIR)
    d = (ref - 1.0 + 14.0 - MARGIN_BITS) - (log2p - 1.0 + 14.0 - MARGIN_BITS)
    return (math.floor((d - _HAIR) / 2.0),
            math.floor(d - _HAIR - math.ceil((d + _HAIR) / 2.0)))


def _w_floor(xp, engine, w_tiles, na, nb, mu, nu, log2p, k):
    """A lower bound of ``min r_ij`` from the accurate scaling's bound products W (no
    GEMM; 0 where it has none), as :func:`_bound_decision` bounds it, with upper bounds
    in place of what the fixed count did not compute: ``sum_k ceil(128 |x_ik|) <= 128
    sqrt(k) na_i + k`` (Cauchy-Schwarz) for the digit sums and the shifts of
    :func:`_ref_offsets` for those of the reference count. Rows and columns that are
    zero hold structural zeros only: their slack is ``-inf`` (no bound from them)."""
    root = math.sqrt(k) * (1.0 + 2.0**-40)
    ca = xp.where(na > 0, (128.0 * root) * na * (1.0 + 2.0**-40) + (k + 1.0), -xp.inf)
    cb = xp.where(nb > 0, (128.0 * root) * nb * (1.0 + 2.0**-40) + (k + 1.0), -xp.inf)
    ia, _, _, ib = _ref_divisors(xp, mu, nu, na, nb, log2p, "accurate")
    inv_k = 2.0**-28 / k * (1.0 - 2.0**-40)
    low = math.inf
    for i0, i1, j0, j1, w in w_tiles:
        if w.size == 0:
            continue
        rmin, _ = _bound_r_min(xp, engine, w, ca[i0:i1], cb[j0:j1],
                               (ia[i0:i1], nb[j0:j1], na[i0:i1], ib[j0:j1]), inv_k)
        keep = na[i0:i1] > 0
        if bool(keep.any()):
            low = min(low, float(rmin[keep].min()))
    return low


def _r_floor(xp, a, bt, ea, eb, na, nb, mu, nu, log2p, scaling):
    """A lower bound of ``min r_ij`` over the entries that are not structural zeros
    (``inf`` if all are), from :func:`.adequacy.q_floor` and the fixed count's shifts.

    ``r_ij = q_ij / num_ij**2`` with ``num_ij = 2**-mu'_i nb_j + na_i 2**-nu'_j`` at the
    reference count ``P_ref`` (``mu'``, ``nu'``; ``na``, ``nb`` the row norms). The
    magnitudes are measured against ``2**g_i``, ``g_i >= 0`` the least with
    ``na_i < 2**g_i`` or 0 (row i normalized once more, by about its norm; any
    ``g_i >= 0`` is sound, this one is tight), so that the levels of ``q_floor`` give
    ``q_ij >= 2**(2 g_i + 2 g_j) Lq``, hence ``r_ij >= Lq (2**(g_i + g_j) / num_ij)**2``
    and ``num_ij 2**-(g_i + g_j) <= max(2**-mu'_i - g_i) max(nb_j 2**-g_j) +
    max(na_i 2**-g_i) max(2**-nu'_j - g_j)`` over the rows that are not zero (zero
    rows only make structural zeros): a bound that follows the norms of the rows.
    The shifts ``mu``, ``nu`` for ``P = 2**log2p`` bound ``mu'``, ``nu'``: with ``d``
    the change of the shifts' offset (``log2(P_ref / P)`` for the accurate scaling,
    half of it for the fast one), ``floor(x + d) >= floor(x) + floor(d)`` gives ``mu'
    >= mu + floor(d')`` (``d' = d / 2`` accurate, ``d`` fast) and, the column maxima
    of the accurate scaling growing by at most ``2**ceil(d / 2)``, ``nu' >= nu +
    floor(d - ceil(d / 2))``."""
    nz_a, nz_b = na > 0, nb > 0
    ga = xp.maximum(xp.frexp(na)[1], 0).astype(xp.int32)  # na 2**-g < 1, exactly
    gb = xp.maximum(xp.frexp(nb)[1], 0).astype(xp.int32)
    q = q_floor(xp, a, ea.astype(xp.int32) + ga, nz_a, bt, eb.astype(xp.int32) + gb, nz_b,
                0, a.shape[1])
    if not 0 < q < math.inf:
        return q
    dmu, dnu = _ref_offsets(log2p, scaling)
    # the factors: powers of two, and norms scaled by powers of two (exact)
    a1 = math.ldexp(1.0, -int(float((mu + ga)[nz_a].min())) - dmu)
    b2 = math.ldexp(1.0, -int(float((nu + gb)[nz_b].min())) - dnu)
    b1 = float(xp.ldexp(nb, -gb).max())
    a2 = float(xp.ldexp(na, -ga).max())
    num = (a1 * b1 + a2 * b2) * (1.0 + 2.0**-40)
    with fp_errstate(np, under="ignore", over="ignore"):
        return q / (num * num) * (1.0 - 2.0**-40)



def warn_short(verdicts, moduli, max_moduli, entries, scaling):
    """One warning for the inner blocks whose check found ``moduli`` short:
    ``verdicts`` holds ``(need, natives)`` per such block (``need`` None: every entry
    native)."""
    need = 0
    for n, _ in verdicts:
        need = None if need is None or n is None else max(need, n)
    natives = max(v for _, v in verdicts)
    count_warning(moduli, need, natives, max(max_moduli, moduli), entries, True,
                  "crt-fast" if scaling == "fast" else "crt")

