"""The CPU engine's scratch pool (ozlinalg/engines/_scratch.py): a buffer is reused
only once no array uses its memory; limits; what happens when memory runs out; the
memory bound its default follows (ozlinalg/engines/_process.py); the same bits with
and without it."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ozlinalg
from ozlinalg.engines import _process, _scratch, free_scratch
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

    def test_buffers_are_cache_line_aligned(self):
        from ozlinalg.engines._scratch import ALIGN

        pool = ScratchPool(1 << 30)
        for nbytes in (MIN_BYTES, MIN_BYTES + 1, 3 * MIN_BYTES + 17):
            for _ in range(2):  # fresh, then reused
                x = pool.empty(nbytes, np.int8)
                assert x.ctypes.data % ALIGN == 0 and x.nbytes == nbytes
                del x

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

    def test_kept_and_leased_stay_within_a_memory_limit(self):
        pool = ScratchPool(1 << 30)
        with ozlinalg.options(memory_limit=5 * MIN_BYTES):
            x = pool.empty(BIG, np.float64)  # 2 MIN_BYTES leased
            y = pool.empty(BIG, np.float64)
            assert pool.leased >= 4 * MIN_BYTES
            del x  # kept: 2 + 2 within 5
            assert pool.held == 2 * MIN_BYTES
            z = pool.empty((3 * MIN_BYTES,), np.uint8)  # no fit: 2 + 2 + 3 > 5, kept freed
            assert pool.held == 0
            del y  # 2 + 3 leased before: room for it
            assert pool.held == 2 * MIN_BYTES and pool.leased == 3 * MIN_BYTES
            del z  # 2 + 3 kept within 5
            assert pool.held == 5 * MIN_BYTES and pool.leased == 0
        pool.clear()

    def test_trim_frees_the_oldest_kept(self):
        pool = ScratchPool(1 << 30)
        xs = [pool.empty(BIG, np.float64) for _ in range(3)]
        del xs
        assert pool.held == 6 * MIN_BYTES
        pool.trim(5 * MIN_BYTES)  # the oldest freed down to 5
        assert pool.held == 4 * MIN_BYTES
        x = pool.empty(BIG, np.float64)  # a kept one, reused
        assert pool.hits == 1 and pool.held == 2 * MIN_BYTES
        pool.trim(0)
        assert pool.held == 0
        del x
        assert pool.held == 2 * MIN_BYTES  # leased ones still come back
        pool.clear()

    def test_a_limited_product_keeps_nothing_beside_its_plan(self, rng):
        # buffers kept from an earlier, larger product fit no request of this one: the
        # product trims them to its limit less its plan (then its own come back)
        from ozlinalg._matmul import memory_plan

        eng = engine_registry.get_engine(np)
        if eng.scratch is None:
            pytest.skip("this engine keeps no scratch buffers")
        a = rng.standard_normal((1100, 800))
        b = rng.standard_normal((800, 900))
        ozlinalg.matmul(a, b)  # fills the pool
        assert eng.scratch.held > 0
        limit = 48 << 20
        plan = memory_plan(300, 800, 250, limit=limit, engine=eng)
        trims = []
        trim = eng.scratch.trim
        with ozlinalg.options(memory_limit=limit):
            eng.scratch.trim = lambda keep=0: (trims.append(keep), trim(keep))
            try:
                ozlinalg.matmul(a[:300], b[:, :250])
            finally:
                del eng.scratch.trim
        assert trims and trims[0] == limit - plan.need
        free_scratch()

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


GIB = 1 << 30


class TestMemoryBound:
    """``memory_bound_bytes``: the least of physical memory, the cgroup limits (v2 and
    v1, of the process's cgroup and its parents) and RLIMIT_AS, on a fake cgroup
    tree; the defaults of the pool (1/8) and of one product's budget (1/4) follow it."""

    @pytest.fixture
    def tree(self, tmp_path):
        """``write(relative path, text)`` into a fake cgroup mount; the process's
        cgroups: v2 ``/a/b``, v1 memory ``/x/y``. ``bound()`` reads it, ``base`` is
        the bound without any cgroup file (physical memory or RLIMIT_AS)."""
        root = tmp_path / "cgroup"
        root.mkdir()
        proc = tmp_path / "proc_cgroup"
        proc.write_text("4:memory:/x/y\n1:cpu,cpuacct:/\n0::/a/b\n")

        class Tree:
            def write(self, rel, text):
                f = root / rel
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(text if isinstance(text, bytes) else text.encode())
                return str(f)

            def bound(self, proc_cgroup=str(proc)):
                return _process.memory_bound_bytes(str(root), proc_cgroup)

        t = Tree()
        t.base = t.bound()
        if t.base[0] <= 2 * GIB:
            pytest.skip(f"this process may use only {t.base[0]} bytes ({t.base[1]})")
        return t

    def test_no_cgroup_files(self, tree):
        assert tree.base[1] in ("physical memory", "RLIMIT_AS")
        assert tree.base[0] >= 2 * GIB

    @pytest.mark.parametrize("text", ["max", "max\n", "", "lots", "-5", "0", "1.5e9",
                                      b"\xff\xfe", "9223372036854771712"])
    def test_v2_values_that_are_no_limit(self, tree, text):
        tree.write("a/b/memory.max", text)
        assert tree.bound() == tree.base

    def test_v2_limit(self, tree):
        f = tree.write("a/b/memory.max", "1073741824\n")
        assert tree.bound() == (GIB, f"cgroup v2 {f}")

    def test_v2_parents_bind(self, tree):
        tree.write("a/b/memory.max", "max")
        f = tree.write("a/memory.max", str(GIB // 2))
        tree.write("memory.max", "garbage")
        assert tree.bound() == (GIB // 2, f"cgroup v2 {f}")
        f = tree.write("memory.max", str(GIB // 4))  # a container's own: the mount's top
        assert tree.bound() == (GIB // 4, f"cgroup v2 {f}")

    def test_v2_path_outside_the_mount(self, tree, tmp_path):
        # a cgroup above the namespace shows as /..: the mount's own limit applies
        proc = tmp_path / "outside"
        proc.write_text("0::/../../c\n")
        tree.write("a/b/memory.max", str(GIB // 8))
        f = tree.write("memory.max", str(GIB))
        assert tree.bound(str(proc)) == (GIB, f"cgroup v2 {f}")

    def test_v1_limit(self, tree):
        tree.write("memory/x/y/memory.limit_in_bytes", "9223372036854771712\n")  # none
        assert tree.bound() == tree.base
        f = tree.write("memory/x/memory.limit_in_bytes", str(GIB))
        assert tree.bound() == (GIB, f"cgroup v1 {f}")
        tree.write("a/b/memory.max", str(GIB // 2))  # the least of v1 and v2
        assert tree.bound()[0] == GIB // 2

    def test_missing_or_unreadable_cgroup_list(self, tree, tmp_path):
        assert tree.bound(str(tmp_path / "nope")) == tree.base
        assert tree.bound(str(tmp_path)) == tree.base  # a directory: unreadable
        f = tree.write("memory.max", str(GIB))  # no list: the process is at the top
        assert tree.bound(str(tmp_path / "nope")) == (GIB, f"cgroup v2 {f}")

    def test_defaults_follow_the_bound(self, monkeypatch):
        monkeypatch.delenv("OZLINALG_SCRATCH_CACHE", raising=False)
        for bound, pool, work in ((GIB, GIB // 8, GIB // 4), (64 * GIB, 2 * GIB, 16 * GIB)):
            monkeypatch.setattr(_scratch, "memory_bound", lambda b=bound: (b, "test"))
            monkeypatch.setattr(engine_registry, "memory_bound", lambda b=bound: (b, "test"))
            assert _scratch.default_limit() == pool
            assert ScratchPool().limit == pool
            assert engine_registry.Engine().memory_limit() == work
        monkeypatch.setenv("OZLINALG_SCRATCH_CACHE", "12345")  # the variable still wins
        assert _scratch.default_limit() == 12345

    def test_address_space_limit(self):
        """A subprocess under ``ulimit -v`` 8 GiB (generous: Python, NumPy, the engine
        start): the bound, the pool's cap and one product's budget follow it."""
        import resource

        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY and hard < 8 * GIB:
            pytest.skip(f"the hard RLIMIT_AS is {hard} bytes")
        without = _process.memory_bound_bytes()
        code = (
            "import json, resource\n"
            "resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.getrlimit("
            "resource.RLIMIT_AS)[1]))\n"
            "import numpy as np, ozlinalg\n"
            "from ozlinalg.engines import _process, _scratch, get_engine\n"
            "a = np.arange(12.0).reshape(3, 4)\n"
            "ok = bool((ozlinalg.matmul(a, a.T) == a @ a.T).all())\n"
            "print(json.dumps([_process.memory_bound(), _scratch.default_limit(), "
            "get_engine(np).memory_limit(), ok]))\n")
        env = {k: v for k, v in os.environ.items() if k != "OZLINALG_SCRATCH_CACHE"}
        env.update(PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                   OPENBLAS_NUM_THREADS="1")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        (value, source), pool, work, ok = json.loads(r.stdout.strip().splitlines()[-1])
        want = (8 * GIB, "RLIMIT_AS") if without[0] > 8 * GIB else tuple(without)
        assert (value, source) == want and ok
        assert pool == min(2 * GIB, value // 8) and work == value // 4


@pytest.mark.parametrize("method", ["hybrid-ef", "crt", "bitmask"])
def test_same_bits_with_and_without_the_pool(rng, monkeypatch, int8_engine, method):
    # the pool is the Int8Engine's: each INT8 engine that runs here
    a = random_matrix(rng, 700, 800, 1.0)  # operands and slices above MIN_BYTES
    b = random_matrix(rng, 800, 900, 1.0)
    out = []
    for limit in (0, 1 << 30):  # no pool; fresh buffers, then reused ones
        eng = type(int8_engine)(threads=1)
        eng.scratch.limit = limit
        monkeypatch.setitem(engine_registry._ENGINES, "numpy", eng)
        with ozlinalg.options(engine=None):
            out.append(ozlinalg.matmul(a, b, method=method))
            out.append(ozlinalg.matmul(a, b, method=method))
        assert (eng.scratch.hits > 0) == (limit > 0)
    for c in out[1:]:
        np.testing.assert_array_equal(c, out[0])
    assert not any(np.shares_memory(out[0], c) for c in out[1:])


def test_concurrent_products_share_the_pool(rng, int8_engine):
    # threads (dask's threaded scheduler) share one engine and its pool: every product
    # keeps its own buffers while it runs, and gives the single-threaded bits
    from concurrent.futures import ThreadPoolExecutor

    pairs = [(random_matrix(rng, 600, 700, phi), random_matrix(rng, 700, 650, phi))
             for phi in (0.5, 1.0, 2.0, 0.5)]
    methods = ["crt", "hybrid-ef", "crt", "bitmask-ef"]
    with ozlinalg.options(engine=int8_engine.name):
        want = [ozlinalg.matmul(a, b, method=m) for (a, b), m in zip(pairs, methods)]

        def run(i):
            a, b = pairs[i % 4]
            return i % 4, ozlinalg.matmul(a, b, method=methods[i % 4])

        with ThreadPoolExecutor(4) as ex:
            for i, c in ex.map(run, range(16)):
                np.testing.assert_array_equal(c, want[i])
