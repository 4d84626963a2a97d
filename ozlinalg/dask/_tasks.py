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

__all__ = ["OzTask", "TaskName", "capture", "task_name", "new_array", "block_keys", "offsets",
           "chunk_namespace", "meta_like"]


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
    ``Options.min_size`` is applied here, to ``order`` (the order of the whole
    problem, as :func:`ozlinalg.linalg` applies it to the user's matrix): below
    it the tasks keep it (their blocks are smaller still, so they run in
    native FP64); from it on the tasks get ``min_size=0``, so that every block
    product of a large problem is emulated whatever the chunk size.
    """
    opts = get_options()
    changes = {k: v for k, v in explicit.items() if v is not None}
    if changes:
        with options(**changes):  # validates the values as ozlinalg.options does
            opts = get_options()
    if order >= opts.min_size:
        opts = opts.replace(min_size=0)
    return opts


class TaskName(str):
    """Key prefix of a task family: ``oz-<what>-<token>``.

    ``name + "-panel"`` gives ``oz-<what>-panel-<token>``: the readable part
    grows BEFORE the token, because dask's dashboard, task stream and progress
    bars label a task by the part before the first token-like word
    (``dask.utils.key_split``), so this one shows as ``oz-<what>-panel``.
    """

    __slots__ = ("stem", "token")

    def __new__(cls, stem, token):
        self = super().__new__(cls, f"{stem}-{token}")
        self.stem, self.token = stem, token
        return self

    def __add__(self, suffix):
        return TaskName(self.stem + suffix, self.token)

    def __reduce__(self):
        return (TaskName, (self.stem, self.token))


def task_name(prefix, token):
    """:class:`TaskName` ``oz-<prefix>-<token>``."""
    return TaskName(f"oz-{prefix}", token)


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
    """A dask array whose blocks are ``(name, *index)`` in ``dsk``; its chunks
    have the type of those of ``dependencies[0]`` (NumPy or CuPy)."""
    from dask.array.core import Array
    from dask.highlevelgraph import HighLevelGraph

    graph = HighLevelGraph.from_collections(name, dsk, dependencies=dependencies)
    meta = meta_like(dependencies[0], len(shape), dtype)
    return Array(graph, name, shape=shape, chunks=chunks, meta=meta)


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
