"""``dask.array.linalg.svd`` under the backend: the same decomposition as natively.

Dask's SVD of a tall-and-skinny array (and of a short-and-fat one, through its
transpose) is ``tsqr(a, compute_svd=True)``: the ``tsqr`` route hands it back
to dask, whose graph calls ``numpy.linalg.qr`` on the blocks and
``numpy.linalg.svd`` on the stacked R factor, both routed when the graph is
computed inside the backend block (``scheduler="sync"``: the block's routing
state is the calling thread's). The results are compared with dask's native
run within what the problem allows: singular values within ``c max(m, n) eps
||A||_2`` of each other (Weyl: each run's are those of a matrix within its
backward error of ``A``), singular vectors within that over the singular-value
gap, with dask's sign convention (``coerce_signs=True``) making them unique.
"""
from __future__ import annotations

import numpy as np
import pytest

import ozlinalg
from ozlinalg.routing import ROUTES

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

EPS = np.finfo(np.float64).eps
C = 8.0  # slack over max(m, n) eps ||A|| (both runs' rounding, the reconstruction's)

pytestmark = pytest.mark.usefixtures("one_blas_thread")


@pytest.fixture
def clean_backend():
    yield
    ozlinalg.backend.uninstall()


def with_spectrum(rng, m, n, s):
    """An m x n matrix with singular values `s` (k = min(m, n) of them)."""
    qa, _ = np.linalg.qr(rng.standard_normal((m, len(s))))
    qb, _ = np.linalg.qr(rng.standard_normal((n, len(s))))
    return (qa * s) @ qb.T


@pytest.mark.usefixtures("clean_backend")
@pytest.mark.parametrize("m,n,chunks", [(240, 24, (60, 24)), (24, 240, (24, 60))],
                         ids=["tall", "wide"])
def test_svd_unchanged_under_backend(rng, m, n, chunks):
    k = min(m, n)
    s_true = np.linspace(1.0, 4.0, k)[::-1]            # gap 3 / (k - 1) between neighbours
    a_h = with_spectrum(rng, m, n, s_true)
    a = da.from_array(a_h, chunks=chunks)
    u0, s0, v0 = dask.compute(*da.linalg.svd(a))
    with ozlinalg.backend(strategy="eager", min_size=0), ozlinalg.profile() as prof:
        u, s, v = da.linalg.svd(a)
        u1, s1, v1 = dask.compute(u, s, v, scheduler="sync")

    # the block QRs (and the small SVD, where numpy.linalg.svd is routed) ran on
    # the emulated GEMM
    expected = {"numpy.linalg.qr"} | ({"numpy.linalg.svd"} if "svd" in ROUTES["numpy.linalg"]
                                      else set())
    routed = {r.function for r in prof.routing if r.emulated}
    assert expected <= routed, prof.routing
    assert prof.emulated_gemm_calls > 0

    assert (u1.shape, s1.shape, v1.shape) == (u0.shape, s0.shape, v0.shape)
    assert (u1.dtype, s1.dtype, v1.dtype) == (u0.dtype, s0.dtype, v0.dtype)
    norm_a = s0[0]
    tol_s = C * max(m, n) * EPS * norm_a
    assert np.max(np.abs(s1 - s0)) <= tol_s
    assert np.max(np.abs(s1 - s_true)) <= tol_s
    gap = np.min(-np.diff(s_true))                    # the smallest gap, the s_k = 1 > 0 too
    tol_vec = tol_s / min(gap, s_true[-1])
    assert np.max(np.abs(u1 - u0)) <= tol_vec
    assert np.max(np.abs(v1 - v0)) <= tol_vec
    # and each run a decomposition of A to its rounding
    assert np.linalg.norm(a_h - (u1 * s1) @ v1, 2) <= tol_s
    assert np.linalg.norm(u1.T @ u1 - np.eye(k), 2) <= C * max(m, n) * EPS
    assert np.linalg.norm(v1 @ v1.T - np.eye(k), 2) <= C * max(m, n) * EPS
