"""The engines as guests of the process: forked children, CPU threads, BLAS's thread count,
the memory bound.

A library runs inside other people's programs, so the engines keep four rules.

Forked children
    GNU OpenMP (libgomp, the thread pool of oneDNN's ``onednn-cpu-gomp`` build and of
    the compiled kernels) does not survive ``fork``: the child inherits a pool whose
    threads do not exist, and a parallel region of more than one thread waits for
    them forever. A region of ONE thread never touches the pool and runs. So in a
    forked child (``multiprocessing``'s "fork" context, ``ProcessPoolExecutor`` on
    Linux before Python 3.14, ``os.fork``) the engines run their OpenMP work on one
    thread (:func:`native_threads`); results are the same bits (they never depend
    on the thread count). Python thread pools (the SGEMM engine's) are recreated
    in the child, and locks that another thread of the parent may have held are
    replaced. Children started with "spawn" or "forkserver" are fresh processes and
    use every core. Callbacks: :func:`at_fork_child`.

Threads
    The engines use the CPUs this process may run on (``os.sched_getaffinity``), at
    most :data:`MAX_THREADS`, never ``os.cpu_count()`` of the whole machine.

BLAS's thread count
    Between emulated products the factorizations call native BLAS / LAPACK on small
    panels; OpenBLAS's threads keep spinning after a call and slow the next INT8
    GEMM, so the engine runs those panels on one BLAS thread
    (:class:`BlasThreadLimit`). The count is process-wide in OpenBLAS, so the
    limited sections of all threads are serialized and the count found is restored
    after each, unless somebody set their own meanwhile (a user's own
    ``threadpoolctl`` setting made during the call is kept).

The memory bound
    The default budgets (the scratch pool's cap, one product's working memory) are
    fractions of the memory this process may use, not of the machine's: the least
    of the physical memory, the cgroup's limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``, of the process's cgroup and its parents: a
    container's limit) and the address-space rlimit (``ulimit -v``). See
    :func:`memory_bound_bytes`.
"""
from __future__ import annotations

import functools
import os
import posixpath
import threading
import weakref

__all__ = ["BlasThreadLimit", "MAX_THREADS", "at_fork_child", "cpu_threads", "fork_safe_lock",
           "forked", "memory_bound", "memory_bound_bytes", "native_threads"]

#: Most threads an engine uses (the INT8 GEMMs stop scaling well beyond).
MAX_THREADS = 8

_forked = False
_child_callbacks: list = []  # fn()
_child_objects: list = []  # (weakref to obj, fn): fn(obj) while obj lives


def forked() -> bool:
    """True in a process created by ``fork`` from one that imported ozlinalg."""
    return _forked


def cpu_threads() -> int:
    """The CPUs this process may run on (its affinity mask), at most :data:`MAX_THREADS`."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_THREADS))


#: Where the cgroup file systems are mounted (v2 at the top, v1's at ``memory/``).
CGROUP_ROOT = "/sys/fs/cgroup"
#: This process's cgroups, one ``id:controllers:path`` line each (v2: ``0::path``).
PROC_CGROUP = "/proc/self/cgroup"
#: A limit from this on is no limit (cgroup v1 writes "none" as 2**63 - a page).
NO_LIMIT = 1 << 60


def _physical_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30  # a machine that cannot say: a modest guess


def _read_limit(path):
    """The byte count in the cgroup file ``path``, or None: missing, unreadable,
    ``max``, garbage, not positive, or so large it means no limit."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(64).strip()
        value = int(text)
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # "max" (v2's no limit) lands here too
    return value if 0 < value < NO_LIMIT else None


def _cgroup_paths(proc_cgroup):
    """``{controller: path}`` of this process's cgroups (v2's under ``""``); empty
    where the file is missing or unreadable."""
    paths = {}
    try:
        with open(proc_cgroup, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 16).splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                paths.setdefault(controller, parts[2])
    return paths


def _walk_up(base, path, filename):
    """``(bytes, file)``: the least limit in ``filename`` of the cgroup ``path`` and
    its parents under the mount ``base`` (a parent's limit binds its children too),
    or ``(None, None)``. A path outside the mount (``/..``: the process's cgroup is
    above a container's namespace) starts at the mount itself."""
    rel = posixpath.normpath("/" + path.strip()).lstrip("/")
    if rel.startswith(".."):
        rel = ""
    best = (None, None)
    while True:
        f = os.path.join(base, rel, filename) if rel else os.path.join(base, filename)
        value = _read_limit(f)
        if value is not None and (best[0] is None or value < best[0]):
            best = (value, f)
        if not rel:
            return best
        rel = posixpath.dirname(rel)


def _address_space_limit():
    """The soft ``RLIMIT_AS`` in bytes, or None (unlimited, or no ``resource`` module)."""
    try:
        import resource  # noqa: PLC0415 (POSIX only)

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    return soft if 0 < soft < NO_LIMIT and soft != resource.RLIM_INFINITY else None


def memory_bound_bytes(root=None, proc_cgroup=None):
    """``(bytes, source)``: the most memory this process may use, and what says so.

    The least of: the physical memory (``"physical memory"``); the cgroup v2
    ``memory.max`` of the process's cgroup (``0::path`` in ``/proc/self/cgroup``)
    or a parent's, ``"max"`` meaning none (a container's limit); the cgroup v1
    ``memory/…/memory.limit_in_bytes`` likewise, huge values meaning none; the
    soft address-space limit ``RLIMIT_AS`` (``ulimit -v``; it counts reserved
    address space, not only touched memory), infinity meaning none. ``source``
    names the file or limit that gave the value. Files that are missing,
    unreadable or hold anything but a byte count are skipped.

    Parameters
    ----------
    root : str, optional
        The cgroup mount (default :data:`CGROUP_ROOT`; tests use a fake tree).
    proc_cgroup : str, optional
        The process's cgroup list (default :data:`PROC_CGROUP`).
    """
    root = CGROUP_ROOT if root is None else root
    paths = _cgroup_paths(PROC_CGROUP if proc_cgroup is None else proc_cgroup)
    found = [(_physical_bytes(), "physical memory")]
    v2, f2 = _walk_up(root, paths.get("", "/"), "memory.max")
    if v2 is not None:
        found.append((v2, f"cgroup v2 {f2}"))
    v1, f1 = _walk_up(os.path.join(root, "memory"), paths.get("memory", "/"),
                      "memory.limit_in_bytes")
    if v1 is not None:
        found.append((v1, f"cgroup v1 {f1}"))
    rl = _address_space_limit()
    if rl is not None:
        found.append((rl, "RLIMIT_AS"))
    return min(found, key=lambda t: t[0])  # the first of equals: physical memory


@functools.lru_cache(maxsize=1)
def memory_bound():
    """:func:`memory_bound_bytes` of this process, read once (the engines' defaults
    ask for it per product; a container's limit does not change under it)."""
    return memory_bound_bytes()


def native_threads() -> int:
    """Threads the engines' OpenMP work may use now: one in a forked child, else
    :func:`cpu_threads`."""
    return 1 if _forked else cpu_threads()


def at_fork_child(fn, obj=None):
    """Call ``fn()`` (or ``fn(obj)``, holding ``obj`` weakly) in every forked child.

    For state that a fork breaks: thread pools, locks another thread may hold,
    thread counts of libgomp-based work. ``fn`` must not raise.
    """
    if obj is None:
        _child_callbacks.append(fn)
        return
    if len(_child_objects) >= 64:  # drop the entries of objects gone meanwhile
        _child_objects[:] = [(r, f) for r, f in _child_objects if r() is not None]
    _child_objects.append((weakref.ref(obj), fn))


def fork_safe_lock(factory=threading.Lock):
    """A new lock (``factory()``: ``threading.Lock`` or ``RLock``) that forked children
    get back released: a thread of the parent that held it does not exist there."""
    lock = factory()
    reinit = getattr(lock, "_at_fork_reinit", None)  # what the standard library uses
    if reinit is not None:
        _child_callbacks.append(reinit)
    return lock


def _after_fork_in_child():
    global _forked
    _forked = True
    _blas_limit_after_fork()
    for fn in list(_child_callbacks):
        _quietly(fn)
    for ref, fn in list(_child_objects):
        obj = ref()
        if obj is not None:
            _quietly(fn, obj)


def _quietly(fn, *args):
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 (a fork handler must never raise)
        pass


class BlasThreadLimit:
    """Context: native BLAS on ``threads`` threads, without changing anyone's setting for good.

    OpenBLAS's thread count is one process-wide variable, and OpenBLAS does not
    make changing it safe while other threads use it (measured here: a count set
    from one thread during another thread's BLAS calls was sometimes not the count
    read back). So the limited sections of all threads are serialized by one
    re-entrant lock: the first entry records each library's count and lowers it,
    the last exit restores it (and checks that it took), unless somebody set their
    own count meanwhile. ``threadpoolctl`` finds the libraries; where it is missing,
    or no BLAS has more threads than the limit, the lock alone is taken.
    """

    _lock = fork_safe_lock(threading.RLock)
    _depth = 0
    _saved: list = []  # [(controller, count found, count set)]
    _controllers = None

    def __init__(self, threads=1):
        self.threads = max(1, int(threads))

    @classmethod
    def _libraries(cls):
        if cls._controllers is None:
            try:
                from threadpoolctl import ThreadpoolController  # noqa: PLC0415

                cls._controllers = list(
                    ThreadpoolController().select(user_api="blas").lib_controllers)
            except Exception:  # noqa: BLE001 (not installed or failing: BLAS keeps its threads)
                cls._controllers = []
        return cls._controllers

    @classmethod
    def prepare(cls):
        """Find the BLAS libraries now (a safe point: the engine's creation)."""
        with cls._lock:
            cls._libraries()

    def __enter__(self):
        cls = type(self)
        cls._lock.acquire()
        try:
            if cls._depth == 0:
                saved = []
                for lib in cls._libraries():
                    found = lib.num_threads
                    if found is not None and found > self.threads:
                        lib.set_num_threads(self.threads)
                        saved.append((lib, found, self.threads))
                cls._saved = saved
            cls._depth += 1
        except BaseException:
            cls._lock.release()
            raise
        return self

    def __exit__(self, *exc):
        cls = type(self)
        try:
            cls._depth -= 1
            if cls._depth == 0:
                saved, cls._saved = cls._saved, []
                _restore(saved)
        finally:
            cls._lock.release()
        return False


def _restore(saved):
    for lib, found, limit in saved:
        if lib.num_threads != limit:  # somebody set their own count meanwhile: keep it
            continue
        for _ in range(3):
            lib.set_num_threads(found)
            if lib.num_threads == found:
                break


def _blas_limit_after_fork():
    # A thread of the parent inside a limited section does not exist here: restore what
    # it found and start counting again (the lock is released by fork_safe_lock).
    cls = BlasThreadLimit
    saved = cls._saved
    cls._depth = 0
    cls._saved = []
    try:
        _restore(saved)
    except Exception:  # noqa: BLE001
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
