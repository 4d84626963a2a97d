"""ozlinalg on a dask.distributed LocalCluster against dask's native linalg.

For each worker count (one fresh ``LocalCluster`` each), each operation and
each implementation:

* inputs are generated ON the workers (``da.random``, seeded) and persisted
  before the clock starts;
* the previous results are released, the workers' peak RSS reset (Linux
  ``VmHWM``), their transfer counters read;
* the operation is persisted and waited for (the timed part);
* recorded: wall time, the machine's load average, bytes the workers sent to
  each other (dask's own per-worker transfer counters, read through the
  client), bytes spilled to disk, each worker's peak RSS, and an accuracy
  figure (matmul: max relative error of a few rows against the exact
  reference; solves: the normwise residual).

Operations: ``matmul`` (``a @ b`` vs ``ozlinalg.matmul``), ``lu`` (solve by
LU: ``da.linalg.solve`` vs ``ozlinalg.linalg.solve``), ``cholesky`` (solve of
an SPD matrix: ``da.linalg.solve(assume_a="pos")`` vs
``ozlinalg.linalg.solve(assume_a="pos")``). Each worker has one thread and one
BLAS thread (distributed's nanny default), so N workers use N cores.

Not collected by pytest (no ``bench_`` prefix); run it by hand::

    PYTHONPATH=$PWD python benchmarks/studies/dask_cluster.py --n 8192 --chunk 1024 \\
        --workers 1 2 --ops matmul lu cholesky --json out.json

A problem larger than a worker's memory (the limit set here, data spilled to
disk by dask)::

    PYTHONPATH=$PWD python benchmarks/studies/dask_cluster.py --n 8192 --chunk 1024 \\
        --workers 1 --ops cholesky --impls ozlinalg --memory-limit 400MiB \\
        --tile-memory 64MiB
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _warm(dask_worker=None):
    import scipy.linalg  # noqa: F401

    import ozlinalg.dask  # noqa: F401


def _inputs(op, n, chunk, seed):
    import dask.array as da

    rs = da.random.RandomState(seed)
    g = rs.uniform(-0.5, 0.5, (n, n), chunks=chunk)
    if op == "matmul":
        return g, rs.uniform(-0.5, 0.5, (n, n), chunks=chunk)
    b = rs.uniform(-0.5, 0.5, (n,), chunks=chunk)
    if op == "cholesky":   # symmetric, diagonally dominant: SPD
        g = ((g + g.T) / 2 + n * da.eye(n, chunks=chunk)).rechunk(chunk)
    return g, b


def _build(op, impl, a, b):
    import dask.array as da

    import ozlinalg

    if op == "matmul":
        return a @ b if impl == "native" else ozlinalg.matmul(a, b)
    kind = "pos" if op == "cholesky" else "gen"
    if impl == "native":
        return da.linalg.solve(a, b, assume_a=kind)
    return ozlinalg.linalg.solve(a, b, assume_a=kind)


def _accuracy(op, a, b, out, check_rows=4, check_cols=256):
    import dask

    if op == "matmul":
        from ozlinalg.testing import ExactReference

        a_h, b_h, c = dask.compute(a[:check_rows], b[:, :check_cols],
                                   out[:check_rows, :check_cols])
        return f"max rel err (exact ref, {check_rows}x{check_cols})", float(
            ExactReference(a_h, b_h).relative_errors(c).max())
    r = a @ out - b    # dask's native products: a check, not the timed part
    num, an, xn, bn = dask.compute(abs(r).max(), abs(a).sum(axis=1).max(), abs(out).max(),
                                   abs(b).max())
    return "residual |Ax-b|/(|A||x|+|b|)", float(num / (an * xn + bn))


def run_one(client, op, impl, n, chunk, seed, tile_memory):
    from distributed import wait

    import ozlinalg
    from ozlinalg.tools.local_cluster import reset_peaks, stats_delta, worker_stats

    client.run(_warm)
    a, b = _inputs(op, n, chunk, seed)
    a, b = client.persist([a, b])
    wait([a, b])
    opts = {} if tile_memory is None else {"memory_limit": tile_memory}
    with ozlinalg.options(**opts):
        graph = _build(op, impl, a, b)
    reset_peaks(client)
    before = worker_stats(client)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    out = client.persist(graph)
    wait(out)
    seconds = time.perf_counter() - t0
    load1 = os.getloadavg()[0]
    stats = stats_delta(before, worker_stats(client))
    what, acc = _accuracy(op, a, b, out)
    tasks = len(dict(graph.__dask_graph__()))
    del out, graph, a, b
    return dict(op=op, impl=impl, n=n, chunk=chunk, workers=len(stats), seconds=seconds,
                load=(load0, load1), moved_bytes=sum(s["sent_bytes"] for s in stats.values()),
                spilled_bytes=sum(s["spilled_bytes"] for s in stats.values()),
                peak_rss=[s["peak_rss"] for s in stats.values()],
                memory_limit=[s["memory_limit"] for s in stats.values()],
                accuracy_kind=what, accuracy=acc, tasks=tasks)


def _size(text):
    if text in (None, "auto"):
        return text
    from dask.utils import parse_bytes

    return parse_bytes(text)


def table(rows):
    lines = ["| op | impl | workers | n / chunk | time [s] | x native | scaling 1->2 | "
             "moved [MiB] | spilled [MiB] | peak RSS per worker [MiB] | accuracy | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        nat = [x for x in rows if x["op"] == r["op"] and x["impl"] == "native"
               and x["workers"] == r["workers"] and x["n"] == r["n"]]
        one = [x for x in rows if x["op"] == r["op"] and x["impl"] == r["impl"]
               and x["workers"] == 1 and x["n"] == r["n"]]
        ratio = f"{r['seconds'] / nat[0]['seconds']:.1f}" if nat else "-"
        scale = (f"{one[0]['seconds'] / r['seconds']:.2f}" if one and r["workers"] > 1 else "-")
        lines.append(
            f"| {r['op']} | {r['impl']} | {r['workers']} | {r['n']} / {r['chunk']} | "
            f"{r['seconds']:.1f} | {ratio} | {scale} | {r['moved_bytes'] / 2**20:.0f} | "
            f"{r['spilled_bytes'] / 2**20:.0f} | "
            f"{' / '.join(f'{p / 2**20:.0f}' for p in r['peak_rss'])} | "
            f"{r['accuracy']:.1e} | {r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--ops", nargs="+", default=["matmul", "lu", "cholesky"],
                    choices=["matmul", "lu", "cholesky"])
    ap.add_argument("--impls", nargs="+", default=["native", "ozlinalg"],
                    choices=["native", "ozlinalg"])
    ap.add_argument("--memory-limit", default="auto",
                    help="per worker, e.g. 400MiB (dask spills beyond it)")
    ap.add_argument("--tile-memory", default=None,
                    help="ozlinalg.options(memory_limit=...) for the block products, e.g. 64MiB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--table", nargs="+", metavar="JSON",
                    help="only print the table of rows saved by earlier runs")
    args = ap.parse_args(argv)
    if args.table:
        print(table([r for f in args.table for r in json.load(open(f))["rows"]]))
        return

    from ozlinalg.tools.local_cluster import local_client

    rows = []
    for w in args.workers:
        with local_client(w, memory_limit=_size(args.memory_limit)) as client:
            for op in args.ops:
                for impl in args.impls:
                    r = run_one(client, op, impl, args.n, args.chunk, args.seed,
                                _size(args.tile_memory))
                    rows.append(r)
                    print(json.dumps(r), file=sys.stderr, flush=True)
                    if args.json:
                        with open(args.json, "w") as f:
                            json.dump(dict(argv=sys.argv, cpus=os.cpu_count(), rows=rows), f,
                                      indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()
