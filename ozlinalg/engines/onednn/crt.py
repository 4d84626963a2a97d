"""The oneDNN engine's Ozaki-II passes: residues, the accurate scaling's bound and its
exact maxima, the int8 residue accumulator and the CRT combine (kernels: ``k_crt*.c``;
generic code: :mod:`ozlinalg.ozaki.crt`)."""
from __future__ import annotations

import functools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._common import KernelPasses, _col_lines, _is_cols

__all__ = ["CRTPasses"]


class CRTPasses(KernelPasses):
    """``crt_residues``, ``crt_bound``, ``row_stats``, ``bound_r_min``, ``crt_bound_shifts``,
    ``crt_accumulator``: the generic bits."""

    def crt_residues(self, x, mult, round_rows, mods, bits, out):
        """Fused Ozaki-II residues (int8) in ``x``'s memory order; False: generic code."""
        ker = self.kernels
        if ker is None or out.dtype != np.int8 or x.dtype != np.float64:
            return False
        plan = _residue_constants(tuple(int(p) for p in mods), int(bits))
        if plan is None:
            return False
        d, pf, inv, coefs, pow2 = plan
        mult = np.ascontiguousarray(mult, np.float64)
        rnd = np.ascontiguousarray(round_rows, np.bool_)
        ker = self._k(x.size * len(mods))
        if _col_lines(x) and (out.strides[1] == 1 or x.shape[0] <= 1):
            o, slots = _slot_first(out.transpose(0, 2, 1))
            if o is None:
                return False
            ker.crt_residues_cols(x.T, mult, rnd, d, pf, inv, coefs, pow2, o, slots)
            return True
        o, slots = _slot_first(out)
        mid = False
        if o is None:  # the grouped layout: (rows, s, k) storage
            o, slots = _slot_first(out.transpose(1, 0, 2), axis=1)
            mid = True
            if o is None:
                return False
        ker.crt_residues(x, mult, rnd, d, pf, inv, coefs, pow2, o, slots, mid)
        return True

    def crt_bound(self, x, out):
        """``out = -ceil(128 |x|)`` in int8 (Ozaki-II's accurate bound); False: generic."""
        if self.kernels is None or out.dtype != np.int8:
            return False
        ker = self._k(x.size)
        if _is_cols(x) and (out.strides[0] == 1 or x.shape[0] <= 1):
            ker.crt_bound(x.T, out.T)  # elementwise
        else:
            ker.crt_bound(np.ascontiguousarray(x), out)
        return True

    def row_stats(self, a, out, top=None):
        """``ozlinalg.ozaki.crt.shifts.row_stats_generic`` in one pass over the raw rows
        ``a`` (two for column-contiguous rows: their maxima first, unless ``top`` gives
        them), with no normalized copy; None: generic."""
        ker = self.kernels
        if ker is None or a.dtype != np.float64 or a.ndim != 2 or (
                out is not None and (out.dtype != np.int8 or out.shape != a.shape)):
            return None
        rows, k = a.shape
        e = np.empty(rows, np.int32)
        fsq = np.empty(rows)
        dsum = np.empty(rows if out is not None else 0)
        bound = out if out is not None else np.empty((0, 0), np.int8)
        if _col_lines(a):
            top = (np.empty(0) if top is None or top.shape != (rows,)
                   else np.ascontiguousarray(top, np.float64))
            self._k(a.size).row_stats_cols(a.T, e, fsq, bound.T, dsum, top)
        else:
            self._k(a.size).row_stats(a, e, fsq, bound, dsum)
        return e, fsq, (dsum if out is not None else None)

    def bound_r_min(self, w, ca, cb, num, inv_k):
        """``ozlinalg.ozaki.counts.moduli._bound_r_min`` in one pass; None: generic."""
        if self.kernels is None or w.dtype != np.int32 or w.ndim != 2 or \
                not w.flags.c_contiguous:
            return None
        f64 = np.ascontiguousarray
        rows = w.shape[0]
        rmin, rarg = np.empty(rows), np.empty(rows, np.int64)
        self._k(w.size).bound_r_min(w, f64(ca, np.float64), f64(cb, np.float64),
                                    *(f64(v, np.float64) for v in num), float(inv_k),
                                    rmin, rarg)
        return rmin, rarg

    def crt_bound_shifts(self, m, p):
        """A :class:`_BoundShifts` for an m x p product's accurate scaling (None: the
        generic ``log2 W`` tiles)."""
        return None if self.kernels is None else _BoundShifts(self, m, p)

    def crt_accumulator(self, consts):
        """Residues reduced to int8 right after each GEMM, one combine pass at the end."""
        if self.kernels is None:
            return None
        return _FusedCRT(self, consts)


class _FusedCRT:
    """:class:`ozlinalg.ozaki.crt.CRTAccumulator` in two fused kernels: ``add`` reduces
    each INT32 product mod p_t to int8 (1 byte per entry and modulus), ``result``
    rebuilds C' per entry from all residues (the generic operations in the generic
    order)."""

    def __init__(self, engine, consts):
        self.engine, self.consts = engine, consts
        self.res = None
        self.spare = None

    def recycle(self, b):
        """Let the residues live in the memory of ``b`` (the products' right operand,
        slices ``(s, p, k)``), whose slot t is dead once product t is taken: with the
        slots in order in one C-contiguous block and m <= k, the residues of product t
        fit at the start of slot t, and the combine's input needs no memory of its own
        (240 MB at n = 4096, 15 moduli). Where B is stored k x p per slot, row i of
        residue t lies on B's inner index i, so column j of the residues lies on row j
        of B's slot t: the fused GEMM (``int_matmul_mod``) may write them while it
        reads that slot."""
        self.spare = b

    def _storage(self, shape):
        """int8 ``(nmod,) + shape``, at the start of each slot of the spare operand where
        it fits."""
        b, self.spare = self.spare, None
        nmod = len(self.consts.moduli)
        m, p = shape
        if b is not None and b.dtype == np.int8 and b.shape[0] == nmod and \
                m <= b.shape[2] and p == b.shape[1]:
            for view in (b.transpose(0, 2, 1), b):
                o, slots = _slot_first(view)
                if o is not None and np.array_equal(slots, np.arange(nmod)):
                    return as_strided(o, (nmod, m, p), (o.strides[0], p, 1))
        return np.empty((nmod,) + shape, np.int8)

    def product(self, t, a, b):
        """Product t of the slices ``a``, ``b`` reduced mod p_t straight into its
        residues by the engine's fused GEMM (``int_matmul_mod``): True, or False where
        the engine has none or it does not apply (the caller multiplies and
        ``add``s)."""
        fused = getattr(self.engine, "int_matmul_mod", None)
        if fused is None:
            return False
        if self.res is None:
            self.res = self._storage((a.shape[1], b.shape[1]))
        return bool(fused(a, b, t, int(self.consts.moduli[t]), self.res[t]))

    def add(self, t, prod):
        consts = self.consts
        if self.res is None:
            self.res = self._storage(prod.shape)
        p = int(consts.moduli[t])
        if prod.dtype == np.int32 and prod.flags.c_contiguous and _reducible(p):
            self.engine._k(prod.size).crt_reduce(prod, float(p), p & (p - 1) == 0, self.res[t])
        else:
            from ...exact import symmetric_mod  # noqa: PLC0415

            self.res[t] = symmetric_mod(np, prod.astype(np.float64), p)

    def faithful_result(self):
        """``(c, slop)`` as ``CRTAccumulator.faithful_result``, in one fused pass."""
        consts = self.consts
        res, self.res = self.res, None
        from ...exact import LIMB_BITS  # noqa: PLC0415

        nl = len(consts.P_limbs)
        # both internal: the caller certifies and copies them into its result
        out = self.engine.scratch.empty(res.shape[1:], np.float64)
        slop = self.engine.scratch.empty(res.shape[1:], np.float64)
        powers = np.array([2.0 ** (LIMB_BITS * l) for l in range(nl)])
        self.engine._k(res.size).crt_combine_faithful(
            res, *_combine_constants(consts), 2.0**LIMB_BITS, powers,
            2.0**-53 * (1.0 + 2.0**-20), out, slop)
        return out, slop

    def faithful_certify(self, vec, ea, eb, slack):
        """``(c, certified)``: ``faithful_result`` and ``ozlinalg.ozaki.faithful.crt_certify``
        of it in the same fused pass (no slop array; the same values and truth values)."""
        consts = self.consts
        res, self.res = self.res, None
        from ...exact import LIMB_BITS  # noqa: PLC0415

        nl = len(consts.P_limbs)
        out = self.engine.scratch.empty(res.shape[1:], np.float64)
        ok = np.empty(res.shape[1:], np.bool_)
        powers = np.array([2.0 ** (LIMB_BITS * l) for l in range(nl)])
        f64 = np.ascontiguousarray
        self.engine._k(res.size).crt_combine_certify(
            res, *_combine_constants(consts), 2.0**LIMB_BITS, powers,
            2.0**-53 * (1.0 + 2.0**-20), out, f64(vec.pa, np.float64),
            f64(vec.pb, np.float64), f64(vec.ra, np.float64), f64(vec.rb, np.float64),
            f64(vec.za, np.bool_), f64(vec.zb, np.bool_), float(vec.k),
            f64(ea, np.int64), f64(eb, np.int64), float(slack), ok)
        return out, ok

    def result(self):
        consts = self.consts
        res, self.res = self.res, None
        from ...exact import LIMB_BITS  # noqa: PLC0415

        out = _touched(np.empty(res.shape[1:]))
        self.engine._k(res.size).crt_combine(res, *_combine_constants(consts),
                                             2.0**LIMB_BITS, out)
        return out


def _touched(x):
    """``x`` (fresh, C-contiguous) with every page written once from this thread.

    The combine's result is the caller's array (not from the scratch pool), a fresh
    mapping each call. Its first touch inside the two-thread kernel took 35 ms at
    n = 2048 (32 MiB) on the VM this was measured on, against 2 ms for one thread
    writing one element per page before it (then the kernel ran in 7 ms): the
    product went from 220 to 185 ms."""
    flat = x.reshape(-1)
    if flat.nbytes >= (4 << 20):
        flat[::4096 // flat.itemsize] = 0
    return x


def _combine_constants(consts):
    """``(frac, wlimbs, plimbs)`` for the ``crt_combine`` kernel: rows padded with
    zeros to a multiple of four moduli, at least three limb columns."""
    n, nl = len(consts.moduli), len(consts.P_limbs)
    rows = -(-n // 4) * 4
    frac = np.zeros(rows)
    frac[:n] = consts.frac
    wl = np.zeros((rows, max(nl, 3)))
    wl[:n, :nl] = consts.weight_limbs
    return frac, wl, np.array(consts.P_limbs)


class _BoundShifts:
    """The accurate scaling's exact maxima (``ozlinalg.ozaki.crt.shifts._accurate_shifts``) from
    the bound products W kept as int32 (half of a float64 copy): per row ``max_j W_ij``
    as the tiles arrive, per column ``max_i W_ij 2**mu_i`` as the maxima over the rows
    of each shift value g (a few groups) of ``M_gj 2**g``, one integer pass over W. The
    same values as the generic code's float pass (all exact), so the same shifts."""

    def __init__(self, engine, m, p):
        self.engine, self.m, self.p = engine, m, p
        self.rowmax = np.zeros(m)
        self.tiles = []

    def add(self, i0, i1, j0, j1, w, keep=True):
        """Take the bound product ``w`` of the output tile (i0:i1, j0:j1): its row maxima,
        and ``w`` itself, kept as it is (the caller gives it a buffer of its own), unless
        ``keep`` is False (W recomputed for the later passes, :meth:`stream`)."""
        if not (w.dtype == np.int32 and w.flags.c_contiguous):
            w = np.ascontiguousarray(w, np.int32)  # W < 2**31
        if w.shape[1]:
            part = np.ascontiguousarray(self.rowmax[i0:i1])
            self.engine._k(w.size).int_row_max(w, part)
            self.rowmax[i0:i1] = part
        if keep:
            self.tiles.append((i0, i1, j0, j1, w))

    def stream(self, tiles):
        """Read W from ``tiles`` (an iterable of ``(i0, i1, j0, j1, w)`` that recomputes
        them on each pass) in the later passes instead of kept tiles: where W for the
        whole output does not fit the memory plan (``ozlinalg.ozaki.memory``)."""
        self.tiles = tiles

    def row_max(self):
        """``max_j W_ij`` per row, exactly."""
        return self.rowmax

    def col_max_scaled(self, mu):
        """``max_i W_ij 2**mu_i`` per column, exactly: the column maxima per group of rows
        with one shift (a few groups), one integer pass over W."""
        groups, gid = np.unique(mu, return_inverse=True)
        gid = np.ascontiguousarray(gid.reshape(-1), np.int64)
        cm = np.zeros((len(groups), self.p), np.int64)
        for i0, i1, j0, j1, w in self.tiles:
            if w.size:
                part = np.ascontiguousarray(cm[:, j0:j1])
                ker = self.engine._k(w.size)
                ker.group_col_max(w, gid[i0:i1], part, max(1, min(ker.threads(), w.shape[1] // 64)))
                cm[:, j0:j1] = part
        out = np.zeros(self.p)
        for g, row in zip(groups.tolist(), cm):  # W < 2**31: exact in float64, and scaled
            np.maximum(out, np.ldexp(row.astype(np.float64), int(g)), out=out)
        return out


def _reducible(p):
    """Moduli the division-free residue kernels take: odd, or a power of two."""
    return 1 <= p <= 256 and (p % 2 == 1 or p & (p - 1) == 0)


#: |digit sum| < 2**51: the exactness condition of the kernels' residue route.
_RESIDUE_BITS = 51


@functools.lru_cache(maxsize=64)
def _residue_constants(mods, bits):
    """``(d, moduli, 1 / moduli, coefs, pow2)`` for the ``crt_residues`` kernel,
    or None (a modulus the kernels do not take).

    Integers below 2**bits are cut into ``count`` digits of ``d`` bits so that
    ``sum_t digit_t (2**(d t) mod p)`` stays below 2**51 in magnitude (the digits are
    below 2**d, the coefficients below 256): one digit (none cut) up to 51 bits,
    then ``d = 51 - ceil(log2(255 (count - 1) + 1))``, 43 bits for two digits.
    """
    if not all(_reducible(p) for p in mods):
        return None
    bits = max(int(bits), 1)
    if bits <= _RESIDUE_BITS:
        d, count = bits, 1
    else:
        for count in range(2, 16):
            d = _RESIDUE_BITS - (255 * (count - 1)).bit_length()
            if count * d >= bits:
                break
        else:
            return None
    coefs = np.array([[float(pow(2, d * t, p)) for t in range(count)] for p in mods])
    pf = np.array([float(p) for p in mods])
    pow2 = np.array([p & (p - 1) == 0 for p in mods])
    return d, pf, 1.0 / pf, coefs, pow2


def _slot_first(view, axis=0):
    """``(o, slots)``: the C-contiguous array behind ``view`` with its slot axis
    ``axis`` un-reversed, and slot t's index in it; ``(None, None)`` if there is none."""
    s = view.shape[axis]
    slots = np.arange(s)
    if view.strides[axis] < 0:
        view = np.flip(view, axis)
        slots = s - 1 - slots
    if not view.flags.c_contiguous:
        return None, None
    return view, slots
