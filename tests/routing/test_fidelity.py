"""Drop-in fidelity: scipy.linalg / numpy.linalg side by side with
ozlinalg and with the backend-routed call, in one body per check.

Each case builds its inputs afresh for every call (same values, same memory
layout), runs the native function (the reference) and a candidate
(``ozlinalg.linalg`` / ``ozlinalg.numpy_linalg`` called directly, or the
original ``scipy.linalg`` / ``numpy.linalg`` name called inside
``ozlinalg.backend(min_size=0)``, which routes it to the emulation), and
compares everything a caller can observe:

* the exception type (or none), and whether a ``LinAlgWarning`` was emitted;
* the result's structure (tuple / list / ndarray / scalar types), shapes,
  dtypes, memory layout (C / F contiguity) and values: FP64 results within a
  normwise 1e-9 of SciPy's (same precision, well-conditioned inputs);
  results SciPy computes in single precision against SciPy's FP64 result on
  the same input values, within one float32 rounding (ozlinalg computes in
  FP64 and rounds once), or bit for bit where ozlinalg delegates to SciPy
  (never against SciPy's float32 values, whose error depends on the BLAS
  kernel); ill-conditioned inputs by finiteness only (their backward errors
  are judged against exact residuals in a test of their own);
* which outputs share memory with which inputs (``np.shares_memory``);
* which inputs were modified, and to what.

No rule (when SciPy writes in place, which dtype it returns, which
exception it raises) is written down here: the rules are SciPy's and
NumPy's, observed in the same body. Where ozlinalg deliberately differs
(docs/backend.md), the expectation says so: a read-only input is never
written, and the contents SciPy leaves in a buffer it only uses as scratch
(``overwrite_a`` of solve with assume_a='sym', lstsq's gelss) are not
compared.
"""
from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import numpy as np
import pytest
import scipy.linalg as sl
from scipy.linalg.lapack import find_best_lapack_type

import ozlinalg
import ozlinalg.linalg as ol
from ozlinalg import numpy_linalg as onl

pytestmark = pytest.mark.usefixtures("one_blas_thread")


# --------------------------------------------------------------------------
# the functions under test

def native(mod, name):
    """``mod.name`` without the backend's shim (the native original)."""
    f = getattr(mod, name)
    while getattr(f, "_ozlinalg_shim", False):
        f = f.__wrapped__
    return f


def backend_opts():
    """Always emulate: ``min_size=0`` (and ``strategy='eager'``, ``native_order=0`` where
    they exist)."""
    opts = {"min_size": 0}
    fields = {f.name for f in dataclasses.fields(ozlinalg.Options)}
    if "strategy" in fields:
        opts["strategy"] = "eager"
    if "native_order" in fields:
        opts["native_order"] = 0
    return opts


def routed(mod, name):
    """The original ``mod.name`` called inside an always-emulating backend block."""
    def call(*args, **kwargs):
        with ozlinalg.backend(**backend_opts()):
            return getattr(mod, name)(*args, **kwargs)
    return call


CANDIDATES = {
    "scipy": {"ozlinalg": lambda name: getattr(ol, name),
              "backend": lambda name: routed(sl, name)},
    "numpy": {"ozlinalg": lambda name: getattr(onl, name),
              "backend": lambda name: routed(np.linalg, name)},
}
REFERENCE = {"scipy": lambda name: native(sl, name),
             "numpy": lambda name: native(np.linalg, name)}


# --------------------------------------------------------------------------
# inputs: values, dtypes, memory layouts

LAYOUTS = ("C", "F", "strided", "neg", "ro")


def lay(values, dtype, layout):
    """A fresh array holding ``values`` in ``dtype`` with the memory ``layout``:
    C / F order, 'strided' (every other element of a larger F-ordered
    array), 'neg' (negative stride on the first axis), 'ro' (F order,
    read-only)."""
    v = np.asarray(values)
    v = v.astype(dtype) if np.dtype(dtype).kind != "b" else v != 0
    if layout == "C":
        return np.array(v, order="C")
    if layout in ("F", "ro"):
        x = np.array(v, order="F")
        x.flags.writeable = layout != "ro"
        return x
    if layout == "strided":
        parent = np.zeros(tuple(2 * s for s in v.shape), dtype=v.dtype, order="F")
        idx = tuple(slice(None, None, 2) for _ in v.shape)
        parent[idx] = v
        return parent[idx]
    if layout == "neg":
        return np.array(v[::-1], order="F")[::-1] if v.ndim else v.copy()
    raise AssertionError(layout)


def _rng(seed):
    return np.random.default_rng([20261201, seed])


def matrix(seed, shape, dtype, kind="gen"):
    """float64 / complex128 values of a matrix (stack) that are exact in ``dtype``.

    kind: 'gen' (well conditioned; rectangular for non-square shapes),
    'spd' (Hermitian positive definite), 'sym' (symmetric indefinite), 'her'
    (Hermitian indefinite, a spread spectrum),
    'lower' / 'upper' (triangular, well conditioned), 'any' (plain random).
    Integer and boolean dtypes get small integers (bool: unit lower
    triangular), so every dtype sees a well-posed problem.
    """
    rng = _rng(seed)
    dt = np.dtype(dtype)
    *batch, m, n = shape
    k = min(m, n)
    eye = np.eye(m, n)
    if dt.kind == "b":
        v = np.tril(rng.random(shape) < 0.5, -1) + eye
        if kind == "spd":
            v = np.broadcast_to(eye, shape).copy()
        return np.where(kind == "upper", np.swapaxes(v, -1, -2) if m == n else v, v) * 1.0

    def draw():
        if dt.kind in "iu":
            return np.round(2 * rng.standard_normal(shape))
        x = rng.standard_normal(shape)
        if dt.kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        return x

    v = draw()
    if kind == "spd":
        v = v @ np.swapaxes(v.conj(), -1, -2) + k * np.eye(m)
        if dt.kind not in "iu":
            v = (v + np.swapaxes(v.conj(), -1, -2)) / 2
    elif kind == "sym":
        v = v + np.swapaxes(v, -1, -2)
    elif kind == "her":
        v = v + np.swapaxes(v.conj(), -1, -2)
    elif kind != "any":
        v = v + (12 if dt.kind in "iu" else 3 * np.sqrt(k)) * eye
    if kind == "lower":
        v = np.tril(v)
    elif kind == "upper":
        v = np.triu(v)
    if dt.kind == "u":
        v = np.abs(v)
    return v.astype(np.complex128 if dt.kind == "c" else np.float64)


# --------------------------------------------------------------------------
# running a call and comparing what a caller observes

def leaves(obj):
    """The ndarray leaves of nested tuples / lists (in order)."""
    if isinstance(obj, (tuple, list)):
        return [x for o in obj for x in leaves(o)]
    return [obj] if isinstance(obj, np.ndarray) else []


@dataclasses.dataclass
class Outcome:
    result: object
    exc: type | None
    warned: bool
    inputs: list        # the input arrays after the call
    before: list        # copies taken before the call
    emulated: int = 0   # emulated GEMM calls made
    runtime: bool = False  # a RuntimeWarning (overflow, invalid value) was emitted


def run(func, make_args, kwargs):
    args = make_args()
    ins = leaves(args)
    before = [x.copy() for x in ins]
    with warnings.catch_warnings(record=True) as rec, ozlinalg.profile() as prof:
        warnings.simplefilter("always")
        try:
            result, exc = func(*args, **kwargs), None
        except Exception as e:  # noqa: BLE001 (the type is what is compared)
            result, exc = None, type(e)
    warned = any(issubclass(w.category, sl.LinAlgWarning) for w in rec)
    runtime = any(issubclass(w.category, RuntimeWarning) for w in rec)
    return Outcome(result, exc, warned, ins, before, prof.emulated_gemm_calls, runtime)


SINGLE = (np.float32, np.complex64)


#: Normwise tolerance of FP64 results against SciPy's FP64 results (same precision,
#: well-conditioned inputs; single-precision results: assert_single_close).
FP64_TOL = 1e-9


def assert_close(ref, got, what):
    """Normwise closeness (relative to the largest entry) with equal NaN/Inf masks, for
    results SciPy computes in double precision."""
    if ref.size == 0:
        return
    fin_r, fin_g = np.isfinite(ref), np.isfinite(got)
    assert np.array_equal(fin_r, fin_g), f"{what}: non-finite entries differ"
    if not fin_r.any():
        return
    scale = max(float(np.abs(ref[fin_r]).max()), 1.0)
    err = float(np.abs(ref[fin_r].astype(complex) - got[fin_g].astype(complex)).max())
    assert err <= FP64_TOL * scale, \
        f"{what}: max error {err:.3g} (scale {scale:.3g})"


#: ozlinalg's single-precision result is an FP64 result rounded once: within half an
#: ulp of float32 (2**-24 relative) of it, and that FP64 result within FP64's
#: tolerance of SciPy's FP64 result on the same input values.
SINGLE_TOL = 2.0**-24 + FP64_TOL


def upcast(obj):
    """``obj`` (arguments, nested) with float32 / complex64 arrays and the arrays SciPy
    computes in single precision (bool, 8/16-bit integers, float16) in double: the
    same values, for SciPy's FP64 reference of a single-precision call."""
    if isinstance(obj, (tuple, list)):
        return type(obj)(upcast(x) for x in obj)
    if not isinstance(obj, np.ndarray):
        return obj
    if obj.dtype == np.complex64:
        return obj.astype(np.complex128)
    if obj.dtype == np.float32 or obj.dtype.kind == "b" or \
            (obj.dtype.kind in "iuf" and obj.dtype.itemsize <= 2):
        return obj.astype(np.float64)
    return obj


def assert_single_close(ref, got, fp64, what, roundings=1):
    """A single-precision result ``got`` against SciPy's: bit for bit where ozlinalg
    delegates the call to SciPy's own single-precision LAPACK (pivoted QR, banded
    and tridiagonal solves), else within :data:`SINGLE_TOL` (normwise) of SciPy's
    FP64 result ``fp64`` on the same input values, with ``roundings`` float32
    roundings instead of one where the result is computed from rounded values.
    Never judged against SciPy's single-precision values at a tolerance: their
    error depends on the BLAS kernel."""
    if np.array_equal(got, ref, equal_nan=True):
        return
    fp64 = np.asarray(fp64)
    assert fp64.shape == got.shape, f"{what}: FP64 reference shape {fp64.shape} != {got.shape}"
    fin = np.isfinite(fp64)
    assert np.array_equal(fin, np.isfinite(got)), f"{what}: non-finite entries differ"
    if not fin.any():
        return
    scale = max(float(np.abs(fp64[fin]).max()), 1.0)
    err = float(np.abs(fp64[fin].astype(complex) - got[fin].astype(complex)).max())
    tol = SINGLE_TOL + (roundings - 1) * 2.0**-24
    assert err <= tol * scale, \
        f"{what}: max error {err:.3g} against the FP64 reference (scale {scale:.3g})"


def assert_same_value(ref, got, what, values, single=False, fp64=None, roundings=None):
    """``fp64``: the FP64 reference's result (same structure), for single-precision
    values; ``roundings``: a tuple parallel to a tuple result, the float32 roundings
    of each part (default 1)."""
    if isinstance(ref, (tuple, list)):
        assert type(got) is type(ref), f"{what}: {type(got).__name__} != {type(ref).__name__}"
        assert len(got) == len(ref), f"{what}: length {len(got)} != {len(ref)}"
        for i, (r, g) in enumerate(zip(ref, got)):
            assert_same_value(r, g, f"{what}[{i}]", values, single,
                              None if fp64 is None else fp64[i],
                              None if roundings is None else roundings[i])
        return
    assert type(got) is type(ref), f"{what}: type {type(got).__name__} != {type(ref).__name__}"
    if ref is None or isinstance(ref, (bool, int, str)):
        assert got == ref, f"{what}: {got!r} != {ref!r}"
        return
    r, g = np.asarray(ref), np.asarray(got)
    assert g.shape == r.shape, f"{what}: shape {g.shape} != {r.shape}"
    assert g.dtype == r.dtype, f"{what}: dtype {g.dtype} != {r.dtype}"
    if isinstance(ref, np.ndarray):
        lr = (r.flags.c_contiguous, r.flags.f_contiguous)
        lg = (g.flags.c_contiguous, g.flags.f_contiguous)
        assert lg == lr, f"{what}: (C, F) contiguity {lg} != {lr}"
    if values == "close" or r.dtype.kind not in "fc":
        if r.dtype in SINGLE or (single and r.dtype.kind in "fc"):
            # computed in single precision by SciPy (a float32 result, or det's
            # float64 product of a float32 LU)
            assert fp64 is not None, f"{what}: no FP64 reference for a single-precision result"
            assert_single_close(r, g, fp64, what, roundings or 1)
        elif r.dtype.kind in "fc":
            assert_close(r, g, what)
        else:
            np.testing.assert_array_equal(g, r, err_msg=what)
    else:  # 'nonfinite' (NaN / Inf inputs) or 'ill' (ill-conditioned): finiteness only
        assert np.isfinite(g).all() == np.isfinite(r).all(), f"{what}: finiteness differs"


def _has_single(obj):
    if isinstance(obj, (tuple, list)):
        return any(_has_single(x) for x in obj)
    return isinstance(obj, (np.ndarray, np.generic)) and obj.dtype in SINGLE


def _roundings(case, ref):
    """lstsq's residues are the float32 sum of squares of the rounded tail of Q^H b
    (SciPy's formula, which ozlinalg keeps): 2 roundings per term, one per sum; the
    vectors of a spectral decomposition are rounded again by their canonical phase."""
    if case.roundings is not None and isinstance(ref.result, tuple) \
            and len(case.roundings) == len(ref.result):
        return case.roundings
    if case.fn != "lstsq" or ref.exc is not None or not isinstance(ref.result, tuple):
        return None
    m, n = ref.before[0].shape[-2:]
    return (1, max(1, m - n) + 2, 1, 1)


class FP64Reference:
    """SciPy's (NumPy's) call on :func:`upcast` inputs: the reference for the values of
    single-precision results (``result``) and of the inputs SciPy writes
    (``contents(j)``). Run only when asked for."""

    def __init__(self, case, kwargs):
        self.case, self.kwargs = case, kwargs
        self._runs = {}

    def _run(self, overwrite):
        if overwrite not in self._runs:
            kw = self.kwargs if overwrite else {
                k: (False if k.startswith("overwrite_") else v) for k, v in self.kwargs.items()}
            out = run(REFERENCE[self.case.api](self.case.fn),
                      lambda: upcast(self.case.make_args()), kw)
            assert out.exc is None, f"{self.case.id}: the FP64 reference raised {out.exc}"
            self._runs[overwrite] = out
        return self._runs[overwrite]

    @property
    def result(self):
        # overwrite_* off: SciPy works on its copies (and never reaches the
        # overwrite_a crash of test_scipy_crash_case)
        r = self._run(False).result
        return self.case.canon(r) if self.case.canon is not None else r

    def contents(self, j):
        """What the FP64 call leaves in input j, which it writes as the single-precision
        call does: the inputs keep their memory order (the grid has no F-ordered case
        of the crash)."""
        out = self._run(True)
        assert not _equal(out.inputs[j], out.before[j]), \
            f"{self.case.id}: the FP64 reference does not write input {j}"
        return out.inputs[j]


def assert_same_outcome(ref, got, case, fp64=None):
    """``fp64``: an :class:`FP64Reference`, for the values of single-precision results."""
    what = case.id
    assert got.exc is ref.exc, f"{what}: raised {got.exc} where the reference raised {ref.exc}"
    if ref.exc is not None:
        return
    assert got.warned == ref.warned, f"{what}: LinAlgWarning {got.warned} != {ref.warned}"
    assert ref.runtime or not got.runtime, f"{what}: a RuntimeWarning the reference does not emit"
    # SciPy computes in single precision for float32 / complex64 inputs and
    # for bool, 8/16-bit integers and float16 (ozlinalg: in double)
    inexact = [x for x in ref.before if x.dtype.kind in "fc"] or ref.before
    single = case.api == "scipy" and bool(inexact) and \
        find_best_lapack_type(inexact)[1] in SINGLE
    need = single or _has_single(ref.result)
    assert_same_value(ref.result, got.result, what, case.values, single,
                      fp64.result if need and fp64 is not None else None,
                      _roundings(case, ref))
    # memory sharing between each output and each input, and input mutation
    outs_r, outs_g = leaves(ref.result), leaves(got.result)
    for j, (xr, xg) in enumerate(zip(ref.inputs, got.inputs)):
        share_r = [np.shares_memory(o, xr) for o in outs_r]
        share_g = [np.shares_memory(o, xg) for o in outs_g]
        changed_r = not _equal(xr, ref.before[j])
        changed_g = not _equal(xg, got.before[j])
        assert share_g == share_r, f"{what}: outputs sharing input {j}: {share_g} != {share_r}"
        if not changed_r:
            assert not changed_g, f"{what}: input {j} modified where the reference leaves it"
        elif any(share_r) or case.scratch == "same":
            assert changed_g, f"{what}: input {j} not written where the reference writes it"
            if case.scratch != "same":
                continue
            if xr.dtype in SINGLE or (single and xr.dtype.kind in "fc"):
                assert fp64 is not None, f"{what}: no FP64 reference for input {j}"
                assert_single_close(xr, xg, fp64.contents(j), f"{what}: contents of input {j}")
            else:
                assert_close(xr, xg, f"{what}: contents of input {j}")


def _equal(x, y):
    return np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")


@dataclasses.dataclass
class Case:
    api: str                    # 'scipy' or 'numpy'
    fn: str                     # function name in that API
    make_args: Callable         # () -> fresh positional arguments
    kwargs: dict
    id: str
    values: str = "close"       # 'close'; 'nonfinite' (NaN / Inf inputs), 'ill' (ill-conditioned)
    scratch: str = "same"       # 'same': inputs SciPy uses as scratch end equal; 'any'
    emulated: bool = False      # the candidate must run emulated GEMMs (not fall back)
    canon: Callable | None = None   # result -> result with its free signs / phases fixed
    roundings: tuple | None = None  # float32 roundings of each part of a tuple result


def check(case, candidate):
    ref = run(REFERENCE[case.api](case.fn), case.make_args, case.kwargs)
    kw = case.kwargs
    if any(not x.flags.writeable and not _equal(x, x0) for x, x0 in zip(ref.inputs, ref.before)):
        # SciPy writes into a read-only array when asked to overwrite it;
        # ozlinalg never does (docs/backend.md): it must behave as SciPy does
        # without the overwrite request
        kw = {k: (False if k.startswith("overwrite_") else v) for k, v in case.kwargs.items()}
        ref = run(REFERENCE[case.api](case.fn), case.make_args, kw)
    got = run(CANDIDATES[case.api][candidate](case.fn), case.make_args, case.kwargs)
    if case.canon is not None:  # vectors unique up to signs (phases): compare them fixed
        for out in (ref, got):
            if out.exc is None:
                out.result = case.canon(out.result)
    assert_same_outcome(ref, got, case, FP64Reference(case, kw))
    if case.emulated:
        assert got.emulated > 0, f"{case.id}: the {candidate} call never reached the emulation"


# --------------------------------------------------------------------------
# the grids

MAIN_DTYPES = ("f4", "f8", "c8", "c16", "i8", "i2")
SMALL_DTYPES = ("i1", "u1", "u2", "?", "f2")     # SciPy: single precision results
CASES = []


def add(api, fn, make_args, kwargs, *tags, **opts):
    kw = ",".join(f"{k}={v}" for k, v in kwargs.items())
    cid = "-".join([fn, *[str(t) for t in tags]] + ([kw] if kw else []))
    CASES.append(Case(api, fn, make_args, dict(kwargs), cid, **opts))


def mat(seed, shape, dtype, layout, kind="gen"):
    v = matrix(seed, shape, dtype, kind)
    return lambda: lay(v, dtype, layout)


def rhs(seed, shape, dtype, layout):
    v = matrix(seed + 1000, (1,) + tuple(shape) if len(shape) == 1 else shape, dtype, "any")
    v = v[0] if len(shape) == 1 else v
    return lambda: lay(v, dtype, layout)


def args_of(*makers):
    def make():
        return tuple(m() if callable(m) else m for m in makers)
    return make


def tup(*makers):
    """A tuple argument (``(lu, piv)``, ``(c, lower)``) of fresh arrays."""
    return lambda: tuple(m() if callable(m) else m for m in makers)


def ow_kw(flag, name):
    return {name: True} if flag else {}


def _emulates(fn, shape, kwargs):
    """Cases whose work must be emulated: order >= 2, no structure that
    SciPy solves without BLAS-3 work (diagonal, tridiagonal, banded), no
    column pivoting (qr(pivoting=True) is native)."""
    if min(shape) < 2 or kwargs.get("pivoting"):
        return False
    return kwargs.get("assume_a") not in ("tridiagonal", "banded", "diagonal")


def one_matrix_grid(fn, shapes, kind="gen", variants=({},), ow="overwrite_a",
                    layouts=LAYOUTS, dtypes=MAIN_DTYPES, **opts):
    for extra in variants:
        for shape in shapes:
            for dt in dtypes:
                for layout in layouts:
                    for flag in (False, True):
                        add("scipy", fn, args_of(mat(len(CASES), shape, dt, layout, kind)),
                            {**extra, **ow_kw(flag, ow)}, "x".join(map(str, shape)), dt,
                            layout, emulated=_emulates(fn, shape, extra), **opts)
            for dt in SMALL_DTYPES:
                add("scipy", fn, args_of(mat(len(CASES), shape, dt, "C", kind)), extra,
                    "x".join(map(str, shape)), dt, "C", **opts)


# lu_factor, lu, cholesky, cho_factor, inv, qr: one matrix
one_matrix_grid("lu_factor", [(5, 5), (6, 4), (4, 6)])
one_matrix_grid("lu", [(5, 5)], variants=({}, {"permute_l": True}, {"p_indices": True}))
one_matrix_grid("lu", [(6, 4), (4, 6)], variants=({}, {"permute_l": True}), dtypes=("f4", "f8"))
one_matrix_grid("cholesky", [(5, 5)], kind="spd", variants=({}, {"lower": True}))
one_matrix_grid("cho_factor", [(5, 5)], kind="spd", variants=({}, {"lower": True}))
one_matrix_grid("inv", [(5, 5)])
one_matrix_grid("inv", [(5, 5)], kind="spd", variants=({"assume_a": "pos"},),
                dtypes=("f4", "f8", "c16"))
one_matrix_grid("inv", [(5, 5)], kind="lower",
                variants=({"assume_a": "lower triangular"}, {"assume_a": None}),
                dtypes=("f4", "f8", "c16"))
for mode in ("full", "r", "economic", "raw"):
    one_matrix_grid("qr", [(6, 4), (4, 6), (5, 5)], variants=({"mode": mode},),
                    dtypes=("f4", "f8", "c8", "c16", "i8"))
one_matrix_grid("qr", [(6, 4)], variants=({"pivoting": True},), dtypes=("f4", "f8"))
one_matrix_grid("det", [(5, 5)], dtypes=("f4", "f8", "c16", "i8"))

# edge shapes: empty, 1 x 1, stacks (zero-size batches included)
for fn, kind, shapes in [
    ("lu_factor", "gen", [(0, 0), (3, 0), (1, 1), (2, 4, 4)]),
    ("lu", "gen", [(0, 0), (3, 0), (1, 1), (2, 4, 4), (2, 5, 3), (0, 3, 3), (2, 0, 3)]),
    ("cholesky", "spd", [(0, 0), (1, 1), (2, 4, 4)]),
    ("cho_factor", "spd", [(0, 0), (1, 1), (2, 4, 4)]),
    ("inv", "gen", [(0, 0), (1, 1), (2, 4, 4), (0, 3, 3)]),
    ("det", "gen", [(0, 0), (1, 1), (2, 4, 4)]),
    ("qr", "gen", [(0, 0), (3, 0), (1, 1), (2, 5, 3)]),
]:
    variants = ({"mode": "r"}, {"mode": "economic"}, {}) if fn == "qr" else (
        ({}, {"permute_l": True}, {"p_indices": True}) if fn == "lu" else ({},))
    one_matrix_grid(fn, shapes, kind=kind, variants=variants, layouts=("C", "F"),
                    dtypes=("f4", "f8", "c16"))


def two_array_grid(fn, a_shape, b_shapes, kind="gen", variants=({},), ows=("overwrite_b",),
                   layouts=LAYOUTS, dtypes=MAIN_DTYPES, factor=None, **opts):
    """``fn(a, b)``; ``factor`` turns the matrix into the first argument
    (``(lu, piv)`` for lu_solve, ``(c, lower)`` for cho_solve)."""
    for extra in variants:
        for b_shape in b_shapes:
            for dt in dtypes:
                for layout in layouts:
                    for flag in (False, True):
                        seed = len(CASES)
                        a = (mat(seed, a_shape, dt, "F" if factor else layout, kind)
                             if factor is None or dt[0] in "fc" else
                             mat(seed, a_shape, "f8", "F", kind))
                        first = factor(a, extra) if factor else a
                        kw = {k: v for k, v in extra.items() if k != "lower" or not factor}
                        kw.update({o: True for o in ows} if flag else {})
                        if (fn == "solve" and kind == "sym" and kw.get("assume_a", 0) is None
                                and kw.get("overwrite_a") and layout in ("F", "ro")):
                            continue  # SciPy 1.17.1 crashes here: test_scipy_crash_case
                        add("scipy", fn, args_of(first, rhs(seed, b_shape, dt, layout)), kw,
                            "x".join(map(str, a_shape)), "x".join(map(str, b_shape)), kind,
                            dt, layout, emulated=_emulates(fn, a_shape, kw) and kind != "diag",
                            **({"scratch": "any"} if opts.get("scratch") else {}))
        for dt in SMALL_DTYPES:
            seed = len(CASES)
            a = mat(seed, a_shape, dt if not factor else "f8", "C", kind)
            first = factor(a, extra) if factor else a
            kw = {k: v for k, v in extra.items() if k != "lower" or not factor}
            add("scipy", fn, args_of(first, rhs(seed, b_shapes[0], dt, "C")), kw,
                "x".join(map(str, a_shape)), dt, "C")


def lu_of(a, extra):
    def make():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sl.LinAlgWarning)  # singular inputs
            return native(sl, "lu_factor")(a())
    return make


def chol_of(a, extra):
    lower = extra.get("lower", False)

    def make():
        return native(sl, "cho_factor")(a(), lower=lower)
    return make


two_array_grid("solve_triangular", (5, 5), [(5,), (5, 3)], kind="lower",
               variants=({"lower": True}, {"lower": True, "trans": 1},
                         {"lower": True, "trans": "C", "unit_diagonal": True}))
two_array_grid("solve_triangular", (5, 5), [(5, 2)], kind="upper",
               variants=({"trans": True}, {"trans": 2}), dtypes=("f4", "f8", "c16"))
two_array_grid("lu_solve", (5, 5), [(5,), (5, 3)], factor=lu_of,
               variants=({}, {"trans": 1}, {"trans": 2}, {"trans": True}))
two_array_grid("cho_solve", (5, 5), [(5,), (5, 3)], kind="spd", factor=chol_of,
               variants=({}, {"lower": True}))
two_array_grid("solve", (5, 5), [(5,), (5, 3)], ows=("overwrite_a", "overwrite_b"))
two_array_grid("solve", (5, 5), [(5, 3)], ows=("overwrite_a", "overwrite_b"),
               variants=({"assume_a": "gen"}, {"transposed": True}),
               dtypes=("f4", "f8", "i8"))
two_array_grid("solve", (5, 5), [(5, 3)], kind="spd", ows=("overwrite_a", "overwrite_b"),
               variants=({"assume_a": "pos"}, {"assume_a": "pos", "lower": True},
                         {"assume_a": None}),
               dtypes=("f4", "f8", "c8", "c16"))
two_array_grid("solve", (5, 5), [(5, 3)], kind="sym", ows=("overwrite_a", "overwrite_b"),
               variants=({"assume_a": "sym"}, {"assume_a": None}),
               dtypes=("f4", "f8", "c16"), scratch=True)
two_array_grid("solve", (5, 5), [(5, 2)], kind="spd", ows=("overwrite_a", "overwrite_b"),
               variants=({"assume_a": "her"},), dtypes=("c8", "c16"), scratch=True)
two_array_grid("solve", (5, 5), [(5, 2)], kind="lower", ows=("overwrite_a", "overwrite_b"),
               variants=({"assume_a": "lower triangular"}, {}), dtypes=("f4", "f8", "c16"))
two_array_grid("solve", (5, 5), [(5, 2)], kind="gen", ows=("overwrite_a", "overwrite_b"),
               variants=({"assume_a": "tridiagonal"}, {"assume_a": "banded"},
                         {"assume_a": "diagonal"}),
               dtypes=("f4", "f8", "c16"))
for drv in (None, "gelss", "gelsy"):
    two_array_grid("lstsq", (7, 4), [(7,), (7, 2)], ows=("overwrite_a", "overwrite_b"),
                   variants=({"lapack_driver": drv},) if drv else ({},),
                   dtypes=("f4", "f8", "c16", "i8"), scratch=True)
    two_array_grid("lstsq", (4, 6), [(4, 2)], ows=("overwrite_a", "overwrite_b"),
                   variants=({"lapack_driver": drv},) if drv else ({},),
                   dtypes=("f4", "f8", "c16"), layouts=("C", "F"), scratch=True)
two_array_grid("lstsq", (5, 5), [(5, 2)], ows=("overwrite_a", "overwrite_b"),
               variants=({"lapack_driver": "gelss"},), dtypes=("f4", "f8"),
               layouts=("C", "F"), scratch=True)


def _pair(fn, a, b, kw, *tags, api="scipy", **opts):
    add(api, fn, args_of(*[x if callable(x) else (lambda v=x: np.array(v)) for x in (a, b)]),
        kw, *tags, **opts)


# stacks: batched a and / or b, broadcasting (SciPy 1.17's rules)
for fn, a_shape, b_shape, factor, kind in [
    ("solve", (2, 4, 4), (2, 4, 3), None, "gen"), ("solve", (2, 4, 4), (4, 3), None, "gen"),
    ("solve", (4, 4), (2, 4, 3), None, "gen"), ("solve", (3, 1, 4, 4), (2, 4, 2), None, "gen"),
    ("solve", (2, 4, 4), (4,), None, "gen"),
    ("solve_triangular", (2, 4, 4), (4, 3), None, "lower"),
    ("solve_triangular", (4, 4), (2, 4, 3), None, "lower"),
    ("lstsq", (2, 6, 4), (6, 2), None, "gen"),
    ("lu_solve", (2, 4, 4), (2, 4, 3), lu_of, "gen"),
    ("lu_solve", (2, 4, 4), (4, 3), lu_of, "gen"),
    ("lu_solve", (4, 4), (2, 4, 3), lu_of, "gen"),
    ("lu_solve", (4, 4), (4, 2, 3), lu_of, "gen"),
    ("cho_solve", (2, 4, 4), (2, 4, 3), chol_of, "spd"),
    ("cho_solve", (4, 4), (2, 4, 3), chol_of, "spd"),
    ("cho_solve", (2, 4, 4), (4,), chol_of, "spd"),
]:
    for dt in ("f8", "f4"):
        for layout in ("C", "F"):
            for flag in (False, True):
                if flag and len(b_shape) < len(a_shape):
                    continue  # b broadcast against a stack: test_broadcast_b_not_overwritten
                seed = len(CASES)
                a = mat(seed, a_shape, dt, layout, kind)
                first = factor(a, {}) if factor else a
                ows = {"overwrite_b": True} if flag else {}
                kw = {"lower": True} if fn == "solve_triangular" else {}
                add("scipy", fn, args_of(first, rhs(seed, b_shape, dt, layout)), {**kw, **ows},
                    "x".join(map(str, a_shape)), "x".join(map(str, b_shape)), dt, layout)

# empty right-hand sides and 1 x 1 systems
for fn, a_shape, b_shape, factor, kind in [
    ("solve", (0, 0), (0,), None, "gen"), ("solve", (3, 3), (3, 0), None, "gen"),
    ("solve", (1, 1), (1,), None, "gen"), ("solve", (1, 1), (1, 3), None, "gen"),
    ("solve_triangular", (0, 0), (0,), None, "lower"),
    ("solve_triangular", (3, 3), (3, 0), None, "lower"),
    ("lu_solve", (3, 3), (3, 0), lu_of, "gen"), ("cho_solve", (3, 3), (3, 0), chol_of, "spd"),
    ("lstsq", (0, 2), (0,), None, "gen"), ("lstsq", (3, 0), (3,), None, "gen"),
    ("lstsq", (1, 1), (1,), None, "gen"),
]:
    for dt in ("f8", "f4", "c16", "i8"):
        seed = len(CASES)
        a = mat(seed, a_shape, dt, "F", kind)
        first = factor(a, {}) if factor else a
        add("scipy", fn, args_of(first, rhs(seed, b_shape, dt, "F")), {},
            "x".join(map(str, a_shape)), "x".join(map(str, b_shape)), dt)

# bad input: NaN / Inf with and without check_finite, shape mismatches
def _with(values_fn, dtype="f8", layout="F"):
    def make():
        return lay(values_fn(), dtype, layout)
    return make


def _nonfinite(v, where=(1, 2)):
    def f():
        x = matrix(7, (4, 4), "f8", "spd").copy()
        x[where] = v
        x[where[::-1]] = v
        return x
    return f


for bad in (np.nan, np.inf):
    for fn in ("lu_factor", "lu", "cholesky", "cho_factor", "qr", "inv", "det"):
        for finite in (False, True):
            add("scipy", fn, args_of(_with(_nonfinite(bad))), {"check_finite": finite},
                str(bad), values="nonfinite")
    for fn in ("solve", "solve_triangular", "lstsq"):
        for finite in (False, True):
            if fn == "lstsq" and bad == np.inf and not finite:
                continue  # native gelsd does not return on Inf (docs/backend.md)
            add("scipy", fn, args_of(_with(_nonfinite(bad)), rhs(3, (4, 2), "f8", "F")),
                {"check_finite": finite}, str(bad), values="nonfinite")
            add("scipy", fn, args_of(mat(3, (4, 4), "f8", "F", "lower"),
                                     _with(lambda bad=bad: np.full((4, 2), bad))),
                {"check_finite": finite, **({"lower": True} if fn != "lstsq" else {})},
                str(bad), "in-b", values="nonfinite")
    for fn, first in (("lu_solve", lu_of(mat(5, (4, 4), "f8", "F"), {})),
                      ("cho_solve", chol_of(mat(5, (4, 4), "f8", "F", "spd"), {}))):
        for finite in (False, True):
            add("scipy", fn, args_of(first, _with(lambda bad=bad: np.full((4, 2), bad))),
                {"check_finite": finite}, str(bad), values="nonfinite")

for fn, a, b, kw in [
    ("solve", np.eye(3), [1., 2.], {}), ("solve", np.ones((3, 2)), [1., 2.], {}),
    ("solve", np.eye(2), [1., 2.], {"assume_a": "foo"}),
    ("solve", np.eye(3), np.ones((2, 3, 2)), {}),
    ("solve", np.ones((2, 3, 3)) + np.eye(3), np.ones((3, 3, 1)), {}),
    ("solve_triangular", np.eye(3), [1., 2.], {}),
    ("solve_triangular", np.ones((2, 3)), [1., 2.], {}),
    ("solve_triangular", np.eye(2), 1.0, {}),
    ("lstsq", np.ones(3), [1., 2., 3.], {}), ("lstsq", np.ones((3, 2)), [1., 2.], {}),
    ("lstsq", np.ones((3, 2)), [1., 2., 3.], {"lapack_driver": "nope"}),
]:
    _pair(fn, a, b, kw, "bad-shape")
for fn, a in [("inv", np.ones((2, 3))), ("inv", np.ones(3)), ("det", np.ones(3)),
              ("det", np.ones((2, 3))), ("cholesky", np.ones((2, 3))),
              ("cholesky", np.ones(3)), ("cho_factor", np.ones((2, 3))),
              ("qr", np.ones(3)), ("lu", np.ones(3)), ("lu_factor", np.ones(3))]:
    add("scipy", fn, args_of(lambda a=a: a.copy()), {}, "bad-shape", a.shape)
add("scipy", "qr", args_of(lambda: np.eye(2)), {"mode": "bogus"}, "bad-mode")
add("scipy", "qr", args_of(lambda: np.eye(2)), {"mode": "qr"}, "legacy-mode")
add("scipy", "lu_solve", args_of(lu_of(mat(1, (3, 3), "f8", "F"), {}),
                                 lambda: np.ones(2)), {}, "bad-shape")
add("scipy", "cho_solve", args_of(chol_of(mat(1, (3, 3), "f8", "F", "spd"), {}),
                                  lambda: np.ones(2)), {}, "bad-shape")

# trans spellings: accepted where SciPy accepts them (F- and C-ordered a)
for t in (0, 1, 2, True, False, None, 1.0, "N", "T", "C", "n", "t", 3, -1, "1"):
    for layout in ("C", "F"):
        add("scipy", "solve_triangular",
            args_of(mat(2, (4, 4), "f8", layout, "upper"), rhs(2, (4,), "f8", "C")),
            {"trans": t}, "trans", layout)
    add("scipy", "lu_solve", args_of(lu_of(mat(2, (4, 4), "f8", "F"), {}),
                                     rhs(2, (4,), "f8", "C")), {"trans": t}, "trans")

# singular and ill-conditioned matrices (exact zero pivots raise, tiny ones warn)
SINGULAR = [
    np.array([[1., 2.], [2., 4.]]),
    np.array([[1., 2., 3.], [4., 5., 6.], [7., 8., 9.]]),
    np.array([[2., 4., 1.], [1., 2., 5.], [3., 6., 2.]]),
    np.zeros((3, 3)),
    np.array([[0., 1.], [1., 0.]]) * 0 + np.array([[0., 0.], [0., 1.]]),
]
ILL = [np.array([[1., 2.], [3., 4. + 1e-15]]) * np.array([1., 1e-17]),
       1.0 / (np.arange(1, 13)[:, None] + np.arange(12)[None, :])]
# Ill-conditioned ones: results carry errors up to cond * u that depend on how the
# arithmetic is ordered (the BLAS kernel, the emulation), so only their finiteness
# is compared here; test_ill_conditioned_results_are_backward_stable judges them.
for i, a in enumerate(SINGULAR + ILL):
    n = a.shape[0]
    vals = {"values": "ill"} if i >= len(SINGULAR) else {}
    for fn, kw in [("solve", {}), ("solve", {"assume_a": "sym"}), ("solve", {"assume_a": "gen"}),
                   ("inv", {}), ("lu_factor", {}), ("det", {}), ("lu", {})]:
        if fn == "solve":
            add("scipy", fn, args_of(lambda a=a: a.copy(order="F"), lambda n=n: np.ones(n)),
                kw, "singular", i, **vals)
        else:
            add("scipy", fn, args_of(lambda a=a: a.copy(order="F")), kw, "singular", i, **vals)
    add("scipy", "lu_solve", args_of(lu_of(lambda a=a: a.copy(order="F"), {}),
                                     lambda n=n: np.ones(n)), {}, "singular", i, **vals)

# symmetric singular / indefinite: SciPy's symmetric-indefinite path (result + warning)
add("scipy", "solve", args_of(lambda: np.array([[1., 2.], [2., 4.]]), lambda: np.ones(2)),
    {"assume_a": "sym"}, "sym-singular")
add("scipy", "solve", args_of(lambda: np.array([[0., 1., 2.], [1., 0., 3.], [2., 3., 0.]]),
                              lambda: np.ones(3)), {}, "sym-indefinite")

# structured assume_a reads only its band / triangle
for assume, kw in [("tridiagonal", {}), ("banded", {}), ("lower triangular", {}),
                   ("upper triangular", {}), ("diagonal", {}), ("sym", {"lower": True}),
                   ("pos", {}), ("her", {})]:
    for dt in ("f8", "c16"):
        add("scipy", "solve", args_of(mat(11, (6, 6), dt, "F", "spd"), rhs(11, (6, 2), dt, "F")),
            {"assume_a": assume, **kw}, "band-only", dt)

# lstsq: rank decisions (cond <= 0 is machine epsilon, as LAPACK's gelsd)
def _rank_deficient(m=8, n=4, seed=5):
    r = _rng(seed)
    x = r.standard_normal((m, n))
    x[:, -1] = x[:, 0] + x[:, 1]
    return x


for cond in (None, 0.0, -1.0, 1e-3, 1e-300, 2.0):
    for drv in (None, "gelss", "gelsy"):
        add("scipy", "lstsq", args_of(_with(_rank_deficient), rhs(9, (8,), "f8", "F")),
            {"cond": cond, **({"lapack_driver": drv} if drv else {})}, "rank-deficient")
        add("scipy", "lstsq", args_of(mat(9, (8, 4), "f8", "F"), rhs(9, (8,), "f8", "F")),
            {"cond": cond, **({"lapack_driver": drv} if drv else {})}, "full-rank")

# ---------------------------------------------------------------- numpy.linalg
NP_DTYPES = ("f4", "f8", "c8", "c16", "i8", "i2", "?")
for dt in NP_DTYPES:
    for layout in ("C", "F", "strided", "neg"):
        s = len(CASES)
        add("numpy", "solve", args_of(mat(s, (5, 5), dt, layout), rhs(s, (5, 3), dt, layout)), {},
            dt, layout)
        add("numpy", "solve", args_of(mat(s, (5, 5), dt, layout), rhs(s, (5,), dt, layout)), {},
            "vec", dt, layout)
        add("numpy", "inv", args_of(mat(s, (5, 5), dt, layout)), {}, dt, layout)
        add("numpy", "det", args_of(mat(s, (5, 5), dt, layout)), {}, dt, layout)
        add("numpy", "slogdet", args_of(mat(s, (5, 5), dt, layout)), {}, dt, layout)
        add("numpy", "cholesky", args_of(mat(s, (5, 5), dt, layout, "spd")), {}, dt, layout)
        add("numpy", "cholesky", args_of(mat(s, (5, 5), dt, layout, "spd")), {"upper": True},
            dt, layout)
        for mode in ("reduced", "complete", "r", "raw"):
            for shape in ((6, 4), (4, 6)):
                add("numpy", "qr", args_of(mat(s, shape, dt, layout)), {"mode": mode}, dt,
                    layout, "x".join(map(str, shape)))
        for shape, bshape in (((7, 4), (7, 2)), ((7, 4), (7,)), ((4, 6), (4, 2))):
            add("numpy", "lstsq", args_of(mat(s, shape, dt, layout), rhs(s, bshape, dt, layout)),
                {}, dt, layout, "x".join(map(str, shape)), "x".join(map(str, bshape)))
for shape in ((2, 4, 4), (3, 1, 4, 4), (2, 5, 3)):
    for mode in ("reduced", "complete", "r", "raw"):
        add("numpy", "qr", args_of(mat(len(CASES), shape, "f8", "F")), {"mode": mode},
            "x".join(map(str, shape)))
for shape in ((2, 4, 4), (3, 1, 4, 4)):
    for fn in ("solve", "inv", "det", "slogdet", "cholesky"):
        s = len(CASES)
        kind = "spd" if fn == "cholesky" else "gen"
        args = (args_of(mat(s, shape, "f8", "C", kind), rhs(s, (2, 4, 3), "f8", "C"))
                if fn == "solve" else args_of(mat(s, shape, "f8", "C", kind)))
        add("numpy", fn, args, {}, "x".join(map(str, shape)))
for rcond in (None, 0.0, -1.0, 1e-3):
    add("numpy", "lstsq", args_of(_with(_rank_deficient), rhs(9, (8,), "f8", "F")),
        {"rcond": rcond}, "rank-deficient")
    add("numpy", "lstsq", args_of(mat(9, (8, 4), "f8", "F"), rhs(9, (8, 2), "f8", "F")),
        {"rcond": rcond}, "full-rank")
for i, a in enumerate(SINGULAR + ILL):
    n = a.shape[0]
    vals = {"values": "ill"} if i >= len(SINGULAR) else {}
    add("numpy", "solve", args_of(lambda a=a: a.copy(), lambda n=n: np.ones(n)), {},
        "singular", i, **vals)
    add("numpy", "inv", args_of(lambda a=a: a.copy()), {}, "singular", i, **vals)
    add("numpy", "cholesky", args_of(lambda a=a: a.copy()), {}, "singular", i, **vals)
for bad in (np.nan, np.inf):
    for fn in ("solve", "inv", "det", "cholesky", "qr"):
        args = (args_of(_with(_nonfinite(bad)), rhs(3, (4, 2), "f8", "F")) if fn == "solve"
                else args_of(_with(_nonfinite(bad))))
        add("numpy", fn, args, {}, str(bad), values="nonfinite")
for fn, a, b in [("solve", np.eye(3), np.ones(2)), ("solve", np.ones((3, 2)), np.ones(3)),
                 ("lstsq", np.ones((3, 2)), np.ones(2)), ("lstsq", np.ones(3), np.ones(3))]:
    _pair(fn, a, b, {}, "bad-shape", api="numpy")
for fn, a in [("inv", np.ones((2, 3))), ("inv", np.ones(3)), ("cholesky", np.ones((2, 3))),
              ("det", np.ones(3)), ("qr", np.ones(3))]:
    add("numpy", fn, args_of(lambda a=a: a.copy()), {}, "bad-shape", a.shape)


# ---------------------------------------------------------------- spectral decompositions
# Vectors are unique up to a sign (a phase) per column: each result is compared with its
# phases fixed (``canon``); singular values and eigenvalues are compared as they are.
# Full-size U / Vh of rectangular matrices (a basis of a complement, not unique) are not
# in the grid (tests/linalg/test_numpy_spectral.py checks them by their residuals).

def _phase(x):
    """Per column of `x` (float64 / complex128): the unit phase (sign) of its entry of
    largest modulus (the grid's seeded matrices have no near ties there). A rounded
    column's phase is within one rounding of the exact one."""
    if x.size == 0:
        return np.ones(x.shape[:-2] + (1, x.shape[-1]), dtype=x.dtype)
    i = np.argmax(np.abs(x), axis=-2)[..., None, :]
    p = np.take_along_axis(x, i, axis=-2)
    ap = np.abs(p)
    return np.where(ap > 0, p / np.where(ap > 0, ap, 1), 1)


def _retuple(res, parts):
    return type(res)(*parts) if hasattr(res, "_fields") else type(res)(parts)


def _hi(x):
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def canon_eigh(res):
    """``(w, v)`` with each eigenvector's phase fixed (in double, rounded back: the
    layout and dtype stay)."""
    if not isinstance(res, tuple) or len(res) != 2:
        return res
    w, v = res
    v2 = _hi(v)
    return _retuple(res, (w, (v2 * _phase(v2).conj()).astype(v.dtype)))


def canon_svd(res):
    """``(u, s, vh)`` with the phase of each singular pair fixed by its column of u."""
    if not isinstance(res, tuple) or len(res) != 3:
        return res
    u, s, vh = res
    k = s.shape[-1]
    u2, vh2 = _hi(u), _hi(vh)
    ph = _phase(u2[..., :k])
    u2[..., :k] *= ph.conj()
    vh2[..., :k, :] *= np.swapaxes(ph, -1, -2)
    return _retuple(res, (u2.astype(u.dtype), s, vh2.astype(vh.dtype)))


#: The vectors' roundings: the result's and the canonical phase's, each up to sqrt(2) half
#: ulps for a complex entry (3 float32 roundings cover 2 sqrt(2)).
SPECTRAL_DTYPES = ("f4", "f8", "c8", "c16", "i8")
SPECTRAL_LAYOUTS = ("C", "F", "strided")


def spectral(api, fn, shape, kind, kwargs, dtypes=SPECTRAL_DTYPES, layouts=SPECTRAL_LAYOUTS,
             canon=None, **opts):
    for dt in dtypes:
        for layout in layouts:
            add(api, fn, args_of(mat(len(CASES), shape, dt, layout, kind)), kwargs,
                "x".join(map(str, shape)), dt, layout, emulated=min(shape) >= 2,
                canon=canon, roundings={canon_eigh: (1, 3), canon_svd: (3, 1, 3)}.get(canon),
                **opts)


# numpy.linalg
for uplo, layouts in (("L", SPECTRAL_LAYOUTS), ("U", ("F",))):
    spectral("numpy", "eigh", (5, 5), "her", {"UPLO": uplo}, layouts=layouts, canon=canon_eigh)
    spectral("numpy", "eigvalsh", (5, 5), "her", {"UPLO": uplo}, layouts=layouts[:2],
             dtypes=SPECTRAL_DTYPES + ("?",))
spectral("numpy", "eigh", (5, 5), "gen", {}, layouts=("C",), canon=canon_eigh)  # lower read
for shape in ((5, 5), (6, 4), (4, 6)):
    spectral("numpy", "svd", shape, "gen", {"full_matrices": False}, layouts=("C", "strided"),
             canon=canon_svd)
    spectral("numpy", "svd", shape, "gen", {"compute_uv": False},
             dtypes=SPECTRAL_DTYPES + ("?",), layouts=("F",))
    spectral("numpy", "pinv", shape, "gen", {}, layouts=("C", "F"))
    spectral("numpy", "matrix_rank", shape, "gen", {}, layouts=("C",))
spectral("numpy", "svd", (5, 5), "gen", {}, layouts=("C",), canon=canon_svd)
spectral("numpy", "svd", (5, 5), "her", {"hermitian": True}, layouts=("C", "F"),
         canon=canon_svd)
spectral("numpy", "pinv", (5, 5), "her", {"hermitian": True}, layouts=("C",))
for kw in ({"rcond": 1e-10}, {"rtol": None}, {"rtol": 1e-10}):
    add("numpy", "pinv", args_of(_with(_rank_deficient)), kw, "rank-deficient")
for kw in ({}, {"tol": 1e-6}, {"rtol": 1e-8}, {"hermitian": True}):
    add("numpy", "matrix_rank", args_of(_with(lambda: _rank_deficient(6, 6))), kw,
        "rank-deficient")
for fn, kind, canon in (("eigh", "her", canon_eigh), ("eigvalsh", "her", None),
                        ("svd", "gen", canon_svd), ("pinv", "gen", None),
                        ("matrix_rank", "gen", None)):
    for shape, dtypes in (((2, 4, 4), ("f4", "f8")), ((3, 1, 4, 4), ("c16",)),
                          ((0, 3, 3), ("f8",)), ((0, 0), ("f4",))):
        spectral("numpy", fn, shape, kind, {"full_matrices": False} if fn == "svd" else {},
                 dtypes=dtypes, layouts=("C",), canon=canon)
for fn in ("eigh", "eigvalsh", "svd", "pinv", "matrix_rank"):
    for bad in (np.nan, np.inf):
        add("numpy", fn, args_of(_with(_nonfinite(bad))), {}, str(bad), values="nonfinite",
            canon={"eigh": canon_eigh, "svd": canon_svd}.get(fn))
for fn, a, kw in [("eigh", np.ones((2, 3)), {}), ("eigh", np.ones(3), {}),
                  ("eigh", np.eye(2), {"UPLO": "X"}), ("eigvalsh", np.ones((2, 3)), {}),
                  ("svd", np.ones(3), {}), ("svd", np.ones((2, 3)), {"hermitian": True}),
                  ("pinv", np.ones(3), {}), ("pinv", np.eye(2), {"rcond": 0.1, "rtol": 0.1}),
                  ("pinv", np.eye(2, dtype=int), {"rtol": None}),
                  ("matrix_rank", np.eye(2), {"tol": 0.1, "rtol": 0.1}),
                  ("matrix_rank", np.ones((2, 3)), {"hermitian": True})]:
    add("numpy", fn, args_of(lambda a=a: a.copy()), kw, "bad-input", a.shape)

# scipy.linalg
for lower, layouts in ((True, SPECTRAL_LAYOUTS), (False, ("C",))):
    spectral("scipy", "eigh", (5, 5), "her", {"lower": lower}, layouts=layouts,
             canon=canon_eigh)
    spectral("scipy", "eigvalsh", (5, 5), "her", {"lower": lower}, layouts=("F",))
spectral("scipy", "eigh", (5, 5), "her", {"eigvals_only": True}, layouts=("C",))
spectral("scipy", "eigh", (5, 5), "her", {"overwrite_a": True}, layouts=("F",),
         canon=canon_eigh, scratch="any")
for shape in ((5, 5), (6, 4), (4, 6)):
    spectral("scipy", "svd", shape, "gen", {"full_matrices": False}, layouts=("F", "strided"),
             canon=canon_svd)
    spectral("scipy", "svd", shape, "gen", {"compute_uv": False}, layouts=("C",))
    spectral("scipy", "svdvals", shape, "gen", {}, layouts=("F",))
    spectral("scipy", "pinv", shape, "gen", {}, layouts=("C",))
    spectral("scipy", "polar", shape if shape[0] >= shape[1] else shape[::-1], "gen", {},
             layouts=("C",))
spectral("scipy", "svd", (5, 5), "gen", {}, layouts=("C",), canon=canon_svd)
spectral("scipy", "svd", (6, 4), "gen", {"full_matrices": False, "overwrite_a": True},
         layouts=("F",), canon=canon_svd, scratch="any")
spectral("scipy", "pinv", (6, 4), "gen", {"return_rank": True}, layouts=("C",))
spectral("scipy", "polar", (4, 6), "gen", {"side": "left"}, layouts=("C",))
spectral("scipy", "polar", (5, 5), "gen", {"side": "left"}, layouts=("F",))
for kw in ({"atol": 1e-10}, {"rtol": 1e-10}, {"return_rank": True}):
    add("scipy", "pinv", args_of(_with(_rank_deficient)), kw, "rank-deficient")
for fn, kw in (("eigh", {}), ("eigvalsh", {}), ("svd", {}), ("svdvals", {}), ("pinv", {}),
               ("polar", {})):
    for bad in (np.nan, np.inf):
        for finite in (True, False) if fn != "polar" else (None,):
            extra = {} if finite is None else {"check_finite": finite}
            add("scipy", fn, args_of(_with(_nonfinite(bad))), {**kw, **extra}, str(bad),
                values="nonfinite", canon={"eigh": canon_eigh, "svd": canon_svd}.get(fn))
for fn, a in [("eigh", np.ones((2, 3))), ("eigh", np.ones(3)), ("eigvalsh", np.ones((2, 3))),
              ("svd", np.ones(3)), ("svdvals", np.ones(3)), ("pinv", np.ones(3)),
              ("polar", np.ones(3)), ("eigh", np.zeros((0, 0))), ("svd", np.zeros((0, 3)))]:
    add("scipy", fn, args_of(lambda a=a: a.copy()), {}, "bad-shape", a.shape)

IDS = [c.id for c in CASES]
_dupes = {i for i in IDS if IDS.count(i) > 1}
for c in CASES:
    if c.id in _dupes:
        c.id = f"{c.id}#{CASES.index(c)}"


#: Known differences still to fix (strict: a fix fails here until its entry goes).
KNOWN: dict = {}


def _param(case):
    reason = next((r for (api, fn, kw), r in KNOWN.items()
                   if case.api == api and case.fn == fn and case.kwargs.get(kw)), None)
    if reason is None:
        return case
    return pytest.param(case, marks=pytest.mark.xfail(reason=reason, strict=True))


@pytest.mark.parametrize("candidate", ["ozlinalg", "backend"])
@pytest.mark.parametrize("case", [_param(c) for c in CASES], ids=lambda c: f"{c.api}.{c.id}")
def test_fidelity(case, candidate):
    """One body: the reference and the candidate on identical inputs."""
    check(case, candidate)


@pytest.mark.parametrize("i", range(len(ILL)))
def test_ill_conditioned_results_are_backward_stable(i):
    """What the grid does not compare on ill-conditioned matrices: the solutions of
    ``solve`` and ``lu_solve`` and the inverse have normwise backward errors at
    FP64 level, ``||b - a x|| <= 4 n u (||a|| ||x|| + ||b||)`` (inf-norms; for inv,
    column by column of ``a X = I``), the residual computed exactly."""
    from ozlinalg.testing import ExactReference

    a = ILL[i]
    n = a.shape[0]
    u = 2.0**-53

    def backward_error(x, b):
        # [a, -b] @ [x; I] exactly, rounded once: the residual a x - b
        r = ExactReference(np.hstack([a, -b]), np.vstack([x, np.eye(b.shape[1])])).hi
        return np.abs(r).max(axis=0) / (np.linalg.norm(a, np.inf) * np.abs(x).max(axis=0)
                                        + np.abs(b).max(axis=0))

    b = np.ones((n, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sl.LinAlgWarning)
        for cand in ("ozlinalg", "backend"):
            sol = CANDIDATES["scipy"][cand]
            xs = [sol("solve")(a, b), sol("lu_solve")(sol("lu_factor")(a), b)]
            for x in xs:
                assert np.all(backward_error(x, b) <= 4 * n * u)
            inv = sol("inv")(a)
            assert np.all(backward_error(inv, np.eye(n)) <= 4 * n * u)


@pytest.mark.parametrize("fn", ["solve_triangular", "lu_solve", "cho_solve"])
def test_broadcast_b_not_overwritten(fn):
    """A 2-D ``b`` broadcast against a stack of matrices with
    ``overwrite_b=True``: SciPy 1.17 solves every slice in the same buffer
    (the broadcast view), so each slice after the first starts from the
    previous slice's solution. ozlinalg writes nothing into a broadcast
    ``b`` (it is read-only memory for the stack) and returns what SciPy
    returns without ``overwrite_b`` (docs/backend.md)."""
    kind = {"solve_triangular": "lower", "lu_solve": "gen", "cho_solve": "spd"}[fn]
    a = mat(1, (2, 4, 4), "f8", "F", kind)
    first = {"solve_triangular": a, "lu_solve": lu_of(a, {}), "cho_solve": chol_of(a, {})}[fn]
    kw = {"lower": True} if fn == "solve_triangular" else {}
    b0 = rhs(1, (4, 3), "f8", "F")
    expect = native(sl, fn)(first(), b0(), **kw)
    for cand in ("ozlinalg", "backend"):
        b = b0()
        x = CANDIDATES["scipy"][cand](fn)(first(), b, overwrite_b=True, **kw)
        assert_close(expect, x, fn)
        np.testing.assert_array_equal(b, b0())


@pytest.mark.parametrize("dtype", ["f4", "f8", "c16"])
def test_scipy_crash_case(dtype):
    """``solve(a, b, overwrite_a=True)`` with the default ``assume_a=None`` on a
    Fortran-ordered symmetric indefinite ``a``: SciPy 1.17.1's symmetric
    fallback reads the ``a`` its Cholesky attempt destroyed and crashes the
    interpreter (not run here). ozlinalg tries Cholesky on a copy and gives
    SciPy's answer for the same call without ``overwrite_a``."""
    a = mat(3, (5, 5), dtype, "F", "sym")
    b = rhs(3, (5, 2), dtype, "F")
    expect = native(sl, "solve")(a(), b())
    fp64 = native(sl, "solve")(upcast(a()), upcast(b()))  # single: the value reference
    for cand in ("ozlinalg", "backend"):
        x = CANDIDATES["scipy"][cand]("solve")(a(), b(), overwrite_a=True)
        assert x.dtype == expect.dtype and x.shape == expect.shape
        if expect.dtype in SINGLE:
            assert_single_close(expect, x, fp64, "solve")
        else:
            assert_close(expect, x, "solve")


def _omp(X, y, n_nonzero):
    """Orthogonal matching pursuit written the way scikit-learn's
    ``_cholesky_omp`` is: the Cholesky factor ``L`` (C-ordered, X's dtype)
    grows by one row per step through ``solve_triangular(L, L[k, :k],
    lower=True, overwrite_b=True)``, whose return value is ignored."""
    X = X.copy(order="F")
    alpha = X.T @ y
    residual = y.copy()
    idx = np.arange(X.shape[1])
    L = np.empty((n_nonzero, n_nonzero), dtype=X.dtype)
    for k in range(n_nonzero):
        lam = k + int(np.argmax(np.abs(X[:, k:].T @ residual)))
        if k:
            L[k, :k] = X[:, :k].T @ X[:, lam]
            sl.solve_triangular(L[:k, :k], L[k, :k], trans=0, lower=True, overwrite_b=True,
                                check_finite=False)
            L[k, k] = np.sqrt(np.linalg.norm(X[:, lam]) ** 2 - np.linalg.norm(L[k, :k]) ** 2)
        else:
            L[0, 0] = np.linalg.norm(X[:, lam])
        X[:, [k, lam]] = X[:, [lam, k]]
        alpha[[k, lam]] = alpha[[lam, k]]
        idx[[k, lam]] = idx[[lam, k]]
        gamma = sl.cho_solve((L[:k + 1, :k + 1], True), alpha[:k + 1])
        residual = y - X[:, :k + 1] @ gamma
    return gamma, idx[:n_nonzero]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ml_pattern_in_place_triangular_update(dtype):
    """The machine-learning pattern (orthogonal matching pursuit): the solution must land in
    ``b`` (float32 included), or the fitted coefficients are silently wrong."""
    rng = _rng(99)
    X = rng.standard_normal((60, 30)).astype(dtype)
    X /= np.linalg.norm(X, axis=0)
    coef = np.zeros(30)
    coef[[3, 7, 11, 19, 25]] = [2.0, -1.5, 1.0, 3.0, -2.5]
    y = (X @ coef).astype(dtype)
    expect, sel = _omp(X, y, 5)
    with ozlinalg.backend(**backend_opts()), ozlinalg.profile() as prof:
        got, sel_got = _omp(X, y, 5)
    assert prof.emulated_gemm_calls > 0
    np.testing.assert_array_equal(sel_got, sel)
    # The algorithm runs in X's precision (its own products are NumPy's), the
    # coefficients come from the normal equations (Cholesky of the Gram matrix):
    # within n cond(X_S)**2 u of the exact-arithmetic ones, u of X's dtype.
    kappa = np.linalg.cond(X[:, np.sort(sel)].astype(np.float64))
    bound = X.shape[0] * kappa**2 * np.finfo(dtype).eps / 2
    if dtype == np.float32:
        # SciPy's float32 run is no reference (its error depends on the BLAS
        # kernel): the FP64 run on the same values is
        ref64, sel64 = _omp(X.astype(np.float64), y.astype(np.float64), 5)
        np.testing.assert_array_equal(sel_got, sel64)
        assert np.abs(got - ref64).max() <= bound * np.abs(ref64).max()
    else:
        assert_close(expect, got, "omp coefficients")
    # and against the model's coefficients (y = X coef, rounded to X's dtype)
    truth = coef[sel]
    assert np.abs(got - truth).max() <= 2 * bound * np.abs(truth).max()


def test_lstsq_inf_raises_instead_of_hanging():
    """Deliberately safer than native: LAPACK's gelsd does not return on Inf
    with ``check_finite=False``; ozlinalg's QR path sees a non-finite factor
    and raises LinAlgError before any native call (docs/backend.md)."""
    a = matrix(4, (6, 4), "f8")
    a[1, 2] = np.inf
    for f in (ol.lstsq, lambda a, b, **k: onl.lstsq(a, b)):
        with pytest.raises(np.linalg.LinAlgError):
            f(a, np.ones(6), check_finite=False)


@pytest.mark.parametrize("overwrite", [True, False])
def test_lu_trailing_update_in_chunks(monkeypatch, overwrite):
    """getrf's chunked updates (column chunks; in the caller's buffer also pieces of
    the inner dimension: the in-place LU's memory bound) give LAPACK's factors, in
    the caller's buffer when overwrite_a allows."""
    import importlib

    getrf_mod = importlib.import_module("ozlinalg.lapack.getrf")
    a0 = matrix(17, (96, 96), "f8")

    def factor():
        a = np.array(a0, order="F")
        with ozlinalg.profile() as prof:
            lu, piv = ozlinalg.lapack.getrf(a, block_size=8, min_size=0, overwrite_a=overwrite)
        assert (lu is a) == overwrite
        return lu, piv, prof.emulated_gemm_calls

    _, _, whole = factor()
    monkeypatch.setattr(getrf_mod, "MIN_CHUNK_COLUMNS_IN_PLACE", 8)
    monkeypatch.setattr(getrf_mod, "MIN_CHUNK_COLUMNS", 8)
    assert getrf_mod.trailing_chunk(96, 8, in_place=overwrite) == 8
    assert getrf_mod.inner_limit(96, 8) == 24
    lu, piv, chunked = factor()
    assert chunked > whole  # more, smaller products
    ref_lu, ref_piv = native(sl, "lu_factor")(a0)
    np.testing.assert_array_equal(piv, ref_piv)
    assert_close(ref_lu, lu, "lu")
