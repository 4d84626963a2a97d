"""Render the task graph of ONE step of ozlinalg's blocked LU on dask (docs/dask.md).

Builds ``ozlinalg.linalg.lu_factor`` of a 3 x 3-block dask array and draws the
tasks of step k = 0 (and the input blocks they read) with dask's own renderer
(``dask.dot``, needs graphviz)::

    PYTHONPATH=$PWD python benchmarks/studies/dask_graph_picture.py docs/img/dask-lu-step.png
"""
from __future__ import annotations

import sys


def step_graph(nblocks=3, k=0):
    import dask.array as da

    import ozlinalg

    a = da.random.RandomState(0).uniform(size=(3 * nblocks, 3 * nblocks), chunks=3)
    lu, _ = ozlinalg.linalg.lu_factor(a, check_finite=False)
    graph = dict(lu.__dask_graph__())

    def step_of(key):
        from dask.utils import key_split

        kind = key_split(key)
        if not kind.startswith("oz-lu-") or kind in ("oz-lu-factors", "oz-lu-piv",
                                                    "oz-lu-perm"):
            return None
        idx = key[1:]
        # (kind, k, ...) except the L blocks, keyed (i, k)
        return idx[1] if kind == "oz-lu-l" else idx[0]

    keep = {key for key in graph if step_of(key) == k}
    inputs = set()
    for key in keep:
        inputs |= {d for d in _deps(graph[key]) if d in graph and d not in keep}
    sub = {key: graph[key] for key in keep}
    for key in inputs:
        sub[key] = 0   # drawn as a data node
    return sub


def _deps(task):
    if hasattr(task, "dependencies"):
        return set(task.dependencies)
    out = set()
    stack = [task]
    while stack:
        t = stack.pop()
        if isinstance(t, tuple) and t and isinstance(t[0], str):
            out.add(t)
        elif isinstance(t, (tuple, list)):
            stack.extend(t)
    return out


def main(path):
    from dask.dot import dot_graph

    dot_graph(step_graph(), filename=path.rsplit(".", 1)[0], format=path.rsplit(".", 1)[1],
              rankdir="LR", collapse_outputs=False, verbose=False)
    print("wrote", path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/img/dask-lu-step.png")
