"""The passes of one engine: its fused ones where it offers them, the generic ones
otherwise, as one object the driver calls without asking what the engine has.

An engine (:mod:`ozlinalg.engines.base`) may offer a fused form of a pass around its
products (one compiled pass instead of several array operations); each must give the
generic code's bits, and may decline a call it does not cover (a dtype, a layout, no
compiled kernels) by returning ``None`` or ``False``. :func:`passes_for` pairs every
such pass with its generic form once per engine: the :class:`Passes` callables run the
fused pass and, where it is missing or declines, the generic one. The Ozaki layer calls
them as they are; tests/engines/test_passes.py compares, for every pass an engine
offers, the fused callable's bits with the generic one's.

Routes are not passes: ``finish_ef`` (the EF top groups kept apart and finished with
the scaling in one pass), ``crt_bound_shifts`` (W summarized as int32 maxima) and
``classify_estimate`` / ``kept_below`` (the ``auto`` decisions in one interval pass
over a float32 estimate) take another way through the driver (other buffers, another
memory plan) with the same result; :class:`Passes` holds them as offered, ``None``
where the engine has none, and the driver asks. (``small_product``, a whole small
product in one call, is read from the engine by :mod:`.small` before any product.)
The magnitude estimates (``estimate``: the engine's ``scaled_estimate``,
``square_estimate``: its ``approx_squares``) need only rigorous bounds, not identical
bits (:mod:`ozlinalg.ozaki.counts.estimate`); their generic form is the engine's
``approx_matmul`` of the squares, and they are paired like the passes.

The generic forms live beside the code that uses them (:mod:`.split`, :mod:`.balance`,
:mod:`.scaling`, :mod:`.faithful`, :mod:`.counts`, :mod:`.crt`), which register them
with :func:`generic`; this module only pairs them, and imports none of those modules
(they import it), so the layer's imports form no circle; the engines layer never
imports the Ozaki layer.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

__all__ = ["FUSED", "GENERIC_NAMES", "Passes", "generic", "passes_for"]

#: The bit-identical passes an engine may offer, by the name of its method.
FUSED = ("normalize_rows", "split_rows", "split_raw", "empty_slices_like", "abs_max",
         "abs_max_both", "abs_min_nonzero",
         "fixed_sums", "digit_sums", "bound_r_min", "crt_residues", "crt_bound", "row_stats",
         "crt_accumulator", "scale_outer", "axpy_outer", "axpy_twosum", "finish_twosum",
         "certify_ef", "certify_crt")

#: Other ways through the driver an engine may offer (None where it has none), and the
#: estimates (paired with ``approx_matmul``).
ROUTES = ("finish_ef", "crt_bound_shifts", "classify_estimate", "kept_below",
          "scaled_estimate", "approx_squares")


@dataclasses.dataclass(frozen=True)
class Passes:
    """One engine's passes (module docstring); the signatures are the engine's."""

    #: ``(x, exps)``: rows of ``a`` scaled by powers of two to ``max |row| in [0.5, 1)``
    normalize_rows: Callable
    #: ``(kind, x, s, width, out, scales)``: slices of normalized rows into ``out``
    split_rows: Callable
    #: ``(kind, a, s, width, operand)``: ``(slices, scales, exps)`` of raw rows
    split_raw: Callable
    #: ``(x, s, kind, operand=None)``: storage for ``s`` slices of the rows of ``x``
    slice_storage: Callable
    #: ``(x, axis)``: ``max |x|`` along ``axis`` (non-finite on lines with Inf / NaN)
    abs_max: Callable
    #: ``(x)``: ``(abs_max(x, 1), abs_max(x, 0))`` in one read of ``x``
    abs_max_both: Callable
    #: ``(x)``: the smallest nonzero ``|x|`` (float; inf where there is none)
    abs_min_nonzero: Callable
    #: ``(x, square)``: fixed-point sums of ``x**2`` or ``|x|`` per row
    fixed_sums: Callable
    #: ``(d)``: ``sum_k |d[t, i, k]|`` of slices
    digit_sums: Callable
    #: ``(w, ca, cb, num, inv_k)``: Ozaki-II's smallest lower bounds per row of W
    bound_r_min: Callable
    #: ``(x, mult, round_rows, mods, bits, out)``: Ozaki-II residues
    crt_residues: Callable
    #: ``(x, out)``: ``out = -ceil(128 |x|)``
    crt_bound: Callable
    #: ``(a, out)``: ``(exps, fixed sums of squares, digit sums)`` of the normalized rows
    #: of ``a``, with no normalized copy; where ``out`` is given, ``crt_bound`` into it
    row_stats: Callable
    #: ``(consts, faithful=False)``: an accumulator of the residue products
    crt_accumulator: Callable
    #: ``(acc, fa, fb)``: ``acc *= fa[:, None]; acc *= fb[None, :]``
    scale_outer: Callable
    #: ``(x, fa, fb, acc)``: ``acc += (x * fa[:, None]) * fb[None, :]``
    axpy_outer: Callable
    #: ``(alpha, x, acc, comp)``: ``acc + comp += alpha * x`` by TwoSum
    axpy_twosum: Callable
    #: ``(acc, comp, top, alpha)``: the faithful sum into ``acc``, its slop returned
    finish_twosum: Callable
    #: ``(r, slop, vec, ea, eb, slack)``: the certificates of an EF / Ozaki-II tile
    certify_ef: Callable
    certify_crt: Callable
    #: ``(xa, xb)``: ``(q, scale)``, ``q / scale`` estimating ``xa**2 @ xb**2.T``
    estimate: Callable
    #: ``(xa, xb)``: a float64 estimate of ``xa**2 @ xb**2.T``
    square_estimate: Callable
    #: the routes (module docstring), None where the engine has none
    finish_ef: Callable | None = None
    crt_bound_shifts: Callable | None = None
    classify_estimate: Callable | None = None
    kept_below: Callable | None = None


#: The generic forms, by the name :func:`_build` pairs them under: registered with
#: :func:`generic` by the modules that hold them (so this module imports none of them,
#: and the Ozaki layer's imports stay a tree); ``ozlinalg/ozaki/__init__.py`` imports
#: those modules.
GENERIC_NAMES = ("normalize_rows", "split_rows", "slice_storage", "split_operand",
                 "crt_accumulator", "square_estimate", "abs_max", "abs_max_both",
                 "abs_min_nonzero",
                 "fixed_sums", "digit_sums",
                 "bound_r_min", "crt_residues", "crt_bound", "row_stats", "scale_outer",
                 "axpy_outer",
                 "axpy_twosum", "finish_twosum", "certify")
_GENERIC: dict = {}


def generic(name):
    """Register the decorated function (or class) as the generic form ``name``."""
    if name not in GENERIC_NAMES:
        raise ValueError(f"ozlinalg.ozaki.passes: {name!r} is not a generic pass")

    def register(fn):
        _GENERIC[name] = fn
        return fn

    return register


def passes_for(engine, xp=None) -> Passes:
    """The :class:`Passes` of ``engine`` on the array namespace ``xp`` (default: the
    engine's), built on first need and kept on the engine; ``engine`` None: the generic
    passes of ``xp``."""
    if engine is None:
        return _generic_only(xp)
    xp = engine.xp if xp is None else xp
    cache = engine.__dict__.setdefault("_ozaki_passes", {})
    got = cache.get(xp)
    if got is None:
        got = cache[xp] = _build(engine, xp)
    return got


@functools.cache
def _generic_only(xp):
    from ..engines.base import Engine  # the generic engine: no fused pass, no route

    eng = Engine()
    eng.xp = xp
    return _build(eng, xp)


def _or(fused, generic):
    """``fused`` where it does not decline (``None`` / ``False``), else ``generic``."""
    if fused is None:
        return generic

    def run(*args):
        done = fused(*args)
        if done is None or done is False:
            return generic(*args)
        return done

    run.fused, run.generic = fused, generic  # the pair (tests compare their bits)
    return run


def _build(engine, xp):
    g = _GENERIC
    missing = set(GENERIC_NAMES) - set(g)
    if missing:  # a module of the Ozaki layer that registers them was not imported
        raise RuntimeError(f"ozlinalg.ozaki.passes: no generic form of {sorted(missing)}")
    part = functools.partial
    own = {name: getattr(engine, name) for name in FUSED + ROUTES}

    normalize = _or(own["normalize_rows"], part(g["normalize_rows"], xp))
    split_rows = _or(own["split_rows"], part(g["split_rows"], xp))
    like = own["empty_slices_like"]
    storage = like if like is not None else part(g["slice_storage"], engine)

    def split_raw_generic(kind, a, s, width, operand):
        x, e = normalize(a)
        data, scales = g["split_operand"](xp, engine, kind, x, s, width, operand)
        return data, scales, e

    fused_acc = own["crt_accumulator"]

    def crt_accumulator(consts, faithful_mode=False):
        acc = fused_acc(consts) if fused_acc is not None else None
        if acc is None or (faithful_mode and not hasattr(acc, "faithful_result")):
            acc = g["crt_accumulator"](xp, engine, consts)
        return acc

    square = _or(own["approx_squares"], part(g["square_estimate"], engine))
    return Passes(
        normalize_rows=normalize,
        split_rows=split_rows,
        split_raw=_or(own["split_raw"], split_raw_generic),
        slice_storage=storage,
        abs_max=_or(own["abs_max"], part(g["abs_max"], xp)),
        abs_max_both=_or(own["abs_max_both"], part(g["abs_max_both"], xp)),
        abs_min_nonzero=_or(own["abs_min_nonzero"], part(g["abs_min_nonzero"], xp)),
        fixed_sums=_or(own["fixed_sums"], part(g["fixed_sums"], xp)),
        digit_sums=_or(own["digit_sums"], part(g["digit_sums"], xp)),
        bound_r_min=_or(own["bound_r_min"], part(g["bound_r_min"], xp)),
        crt_residues=_or(own["crt_residues"], part(g["crt_residues"], xp)),
        crt_bound=_or(own["crt_bound"], part(g["crt_bound"], xp)),
        row_stats=_or(own["row_stats"], part(g["row_stats"], xp, engine)),
        crt_accumulator=crt_accumulator,
        scale_outer=_or(own["scale_outer"], g["scale_outer"]),
        axpy_outer=_or(own["axpy_outer"], part(g["axpy_outer"], xp)),
        axpy_twosum=_or(own["axpy_twosum"], part(g["axpy_twosum"], xp)),
        finish_twosum=_or(own["finish_twosum"], part(g["finish_twosum"], xp)),
        certify_ef=_or(own["certify_ef"], part(g["certify"], xp)),
        certify_crt=_or(own["certify_crt"], part(g["certify"], xp)),
        estimate=_or(own["scaled_estimate"], lambda xa, xb: (square(xa, xb), 1.0)),
        square_estimate=square,
        finish_ef=own["finish_ef"],
        crt_bound_shifts=own["crt_bound_shifts"],
        classify_estimate=own["classify_estimate"],
        kept_below=own["kept_below"],
    )
