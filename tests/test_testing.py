"""ozlinalg.testing: the test matrices are the same on every machine."""
import math

import mpmath
import numpy as np
import pytest

from ozlinalg import testing
from ozlinalg.testing import portable_exp, random_matrix


def scalar_exp(x):
    """portable_exp's steps on Python floats: every operation one IEEE double
    rounding, whatever the CPU, so equal bits show that NumPy's SIMD loops took none
    of their own."""
    k = float(round(x * testing._INV_LN2))  # ties to even, as np.rint
    r = x - k * testing._LN2_HI
    r = r - k * testing._LN2_LO
    p = testing._EXP_TAYLOR[-1]
    for c in testing._EXP_TAYLOR[-2::-1]:
        p = p * r
        p = p + c
    return math.ldexp(p, int(k))


class TestPortableExp:
    def test_same_bits_as_one_rounding_per_operation(self, rng):
        x = np.concatenate([rng.standard_normal(3000) * 4, rng.uniform(-700, 700, 1000),
                            [0.0, -0.0, 0.5 * math.log(2), -0.5 * math.log(2), 1e-300]])
        got = portable_exp(x)
        want = np.array([scalar_exp(float(v)) for v in x])
        np.testing.assert_array_equal(got, want)

    def test_within_two_ulps(self, rng):
        x = np.concatenate([rng.standard_normal(500) * 4, rng.uniform(-700, 709, 200)])
        got = portable_exp(x)
        mpmath.mp.dps = 40
        for v, g in zip(x.tolist(), got.tolist()):
            ref = mpmath.exp(mpmath.mpf(v))
            assert abs(mpmath.mpf(g) - ref) <= 2 * math.ulp(float(ref)), v

    def test_special_values_and_shapes(self):
        x = np.array([np.inf, -np.inf, np.nan, 710.0, -746.0, 3e6, -3e6, 0.0])
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(portable_exp(x), np.exp(x))
        assert portable_exp(np.ones((0, 3))).shape == (0, 3)
        assert portable_exp(np.zeros((2, 3, 4))).shape == (2, 3, 4)
        assert float(portable_exp(1.0)) == pytest.approx(math.e, rel=2**-51)

    def test_blocks_do_not_change_the_bits(self, rng):
        # longer than one of its blocks, and a non-contiguous view
        x = rng.standard_normal((300, 200))[:, ::2] * 3
        got = portable_exp(x)
        np.testing.assert_array_equal(got.ravel(), portable_exp(x.ravel().copy()))


class TestRandomMatrix:
    def test_the_papers_matrix_with_the_portable_exp(self):
        a = random_matrix(np.random.default_rng(7), 20, 30, 2.0)
        rng = np.random.default_rng(7)
        u = rng.random((20, 30))
        g = rng.standard_normal((20, 30))
        want = np.array([[(ui - 0.5) * scalar_exp(2.0 * gi) for ui, gi in zip(ur, gr)]
                         for ur, gr in zip(u.tolist(), g.tolist())])
        np.testing.assert_array_equal(a, want)
