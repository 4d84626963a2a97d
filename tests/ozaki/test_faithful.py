"""``accuracy="faithful"``: every finite entry one of the two floats around the exact
product, against python-flint's exact product (``ozlinalg.testing.ExactReference``).

What would fail if the guarantee stopped holding:

* ``TestMatmul`` / ``TestRanges``: the results themselves, over methods, shapes,
  dtypes, memory orders, batches, complex input, and the whole float64 range
  (huge spreads, subnormal and overflowing results, zeros, Inf/NaN);
* ``TestCertificate``: the certificate alone, with the exact recomputation
  switched off: every entry the bound certifies must already be faithful (a bound
  that were too small fails here), and the certificate must certify nearly all
  entries at the automatic count (a vacuous bound fails here);
* ``TestExactDots``: the recomputation path (Dot2, exact limbs, the NumPy path);
* ``test_faithful_property``: hypothesis over tests/ozaki/test_properties.py's inputs.
"""
import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ozlinalg
from ozlinalg.ozaki import crt, exactdot, faithful, params
from ozlinalg.testing import ExactReference, random_matrix

pytest.importorskip("flint")

FAITHFUL = list(faithful.FAITHFUL_METHODS)


def faithful_mask(c, ref):
    """True where ``c`` is a faithful rounding of the exact product held by ``ref``."""
    hi, lo = ref.hi, ref.lo
    with np.errstate(over="ignore"):
        up = np.nextafter(hi, np.inf)
        dn = np.nextafter(hi, -np.inf)
    ok = (c == hi) | ((lo > 0) & (c == up)) | ((lo < 0) & (c == dn))
    big = np.finfo(np.float64).max  # beyond the range: RD is +-max, RU +-inf
    ok |= np.isinf(hi) & ((c == hi) | ((np.abs(c) == big) & (np.sign(c) == np.sign(hi))))
    return ok


def assert_faithful(c, a, b):
    ref = ExactReference(a, b)
    ok = faithful_mask(np.asarray(c), ref)
    assert ok.all(), f"{int((~ok).sum())} of {ok.size} entries not faithful"


def product(a, b, **kw):
    with ozlinalg.profile() as prof:
        c = ozlinalg.matmul(a, b, accuracy="faithful", **kw)
    return c, prof


class TestMatmul:
    @pytest.mark.parametrize("method", FAITHFUL)
    @pytest.mark.parametrize("phi", [0.5, 2.0, 4.0])
    def test_methods_and_spreads(self, rng, method, phi):
        a = random_matrix(rng, 37, 230, phi)
        b = random_matrix(rng, 230, 29, phi)
        c, prof = product(a, b, method=method)
        assert_faithful(c, a, b)
        assert prof.entries_certified + prof.entries_recomputed == c.size
        assert prof.calls[0].accuracy == "faithful"

    @pytest.mark.parametrize("shape", [(1, 1, 1), (1, 7, 1), (3, 1, 4), (5, 33, 2),
                                       (0, 4, 3), (4, 0, 3), (17, 64, 13)])
    @pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
    def test_shapes(self, rng, shape, method):
        m, k, p = shape
        a = random_matrix(rng, m, k, 1.0)
        b = random_matrix(rng, k, p, 1.0)
        c, _ = product(a, b, method=method)
        assert c.shape == (m, p)
        if c.size:
            assert_faithful(c, a, b)

    @pytest.mark.parametrize("orders", ["CF", "FC", "FF"])
    def test_memory_orders_same_bits(self, rng, orders):
        a = random_matrix(rng, 40, 150, 2.0)
        b = random_matrix(rng, 150, 30, 2.0)
        want, _ = product(a, b)
        x = np.asfortranarray(a) if orders[0] == "F" else a
        y = np.asfortranarray(b) if orders[1] == "F" else b
        got, _ = product(x, y)
        assert_array_equal(got, want)
        # and the DGEMM-level mode (docs/guarantees.md: memory order is not an input)
        assert_array_equal(ozlinalg.matmul(x, y), ozlinalg.matmul(a, b))

    def test_dtypes_vectors_and_batches(self, rng):
        a = rng.integers(-1000, 1000, (3, 12, 40))
        b = random_matrix(rng, 40, 9, 1.0).astype(np.float32)
        c, _ = product(a, b)
        for t in range(3):
            assert_faithful(c[t], a[t].astype(float), b.astype(float))
        v = random_matrix(rng, 1, 40, 2.0)[0]
        cv, _ = product(v, b)
        assert cv.shape == (9,)
        assert_faithful(cv[None], v[None], b.astype(float))

    def test_complex_parts_each_faithful(self, rng):
        a = random_matrix(rng, 9, 50, 1.0) + 1j * random_matrix(rng, 9, 50, 1.0) * 1e-8
        b = random_matrix(rng, 50, 7, 1.0) + 1j * random_matrix(rng, 50, 7, 1.0)
        c, _ = product(a, b)
        ar, ai, br, bi = a.real, a.imag, b.real, b.imag
        # each part is ONE real product (4m-fused): faithful to its exact value
        assert_faithful(c.real, np.hstack([ar, -ai]), np.vstack([br, bi]))
        assert_faithful(c.imag, np.hstack([ai, ar]), np.vstack([br, bi]))

    def test_min_size_does_not_go_native(self, rng):
        a = random_matrix(rng, 6, 80, 1.0)
        b = random_matrix(rng, 80, 5, 1.0)
        with ozlinalg.options(min_size=100):
            c, prof = product(a, b)
        assert prof.emulated_gemm_calls == 1
        assert_faithful(c, a, b)

    def test_options_and_errors(self, rng):
        a = random_matrix(rng, 8, 30, 1.0)
        b = random_matrix(rng, 30, 6, 1.0)
        with ozlinalg.options(accuracy="faithful"), ozlinalg.profile() as prof:
            c = ozlinalg.matmul(a, b)
        assert prof.calls[0].accuracy == "faithful"
        assert_faithful(c, a, b)
        with pytest.raises(ValueError, match="accuracy must be"):
            ozlinalg.matmul(a, b, accuracy="exact")
        with pytest.raises(ValueError, match="accuracy must be"):
            ozlinalg.options(accuracy="bogus")
        with pytest.raises(ValueError, match="needs one of the methods"):
            ozlinalg.matmul(a, b, accuracy="faithful", method="rn")
        with ozlinalg.profile() as prof:
            ozlinalg.matmul(a, b)
        assert prof.calls[0].accuracy == "dgemm"


class TestRanges:
    @pytest.mark.parametrize("method", FAITHFUL)
    @pytest.mark.parametrize("t", [40, 600])
    @pytest.mark.parametrize("balance", ["auto", False])
    def test_inner_dimension_scaled(self, rng, method, t, balance):
        # X D and D^-1 Y: huge spreads within every row; beyond max_slices, the
        # entries auto would hand to native FP64 are computed exactly instead
        d = np.ldexp(1.0, rng.integers(-t, t + 1, 60))
        a = rng.uniform(-1, 1, (7, 60)) * d[None, :]
        b = rng.uniform(-1, 1, (60, 5)) / d[:, None]
        c, _ = product(a, b, method=method, balance=balance)
        assert_faithful(c, a, b)

    @pytest.mark.parametrize("method", FAITHFUL)
    def test_subnormal_overflowing_and_zero_results(self, rng, method):
        a = random_matrix(rng, 6, 40, 1.0)
        b = random_matrix(rng, 40, 6, 1.0)
        a[0] *= 2.0**-530
        b[:, 0] *= 2.0**-530  # entry (0, 0) around 2**-1060: subnormal
        a[1] *= 2.0**520
        b[:, 1] *= 2.0**505  # entry (1, 1) beyond the range
        a[2] = 0.0  # a zero row: exact zeros
        b[3, 2] = 2.0**-1074
        with np.errstate(all="ignore"):
            c, _ = product(a, b, method=method)
        assert_faithful(c, a, b)
        assert (c[2] == 0).all()

    @pytest.mark.parametrize("method", FAITHFUL)
    def test_inf_nan_rows_match_native(self, rng, method):
        a = random_matrix(rng, 5, 30, 1.0)
        b = random_matrix(rng, 30, 4, 1.0)
        a[1, 3] = np.inf
        b[7, 2] = np.nan
        with np.errstate(all="ignore"):
            c, _ = product(a, b, method=method)
            want = a @ b
        fin = np.isfinite(a).all(axis=1)[:, None] & np.isfinite(b).all(axis=0)[None, :]
        assert_array_equal(np.isfinite(c), np.isfinite(want))
        assert_faithful(c[np.ix_(fin[:, 0], fin[0])], a[fin[:, 0]], b[:, fin[0]])


class TestCertificate:
    """The bound alone (recomputation off): what it certifies is faithful."""

    @staticmethod
    def emulated_and_certified(monkeypatch, a, b, **kw):
        """The emulated values before recomputation, and the certified mask."""
        seen = []  # recomputation runs a tile and a chunk of entries at a time

        def record(xp, c, aa, bt, rows, cols, threads=None, scratch=None, prepared=None):
            seen.append((np.asarray(rows), np.asarray(cols)))

        monkeypatch.setattr(faithful, "recompute", record)
        c, prof = product(a, b, **kw)
        cert = np.ones(c.shape, bool)
        for rows, cols in seen:
            cert[rows, cols] = False
        return c, cert, prof

    @pytest.mark.parametrize("method, counts", [("hybrid-ef", [6, 8, 10]),
                                                ("bitmask-ef", [7, 9, 11]),
                                                ("crt", [12, 15, 18]),
                                                ("crt-fast", [12, 16, 19])])
    @pytest.mark.parametrize("phi", [0.5, 3.0])
    def test_certified_entries_are_faithful(self, rng, monkeypatch, method, counts, phi):
        a = random_matrix(rng, 40, 300, phi)
        b = random_matrix(rng, 300, 35, phi)
        ref = ExactReference(a, b)
        for s in counts:
            c, cert, _ = self.emulated_and_certified(monkeypatch, a, b, method=method,
                                                     slices=s)
            ok = faithful_mask(c, ref)
            assert ok[cert].all(), (method, s, int((cert & ~ok).sum()))
        # the largest count certifies something: the check above is not vacuous
        assert cert.any()

    @pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
    def test_inner_blocks_combined(self, rng, monkeypatch, method):
        # several inner blocks: the certificate of their compensated sum
        monkeypatch.setattr(params, "INT8_INNER_BLOCK", 96)
        from ozlinalg.ozaki.crt import product as crt_product

        monkeypatch.setattr(crt_product, "CRT_INNER_BLOCK", 96)
        a = random_matrix(rng, 12, 350, 2.0)
        b = random_matrix(rng, 350, 10, 2.0)
        ref = ExactReference(a, b)
        c, cert, prof = self.emulated_and_certified(monkeypatch, a, b, method=method)
        assert prof.slices[0] > 0 and cert.mean() > 0.5  # blocks cancel: a weaker bound
        assert faithful_mask(c, ref)[cert].all()

    @pytest.mark.parametrize("method", FAITHFUL)
    def test_auto_certifies_nearly_everything(self, rng, method):
        a = random_matrix(rng, 160, 1024, 0.5)
        b = random_matrix(rng, 1024, 140, 0.5)
        c, prof = product(a, b, method=method)
        assert prof.entries_certified >= 0.99 * c.size
        assert_faithful(c, a, b)
        with ozlinalg.profile() as dg:
            ozlinalg.matmul(a, b, method=method)
        extra = faithful.EXTRA_MODULI if method.startswith("crt") else faithful.EXTRA_SLICES
        assert prof.slices[0] == dg.slices[0] + extra

    @pytest.mark.parametrize("method", ["crt", "crt-fast"])
    @pytest.mark.parametrize("phi", [0.5, 1.0, 2.0, 4.0])
    def test_predicted_moduli_count(self, rng, monkeypatch, method, phi):
        # moduli="auto" from faithful_moduli's sampled prediction (large products; here
        # forced on a small one): between MIN_EXTRA and EXTRA_MODULI more than the
        # DGEMM-level count, nearly everything certified, every entry faithful
        from ozlinalg.ozaki.crt import certify as crt_certify

        monkeypatch.setattr(faithful, "PREDICT_MIN_SIZE", 0)
        a = random_matrix(rng, 150, 700, phi)
        b = random_matrix(rng, 700, 130, phi)
        c, prof = product(a, b, method=method)
        assert_faithful(c, a, b)
        with ozlinalg.profile() as dg:
            ozlinalg.matmul(a, b, method=method)
        n_auto = dg.slices[0]
        assert (min(n_auto + crt_certify.MIN_EXTRA, crt.MAX_MODULI) <= prof.slices[0]
                <= min(n_auto + faithful.EXTRA_MODULI, crt.MAX_MODULI))
        assert prof.entries_certified >= 0.98 * c.size

    @pytest.mark.parametrize("method", ["hybrid-ef", "bitmask-ef"])
    @pytest.mark.parametrize("phi", [0.5, 1.0, 2.0])
    def test_predicted_slices_count(self, rng, monkeypatch, method, phi):
        # slices="auto" from gemm.predicted_slices (large products; here forced on a
        # small one, in several output tiles): one or two slices above the DGEMM-level
        # count, nearly everything certified, every entry faithful
        monkeypatch.setattr(faithful, "PREDICT_MIN_SIZE", 0)
        a = random_matrix(rng, 150, 700, phi)
        b = random_matrix(rng, 700, 130, phi)
        with ozlinalg.options(memory_limit=4 << 20):
            c, prof = product(a, b, method=method)
        assert_faithful(c, a, b)
        with ozlinalg.profile() as dg:
            ozlinalg.matmul(a, b, method=method)
        n_auto = dg.slices[0]
        assert set(prof.slices) <= {n_auto + 1, n_auto + faithful.EXTRA_SLICES}
        assert prof.entries_certified >= 0.98 * c.size

    def test_prediction_of_the_uncertified_fraction(self):
        from ozlinalg.ozaki.faithful import predicted_uncertified

        rng = np.random.default_rng(5)
        # |c| uniform near zero: P(rho >= t) = P(|c| <= s / t) falls as 1 / t
        rho = 1e-3 / rng.uniform(0.0, 1.0, 200000)
        f = predicted_uncertified(rho, [1e-3, 1e-2, 0.1, 1.0, 10.0])
        np.testing.assert_allclose(f, [1.0, 0.1, 0.01, 1e-3, 1e-4], rtol=0.3)
        sub = rho[:1024]  # the extrapolated tail
        np.testing.assert_allclose(predicted_uncertified(sub, [1.0, 10.0]), [1e-3, 1e-4],
                                   rtol=0.6)
        assert predicted_uncertified(np.zeros(100), [1.0]) == [0.0]

    def test_low_counts_recompute_instead_of_guessing(self, rng):
        a = random_matrix(rng, 20, 100, 1.0)
        b = random_matrix(rng, 100, 15, 1.0)
        c, prof = product(a, b, slices=3)
        assert prof.entries_recomputed == c.size  # three slices certify nothing here
        assert_faithful(c, a, b)
        assert_array_equal(c, ExactReference(a, b).rounded())  # recomputed: nearest


class TestExactDots:
    @staticmethod
    def check(a, b, **kw):
        m, p = a.shape[0], b.shape[1]
        rows, cols = np.meshgrid(np.arange(m), np.arange(p), indexing="ij")
        got = exactdot.exact_dots(np, a, b.T.copy(), rows.ravel(), cols.ravel(), **kw)
        with np.errstate(all="ignore"):
            assert_array_equal(got.reshape(m, p), ExactReference(a, b).rounded())

    @pytest.mark.parametrize("path", ["dot2", "limbs", "numpy"])
    def test_correctly_rounded_everywhere(self, rng, monkeypatch, path):
        if path == "numpy":
            monkeypatch.setattr(exactdot, "_kernels", lambda: None)
        kw = {"dot2": path == "dot2"}
        for k in (1, 5, 300, 5000):
            self.check(random_matrix(rng, 6, k, 4.0), random_matrix(rng, k, 5, 4.0), **kw)
        a = random_matrix(rng, 7, 64, 1.0)
        b = random_matrix(rng, 64, 6, 1.0)
        a[::2] *= 2.0**-1000
        b[:, 1] *= 2.0**-70
        a[1, 3] = 2.0**-1074
        b[3, :] = 2.0**1000
        a[3] *= 2.0**900
        a[5] = a[4]
        b[:, 5] = -b[:, 4]  # exact cancellation: zeros
        self.check(a, b, **kw)

    @pytest.mark.parametrize("layout", ["B^T view", "B^T view, pooled", "C rows"])
    def test_operand_layouts(self, rng, layout):
        # the rows of B^T as a view of a row-major B (gathered by columns, in a pooled
        # buffer or not) and a C-contiguous A used in place: the same correctly
        # rounded values
        from ozlinalg.engines._scratch import ScratchPool

        a = random_matrix(rng, 40, 700, 2.0)
        b = random_matrix(rng, 700, 30, 2.0)
        rows = rng.integers(0, 40, 300)
        cols = rng.integers(0, 30, 300)
        bt = b.T if layout.startswith("B^T") else b.T.copy()
        scratch = ScratchPool(1 << 30) if layout.endswith("pooled") else None
        got = exactdot.exact_dots(np, a, bt, rows, cols, scratch=scratch)
        want = ExactReference(a, b).rounded()[rows, cols]
        assert_array_equal(got, want)
        picked = exactdot._gathered(np, bt, np.array([5, 3, 3, 0]), scratch)
        assert_array_equal(picked, b.T[[5, 3, 3, 0]])

    def test_dot2_lanes_settle_most_and_round_correctly(self, rng, monkeypatch):
        # the contiguous Dot2 kernel (eight lanes, an a posteriori bound): every tail
        # length k mod 8, scaled entries that underflow (row max 2**1000 beside
        # 2**-1000), tiny rows, heavy cancellation; what it settles is correctly rounded
        # and nearly everything is settled on ordinary rows
        ker = exactdot._kernels()
        if ker is None:
            pytest.skip("no compiled kernels")
        settled = []
        real = exactdot._dot2_first

        def spy(*args, **kw):
            done = real(*args, **kw)
            settled.append(done.mean())
            return done

        monkeypatch.setattr(exactdot, "_dot2_first", spy)
        for k in (1, 7, 8, 9, 15, 16, 17, 64, 1003):
            a = random_matrix(rng, 9, k, 1.0)
            b = random_matrix(rng, k, 8, 1.0)
            self.check(a, b)
        assert min(settled) > 0.99
        a = random_matrix(rng, 8, 203, 2.0)
        b = random_matrix(rng, 203, 7, 2.0)
        a[0, 0], a[0, 5] = 2.0**1000, 2.0**-1000  # scaled by 2**-1001: underflows
        b[:, 0] = b[:, 1] * (1.0 + 2.0**-30)
        a[1] = a[2] * (1.0 + 2.0**-40)  # near cancellation against row 2
        a[2, :50] = -a[2, 50:100]
        b[50:100, 2] = b[:50, 2]
        a[3] *= 2.0**-1060  # tiny: the exact path
        b[:, 3] *= 2.0**980
        a[4, ::3] = 0.0
        self.check(a, b)

    @pytest.mark.parametrize("orders", ["C, B^T view", "C, C", "F, C", "F, B^T view"])
    @pytest.mark.parametrize("density", [0.002, 0.2, 1.0])
    def test_recompute_uncertified_in_strips(self, rng, orders, density):
        # the operands read in place or gathered a strip at a time with their scales
        # (exactdot.Rows), with few and many entries per strip: the correctly rounded
        # values at exactly the entries not certified, nothing else touched
        oa, ob = orders.split(", ")
        m, k, p = 90, 333, 70
        a = random_matrix(rng, m, k, 2.0)
        b = random_matrix(rng, k, p, 2.0)
        a[5] *= 2.0**-1000
        aa = np.asfortranarray(a) if oa == "F" else a
        bt = b.T if ob == "B^T view" else b.T.copy()
        ok = rng.random((m, p)) >= density
        c = np.full((m, p), 7.0)
        n = faithful.recompute_uncertified(np, c, ok, aa, bt, tiles=(40, 30))
        want = ExactReference(a, b).rounded()
        assert n == int((~ok).sum())
        assert_array_equal(c[~ok], want[~ok])
        assert np.all(c[ok] == 7.0)
        c2 = np.full((m, p), 7.0)  # an offset into a larger product
        sub = ok[10:, 20:]
        faithful.recompute_uncertified(np, c2, sub, aa, bt, offset=(10, 20))
        assert_array_equal(c2[10:, 20:][~sub], want[10:, 20:][~sub])

    def test_ties_round_to_even(self):
        a = np.array([[1.0, 2.0**-53]])
        b = np.array([[1.0], [1.0]])  # 1 + 2**-53: a tie, to 1
        self.check(a, b)
        a = np.array([[1.0 + 2.0**-52, 2.0**-53]])  # a tie, to even: up
        self.check(a, b)
        self.check(np.array([[2.0**-1074, 2.0**-1074]]), np.array([[0.5], [0.5]]))


def test_factorizations_and_solve_accept_it(rng):
    n = 96
    a = random_matrix(rng, n, n, 0.5) + n * np.eye(n)
    x = rng.standard_normal(n)
    spd = a @ a.T
    with ozlinalg.options(accuracy="faithful", min_size=0), ozlinalg.profile() as prof:
        lu, piv = ozlinalg.lapack.getrf(a, block_size=16, min_size=0)
        sol = ozlinalg.solve(a, a @ x)
        ozlinalg.lapack.potrf(spd, block_size=16, min_size=0)
        ozlinalg.lapack.geqrf(a, block_size=16, min_size=0)
    assert prof.calls and all(r.accuracy == "faithful" for r in prof.calls)
    np.testing.assert_allclose(sol, x, rtol=1e-10)
    with ozlinalg.profile() as prof:
        ozlinalg.lapack.getrf(a, block_size=16, min_size=0, accuracy="faithful")
    assert prof.calls and all(r.accuracy == "faithful" for r in prof.calls)


@pytest.mark.parametrize("call", [
    lambda a, b, spd: ozlinalg.linalg.lu_factor(a),
    lambda a, b, spd: ozlinalg.linalg.solve(a, b),
    lambda a, b, spd: ozlinalg.linalg.cho_factor(spd),
    lambda a, b, spd: ozlinalg.linalg.cholesky(spd),
    lambda a, b, spd: ozlinalg.linalg.qr(a),
    lambda a, b, spd: ozlinalg.linalg.inv(a),
    lambda a, b, spd: ozlinalg.linalg.matmul(a, b),
    lambda a, b, spd: ozlinalg.numpy_linalg.solve(a, b),
    lambda a, b, spd: ozlinalg.numpy_linalg.cholesky(spd),
    lambda a, b, spd: ozlinalg.numpy_linalg.qr(a),
], ids=["lu_factor", "solve", "cho_factor", "cholesky", "qr", "inv", "matmul", "np-solve",
        "np-cholesky", "np-qr"])
def test_public_namespaces_take_it_from_options(rng, call):
    # SciPy / NumPy signatures have no accuracy argument: options() carries it,
    # to every emulated product of the call
    n = 80
    a = random_matrix(rng, n, n, 0.5) + n * np.eye(n)
    b = random_matrix(rng, n, 3, 0.5)
    spd = a @ a.T
    with ozlinalg.options(accuracy="faithful", min_size=0), ozlinalg.profile() as prof:
        call(a, b, spd)
    assert prof.calls and all(r.accuracy == "faithful" for r in prof.calls)
    with ozlinalg.options(min_size=0), ozlinalg.profile() as prof:
        call(a, b, spd)
    assert prof.calls and all(r.accuracy == "dgemm" for r in prof.calls)


def test_backend_reroutes_with_it(rng):
    a = random_matrix(rng, 70, 70, 0.5) + 70 * np.eye(70)
    b = random_matrix(rng, 70, 2, 0.5)
    # "eager": the default strategy leaves calls below the crossover to native LAPACK
    with ozlinalg.backend(strategy="eager", accuracy="faithful", min_size=0), \
            ozlinalg.profile() as prof:
        x = np.linalg.solve(a, b)
    assert prof.calls and all(r.accuracy == "faithful" for r in prof.calls)
    np.testing.assert_allclose(a @ x, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("accuracy, faithful_rows", [("both", ["hybrid-ef F", "crt F"]),
                                                      ("dgemm", []),
                                                      ("faithful", ["hybrid-ef F", "crt F"])])
def test_main_job_rows(capsys, accuracy, faithful_rows):
    # python -m ozlinalg compare: faithful rows beside the DGEMM-level ones, judged
    # against the exact reference (one ulp: relative error below 2**-52)
    import json

    from ozlinalg.__main__ import main

    main(["compare", "--n", "40", "--methods", "hybrid-ef", "crt", "rn", "--repeat", "1",
          "--check-rows", "40", "--accuracy", accuracy, "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["method"] for r in rows] == ["native FP64", "hybrid-ef", "crt", "rn",
                                           *faithful_rows]
    assert [r["accuracy"] for r in rows[1:]] == ["dgemm"] * 3 + ["faithful"] * len(faithful_rows)
    for r in rows[4:]:
        assert 0.0 <= r["max_err"] < 2.0**-52


def test_dask_matmul_is_one_inner_chunk(rng):
    da = pytest.importorskip("dask.array")
    a = random_matrix(rng, 30, 90, 2.0)
    b = random_matrix(rng, 90, 20, 2.0)
    c = ozlinalg.matmul(da.from_array(a, chunks=(10, 30)), da.from_array(b, chunks=(30, 10)),
                        accuracy="faithful", slices=12)
    got = c.compute()
    assert_faithful(got, a, b)
    assert_array_equal(got, ozlinalg.matmul(a, b, accuracy="faithful", slices=12))


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_properties import SETTINGS, inner_scaled, problem  # noqa: E402


@SETTINGS
@given(ab=st.one_of(problem(), inner_scaled()), method=st.sampled_from(FAITHFUL),
       slices=st.sampled_from(["auto", 4, 9, 14]), balance=st.sampled_from(["auto", False]))
def test_faithful_property(ab, method, slices, balance):
    a, b = ab
    if method.startswith("crt") and slices != "auto":
        slices += 6
    with np.errstate(all="ignore"):
        c = ozlinalg.matmul(a, b, method=method, slices=slices, balance=balance,
                            accuracy="faithful")
    assert c.shape == (a.shape[0], b.shape[1])
    if c.size:
        assert_faithful(c, a, b)


@SETTINGS
@given(ab=problem(allow_special=True), method=st.sampled_from(FAITHFUL))
def test_faithful_property_non_finite(ab, method):
    # entries fed by Inf / NaN: non-finite where native FP64 is (the value class:
    # test_properties.py::test_non_finite_entries_match_native); the entries of
    # finite rows and columns faithful
    a, b = ab
    with np.errstate(all="ignore"):
        c = ozlinalg.matmul(a, b, method=method, accuracy="faithful")
        want = a @ b
    ra, cb = np.isfinite(a).all(axis=1), np.isfinite(b).all(axis=0)
    special = ~(ra[:, None] & cb[None, :])
    assert_array_equal(np.isfinite(c[special]), np.isfinite(want[special]))
    if ra.any() and cb.any():
        assert_faithful(c[np.ix_(ra, cb)], a[ra], b[:, cb])
