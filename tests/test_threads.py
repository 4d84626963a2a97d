"""State isolation (profile, options) across threads and asyncio tasks."""
import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import ozlinalg

METHODS = list(ozlinalg.METHODS)


def _problem(i):
    rng = np.random.default_rng(i)
    return rng.standard_normal((40 + i, 60)), rng.standard_normal((60, 30 + i))


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
