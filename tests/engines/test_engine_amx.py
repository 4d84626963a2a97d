"""The oneDNN engine's GEMM on AMX tiles (``_csrc/k_gemm_amx.c``, where the CPU has
AMX-INT8): the compiled GEMM against int64 NumPy at the extremes, every layout, edge
block and thread count; the engine's bits against oneDNN's own GEMM and the float32
SGEMM engine; its self-test and fallback; how it is chosen and named. What needs AMX
skips (naming the reason) on CPUs without it; the fallback, the switch and the
kernel's refusal run everywhere oneDNN or the compiled kernels do.
"""

import numpy as np
import pytest
from conftest import (
    assert_same_bits_as,
    check_gemm_arguments,
    check_gemm_extremes,
    check_gemm_layouts,
    check_gemm_wraps,
    cpu_engine_or_skip,
    float32_sgemm,
    int64_product,
    kernel_or_skip,
    matmul_on,
    python_with_engine_env,
)
from numpy.lib.stride_tricks import as_strided

import ozlinalg
from ozlinalg.engines import kernels
from ozlinalg.testing import random_matrix


@pytest.fixture
def amx():
    """The compiled AMX GEMM's module (skips where the CPU, OS or build lacks it)."""
    return kernel_or_skip(kernels.load_amx, "AMX GEMM")


@pytest.fixture
def engines(amx):
    """``(on AMX, on oneDNN's GEMM)``: two oneDNN engines, same process."""
    from ozlinalg.engines.onednn import OneDNNEngine

    on = cpu_engine_or_skip("onednn")
    if on.amx is None:
        pytest.skip(f"the engine does not run the AMX GEMM: {on.amx_reason}")
    return on, OneDNNEngine(amx=False)


def _aligned(shape, dtype, offset=0):
    """A C-ordered array whose data start ``offset`` bytes past a 64-byte boundary."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _threads_and_fork(rng, amx, product, reference):
    """``product(a, b)`` of one kernel against ``reference(a, b)``, 20 calls in each of
    eight Python threads at once (one or two OpenMP threads each), then in a forked
    child (one OpenMP thread there, as the engine runs after fork)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    a = rng.integers(-128, 128, (8, 96, 700)).astype(np.int8)
    b = rng.integers(-128, 128, (8, 80, 700)).astype(np.int8)

    def one(t):
        amx.set_threads(1 + t % 2)
        want = reference(a[t], b[t])
        return all(np.array_equal(product(a[t], b[t]), want) for _ in range(20))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(8)))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if one(2) else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


class TestKernel:
    """``gemm_amx`` against int64 NumPy."""

    @pytest.mark.parametrize("m, p, k", [(1, 1, 1), (32, 32, 64), (31, 33, 63), (33, 31, 65),
                                         (64, 96, 128), (70, 45, 4099), (130, 17, 2049),
                                         (5, 600, 300), (96, 64, 2048 + 64)])
    @pytest.mark.parametrize("layout", ["rows", "cols", "strided", "grouped"])
    @pytest.mark.parametrize("threads", [1, 2])
    def test_shapes_layouts_threads(self, rng, amx, m, p, k, layout, threads):
        check_gemm_layouts(amx.gemm_amx, amx.set_threads, rng, m, p, k, layout, threads)

    @pytest.mark.parametrize("offset", [0, 16, 1])
    def test_unaligned_operands_and_result(self, rng, amx, offset):
        m, p, k = 64, 64, 256
        a, b = _aligned((m, k), np.int8, offset), _aligned((p, k), np.int8, offset)
        a[...] = rng.integers(-128, 128, a.shape)
        b[...] = rng.integers(-128, 128, b.shape)
        c = _aligned((m, p), np.int32, 4 * (offset % 16 // 4))
        amx.gemm_amx(a, b, c, False)
        np.testing.assert_array_equal(c, int64_product(a, b))

    @pytest.mark.parametrize("va, vb", [(-128, -128), (-128, 127), (127, 127), (127, -128)])
    def test_extremes_at_the_longest_inner_dimension(self, amx, va, vb):
        check_gemm_extremes(amx.gemm_amx, amx.set_threads, va, vb, 33, 17)

    def test_int32_sums_wrap_and_come_back(self, amx):
        # in one packed panel and across panels (k past the packed block)
        check_gemm_wraps(amx.gemm_amx, 32, 32, (1 << 16, 1 << 17))

    def test_checks_shapes_and_types(self, amx):
        check_gemm_arguments(amx.gemm_amx)

    def test_python_threads_and_a_forked_child(self, rng, amx):
        # tile state is per thread: concurrent calls (GIL released, each with its own
        # OpenMP team and tile configuration) and a forked child (the permission is
        # inherited) give the same results
        def product(a, b):
            c = np.empty((a.shape[0], b.shape[0]), np.int32)
            amx.gemm_amx(a, b, c, False)
            return c

        _threads_and_fork(rng, amx, product, int64_product)

    def test_built_at_x86_64_v4_only(self):
        base = kernels._module(1)
        if base is None:
            pytest.skip("compiled kernels not built")
        info = np.zeros(2, np.int64)
        for level in (1, 3):
            mod = kernels._module(level)
            if mod is None:
                continue
            mod.amx_info(info)
            assert list(info) == [0, -1]
            with pytest.raises(NotImplementedError, match="gemm_amx is not built"):
                mod.gemm_amx(np.zeros((1, 1), np.int8), np.zeros((1, 1), np.int8),
                             np.zeros((1, 1), np.int32), False)


def _residues(c, p):
    """The symmetric residues of the integers ``c`` mod ``p`` (int8), in int64 NumPy."""
    h = p // 2
    return ((np.asarray(c, np.int64) + h) % p - h).astype(np.int8)


def _operands(rng, m, p, k, layout):
    """int8 ``a`` (m x k) and ``b`` (p x k) stored as rows, columns, strided or as slots
    of the engines' grouped storage (check_gemm_layouts' layouts)."""
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (p, k)).astype(np.int8)
    if layout == "cols":
        return np.asfortranarray(a), np.asfortranarray(b)
    if layout == "strided":
        return (np.repeat(np.repeat(a, 2, axis=0), 2, axis=1)[::2, ::2],
                np.repeat(np.repeat(b, 2, axis=0), 2, axis=1)[::2, ::2])
    if layout == "grouped":
        ga = np.zeros((m, 3, k), np.int8)
        ga[:, 1] = a
        gb = np.zeros((3, k, p), np.int8)
        gb[2] = b.T
        return ga[:, 1], gb[2].T
    return a, b


class TestModKernel:
    """``gemm_amx_mod`` (the product reduced mod p from the tiles) against int64 NumPy."""

    @pytest.mark.parametrize("m, p, k", [(1, 1, 1), (32, 32, 64), (31, 33, 63), (33, 31, 65),
                                         (70, 45, 4096), (130, 17, 2049), (5, 600, 300),
                                         (97, 64, 2048 + 64), (40, 2100, 128)])
    @pytest.mark.parametrize("layout", ["rows", "cols", "strided", "grouped"])
    @pytest.mark.parametrize("threads", [1, 2])
    def test_shapes_layouts_threads(self, rng, amx, m, p, k, layout, threads):
        a, b = _operands(rng, m, p, k, layout)
        amx.set_threads(threads)
        want = int64_product(a, b)
        for mod in (256, 255, 197, 3, 1):
            out = np.full((m, p), 99, np.int8)
            amx.gemm_amx_mod(a, b, out, float(mod), mod & (mod - 1) == 0)
            np.testing.assert_array_equal(out, _residues(want, mod), err_msg=f"p = {mod}")
        out = np.zeros((p, m), np.int8).T  # a column-major result
        amx.gemm_amx_mod(a, b, out, 251.0, False)
        np.testing.assert_array_equal(out, _residues(want, 251))

    @pytest.mark.parametrize("va, vb", [(-128, -128), (-128, 127), (127, 127)])
    def test_extremes_at_the_longest_inner_dimension(self, amx, va, vb):
        k = 4096
        a = np.full((33, k), va, np.int8)
        b = np.full((17, k), vb, np.int8)
        b[3, ::2] = -vb - 1 if vb < 0 else -vb
        out = np.empty((33, 17), np.int8)
        amx.set_threads(2)
        amx.gemm_amx_mod(a, b, out, 255.0, False)
        np.testing.assert_array_equal(out, _residues(int64_product(a, b), 255))

    @pytest.mark.parametrize("m, k, threads", [(2048, 2048, 1), (300, 517, 2), (64, 64, 2),
                                               (1, 40, 1)])
    def test_into_the_memory_of_b(self, rng, amx, m, k, threads):
        # B stored k x p (a slot of the Ozaki-II residues); the result written over it,
        # column j on B's row j, as the engine lets it (m <= k)
        p = 1100 if m < 2048 else 2048
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        slot = rng.integers(-128, 128, (k, p)).astype(np.int8)
        want = _residues(int64_product(a, slot.T.copy()), 233)
        out = slot[:m]
        amx.set_threads(threads)
        amx.gemm_amx_mod(a, slot.T, out, 233.0, False)
        np.testing.assert_array_equal(out, want)

    def test_empty_sums_and_refusals(self, amx):
        out = np.full((3, 4), 5, np.int8)
        amx.gemm_amx_mod(np.zeros((3, 0), np.int8), np.zeros((4, 0), np.int8), out, 7.0,
                         False)
        np.testing.assert_array_equal(out, 0)
        with pytest.raises(NotImplementedError):  # past the one panel
            amx.gemm_amx_mod(np.zeros((2, 4097), np.int8), np.zeros((2, 4097), np.int8),
                             np.zeros((2, 2), np.int8), 7.0, False)
        with pytest.raises(ValueError):
            amx.gemm_amx_mod(np.zeros((2, 8), np.int8), np.zeros((3, 8), np.int8),
                             np.zeros((2, 2), np.int8), 7.0, False)

    def test_engine_uses_it_where_it_applies(self, rng, engines):
        on, _ = engines
        m, p, k = 50, 70, 90
        a = on.empty_slices(2, m, k, "crt", "a")
        b = on.empty_slices_like(np.empty((k, p)).T, 2, "crt", "b")
        a[...] = rng.integers(-128, 128, a.shape)
        b[...] = rng.integers(-128, 128, b.shape)
        want = _residues(int64_product(a[1], b[1]), 199)
        out = np.empty((m, p), np.int8)
        assert on.int_matmul_mod(a, b, 1, 199, out)
        np.testing.assert_array_equal(out, want)
        # over B's own slot, column j on its row j (m <= k): allowed
        over_b = as_strided(b[1], (m, p), (p, 1))
        assert on.int_matmul_mod(a, b, 1, 199, over_b)
        np.testing.assert_array_equal(over_b, want)
        # not for a modulus the residue route does not take, an int32 result, a result
        # on B laid any other way or on A, nor past the kernel's inner dimension
        assert not on.int_matmul_mod(a, b, 1, 200, out)
        assert not on.int_matmul_mod(a, b, 1, 199, np.empty((m, p), np.int32))
        assert not on.int_matmul_mod(a, b, 0, 199, as_strided(b[0], (m, p), (1, k)))
        assert not on.int_matmul_mod(a, b, 1, 199, as_strided(a[1], (m, p), (a.strides[1], 1)))
        long_a = on.empty_slices(1, 2, 4097, "crt", "a")
        long_b = on.empty_slices(1, 2, 4097, "crt", "b")
        assert not on.int_matmul_mod(long_a, long_b, 0, 199, np.empty((2, 2), np.int8))

    def test_python_threads_and_a_forked_child(self, rng, amx):
        # as gemm_amx's: each call configures its own threads' tiles; the pending block
        # and its two buffers are per thread too
        def product(a, b):
            out = np.empty((a.shape[0], b.shape[0]), np.int8)
            amx.gemm_amx_mod(a, b, out, 241.0, False)
            return out

        _threads_and_fork(rng, amx, product, lambda a, b: _residues(int64_product(a, b), 241))

    def test_built_at_x86_64_v4_only(self):
        for level in (1, 3):
            mod = kernels._module(level)
            if mod is None:
                continue
            with pytest.raises(NotImplementedError, match="gemm_amx_mod is not built"):
                mod.gemm_amx_mod(np.zeros((1, 1), np.int8), np.zeros((1, 1), np.int8),
                                 np.zeros((1, 1), np.int8), 3.0, False)


# counts below auto's on purpose (this tests the engines' bits): AccuracyWarning expected
@pytest.mark.filterwarnings("ignore::ozlinalg.AccuracyWarning")
class TestSameBits:
    """The AMX GEMM gives oneDNN's GEMM's bits and the float32 SGEMM engine's, every
    method, both accuracies."""

    @pytest.mark.parametrize("method", ["bitmask", "rn", "bitmask-ef", "hybrid-ef", "crt",
                                        "crt-fast"])
    @pytest.mark.parametrize("accuracy", ["dgemm", "faithful"])
    # Ozaki II's products reduced in the AMX kernel: into B's slots (70 <= 301, B in C
    # order), into memory of their own (300 > 64 rows), and not (B in Fortran order)
    @pytest.mark.parametrize("shape, orders", [((45, 2100, 37), "CF"), ((70, 301, 33), "FC"),
                                               ((300, 64, 50), "CC")])
    def test_methods_shapes_orders(self, rng, engines, method, accuracy, shape, orders):
        on, off = engines
        assert_same_bits_as([float32_sgemm(), off], on, rng, method, accuracy, shape, orders)

    def test_factorizations_and_solve(self, rng, engines):
        a = random_matrix(rng, 300, 300, 1.0)
        b = rng.standard_normal((300, 3))
        from ozlinalg.engines import base

        got = []
        for eng in engines:
            saved = base._ENGINES.get("numpy")
            base._ENGINES["numpy"] = eng
            try:
                with ozlinalg.options(engine=None):
                    got.append((ozlinalg.linalg.lu_factor(a)[0], ozlinalg.solve(a, b),
                                ozlinalg.linalg.qr(a)[1]))
            finally:
                base._ENGINES["numpy"] = saved
        for x, y in zip(*got):
            np.testing.assert_array_equal(x, y)

    def test_a_large_product(self, rng, engines):
        # several B panels and 2048-index blocks, two threads: the blocked paths
        on, off = engines
        a = random_matrix(rng, 520, 4200, 1.0)
        b = random_matrix(rng, 4200, 1100, 1.0)
        for method in ("crt", "hybrid-ef"):
            want, _ = matmul_on(off, a, b, method=method)
            got, prof = matmul_on(on, a, b, method=method)
            np.testing.assert_array_equal(got, want)
            assert "AMX tdpbssd" in prof.calls[0].engine


class TestEngine:
    """How the oneDNN engine takes, refuses and names the AMX GEMM."""

    def test_a_wrong_amx_gemm_falls_back_to_onednn(self):
        from ozlinalg.engines.onednn import OneDNNEngine

        cpu_engine_or_skip("onednn")

        class Wrong:
            isa = "fake"

            def set_threads(self, n):
                pass

            def gemm_amx(self, a, b, c, beta):
                c[...] = (c if beta else 0) + int64_product(a, b)
                c.reshape(-1)[:1] += 1  # one entry off by one

        eng = OneDNNEngine(amx=(Wrong(), "a wrong one"))
        assert eng.amx is None
        assert eng.amx_reason.startswith("failed the INT8 exactness self-test")
        assert "GEMM: oneDNN s8s8s32" in eng.describe()

    def test_not_asked_for(self):
        from ozlinalg.engines.onednn import OneDNNEngine

        cpu_engine_or_skip("onednn")
        eng = OneDNNEngine(amx=False)
        assert eng.amx is None and eng.amx_reason == "not asked for"
        assert eng.tuning_facts()["gemm"] == "oneDNN s8s8s32"

    def test_the_default_engine_runs_it_where_it_loads(self, amx):
        eng = cpu_engine_or_skip("onednn")
        assert eng.amx is amx
        assert "GEMM: AMX tdpbssd (compiled)" in eng.describe()
        assert eng.tuning_facts()["gemm"] == "AMX tdpbssd (compiled)"

    def test_switch_and_cap(self, monkeypatch):
        if kernels._module(1) is None:
            pytest.skip("compiled kernels not built")
        monkeypatch.setenv(kernels.ENV_AMX, "0")
        assert kernels._choose_amx() == (None, "OZLINALG_AMX=0")
        monkeypatch.setenv(kernels.ENV_AMX, "maybe")
        with pytest.raises(ValueError, match="OZLINALG_AMX"):
            kernels._choose_amx()
        monkeypatch.delenv(kernels.ENV_AMX)
        monkeypatch.setenv(kernels.ENV_ISA, "x86-64-v3")
        assert kernels._choose_amx() == (None, "OZLINALG_KERNELS_ISA=x86-64-v3")

    @pytest.mark.parametrize("env, why", [({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, None),
                                          ({"OZLINALG_AMX": "off"},
                                           "the compiled AMX GEMM not used: OZLINALG_AMX=off")])
    def test_a_cap_or_the_switch_leaves_onednn_s_gemm(self, amx, env, why):
        # the cap stands for a CPU without AMX: the engine line does not mention AMX
        r = python_with_engine_env(
            "from ozlinalg.engines.select import cpu_engine; e = cpu_engine('onednn'); "
            "print(e.amx is None); print(e.describe())", **env)
        assert r.returncode == 0, r.stderr
        none, line = r.stdout.splitlines()
        assert none == "True" and "GEMM: oneDNN s8s8s32" in line
        assert (why in line) if why else ("AMX" not in line and "amx" not in line)
