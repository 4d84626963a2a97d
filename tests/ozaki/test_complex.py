"""Complex products (ZGEMM) from real emulated products, against exact references."""
import numpy as np
import pytest

import ozlinalg
from ozlinalg.engines import get_engine
from ozlinalg.ozaki.complex import COMPLEX_SCHEMES, complex_matmul
from ozlinalg.ozaki.crt import crt_matmul_2d
from ozlinalg.testing import ExactReference, error_stats, random_matrix, textbook_matmul

flint = pytest.importorskip("flint")

ENG = get_engine(np)

REAL_MATMULS = {
    "crt-accurate": lambda x, y: crt_matmul_2d(np, ENG, x, y, moduli=20, scaling="accurate"),
    "crt-fast-auto": lambda x, y: crt_matmul_2d(np, ENG, x, y, moduli="auto", scaling="fast",
                                                max_moduli=32),
    "hybrid-ef": lambda x, y: ozlinalg.matmul(x, y, method="hybrid-ef"),
    "bitmask": lambda x, y: ozlinalg.matmul(x, y, method="bitmask"),
}


def complex_pair(rng, m, n, p, phi=1.0, imag_scale=1.0):
    a = random_matrix(rng, m, n, phi) + 1j * imag_scale * random_matrix(rng, m, n, phi)
    b = random_matrix(rng, n, p, phi) + 1j * imag_scale * random_matrix(rng, n, p, phi)
    return a, b


class ExactComplex:
    """Exact real and imaginary parts of a @ b (stacked real products)."""

    def __init__(self, a, b):
        ar, ai = np.real(a).astype(float), np.imag(a).astype(float)
        br, bi = np.real(b).astype(float), np.imag(b).astype(float)
        self.re = ExactReference(np.hstack([ar, -ai]), np.vstack([br, bi]))
        self.im = ExactReference(np.hstack([ar, ai]), np.vstack([bi, br]))

    def max_errors(self, c):
        return (error_stats(self.re.relative_errors(c.real))[0],
                error_stats(self.im.relative_errors(c.imag))[0])


@pytest.mark.parametrize("name", list(REAL_MATMULS))
@pytest.mark.parametrize("scheme", ["4m", "4m-fused"])
def test_4m_dgemm_level(rng, name, scheme):
    a, b = complex_pair(rng, 24, 160, 18)
    ref = ExactComplex(a, b)
    c = complex_matmul(REAL_MATMULS[name], a, b, scheme=scheme)
    assert c.dtype == np.complex128 and c.shape == (24, 18)
    nat = ref.max_errors(textbook_matmul(a, b))  # the DGEMM level on every machine
    emu = ref.max_errors(c)
    assert emu[0] <= nat[0] and emu[1] <= nat[1]


@pytest.mark.parametrize("name", ["crt-accurate", "hybrid-ef"])
def test_3m_equal_scales(rng, name):
    a, b = complex_pair(rng, 24, 160, 18)
    ref = ExactComplex(a, b)
    emu = ref.max_errors(complex_matmul(REAL_MATMULS[name], a, b, scheme="3m"))
    nat = ref.max_errors(textbook_matmul(a, b))  # the DGEMM level on every machine
    # Karatsuba's imaginary part is a difference of larger products: a few times
    # native's error at most on inputs with parts of one scale.
    assert emu[0] <= nat[0] and emu[1] <= 8 * nat[1]


def test_default_4m_beats_3m_when_parts_differ_in_scale(rng):
    a, b = complex_pair(rng, 20, 150, 16, imag_scale=1e-8)
    ref = ExactComplex(a, b)
    rm = REAL_MATMULS["crt-accurate"]
    nat = ref.max_errors(textbook_matmul(a, b))  # the DGEMM level on every machine
    e4 = ref.max_errors(complex_matmul(rm, a, b))  # default: 4m
    e3 = ref.max_errors(complex_matmul(rm, a, b, scheme="3m"))
    assert e4[0] <= nat[0] and e4[1] <= nat[1]
    assert e3[1] > 1e3 * max(e4[1], nat[1])


@pytest.mark.parametrize("scheme", COMPLEX_SCHEMES)
def test_mixed_real_complex_and_exact_integers(rng, scheme):
    rm = REAL_MATMULS["crt-accurate"]
    a = rng.integers(-50, 50, (7, 11)) + 1j * rng.integers(-50, 50, (7, 11))
    b = rng.integers(-50, 50, (11, 5)) + 1j * rng.integers(-50, 50, (11, 5))
    np.testing.assert_array_equal(complex_matmul(rm, a, b, scheme), a @ b)
    ar = a.real.copy()
    np.testing.assert_array_equal(complex_matmul(rm, ar, b, scheme), ar @ b)
    br = b.real.copy()
    np.testing.assert_array_equal(complex_matmul(rm, a, br, scheme), a @ br)
    out = complex_matmul(rm, ar, br, scheme)
    assert out.dtype == np.complex128
    np.testing.assert_array_equal(out, ar @ br)


def test_real_products_used(rng):
    calls = []

    def rm(x, y):
        calls.append((x.shape, y.shape))
        assert x.dtype == np.float64 and y.dtype == np.float64
        return x @ y

    a, b = complex_pair(rng, 3, 4, 5)
    complex_matmul(rm, a, b, "4m")
    complex_matmul(rm, a, b, "4m-fused")
    complex_matmul(rm, a, b, "3m")
    assert calls == [((6, 4), (4, 10)), ((6, 8), (8, 5))] + [((3, 4), (4, 5))] * 3


def test_empty_and_errors(rng):
    rm = np.matmul
    assert complex_matmul(rm, np.zeros((0, 3), complex), np.zeros((3, 2), complex)).shape == (0, 2)
    assert np.all(complex_matmul(rm, np.zeros((2, 0), complex), np.zeros((0, 2), complex)) == 0)
    with pytest.raises(ValueError, match="scheme"):
        complex_matmul(rm, np.ones((2, 2), complex), np.ones((2, 2), complex), scheme="2m")
    with pytest.raises(ValueError, match="inner"):
        complex_matmul(rm, np.ones((2, 3), complex), np.ones((2, 2), complex))
    with pytest.raises(ValueError, match="2-D"):
        complex_matmul(rm, np.ones(3, complex), np.ones((3, 2), complex))
