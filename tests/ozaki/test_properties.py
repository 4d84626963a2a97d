"""Property-based tests of the emulated GEMM against the exact product.

The property checked for every generated input is the deterministic error
bound of the Ozaki scheme (docs/ozaki.md): with s slices of w bits, rows of A
normalized by 2**e_i and columns of B by 2**f_j,

    |C_hat - C|_ij <= 2 k (s + 1) 2**(-w s) 2**(e_i + f_j) + 4 (s + 2) u (|A||B|)_ij

(truncation of the triangular slice product, then FP64 rounding). Nothing
may be silently wrong: non-finite entries must match native FP64 exactly.
"""
import math
import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
pytest.importorskip("flint")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ozlinalg  # noqa: E402
from ozlinalg.ozaki.balance import balance_inner, min_shift_for  # noqa: E402
from ozlinalg.testing import ExactReference, textbook_matmul  # noqa: E402

U = 2.0**-53
INT8_METHODS = ["bitmask", "rn", "bitmask-ef", "hybrid-ef"]
DIMS = st.sampled_from([0, 1, 2, 3, 5, 7, 13, 17, 31, 64])
# Example counts come from the hypothesis profile (tests/conftest.py): "ci" by
# default, HYPOTHESIS_PROFILE=deep for a long run.
SETTINGS = settings(deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def matrices(draw, shape, max_exp=1000, allow_special=False):
    """Entries m * 2**e with m in [-1, 1) and exponents anywhere in float64's range."""
    rows, cols = shape
    size = rows * cols
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    spread = draw(st.sampled_from([0, 1, 4, 30, 200, max_exp]))
    center = draw(st.integers(-max_exp + spread, max_exp - spread)) if spread < max_exp else 0
    mant = rng.uniform(-1, 1, size)
    exps = rng.integers(center - spread, center + spread + 1, size)
    a = np.ldexp(mant, exps).reshape(rows, cols)
    kind = draw(st.sampled_from(["plain", "zeros", "subnormal", "integers", "special"]
                                if allow_special else ["plain", "zeros", "subnormal", "integers"]))
    if kind == "zeros" and size:
        a[rng.random(a.shape) < 0.3] = 0.0
    elif kind == "subnormal" and size:
        mask = rng.random(a.shape) < 0.3
        a[mask] = rng.uniform(-1, 1, int(mask.sum())) * 2.0**-1060
    elif kind == "integers":
        a = rng.integers(-(2**30), 2**30, (rows, cols)).astype(float)
    elif kind == "special" and size:
        idx = rng.integers(0, size, max(1, size // 10))
        a.ravel()[idx] = rng.choice([np.inf, -np.inf, np.nan], idx.size)
    return a


def bound(a, b, s, width):
    """The deterministic error bound of the module docstring, entrywise."""
    k = a.shape[1]
    ea = np.frexp(np.abs(a).max(axis=1) if k else np.zeros(a.shape[0]))[1].astype(float)
    eb = np.frexp(np.abs(b).max(axis=0) if k else np.zeros(b.shape[1]))[1].astype(float)
    trunc = 2.0 * k * (s + 1) * 2.0 ** (-width * s)
    with np.errstate(over="ignore", under="ignore"):
        scale = np.ldexp(np.full((a.shape[0], b.shape[1]), trunc),
                         ea.astype(int)[:, None] + eb.astype(int)[None, :])
        absprod = np.abs(a) @ np.abs(b)
    return scale + 4 * (s + 2) * U * absprod


@st.composite
def problem(draw, allow_special=False):
    m, k, p = draw(DIMS), draw(DIMS), draw(DIMS)
    a = draw(matrices((m, k), allow_special=allow_special))
    b = draw(matrices((k, p), allow_special=allow_special))
    return a, b


# counts below auto's on purpose (this tests the error bound): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
@SETTINGS
@given(ab=problem(), method=st.sampled_from(INT8_METHODS), s=st.integers(1, 14),
       balance=st.sampled_from(["auto", True, False]))
def test_error_within_the_ozaki_bound(ab, method, s, balance):
    a, b = ab
    c = ozlinalg.matmul(a, b, method=method, slices=s, balance=balance)
    assert c.shape == (a.shape[0], b.shape[1]) and c.dtype == np.float64
    if c.size == 0:
        return
    ref = ExactReference(a, b)
    exact_fin = np.isfinite(ref.hi)
    # The bound holds for the operands actually split: balancing rescales the
    # inner dimension exactly (every term a_ik b_kj unchanged), moving the maxima.
    shift = min_shift_for(balance)
    lim = bound(*((a, b) if shift is None else balance_inner(np, a, b, shift)[:2]), s, 7)
    # Where the exact product overflows and the bound is finite, the result is that infinity.
    must_inf = ~exact_fin & np.isfinite(lim)
    np.testing.assert_array_equal(c[must_inf], ref.hi[must_inf])
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs((c - ref.hi) - ref.lo)
    # Gradual underflow: results below the normal range carry absolute spacing 2**-1074.
    ok = (err <= lim + 2.0**-1070) | ~exact_fin
    assert ok.all(), (method, s, float(np.max(err - lim)))


@SETTINGS
@given(ab=problem(allow_special=True), method=st.sampled_from(list(ozlinalg.METHODS)))
def test_non_finite_entries_match_native(ab, method):
    a, b = ab
    with np.errstate(all="ignore"), warnings.catch_warnings():
        # NaN inputs make matmul warn "invalid value" as NumPy does, and wide
        # spreads may exceed max_slices (an explicit AccuracyWarning): both fine here.
        warnings.simplefilter("ignore", ozlinalg.AccuracyWarning)
        want = a @ b
        c = ozlinalg.matmul(a, b, method=method)
    # Entries fed by an Inf/NaN input are native FP64 computed on those rows /
    # columns. Native kernels themselves disagree between NaN and inf there
    # (with an FMA, x*y + inf stays inf even when x*y overflows to -inf; without
    # one it is NaN), so the value class is compared: non-finite exactly where
    # native is, infinities of the same sign, finite values equal.
    fin_in = np.isfinite(a).all(axis=1)[:, None] & np.isfinite(b).all(axis=0)[None, :]
    special = ~fin_in
    got, nat = c[special], want[special]
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(nat))
    both_inf = np.isinf(got) & np.isinf(nat)
    np.testing.assert_array_equal(np.sign(got[both_inf]), np.sign(nat[both_inf]))
    fin = np.isfinite(nat)
    np.testing.assert_allclose(got[fin], nat[fin], rtol=1e-13, atol=0)
    # Entries fed by finite inputs never turn NaN, even where native FP64's
    # intermediate overflow does (inf - inf); the exact product decides them
    # (test_error_within_the_ozaki_bound).
    assert not np.isnan(c[fin_in]).any()


@SETTINGS
@given(k=st.sampled_from([1, 3, 1023, 1025, 4097, 65536]), seed=st.integers(0, 2**16),
       lo=st.sampled_from([-128, -127, -64]), hi=st.sampled_from([63, 64, 127]))
def test_engine_exact_on_full_int8_range(k, seed, lo, hi):
    from ozlinalg.engines.onednn import EngineUnavailable
    from ozlinalg.engines.select import cpu_engine

    for name in ("sgemm", "onednn", "avx2"):
        try:
            eng = cpu_engine(name)
        except EngineUnavailable:  # no INT8 engine here: the SGEMM one is checked
            continue
        rng = np.random.default_rng(seed)
        a = eng.empty_slices(2, 3, k, "bitmask")
        b = eng.empty_slices(2, 2, k, "bitmask")
        a[...] = rng.integers(lo, hi + 1, a.shape)
        b[...] = rng.choice([lo, hi], b.shape)
        bnd = max(abs(lo), abs(hi))
        got, _ = eng.int_matmul_sum(a, b, [(0, 1), (1, 0), (1, 1)], bnd, bnd)
        ai, bi = a.astype(np.int64), b.astype(np.int64)
        want = ai[0] @ bi[1].T + ai[1] @ bi[0].T + ai[1] @ bi[1].T
        np.testing.assert_array_equal(got, want)
        assert math.isfinite(float(got.sum()))


@st.composite
def inner_scaled(draw):
    """X D and D^-1 Y: a tame product whose inner dimension is scaled by up to 2**+-600."""
    m, k, p = draw(st.sampled_from([1, 3, 8])), draw(st.sampled_from([2, 17, 64])), \
        draw(st.sampled_from([1, 4, 9]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = draw(st.sampled_from([0, 10, 30, 60, 150, 600]))
    d = np.ldexp(1.0, rng.integers(-t, t + 1, k))
    return rng.uniform(-1, 1, (m, k)) * d[None, :], rng.uniform(-1, 1, (k, p)) / d[:, None]


@SETTINGS
@given(ab=st.one_of(problem(), inner_scaled()),
       method=st.sampled_from(INT8_METHODS + ["crt", "crt-fast"]),
       balance=st.sampled_from(["auto", False]))
def test_auto_is_never_silently_wrong(ab, method, balance):
    # slices="auto" either reaches about FP64 accuracy or says it could not
    # (AccuracyWarning): never a silent loss of adaptive counts on huge exponent
    # ranges. "About": within 1000x the max elementwise error of FP64 recursive
    # summation (textbook_matmul: the DGEMM level on every machine, where native
    # DGEMM's depends on the BLAS kernel; the calibration aims at 1x, this guards
    # the failure mode).
    a, b = ab
    with np.errstate(all="ignore"), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always", ozlinalg.AccuracyWarning)
        c = ozlinalg.matmul(a, b, method=method, balance=balance)
        native = textbook_matmul(a, b)
    if c.size == 0 or any(issubclass(x.category, ozlinalg.AccuracyWarning) for x in w):
        return
    ref = ExactReference(a, b)
    fin = np.isfinite(ref.hi) & (np.abs(ref.hi) >= 2.0**-1000)  # normal range results
    err = ref.relative_errors(c)[fin]
    nat = ref.relative_errors(native)[fin]
    if err.size:
        assert err.max() <= max(1e3 * nat.max(), 1e-12), (method, balance, err.max(), nat.max())


@SETTINGS
@given(ab=st.one_of(problem(), inner_scaled()),
       method=st.sampled_from(INT8_METHODS + ["crt", "crt-fast"]),
       count=st.sampled_from([4, 8, 9, 12, 16]), balance=st.sampled_from(["auto", False]))
def test_fixed_count_is_never_silently_wrong(ab, method, count, balance):
    # A fixed count too small for the inputs says so (AccuracyWarning naming auto's
    # count, ozlinalg.ozaki.counts.adequacy); without a warning the result is about native
    # accuracy, as test_auto_is_never_silently_wrong requires of auto.
    a, b = ab
    if method.startswith("crt"):
        count += 6  # moduli: 10 .. 22
    with np.errstate(all="ignore"), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always", ozlinalg.AccuracyWarning)
        c = ozlinalg.matmul(a, b, method=method, slices=count, balance=balance)
        native = a @ b
    if c.size == 0 or any(issubclass(x.category, ozlinalg.AccuracyWarning) for x in w):
        return
    ref = ExactReference(a, b)
    fin = np.isfinite(ref.hi) & (np.abs(ref.hi) >= 2.0**-1000)  # normal range results
    err = ref.relative_errors(c)[fin]
    nat = ref.relative_errors(native)[fin]
    if err.size:
        assert err.max() <= max(1e3 * nat.max(), 1e-12), (method, count, err.max(), nat.max())
