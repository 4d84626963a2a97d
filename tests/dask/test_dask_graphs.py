"""The dask graphs ozlinalg builds are graphs dask accepts everywhere.

Every graph (alone, and merged with another from the same factorization, as
``da.dot(q, r)`` merges q's and r's) passes ``HighLevelGraph.validate``; its
keys are those dask's optimizer can rename (``type(k) is str`` or tuples of a
``str`` and ints); it survives ``dask.optimize`` and the optimized compute on
the threaded and processes schedulers. Under the backend, arrays of unknown
chunk sizes and block structures dask rejects go to dask's own functions,
with the reason counted in ``profile()``; and routing does not depend on
whether dask is imported before or after ``install()``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ozlinalg

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from ozlinalg import dask as ozd  # noqa: E402

EAGER = {"strategy": "eager", "min_size": 0}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def clean_backend():
    yield
    ozlinalg.backend.uninstall()


def _square(rng, n=24, chunk=8):
    a = rng.standard_normal((n, n)) + n * np.eye(n)
    return a, da.from_array(a, chunks=chunk)


def _spd(rng, n=24, chunk=8):
    g = rng.standard_normal((n, n))
    a = g @ g.T + n * np.eye(n)
    return a, da.from_array(a, chunks=chunk)


def _tall(rng, m=40, n=8, chunks=(10, 8)):
    a = rng.standard_normal((m, n))
    return a, da.from_array(a, chunks=chunks)


def _graphs(rng):
    """``{label: (lazy result, its NumPy value)}``: every kind of graph
    ozlinalg builds, alone and combined with its siblings."""
    a, x = _square(rng)
    s, xs = _spd(rng)
    t, xt = _tall(rng)
    w, xw = _tall(rng, 24, 24, (8, 8))         # Householder over block columns
    f, xf = _tall(rng, 8, 32, (8, 16))          # short and fat
    b = rng.standard_normal((24, 2))
    xb = da.from_array(b, chunks=(8, 2))
    out = {}
    q, r = ozd.qr(xt, mode="economic")
    out["tsqr q"], out["tsqr r"], out["tsqr q@r"] = (q, None), (r, None), (da.dot(q, r), t)
    q, r = ozd.qr(xw, mode="economic")
    out["householder q"], out["householder r"] = (q, None), (r, None)
    out["householder q@r"] = (da.dot(q, r), w)
    q, r = ozd.qr(xf, mode="economic")
    out["short-fat q@r"] = (da.dot(q, r), f)
    out["qr full"] = (da.dot(*ozd.qr(xt, mode="full")), t)
    out["qr r only"] = (ozd.qr(xt, mode="r")[0], None)
    p, lo, up = ozd.lu(x)
    out["lu p@l@u"] = (p @ lo @ up, a)
    lu_, piv = ozd.lu_factor(x)
    out["lu_factor + lu"] = (lu_ + lo + up + p, None)   # one getrf graph, two callers
    out["lu_solve"] = (ozd.lu_solve((lu_, piv), xb), np.linalg.solve(a, b))
    out["lu permute_l"] = (da.dot(*ozd.lu(x, permute_l=True)), a)
    out["lu p_indices"] = (ozd.lu(x, p_indices=True)[0], None)
    out["solve"] = (ozd.solve(x, xb), np.linalg.solve(a, b))
    out["solve pos"] = (ozd.solve(xs, xb, assume_a="pos"), np.linalg.solve(s, b))
    out["inv"] = (ozd.inv(x), np.linalg.inv(a))
    out["det"] = (ozd.det(x), np.linalg.det(a))
    c = ozd.cholesky(xs, lower=True)
    out["cholesky l@l.T"] = (c @ c.T, s)
    out["cho_solve"] = (ozd.cho_solve(ozd.cho_factor(xs), xb), np.linalg.solve(s, b))
    out["solve_triangular"] = (ozd.solve_triangular(c, xb, lower=True), None)
    sol, res, rank, sv = ozd.lstsq(xt, da.from_array(t[:, 0], chunks=10))
    out["lstsq"] = (da.stack([sol.sum(), rank.astype(float), sv.sum()]), None)
    out["matmul"] = (ozd.matmul(x, xb), a @ b)
    return out


def _cases():
    return list(_graphs(np.random.default_rng(0)))


def _key_ok(k):
    return type(k) is str or (type(k) is tuple and len(k) >= 1 and type(k[0]) is str
                              and all(type(i) is int for i in k[1:]))


@pytest.mark.parametrize("label", _cases())
def test_graph_validates_and_keys_are_plain(label):
    x, _ = _graphs(np.random.default_rng(0))[label]
    graph = x.__dask_graph__()
    graph.validate()
    bad = [k for k in graph.to_dict() if not _key_ok(k)]
    assert not bad, bad[:3]


@pytest.mark.parametrize("label", _cases())
def test_graph_survives_optimize(label):
    x, ref = _graphs(np.random.default_rng(0))[label]
    (opt,) = dask.optimize(x)
    expect = x.compute(scheduler="sync", optimize_graph=False)
    got = opt.compute(scheduler="threads", optimize_graph=True)
    np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-12)
    if ref is not None:
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)


def test_graphs_survive_optimize_on_processes():
    # one compute for all (a process pool per compute is slow on small machines)
    graphs = _graphs(np.random.default_rng(0))
    labels = [k for k, (_, ref) in graphs.items() if ref is not None]
    got = dask.compute(*[graphs[k][0] for k in labels], scheduler="processes",
                       optimize_graph=True)
    for k, g in zip(labels, got):
        np.testing.assert_allclose(g, graphs[k][1], rtol=1e-9, atol=1e-9, err_msg=k)


def test_graphs_on_a_local_cluster_of_threads():
    distributed = pytest.importorskip("distributed")
    graphs = _graphs(np.random.default_rng(0))
    labels = ["tsqr q@r", "householder q@r", "lu p@l@u", "solve", "cholesky l@l.T"]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        got = client.compute([graphs[k][0] for k in labels], sync=True)
    for k, g in zip(labels, got):
        np.testing.assert_allclose(g, graphs[k][1], rtol=1e-9, atol=1e-9, err_msg=k)


@pytest.mark.usefixtures("clean_backend")
class TestRouted:
    """The same through dask's own names under the backend."""

    def test_q_and_r_meet_in_one_expression(self, rng):
        t, xt = _tall(rng)
        with ozlinalg.backend(**EAGER):
            q, r = da.linalg.qr(xt)
            x, *_ = da.linalg.lstsq(xt, xt[:, 0])
        assert any(n.startswith("oz-") for n in q.dask.layers)
        for y in (da.dot(q, r), da.dot(q.T, q), x):
            y.dask.validate()
        np.testing.assert_allclose(da.dot(q, r).compute(), t, atol=1e-12)

    def test_a_rechunked_r_keeps_its_keys_through_fusion(self, rng):
        # dask's fusion renames only keys of type str: a str subclass was dropped
        a = rng.standard_normal((5, 10))
        with ozlinalg.backend(**EAGER):
            q, r = da.linalg.qr(da.from_array(a, chunks=(5, 10)))
        got = da.triu(r.rechunk(5)).compute()
        np.testing.assert_allclose(np.abs(got), np.abs(np.linalg.qr(a)[1]), atol=1e-12)

    def test_daskss_own_tsqr_runs_unrouted_inside(self, rng):
        # tsqr(compute_svd=True) is dask's; it calls tsqr again on the stacked
        # R factors (a partial graph of its own): that inner call is not routed
        a = rng.standard_normal((129, 2))
        with ozlinalg.backend(**EAGER):
            u, s, vh = da.linalg.tsqr(da.from_array(a, chunks=(16, 2)), compute_svd=True)
        for y in (u, s, vh):
            y.dask.validate()
        np.testing.assert_allclose(s.compute(), np.linalg.svd(a)[1], rtol=1e-12)

    def test_short_fat_r_keeps_daskss_chunks(self, rng):
        x = da.from_array(rng.standard_normal((10, 40)), chunks=(10, 15))
        qn, rn = da.linalg.qr(x)
        with ozlinalg.backend(**EAGER):
            q, r = da.linalg.qr(x)
        assert (q.chunks, r.chunks) == (qn.chunks, rn.chunks)
        assert any(n.startswith("oz-") for n in r.dask.layers)


def _routing(prof):
    return {(r.function, r.reason) for r in prof.routing}


@pytest.mark.usefixtures("clean_backend")
class TestFallBack:
    """Calls ozlinalg's graphs cannot take, or dask would reject, run dask's own."""

    def _rows(self, rng):
        x = da.from_array(rng.random((40, 5)), chunks=(10, 5))
        return x[x[:, 0] > 0.3]          # unknown (NaN) row chunks

    def test_unknown_chunks_matmul(self, rng):
        rows = self._rows(rng)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
            g = rows.T @ rows
        assert not any(n.startswith("oz-") for n in g.dask.layers)
        assert ("dask.array.routines.matmul", "unknown chunk sizes") in _routing(prof)
        h = rows.compute()
        np.testing.assert_allclose(g.compute(), h.T @ h)

    def test_unknown_chunks_qr(self, rng):
        rows = self._rows(rng)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
            q, r = da.linalg.qr(rows)
        assert ("dask.array.linalg.qr", "unknown chunk sizes") in _routing(prof)
        np.testing.assert_allclose((q @ r).compute(), rows.compute(), atol=1e-12)

    def test_a_profile_records_unknown_orders_without_raising(self, rng):
        rows = self._rows(rng)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
            u, s, v = da.linalg.svd(rows)
        assert all(r.order >= -1 for r in prof.routing)
        assert s.compute().shape == (5,)

    @pytest.mark.parametrize("chunks", [(5, 4), 7])
    def test_lu_and_cholesky_raise_as_dask_does(self, rng, chunks):
        x = da.from_array(rng.random((20, 20)) + 20 * np.eye(20), chunks=chunks)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
            for f in (da.linalg.lu, da.linalg.cholesky, da.linalg.inv):
                with pytest.raises(ValueError):
                    f(x)
        assert ("dask.array.linalg.lu", "dask rejects this block structure") in _routing(prof)

    def test_qr_chunked_both_ways_raises_as_dask_does(self, rng):
        x = da.from_array(rng.random((20, 20)), chunks=10)
        with ozlinalg.backend(**EAGER), ozlinalg.profile() as prof:
            with pytest.raises(NotImplementedError):
                da.linalg.qr(x)
        assert ("dask.array.linalg.qr", "dask rejects this block structure") in _routing(prof)


def _run_script(tmp_path, body, *launcher):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, *launcher, str(script)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


_PROGRAM = """
    import numpy as np
    import dask.array as da
    import ozlinalg
    from dask.array.linalg import qr       # bound at import, as dask's tests do

    x = da.from_array(np.random.default_rng(0).random((40, 8)), chunks=(10, 8))
    with ozlinalg.profile() as prof:
        q, r = qr(x)
    print("dask-names", sum(n.startswith("dask.") for n in ozlinalg.backend.installed()))
    print("oz-graph", any(n.startswith("oz-") for n in q.dask.layers))
    print("routed", prof.routed_emulated)
    print("ok", bool(np.allclose((q @ r).compute(), x.compute())))
"""


def test_launcher_routes_a_script_that_imports_dask_itself(tmp_path):
    out = _run_script(tmp_path, _PROGRAM, "-m", "ozlinalg", "run", "--strategy", "eager",
                      "--min-size", "0")
    lines = dict(ln.split() for ln in out.splitlines() if ln)
    assert int(lines["dask-names"]) > 0 and lines["oz-graph"] == "True"
    assert int(lines["routed"]) >= 1 and lines["ok"] == "True"


def test_dask_imported_after_install_in_threads(tmp_path):
    # several threads import dask.array at once after install(): one runs the
    # hook, all see the routes, and uninstall() takes the hook away
    out = _run_script(tmp_path, """
        import sys, threading
        import ozlinalg
        ozlinalg.install(strategy="eager", min_size=0)
        ozlinalg.install(strategy="eager", min_size=0)   # a second install adds no second hook
        print("waiting", sum(type(f).__module__ == "ozlinalg.routing._import_hook"
                             for f in sys.meta_path))
        seen = []
        def use():
            import dask.array.linalg as dal
            seen.append(getattr(dal.qr, "_ozlinalg_shim", False))
        threads = [threading.Thread(target=use) for _ in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        print("all", all(seen) and len(seen) == 4)
        ozlinalg.uninstall()
        import dask.array.linalg as dal
        print("hooks", sum(type(f).__module__ == "ozlinalg.routing._import_hook"
                           for f in sys.meta_path))
        print("restored", not getattr(dal.qr, "_ozlinalg_shim", False))
    """)
    lines = dict(ln.split() for ln in out.splitlines() if ln)
    assert lines == {"waiting": "1", "all": "True", "hooks": "0", "restored": "True"}


def test_install_while_another_thread_imports_dask(tmp_path):
    # whichever comes first (the hook, the import finished, or the import in
    # progress and a helper thread waiting for it), the routes end up installed
    out = _run_script(tmp_path, """
        import threading
        import ozlinalg
        started = threading.Event()
        def imp():
            started.set()
            import dask.array  # noqa: F401
        t = threading.Thread(target=imp)
        t.start()
        started.wait()
        ozlinalg.install(strategy="eager")
        t.join()
        for h in [h for h in threading.enumerate() if h.name == "ozlinalg-dask-routes"]:
            h.join()
        import dask.array.linalg as dal
        print("routed", getattr(dal.qr, "_ozlinalg_shim", False))
    """)
    assert out.split() == ["routed", "True"]


def test_a_failing_hook_never_breaks_the_import(tmp_path):
    out = _run_script(tmp_path, """
        import warnings
        import ozlinalg
        from ozlinalg.routing import _dask
        def broken(*a, **k):
            raise RuntimeError("no routes today")
        _dask.install = broken
        ozlinalg.install(strategy="eager")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import dask.array as da
        print("imported", da.ones(3).sum().compute() == 3)
        print("warned", any("no routes today" in str(x.message) for x in w))
    """)
    lines = dict(ln.split() for ln in out.splitlines() if ln)
    assert lines == {"imported": "True", "warned": "True"}


def test_no_hook_once_dask_is_imported(clean_backend):
    # this process imported dask.array already: install() patches it at once
    from ozlinalg.routing import _import_hook

    ozlinalg.install(strategy="eager")
    assert not any(isinstance(f, _import_hook.PostImportFinder) for f in sys.meta_path)
    assert "dask.array.linalg.qr" in ozlinalg.backend.installed()


def test_concurrent_installs_register_one_route_each(clean_backend):
    errors = []

    def go():
        try:
            with ozlinalg.backend(**EAGER):
                pass
        except Exception as exc:   # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    names = ozlinalg.backend.installed()
    assert len(names) == len(set(names)) and "dask.array.linalg.qr" in names
