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


def _gpu_available():
    cp = cupy_or_none()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


GPU = _gpu_available()


def pytest_collection_modifyitems(config, items):
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


CPU_ENGINES = ["sgemm", "onednn"]


def cpu_engine_or_skip(name):
    """The NumPy engine ``name``; skips (with oneDNN's reason) where it cannot run."""
    from ozlinalg.engines.onednn import EngineUnavailable
    from ozlinalg.engines.select import cpu_engine

    try:
        return cpu_engine(name)
    except EngineUnavailable as exc:
        pytest.skip(f"engine {name!r} unavailable here: {exc}")


@pytest.fixture(params=CPU_ENGINES)
def cpu_engine(request):
    """Each NumPy engine: the SGEMM engine, and the oneDNN INT8 engine where it runs."""
    return cpu_engine_or_skip(request.param)
