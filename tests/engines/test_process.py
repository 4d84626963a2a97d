"""The library as a guest of the process: fork, other libraries' thread settings, Ctrl-C.

Each scenario that could hang or kill an interpreter runs in a subprocess under a
timeout, so a regression fails the test instead of the suite.
"""
import ctypes
import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ozlinalg
from ozlinalg.engines import _process, get_engine, kernels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINUX = sys.platform.startswith("linux")


def _run(code, env=None, timeout=240):
    """Run ``code`` in a fresh interpreter (this checkout first on the path)."""
    full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=full, cwd=ROOT)


def _engines():
    out = [pytest.param({"OZLINALG_ENGINE": "sgemm"}, id="sgemm")]
    try:
        get_engine(np, "avx2")
    except Exception:  # noqa: BLE001 (no compiled AVX2 GEMM here)
        pass
    else:
        out.append(pytest.param({"OZLINALG_ENGINE": "avx2"}, id="avx2"))
    try:
        get_engine(np, "onednn")
    except Exception:  # noqa: BLE001 (no exact oneDNN here)
        return out
    out.append(pytest.param({"OZLINALG_ENGINE": "onednn", "OZLINALG_FUSED": "0"},
                            id="onednn-numpy-passes"))
    if kernels.load()[0] is not None:
        out.append(pytest.param({"OZLINALG_ENGINE": "onednn"}, id="onednn-compiled"))
    return out


_FORK_SCRIPT = """
    import concurrent.futures as cf, hashlib, json, multiprocessing as mp, os
    import numpy as np, ozlinalg
    rng = np.random.default_rng(5)
    a = rng.standard_normal((300, 300)); b = rng.standard_normal(300)

    def work(_=None):
        out = [ozlinalg.matmul(a, a), ozlinalg.matmul(a, a, method="crt"),
               ozlinalg.solve(a, b), ozlinalg.matmul(a, a, accuracy="faithful")]
        with ozlinalg.backend(strategy="eager"):
            out.append(np.linalg.solve(a, b))
        return hashlib.sha256(b"".join(x.tobytes() for x in out)).hexdigest()

    parent = work()
    res = {"describe": ozlinalg.engines.get_engine(np).describe()}
    pid = os.fork()
    if pid == 0:
        os._exit(0 if work() == parent else 3)
    res["os.fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    with mp.get_context("fork").Pool(2) as pool:
        res["Pool"] = pool.map(work, range(4)) == [parent] * 4
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as ex:
        res["ProcessPoolExecutor"] = list(ex.map(work, range(4))) == [parent] * 4
    # a child of a child (its parent ran OpenMP work after the first fork)
    pid = os.fork()
    if pid == 0:
        work()
        inner = os.fork()
        if inner == 0:
            os._exit(0 if work() == parent else 3)
        os._exit(os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1]))
    res["grandchild"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps(res))
"""


@pytest.mark.skipif(not LINUX, reason="fork start method (Linux)")
class TestFork:
    """Forked children compute, with the parent's bits, on every engine."""

    @pytest.mark.parametrize("env", _engines())
    def test_children_compute_the_parents_bits(self, env):
        proc = _run(_FORK_SCRIPT, env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        assert res["os.fork"] == 0, res
        assert res["Pool"] is True and res["ProcessPoolExecutor"] is True, res
        assert res["grandchild"] == 0, res

    def test_child_runs_openmp_work_on_one_thread(self):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(r)
            eng = get_engine(np, "sgemm")
            msg = f"{_process.forked()} {_process.native_threads()} {eng._pool is None}"
            os.write(w, msg.encode())
            os._exit(0)
        os.close(w)
        out = os.read(r, 100).decode()
        os.waitpid(pid, 0)
        assert out == "True 1 True"
        assert not _process.forked()

    def test_lock_held_by_another_thread_is_free_in_the_child(self):
        lock = _process.fork_safe_lock()
        held, release = threading.Event(), threading.Event()

        def hold():
            with lock:
                held.set()
                release.wait()

        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                os._exit(0 if lock.acquire(timeout=5) else 1)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        finally:
            release.set()
            t.join()


def _blas_counts():
    from threadpoolctl import threadpool_info

    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


class TestBlasThreads:
    """The engine's BLAS limit leaves every other setting as it found it."""

    def test_concurrent_solves_leave_the_count(self, rng):
        pytest.importorskip("threadpoolctl")
        a = rng.standard_normal((600, 600))
        b = rng.standard_normal(600)
        ozlinalg.solve(a, b)
        before = _blas_counts()
        errors = []

        def run():
            try:
                for _ in range(3):
                    ozlinalg.solve(a, b)
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

        ts = [threading.Thread(target=run) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors
        assert _blas_counts() == before

    def test_nested_and_restored(self):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(2, user_api="blas"):  # a count above the limit, anywhere
            before = _blas_counts()
            with _process.BlasThreadLimit(1):
                inside = _blas_counts()
                with _process.BlasThreadLimit(1):
                    assert _blas_counts() == inside
                assert _blas_counts() == inside
            assert _blas_counts() == before
        if before and max(before) > 1:
            assert max(inside) == 1

    def test_a_users_own_setting_is_kept(self):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(2, user_api="blas"):  # restores the count found at its exit
            with _process.BlasThreadLimit(1):
                threadpool_limits(3, user_api="blas")  # the user's own setting, meanwhile
            assert set(_blas_counts()) == {3}

    def test_the_threads_openmp_count_is_restored(self, rng):
        eng = get_engine(np)
        if not hasattr(eng, "lib") or eng.lib._gomp is None:
            pytest.skip("no oneDNN on libgomp here")
        gomp = ctypes.CDLL("libgomp.so.1")
        gomp.omp_get_max_threads.restype = ctypes.c_int
        old = gomp.omp_get_max_threads()
        try:
            gomp.omp_set_num_threads(3)
            a = rng.standard_normal((64, 64))
            ozlinalg.matmul(a, a)
            ozlinalg.matmul(a, a, method="crt")
            assert gomp.omp_get_max_threads() == 3
        finally:
            gomp.omp_set_num_threads(old)


class TestThreadCount:
    @pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="affinity masks")
    def test_engines_follow_the_affinity_mask(self):
        proc = _run("""
            import os, numpy as np
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
            from ozlinalg.engines import get_engine
            print(get_engine(np, "sgemm").threads, get_engine(np).threads)
        """)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.split() == ["1", "1"]


_INTERRUPT_SCRIPT = """
    import hashlib, importlib.util, json, os, sys
    import numpy as np

    # Ctrl-C at a known point: the AT-th "event" of the library in the main thread (where
    # Python runs signal handlers), from the import on. An event is one of the points
    # where a signal handler's KeyboardInterrupt can surface: a function of the package
    # starting, or one of its functions calling into C (the profile hook runs before
    # either; the exception it raises propagates from there, and CPython removes the
    # hook with it, so it is raised once). AT = 0 only counts them. The count does not
    # depend on timing: the same inputs take the same path in every fresh process.
    pkg = os.path.dirname(importlib.util.find_spec("ozlinalg").origin) + os.sep
    at = int(sys.argv[1])
    seen = 0
    where = None

    def hook(frame, event, arg):
        global seen, where
        if event in ("call", "c_call") and frame.f_code.co_filename.startswith(pkg):
            seen += 1
            if seen == at:
                code = frame.f_code
                where = (f"{event} in {code.co_name} "
                         f"({os.path.relpath(code.co_filename, pkg)}:{frame.f_lineno})")
                raise KeyboardInterrupt

    rng = np.random.default_rng(3)
    a = rng.standard_normal((200, 200)); b = rng.standard_normal(200)

    def calls(oz):
        return [oz.matmul(a, a), oz.matmul(a, a, method="crt"), oz.solve(a, b),
                oz.matmul(a, a, accuracy="faithful"), oz.matmul(a, a, method="bitmask", slices=8)]
    hit = False
    imported = None
    sys.setprofile(hook)
    try:
        import ozlinalg
        imported = seen
        calls(ozlinalg)
    except KeyboardInterrupt:
        hit = True
    sys.setprofile(None)
    total = seen
    import ozlinalg
    digest = hashlib.sha256(b"".join(x.tobytes() for x in calls(ozlinalg))).hexdigest()
    print(json.dumps({"hit": hit, "where": where, "imported": imported, "total": total,
                      "digest": digest, "engine": ozlinalg.engines.get_engine(np).describe()}))
"""


class TestInterrupt:
    """A KeyboardInterrupt anywhere in the import and the first calls leaves the process
    usable: the calls made next give the bits of an uninterrupted process."""

    def _script(self, at):
        code = textwrap.dedent(_INTERRUPT_SCRIPT).replace("sys.argv[1]", repr(str(at)))
        proc = _run(code)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def test_interrupts_at_many_points(self):
        ref = self._script(0)
        assert not ref["hit"]
        n_import, n_total = ref["imported"], ref["total"]
        assert 0 < n_import < n_total
        n_calls = n_total - n_import
        # the first and last events of the import and of the calls, and points between
        # (each point is a fresh interpreter: about 1.3 s)
        points = sorted({1, n_import // 2, n_import,
                         *(n_import + 1 + f * (n_calls - 1) // 3 for f in range(4))})
        for at in points:
            got = self._script(at)
            # the interrupt reached the caller: nothing swallowed it
            assert got["hit"] and got["total"] == at, (at, got)
            assert got["digest"] == ref["digest"], (at, got)
            assert got["engine"] == ref["engine"], (at, got)


class TestKernelChoice:
    def test_invalid_environment_is_an_error(self):
        for var, value in (("OZLINALG_KERNELS_ISA", "avx9"), ("OZLINALG_FUSED", "maybe")):
            proc = _run("from ozlinalg.engines import kernels; kernels.load()", {var: value})
            assert proc.returncode != 0 and var in proc.stderr, (var, proc.stderr[-500:])

    def test_capped_level_gives_the_same_bits(self, rng):
        # every ISA level of the compiled kernels, and the generic NumPy passes, give
        # the same bits: on the oneDNN engine where its INT8 GEMM is exact here (its
        # fused passes and the faithful mode's exact dots), else on the SGEMM engine
        # that then runs (the exact dots of the faithful mode and of crt's certificate,
        # and exact_dots called directly: its Dot2 and limb kernels)
        if kernels.load()[0] is None:
            pytest.skip("compiled kernels not built")
        from ozlinalg.engines.onednn import EngineUnavailable

        try:
            get_engine(np, "onednn")
            engine = "onednn"
        except EngineUnavailable:  # no oneDNN, or its INT8 GEMM failed the self-test
            engine = "sgemm"
        code = """
            import hashlib, numpy as np, ozlinalg
            from ozlinalg.engines import get_engine, kernels, select
            from ozlinalg.ozaki.exactdot import exact_dots
            rng = np.random.default_rng(11)
            a = rng.standard_normal((150, 170)); b = rng.standard_normal((170, 90))
            out = [ozlinalg.matmul(a, b, method=m) for m in ("hybrid-ef", "bitmask", "rn", "crt")]
            out.append(ozlinalg.matmul(a, b, accuracy="faithful"))
            rows, cols = rng.integers(0, 150, 500), rng.integers(0, 90, 500)
            bt = np.ascontiguousarray(b.T)
            out += [exact_dots(np, a, bt, rows, cols, dot2=d) for d in (True, False)]
            print(select.validate_engine(get_engine(np).name), kernels.load()[1].split()[-1],
                  hashlib.sha256(b"".join(x.tobytes() for x in out)).hexdigest())
        """
        got = {}
        for isa in kernels.LEVELS.values():
            proc = _run(code, {"OZLINALG_KERNELS_ISA": isa, "OZLINALG_ENGINE": engine})
            assert proc.returncode == 0, proc.stderr[-2000:]
            name, loaded, digest = proc.stdout.split()[-3:]
            assert name == engine, proc.stdout
            assert loaded in kernels.LEVELS.values(), proc.stdout  # a compiled build ran
            got[isa] = digest
        generic = _run(code, {"OZLINALG_FUSED": "0", "OZLINALG_ENGINE": engine})
        assert generic.returncode == 0, generic.stderr[-2000:]
        name, loaded, digest = generic.stdout.split()[-3:]
        assert name == engine and loaded == "OZLINALG_FUSED=0", generic.stdout
        assert len(set(got.values()) | {digest}) == 1, got

    def test_missing_kernels_warn_once(self):
        proc = _run("""
            import warnings, numpy as np
            from ozlinalg.engines import kernels
            kernels._module = lambda level: None  # as if installed without a C compiler
            import ozlinalg
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                from ozlinalg.engines.onednn import OneDNNEngine
                OneDNNEngine(); OneDNNEngine()
            print(sum(issubclass(x.category, ozlinalg.PerformanceWarning) for x in w))
        """, {"OZLINALG_FUSED": "1"})
        if "EngineUnavailable" in proc.stderr:
            pytest.skip("no exact oneDNN here")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.split()[-1] == "1"

    def test_explicitly_disabled_kernels_do_not_warn(self):
        proc = _run("""
            import warnings
            warnings.simplefilter("error")
            from ozlinalg.engines.onednn import OneDNNEngine
            print(OneDNNEngine().kernels)
        """, {"OZLINALG_FUSED": "0"})
        if "EngineUnavailable" in proc.stderr:
            pytest.skip("no exact oneDNN here")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.split()[-1] == "None"
