"""The compiled one-level Cholesky factorization and triangular solve
(ozlinalg/lapack/compiled_steps.py, ``k_one_level.c``) against the Python steps of
``potrf`` / ``trsm`` they replace: the same bits, the same errors; a call the kernel
stops runs the Python steps on the caller's data as it was."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from conftest import CompiledSteps

import ozlinalg
from ozlinalg.lapack import potrf, potrs, trsm
from ozlinalg.lapack.scipy_conventions import lapack_args

POTRF = importlib.import_module("ozlinalg.lapack.potrf")
TRSM = importlib.import_module("ozlinalg.lapack.trsm")

#: orders whose compiled steps run (native blocks below NATIVE_LIMIT_FROM entries)
ORDERS = [2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 64, 100, 129, 197, 201]


def _steps(monkeypatch):
    return CompiledSteps(monkeypatch, {"potrf": (POTRF, "_potrf_compiled"),
                                       "trsm": (TRSM, "_solve_compiled")})


def _spd(rng, n, kind):
    g = rng.standard_normal((n, n))
    a = g @ g.T + n * np.eye(n)
    if kind == "scaled":  # D A D over many binades
        d = np.exp2(rng.integers(-30, 30, n))
        a = a * d[:, None] * d[None, :]
    return a


class TestPotrfCompiled:
    @pytest.mark.parametrize("n", ORDERS)
    def test_same_bits_as_the_python_steps(self, monkeypatch, n):
        nb = (n + 1) // 2
        rng = np.random.default_rng(500 + n)
        steps = _steps(monkeypatch)
        ran = steps.ran
        for kind in ("random", "scaled"):
            for order in "CF":
                a = np.asarray(_spd(rng, n, kind), order=order)
                keep = a.copy()
                for lower in (True, False):
                    def factor(a=a, lower=lower):
                        return potrf(a, lower=lower, block_size=nb, min_size=0)

                    c = factor()
                    assert ran["potrf"][-1] is (nb * nb < 10_000), (kind, order, lower)
                    ref = steps.python(factor)
                    assert c.tobytes() == ref.tobytes(), (kind, order, lower)
                    np.testing.assert_array_equal(a, keep)
                    for bshape in ((n,), (n, 1), (n, 3)):
                        b = rng.standard_normal(bshape)

                        def solve(b=b, c=c, lower=lower):
                            return potrs(c, b, lower=lower, block_size=nb, min_size=0)

                        x = solve()
                        want = steps.python(solve)
                        assert x.tobytes() == want.tobytes(), (kind, order, lower, bshape)
        if n <= 64:
            assert ran["trsm"] and all(ran["trsm"])  # potrs' two solves, compiled

    def test_not_positive_definite_raises_as_the_python_steps(self, monkeypatch):
        rng = np.random.default_rng(13)
        steps = _steps(monkeypatch)
        ran = steps.ran
        for n, bad in ((8, 2), (8, 6), (9, 0), (33, 20)):
            a = _spd(rng, n, "random")
            a[bad, bad] = -1.0  # the leading minor of order bad + 1 is not positive
            with pytest.raises(np.linalg.LinAlgError) as got:
                potrf(a, lower=True, block_size=(n + 1) // 2, min_size=0)
            assert ran["potrf"][-1] is False  # stopped, then the Python steps raised
            with pytest.raises(np.linalg.LinAlgError) as want:
                steps.python(lambda a=a, n=n: potrf(a, lower=True,
                                                            block_size=(n + 1) // 2,
                                                            min_size=0))
            assert str(got.value) == str(want.value)

    def test_front_door(self, monkeypatch):
        """``cho_factor`` / ``cho_solve`` and ``solve(assume_a="pos")`` by name."""
        rng = np.random.default_rng(14)
        steps = _steps(monkeypatch)
        ran = steps.ran
        for n in (3, 8, 20, 40):
            a, b = _spd(rng, n, "random"), rng.standard_normal((n, 2))

            def calls(a=a, b=b):
                cf = ozlinalg.linalg.cho_factor(a)
                return (cf[0], ozlinalg.linalg.cho_solve(cf, b),
                        ozlinalg.linalg.solve(a, b, assume_a="pos"), ozlinalg.solve(a, b))

            got = calls()
            assert ran["potrf"] and ran["potrf"][-1] is True
            for x, y in zip(got, steps.python(calls)):
                assert x.tobytes() == y.tobytes(), n


class TestInPlace:
    def test_overwritten_inputs(self, monkeypatch):
        """``overwrite_a=True`` on Fortran-ordered float64 input: the compiled LU and
        Cholesky write into the caller's array, with the Python steps' bits."""
        from ozlinalg.lapack import getrf

        rng = np.random.default_rng(17)
        steps = _steps(monkeypatch)
        for n in (5, 8, 17, 40):
            a = np.asfortranarray(rng.standard_normal((n, n)) + n * np.eye(n))
            s = np.asfortranarray(_spd(rng, n, "random"))
            nb = (n + 1) // 2

            def run(a=a, s=s, nb=nb):
                wa, ws = a.copy(order="F"), s.copy(order="F")
                lu, piv = getrf(wa, block_size=nb, min_size=0, overwrite_a=True)
                c = potrf(ws, block_size=nb, min_size=0, overwrite_a=True)
                assert lu is wa and c is ws
                return lu.tobytes() + piv.tobytes() + c.tobytes()

            got = run()
            assert steps.ran["potrf"][-1] is True
            assert got == steps.python(run)


class TestTrsmCompiled:
    @pytest.mark.parametrize("n", [2, 5, 8, 9, 32, 33, 100])
    def test_same_bits_as_the_python_steps(self, monkeypatch, n):
        leaf = (n + 1) // 2
        rng = np.random.default_rng(600 + n)
        steps = _steps(monkeypatch)
        ran = steps.ran
        a = rng.standard_normal((n, n)) + n * np.eye(n)
        for lower in (True, False):
            for unit in (True, False):
                for trans in (0, 1):
                    for side, bshape in (("L", (n,)), ("L", (n, 3)), ("R", (2, n))):
                        for order in "CF":
                            b = np.asarray(rng.standard_normal(bshape), order=order)
                            bkeep = b.copy()

                            def solve(b=b, lower=lower, unit=unit, trans=trans, side=side):
                                return trsm(a, b, side=side, lower=lower, trans=trans,
                                            unit_diagonal=unit, block_size=leaf, min_size=0)

                            x = solve()
                            assert ran["trsm"][-1] is True
                            want = steps.python(solve)
                            assert x.tobytes() == want.tobytes(), (lower, unit, trans, side)
                            np.testing.assert_array_equal(b, bkeep)

    def test_stopped_solve_runs_the_python_steps(self, monkeypatch):
        rng = np.random.default_rng(15)
        steps = _steps(monkeypatch)
        ran = steps.ran
        a = rng.standard_normal((10, 10)) + 10 * np.eye(10)
        b = rng.standard_normal(10)
        b[1] = np.inf  # reaches the coupling product: the kernel stops
        x = trsm(a, b, lower=True, block_size=5, min_size=0, check_finite=False)
        assert ran["trsm"][-1] is False
        want = steps.python(lambda: trsm(a, b, lower=True, block_size=5, min_size=0,
                                                 check_finite=False))
        assert x.tobytes() == want.tobytes()

    def test_threads(self, monkeypatch):
        """Eight Python threads at once (the kernels call LAPACK without the GIL)."""
        from concurrent.futures import ThreadPoolExecutor

        rng = np.random.default_rng(16)
        mats = [_spd(rng, n, "random") for n in (5, 8, 13, 16, 24, 31, 40, 9)]
        rhs = [rng.standard_normal((len(m), 2)) for m in mats]

        def one(t):
            nb = (len(mats[t]) + 1) // 2
            c = potrf(mats[t], block_size=nb, min_size=0)
            return c.tobytes() + potrs(c, rhs[t], block_size=nb, min_size=0).tobytes()

        steps = _steps(monkeypatch)
        want = [steps.python(lambda t=t: one(t)) for t in range(8)]
        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(lambda t: all(one(t) == want[t] for _ in range(20)),
                                range(8)))


DECOMP_CHOLESKY = importlib.import_module("ozlinalg.linalg._decomp_cholesky")


def _front_door_plan():
    """The plan a front door resolves under the options in force."""
    from ozlinalg._options import resolve

    return resolve(np)


def _spy(monkeypatch, name, run=True):
    """The calls of ``_decomp_cholesky``'s ``name`` (one of the shortcuts' steps), a
    list filled as they come; ``run``: the step still runs (else it is only recorded)."""
    calls = []
    real = getattr(DECOMP_CHOLESKY, name)
    monkeypatch.setattr(DECOMP_CHOLESKY, name,
                        lambda *a: calls.append(a) or (real(*a) if run else None))
    return calls


class TestPotrsShortcut:
    """``_potrs(own=True)`` (the SPD route of the solves by name) runs the two
    triangular solves without :func:`potrs`' checks: the same bits as :func:`potrs`
    with the same arguments (``lapack_args``), and the other routes keep it."""

    @pytest.mark.parametrize("n", [2, 3, 5, 8, 9, 16, 33, 64, 129, 200, 254])
    def test_same_bits_as_potrs(self, monkeypatch, n):
        calls = _spy(monkeypatch, "potrs_one_level")
        plan = _front_door_plan()
        args = lapack_args(plan, n)
        rng = np.random.default_rng(700 + n)
        for kind in ("random", "scaled"):
            a = _spd(rng, n, kind)
            for lower in (True, False):
                c = DECOMP_CHOLESKY._potrf(plan, a, lower)
                for bshape, dtype in (((n,), np.float64), ((n, 1), np.float64),
                                      ((n, 3), np.float64), ((n, 2), np.float32),
                                      ((n, 2), np.complex128)):
                    b = rng.standard_normal(bshape).astype(dtype)
                    if dtype == np.complex128:
                        b = b + 1j * rng.standard_normal(bshape)
                    b = np.asfortranarray(b) if len(calls) % 2 else b
                    bkeep = b.copy()
                    before = len(calls)
                    x = DECOMP_CHOLESKY._potrs(plan, c, b, lower, own=True)
                    ref = potrs(c, b, lower=lower, check_finite=False, **args)
                    assert len(calls) == before + (dtype != np.complex128), (bshape, dtype)
                    assert x.shape == ref.shape and x.dtype == ref.dtype
                    assert x.tobytes() == ref.tobytes(), (kind, lower, bshape, dtype)
                    np.testing.assert_array_equal(b, bkeep)

    def test_overwrite_b(self):
        plan = _front_door_plan()
        rng = np.random.default_rng(701)
        c = DECOMP_CHOLESKY._potrf(plan, _spd(rng, 12, "random"), True)
        b = rng.standard_normal((12, 2))
        want = potrs(c, b, lower=True, check_finite=False, **lapack_args(plan, 12))
        x = DECOMP_CHOLESKY._potrs(plan, c, b, True, overwrite_b=True, own=True)
        assert x is b and x.tobytes() == want.tobytes()

    def test_other_routes_keep_potrs(self, monkeypatch):
        """The caller's factor (cho_solve), complex factors, orders from 256 on and
        orders below min_order go through :func:`potrs`."""
        calls = _spy(monkeypatch, "potrs_one_level", run=False)
        plan = _front_door_plan()
        rng = np.random.default_rng(702)
        c = DECOMP_CHOLESKY._potrf(plan, _spd(rng, 8, "random"), True)
        DECOMP_CHOLESKY._potrs(plan, c, rng.standard_normal(8), True)  # not own
        DECOMP_CHOLESKY._potrs(plan, c.astype(complex), rng.standard_normal(8), True,
                               own=True)
        big = DECOMP_CHOLESKY._potrf(plan, _spd(rng, 256, "random"), True)
        DECOMP_CHOLESKY._potrs(plan, big, rng.standard_normal(256), True, own=True)
        with ozlinalg.options(min_order=64):
            small = _front_door_plan()
        DECOMP_CHOLESKY._potrs(small, c, rng.standard_normal(8), True, own=True)
        assert calls == []

    def test_solve_by_name_takes_it(self, monkeypatch):
        import scipy.linalg

        calls = _spy(monkeypatch, "potrs_one_level")
        rng = np.random.default_rng(703)
        a = _spd(rng, 8, "random")
        b = rng.standard_normal(8)
        with ozlinalg.options(min_size=0):
            x = ozlinalg.solve(a, b)
            y = ozlinalg.linalg.solve(a, b, assume_a="pos")
        assert len(calls) == 2
        ref = scipy.linalg.solve(a, b, assume_a="pos")
        tol = 64 * np.finfo(float).eps * np.linalg.cond(a)
        for got in (x, y):
            assert np.linalg.norm(got - ref) <= tol * np.linalg.norm(ref)


class TestPotrfShortcut:
    """``_potrf`` (every factorization of the scipy-compatible layer) runs a real,
    not-overwritten, cleaned factorization of a one-level order without :func:`potrf`'s
    checks: the same bits and errors as :func:`potrf` with the same arguments."""

    @pytest.mark.parametrize("n", [2, 3, 5, 8, 9, 16, 33, 64, 129, 200, 254])
    def test_same_bits_as_potrf(self, monkeypatch, n):
        calls = _spy(monkeypatch, "potrf_one_level")
        plan = _front_door_plan()
        args = lapack_args(plan, n)
        rng = np.random.default_rng(800 + n)
        for kind in ("random", "scaled"):
            for order in "CF":
                a = np.asarray(_spd(rng, n, kind), order=order)
                keep = a.copy()
                for lower in (True, False):
                    before = len(calls)
                    c = DECOMP_CHOLESKY._potrf(plan, a, lower)
                    assert len(calls) == before + 1
                    ref = potrf(a, lower=lower, check_finite=False, **args)
                    assert c.tobytes() == ref.tobytes() and c.flags.c_contiguous == \
                        ref.flags.c_contiguous, (kind, order, lower)
                    np.testing.assert_array_equal(a, keep)

    def test_not_positive_definite_raises_as_potrf(self):
        plan = _front_door_plan()
        rng = np.random.default_rng(810)
        for n, bad in ((8, 6), (9, 2), (40, 33)):
            a = _spd(rng, n, "random")
            a[bad, bad] = -1.0
            for lower in (True, False):
                with pytest.raises(np.linalg.LinAlgError) as got:
                    DECOMP_CHOLESKY._potrf(plan, a, lower)
                with pytest.raises(np.linalg.LinAlgError) as want:
                    potrf(a, lower=lower, check_finite=False, **lapack_args(plan, n))
                assert str(got.value) == str(want.value)

    def test_other_routes_keep_potrf(self, monkeypatch):
        """Overwritten, uncleaned, complex, order 256 and orders below min_order go
        through :func:`potrf`."""
        calls = _spy(monkeypatch, "potrf_one_level", run=False)
        plan = _front_door_plan()
        rng = np.random.default_rng(811)
        a = _spd(rng, 8, "random")
        DECOMP_CHOLESKY._potrf(plan, a.copy(), True, overwrite_a=True)
        DECOMP_CHOLESKY._potrf(plan, a, True, clean=False)
        DECOMP_CHOLESKY._potrf(plan, a.astype(complex), True)
        DECOMP_CHOLESKY._potrf(plan, _spd(rng, 256, "random"), True)
        with ozlinalg.options(min_order=64):
            DECOMP_CHOLESKY._potrf(_front_door_plan(), a, True)
        assert calls == []
