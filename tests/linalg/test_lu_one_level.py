"""The one-level LU and solve (ozlinalg/lapack/lu_one_level.py) against the recursion
they replace: the same bits, the same pivots, the same info and the same profile
records, on every order and shape they take."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from scipy.linalg import LinAlgWarning

import ozlinalg
from ozlinalg.lapack import getrf, getrs

#: The module (``ozlinalg.lapack.getrf`` the attribute is the function), patched below.
GETRF_MODULE = importlib.import_module("ozlinalg.lapack.getrf")


def _both(monkeypatch, fn):
    """``fn()`` through the one-level path, then through the recursion; each with the
    profile it recorded; checks that the one-level path ran."""
    taken = []
    real = GETRF_MODULE.one_level

    def spy(*args):
        got = real(*args)
        taken.append(got)
        return got

    monkeypatch.setattr(GETRF_MODULE, "one_level", spy)
    with ozlinalg.profile() as p_flat:
        flat = fn()
    assert any(taken), "the one-level path did not run"
    monkeypatch.setattr(GETRF_MODULE, "one_level", lambda *args: False)
    with ozlinalg.profile() as p_rec:
        rec = fn()
    monkeypatch.setattr(GETRF_MODULE, "one_level", real)
    return (flat, p_flat), (rec, p_rec)


def _same_profile(p, q):
    assert p.emulated_gemm_calls == q.emulated_gemm_calls
    assert p.native_flops == q.native_flops
    assert p.native_calls == q.native_calls


def _matrix(rng, shape, dtype, kind):
    a = rng.standard_normal(shape)
    if dtype == np.complex128:
        a = a + 1j * rng.standard_normal(shape)
    if kind == "scaled":  # rows and columns over many binades: pivoting everywhere
        a *= np.exp2(rng.integers(-40, 40, shape[0]))[:, None]
        a *= np.exp2(rng.integers(-40, 40, shape[1]))[None, :]
    elif kind == "singular":  # an exactly zero column: info points at it
        a[:, shape[1] // 2] = 0
    return a


ORDERS = [2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 64, 100, 129, 255]


class TestGetrfOneLevel:
    @pytest.mark.parametrize("n", ORDERS)
    @pytest.mark.parametrize("dtype", [np.float64, np.complex128])
    def test_same_bits_as_the_recursion(self, monkeypatch, n, dtype):
        rng = np.random.default_rng(n)
        nb = (n + 1) // 2
        for kind in ("random", "scaled", "singular"):
            for shape in ((n, n), (n + 3, n)):
                for order in "CF":
                    a = np.asarray(_matrix(rng, shape, dtype, kind), order=order)
                    keep = a.copy()
                    (flat, pf), (rec, pr) = _both(
                        monkeypatch,
                        lambda a=a: getrf(a, block_size=nb, min_size=0, warn=False))
                    np.testing.assert_array_equal(flat[1], rec[1])
                    assert flat[0].tobytes() == rec[0].tobytes(), (kind, shape, order)
                    assert flat[0].flags.f_contiguous == rec[0].flags.f_contiguous
                    np.testing.assert_array_equal(a, keep)  # the input is not written
                    _same_profile(pf, pr)

    def test_zero_pivot_warns_with_the_recursions_index(self, monkeypatch):
        a = _matrix(np.random.default_rng(0), (9, 9), np.float64, "singular")
        for patch in (GETRF_MODULE.one_level, lambda *args: False):
            monkeypatch.setattr(GETRF_MODULE, "one_level", patch)
            with pytest.warns(LinAlgWarning, match="Diagonal number 5 is exactly"):
                getrf(a, block_size=5, min_size=0)

    def test_in_place(self, monkeypatch):
        rng = np.random.default_rng(1)
        a = np.asfortranarray(rng.standard_normal((12, 12)))

        def run():
            work = a.copy(order="F")
            lu, piv = getrf(work, block_size=6, min_size=0, overwrite_a=True)
            assert lu is work
            return lu, piv

        (flat, _), (rec, _) = _both(monkeypatch, run)
        assert flat[0].tobytes() == rec[0].tobytes()
        np.testing.assert_array_equal(flat[1], rec[1])

    def test_wide_and_deep_orders_keep_the_recursion(self, monkeypatch):
        calls = []
        monkeypatch.setattr(GETRF_MODULE, "getrf_one_level",
                            lambda *args: calls.append(args) or 0)
        rng = np.random.default_rng(2)
        getrf(rng.standard_normal((6, 10)), block_size=4, min_size=0)  # wide
        getrf(rng.standard_normal((20, 20)), block_size=4, min_size=0)  # 3 levels
        getrf(rng.standard_normal((8, 8)), block_size=8, min_size=0)  # one panel
        assert calls == []


class TestGetrsOneLevel:
    @pytest.mark.parametrize("n", ORDERS)
    @pytest.mark.parametrize("dtypes", [(np.float64, np.float64), (np.float64, np.complex128),
                                        (np.complex128, np.complex128)])
    def test_same_bits_as_the_recursion(self, monkeypatch, n, dtypes):
        rng = np.random.default_rng(100 + n)
        nb = (n + 1) // 2
        lu, piv = getrf(_matrix(rng, (n, n), dtypes[0], "scaled"), block_size=nb,
                        min_size=0)
        for bshape in ((n,), (n, 1), (n, 3)):
            for order in "CF":
                b = np.asarray(_matrix(rng, bshape + (1,) * (2 - len(bshape)), dtypes[1],
                                       "random").reshape(bshape), order=order)
                keep = b.copy()
                (flat, pf), (rec, pr) = _both(
                    monkeypatch, lambda b=b: getrs(lu, piv, b, block_size=nb, min_size=0))
                assert flat.shape == rec.shape == b.shape
                assert flat.dtype == rec.dtype
                assert flat.tobytes() == rec.tobytes(), (bshape, order)
                np.testing.assert_array_equal(b, keep)
                _same_profile(pf, pr)

    def test_float32_factors(self, monkeypatch):
        rng = np.random.default_rng(3)
        lu, piv = getrf(rng.standard_normal((10, 10)), block_size=5, min_size=0)
        b = rng.standard_normal(10)
        (flat, _), (rec, _) = _both(
            monkeypatch,
            lambda: getrs(lu.astype(np.float32), piv, b, block_size=5, min_size=0))
        assert flat.dtype == rec.dtype == np.float64
        assert flat.tobytes() == rec.tobytes()

    def test_transposed_solves_keep_the_recursion(self, monkeypatch):
        calls = []
        monkeypatch.setattr(GETRF_MODULE, "getrs_one_level",
                            lambda *args: calls.append(args))
        rng = np.random.default_rng(4)
        lu, piv = getrf(rng.standard_normal((8, 8)), block_size=4, min_size=0)
        getrs(lu, piv, rng.standard_normal(8), trans=1, block_size=4, min_size=0)
        assert calls == []
