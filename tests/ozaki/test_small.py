"""The one-call path of small products (ozlinalg.ozaki.small) gives the driver's bits."""
import numpy as np
import pytest

import ozlinalg
from ozlinalg._matmul import memory_plan
from ozlinalg._options import resolve
from ozlinalg.engines import get_engine
from ozlinalg.lapack._common import Runner
from ozlinalg.ozaki import small
from ozlinalg.testing import random_matrix

pytestmark = pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")


@pytest.fixture
def hook():
    """The engine's one-call hook, counting the calls it served."""
    eng = get_engine(np)
    real = getattr(eng, "small_product", None)
    if real is None or getattr(eng, "kernels", None) is None:
        pytest.skip("no one-call path on this engine (no compiled kernels)")
    served = []

    def counting(*args, **kw):
        s = real(*args, **kw)
        served.append(s)
        return s

    # An instance attribute, removed afterwards: monkeypatch would restore the bound
    # method as an instance attribute, which then hides later tests' class-level patches.
    had = "small_product" in vars(eng)
    old = vars(eng).get("small_product")
    eng.small_product = counting
    try:
        yield eng, served
    finally:
        if had:
            eng.small_product = old
        else:
            del eng.small_product


def _both(eng, fn, *args, **kw):
    """``(fn(*args, **kw) with the one-call path, the same through the driver)``."""
    one = fn(*args, **kw)
    hook = eng.small_product
    eng.small_product = None
    try:
        ref = fn(*args, **kw)
    finally:
        eng.small_product = hook  # the fixture removes it
    return one, ref


SHAPES = [(1, 1, 1), (8, 8, 8), (3, 17, 5), (32, 32, 32), (7, 61, 68), (64, 10, 3),
          (16, 200, 16), (2, 500, 2)]


class TestSmallProduct:
    @pytest.mark.parametrize("shape", SHAPES)
    @pytest.mark.parametrize("method", ["hybrid-ef", "bitmask-ef"])
    @pytest.mark.parametrize("phi", [0.5, 2.0, 4.0])
    def test_driver_bits(self, hook, rng, shape, method, phi):
        eng, served = hook
        m, k, p = shape
        for slices in ("auto", 1, 2, 3, 9):
            for balance in ("auto", True, False):
                a = random_matrix(rng, m, k, phi)
                b = random_matrix(rng, k, p, phi)
                one, ref = _both(eng, ozlinalg.matmul, a, b, method=method, slices=slices,
                                 balance=balance)
                assert one.tobytes() == ref.tobytes(), (slices, balance)
        assert any(s is not None for s in served)  # the path was taken, not only declined

    def test_same_bits_as_the_sgemm_engine(self, hook, rng):
        eng, served = hook
        for m, k, p in SHAPES:
            for method in ("hybrid-ef", "bitmask-ef"):
                a = random_matrix(rng, m, k, 1.0)
                b = random_matrix(rng, k, p, 1.0)
                one = ozlinalg.matmul(a, b, method=method)
                with ozlinalg.options(engine="sgemm"):
                    ref = ozlinalg.matmul(a, b, method=method)
                assert one.tobytes() == ref.tobytes(), (m, k, p, method)
        assert served and all(s is not None for s in served)

    def test_adversarial_inputs(self, hook, rng):
        eng, served = hook
        for trial in range(120):
            m, k, p = (int(v) for v in rng.integers(1, 40, 3))
            a = random_matrix(rng, m, k, 4.0)
            b = random_matrix(rng, k, p, 2.0)
            kind = trial % 6
            if kind == 0:
                a *= 2.0**-1060  # subnormals
            elif kind == 1:
                a[:, int(rng.integers(0, k))] *= 2.0**600  # a wildly imbalanced inner index
                b *= 2.0**-300
            elif kind == 2:
                a, b = a[:, ::-1], b[::-1]  # negative strides
            elif kind == 3:
                a[int(rng.integers(0, m))] = 0.0  # a zero row: the driver decides
            elif kind == 4:
                a[0, 0] = np.nan if trial % 2 else np.inf
            else:
                b = np.asfortranarray(b)
            slices = ["auto", 20, 12, 5][trial % 4]
            with ozlinalg.options(max_slices=[20, 8, 30][trial % 3]):
                with np.errstate(all="ignore"):
                    one, ref = _both(eng, ozlinalg.matmul, a, b, slices=slices,
                                     method=["hybrid-ef", "bitmask-ef"][trial % 2])
            assert one.tobytes() == ref.tobytes(), trial
        assert served.count(None) > 0 and any(s is not None for s in served)

    def test_structural_zeros(self, hook, rng):
        """Entries with no nonzero term (products with the identity, triangles, zero rows,
        columns and blocks) take no part in the count, as in the driver: the one-call path
        serves them with its bits. A tiny term that normalization takes to zero is no
        structural zero (the driver decides)."""
        eng, served = hook
        cases = []
        for n in (1, 2, 5, 8, 17, 32):
            a = random_matrix(rng, n, n, 2.0)
            zero_col, block = a.copy(), a.copy()
            zero_col[:, n // 2] = 0.0
            block[: n // 2, : (n + 1) // 2] = 0.0
            cases += [(a, np.eye(n)), (np.eye(n), a), (np.tril(a), np.triu(a)),
                      (np.triu(a)[:, :3], a[:3]), (np.zeros((n, n)), a), (a, zero_col),
                      (block, block.T.copy()), (np.eye(n), np.eye(n))]
        lost = rng.standard_normal((6, 6))
        lost[0] = 0.0
        lost[0, :2] = 1e300, 1e-300  # 1e-300 normalizes to zero next to 1e300
        only = np.zeros((6, 4))
        only[1] = 1.0
        cases.append((lost, only))
        for i, (a, b) in enumerate(cases):
            for method in ("hybrid-ef", "bitmask-ef"):
                del served[:]
                one, ref = _both(eng, ozlinalg.matmul, a, b, method=method)
                assert one.tobytes() == ref.tobytes(), (i, method)
                if i < len(cases) - 1:
                    assert served[0] is not None, (i, method)  # served, not declined
                else:
                    assert served[0] is None

    def test_column_major_updates(self, hook, rng):
        eng, served = hook
        for _ in range(30):
            m, k, p = (int(v) for v in rng.integers(1, 50, 3))
            a = random_matrix(rng, m, k, 1.0)
            b = random_matrix(rng, k, p, 1.0)
            like = np.zeros((m, p), order="F")
            one, ref = _both(eng, Runner(resolve(np, slices="auto")).gemm, a, b, like=like)
            assert one.flags.f_contiguous and ref.flags.f_contiguous
            assert one.tobytes(order="F") == ref.tobytes(order="F")

    def test_profile_and_limits(self, hook, rng):
        eng, served = hook
        a = rng.standard_normal((8, 8))
        with ozlinalg.profile() as prof:
            ozlinalg.matmul(a, a)
        (rec,) = prof.calls
        assert rec.engine_calls == 1 and rec.int8_gemms == rec.slices * (rec.slices + 1) // 2
        assert "one compiled call" in rec.engine
        n = int(np.sqrt(small.SMALL_OPERANDS)) + 8  # (m + p) n above the limit
        big = rng.standard_normal((n, n))
        served.clear()
        ozlinalg.matmul(big, big)
        assert served == []
        # a limit the driver's smallest plan fits and the one-call path's estimate not
        lim = memory_plan(8, 8, 8, limit=1 << 40).minimum
        assert 8 * (ozlinalg.get_options().max_slices + 2) * (2 * 8 * 8 + 8 * 8) > lim
        with ozlinalg.options(memory_limit=lim):
            ozlinalg.matmul(a, a)
        assert served == []

    def test_accuracy_against_the_exact_product(self, hook, rng):
        pytest.importorskip("flint")
        from ozlinalg.testing import exact_relative_errors, textbook_matmul

        eng, served = hook
        for phi in (0.5, 1.0, 2.0):
            a = random_matrix(rng, 24, 40, phi)
            b = random_matrix(rng, 40, 24, phi)
            got = ozlinalg.matmul(a, b)
            assert served[-1] is not None
            # DGEMM level: no worse than FP64 recursive summation on the same inputs
            # (textbook_matmul: the same bits on every machine, where native DGEMM's
            # error depends on the BLAS kernel), against the exact product
            bar = np.max(exact_relative_errors(a, b, textbook_matmul(a, b)))
            assert np.max(exact_relative_errors(a, b, got)) <= max(bar, 2.0**-53)

    def test_fixed_counts_too_few_warn_as_in_the_driver(self, hook, rng):
        eng, served = hook
        a = random_matrix(rng, 12, 40, 2.0)
        b = random_matrix(rng, 40, 9, 2.0)
        a[:, 0] *= 2.0**30  # an imbalanced inner index: auto needs more than 5 slices

        def run():
            with pytest.warns(ozlinalg.AccuracyWarning,
                              match=r"slices=5 is too few.*slices='auto' would use"):
                return ozlinalg.matmul(a, b, slices=5, balance=False)

        one, ref = _both(eng, run)
        assert served[-1] is not None
        assert one.tobytes() == ref.tobytes()

    def test_vnni_group_sums_give_the_same_bits(self, hook, rng):
        # AVX-512 builds: the group sums on vpmaddwd + vpaddd (what an AVX-512 CPU
        # without VNNI runs) and on VNNI's vpdpwssd, switched in one process
        eng, served = hook
        info = np.full(2, -1, np.int64)
        eng.kernels.small_simd(info)
        if info[0] != 32 or not info[1]:
            pytest.skip(f"no AVX-512 VNNI group sums here (block {info[0]}, VNNI {info[1]})")
        cases = [(random_matrix(rng, m, k, phi), random_matrix(rng, k, p, phi))
                 for (m, k, p), phi in zip(SHAPES, (0.5, 4.0) * 4)]
        cases.append((rng.integers(-2**40, 2**40, (9, 300)).astype(float),
                      rng.integers(-2**40, 2**40, (300, 40)).astype(float)))
        vnni = [ozlinalg.matmul(a, b) for a, b in cases]
        try:
            info[0] = 0
            eng.kernels.small_simd(info)
            assert info[1] == 0
            madd = [ozlinalg.matmul(a, b) for a, b in cases]
        finally:
            info[0] = 1
            eng.kernels.small_simd(info)
        assert info[1] == 1 and all(s is not None for s in served)
        for x, y in zip(vnni, madd):
            assert x.tobytes() == y.tobytes()
