"""How a graph carries ozlinalg's options to the workers, and the small graph helpers.

Options live in a :class:`contextvars.ContextVar` (:func:`ozlinalg.options`),
which does not cross into Dask's worker threads or processes. Every block
function of an ozlinalg graph is therefore wrapped in an :class:`OzTask` that
holds the :class:`ozlinalg.Options` captured when the graph was built and puts
them in force around the call on the worker: a task never sees the worker's
defaults. The captured options are part of the graph's token, so graphs built
under different options never share keys (or cached results).
"""
from __future__ import annotations

import dataclasses
import operator

import numpy as np

from .._options import Options, get_options, options

__all__ = ["OzTask", "capture", "task_name", "sub", "new_array", "new_arrays", "block_keys",
           "offsets", "chunk_namespace", "meta_like"]


class OzTask:
    """A block function and the options it runs under (picklable, pure).

    ``OzTask(func, opts)(*args)`` calls ``func(*args)`` inside
    ``ozlinalg.options(**opts)``. The function must be importable (a module
    level function of ozlinalg), so the task pickles by reference to any worker.
    """

    __slots__ = ("func", "options")

    def __init__(self, func, opts: Options):
        if not isinstance(opts, Options):
            raise TypeError(f"OzTask needs an ozlinalg.Options, got {type(opts).__name__}")
        self.func = func
        self.options = opts

    def __call__(self, *args):
        with options(**{f.name: getattr(self.options, f.name)
                        for f in dataclasses.fields(self.options)}):
            return self.func(*args)

    def __reduce__(self):
        return (OzTask, (self.func, self.options))

    def __repr__(self):
        return f"OzTask({self.func.__name__}, {self.options!r})"

    @property
    def __name__(self):  # dask's task-stream / profiler labels
        return self.func.__name__


def capture(order, **explicit) -> Options:
    """The options a graph's tasks run under, read now (when the graph is built).

    ``explicit`` holds keyword arguments of the call (``slices=...``,
    ``method=...``) that override the context; ``None`` values are ignored.
    The call threshold (``Options.min_order``, else ``min_size``) is applied here, to
    ``order`` (the order of the whole problem, as :func:`ozlinalg.linalg` applies it
    to the user's matrix): below it the tasks keep the options (their blocks are
    smaller still, so they run in native FP64); from it on the tasks get
    ``min_size=0`` and ``min_order`` unset, so that every block product of a large
    problem is emulated whatever the chunk size.
    """
    opts = get_options()
    changes = {k: v for k, v in explicit.items() if v is not None}
    if changes:
        with options(**changes):  # validates the values as ozlinalg.options does
            opts = get_options()
    if order >= opts.call_min_order:
        opts = opts.replace(min_size=0, min_order=None)
    return opts


def task_name(prefix, token):
    """Key prefix of a task family: the plain ``str`` ``oz-<prefix>-<token>``.

    A plain ``str`` (not a subclass): dask's optimizer renames fused keys only
    when ``type(key) is str`` and drops keys of any other type, so every key
    of an ozlinalg graph is a ``str`` or a tuple of a ``str`` and ints. Names
    of the tasks of one family are made with :func:`sub`.
    """
    return f"oz-{prefix}-{token}"


def sub(name, suffix):
    """``sub("oz-<what>-<token>", "-panel")`` is ``"oz-<what>-panel-<token>"``.

    The readable part grows BEFORE the token, because dask's dashboard, task
    stream and progress bars label a task by the part before the first
    token-like word (``dask.utils.key_split``), so this one shows as
    ``oz-<what>-panel``. Tokens (``dask.base.tokenize``) hold no ``-``.
    """
    stem, _, token = name.rpartition("-")
    return f"{stem}{suffix}-{token}"


def offsets(chunks):
    """Start offsets of the chunks along one axis, with the total at the end."""
    return np.concatenate([[0], np.cumsum(chunks)]).astype(int).tolist()


def block_keys(x):
    """``{(i, j): key}`` (2-D) or ``{(i,): key}`` (1-D) of a dask array's blocks."""
    return {idx: (x.name,) + idx for idx in np.ndindex(*x.numblocks)}


def chunk_namespace(*arrays):
    """Name of the array module of the chunks of ``arrays`` (dask arrays):
    ``"numpy"`` or ``"cupy"``, the same for all (else ``TypeError``, as
    :func:`ozlinalg._array.array_namespace` refuses to mix devices)."""
    from .._array import is_cupy_array

    names = set()
    for x in arrays:
        meta = x._meta
        if type(meta) is np.ndarray:
            names.add("numpy")
        elif is_cupy_array(meta):
            names.add("cupy")
        else:
            raise TypeError(f"ozlinalg.dask: chunks of type {type(meta).__module__}."
                            f"{type(meta).__qualname__} are not supported (NumPy or CuPy "
                            "chunks only)")
    if len(names) > 1:
        raise TypeError("ozlinalg.dask: cannot mix dask arrays of NumPy and CuPy chunks in one "
                        "call; convert them first (x.map_blocks(cupy.asarray) / "
                        "x.map_blocks(cupy.asnumpy))")
    return names.pop() if names else "numpy"


def meta_like(x, ndim, dtype):
    """``meta`` of a dask array of ``ndim`` dimensions and ``dtype`` whose
    chunks have the type of dask array ``x``'s chunks."""
    from .._array import array_namespace

    return array_namespace(x._meta).empty((0,) * ndim, dtype=dtype)


def new_array(dsk, name, dependencies, shape, chunks, dtype):
    """A dask array whose blocks are ``(name, *index)`` in ``dsk`` (one layer
    holding every task of ``dsk``); its chunks have the type of those of
    ``dependencies[0]`` (NumPy or CuPy)."""
    (x,) = new_arrays(dsk, name, [(name, shape, chunks, dtype)], dependencies)
    return x


def new_arrays(dsk, base, outputs, dependencies):
    """Dask arrays ``[(name, shape, chunks, dtype), ...]`` of one task dict ``dsk``.

    Each output gets a layer of its own keys (``(name, *index)``); the other
    tasks of ``dsk`` (shared by the outputs: the factorization itself) form
    one layer ``sub(base, "-factor")`` that the outputs depend on, as dask's
    own ``tsqr`` does. A key must live in exactly one layer of a graph:
    when ``q`` and ``r`` of one QR meet in an expression their graphs are
    merged, and two layers holding the same keys fail
    ``HighLevelGraph.validate`` (and confuse culling). With one output, that
    layer holds every task. The layer dependencies are read from the tasks
    (:func:`_layer_dependencies`), so they are exactly what ``validate``
    recomputes.
    """
    from dask.array.core import Array
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    names = [o[0] for o in outputs]
    layers = {n: {} for n in names}
    factor = sub(base, "-factor")
    for key, task in dsk.items():
        owner = key[0] if type(key) is tuple else key
        if len(names) == 1:
            owner = names[0]
        layers.setdefault(owner if owner in layers else factor, {})[key] = task
    deps = _layer_dependencies(layers, dependencies)
    outer = {}
    for d in dependencies:
        graph = d.__dask_graph__()
        outer.update(graph.layers)
        outer_deps = graph.dependencies
        for lname in graph.layers:
            deps.setdefault(lname, set(outer_deps.get(lname, ())))
    arrays = []
    for name, shape, chunks, dtype in outputs:
        keep = _reachable(name, deps)
        hlg = HighLevelGraph(
            {n: (MaterializedLayer(layers[n]) if n in layers else outer[n]) for n in keep},
            {n: set(deps[n]) for n in keep})
        meta = meta_like(dependencies[0], len(shape), dtype)
        arrays.append(Array(hlg, name, shape=shape, chunks=chunks, meta=meta))
    return arrays


def _reachable(name, deps):
    """The layer ``name`` and every layer it depends on, directly or not."""
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(deps.get(n, ()))
    return seen


def _layer_dependencies(layers, dependencies):
    """``{layer: set of layers}`` for the new ``layers`` (``{name: tasks}``),
    from the keys their tasks reference: a key of another new layer, or a
    block of a dependency (a dask array). A dependency's blocks are
    ``(x.name, *index)`` in its layer ``x.name``; an ozlinalg array can also
    be read below its top layer (``lu`` reads the permutation of
    ``lu_factor``'s factor layer), so the keys of its ozlinalg layers (``oz-``,
    materialized) are looked up too."""
    owner = _Owners(dependencies)
    local = {key: lname for lname, tasks in layers.items() for key in tasks}
    deps = {}
    for lname, tasks in layers.items():
        found = set()
        for task in tasks.values():
            _references(task, local, owner, found)
        found.discard(lname)
        deps[lname] = found
    for lname, found in deps.items():   # a cycle would make dask's layer order undefined
        for other in found:
            if lname in deps.get(other, ()):
                raise RuntimeError(f"ozlinalg.dask: layers {lname} and {other} depend on "
                                   "each other")
    return deps


class _Owners:
    """Key name (``str``) -> the layer of the dependencies holding it.

    Blocks ``(x.name, *index)`` of a dependency ``x`` are in its top layer,
    and a key named like a layer is in it: those are looked up at once. Only
    a miss on an ``oz-`` name reads the keys of the dependencies' ozlinalg
    layers (materialized), once: a graph built on a long chain of ozlinalg
    results never scans the whole chain for the keys it does not use."""

    def __init__(self, dependencies):
        self.dependencies = dependencies
        self.direct = {}
        for d in dependencies:
            self.direct.setdefault(d.name, d.__dask_layers__()[0])
            for lname in d.__dask_graph__().layers:
                self.direct.setdefault(lname, lname)
        self.inner = None

    def get(self, head):
        lname = self.direct.get(head)
        if lname is not None or not head.startswith("oz-"):
            return lname
        if self.inner is None:
            self.inner = self._inner_keys()
        return self.inner.get(head)

    def _inner_keys(self):
        from dask.highlevelgraph import MaterializedLayer

        inner = {}
        for d in self.dependencies:
            for lname, layer in d.__dask_graph__().layers.items():
                if lname.startswith("oz-") and isinstance(layer, MaterializedLayer):
                    for key in layer:
                        inner.setdefault(key[0] if type(key) is tuple else key, lname)
        return inner


def _references(task, local, owner, found):
    """Add to ``found`` the layers of the keys that ``task`` (an old-style
    dask task: nested tuples and lists) references."""
    todo = [task]
    while todo:
        t = todo.pop()
        kind = type(t)
        if kind is tuple or kind is str:
            try:
                lname = local.get(t)
            except TypeError:   # a tuple holding something unhashable
                lname = None
            if lname is not None:
                found.add(lname)
                continue
            head = t[0] if kind is tuple and t else t
            if type(head) is str and (kind is str or _is_key(t)):
                lname = owner.get(head)
                if lname is not None:
                    found.add(lname)
                    continue
            if kind is tuple:
                todo.extend(t)
        elif kind is list:
            todo.extend(t)
        elif kind is dict:
            todo.extend(t.values())


def _is_key(t):
    """Whether tuple ``t`` has the form of a block key: a ``str`` then ints."""
    return all(type(i) is int for i in t[1:])


def filled(kind, shape, chunks, dtype, like, name):
    """A dask array of zeros (``kind="zeros"``) or the identity (``"eye"``)
    with chunks in the namespace of dask array ``like`` (created on the
    workers, as ``da.zeros`` / ``da.eye`` do for NumPy chunks)."""
    from dask.array.core import Array
    from dask.base import tokenize

    from . import _kernels as K

    xp = chunk_namespace(like)
    name = task_name(name, tokenize(kind, shape, chunks, dtype, xp))
    ro, co = offsets(chunks[0]), offsets(chunks[1])
    dsk = {}
    for i, r in enumerate(chunks[0]):
        for j, c in enumerate(chunks[1]):
            dsk[name, i, j] = ((K.eye_block, r, c, ro[i], co[j], dtype, xp) if kind == "eye"
                               else (K.zeros_block, r, c, dtype, xp))
    return Array(dsk, name, shape=shape, chunks=chunks, meta=meta_like(like, 2, dtype))


getitem = operator.getitem
