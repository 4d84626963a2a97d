"""A local ``dask.distributed`` cluster and what its workers report: used by
``python -m ozlinalg compare/solve --dask N`` (:mod:`.dask_cluster`) and
benchmarks/studies/dask_cluster.py.

ozlinalg has no cluster code of its own: this is a thin convenience around
:class:`distributed.LocalCluster`; to use an existing cluster, create a
``distributed.Client(address)`` and compute as usual (docs/dask.md).
"""
from __future__ import annotations

import contextlib
import logging

__all__ = ["local_client", "worker_stats", "stats_delta", "reset_peaks"]


@contextlib.contextmanager
def local_client(n_workers, memory_limit="auto", threads_per_worker=1):
    """``distributed.Client`` of a fresh ``LocalCluster`` of ``n_workers`` processes.

    Each worker has ``threads_per_worker`` threads and (distributed's nanny
    default) one BLAS thread, so N workers use N cores. ``memory_limit`` is
    per worker (bytes or a string such as ``"512MiB"``): beyond it dask spills
    to disk, pauses, and finally restarts the worker.
    """
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                      processes=True, memory_limit=memory_limit, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        yield client


def _peak_rss():
    """The process's peak resident set size since the last :func:`_reset_peak`
    (Linux ``VmHWM``; ``ru_maxrss`` would also count the pre-exec parent)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return -1


def _reset_peak(dask_worker=None):
    import gc

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")   # resets VmHWM to the current RSS
    except OSError:  # pragma: no cover - not Linux
        pass


def reset_peaks(client):
    """Collect garbage and restart the peak-RSS count on every worker."""
    client.run(_reset_peak)


def _worker_stats(dask_worker):
    """Counters of one worker process (run there by ``client.run``)."""
    spilled = sum(v for (label, unit), v in
                  getattr(dask_worker.data, "cumulative_metrics", {}).items()
                  if unit == "bytes" and "disk-write" in str(label))
    incoming = sum(t.get("total", 0) for t in dask_worker.transfer_incoming_log)
    return dict(
        peak_rss=_peak_rss(),
        rss=dask_worker.monitor.get_process_memory(),
        sent_bytes=int(dask_worker.transfer_outgoing_bytes_total),
        received_bytes=int(incoming),
        spilled_bytes=int(spilled),
        memory_limit=dask_worker.memory_manager.memory_limit,
    )


def worker_stats(client):
    """``{worker address: counters}``: peak and current RSS of the worker
    process, bytes it sent to / received from other workers, bytes spilled."""
    return client.run(_worker_stats)


def stats_delta(before, after):
    """Per-worker counters of one run: transfer and spill counters as
    differences, memory as read after the run."""
    out = {}
    for w, a in after.items():
        b = before.get(w, {})
        out[w] = dict(a)
        for k in ("sent_bytes", "received_bytes", "spilled_bytes"):
            out[w][k] = a[k] - b.get(k, 0)
    return out
