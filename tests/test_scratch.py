"""The CPU engine's scratch pool (ozlinalg/engines/_scratch.py): a buffer is reused
only once no array uses its memory; limits; the same bits with and without it."""
import numpy as np
import pytest
from conftest import cpu_engine_or_skip

import ozlinalg
from ozlinalg.engines import _scratch, free_scratch
from ozlinalg.engines import base as engine_registry
from ozlinalg.engines._scratch import MIN_BYTES, ScratchPool
from ozlinalg.testing import random_matrix

BIG = (MIN_BYTES // 8, 2)  # float64: twice the smallest pooled size


class TestScratchPool:
    def test_reused_only_when_no_view_is_alive(self):
        pool = ScratchPool(1 << 30)
        a = pool.empty(BIG, np.float64)
        a[...] = 1.0
        view = a[10:20].T  # outlives a
        del a
        b = pool.empty(BIG, np.float64)
        assert not np.shares_memory(b, view)
        assert pool.hits == 0
        ptr = view.__array_interface__["data"][0] - 10 * 16
        del view
        c = pool.empty(BIG, np.float64)
        assert pool.hits == 1 and c.__array_interface__["data"][0] == ptr
        del b, c
        assert pool.held >= 2 * MIN_BYTES

    @pytest.mark.parametrize("order", ["C", "F"])
    @pytest.mark.parametrize("dtype", [np.int8, np.int32, np.float32, np.float64])
    def test_like_numpy_empty(self, order, dtype):
        pool = ScratchPool(1 << 30)
        shape = (3, MIN_BYTES // 3 + 5, 2)
        for _ in range(2):  # fresh, then reused
            x = pool.empty(shape, dtype, order)
            want = np.empty(shape, dtype, order=order)
            assert x.shape == shape and x.dtype == want.dtype and x.strides == want.strides
            assert x.flags.writeable
            x[...] = 7
            assert np.all(x == 7)
            del x
        assert pool.hits == 1

    def test_small_and_disabled_are_plain_numpy(self):
        pool = ScratchPool(1 << 30)
        x = pool.empty((10, 10), np.float64)
        assert x.flags.owndata
        off = ScratchPool(0)
        y = off.empty(BIG, np.float64)
        assert y.flags.owndata
        del y
        assert off.held == 0

    def test_limits(self):
        pool = ScratchPool(3 * MIN_BYTES)
        xs = [pool.empty(BIG, np.float64) for _ in range(3)]
        del xs
        assert pool.held == 2 * MIN_BYTES  # one of the three (2 MIN_BYTES each) kept
        pool.clear()
        assert pool.held == 0
        # options(memory_limit) caps what comes back
        with ozlinalg.options(memory_limit=MIN_BYTES):
            x = pool.empty(BIG, np.float64)
            del x
        assert pool.held == 0
        x = pool.empty(BIG, np.float64)
        del x
        assert pool.held == 2 * MIN_BYTES
        free_scratch()
        assert pool.held == 0

    def test_best_fit_not_more_than_twice(self):
        pool = ScratchPool(1 << 30)
        x = pool.empty((5 * MIN_BYTES,), np.uint8)
        del x
        y = pool.empty((2 * MIN_BYTES,), np.uint8)  # 5x: too big to lend
        assert pool.hits == 0
        del y
        z = pool.empty((3 * MIN_BYTES,), np.uint8)  # the 5x buffer fits within 2x
        assert pool.hits == 1 and z.size == 3 * MIN_BYTES

    def test_environment(self, monkeypatch):
        monkeypatch.setenv("OZLINALG_SCRATCH_CACHE", "0")
        assert _scratch.default_limit() == 0
        monkeypatch.setenv("OZLINALG_SCRATCH_CACHE", "1e9")
        assert _scratch.default_limit() == 10**9
        monkeypatch.setenv("OZLINALG_SCRATCH_CACHE", "lots")
        with pytest.raises(ValueError, match="OZLINALG_SCRATCH_CACHE"):
            _scratch.default_limit()
        monkeypatch.delenv("OZLINALG_SCRATCH_CACHE")
        assert 0 < _scratch.default_limit() <= 2 << 30


class TestOutOfMemory:
    """Kept buffers go first when memory runs out: the pool frees them and retries, and
    ``release_after_oom`` (a product's ``except MemoryError``) frees them and the
    failed product's buffers too."""

    @staticmethod
    def _failing(monkeypatch, times):
        """``_scratch._np_empty`` raising MemoryError ``times`` times, then numpy's."""
        calls = []

        def fake(shape, dtype, order="C"):
            calls.append(shape)
            if len(calls) <= times:
                raise MemoryError("simulated")
            return np.empty(shape, dtype, order=order)

        monkeypatch.setattr(_scratch, "_np_empty", fake)
        return calls

    @staticmethod
    def _pool_with_a_kept_buffer():
        pool = ScratchPool(1 << 30)
        x = pool.empty((2 * MIN_BYTES,), np.uint8)
        del x
        assert pool.held == 2 * MIN_BYTES
        return pool

    @pytest.mark.parametrize("nbytes", [8 * MIN_BYTES, 1000])  # pooled size, small
    def test_frees_kept_buffers_and_retries_once(self, monkeypatch, nbytes):
        pool = self._pool_with_a_kept_buffer()
        calls = self._failing(monkeypatch, 1)
        x = pool.empty((nbytes,), np.uint8)
        assert x.size == nbytes and len(calls) == 2 and pool.held == 0

    def test_raises_when_the_retry_fails_too(self, monkeypatch):
        pool = self._pool_with_a_kept_buffer()
        calls = self._failing(monkeypatch, 2)
        with pytest.raises(MemoryError, match="simulated"):
            pool.empty((8 * MIN_BYTES,), np.uint8)
        assert len(calls) == 2 and pool.held == 0

    def test_no_retry_without_kept_buffers(self, monkeypatch):
        free_scratch()  # every pool of the process: nothing kept anywhere
        pool = ScratchPool(1 << 30)
        calls = self._failing(monkeypatch, 1)
        with pytest.raises(MemoryError, match="simulated"):
            pool.empty((8 * MIN_BYTES,), np.uint8)
        assert len(calls) == 1

    def test_a_real_allocation_failure(self):
        pool = self._pool_with_a_kept_buffer()
        with pytest.raises(MemoryError):
            pool.empty((1 << 60,), np.uint8)  # no machine has an EiB to give
        assert pool.held == 0

    def test_release_after_oom(self, rng):
        pool = self._pool_with_a_kept_buffer()
        leased = pool.empty((8 * MIN_BYTES,), np.uint8)  # the failed product's buffer
        leased[...] = rng.integers(0, 256, leased.shape, dtype=np.uint8)
        assert _scratch.release_after_oom() >= 2 * MIN_BYTES
        assert pool.held == 0
        del leased  # released after the error: back to the system, not the pool
        assert pool.held == 0
        y = pool.empty((2 * MIN_BYTES,), np.uint8)  # leased after it: kept again
        del y
        assert pool.held == 2 * MIN_BYTES
        assert _scratch.release_after_oom() == 2 * MIN_BYTES
        assert _scratch.release_after_oom() == 0


@pytest.mark.parametrize("method", ["hybrid-ef", "crt", "bitmask"])
def test_same_bits_with_and_without_the_pool(rng, monkeypatch, method):
    cpu_engine_or_skip("onednn")
    from ozlinalg.engines.onednn import OneDNNEngine

    a = random_matrix(rng, 700, 800, 1.0)  # operands and slices above MIN_BYTES
    b = random_matrix(rng, 800, 900, 1.0)
    out = []
    for limit in (0, 1 << 30):  # no pool; fresh buffers, then reused ones
        eng = OneDNNEngine(threads=1)
        eng.scratch.limit = limit
        monkeypatch.setitem(engine_registry._ENGINES, "numpy", eng)
        with ozlinalg.options(engine=None):
            out.append(ozlinalg.matmul(a, b, method=method))
            out.append(ozlinalg.matmul(a, b, method=method))
        assert (eng.scratch.hits > 0) == (limit > 0)
    for c in out[1:]:
        np.testing.assert_array_equal(c, out[0])
    assert not any(np.shares_memory(out[0], c) for c in out[1:])


def test_concurrent_products_share_the_pool(rng):
    # threads (dask's threaded scheduler) share one engine and its pool: every product
    # keeps its own buffers while it runs, and gives the single-threaded bits
    from concurrent.futures import ThreadPoolExecutor

    cpu_engine_or_skip("onednn")
    pairs = [(random_matrix(rng, 600, 700, phi), random_matrix(rng, 700, 650, phi))
             for phi in (0.5, 1.0, 2.0, 0.5)]
    methods = ["crt", "hybrid-ef", "crt", "bitmask-ef"]
    with ozlinalg.options(engine="onednn"):
        want = [ozlinalg.matmul(a, b, method=m) for (a, b), m in zip(pairs, methods)]

        def run(i):
            a, b = pairs[i % 4]
            return i % 4, ozlinalg.matmul(a, b, method=methods[i % 4])

        with ThreadPoolExecutor(4) as ex:
            for i, c in ex.map(run, range(16)):
                np.testing.assert_array_equal(c, want[i])
