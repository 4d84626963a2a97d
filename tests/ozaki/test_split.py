"""The splits against the formulas of docs/ozaki.md (Parameters), written out literally."""
import numpy as np
import pytest

from ozlinalg.ozaki.split import normalize_rows, slice_layout, split_rows
from ozlinalg.testing import random_matrix


def sigma_hybrid(a, s, beta):
    """Hybrid split exactly as the seed writes it (sigma trick, fixed mu'')."""
    r = a.copy()
    mu = 2.0 ** np.ceil(np.log2(np.abs(a).max(axis=1))) * 2.0 ** (1 - beta)
    slices = []
    for t in range(1, s + 1):
        sigma = (0.75 * 2.0 ** (53 - beta * (t - 1)) * mu)[:, None]
        a_s = (r + sigma) - sigma
        slices.append(2.0 ** (beta * (t - 1)) * a_s / mu[:, None])
        r = r - a_s
    return np.array(slices)


def sigma_rn(a, s, beta):
    r = a.copy()
    slices = []
    for _ in range(s):
        m = np.abs(r).max(axis=1)
        mu = np.where(m > 0, 2.0 ** np.ceil(np.log2(np.where(m > 0, m, 1))) * 2.0 ** (1 - beta), 1)
        sigma = (0.75 * 2.0**53 * mu)[:, None]
        a_s = (r + sigma) - sigma
        slices.append(a_s / mu[:, None])
        r = r - a_s
    return np.array(slices)


def run_split(kind, a, s, beta=7):
    x, _ = normalize_rows(np, a)
    out = np.empty((s,) + a.shape, np.float32)
    scales = np.empty((s, a.shape[0]))
    split_rows(np, kind, x, s, beta, out, scales)
    return out, scales, x


@pytest.mark.parametrize("phi", [0.5, 4.0])
def test_hybrid_matches_sigma_formula(phi):
    rng = np.random.default_rng(5)
    a = random_matrix(rng, 17, 93, phi)
    x, _ = normalize_rows(np, a)
    out, scales, _ = run_split("hybrid", a, 10)
    np.testing.assert_array_equal(out, sigma_hybrid(x, 10, 7))
    assert np.abs(out).max() <= slice_layout("hybrid", 7)[1]


def test_rn_matches_sigma_formula():
    rng = np.random.default_rng(6)
    a = random_matrix(rng, 11, 70, 2.0)
    x, _ = normalize_rows(np, a)
    out, _, _ = run_split("rn", a, 8)
    np.testing.assert_array_equal(out, sigma_rn(x, 8, 7))


@pytest.mark.parametrize("kind", ["bitmask", "rn", "hybrid", "fp"])
def test_slices_reconstruct_the_input(kind):
    rng = np.random.default_rng(7)
    a = random_matrix(rng, 9, 50, 1.0)
    x0, _ = normalize_rows(np, a)
    s = 12
    width = 7
    out, scales, _ = run_split(kind, a, s, width)
    rec = sum(out[t].astype(float) * scales[t][:, None] for t in range(s))
    tol = 2.0 ** (-width * s + 1) if kind != "fp" else 2.0 ** (-width * (s - 1) - 10)
    assert np.abs(rec - x0).max() <= tol
    step, bound = slice_layout(kind, width)
    assert np.abs(out).max() <= bound
    assert np.array_equal(out, np.round(out)) or kind == "fp"
    if step is not None:  # fixed scales: slice t is 2**(-step) finer than slice t-1
        np.testing.assert_array_equal(scales[1:], scales[:-1] * 2.0**-step)


def test_bitmask_keeps_the_implicit_bit_of_subnormals():
    tiny = np.finfo(float).smallest_subnormal
    a = np.array([[5 * tiny, 3 * tiny, -7 * tiny]])
    out, scales, _ = run_split("bitmask", a, 2)
    # Leading chunk of the row maximum (7 ulp = 0b111) carries its top bit at 2**6.
    assert out[0, 0, 2] == -112 and out[0, 0, 0] == 80 and out[0, 0, 1] == 48


def test_normalize_rows_is_exact_and_bounded():
    a = np.array([[1e-320, 3e-310, 0.0], [1.7e308, -1.0, 2.0], [0.0, 0.0, 0.0]])
    x, e = normalize_rows(np, a)
    m = np.abs(x).max(axis=1)
    assert np.all((m[:2] >= 0.5) & (m[:2] < 1)) and m[2] == 0
    np.testing.assert_array_equal(np.ldexp(x[0], e[0]), a[0])
    assert e[2] == 0
