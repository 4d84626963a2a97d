"""ctypes binding of oneDNN's BLAS-like functions (``libdnnl.so.3``), loaded softly.

Only four entry points are used: ``dnnl_gemm_s8s8s32`` (the exact INT8 x INT8
-> INT32 product), ``dnnl_gemm_bf16bf16f32`` (the magnitude estimates of
``slices="auto"``), ``dnnl_version`` and ``dnnl_get_effective_cpu_isa``. They
are plain C functions, so ctypes calls them without a compiler, and ctypes
releases the GIL for the duration of each call. oneDNN's BLAS-like functions
are **row-major** (unlike BLAS).

Where the library comes from (first hit wins; :func:`find_library`):

1. ``OZLINALG_ONEDNN_LIBRARY``: an explicit path, which must exist (``"none"``
   disables oneDNN; unset or empty: the lookup below);
2. ``<sys.prefix>/lib/libdnnl.so.3``: where pip puts the data files of the
   ``onednn-cpu-gomp`` wheel;
3. the files the ``onednn-cpu-gomp`` distribution lists in its RECORD
   (another prefix, a user install);
4. ``ctypes.util.find_library("dnnl")``: a system oneDNN.

Nothing here raises on a machine without oneDNN: :func:`load` returns
``(None, reason)``. A bad ``OZLINALG_ONEDNN_LIBRARY`` (a file that does not
exist) raises ValueError (:mod:`ozlinalg._env`).

A GEMM that returns a status other than ``dnnl_success`` raises
(:func:`check_status`): ``dnnl_out_of_memory`` as :class:`MemoryError` (what
every other allocation failure of a product is, so the driver's handler and the
caller's ``except MemoryError`` see it), any other status as RuntimeError naming
it (``invalid arguments``, ``unimplemented``, ...), with the call and its shape.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

from .._env import env_text, invalid
from ._process import fork_safe_lock

__all__ = ["DNNL", "ISA_NAMES", "STATUS_NAMES", "check_status", "find_library", "load"]

#: ``dnnl_cpu_isa_t`` values of oneDNN 3.x (cumulative bit masks).
ISA_NAMES = {
    0x0: "default",
    0x1: "sse41",
    0x3: "avx",
    0x7: "avx2",
    0xF: "avx2_vnni",
    0x1F: "avx2_vnni_2",
    0x27: "avx512_core",
    0x67: "avx512_core_vnni",
    0xE7: "avx512_core_bf16",
    0x1EF: "avx512_core_fp16",
    0xFEF: "avx512_core_amx",
    0x1FEF: "avx512_core_amx_fp16",
}

#: ``dnnl_status_t`` of oneDNN 3.x (``dnnl_common_types.h``), without the prefix.
STATUS_NAMES = {
    0: "success",
    1: "out of memory",
    2: "invalid arguments",
    3: "unimplemented",
    4: "last implementation reached",
    5: "runtime error",
    6: "not required",
    7: "invalid graph",
    8: "invalid graph op",
    9: "invalid shape",
    10: "invalid data type",
}
_OUT_OF_MEMORY = 1


def check_status(st, call, shape):
    """Raise for a failed oneDNN call: status ``st`` of ``call`` (its name) on ``shape``
    (text such as ``"m=.., n=.., k=.."``); returns None on ``dnnl_success``.

    ``dnnl_out_of_memory`` raises :class:`MemoryError`: it is the same condition as
    a failed ``numpy.empty`` in the product, and callers (the driver's tiling
    advice, the scratch pool's release, a user's retry) handle it as such. Any
    other status is a RuntimeError naming it.
    """
    st = int(st)
    if st == 0:
        return
    what = STATUS_NAMES.get(st, "unknown status")
    msg = f"ozlinalg: {call}({shape}) failed with status {st} ({what})"
    if st == _OUT_OF_MEMORY:
        raise MemoryError(msg)
    raise RuntimeError(msg)


_LIB_NAME = "libdnnl.so.3"
_DIST = "onednn-cpu-gomp"
ENV_LIBRARY = "OZLINALG_ONEDNN_LIBRARY"
_DISABLED = ("none", "off", "0", "false", "no")


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint),
                ("gpu_runtime", ctypes.c_uint)]


def find_library():
    """``(path or None, tried)``: where ``libdnnl.so.3`` is, and what was looked at.

    ``OZLINALG_ONEDNN_LIBRARY`` set to a path takes that file (ValueError if there
    is none: a mistyped path must not quietly leave the SGEMM engine running);
    ``none`` / ``off`` / ``0`` / ``false`` / ``no`` disables oneDNN.
    """
    tried = []
    env = env_text(ENV_LIBRARY)
    if env is not None:
        if env.lower() in _DISABLED:
            return None, [f"{ENV_LIBRARY}={env!r} (disabled)"]
        if not os.path.isfile(env):
            raise invalid(ENV_LIBRARY, env, "the path of an existing libdnnl.so.3, or 'none' "
                          "to disable oneDNN (no such file)")
        return env, [f"{ENV_LIBRARY}={env}"]
    cand = os.path.join(sys.prefix, "lib", _LIB_NAME)
    tried.append(cand)
    if os.path.exists(cand):
        return cand, tried
    try:
        from importlib import metadata  # noqa: PLC0415

        dist = metadata.distribution(_DIST)
        for f in dist.files or ():
            if f.name == _LIB_NAME:
                path = str(dist.locate_file(f))
                tried.append(path)
                if os.path.exists(path):
                    return path, tried
    except Exception:  # not installed, or no RECORD
        tried.append(f"{_DIST} (not installed)")
    found = ctypes.util.find_library("dnnl")
    tried.append(f"find_library('dnnl') -> {found}")
    return found, tried


class DNNL:
    """The loaded library with typed entry points."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        self.path = path
        self.lib = lib
        i64, f32, vp, ch = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_char
        lib.dnnl_version.restype = ctypes.POINTER(_Version)
        lib.dnnl_get_effective_cpu_isa.restype = ctypes.c_int
        self._s8 = lib.dnnl_gemm_s8s8s32
        self._s8.argtypes = [ch, ch, ch, i64, i64, i64, f32, vp, i64, ctypes.c_int8, vp, i64,
                             ctypes.c_int8, f32, vp, i64, vp]
        self._s8.restype = ctypes.c_int
        self._bf16 = getattr(lib, "dnnl_gemm_bf16bf16f32", None)
        if self._bf16 is not None:
            self._bf16.argtypes = [ch, ch, i64, i64, i64, f32, vp, i64, vp, i64, f32, vp, i64]
            self._bf16.restype = ctypes.c_int
        v = lib.dnnl_version().contents
        self.version = (v.major, v.minor, v.patch)
        self.cpu_runtime = int(v.cpu_runtime)
        # oneDNN's OpenMP build (onednn-cpu-gomp) runs on libgomp: the thread count of
        # its next GEMM is the calling thread's omp_set_num_threads (a per-thread ICV,
        # which other OpenMP code of that thread reads too: each call restores it).
        try:
            self._gomp = ctypes.CDLL("libgomp.so.1")
            self._gomp.omp_set_num_threads.argtypes = [ctypes.c_int]
            self._gomp.omp_set_num_threads.restype = None
            self._gomp.omp_get_max_threads.restype = ctypes.c_int
            self.max_threads = int(self._gomp.omp_get_max_threads())
        except (OSError, AttributeError):
            self._gomp = None
            self.max_threads = os.cpu_count() or 1
        self.hash = (v.hash or b"").decode(errors="replace")
        self._zero_offset = (ctypes.c_int32 * 1)(0)

    @property
    def isa(self) -> int:
        """``dnnl_get_effective_cpu_isa()`` (fixed once oneDNN generated a kernel)."""
        return int(self.lib.dnnl_get_effective_cpu_isa())

    @property
    def isa_name(self) -> str:
        isa = self.isa
        return ISA_NAMES.get(isa, hex(isa))

    def _push_threads(self, n):
        """Set this thread's OpenMP thread count to ``n``; returns the count to restore
        (None: nothing to restore)."""
        gomp = self._gomp
        if gomp is None:
            return None
        n = max(1, min(int(n), self.max_threads))
        prev = gomp.omp_get_max_threads()
        if prev == n:
            return None
        gomp.omp_set_num_threads(n)
        return prev

    def _pop_threads(self, prev):
        if prev is not None:
            self._gomp.omp_set_num_threads(prev)

    def gemm_s8s8s32(self, transa, transb, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc, beta,
                     threads=1):
        """Row-major ``C (m x n, int32) = op(A) @ op(B) + beta C`` (``beta`` 0 or 1) on
        ``threads`` OpenMP threads.

        ``transa`` b"N": A stored m x k (row stride lda), b"T": stored k x m;
        ``transb`` b"N": B stored k x n (row stride ldb), b"T": stored n x k.
        """
        prev = self._push_threads(threads)
        try:
            st = self._s8(transa, transb, b"F", m, n, k, 1.0, a_ptr, lda, 0, b_ptr, ldb, 0,
                          float(beta), c_ptr, ldc, ctypes.addressof(self._zero_offset))
        finally:
            self._pop_threads(prev)
        if st != 0:
            check_status(st, "dnnl_gemm_s8s8s32",
                         f"m={m}, n={n}, k={k}, lda={lda}, ldb={ldb}, ldc={ldc}")

    def gemm_bf16(self, transa, transb, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc, threads=1):
        """Row-major ``C (m x n, float32) = op(A) @ op(B)`` of bf16 operands (as above)."""
        prev = self._push_threads(threads)
        try:
            st = self._bf16(transa, transb, m, n, k, 1.0, a_ptr, lda, b_ptr, ldb, 0.0, c_ptr,
                            ldc)
        finally:
            self._pop_threads(prev)
        if st != 0:
            check_status(st, "dnnl_gemm_bf16bf16f32",
                         f"m={m}, n={n}, k={k}, lda={lda}, ldb={ldb}, ldc={ldc}")


_LOCK = fork_safe_lock()
_LOADED: dict = {}


def load():
    """``(DNNL or None, reason)``, once per process."""
    with _LOCK:
        if "lib" not in _LOADED:
            path, tried = find_library()
            if path is None:
                _LOADED["lib"] = (None, "oneDNN library not found (looked at: "
                                  + "; ".join(tried) + ")")
            else:
                try:
                    _LOADED["lib"] = (DNNL(path), f"loaded {path}")
                except (OSError, AttributeError) as exc:
                    _LOADED["lib"] = (None, f"oneDNN at {path} failed to load: {exc}")
        return _LOADED["lib"]
