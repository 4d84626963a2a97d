"""The one-level LU and solve (ozlinalg/lapack/lu_one_level.py) against the recursion
they replace: the same bits, the same pivots, the same info and the same profile
records, on every order and shape they take."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from conftest import CompiledSteps
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


DECOMP_LU = importlib.import_module("ozlinalg.linalg._decomp_lu")


class TestFrontDoorShortcut:
    """The scipy-compatible layer's ``_getrf`` / ``_getrs(own=True)`` run the one-level
    LU and solve without :func:`getrf` / :func:`getrs`'s checks: the same bits, pivots
    and info as those functions with the same arguments (``lapack_args``)."""

    @staticmethod
    def _plan():
        from ozlinalg._options import resolve

        return resolve(np)

    @pytest.mark.parametrize("n", [n for n in ORDERS if n < 255])  # 255: 128-wide panels
    @pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
    def test_same_bits_as_getrf_and_getrs(self, n, dtype):
        from ozlinalg.lapack.scipy_conventions import lapack_args

        plan = self._plan()
        args = lapack_args(plan, n)
        assert DECOMP_LU._one_level_panel(plan, n) is not None
        rng = np.random.default_rng(200 + n)
        for kind in ("random", "scaled", "singular"):
            for order in "CF":
                a = np.asarray(_matrix(rng, (n, n), np.complex128 if dtype == np.complex128
                                       else np.float64, kind), order=order).astype(dtype)
                keep = a.copy()
                lu, piv, info = DECOMP_LU._getrf(plan, a)
                ref_lu, ref_piv = getrf(a, check_finite=False, warn=False, **args)
                assert lu.tobytes() == ref_lu.tobytes() and lu.dtype == ref_lu.dtype
                assert lu.flags.f_contiguous
                np.testing.assert_array_equal(piv, ref_piv)
                d = np.flatnonzero(np.diagonal(ref_lu) == 0)
                assert info == (d[0] + 1 if d.size else 0), kind
                np.testing.assert_array_equal(a, keep)
                if info:
                    continue
                for bshape in ((n,), (n, 3)):
                    b = rng.standard_normal(bshape).astype(dtype)
                    bkeep = b.copy()
                    x = DECOMP_LU._getrs(plan, lu, piv, b, own=True)
                    ref = getrs(lu, piv, b, check_finite=False, **args)
                    assert x.shape == ref.shape and x.dtype == ref.dtype
                    assert x.tobytes() == ref.tobytes(), (kind, order, bshape)
                    np.testing.assert_array_equal(b, bkeep)

    def test_other_routes_keep_getrf(self, monkeypatch):
        """Overwritten, rectangular, transposed, caller-given factors and orders from
        256 on go through :func:`getrf` / :func:`getrs`."""
        calls = []
        monkeypatch.setattr(DECOMP_LU, "getrf_one_level", lambda *a: calls.append(a))
        monkeypatch.setattr(DECOMP_LU, "getrs_one_level", lambda *a: calls.append(a))
        plan = self._plan()
        rng = np.random.default_rng(5)
        DECOMP_LU._getrf(plan, np.asfortranarray(rng.standard_normal((8, 8))), True)
        DECOMP_LU._getrf(plan, rng.standard_normal((9, 8)))
        DECOMP_LU._getrf(plan, rng.standard_normal((255, 255)))
        assert calls == []
        lu, piv = getrf(rng.standard_normal((8, 8)), block_size=4, min_size=0)
        DECOMP_LU._getrs(plan, lu, piv, rng.standard_normal(8))  # not own
        DECOMP_LU._getrs(plan, lu, piv, rng.standard_normal(8), trans=1, own=True)
        assert calls == []


class TestSwapRows:
    """``swap_rows``' one gather for small host blocks against the moved rows of
    ``swaps_to_rows`` (the path of large and device blocks)."""

    @pytest.mark.parametrize("order", "CF")
    def test_same_rows_as_the_moved_rows(self, order):
        from ozlinalg.lapack._common import swap_rows, swaps_to_rows

        rng = np.random.default_rng(6)
        for m, k, offset in ((8, 4, 0), (8, 4, 4), (13, 5, 3), (40, 40, 0), (2, 1, 1)):
            piv = np.array([rng.integers(i, m - offset) for i in range(k)]
                           if offset + k <= m else [], dtype=np.int32)
            a = np.asarray(rng.standard_normal((m, 7)), order=order)
            got = a.copy(order=order)
            swap_rows(np, got, piv, offset, slice(2, 6))
            want = a.copy()
            dst, src = swaps_to_rows(piv, offset)
            blk = want[:, 2:6]
            blk[dst] = blk[src]
            np.testing.assert_array_equal(got, want)
            ref = a.copy()  # the interchanges one at a time, as LAPACK applies them
            for i, p in enumerate(piv.tolist()):
                ref[[i + offset, p + offset], 2:6] = ref[[p + offset, i + offset], 2:6]
            np.testing.assert_array_equal(got, ref)


LU_ONE_LEVEL = importlib.import_module("ozlinalg.lapack.lu_one_level")

#: orders whose compiled steps run (every native block below NATIVE_LIMIT_FROM entries)
COMPILED_ORDERS = [n for n in ORDERS if n < 255]


class TestCompiledSteps:
    """The compiled one-level LU and solve (``k_one_level.c``) against the Python steps
    they replace: the same bits, pivots and info; a call the kernel declines runs the
    Python steps on the caller's data as it was."""

    @staticmethod
    def _steps(monkeypatch):
        return CompiledSteps(monkeypatch, {"factor": (LU_ONE_LEVEL, "_factor_compiled"),
                                           "solve": (LU_ONE_LEVEL, "_solve_compiled")})

    @pytest.mark.parametrize("n", COMPILED_ORDERS)
    def test_factor_and_solve_same_bits(self, monkeypatch, n):
        nb = (n + 1) // 2
        rng = np.random.default_rng(300 + n)
        steps = self._steps(monkeypatch)
        ran = steps.ran
        for kind in ("random", "scaled", "singular"):
            for order in "CF":
                a = np.asarray(_matrix(rng, (n, n), np.float64, kind), order=order)
                keep = a.copy()

                def factor(a=a):
                    return getrf(a, block_size=nb, min_size=0, warn=False)

                lu, piv = factor()
                # (a zero column of U12 is a structural zero the small path leaves to the
                # driver: at even orders the singular matrices run the Python steps)
                assert ran["factor"][-1] is not None or kind == "singular" and n % 2 == 0
                ref_lu, ref_piv = steps.python(factor)
                assert lu.tobytes() == ref_lu.tobytes(), (kind, order)
                np.testing.assert_array_equal(piv, ref_piv)
                np.testing.assert_array_equal(a, keep)
                if kind == "singular":
                    continue
                for bshape in ((n,), (n, 1), (n, 3)):
                    b = np.asarray(rng.standard_normal(bshape), order=order)
                    bkeep = b.copy()

                    def solve(b=b, lu=lu, piv=piv):
                        return getrs(lu, piv, b, block_size=nb, min_size=0)

                    x = solve()
                    assert ran["solve"][-1] is True, "the compiled solve did not run"
                    ref = steps.python(solve)
                    assert x.tobytes() == ref.tobytes(), (kind, order, bshape)
                    np.testing.assert_array_equal(b, bkeep)
                    # factors in C order (a caller's): the kernel reads any strides
                    x = solve(lu=np.ascontiguousarray(lu))
                    assert ran["solve"][-1] is True
                    assert x.tobytes() == ref.tobytes(), (kind, order, bshape, "C")

    @pytest.mark.parametrize("n", [2, 8, 9, 33, 100])
    def test_front_door_same_bits_and_info(self, monkeypatch, n):
        """``_getrf`` / ``_getrs(own=True)`` (the interchanges of ``b`` in the kernel)."""
        from ozlinalg._options import resolve

        plan = resolve(np)
        rng = np.random.default_rng(400 + n)
        steps = self._steps(monkeypatch)
        ran = steps.ran
        for kind in ("random", "scaled", "singular"):
            a = _matrix(rng, (n, n), np.float64, kind)
            got = DECOMP_LU._getrf(plan, a)
            assert ran["factor"][-1] is not None or kind == "singular" and n % 2 == 0
            ref = steps.python(lambda a=a: DECOMP_LU._getrf(plan, a))
            assert got[0].tobytes() == ref[0].tobytes()
            np.testing.assert_array_equal(got[1], ref[1])
            assert got[2] == ref[2] and (got[2] > 0) == (kind == "singular")
            if got[2]:
                continue
            for b in (rng.standard_normal(n), rng.standard_normal((n, 4))):
                x = DECOMP_LU._getrs(plan, got[0], got[1], b, own=True)
                assert ran["solve"][-1] is True
                want = steps.python(lambda b=b, lu=got[0], piv=got[1]:
                                    DECOMP_LU._getrs(plan, lu, piv, b, own=True))
                assert x.tobytes() == want.tobytes()

    def test_solve_matches_scipy(self):
        """The whole call by name, against SciPy's LU solve in float64 and the exact
        solution: the emulated solve is as accurate as LAPACK's (both backward stable)."""
        import scipy.linalg

        from ozlinalg.testing import exact_solve

        rng = np.random.default_rng(7)
        for n in (3, 8, 20):
            a = rng.standard_normal((n, n)) + n * np.eye(n)
            b = rng.standard_normal(n)
            x = ozlinalg.solve(a, b)
            exact = exact_solve(a, b)
            err = np.abs(x - exact).max() / np.abs(exact).max()
            ref = np.abs(scipy.linalg.solve(a, b) - exact).max() / np.abs(exact).max()
            assert err <= max(4 * ref, 8 * n * np.finfo(float).eps), (n, err, ref)

    def test_declined_update_runs_the_python_steps(self, monkeypatch):
        """A NaN reaches an update: the kernel stops, the caller's data is as it was,
        and the Python steps give the result."""
        rng = np.random.default_rng(8)
        a = rng.standard_normal((12, 12))
        a[9, 2] = np.nan
        steps = self._steps(monkeypatch)
        ran = steps.ran
        lu, piv = getrf(a, block_size=6, min_size=0, warn=False,
                         check_finite=False)
        assert ran["factor"] == [None]
        ref_lu, ref_piv = steps.python(
            lambda: getrf(a, block_size=6, min_size=0, warn=False,
                         check_finite=False))
        assert lu.tobytes() == ref_lu.tobytes()
        np.testing.assert_array_equal(piv, ref_piv)
        good, _ = getrf(rng.standard_normal((12, 12)), block_size=6, min_size=0)
        b = rng.standard_normal(12)
        b[0] = np.inf
        x = getrs(good, piv, b, block_size=6, min_size=0, check_finite=False)
        assert ran["solve"][-1] is False
        ref = steps.python(lambda: getrs(good, piv, b, block_size=6, min_size=0,
                                                      check_finite=False))
        assert x.tobytes() == ref.tobytes()

    def test_fixed_count_below_auto_warns_as_the_python_steps(self, monkeypatch):
        rng = np.random.default_rng(9)
        a = _matrix(rng, (16, 16), np.float64, "scaled")
        steps = self._steps(monkeypatch)
        ran = steps.ran

        def factor():
            with ozlinalg.options(slices=2), pytest.warns(ozlinalg.AccuracyWarning) as rec:
                out = getrf(a, block_size=8, min_size=0, warn=False)
            return out, [str(w.message) for w in rec]

        (lu, piv), msgs = factor()
        assert ran["factor"] == [None]  # declined: the Python steps warn
        (ref_lu, ref_piv), ref_msgs = steps.python(factor)
        assert lu.tobytes() == ref_lu.tobytes() and msgs == ref_msgs

    def test_not_taken(self, monkeypatch):
        """A profile records the products one by one; complex factors; wide native
        blocks (they run under the engine's BLAS thread limit)."""
        rng = np.random.default_rng(10)
        steps = self._steps(monkeypatch)
        ran = steps.ran
        with ozlinalg.profile() as prof:
            getrf(rng.standard_normal((8, 8)), block_size=4, min_size=0)
        assert ran["factor"] == [None] and prof.emulated_gemm_calls == 1
        getrf(_matrix(rng, (8, 8), np.complex128, "random"), block_size=4, min_size=0)
        getrf(rng.standard_normal((200, 200)), block_size=100, min_size=0)
        assert ran["factor"] == [None, None, None]

    def test_threads_and_fork(self, monkeypatch):
        """Eight Python threads at once (the kernel calls LAPACK without the GIL), then
        a forked child, against the Python steps."""
        import os
        from concurrent.futures import ThreadPoolExecutor

        rng = np.random.default_rng(11)
        mats = [rng.standard_normal((n, n)) for n in (5, 8, 13, 16, 24, 31, 40, 9)]
        rhs = [rng.standard_normal((len(m), 2)) for m in mats]

        def one(t):
            lu, piv = getrf(mats[t], block_size=(len(mats[t]) + 1) // 2, min_size=0)
            x = getrs(lu, piv, rhs[t], block_size=(len(mats[t]) + 1) // 2, min_size=0)
            return lu.tobytes() + piv.tobytes() + x.tobytes()

        steps = self._steps(monkeypatch)
        ran = steps.ran
        want = [steps.python(lambda t=t: one(t)) for t in range(8)]
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda t: all(one(t) == want[t] for _ in range(20)), range(8)))
        assert all(got)
        assert ran["solve"] and all(r is True for r in ran["solve"])
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os._exit(0 if all(one(t) == want[t] for t in range(8)) else 1)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
