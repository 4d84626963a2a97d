"""``python -m ozlinalg compare/solve --dask N``: the main job on a local
``dask.distributed`` cluster of N worker processes, against dask's native
linalg on the same cluster."""
from __future__ import annotations

import json
import sys
import time

import numpy as np

__all__ = ["compare", "solve"]


def _timed(client, build, repeat=1):
    """Persist ``build()`` on the cluster and wait, best of ``repeat`` (the
    first run also pays the workers' imports): ``(seconds, persisted, stats)``
    with the workers' counters of the last run."""
    from distributed import wait

    from .local_cluster import reset_peaks, stats_delta, worker_stats

    best = float("inf")
    for _ in range(max(1, repeat)):
        out = None
        reset_peaks(client)
        before = worker_stats(client)
        t = time.perf_counter()
        out = client.persist(build())
        wait(out)
        best = min(best, time.perf_counter() - t)
        stats = stats_delta(before, worker_stats(client))
    return best, out, stats


def _moved(stats):
    return sum(s["sent_bytes"] for s in stats.values())


def compare(args):
    import dask.array as da

    import ozlinalg

    from ..testing import random_matrix
    from .local_cluster import local_client

    rng = np.random.default_rng(args.seed)
    n, chunk = args.n, args.dask_chunk or max(1, -(-args.n // 2))
    a_h, b_h = random_matrix(rng, n, n, args.phi), random_matrix(rng, n, n, args.phi)
    ref = None
    if args.check_rows:
        from ..testing import ExactReference

        ref = ExactReference(a_h[:args.check_rows], b_h)
    rows = []
    with local_client(args.dask) as client:
        a = client.persist(da.from_array(a_h, chunks=chunk))
        b = client.persist(da.from_array(b_h, chunks=chunk))

        def row(label, slices, build):
            t, c, stats = _timed(client, build, args.repeat)
            err = (float("nan"),) * 2
            if ref is not None:
                from ..testing import error_stats

                err = error_stats(ref.relative_errors(c[:args.check_rows].compute()))
            rows.append(dict(method=label, slices=slices, seconds=t, gflops=2 * n**3 / t / 1e9,
                             max_err=err[0], median_err=err[1], moved_bytes=_moved(stats),
                             peak_rss=max(s["peak_rss"] for s in stats.values())))

        row("dask native", "-", lambda: a @ b)
        methods = list(ozlinalg.METHODS) if args.methods == ["all"] else args.methods
        for meth in methods:
            row(meth, args.slices, lambda meth=meth: ozlinalg.matmul(a, b, method=meth,
                                                                     slices=args.slices))
    for r in rows:
        r["ratio"] = r["seconds"] / rows[0]["seconds"]
    if args.json:
        json.dump(dict(device=f"dask LocalCluster({args.dask})", n=n, chunk=chunk, phi=args.phi,
                       rows=rows), sys.stdout, indent=1)
        print()
        return
    print(f"ozlinalg {ozlinalg.__version__}: C = A @ B, n = {n}, phi = {args.phi}, dask "
          f"LocalCluster of {args.dask} worker process(es), chunks {chunk}, errors vs exact "
          f"reference on {args.check_rows} rows")
    print(f"{'method':<12} {'slices':>6} {'time [s]':>9} {'GFLOP/s':>8} {'x native':>9} "
          f"{'max rel err':>11} {'median':>9} {'moved MiB':>9} {'peak RSS MiB':>12}")
    for r in rows:
        print(f"{r['method']:<12} {r['slices']!s:>6} {r['seconds']:9.3f} {r['gflops']:8.2f} "
              f"{r['ratio']:9.1f} {r['max_err']:11.2e} {r['median_err']:9.2e} "
              f"{r['moved_bytes'] / 2**20:9.1f} {r['peak_rss'] / 2**20:12.0f}")


def solve(args, a_h, b_h, source):
    import dask.array as da

    import ozlinalg

    from .local_cluster import local_client

    n = a_h.shape[0]
    chunk = args.dask_chunk or args.block_size or max(1, -(-n // 2))

    def residual(x):
        r = a_h @ x - b_h
        return float(np.linalg.norm(r, np.inf) / (np.linalg.norm(a_h, np.inf)
                                                  * np.linalg.norm(x, np.inf)
                                                  + np.linalg.norm(b_h, np.inf)))

    with local_client(args.dask) as client:
        a = client.persist(da.from_array(a_h, chunks=chunk))
        b = client.persist(da.from_array(b_h, chunks=chunk))
        t_nat, x_nat, s_nat = _timed(client, lambda: da.linalg.solve(a, b), 2)
        with ozlinalg.options(slices=args.slices, **({"method": args.method}
                                                     if args.method else {})):
            t_emu, x, s_emu = _timed(client, lambda: ozlinalg.linalg.solve(a, b), 2)
        x, x_nat = x.compute(), x_nat.compute()
    res = dict(source=source, device=f"dask LocalCluster({args.dask})", n=n, chunk=chunk,
               seconds=t_emu, native_seconds=t_nat, residual=residual(x),
               native_residual=residual(x_nat), moved_bytes=_moved(s_emu),
               native_moved_bytes=_moved(s_nat),
               peak_rss=max(s["peak_rss"] for s in s_emu.values()))
    if args.out:
        np.save(args.out, x)
    if args.json:
        json.dump(res, sys.stdout, indent=1)
        print()
        return
    print(f"ozlinalg solve: {source}, dask LocalCluster of {args.dask} worker process(es), "
          f"chunks {chunk}")
    print(f"  emulated blocked LU + solve : {t_emu:8.3f} s   residual {res['residual']:.2e}   "
          f"moved {res['moved_bytes'] / 2**20:.1f} MiB")
    print(f"  dask native da.linalg.solve : {t_nat:8.3f} s   residual "
          f"{res['native_residual']:.2e}   moved {res['native_moved_bytes'] / 2**20:.1f} MiB")
    if args.out:
        print(f"  x written to {args.out}")
