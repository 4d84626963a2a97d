"""Complex input to the blocked factorizations (ozlinalg.lapack) and to the
SciPy / NumPy compatible layers (ozlinalg.linalg, ozlinalg.numpy_linalg).

As in tests/linalg/test_lapack.py: emulation forced at every size (``min_size=0``,
``min_size=0``), small block sizes so that the blocking (and the complex
emulated trailing updates) is exercised, backward errors within a factor 4 of
LAPACK's (scipy's z routines) on the same input, results close to SciPy's.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
from numpy.linalg import LinAlgError
from scipy.linalg import LinAlgWarning

import ozlinalg
import ozlinalg.linalg as ol
from ozlinalg import numpy_linalg as onl
from ozlinalg.lapack import geqrf, getrf, getrs, orgqr, ormqr, potrf, potrs, trsm

EPS = np.finfo(np.float64).eps
FACTOR = 4.0
EMU = dict(min_size=0)
SIZES = [1, 2, 7, 33, 64, 150]


pytestmark = pytest.mark.usefixtures("one_blas_thread")


@pytest.fixture(autouse=True)
def _emulate_everything():
    with ozlinalg.options(min_size=0):
        yield


def crand(rng, *shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def hpd(rng, n):
    a = crand(rng, n, n)
    return a @ a.conj().T + n * np.eye(n)


def within(err, ref, a):
    """Backward error within FACTOR of LAPACK's, or of n ulps (n: the largest
    dimension of ``a``; as in tests/linalg/test_lapack.py)."""
    return err <= FACTOR * max(ref, max(np.shape(a)) * EPS)


def nrm(x):
    return np.linalg.norm(x, 1)


def rel(x, ref):
    return np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-300)


def nb_for(n):
    return max(1, min(16, (n + 2) // 3))


# ---------------------------------------------------------------- lapack


@pytest.mark.parametrize("n", SIZES)
def test_getrf_getrs(n):
    rng = np.random.default_rng(100 + n)
    a = crand(rng, n, n)
    b = crand(rng, n, 3)
    a0, b0 = a.copy(), b.copy()
    lu, piv = getrf(a, block_size=nb_for(n), **EMU)
    lu0, piv0 = sla.lu_factor(a)
    assert lu.dtype == np.complex128

    def back(lu_, piv_):
        perm = np.arange(n)
        for i, q in enumerate(piv_):
            perm[i], perm[q] = perm[q], perm[i]
        l_ = np.tril(lu_, -1) + np.eye(n)
        return nrm(a[perm] - l_ @ np.triu(lu_)) / nrm(a)

    assert within(back(lu, piv), back(lu0, piv0), a)
    np.testing.assert_array_equal(piv, piv0)
    assert rel(lu, lu0) < 1e-10
    for trans in (0, 1, 2):
        x = getrs(lu, piv, b, trans=trans, block_size=nb_for(n), **EMU)
        x0 = sla.lu_solve((lu0, piv0), b, trans=trans)
        op = {0: a, 1: a.T, 2: a.conj().T}[trans]
        r, r0 = nrm(op @ x - b), nrm(op @ x0 - b)
        assert within(r / (nrm(a) * nrm(x)), r0 / (nrm(a) * nrm(x0)), a)
        assert rel(x, x0) < 1e-8
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("lower", [True, False])
def test_potrf_potrs(n, lower):
    rng = np.random.default_rng(200 + n)
    a = hpd(rng, n)
    b = crand(rng, n, 2)
    a0 = a.copy()
    c = potrf(a, lower=lower, block_size=nb_for(n), **EMU)
    c0 = sla.cholesky(a, lower=lower)
    rec = c @ c.conj().T if lower else c.conj().T @ c
    rec0 = c0 @ c0.conj().T if lower else c0.conj().T @ c0
    assert within(nrm(a - rec) / nrm(a), nrm(a - rec0) / nrm(a), a)
    assert rel(c, c0) < 1e-12
    x = potrs(c, b, lower=lower, block_size=nb_for(n), **EMU)
    x0 = sla.cho_solve((c0, lower), b)
    assert within(nrm(a @ x - b) / (nrm(a) * nrm(x)), nrm(a @ x0 - b) / (nrm(a) * nrm(x0)), a)
    np.testing.assert_array_equal(a, a0)


def test_potrf_not_positive_definite():
    rng = np.random.default_rng(3)
    a = hpd(rng, 40)
    a[30, 30] = -1.0
    with pytest.raises(LinAlgError, match="31-th leading minor"):
        potrf(a, lower=True, block_size=8, **EMU)
    with pytest.raises(LinAlgError, match="31-th leading minor"):
        potrf(a, lower=False, block_size=8, **EMU)


@pytest.mark.parametrize("shape", [(1, 1), (9, 4), (40, 40), (70, 33), (33, 70), (150, 60)])
def test_geqrf_orgqr_ormqr(shape):
    m, n = shape
    rng = np.random.default_rng(m * 1000 + n)
    a = crand(rng, m, n)
    a0 = a.copy()
    k = min(m, n)
    nb = nb_for(k)
    qr, tau = geqrf(a, block_size=nb, **EMU)
    (qr0, tau0), _ = sla.qr(a, mode="raw")
    assert qr.dtype == tau.dtype == np.complex128
    assert rel(qr, qr0) < 1e-10 and rel(tau, tau0) < 1e-10
    q = orgqr(qr[:, :m] if n > m else qr, tau, block_size=nb, **EMU)
    r = np.triu(qr[:k])
    q0 = sla.qr(a, mode="economic")[0]
    assert within(nrm(a - q @ r) / nrm(a), nrm(a - q0 @ np.triu(qr0[:k])) / nrm(a), a)
    orth0 = nrm(q0.conj().T @ q0 - np.eye(k))
    assert nrm(q.conj().T @ q - np.eye(k)) <= FACTOR * max(orth0, m * EPS)
    c = crand(rng, m, 3)
    qfull = sla.qr(a)[0]
    for side, trans, want in [("L", "C", qfull.conj().T @ c), ("L", "N", qfull @ c)]:
        y = ormqr(qr, tau, c, side=side, trans=trans, block_size=nb, **EMU)
        assert rel(y, want) < 1e-12
    y = ormqr(qr, tau, c.T, side="R", trans="C", block_size=nb, **EMU)
    assert rel(y, c.T @ qfull.conj().T) < 1e-12  # c^T Q^H
    with pytest.raises(ValueError, match="'C'"):
        ormqr(qr, tau, c, trans="T", **EMU)
    np.testing.assert_array_equal(a, a0)


@pytest.mark.parametrize("n", [1, 5, 40, 100])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("lower", [True, False])
def test_trsm(n, trans, lower):
    rng = np.random.default_rng(300 + n)
    a = crand(rng, n, n) + 4 * np.sqrt(n) * np.eye(n)  # well conditioned triangle
    b = crand(rng, n, 4)
    b0 = b.copy()
    x = trsm(a, b, lower=lower, trans=trans, block_size=8, **EMU)
    x0 = sla.solve_triangular(a, b, lower=lower, trans=trans)
    assert rel(x, x0) < 1e-12
    t = np.tril(a) if lower else np.triu(a)
    op = {0: t, 1: t.T, 2: t.conj().T}[trans]
    assert within(nrm(op @ x - b) / (nrm(t) * nrm(x)), nrm(op @ x0 - b) / (nrm(t) * nrm(x0)), t)
    xr = trsm(a, b.T, side="R", lower=lower, trans=trans, block_size=8, **EMU)
    assert rel(xr @ op, b.T) < 1e-12
    np.testing.assert_array_equal(b, b0)


def test_mixed_real_complex():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((30, 30))
    b = crand(rng, 30, 2)
    lu, piv = getrf(a, block_size=8, **EMU)
    assert lu.dtype == np.float64
    for trans in (0, 1, 2):
        x = getrs(lu, piv, b, trans=trans, block_size=8, **EMU)
        assert x.dtype == np.complex128
        assert rel(x, sla.lu_solve(sla.lu_factor(a), b, trans=trans)) < 1e-10


def test_getrf_singular_warns():
    a = np.ones((20, 20), dtype=complex) * (1 + 1j)
    with pytest.warns(LinAlgWarning, match="exactly zero"):
        getrf(a, block_size=4, **EMU)


def test_real_path_unchanged_dtype():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((20, 20))
    assert getrf(a, block_size=4, **EMU)[0].dtype == np.float64
    assert geqrf(a, block_size=4, **EMU)[1].dtype == np.float64


# ---------------------------------------------------------------- scipy layer


@pytest.mark.parametrize("n", [1, 3, 40, 130])
def test_lu_functions(n):
    rng = np.random.default_rng(400 + n)
    a = crand(rng, n, n)
    b = crand(rng, n, 2)
    a0 = a.copy()
    lu, piv = ol.lu_factor(a)
    lu0, piv0 = sla.lu_factor(a)
    assert lu.dtype == np.complex128 and rel(lu, lu0) < 1e-10
    for trans in (0, 1, 2):
        assert rel(ol.lu_solve((lu, piv), b, trans=trans),
                   sla.lu_solve((lu0, piv0), b, trans=trans)) < 1e-8
    p, l_, u = ol.lu(a)
    p0, l0, u0 = sla.lu(a)
    assert p.dtype == p0.dtype and l_.dtype == l0.dtype
    np.testing.assert_array_equal(p, p0)
    assert rel(p @ l_ @ u, a) < 1e-13
    np.testing.assert_array_equal(a, a0)
    lu32, _ = ol.lu_factor(a.astype(np.complex64))
    assert lu32.dtype == np.complex64


@pytest.mark.parametrize("n", [1, 4, 60])
def test_cholesky_functions(n):
    rng = np.random.default_rng(500 + n)
    a = hpd(rng, n)
    b = crand(rng, n)
    a0 = a.copy()
    for lower in (False, True):
        c = ol.cholesky(a, lower=lower)
        assert rel(c, sla.cholesky(a, lower=lower)) < 1e-12
        cf = ol.cho_factor(a, lower=lower)
        x = ol.cho_solve(cf, b)
        assert rel(x, sla.cho_solve(sla.cho_factor(a, lower=lower), b)) < 1e-10
    np.testing.assert_array_equal(a, a0)
    assert ol.cholesky(a.astype(np.complex64)).dtype == np.complex64


def test_cholesky_not_positive_definite():
    a = np.array([[1, 2j], [-2j, 1]])  # Hermitian, eigenvalues -1 and 3
    with pytest.raises(LinAlgError, match="2-th leading minor"):
        ol.cholesky(a)
    with pytest.raises(LinAlgError, match="2-th leading minor"):
        sla.cholesky(a)
    with pytest.raises(LinAlgError, match="not positive definite"):
        onl.cholesky(a)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (60, 40), (40, 60)])
@pytest.mark.parametrize("mode", ["full", "economic", "r", "raw"])
def test_qr(shape, mode):
    rng = np.random.default_rng(sum(shape))
    a = crand(rng, *shape)
    got, want = ol.qr(a, mode=mode), sla.qr(a, mode=mode)
    if mode == "raw":
        got, want = (*got[0], got[1]), (*want[0], want[1])
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert rel(g, w) < 1e-10


@pytest.mark.parametrize("assume_a", [None, "gen", "sym", "her", "hermitian", "pos"])
@pytest.mark.parametrize("lower", [False, True])
def test_solve(assume_a, lower):
    rng = np.random.default_rng(7)
    n = 50
    g = crand(rng, n, n)
    a = {"sym": g + g.T, "gen": g, None: hpd(rng, n)}.get(assume_a, hpd(rng, n))
    if assume_a in ("her", "hermitian"):
        a = a + np.diag(1e-3j * np.ones(n))  # a non-real diagonal is ignored, as hetrf
    b = crand(rng, n, 3)
    a0 = a.copy()
    x = ol.solve(a, b, assume_a=assume_a, lower=lower)
    x0 = sla.solve(a, b, assume_a=assume_a, lower=lower)
    assert x.dtype == x0.dtype and rel(x, x0) < 1e-9
    np.testing.assert_array_equal(a, a0)


def test_solve_details():
    rng = np.random.default_rng(8)
    a = crand(rng, 20, 20)
    with pytest.raises(NotImplementedError):
        ol.solve(a, np.ones(20), transposed=True)
    with pytest.raises(LinAlgError, match="singular"):
        ol.solve(np.ones((20, 20), dtype=complex), np.ones(20))
    d = np.diag(crand(rng, 5))
    assert rel(ol.solve(d, np.ones(5)), sla.solve(d, np.ones(5))) < 1e-14
    x = ol.solve(a.real, crand(rng, 20))  # real a, complex b
    assert x.dtype == np.complex128
    assert ol.solve(a.astype(np.complex64), np.ones(20, np.float32)).dtype == np.complex64


@pytest.mark.parametrize("trans", [0, 1, 2, "C"])
def test_solve_triangular(trans):
    rng = np.random.default_rng(9)
    a = crand(rng, 60, 60) + 20 * np.eye(60)
    b = crand(rng, 60, 2)
    for lower in (True, False):
        x = ol.solve_triangular(a, b, trans=trans, lower=lower)
        assert rel(x, sla.solve_triangular(a, b, trans=trans, lower=lower)) < 1e-12
    a[5, 5] = 0
    with pytest.raises(LinAlgError, match="diagonal 5"):
        ol.solve_triangular(a, b)


def test_inv_det():
    rng = np.random.default_rng(10)
    a = crand(rng, 45, 45)
    assert rel(ol.inv(a), sla.inv(a)) < 1e-10
    h = hpd(rng, 30)
    for kind in ("her", "pos"):
        for lower in (False, True):
            assert rel(ol.inv(h, assume_a=kind, lower=lower),
                       sla.inv(h, assume_a=kind, lower=lower)) < 1e-10
    d, d0 = ol.det(a), sla.det(a)
    assert type(d) is type(d0) is np.complex128 and abs(d - d0) < 1e-10 * abs(d0)
    assert ol.det(np.ones((0, 0), complex)).dtype == np.complex128
    with pytest.raises(LinAlgError, match="singular"):
        ol.inv(np.ones((6, 6), dtype=complex))
    assert ol.det(np.ones((6, 6), dtype=complex)) == 0


@pytest.mark.parametrize("shape", [(40, 25), (25, 40), (30, 30)])
@pytest.mark.parametrize("vec", [True, False])
def test_lstsq(shape, vec):
    rng = np.random.default_rng(11)
    a = crand(rng, *shape)
    b = crand(rng, shape[0]) if vec else crand(rng, shape[0], 2)
    x, res, rank, s = ol.lstsq(a, b)
    x0, res0, rank0, s0 = sla.lstsq(a, b)
    assert rank == rank0 and rel(x, x0) < 1e-10 and rel(s, s0) < 1e-12
    assert np.shape(res) == np.shape(res0) and np.asarray(res).dtype == np.asarray(res0).dtype
    if np.size(res0):
        np.testing.assert_allclose(res, res0, rtol=1e-9)


def test_backend_routes_complex():
    rng = np.random.default_rng(12)
    a = crand(rng, 24, 24)
    b = crand(rng, 24)
    with ozlinalg.backend(strategy="eager", min_size=0), ozlinalg.profile() as prof:
        x = np.linalg.solve(a, b)
        lu = sla.lu_factor(a)
    assert prof.emulated_gemm_calls > 0
    assert rel(x, np.linalg.solve(a, b)) < 1e-10
    assert rel(lu[0], sla.lu_factor(a)[0]) < 1e-10


# ---------------------------------------------------------------- numpy layer


def test_numpy_functions():
    rng = np.random.default_rng(13)
    a = crand(rng, 3, 20, 20)
    b = crand(rng, 3, 20, 2)
    h = hpd(rng, 20)
    a0 = a.copy()
    assert rel(onl.solve(a, b), np.linalg.solve(a, b)) < 1e-10
    assert rel(onl.inv(a), np.linalg.inv(a)) < 1e-10
    assert rel(onl.det(a), np.linalg.det(a)) < 1e-10
    s, ld = onl.slogdet(a)
    s0, ld0 = np.linalg.slogdet(a)
    assert s.dtype == s0.dtype and ld.dtype == ld0.dtype
    assert rel(s, s0) < 1e-12 and rel(ld, ld0) < 1e-12
    for upper in (False, True):
        assert rel(onl.cholesky(h, upper=upper), np.linalg.cholesky(h, upper=upper)) < 1e-12
    for mode in ("reduced", "complete", "r", "raw"):
        g, w = onl.qr(a[0, :, :12], mode=mode), np.linalg.qr(a[0, :, :12], mode=mode)
        for u, v in zip(g if isinstance(g, tuple) else (g,), w if isinstance(w, tuple) else (w,)):
            assert u.dtype == v.dtype and rel(u, v) < 1e-10
    x, res, rank, sv = onl.lstsq(a[0, :, :12], b[0])
    x0, res0, rank0, sv0 = np.linalg.lstsq(a[0, :, :12], b[0])
    assert rank == rank0 and rel(x, x0) < 1e-10 and rel(res, res0) < 1e-9
    assert res.dtype == res0.dtype and sv.dtype == sv0.dtype
    np.testing.assert_array_equal(a, a0)
    with pytest.raises(LinAlgError, match="Singular matrix"):
        onl.solve(np.ones((5, 5), complex), np.ones(5))
    s, ld = onl.slogdet(np.ones((5, 5), complex))
    assert s == 0 and ld == -np.inf
    assert onl.inv(a[0].astype(np.complex64)).dtype == np.complex64
