"""The GPU check's multi-GPU step: ozlinalg's Dask graphs on
CuPy chunks, one dask-cuda worker process per GPU.

NOT YET RUN ON A MULTI-GPU MACHINE when written. Run by::

    python3 benchmarks/gpu/gpu_check.py --dask-gpus --out $OUT/gpu-dask.md \
        [--dask-n 8192] [--dask-chunk 2048] [--dask-rmm-pool 0.5]

It skips cleanly (a report saying why, exit status 0) where ``dask_cuda`` does
not import or fewer than two GPUs are visible. Otherwise it starts
``dask_cuda.LocalCUDACluster`` with one worker process per visible GPU (each
worker's ``CUDA_VISIBLE_DEVICES`` starts with its own GPU, so its CuPy device 0
is that GPU; an RMM pool per worker if ``--dask-rmm-pool`` is given), and
reports:

* per worker: ``CUDA_VISIBLE_DEVICES``, the device's PCI bus id and name,
  and how many cuBLASLt GEMMs its ozlinalg GPU engine launched during the
  ozlinalg runs (every worker must show some: its block products ran on its
  own GPU);
* for ``matmul``, the LU solve and the Cholesky solve at n x n with
  ``chunk`` blocks (inputs ``(U - 0.5) exp(0.5 N)`` generated on the
  workers, moved to their GPUs, persisted first): the best of ``reps``
  ``persist`` + ``wait`` times of ozlinalg's graph and of dask's own
  (``a @ b``, ``da.linalg.solve``) on the same cluster, the same problem
  through ozlinalg on ONE GPU without dask (the client's device 0) for the
  scaling, the number of workers holding result blocks, and accuracy: the
  product's max relative error on a 32 x 32 corner against the exact
  reference, the solves' normwise residual ``|Ax - b| / (|A| |x| + |b|)``
  (infinity norms);
* a bit-identity check: one block of a dask product with a single inner
  chunk, computed on a worker, against the same emulated product on the
  client's GPU.

Every row is in its own try/except; the report is rewritten after each.
"""
from __future__ import annotations

import logging
import os
import time
import traceback

TITLE = "Dask on several GPUs (dask-cuda LocalCUDACluster)"


def requirements(cp):
    """``(number of GPUs, None)``, or ``(n, reason)`` when the step must skip."""
    try:
        import dask_cuda  # noqa: F401
    except Exception as exc:
        return 0, f"dask-cuda does not import ({type(exc).__name__}: {exc})"
    try:
        n = int(cp.cuda.runtime.getDeviceCount())
    except Exception as exc:
        return 0, f"no CUDA device count ({exc!r})"
    if n < 2:
        return n, f"needs at least 2 GPUs, {n} visible"
    return n, None


def worker_info(dask_worker=None):
    """What one worker process runs on (through ``client.run``)."""
    import cupy as cp

    from ozlinalg.engines import get_engine

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props.get("name", b"?")
    return {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": str(props.get("pciBusID", "?")) + " " + (
                name.decode() if isinstance(name, bytes) else str(name)),
            "pid": os.getpid(), "launches": int(get_engine(cp).launches)}


def _launches(client):
    return {w: v["launches"] for w, v in client.run(worker_info).items()}


def _inputs(cp, da, client, n, chunk):
    """``a``, ``b`` (phi = 0.5), an SPD ``s`` and a right-hand side, CuPy-chunked,
    generated and persisted on the workers."""
    from distributed import wait

    rs = da.random.default_rng(1234 + n)
    meta = cp.empty((0, 0))

    def gen():
        x = (rs.random((n, n), chunks=chunk) - 0.5) * da.exp(
            0.5 * rs.standard_normal((n, n), chunks=chunk))
        return x.map_blocks(cp.asarray, meta=meta)

    a, b = gen(), gen()
    rhs = rs.standard_normal((n, 1), chunks=(chunk, 1)).map_blocks(cp.asarray, meta=meta)
    eye = da.eye(n, chunks=chunk).map_blocks(cp.asarray, meta=meta)
    s = a @ a.T + n * eye            # native (cuBLAS) DGEMM on the workers
    a, b, rhs, s = client.persist([a, b, rhs, s])
    wait([a, b, rhs, s])
    return a, b, rhs, s


def _residual(xp, a, x, rhs):
    """``|a x - rhs| / (|a| |x| + |rhs|)`` (infinity norms), with ``xp``'s
    operations (``dask.array`` on the cluster, or ``cupy``)."""
    r = a @ x - rhs
    parts = [abs(r).max(), abs(a).sum(axis=1).max(), abs(x).max(), abs(rhs).max()]
    if hasattr(parts[0], "dask"):
        import dask

        parts = dask.compute(*parts)
    num, an, xn, bn = (float(v) for v in parts)
    return num / (an * xn + bn)


def run_step(rep, log, reference, n=8192, chunk=2048, reps=2, rmm_pool_size=None,
             cluster_factory=None):
    """The step; ``rep`` is gpu_check's report, ``reference`` its SubsetReference
    class, ``cluster_factory(**kwargs)`` (tests) stands in for LocalCUDACluster."""
    import cupy as cp

    data = rep.data.setdefault("dask_gpus", {"rows": []})
    ngpu, reason = requirements(cp)
    data["gpus"] = ngpu
    if reason is not None and cluster_factory is None:
        data["status"] = f"skipped: {reason}"
        rep.add(TITLE, f"- status: {data['status']}")
        log("dask-gpus:", data["status"])
        return
    import dask
    import dask.array as da
    import distributed
    from distributed import Client, wait

    import ozlinalg

    data["versions"] = {"dask": dask.__version__, "distributed": distributed.__version__}
    try:
        import dask_cuda

        data["versions"]["dask_cuda"] = dask_cuda.__version__
    except Exception:
        pass
    kwargs = dict(n_workers=ngpu, threads_per_worker=1, dashboard_address=None,
                  silence_logs=logging.ERROR)
    if rmm_pool_size is not None:   # per worker; CuPy allocates from it
        kwargs.update(rmm_pool_size=rmm_pool_size, rmm_allocator_external_lib_list=["cupy"])
    data["cluster"] = {k: v for k, v in kwargs.items() if k != "silence_logs"}
    if cluster_factory is None:
        from dask_cuda import LocalCUDACluster as cluster_factory
    t0 = time.perf_counter()
    with cluster_factory(**kwargs) as cluster, Client(cluster) as client:
        data["cluster_start_s"] = time.perf_counter() - t0
        data["workers"] = client.run(worker_info)
        log(f"dask-gpus: {len(data['workers'])} workers in {data['cluster_start_s']:.1f} s:",
            data["workers"])
        a, b, rhs, s = _inputs(cp, da, client, n, chunk)
        log("dask-gpus: inputs persisted")

        def timed(build):
            best, x = float("inf"), None
            for _ in range(reps):
                x = build()
                t = time.perf_counter()
                x = client.persist(x)
                wait(x)
                best = min(best, time.perf_counter() - t)
            return best, x

        def one_gpu(fn, *args):
            """ozlinalg on the client's device 0, no dask: (best time, result, inputs)."""
            local = [x.compute() for x in args]
            best, out = float("inf"), None
            for _ in range(reps):
                out = None
                t = time.perf_counter()
                out = fn(*local)
                cp.cuda.Device().synchronize()
                best = min(best, time.perf_counter() - t)
            return best, out, local

        def solve_pos(x, y):
            return ozlinalg.linalg.solve(x, y, assume_a="pos")

        ops = {   # op: (ozlinalg's graph, dask's own graph, (function, inputs) on 1 GPU)
            "matmul": (lambda: ozlinalg.matmul(a, b), lambda: a @ b,
                       (ozlinalg.matmul, a, b)),
            "LU solve": (lambda: ozlinalg.linalg.solve(a, rhs), lambda: da.linalg.solve(a, rhs),
                         (ozlinalg.linalg.solve, a, rhs)),
            "Cholesky solve": (lambda: ozlinalg.linalg.solve(s, rhs, assume_a="pos"),
                               lambda: da.linalg.solve(s, rhs, assume_a="pos"),
                               (solve_pos, s, rhs)),
        }
        ref = reference(cp.asnumpy(a[:32].compute()), cp.asnumpy(b[:, :32].compute()))
        for op, (ours, native, single) in ops.items():
            native_t = None
            for impl in ("dask native", "ozlinalg", "ozlinalg, 1 GPU, no dask"):
                row = {"op": op, "impl": impl, "n": n, "chunk": chunk,
                       "gpus": 1 if "1 GPU" in impl else len(data["workers"])}
                try:
                    if impl == "ozlinalg, 1 GPU, no dask":
                        row["time"], x, local = one_gpu(*single)
                        row["accuracy"] = (
                            ref.errors(cp.asnumpy(x[:32, :32]))[0] if op == "matmul"
                            else _residual(cp, local[0], x, local[1]))
                    else:
                        before = _launches(client) if impl == "ozlinalg" else None
                        row["time"], x = timed(ours if impl == "ozlinalg" else native)
                        if before is not None:
                            after = _launches(client)
                            row["launches per worker"] = {w: after[w] - before.get(w, 0)
                                                          for w in after}
                            row["chunk type"] = (type(x._meta).__module__ + "."
                                                 + type(x._meta).__name__)
                        row["workers holding result"] = len(
                            {w for ws in client.who_has(x).values() for w in ws})
                        row["accuracy"] = (ref.errors(cp.asnumpy(x[:32, :32].compute()))[0]
                                           if op == "matmul" else _residual(
                                               da, s if op.startswith("Cholesky") else a, x,
                                               rhs))
                    if impl == "dask native":
                        native_t = row["time"]
                    elif native_t and impl == "ozlinalg":
                        row["x native"] = row["time"] / native_t
                except Exception as exc:
                    row["note"] = f"FAILED: {type(exc).__name__}: {str(exc)[:160]}"
                    rep.data["errors"].append(f"dask-gpus {op} {impl}: {exc!r}")
                    traceback.print_exc()
                x = local = None
                data["rows"].append(row)
                _scaling(data["rows"])
                rep.add(TITLE, section(data))
                log("dask-gpus:", row)
        try:
            data["bit_identical_block"] = _bit_identity(cp, client, a, b, chunk)
        except Exception as exc:
            data["bit_identical_block"] = f"FAILED: {exc!r}"
            rep.data["errors"].append(f"dask-gpus bit identity: {exc!r}")
        data["status"] = "ran"
        rep.add(TITLE, section(data))
        log("dask-gpus: done;", {k: data[k] for k in ("status", "bit_identical_block")})


def _bit_identity(cp, client, a, b, chunk):
    """One block of a dask product with one inner chunk (so one emulated product),
    computed on a worker, equals the same product on the client's GPU."""
    import ozlinalg

    a1 = a[:chunk].rechunk((chunk, -1))
    b1 = b[:, :chunk].rechunk((-1, chunk))
    worker = client.compute(ozlinalg.matmul(a1, b1), sync=True)
    here = ozlinalg.matmul(a1.compute(), b1.compute())
    return bool(cp.array_equal(worker, here))


def _scaling(rows):
    """``scaling`` of each multi-GPU ozlinalg row: its 1-GPU time / its time."""
    for r in rows:
        if r["impl"] == "ozlinalg" and "time" in r:
            one = next((o for o in rows if o["op"] == r["op"] and
                        o["impl"].startswith("ozlinalg, 1 GPU") and "time" in o), None)
            if one:
                r["scaling"] = one["time"] / r["time"]


def section(data):
    """The report's section body."""
    out = [f"- status: {data.get('status', 'running')}", f"- GPUs visible: {data.get('gpus')}",
           f"- versions: {data.get('versions')}", f"- cluster: {data.get('cluster')}, "
           f"started in {data.get('cluster_start_s', 0):.1f} s"]
    for w, v in sorted(data.get("workers", {}).items()):
        out.append(f"- worker {w}: CUDA_VISIBLE_DEVICES={v['CUDA_VISIBLE_DEVICES']}, "
                   f"device {v['device']}, pid {v['pid']}")
    if "bit_identical_block" in data:
        out.append("- a worker's block product bit-identical to the client GPU's: "
                   f"{data['bit_identical_block']}")
    out += ["", "| op | impl | GPUs | n / chunk | time (s) | x dask native | scaling vs 1 GPU | "
            "accuracy | GEMM launches per worker | workers holding result | note |",
            "|" + "---|" * 11]
    for r in data.get("rows", []):
        launches = r.get("launches per worker")
        out.append(
            f"| {r['op']} | {r['impl']} | {r['gpus']} | {r['n']} / {r['chunk']} | "
            f"{_fmt(r.get('time'), '.3f')} | {_fmt(r.get('x native'), '.2f')} | "
            f"{_fmt(r.get('scaling'), '.2f')} | {_fmt(r.get('accuracy'), '.2e')} | "
            f"{' / '.join(str(v) for v in launches.values()) if launches else ''} | "
            f"{r.get('workers holding result', '')} | {r.get('note', '')} |")
    out += ["", "Accuracy: matmul, max relative error of a 32 x 32 corner against the exact "
            "reference; solves, |Ax - b| / (|A| |x| + |b|) (infinity norms). Times: best of "
            "the runs of persist + wait (graph built before the clock starts); the 1-GPU "
            "rows run ozlinalg on CuPy arrays in the client process (device 0, shared with "
            "worker 0), no dask."]
    return "\n".join(out)


def _fmt(v, spec):
    return "" if v is None else format(v, spec)
