"""State isolation (profile, options) across threads and asyncio tasks."""
import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import ozlinalg

METHODS = list(ozlinalg.METHODS)


def _problem(i):
    rng = np.random.default_rng(i)
    return rng.standard_normal((40 + i, 60)), rng.standard_normal((60, 30 + i))


# counts below auto's on purpose (this tests the context): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
def test_concurrent_matmul_with_private_state():
    expected = {}
    for i in range(8):
        a, b = _problem(i)
        expected[i] = ozlinalg.matmul(a, b, method=METHODS[i % 5], slices=4 + i)
    barrier = threading.Barrier(8)

    def work(i):
        a, b = _problem(i)
        with ozlinalg.options(method=METHODS[i % 5], slices=4 + i):
            barrier.wait()
            with ozlinalg.profile() as prof:
                outs = [ozlinalg.matmul(a, b) for _ in range(3)]
        return i, outs, prof

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    for i, outs, prof in results:
        for c in outs:
            np.testing.assert_array_equal(c, expected[i])
        assert prof.emulated_gemm_calls == 3
        assert prof.slices == [4 + i] * 3
        assert prof.methods == {METHODS[i % 5]: 3}
    assert ozlinalg.get_options().slices == "auto"


# counts below auto's on purpose (this tests the context): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
def test_new_threads_start_with_empty_context():
    seen = {}
    with ozlinalg.options(slices=5), ozlinalg.profile() as prof:
        t = threading.Thread(target=lambda: seen.update(
            slices=ozlinalg.get_options().slices,
            profiles=len(ozlinalg._profile.active_profiles())))
        t.start()
        t.join()
        ozlinalg.matmul(np.ones((3, 3)), np.ones((3, 3)))
    assert seen == {"slices": "auto", "profiles": 0}
    assert prof.slices == [5]


# counts below auto's on purpose (this tests the context): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
def test_asyncio_tasks_do_not_share_profiles_or_options():
    async def task(i):
        a, b = _problem(i)
        with ozlinalg.options(slices=3 + i), ozlinalg.profile() as prof:
            for _ in range(3):
                ozlinalg.matmul(a, b)
                await asyncio.sleep(0)  # interleave with the other tasks
        return prof

    async def main():
        return await asyncio.gather(*(task(i) for i in range(6)))

    profs = asyncio.run(main())
    for i, prof in enumerate(profs):
        assert prof.slices == [3 + i] * 3
        assert prof.emulated_gemm_calls == 3


# counts below auto's on purpose (this tests the context): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
def test_backend_under_8_threads_and_asyncio():
    """Half of 8 threads (and of 6 asyncio tasks) route numpy.linalg through
    ozlinalg, the other half do not; each sees only its own state, and the
    shims are installed once however many blocks start at the same time."""
    a = np.random.default_rng(3).standard_normal((40, 40)) + 40 * np.eye(40)
    b = np.ones(40)
    barrier = threading.Barrier(8)

    def work(i):
        routed = i % 2 == 0
        barrier.wait()
        shim = None
        if routed:
            with ozlinalg.backend(strategy="eager", min_size=0, slices=6 + i), \
                    ozlinalg.profile() as prof:
                shim = np.linalg.solve
                x = np.linalg.solve(a, b)
        else:
            with ozlinalg.profile() as prof:
                x = np.linalg.solve(a, b)
        return routed, prof, x, shim

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    shims = {id(r[3]) for r in results if r[0]}
    assert len(shims) == 1  # one shim object: installed once, by one thread
    assert "numpy.linalg.solve" in ozlinalg.backend.installed()
    for i, (routed, prof, x, _) in enumerate(results):
        np.testing.assert_allclose(a @ x, b, rtol=1e-12)
        if routed:
            assert prof.emulated_gemm_calls > 0 and set(prof.slices) == {6 + i}
        else:
            assert prof.emulated_gemm_calls == 0

    async def task(i):
        routed = i % 2 == 0
        if routed:
            with ozlinalg.backend(strategy="eager", min_size=0), ozlinalg.profile() as prof:
                for _ in range(2):
                    np.linalg.solve(a, b)
                    await asyncio.sleep(0)
        else:
            with ozlinalg.profile() as prof:
                for _ in range(2):
                    np.linalg.solve(a, b)
                    await asyncio.sleep(0)
        return routed, prof.emulated_gemm_calls

    async def main():
        return await asyncio.gather(*(task(i) for i in range(6)))

    for routed, calls in asyncio.run(main()):
        assert (calls > 0) == routed
    assert not ozlinalg.backend.active()
