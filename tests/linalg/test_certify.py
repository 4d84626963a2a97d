"""Certified eigenvalue bounds (``ozlinalg.certify_eigh``).

The enclosures are judged against 50-digit eigenvalues of the exact input matrix
(mpmath's ``eigsy`` / ``eighe``), compared in mpmath: (a) every eigenvalue lies in
some interval ``[w_i - r_i, w_i + r_i]`` and (b) every interval holds an eigenvalue.
The only slack is ``TOL`` times ``||A||_F``, for mpmath's own error at 50 digits
(about 1e-48 relative): 25 orders below any radius tested.
"""
from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

import ozlinalg
from ozlinalg.linalg import _certify, certify_eigh

U = 2.0**-53
TOL = mpmath.mpf("1e-40")


@pytest.fixture(autouse=True)
def _fifty_digits():
    old = mpmath.mp.dps
    mpmath.mp.dps = 50
    yield
    mpmath.mp.dps = old


def _unitary(rng, n, cplx):
    g = rng.standard_normal((n, n))
    if cplx:
        g = g + 1j * rng.standard_normal((n, n))
    return np.linalg.qr(g)[0]


def _spectrum(rng, kind, n):
    if kind == "random":
        return rng.standard_normal(n)
    if kind == "clustered":  # three equal, four 1e-9 apart, the rest spread
        base = [1.0, 1.0, 1.0, 2.0, 2.0 + 1e-9, 2.0 + 2e-9, 2.0 + 3e-9]
        lam = np.array(base + list(rng.uniform(-3.0, 3.0, max(0, n - len(base)))))
        return rng.permutation(lam[:n])
    if kind == "graded":  # 1 ... 1e-13, signs mixed
        lam = np.logspace(0, -13, n) * np.where(np.arange(n) % 2, -1.0, 1.0)
        return rng.permutation(lam)
    if kind == "separated":
        return np.arange(1.0, n + 1.0) * rng.choice([-1.0, 1.0], n)
    raise ValueError(kind)


def _hermitian(rng, kind, n, cplx):
    """An exactly Hermitian float matrix with about the spectrum `kind`."""
    q = _unitary(rng, n, cplx)
    a = (q * _spectrum(rng, kind, n)) @ q.conj().T
    return (a + a.conj().T) / 2  # exactly Hermitian: a_ij and a_ji from the same sum


def _exact_eigenvalues(a):
    """The eigenvalues of the exact matrix `a` to 50 digits (mpf)."""
    m = mpmath.matrix(a.tolist())  # floats and complexes convert exactly
    e = mpmath.eighe(m, eigvals_only=True) if a.dtype.kind == "c" else \
        mpmath.eigsy(m, eigvals_only=True)
    return [e[i] for i in range(a.shape[0])]


def _check_enclosure(lams, w, r, scale):
    """(a) and (b), compared in mpmath on the exact floats ``w``, ``r``."""
    tol = TOL * mpmath.mpf(float(scale))
    ws = [mpmath.mpf(float(x)) for x in np.asarray(w, dtype=np.float64)]
    rs = [mpmath.mpf(float(x)) for x in r]
    assert all(x >= 0 for x in rs)
    for lam in lams:
        assert any(abs(lam - wi) <= ri + tol for wi, ri in zip(ws, rs)), \
            f"eigenvalue {mpmath.nstr(lam, 20)} outside every interval"
    for i, (wi, ri) in enumerate(zip(ws, rs)):
        assert any(abs(lam - wi) <= ri + tol for lam in lams), \
            f"interval {i} ({float(wi)!r} +- {float(ri)!r}) holds no eigenvalue"


class TestCertifyEigh:
    @pytest.mark.parametrize("n", [1, 2, 3, 8, 40])
    @pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
    @pytest.mark.parametrize("kind", ["random", "clustered", "graded"])
    def test_encloses_exact_eigenvalues(self, kind, cplx, n):
        rng = np.random.default_rng([n, int(cplx), len(kind)])
        a = _hermitian(rng, kind, n, cplx)
        lams = _exact_eigenvalues(a)
        scale = np.linalg.norm(a)
        # (w, v) from LAPACK in double: tight radii
        w, v = np.linalg.eigh(a)
        r = certify_eigh(a, w, v)
        assert r.dtype == np.float64 and r.shape == (n,)
        assert np.all(np.isfinite(r))
        assert r.max() <= 100 * n * U * scale
        _check_enclosure(lams, w, r, scale)
        # from single precision (poor approximations, float32 / complex64 as given)
        w32, v32 = np.linalg.eigh(a.astype(np.complex64 if cplx else np.float32))
        assert w32.dtype == np.float32
        r32 = certify_eigh(a, w32, v32)
        assert np.all(np.isfinite(r32))
        _check_enclosure(lams, w32, r32, scale)

    @pytest.mark.parametrize("n", [2, 8, 40])
    @pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
    def test_well_separated_radii_are_small(self, n, cplx):
        rng = np.random.default_rng([7, n, int(cplx)])
        a = _hermitian(rng, "separated", n, cplx)
        w, v = np.linalg.eigh(a)
        r = certify_eigh(a, w, v)
        norm2 = np.linalg.norm(a, 2)
        assert np.all(r <= 100 * n * U * norm2)
        # isolated intervals take their own column's bound (not one uniform radius)
        assert np.unique(r).size > 1

    def test_two_columns_on_one_eigenvalue(self):
        """Both pairs point at the eigenvalue 0 of diag(0, 1): the column residuals
        (0 and 0.87) miss the eigenvalue 1; only the uniform radius (1.6, the
        intervals overlap) covers it, so (a) fails if a shared interval is shrunk."""
        a = np.diag([0.0, 1.0])
        v = np.array([[1.0, 0.5], [0.0, np.sqrt(3) / 2]])
        for w in (np.zeros(2), np.array([0.0, 1e-3])):
            r = certify_eigh(a, w, v)
            assert np.all(np.isfinite(r)) and np.all(r > 1.0)
            _check_enclosure(_exact_eigenvalues(a), w, r, 1.0)

    def test_permuted_pairs(self):
        rng = np.random.default_rng(3)
        a = _hermitian(rng, "random", 8, True)
        w, v = np.linalg.eigh(a)
        p = rng.permutation(8)
        np.testing.assert_array_equal(certify_eigh(a, w[p], v[:, p]), certify_eigh(a, w, v)[p])

    def test_triangle(self):
        rng = np.random.default_rng(4)
        for cplx in (False, True):
            h = _hermitian(rng, "random", 6, cplx)
            w, v = np.linalg.eigh(h)
            expect = certify_eigh(h, w, v)
            junk = rng.standard_normal((6, 6)) * 1e3
            if cplx:
                junk = junk + 1j * junk.T
            lo = np.tril(h) + np.triu(junk, 1)
            up = np.triu(h) + np.tril(junk, -1)
            if cplx:  # LAPACK's rule: the diagonal's imaginary parts are not read
                lo[np.diag_indices(6)] += 1j
                up[np.diag_indices(6)] -= 2j
            np.testing.assert_array_equal(certify_eigh(lo, w, v, lower=True), expect)
            np.testing.assert_array_equal(certify_eigh(up, w, v, lower=False), expect)
            with pytest.raises(ValueError, match="Hermitian"):
                certify_eigh(lo, w, v)

    def test_nothing_certified_gives_inf(self):
        a = np.diag([1.0, 2.0, 3.0])
        w = np.array([1.0, 2.0, 3.0])
        for v in (np.ones((3, 3)), np.zeros((3, 3)), 2.0 * np.eye(3)):
            np.testing.assert_array_equal(certify_eigh(a, w, v), np.full(3, np.inf))
        # near the float64 limit the faithful product bounds nothing either
        big = np.array([[np.finfo(np.float64).max]])
        assert certify_eigh(big, np.array([1.0]), np.array([[1.0]]))[0] == np.inf

    def test_exact_pairs(self):
        a = np.diag([-1.0, 0.5, 4.0])
        r = certify_eigh(a, np.array([-1.0, 0.5, 4.0]), np.eye(3))
        assert np.all(r <= 8 * U * 4.0)
        _check_enclosure(_exact_eigenvalues(a), [-1.0, 0.5, 4.0], r, 4.0)

    def test_dtypes_and_empty(self):
        r = certify_eigh(np.zeros((0, 0)), np.zeros(0), np.zeros((0, 0)))
        assert r.shape == (0,) and r.dtype == np.float64
        a = np.array([[2, 1], [1, 2]])  # integers, exact
        w, v = np.linalg.eigh(a.astype(np.float64))
        r = certify_eigh(a, w.astype(np.complex128), v)  # complex w with zero imaginary parts
        _check_enclosure(_exact_eigenvalues(a.astype(np.float64)), w, r, 3.0)
        assert ozlinalg.certify_eigh is certify_eigh
        assert "certify_eigh" in ozlinalg.__all__ and "certify_eigh" in ozlinalg.linalg.__all__

    def test_errors(self):
        a = np.eye(3)
        w, v = np.ones(3), np.eye(3)
        with pytest.raises(ValueError, match="square"):
            certify_eigh(np.ones((3, 2)), w, v)
        with pytest.raises(ValueError, match="square"):
            certify_eigh(np.ones((2, 3, 3)), w, v)
        with pytest.raises(ValueError, match="w must have shape"):
            certify_eigh(a, np.ones(2), v)
        with pytest.raises(ValueError, match="w must have shape"):
            certify_eigh(a, np.ones((3, 1)), v)
        with pytest.raises(ValueError, match="v must have shape"):
            certify_eigh(a, w, np.eye(3)[:, :2])
        for bad in (np.nan, np.inf, -np.inf):
            x = a.copy()
            x[1, 1] = bad
            with pytest.raises(ValueError, match="infs or NaNs"):
                certify_eigh(x, w, v)
            with pytest.raises(ValueError, match="infs or NaNs"):
                certify_eigh(a, np.array([1.0, bad, 1.0]), v)
            with pytest.raises(ValueError, match="infs or NaNs"):
                certify_eigh(a, w, x)
        with pytest.raises(ValueError, match="real"):
            certify_eigh(a, w + 1e-30j, v)
        nonherm = np.array([[1.0, 2.0], [2.0 + 2**-50, 1.0]])
        with pytest.raises(ValueError, match=r"not exactly Hermitian \(a\[0, 1\]"):
            certify_eigh(nonherm, np.ones(2), np.eye(2))
        with pytest.raises(ValueError, match="not exactly Hermitian"):
            certify_eigh(np.array([[1.0 + 1e-20j]]), np.ones(1), np.eye(1))
        with pytest.raises(ValueError, match="lower"):
            certify_eigh(a, w, v, lower="L")
        with pytest.raises(ValueError, match="float64 cannot hold"):
            certify_eigh(np.array([[2**60 + 1]]), np.ones(1), np.eye(1))
        with pytest.raises(TypeError, match="dtype"):
            certify_eigh(a.astype(np.longdouble), w, v)

    def test_inputs_unmodified(self):
        rng = np.random.default_rng(5)
        h = _hermitian(rng, "clustered", 8, True)
        w, v = np.linalg.eigh(h)
        a = np.asfortranarray(h + np.triu(np.ones((8, 8)), 1))  # junk above: lower=True
        w, v = w.copy(), v.copy()
        saved = [x.copy() for x in (a, w, v)]
        certify_eigh(a, w, v, lower=True)
        certify_eigh(h, w, v)
        for x, y in zip((a, w, v), saved):
            np.testing.assert_array_equal(x, y)
            assert x.flags.writeable

    @pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
    @pytest.mark.parametrize("scale", [1.0, 2.0**-1000, 2.0**900])
    def test_entry_bounds_hold_exactly(self, cplx, scale):
        """The bounds of R, G and ||V e_i||**2, against the exact rationals."""
        rng = np.random.default_rng([9, int(cplx)])
        n = 5
        a = _hermitian(rng, "graded", n, cplx) * scale
        w32, v32 = np.linalg.eigh((a / scale).astype(np.complex64 if cplx else np.float32))
        for w, v in (np.linalg.eigh(a), (w32.astype(np.float64) * scale, v32)):
            a_, w_, v_ = _certify._validated(a, w, v, None)
            with np.errstate(all="ignore"):
                rb, gb, vn2 = _certify._entry_bounds_of(a_, w_, v_)

            def exact(x):  # (real part, imaginary part) as Fractions
                x = np.asarray(x, dtype=np.complex128)
                return [[(Fraction(float(e.real)), Fraction(float(e.imag))) for e in row]
                        for row in x]

            ae, ve, we = exact(a_), exact(v_), [Fraction(float(x)) for x in w_]
            for i in range(n):
                for j in range(n):
                    rr = sum(ae[i][k][0] * ve[k][j][0] - ae[i][k][1] * ve[k][j][1]
                             for k in range(n)) - ve[i][j][0] * we[j]
                    ri = sum(ae[i][k][0] * ve[k][j][1] + ae[i][k][1] * ve[k][j][0]
                             for k in range(n)) - ve[i][j][1] * we[j]
                    gr = sum(ve[k][i][0] * ve[k][j][0] + ve[k][i][1] * ve[k][j][1]
                             for k in range(n)) - (i == j)
                    gi = sum(ve[k][i][0] * ve[k][j][1] - ve[k][i][1] * ve[k][j][0]
                             for k in range(n))
                    assert abs(rr) <= Fraction(float(rb[i, j]))
                    assert abs(gr) <= Fraction(float(gb[i, j]))
                    if rb.shape[0] > n:
                        assert abs(ri) <= Fraction(float(rb[n + i, j]))
                        assert abs(gi) <= Fraction(float(gb[n + i, j]))
                    else:
                        assert ri == 0 and gi == 0
            for j in range(n):
                norm2 = sum(ve[k][j][0] ** 2 + ve[k][j][1] ** 2 for k in range(n))
                assert Fraction(float(vn2[j])) <= norm2

    def test_norm_bound_holds_exactly(self):
        rng = np.random.default_rng(10)
        for scale in (1.0, 2.0**-1070, 2.0**-600, 2.0**600, 2.0**1000):
            b = np.abs(rng.standard_normal((7, 5))) * scale
            b[0, 0] = 0.0
            with np.errstate(all="ignore"):
                whole = _certify._norm_up(b)
                cols = _certify._norm_up(b, axis=0)
            assert Fraction(whole) ** 2 >= sum(Fraction(float(x)) ** 2 for x in b.ravel())
            for j in range(5):
                assert Fraction(float(cols[j])) ** 2 >= sum(Fraction(float(x)) ** 2
                                                            for x in b[:, j])
            assert whole <= 1.01 * np.sqrt(np.sum((b / scale) ** 2)) * scale + 2.0**-1000

    @pytest.mark.parametrize("method", ["rn", "crt", "bitmask-ef"])
    def test_any_ambient_method(self, method):
        rng = np.random.default_rng(12)
        a = _hermitian(rng, "random", 8, True)
        w, v = np.linalg.eigh(a)
        with ozlinalg.options(method=method):
            r = certify_eigh(a, w, v)
        assert np.all(r <= 100 * 8 * U * np.linalg.norm(a))
        _check_enclosure(_exact_eigenvalues(a), w, r, np.linalg.norm(a))

    def test_property_perturbed_pairs(self):
        hypothesis = pytest.importorskip("hypothesis")
        st = hypothesis.strategies

        @hypothesis.settings(max_examples=25, deadline=None)
        @hypothesis.given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6),
                          cplx=st.booleans(),
                          noise=st.sampled_from([0.0, 1e-15, 1e-10, 1e-6, 1e-2, 0.5]),
                          scale=st.sampled_from([1.0, 2.0**-30, 2.0**40]))
        def prop(seed, n, cplx, noise, scale):
            rng = np.random.default_rng(seed)
            g = rng.standard_normal((n, n))
            if cplx:
                g = g + 1j * rng.standard_normal((n, n))
            a = (g + g.conj().T) * scale
            w, v = np.linalg.eigh(a)
            w = w + noise * scale * rng.standard_normal(n)
            dv = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if cplx else 0)
            v = v + noise * dv
            r = certify_eigh(a, w, v)
            with mpmath.workdps(50):
                _check_enclosure(_exact_eigenvalues(a), w, r, np.linalg.norm(a))
            if noise == 0.0:
                assert np.all(r <= 100 * n * U * np.linalg.norm(a))

        prop()
