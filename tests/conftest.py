import os

import numpy as np
import pytest

try:
    from hypothesis import settings

    settings.register_profile("ci", max_examples=60, print_blob=True)
    settings.register_profile("deep", max_examples=2000, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # hypothesis is a test extra; its tests skip without it
    pass

from ozlinalg._array import cupy_or_none

#: The variables that choose and shape the NumPy engine (the CI's engine legs set some
#: in the environment of the whole run).
ENGINE_VARIABLES = ("OZLINALG_ENGINE", "ONEDNN_MAX_CPU_ISA", "OZLINALG_KERNELS_ISA",
                    "OZLINALG_FUSED", "OZLINALG_AMX")


def python_with_engine_env(code, **env):
    """``python -c code`` from the repository root, with only the engine variables given
    in ``env`` (:data:`ENGINE_VARIABLES` not given are removed)."""
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    full = dict(os.environ, PYTHONPATH=str(root), **env)
    for key in ENGINE_VARIABLES:
        if key not in env:
            full.pop(key, None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full, cwd=str(root), timeout=300)


def _gpu_available():
    cp = cupy_or_none()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


GPU = _gpu_available()


#: The ``engines`` subset (``pytest -m engines``): what the CI runs again on each
#: engine (.ci/run: OZLINALG_ENGINE=sgemm, OZLINALG_ENGINE=avx2, and oneDNN capped
#: below VNNI with ONEDNN_MAX_CPU_ISA=AVX2, where its self-test must reject it). Every
#: engine path:
#: matmul with every method and fixed / auto counts, Ozaki II, faithful products, the
#: factorizations (real and complex), the same-bits tests, the small-call path, and the
#: engine selection.
#: Node-id prefixes, relative to tests/.
ENGINE_SUBSET = (
    "test_matmul.py", "test_crt.py", "test_complex.py", "test_faithful.py",
    "test_reproducible.py", "test_lapack.py", "test_complex_factorizations.py",
    "test_small.py", "test_engine_onednn.py::TestSelection",
    "test_engine_avx2.py::TestSelection",
)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The test command runs the collected benchmarks (benchmarks/suite) once each,
    untimed, with their accuracy assertions: pytest-benchmark's ``--benchmark-disable``,
    unless timing was asked for (``--benchmark-only`` / ``--benchmark-enable``, as
    ``tox -e bench``). No timing tables, no rounds. (Here, not in a conftest of
    benchmarks/: this one is loaded before pytest-benchmark configures itself.)"""
    opt = config.option
    if not any(getattr(opt, name, False)
               for name in ("benchmark_only", "benchmark_enable", "benchmark_skip")):
        opt.benchmark_disable = True


def pytest_collection_modifyitems(config, items):
    engines = pytest.mark.engines
    for item in items:
        rel = item.nodeid.split("tests/", 1)[-1] if item.nodeid.startswith("tests/") else None
        if rel is None:
            continue
        # by file name, whichever folder of tests/ holds the file
        path, sep, rest = rel.partition("::")
        if (path.rsplit("/", 1)[-1] + sep + rest).startswith(ENGINE_SUBSET):
            item.add_marker(engines)
    if GPU:
        return
    skip = pytest.mark.skip(reason="needs CuPy and a CUDA device (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    """The array module under test: NumPy always, CuPy where a GPU exists."""
    if request.param == "numpy":
        return np
    return cupy_or_none()


@pytest.fixture
def rng():
    return np.random.default_rng(20261130)


@pytest.fixture(autouse=True, scope="session")
def _isolated_tuning(tmp_path_factory):
    """The suite never reads the developer's tuning cache nor runs the tuning model
    (machine-dependent decisions): an empty cache directory, and
    ``OZLINALG_TUNING=cache`` (the cache, then the engines' constants). Tests of the
    tuning set their own (tests/test_tuning.py). Subprocesses inherit both."""
    saved = {k: os.environ.get(k) for k in ("OZLINALG_CACHE_DIR", "OZLINALG_TUNING")}
    os.environ["OZLINALG_CACHE_DIR"] = str(tmp_path_factory.mktemp("ozlinalg-cache"))
    os.environ["OZLINALG_TUNING"] = "cache"
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def one_blas_thread():
    """One BLAS thread for modules of many small GEMMs: multithreaded OpenBLAS
    only adds contention there (measured on the 2-core box under load: 64 s
    with 2 threads, 4 s with 1)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


#: The NumPy engines by selection name ("sgemm": SGEMM on int8 slices with the compiled
#: passes where they load, else the float32 engine), and ``"float32-sgemm"``: the float32
#: SGEMM engine itself (ozlinalg/engines/sgemm.py), which the name "sgemm" gives only
#: without the compiled passes.
CPU_ENGINES = ["sgemm", "float32-sgemm", "onednn", "avx2"]

_FLOAT32_SGEMM: list = []


def float32_sgemm():
    """The float32 SGEMM engine (``SGEMMEngine``, made directly, one per session): the
    reference of the same-bits tests."""
    from ozlinalg.engines.sgemm import SGEMMEngine

    if not _FLOAT32_SGEMM:
        _FLOAT32_SGEMM.append(SGEMMEngine())
    return _FLOAT32_SGEMM[0]


def matmul_on(engine, a, b, small=True, **kw):
    """``ozlinalg.matmul(a, b, **kw)`` on the engine object ``engine`` (in place of the
    default NumPy engine for the call): ``(result, profile)``. ``small=False``: without
    the engine's one-call path of small products (its GEMM and passes run)."""
    import ozlinalg
    from ozlinalg.engines import base

    saved = base._ENGINES.get("numpy")
    base._ENGINES["numpy"] = engine
    had = "small_product" in vars(engine)
    hook = vars(engine).get("small_product")
    if not small:
        engine.small_product = None
    try:
        with ozlinalg.options(engine=None), ozlinalg.profile() as prof:
            c = ozlinalg.matmul(a, b, **kw)
    finally:
        base._ENGINES["numpy"] = saved
        if not small:  # an instance attribute only while it ran (as the engine had it)
            if had:
                engine.small_product = hook
            else:
                del engine.small_product
    return c, prof


def engines_where_they_run(*names):
    """The float32 SGEMM engine (the same-bits reference) and the engines of the
    selection ``names`` that run here."""
    from ozlinalg.engines.onednn import EngineUnavailable
    from ozlinalg.engines.select import cpu_engine

    out = [float32_sgemm()]
    for name in names:
        try:
            out.append(cpu_engine(name))
        except EngineUnavailable:
            pass
    return out


class CompiledSteps:
    """Spies on the compiled one-level steps (:mod:`ozlinalg.lapack.compiled_steps`) and
    runs calls on the Python steps, for the tests that compare the two. ``targets`` maps
    a key to ``(module, function name)`` of an entry point; ``ran[key]`` lists its
    results (None / False: not run), the calls of :meth:`python` left out."""

    def __init__(self, monkeypatch, targets):
        import numpy as np

        from ozlinalg.engines import get_engine

        ker = getattr(get_engine(np), "kernels", None)
        if ker is None or not hasattr(ker, "trsm_one_level"):
            pytest.skip("no compiled one-level steps on this engine (no compiled kernels)")
        self.monkeypatch = monkeypatch
        self.ran = {key: [] for key in targets}
        for key, (mod, name) in targets.items():
            real = getattr(mod, name)

            def spy(*args, real=real, key=key):
                out = real(*args)
                self.ran[key].append(out)
                return out

            monkeypatch.setattr(mod, name, spy)

    def python(self, fn):
        """``fn()`` with the compiled steps off."""
        from ozlinalg.lapack import compiled_steps

        sizes = {key: len(v) for key, v in self.ran.items()}
        with self.monkeypatch.context() as mp:
            mp.setattr(compiled_steps, "arguments", lambda *args: None)
            out = fn()
        for key, v in self.ran.items():
            del v[sizes[key]:]
        return out


def assert_same_bits_as(others, engine, rng, method, accuracy, shape, orders):
    """``ozlinalg.matmul`` on ``engine`` gives each of ``others``' bits on a phi = 1.5
    product of ``shape = (m, k, p)`` with the memory ``orders`` of A and B ("CF": A C,
    B Fortran) and a zero row (m > 2); faithful mode only for the methods that have it."""
    from ozlinalg.testing import random_matrix

    m, k, p = shape
    a = random_matrix(rng, m, k, 1.5)
    b = random_matrix(rng, k, p, 1.5)
    a = np.asfortranarray(a) if orders[0] == "F" else a
    b = np.asfortranarray(b) if orders[1] == "F" else b
    if m > 2:
        a[1] = 0.0  # a zero row
    if accuracy == "faithful" and method in ("bitmask", "rn"):
        accuracy = "dgemm"  # faithful mode: the EF and Ozaki-II methods
    # the engines' GEMMs and passes (the one-call path of small products has its own
    # tests: tests/ozaki/test_small.py)
    got, prof = matmul_on(engine, a, b, small=False, method=method, accuracy=accuracy)
    assert prof.calls[0].engine == engine.describe()
    for other in others:
        want, _ = matmul_on(other, a, b, small=False, method=method, accuracy=accuracy)
        np.testing.assert_array_equal(got, want, err_msg=other.name)


def cpu_engine_or_skip(name):
    """The NumPy engine ``name`` (a selection name, or ``"float32-sgemm"``:
    :func:`float32_sgemm`); skips where it cannot run, with the engine's own
    verdict as the reason (oneDNN missing, or failing its exactness self-test below
    VNNI; no AVX2 build or CPU)."""
    from ozlinalg.engines.onednn import EngineUnavailable
    from ozlinalg.engines.select import cpu_engine

    if name == "float32-sgemm":
        return float32_sgemm()
    try:
        return cpu_engine(name)
    except EngineUnavailable as exc:
        # the verdict, without the "was asked for but cannot run" preamble of select
        verdict = str(exc).split("cannot run: ", 1)[-1]
        pytest.skip(f"engine {name!r} cannot run here: {verdict}")


def sgemm_int8_is_redundant():
    """Whether the SGEMM engine on int8 slices may be left out of the engine-wide tests
    of this run, with the reason (else None): it shares everything but its GEMM with
    the oneDNN / AVX2 engine, so where one of those runs, the whole suite's engine-wide
    tests (``cpu_engine``, ``int8_engine``, tests/ozaki/test_reproducible.py) take that
    one, and the SGEMM engine on int8 slices has its own tests
    (tests/engines/test_engine_sgemm.py: its GEMM, the self-test, the same bits as the
    other engines on every method, the memory model, the selection). It is never left
    out where it is the run's default engine (``OZLINALG_ENGINE=sgemm``, the CI's sgemm
    leg) or the only INT8 engine (no AVX2 build: the kernels_baseline leg).
    (The whole suite's time: with it in every engine-wide test, 6 min 36 s on 2 cores.)
    """
    import os

    from ozlinalg.engines.onednn import EngineUnavailable
    from ozlinalg.engines.select import cpu_engine

    if os.environ.get("OZLINALG_ENGINE", "").strip().lower() in ("sgemm", "cpu-sgemm"):
        return None
    for other in ("avx2", "onednn"):
        try:
            cpu_engine(other)
        except EngineUnavailable:
            continue
        return (f"the SGEMM engine on int8 slices shares all but its GEMM with the {other} "
                "engine, which runs here (its own tests: test_engine_sgemm.py; the CI's "
                "sgemm and kernels_baseline legs run the engine subset on it)")
    return None


def avx2_is_redundant():
    """Whether the AVX2 engine may be left out of the engine-wide tests of this run,
    with the reason (else None): where oneDNN passes its exactness self-test (a VNNI or
    AMX CPU) it is the run's INT8 engine, and the AVX2 engine shares everything but
    its GEMM with it. The AVX2 engine keeps its own tests there
    (tests/engines/test_engine_avx2.py: its GEMM against int64, the self-test, the
    same bits as the SGEMM reference on every method), and the CI's avx2_cpu leg (the
    whole suite on it, oneDNN capped below VNNI) and avx2_gemm leg (the engine subset
    with it as the default engine) run every engine-wide test on it. It is never left
    out where it is the run's default engine (``OZLINALG_ENGINE=avx2``) or where
    oneDNN does not run. (The whole suite's time on a 2-core AVX-512 VNNI Xeon: 7 min
    10-58 s with it in every engine-wide test.)
    """
    import os

    from ozlinalg.engines.onednn import EngineUnavailable
    from ozlinalg.engines.select import cpu_engine

    if os.environ.get("OZLINALG_ENGINE", "").strip().lower() in ("avx2", "cpu-avx2"):
        return None
    try:
        cpu_engine("onednn")
    except EngineUnavailable:
        return None
    return ("the AVX2 engine shares all but its GEMM with the oneDNN engine, which runs "
            "here (its own tests: test_engine_avx2.py; the CI's avx2_cpu and avx2_gemm "
            "legs run the engine-wide tests on it)")


def engine_is_redundant(name, eng):
    """:func:`sgemm_int8_is_redundant` / :func:`avx2_is_redundant` for the engine ``eng``
    of the selection name ``name`` ("sgemm" only where it gives the engine on int8
    slices); None for the other engines."""
    if name == "avx2":
        return avx2_is_redundant()
    if name == "sgemm":
        from ozlinalg.engines.onednn.engine import Int8Engine

        return sgemm_int8_is_redundant() if isinstance(eng, Int8Engine) else None
    return None


@pytest.fixture(params=CPU_ENGINES)
def cpu_engine(request):
    """Each NumPy engine: the SGEMM engines (on int8 slices where the compiled passes
    load, and the float32 one), and the oneDNN and AVX2 INT8 engines where they run
    (each where :func:`engine_is_redundant` does not say otherwise)."""
    eng = cpu_engine_or_skip(request.param)
    why = engine_is_redundant(request.param, eng)
    if why:
        pytest.skip(why)
    return eng


#: The exact INT8 engines: one Int8Engine (int8 slice storage, EF groups as one GEMM,
#: the INT32 run limit and its int64 spill, the fused passes, the scratch pool, the
#: exactness self-test) around three GEMMs: oneDNN's s8s8s32, the compiled AVX2
#: ``vpmaddwd`` one, and float32 SGEMM on converted pieces (the engine the name
#: "sgemm" gives where the compiled passes load, ozlinalg/engines/sgemm_int8.py).
INT8_ENGINES = ["onednn", "avx2", "sgemm"]


@pytest.fixture(params=INT8_ENGINES)
def int8_engine(request):
    """Each exact INT8 engine, for tests of what they share (the Int8Engine around the
    GEMM): every one that runs here is tested, each one that cannot skips with its
    own reason (oneDNN missing or failing its self-test below VNNI, no AVX2 build; the
    name "sgemm" giving the float32 engine: no compiled passes)."""
    from ozlinalg.engines.onednn.engine import Int8Engine

    eng = cpu_engine_or_skip(request.param)
    if not isinstance(eng, Int8Engine):
        pytest.skip(f"engine {request.param!r} runs on float32 slices here: {eng.describe()}")
    why = engine_is_redundant(request.param, eng)
    if why:
        pytest.skip(why)
    return eng


# -- accuracy against the exact product (never against native DGEMM) -----------------


def _exact_parts(a, b):
    """ExactReferences of the real (and imaginary) part of the 2-D product a @ b."""
    from ozlinalg.testing import ExactReference

    if a.dtype.kind != "c" and b.dtype.kind != "c":
        return [ExactReference(a, b)]
    a = a.astype(np.complex128)
    b = b.astype(np.complex128)
    return [ExactReference(np.hstack([a.real, -a.imag]), np.vstack([b.real, b.imag])),
            ExactReference(np.hstack([a.real, a.imag]), np.vstack([b.imag, b.real]))]


def _as_2d_batches(c, a, b):
    """``(c_k, a_k, b_k)`` 2-D triples of a matmul with NumPy's shape rules."""
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    c2 = np.asarray(c).reshape(batch + (a2.shape[-2], b2.shape[-1]))
    for idx in np.ndindex(*batch):
        yield c2[idx], a2[idx], b2[idx]


def assert_dot_accurate(c, a, b):
    """Every entry of the product ``c`` is within :func:`ozlinalg.testing.dot_error_bound`
    of the exact ``a @ b``: what any FP64 DGEMM guarantees, on every machine. A
    single-precision ``c`` (an FP64 product rounded once) may be half an ulp of
    its dtype further off."""
    from ozlinalg.testing import dot_error_bound

    u = 0.0 if np.asarray(c).dtype in (np.float64, np.complex128) else \
        _unit_roundoff(np.asarray(c).dtype)
    for ck, ak, bk in _as_2d_batches(c, a, b):
        ak = ak.astype(np.complex128 if ak.dtype.kind == "c" else np.float64)
        bk = bk.astype(np.complex128 if bk.dtype.kind == "c" else np.float64)
        bound = dot_error_bound(ak, bk)
        refs = _exact_parts(ak, bk)
        parts = [ck.real, ck.imag] if len(refs) == 2 else [ck]
        for ref, part in zip(refs, parts):
            err = ref.absolute_errors(part.astype(np.float64))
            bad = ~(err <= bound + u * np.abs(ref.hi) * (1 + 2.0**-52))
            assert not bad.any(), (f"{int(bad.sum())} entries beyond the FP64 dot-product "
                                   f"bound; worst error / bound {np.max(err / bound):.3g}")


def textbook_max_error(a, b, mask=None):
    """Max relative error of :func:`ozlinalg.testing.textbook_matmul` (FP64 recursive
    summation: the machine-independent DGEMM level) against the exact product, over
    the entries in ``mask`` (default: all)."""
    from ozlinalg.testing import ExactReference, textbook_matmul

    with np.errstate(over="ignore", invalid="ignore"):
        rel = ExactReference(a, b).relative_errors(textbook_matmul(a, b))
    return float(rel[mask].max() if mask is not None else rel.max())


def _unit_roundoff(dtype):
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def assert_solve_accurate(x, a, b, *, rounded_from_fp64=False):
    """``x`` solves ``a x = b`` as a backward-stable solver in ``x``'s precision does.

    Judged against :func:`ozlinalg.testing.exact_solve` (rational arithmetic on the
    inputs' exact values), never against another solver: the normwise forward
    error bound ``n cond_inf(a) u ||x*||_inf`` (backward error ``n u``, u the unit
    roundoff of ``x``'s dtype). ``rounded_from_fp64``: ``x`` was computed in FP64
    and rounded to its (lower-precision) dtype, so each entry is within half an
    ulp of that dtype of the FP64 result, which meets the bound with FP64's u.
    """
    from ozlinalg.testing import exact_solve

    a = np.asarray(a)
    x = np.asarray(x)
    n = a.shape[0]
    want = exact_solve(a, b)
    assert x.shape == want.shape, (x.shape, want.shape)
    cond = np.linalg.cond(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64),
                          np.inf)
    scale = np.abs(want).max(initial=0.0)
    err = np.abs(x.astype(want.dtype) - want)
    if rounded_from_fp64:
        fp64 = n * cond * _unit_roundoff(np.float64) * scale
        tol = _unit_roundoff(x.dtype) * np.abs(want) + fp64 * (1 + _unit_roundoff(x.dtype))
        assert np.all(err <= tol), f"worst error / bound {np.max(err / tol):.3g}"
    else:
        tol = n * cond * _unit_roundoff(x.dtype) * scale
        assert err.max(initial=0.0) <= tol, f"error {err.max():.3g} > bound {tol:.3g}"


# -- the compiled INT8 GEMMs (AVX2 gemm16, AMX gemm_amx): shared kernel checks ----------

def int64_product(a, b):
    """``a @ b.T`` of int8 operands in int64: the exact reference of the INT8 GEMMs."""
    return a.astype(np.int64) @ b.astype(np.int64).T


def kernel_or_skip(load, what):
    """The kernel module ``load()`` gives (:func:`ozlinalg.engines.kernels.load_gemm`,
    ``load_amx``); skips with its reason where there is none."""
    import pytest

    mod, reason = load()
    if mod is None:
        pytest.skip(f"no {what} here: {reason}")
    return mod


def check_gemm_layouts(gemm, set_threads, rng, m, p, k, layout, threads):
    """``gemm(a, b, c, beta)`` (``c (+)= a @ b.T``, int8 operands, int32 result) against
    int64 NumPy with operands stored as rows, as columns (k x rows), strided (every
    other row and index of larger arrays) or as one slot of the engines' grouped
    storage; beta 0 and 1; a column-major result."""
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (p, k)).astype(np.int8)
    if layout == "cols":  # stored k x rows (the operands' column-major slices)
        a, b = np.asfortranarray(a), np.asfortranarray(b)
    elif layout == "strided":
        a = np.repeat(np.repeat(a, 2, axis=0), 2, axis=1)[::2, ::2]
        b = np.repeat(np.repeat(b, 2, axis=0), 2, axis=1)[::2, ::2]
    elif layout == "grouped":  # slot 1 of (rows, 3, k) storage; B's as (slots, k, columns)
        ga = np.zeros((m, 3, k), np.int8)
        ga[:, 1] = a
        a = ga[:, 1]
        gb = np.zeros((3, k, p), np.int8)
        gb[2] = b.T
        b = gb[2].T
    set_threads(threads)
    c = np.full((m, p), 7, np.int32)
    gemm(a, b, c, False)
    np.testing.assert_array_equal(c, int64_product(a, b))
    gemm(a, b, c, True)  # beta = 1: accumulates
    np.testing.assert_array_equal(c, 2 * int64_product(a, b))
    ct = np.zeros((p, m), np.int32).T  # a column-major result
    gemm(a, b, ct, False)
    np.testing.assert_array_equal(ct, int64_product(a, b))


def check_gemm_extremes(gemm, set_threads, va, vb, rows, cols):
    """The worst case just below 2**31: k = 2**17 - 1024 products of extremes, mixed
    signs in one row, on two threads."""
    k = (1 << 17) - 1024
    a = np.full((rows, k), va, np.int8)
    b = np.full((cols, k), vb, np.int8)
    b[3, ::2] = -vb - 1 if vb < 0 else -vb
    c = np.zeros((rows, cols), np.int32)
    set_threads(2)
    gemm(a, b, c, False)
    np.testing.assert_array_equal(c, int64_product(a, b))
    assert int(np.abs(int64_product(a, b)).max()) >= 127 * 127 * k


def check_gemm_wraps(gemm, rows, cols, ks):
    """Partial sums past 2**31 wrap in the int32 lanes; a result that fits is exact:
    +127**2 k, then -127**2 k gives 0, for each k of ``ks``."""
    for k in ks:
        a = np.full((rows, 2 * k), 127, np.int8)
        b = np.full((cols, 2 * k), 127, np.int8)
        b[:, k:] = -127
        c = np.ones((rows, cols), np.int32)
        gemm(a, b, c, False)
        np.testing.assert_array_equal(c, 0)


def check_gemm_arguments(gemm):
    """Mismatched shapes: ValueError; a result other than int32: TypeError."""
    import pytest

    a = np.zeros((3, 5), np.int8)
    with pytest.raises(ValueError, match="memory layout"):
        gemm(a, np.zeros((4, 6), np.int8), np.zeros((3, 4), np.int32), False)
    with pytest.raises(TypeError, match="int32|type 'i'"):
        gemm(a, a, np.zeros((3, 3), np.int64), False)
