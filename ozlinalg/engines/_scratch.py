"""Large scratch buffers kept between products (the CPU INT8 engine).

Every emulated product allocates the same large temporaries: normalized copies
of the operands, int8 slices or residues, the INT32 result. Fresh memory costs a
page fault per page on first touch, and on the virtual machines this was
measured on (a memory-reclaiming hypervisor) that is 0.05-1.7 ms per MiB: at
n = 4096, Ozaki-II spent 0.1-0.45 s of its 2.6 s in the kernel, zeroing the
pages of buffers it had freed a moment before. The pool keeps freed buffers
(each at least :data:`MIN_BYTES`) for the next product, as CuPy's memory pool
does for device memory.

Safety: a buffer goes back to the pool only when no array that uses its
memory is alive. Each lease hands out arrays made from its own ctypes object
(:func:`numpy.frombuffer`), which every view, reshape and transpose of them
keeps alive; a :func:`weakref.finalize` on that object returns the memory when
the last of them is gone (tests/engines/test_scratch.py). Contents are never relied on
(``numpy.empty`` semantics).

How much it keeps: at most ``limit`` bytes of free buffers (default 1/8 of the
memory the process may use, at most 2 GiB: the least of the physical memory, a
container's cgroup limit and ``ulimit -v``, :func:`ozlinalg.engines._process.
memory_bound_bytes`; environment variable
``OZLINALG_SCRATCH_CACHE`` in bytes, 0 disables it), and never more than the
``options(memory_limit=...)`` in force when a buffer comes back (handed in by
``ozlinalg._options``: :func:`set_memory_limit_source`). Under such a limit the free
buffers also make room for the pool's buffers in use: a buffer comes back only while
the kept and the leased together stay within the limit, and a fresh allocation first
frees the oldest kept buffers until they do. A product under a limit also trims the
kept buffers to the limit less its plan when it starts and when its products'
phase starts (:meth:`ScratchPool.trim`): kept buffers that no request of that phase
fits (sized for another product, or for the count's tiles) would otherwise sit
beside its working memory: 20-30 MiB of the 45-70 MiB peaks under 64-100 MiB at
n = 2048 (``benchmarks/studies/memory_bound.py``). Within a phase the buffers that
come back are the sizes its next tiles ask for, so they are kept.
:func:`ozlinalg.engines.free_scratch` (or ``engine.scratch.clear()``) frees them.

Out of memory: kept buffers are memory the process could use, so they go first.
:meth:`ScratchPool.empty` whose allocation fails while pools keep free buffers
frees them and tries once more; :func:`release_after_oom` is what a product's
``except MemoryError`` calls before re-raising, so that the buffers of the
failed product (back in the pool once its arrays are gone) do not make the
next call fail too.
"""
from __future__ import annotations

import ctypes
import math
import threading
import weakref

import numpy as np

from .._env import env_bytes
from ._process import fork_safe_lock, memory_bound

__all__ = ["ENV_SCRATCH", "MIN_BYTES", "ScratchPool", "default_limit", "free_scratch",
           "release_after_oom"]

ENV_SCRATCH = "OZLINALG_SCRATCH_CACHE"

#: Smaller buffers come from ``numpy.empty`` as usual (malloc reuses them anyway).
MIN_BYTES = 4 << 20


#: The pool keeps at most this share of the memory bound, and at most MAX_LIMIT.
BOUND_SHARE = 8
MAX_LIMIT = 2 << 30


def default_limit():
    """Bytes of free buffers a pool keeps: ``OZLINALG_SCRATCH_CACHE`` (a finite,
    non-negative byte count; anything else raises ValueError) or 1/8 of the memory
    the process may use (:func:`~ozlinalg.engines._process.memory_bound`: physical
    memory, cgroup limit, ``RLIMIT_AS``), at most 2 GiB."""
    env = env_bytes(ENV_SCRATCH)  # a bad value raises, naming the variable
    if env is not None:
        return env
    return int(min(MAX_LIMIT, memory_bound()[0] // BOUND_SHARE))


def _no_limit():
    return None


#: ``() -> bytes or None``: the working-memory limit in force, which also caps what the
#: pools keep. The engines do not read the options (they sit below them):
#: ``ozlinalg._options`` hands its ``memory_limit`` in through :func:`set_memory_limit_source`.
_limit_source = _no_limit


def set_memory_limit_source(source):
    """Make ``source()`` (bytes or None: no limit) the working-memory limit that caps the
    free buffers a pool keeps when one comes back; returns the previous source."""
    global _limit_source
    previous, _limit_source = _limit_source, source
    return previous


def _options_cap():
    lim = _limit_source()
    return math.inf if lim is None else int(lim)


_POOLS = weakref.WeakSet()


def free_scratch():
    """Free the buffers every engine's pool keeps (leased ones when released)."""
    for pool in list(_POOLS):
        pool.clear()


def _held_anywhere():
    """Bytes of free buffers all pools keep now."""
    return sum(pool.held for pool in list(_POOLS))


def release_after_oom():
    """Free every pool's kept buffers after a MemoryError; returns the bytes freed.

    For a product's ``except MemoryError`` before it re-raises. The failed
    product's buffers are still leased then (the traceback holds its frames);
    kept once they come back, they would take the memory the next call needs.
    So, as after every :meth:`ScratchPool.clear`, buffers leased before this call
    go back to the system when their arrays go, not to a pool. Cheap: no garbage
    collection, nothing but the pools' lists.
    """
    held = _held_anywhere()
    free_scratch()
    return held


def _np_empty(shape, dtype, order="C"):
    """``numpy.empty`` (one place to allocate, so tests can make it fail)."""
    return np.empty(shape, dtype, order=order)


def _allocate(shape, dtype, order="C"):
    """``numpy.empty``, retried once after freeing the pools' kept buffers if it runs
    out of memory while some are kept (they are the process's memory too)."""
    try:
        return _np_empty(shape, dtype, order)
    except MemoryError:
        if not _held_anywhere():
            raise
    free_scratch()
    return _np_empty(shape, dtype, order)


#: Byte alignment of the pool's buffers: a cache line, what oneDNN's brgemm / AMX
#: kernels want for dense operands (NumPy's large buffers start 16 bytes past one).
ALIGN = 64


def _aligned(nbytes):
    """A uint8 buffer of ``nbytes`` whose address is a multiple of :data:`ALIGN`."""
    raw = _allocate(nbytes + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + nbytes]


class ScratchPool:
    """Free large buffers of one engine, reused best fit (at most twice the size asked),
    each starting on a :data:`ALIGN`-byte boundary."""

    def __init__(self, limit=None):
        self.limit = default_limit() if limit is None else max(0, int(limit))
        self._free = []  # uint8 arrays, oldest first
        # bumped by clear(): buffers leased before it are not taken back (a clear
        # after a MemoryError must also drop the failed product's buffers)
        self._generation = 0
        # re-entrant: finalizers may run inside the pool's own calls
        self._lock = fork_safe_lock(threading.RLock)
        self.hits = 0  # buffers taken from the pool (tests read it)
        self.leased = 0  # bytes of the pool's buffers in use
        _POOLS.add(self)

    @property
    def held(self):
        """Bytes of free buffers kept now."""
        with self._lock:
            return sum(b.nbytes for b in self._free)

    def clear(self):
        """Free every kept buffer (leased ones return to the system when released)."""
        with self._lock:
            self._free.clear()
            self._generation += 1

    def trim(self, keep=0):
        """Free the oldest kept buffers until at most ``keep`` bytes are kept (leased ones
        still come back)."""
        with self._lock:
            self._evict(keep)

    def _evict(self, keep):
        """Drop the oldest kept buffers until at most ``keep`` bytes are kept (the lock
        held)."""
        total = sum(b.nbytes for b in self._free)
        while self._free and total > keep:
            total -= self._free.pop(0).nbytes

    def empty(self, shape, dtype, order="C"):
        """``numpy.empty(shape, dtype, order)``, from a kept buffer where one fits.

        Where the allocation runs out of memory while pools keep free buffers,
        those are freed and it is tried once more; MemoryError after that.
        """
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in (shape if isinstance(shape, tuple) else (shape,)))
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if nbytes < MIN_BYTES or self.limit <= 0:
            return _allocate(shape, dtype, order)
        buf = None
        with self._lock:
            best = None
            for i, b in enumerate(self._free):
                if nbytes <= b.nbytes <= 2 * nbytes and (
                        best is None or b.nbytes < self._free[best].nbytes):
                    best = i
            if best is not None:
                buf = self._free.pop(best)
                self.hits += 1
        if buf is None:
            self._make_room(nbytes)
            buf = _aligned(nbytes)  # may clear the pools: generation after it
        with self._lock:
            self.leased += buf.nbytes
        gen = self._generation
        lease = (ctypes.c_char * buf.nbytes).from_buffer(buf)
        weakref.finalize(lease, self._give, buf, gen).atexit = False
        flat = np.frombuffer(lease, dtype=dtype, count=count)
        return flat.reshape(shape, order=order)

    def _make_room(self, nbytes):
        """Under an ``options(memory_limit=...)``: free the oldest kept buffers until they,
        the leased ones and ``nbytes`` more fit the limit."""
        cap = _options_cap()
        if cap == math.inf:
            return
        with self._lock:
            self._evict(cap - self.leased - nbytes)

    def _give(self, buf, gen):
        try:
            with self._lock:
                self.leased -= buf.nbytes
            cap = min(self.limit, _options_cap() - self.leased)
        except Exception:  # noqa: BLE001 (a finalizer at interpreter shutdown: let it go)
            return
        with self._lock:
            if buf.nbytes > cap or gen != self._generation:
                return
            self._free.append(buf)
            self._evict(cap)
