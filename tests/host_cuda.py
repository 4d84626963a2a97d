"""A host emulation of the CUDA pieces the GPU engine uses, for CPU-only test runs.

Not a simulator of performance, a checker of contracts. It lets
``ozlinalg.engines.cublaslt.CublasLtEngine`` run, unchanged, on a machine without
CUDA, so its bookkeeping (the TN layout derivation, padding, pointer offsets
of inner-dimension pieces, leading dimensions, descriptor and heuristic
caching, the int64 spill of long runs) is tested in every CI run, not only on
the rare machine with a GPU:

* :func:`host_cupy` -- a ``cupy`` stand-in: NumPy arrays whose ``.data.ptr``
  is their host address, allocations aligned to 256 bytes like CuPy's pool,
  ``cuda.Device`` / ``cuda.get_current_stream``, and a ``RawKernel`` that
  compiles the CUDA source with the host C++ compiler (a small shim maps the
  grid, ``__dmul_rn`` and friends) and runs every thread of the grid
  serially, checking each argument against the kernel's C signature;
* :class:`HostCublasLt` -- the subset of ``nvmath.bindings.cublasLt`` the
  engine calls, enforcing the documented IMMA rules of cublasLtMatmul for the
  regular (column-ordered) path: INT8 A and B, INT32 C and D, COMPUTE_32I
  with INT32 scale type (alpha and beta 0 or 1), the "TN" format, M, K and
  every leading dimension a multiple of 4, 4-byte aligned pointers, an
  algorithm from a heuristic query for exactly these descriptors. And the
  alignment contract of the heuristic (cublasLt.h,
  ``CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES``: "uint32_t, default:
  256"; a smaller value "will exclude algorithms that can not work with"
  less aligned buffers): an algorithm found for a preference that declared
  alignment ``N`` for a matrix refuses a pointer that is not a multiple of
  ``N`` (the real library returns CUBLAS_STATUS_NOT_SUPPORTED or faults with
  a misaligned address), and one declared below 4 bytes finds no IMMA
  algorithm at all. Products are accumulated in 64-bit integers and stored
  modulo 2**32, so a run that overflows INT32 shows up as a wrong result, as
  on the GPU.
* Flush-to-zero: CuPy compiles every kernel with ``-ftz=true``
  (``cupy/cuda/compiler.py``), so FP32 values are flushed to zero where a
  kernel reads or writes a subnormal, the double -> float cast included
  (``cvt.rn.ftz.f32.f64``). The stand-in's arrays do the same: a cast to
  float32 (``astype``, ``asarray``, ``ascontiguousarray``) and every ufunc
  with a float32 operand or result flush FP32 subnormals to signed zeros.

The emulation is deliberately strict: any rule broken raises
:class:`NotSupported` naming the rule (cuBLASLt would return
``CUBLAS_STATUS_NOT_SUPPORTED`` or a wrong answer).
"""
from __future__ import annotations

import collections
import ctypes
import functools
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import types

import numpy as np

from ozlinalg.engines.base import Engine
from ozlinalg.engines.cublaslt import CublasLtEngine

__all__ = ["HostCublasLt", "HostDeviceArray", "HostEngine", "HostGPU", "NotSupported",
           "compiler_available", "host_bindings", "host_cupy", "host_cupy_for_scripts",
           "host_gpu_modules"]


class NotSupported(RuntimeError):
    """A cuBLASLt / CUDA rule the caller broke (the real library would refuse)."""


# -- memory -----------------------------------------------------------------------------


class _Mem:
    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = int(ptr)


_F32 = np.dtype(np.float32)
_F32_TINY = np.finfo(np.float32).tiny  # 2**-126, the smallest normal FP32


def flush_f32(x):
    """FP32 subnormals of ``x`` (float32 data) set to signed zeros, in place; ``x``."""
    x = np.asarray(x)
    if x.dtype == _F32 and x.size:
        sub = (x != 0) & (np.abs(x) < _F32_TINY)
        if sub.any():
            x[sub] = np.copysign(np.float32(0), x[sub])
    return x


class DevArray(np.ndarray):
    """A NumPy array that answers ``.data.ptr`` like a ``cupy.ndarray`` and, like
    CuPy's kernels (``-ftz=true``), flushes FP32 subnormals to zero."""

    @property
    def data(self):  # noqa: D401 - mirrors cupy.ndarray.data (a MemoryPointer)
        return _Mem(self.__array_interface__["data"][0])

    def astype(self, dtype, *args, **kwargs):
        out = super().astype(dtype, *args, **kwargs)
        if np.dtype(dtype) == _F32 and self.dtype != _F32:  # a cast kernel: FTZ
            flush_f32(out.view(np.ndarray))
        return out

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # A CuPy kernel with an FP32 operand reads its subnormals as zeros and
        # writes its subnormal results as zeros. matmul is cuBLAS's, not a CuPy
        # kernel: not modelled as flushing.
        if ufunc is np.matmul:
            res = getattr(ufunc, method)(*[x.view(np.ndarray) if isinstance(x, np.ndarray)
                                           else x for x in inputs], **kwargs)
            return res.view(DevArray) if isinstance(res, np.ndarray) else res
        plain = []
        for x in inputs:
            if isinstance(x, np.ndarray):
                base = x.view(np.ndarray)
                if base.dtype == _F32:
                    base = flush_f32(base.copy())
                plain.append(base)
            else:
                plain.append(x)
        outs = kwargs.get("out")
        if outs:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, np.ndarray) else o
                                  for o in outs)
        res = getattr(ufunc, method)(*plain, **kwargs)
        results = res if isinstance(res, tuple) else (res,)
        wrapped = []
        for r in results:
            if isinstance(r, np.ndarray):
                if r.dtype == _F32:
                    flush_f32(r)
                r = r.view(DevArray) if r.dtype != object else r
            elif isinstance(r, np.float32) and r != 0 and abs(r) < _F32_TINY:
                r = np.float32(0.0)
            wrapped.append(r)
        if outs:
            wrapped = [o for o in outs] if len(outs) > 1 else [outs[0]]
        return tuple(wrapped) if isinstance(res, tuple) else wrapped[0]


def address(x):
    return int(np.asarray(x).__array_interface__["data"][0]) if not isinstance(x, int) else x


def _aligned_empty(shape, dtype, align=256, cls=DevArray):
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + align, dtype=np.uint8)
    off = (-raw.__array_interface__["data"][0]) % align
    return raw[off:off + count * dtype.itemsize].view(dtype).reshape(shape).view(cls)


def col_major_view(ptr, dtype, rows, cols, ld):
    """The column-major ``rows x cols`` matrix (leading dimension ``ld``) at ``ptr``."""
    dtype = np.dtype(dtype)
    n = (cols - 1) * ld + rows if rows and cols else 0
    if n == 0:
        return np.empty((rows, cols), dtype)
    buf = (ctypes.c_char * (n * dtype.itemsize)).from_address(ptr)
    flat = np.frombuffer(buf, dtype=dtype)
    return np.lib.stride_tricks.as_strided(
        flat, shape=(rows, cols), strides=(dtype.itemsize, ld * dtype.itemsize))


def _read_scalar(ptr, dtype):
    return col_major_view(ptr, dtype, 1, 1, 1)[0, 0]


# -- RawKernel on the host --------------------------------------------------------------

_SHIM = r"""
#include <cmath>
#include <cstdint>
struct ozl_dim3 { unsigned int x, y, z; };
// Per host thread: each launch runs its grid on the calling thread, and launches from
// several threads (dask's threaded scheduler) must not share one set of indices.
static thread_local ozl_dim3 blockIdx, blockDim, gridDim, threadIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
// IEEE double operations with round-to-nearest, never contracted (-ffp-contract=off).
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
using std::rint;
using std::floor;
using std::trunc;
"""

_CTYPES = {
    "long long": ctypes.c_longlong, "int": ctypes.c_int, "double": ctypes.c_double,
    "float": ctypes.c_float, "unsigned int": ctypes.c_uint,
}
_NUMPY = {
    "long long": np.int64, "int": np.int32, "double": np.float64, "float": np.float32,
    "unsigned int": np.uint32, "signed char": np.int8, "char": np.int8, "short": np.int16,
}


def compiler_available():
    return shutil.which(os.environ.get("CXX", "g++")) is not None


def _parse_params(src, name):
    m = re.search(r'extern\s+"C"\s+__global__\s+void\s+' + re.escape(name) + r"\s*\(([^)]*)\)",
                  src)
    if m is None:
        raise NotSupported(f"no extern \"C\" __global__ function {name!r} in the source")
    params = []
    for decl in m.group(1).split(","):
        decl = " ".join(decl.replace("__restrict__", " ").split())
        pname = re.findall(r"[A-Za-z_]\w*", decl)[-1]
        base = decl[: decl.rfind(pname)].replace("const", " ").strip()
        pointer = "*" in base
        base = " ".join(base.replace("*", " ").split())
        params.append((decl, pname, base, pointer))
    return params


class HostRawKernel:
    """``cupy.RawKernel`` on the host: g++ compiles the source, a loop runs the grid."""

    _cache: dict = {}

    def __init__(self, code, name, options=(), **kwargs):
        self.code, self.name = code, name
        self.params = _parse_params(code, name)
        self.launches = 0
        key = hashlib.sha1((code + name).encode()).hexdigest()[:16]
        fn = self._cache.get(key)
        if fn is None:
            fn = self._build(key)
            self._cache[key] = fn
        self._fn = fn

    def _build(self, key):
        decls = ", ".join(d for d, *_ in self.params)
        names = ", ".join(p for _, p, *_ in self.params)
        launcher = (
            f'extern "C" void ozl_launch(unsigned int gx, unsigned int bx, {decls}) {{\n'
            "  gridDim.x = gx; gridDim.y = gridDim.z = 1; blockDim.x = bx; blockDim.y = "
            "blockDim.z = 1;\n"
            "  for (unsigned int b = 0; b < gx; ++b) for (unsigned int t = 0; t < bx; ++t) {\n"
            f"    blockIdx.x = b; threadIdx.x = t; {self.name}({names});\n  }}\n}}\n"
        )
        tmp = tempfile.mkdtemp(prefix="ozl_hostkernel_")
        src = os.path.join(tmp, f"{key}.cpp")
        lib = os.path.join(tmp, f"{key}.so")
        with open(src, "w") as f:
            f.write(_SHIM + self.code + launcher)
        cxx = os.environ.get("CXX", "g++")
        subprocess.run([cxx, "-O1", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math",
                        "-o", lib, src], check=True, capture_output=True)
        fn = ctypes.CDLL(lib).ozl_launch
        fn.restype = None
        fn.argtypes = [ctypes.c_uint, ctypes.c_uint] + [
            ctypes.c_void_p if ptr else _CTYPES[base] for _, _, base, ptr in self.params]
        return fn

    def __call__(self, grid, block, args, **kwargs):
        grid, block = tuple(grid), tuple(block)
        if len(grid) != 1 or len(block) != 1:
            raise NotSupported("the host RawKernel runs 1-D grids only")
        if len(args) != len(self.params):
            raise NotSupported(f"{self.name}: {len(args)} arguments for {len(self.params)} "
                               "parameters")
        cargs = []
        for arg, (decl, pname, base, pointer) in zip(args, self.params):
            if pointer:
                if not isinstance(arg, np.ndarray):
                    raise NotSupported(f"{self.name}: {pname} ({decl}) needs an array, got "
                                       f"{type(arg).__name__}")
                if arg.dtype != np.dtype(_NUMPY[base]):
                    raise NotSupported(f"{self.name}: {pname} ({decl}) got a {arg.dtype} array")
                if arg.ndim and arg.strides[-1] != arg.itemsize:
                    # Kernels index rows flat or with a leading dimension; a strided
                    # last axis is never meant.
                    raise NotSupported(f"{self.name}: {pname} has a strided last axis")
                cargs.append(address(arg))
            else:
                # CuPy passes numpy scalars with their own width; a mismatch with the
                # C parameter would read garbage on the device.
                if not isinstance(arg, np.generic) or arg.dtype != np.dtype(_NUMPY[base]):
                    raise NotSupported(f"{self.name}: {pname} ({decl}) got {arg!r} of type "
                                       f"{type(arg).__name__}")
                cargs.append(arg.item())
        self.launches += 1
        self._fn(int(grid[0]), int(block[0]), *cargs)


# -- the cupy stand-in ------------------------------------------------------------------


def host_cupy(cls=DevArray, name="hostcupy"):
    """A module that behaves like ``cupy`` for the engine, on host memory
    (its allocations are ``cls`` arrays, 256-byte aligned)."""
    mod = types.ModuleType(name)

    def __getattr__(name):
        return getattr(np, name)

    def empty(shape, dtype=np.float64, order="C"):
        return _aligned_empty(shape, dtype, cls=cls)

    def zeros(shape, dtype=np.float64, order="C"):
        out = _aligned_empty(shape, dtype, cls=cls)
        out[...] = 0
        return out

    def asarray(x, dtype=None):
        cast = dtype is not None and np.asarray(x).dtype != np.dtype(dtype)
        x = np.asarray(x, dtype=dtype)
        out = _aligned_empty(x.shape, x.dtype, cls=cls)
        out.view(np.ndarray)[...] = x
        if cast:  # a device-side cast is a kernel: flush-to-zero (a copy is not)
            flush_f32(out.view(np.ndarray))
        return out

    def ascontiguousarray(x, dtype=None):
        if dtype is not None and np.asarray(x).dtype != np.dtype(dtype):
            return asarray(x, dtype)
        x = np.asarray(x) if not isinstance(x, cls) else x
        return x if (x.flags.c_contiguous and isinstance(x, cls)) else asarray(x)

    class _Stream:
        ptr = 0

        def synchronize(self):
            pass

    class _Device:
        id = 0

        def __init__(self, device=None):
            pass

    mod.__getattr__ = __getattr__
    mod.ndarray = np.ndarray
    mod.empty, mod.zeros, mod.asarray = empty, zeros, asarray
    mod.ascontiguousarray = ascontiguousarray
    mod.asnumpy = np.asarray
    mod.RawKernel = HostRawKernel
    class _Pool:
        def free_bytes(self):
            return 0

    runtime = types.SimpleNamespace(memGetInfo=lambda: (8 * 2**30, 16 * 2**30))
    mod.cuda = types.SimpleNamespace(Device=_Device, get_current_stream=_Stream, runtime=runtime)
    mod.get_default_memory_pool = _Pool
    return mod


def host_cupy_for_scripts(**kwargs):
    """:func:`host_cupy` (``kwargs``) plus what benchmark scripts touch (random,
    device queries, pools)."""
    mod = host_cupy(**kwargs)
    wrap = mod.asarray

    class _Random:
        def __init__(self, gen):
            self._gen = gen

        def __getattr__(self, name):
            fn = getattr(self._gen, name)
            return lambda *a, **k: wrap(fn(*a, **k))

    class _Device:
        id = 0
        compute_capability = "90"

        def __init__(self, device=None):
            pass

        def synchronize(self):
            pass

    class _Pool:
        def free_bytes(self):
            return 0

        def free_all_blocks(self):
            pass

    mod.__version__ = "host-emulation"
    mod.random = types.SimpleNamespace(
        RandomState=lambda seed=None: _Random(np.random.RandomState(seed)),
        default_rng=lambda seed=None: _Random(np.random.default_rng(seed)))
    mod.cuda.Device = _Device
    mod.cuda.runtime = types.SimpleNamespace(
        memGetInfo=lambda: (8 * 2**30, 16 * 2**30),
        getDeviceProperties=lambda dev: {"name": b"host emulation"},
        runtimeGetVersion=lambda: 0, driverGetVersion=lambda: 0, getDeviceCount=lambda: 0)
    mod.get_default_memory_pool = _Pool
    return mod


# -- cuBLASLt ---------------------------------------------------------------------------

# Enum values from cublasLt.h / cublas_api.h / library_types.h (the same numbers
# nvmath-python's enums carry).
R_8I, R_32I = 3, 10
COMPUTE_32I = 72
OP_N, OP_T = 0, 1


class HostCublasLt:
    """The subset of ``nvmath.bindings.cublasLt`` the engine uses, with cuBLASLt's rules."""

    class MatmulDescAttribute:
        TRANSA = 3
        TRANSB = 4

    class MatmulPreferenceAttribute:
        MAX_WORKSPACE_BYTES = 1
        MIN_ALIGNMENT_A_BYTES = 5
        MIN_ALIGNMENT_B_BYTES = 6
        MIN_ALIGNMENT_C_BYTES = 7
        MIN_ALIGNMENT_D_BYTES = 8

    #: cuBLASLt's default alignment assumption for A, B, C, D (cublasLt.h).
    DEFAULT_ALIGNMENT = 256
    _ALIGN_ATTRS = {5: "A", 6: "B", 7: "C", 8: "D"}

    matmul_heuristic_result_dtype = np.dtype([
        ("algo", [("data_", "<u8", (8,))]), ("workspace_size", "<u8"), ("state", "<i4"),
        ("waves_count", "<f4"), ("reserved", "<i4", (4,))])

    def __init__(self, epilogue="int32"):
        # ``epilogue="fp32"``: a deliberately broken library that rounds
        # alpha * A B + beta * C through FP32 (a mutant: tests of the exact
        # INT32 epilogue must fail on it).
        self.epilogue = epilogue
        self._ids = itertools.count(1)
        self.descs, self.layouts, self.prefs, self.algos = {}, {}, {}, {}
        self.handles = set()
        self.calls = 0
        self.aligned16 = 0
        self.heuristic_queries = 0
        self.shapes = []
        self.alignments = []  # the (A, B, C, D) alignment each heuristic query declared
        lt = self

        class MatmulHeuristicResult:
            def __init__(self, size=1):
                self._data = np.zeros(size, dtype=lt.matmul_heuristic_result_dtype)
                self.ptr = address(self._data)

        self.MatmulHeuristicResult = MatmulHeuristicResult

    # handles, descriptors, layouts, preferences
    def create(self):
        h = next(self._ids)
        self.handles.add(h)
        return h

    def matmul_desc_create(self, compute_type, scale_type):
        d = next(self._ids)
        self.descs[d] = {"compute": int(compute_type), "scale": int(scale_type),
                         "transa": OP_N, "transb": OP_N}
        return d

    def matmul_desc_destroy(self, d):
        del self.descs[d]

    @staticmethod
    def get_matmul_desc_attribute_dtype(attr):
        return np.int32

    @classmethod
    def get_matmul_preference_attribute_dtype(cls, attr):
        # As nvmath-python 1.0 (nvmath/bindings/cublasLt.pyx, matmul_preference_attribute_sizes).
        return np.uint32 if int(attr) in cls._ALIGN_ATTRS else np.uint64

    def matmul_desc_set_attribute(self, d, attr, buf, size):
        if size != 4:
            raise NotSupported(f"matmul descriptor attribute {attr}: {size} bytes, expected 4")
        key = {3: "transa", 4: "transb"}.get(int(attr))
        if key is None:
            raise NotSupported(f"matmul descriptor attribute {attr} is not emulated")
        self.descs[d][key] = int(_read_scalar(buf, np.int32))

    def matrix_layout_create(self, dtype, rows, cols, ld):
        if ld < max(1, rows):
            raise NotSupported(f"layout: leading dimension {ld} < rows {rows}")
        h = next(self._ids)
        self.layouts[h] = (int(dtype), int(rows), int(cols), int(ld))
        return h

    def matrix_layout_destroy(self, h):
        del self.layouts[h]

    def matmul_preference_create(self):
        h = next(self._ids)
        self.prefs[h] = {"workspace": 0, **{k: self.DEFAULT_ALIGNMENT
                                            for k in self._ALIGN_ATTRS.values()}}
        return h

    def matmul_preference_destroy(self, h):
        del self.prefs[h]

    def matmul_preference_set_attribute(self, h, attr, buf, size):
        attr = int(attr)
        if attr == 1 and size == 8:
            self.prefs[h]["workspace"] = int(_read_scalar(buf, np.uint64))
        elif attr in self._ALIGN_ATTRS and size == 4:
            self.prefs[h][self._ALIGN_ATTRS[attr]] = int(_read_scalar(buf, np.uint32))
        else:
            raise NotSupported(f"preference attribute {attr} ({size} bytes) is not emulated")

    # the rules
    def _check(self, d, a, b, c, dd):
        desc = self.descs[d]
        if desc["compute"] != COMPUTE_32I or desc["scale"] != R_32I:
            raise NotSupported(f"INT8 GEMM needs COMPUTE_32I with an INT32 scale type, got "
                               f"{desc['compute']}/{desc['scale']}")
        if (desc["transa"], desc["transb"]) != (OP_T, OP_N):
            raise NotSupported("IMMA on column-ordered matrices supports only the TN format "
                               f"(transa={desc['transa']}, transb={desc['transb']})")
        (ta, ka, ma, lda), (tb, kb, nb, ldb) = self.layouts[a], self.layouts[b]
        (tc, mc, nc, ldc), (td, md, nd, ldd) = self.layouts[c], self.layouts[dd]
        if (ta, tb) != (R_8I, R_8I) or (tc, td) != (R_32I, R_32I):
            raise NotSupported("INT8 GEMM: A and B must be CUDA_R_8I, C and D CUDA_R_32I")
        if ka != kb or (mc, nc) != (ma, nb) or (md, nd, ldd) != (mc, nc, ldc):
            raise NotSupported(f"shapes: A {ka}x{ma} (op T), B {kb}x{nb}, C {mc}x{nc}, "
                               f"D {md}x{nd}")
        if ma % 4 or ka % 4:
            raise NotSupported(f"IMMA: M={ma} and K={ka} must be multiples of 4")
        if lda % 4 or ldb % 4 or ldc % 4:
            raise NotSupported(f"IMMA: leading dimensions {lda}, {ldb}, {ldc} must be "
                               "multiples of 4")
        return ma, nb, ka

    def matmul_algo_get_heuristic(self, handle, d, a, b, c, dd, pref, requested, results,
                                  count_ptr):
        if handle not in self.handles:
            raise NotSupported("invalid cuBLASLt handle")
        self._check(d, a, b, c, dd)
        if requested < 1:
            raise NotSupported("requested_algo_count < 1")
        self.heuristic_queries += 1
        prefs = self.prefs[pref]
        align = tuple(prefs[k] for k in "ABCD")
        self.alignments.append(align)
        count = col_major_view(count_ptr, np.int32, 1, 1, 1)
        if min(align) < 4:  # IMMA needs 4-byte aligned pointers: no algorithm qualifies
            count[0, 0] = 0
            return
        token = next(self._ids)
        self.algos[token] = (d, a, b, c, dd, prefs["workspace"], align)
        res = np.frombuffer((ctypes.c_char * self.matmul_heuristic_result_dtype.itemsize)
                            .from_address(results), dtype=self.matmul_heuristic_result_dtype)
        res["algo"]["data_"][0, 0] = token
        res["state"][0] = 0
        count[0, 0] = 1

    def matmul(self, handle, d, alpha, a_ptr, a, b_ptr, b, beta, c_ptr, c, d_ptr, dd, algo,
               workspace, workspace_size, stream):
        if handle not in self.handles:
            raise NotSupported("invalid cuBLASLt handle")
        M, N, K = self._check(d, a, b, c, dd)
        token = int(_read_scalar(algo, np.uint64))
        found = self.algos.get(token, (None,) * 7)
        if found[:5] != (d, a, b, c, dd):
            raise NotSupported("the algorithm was not returned by a heuristic query for these "
                               "descriptors and layouts")
        if workspace_size > 0 and not workspace:
            raise NotSupported("workspace size without a workspace pointer")
        for name, ptr, need in zip("ABCD", (a_ptr, b_ptr, c_ptr, d_ptr), found[6]):
            if ptr % 4:
                raise NotSupported(f"IMMA: the {name} pointer must be 4-byte aligned")
            if ptr % need:
                raise NotSupported(
                    f"misaligned {name} pointer: {ptr % 256} bytes past a 256-byte boundary, "
                    f"but the algorithm came from a heuristic query that declared {need}-byte "
                    f"alignment (MIN_ALIGNMENT_{name}_BYTES, default 256)")
        self.aligned16 += all(ptr % 16 == 0 for ptr in (a_ptr, b_ptr, c_ptr, d_ptr))
        al = int(_read_scalar(alpha, np.int32))
        be = int(_read_scalar(beta, np.int32))
        if al not in (0, 1) or be not in (0, 1):
            raise NotSupported(f"scale type CUDA_R_32I: alpha and beta must be 0 or 1, got "
                               f"{al} and {be}")
        _, _, _, lda = self.layouts[a]
        _, _, _, ldb = self.layouts[b]
        _, _, _, ldc = self.layouts[c]
        A = col_major_view(a_ptr, np.int8, K, M, lda).astype(np.int64)
        B = col_major_view(b_ptr, np.int8, K, N, ldb).astype(np.int64)
        C = col_major_view(c_ptr, np.int32, M, N, ldc).astype(np.int64)
        res = al * (A.T @ B) + (be * C if be else 0)
        D = col_major_view(d_ptr, np.int32, M, N, ldc)
        if self.epilogue == "fp32":  # the mutant: an FP32 epilogue rounds above 2**24
            D[...] = (al * (A.T @ B).astype(np.float32)
                      + (be * C.astype(np.float32) if be else np.float32(0))).astype(np.int64)
        else:
            D[...] = res.astype(np.uint64).astype(np.uint32).view(np.int32)  # wraps like INT32
        self.calls += 1
        self.shapes.append((M, N, K))


class _Enum(types.SimpleNamespace):
    pass


def host_bindings(lt=None):
    """A ``bindings`` callable for ``CublasLtEngine``: (cuBLASLt, cuBLAS enums, CudaDataType)."""
    lt = lt or HostCublasLt()
    cublas = _Enum(ComputeType=_Enum(COMPUTE_32I=COMPUTE_32I),
                   Operation=_Enum(N=OP_N, T=OP_T))
    cuda_types = _Enum(CUDA_R_8I=R_8I, CUDA_R_32I=R_32I)
    return lambda: (lt, cublas, cuda_types)


# -- the GPU engine on the stand-ins ----------------------------------------------------


class HostEngine(CublasLtEngine):
    """CublasLtEngine on the host stand-ins. The EF axpy is CuPy's ElementwiseKernel
    code generation, which has no host equivalent: the generic ``acc += a x``
    (the kernel's own bit-identity with it is tests/engines/test_gpu.py's job)."""

    axpy = Engine.axpy

    def __init__(self, fused_split=True, lt=None, xp=None):
        self.lt = lt or HostCublasLt()
        super().__init__(xp=xp or host_cupy(), bindings=host_bindings(self.lt))
        self.fused_split = fused_split
        #: ``(m, p)`` of every emulated product formed on this engine (the driver
        #: asks for one workspace per product, output tile and inner block).
        self.products = collections.Counter()
        self._count_lock = threading.Lock()

    def workspace(self, m, p):
        with self._count_lock:
            self.products[m, p] += 1
        return super().workspace(m, p)

    # Without a host C++ compiler the RawKernel sources cannot run here: the
    # generic code stands in for every fused kernel.
    def split_rows(self, kind, x, s, width, out, scales):
        if self.fused_split:
            return super().split_rows(kind, x, s, width, out, scales)
        return False  # declined: the driver runs the generic split (once)

    def crt_residues(self, *args):
        return self.fused_split and super().crt_residues(*args)

    def crt_accumulator(self, consts):
        return super().crt_accumulator(consts) if self.fused_split else None


# -- ``import cupy`` on the host: CuPy-like arrays that ozlinalg and dask dispatch on ----


class HostDeviceArray(DevArray):
    """The ``cupy.ndarray`` of :func:`host_gpu_modules`: host memory standing
    for one device's.

    Class name and module are CuPy's (``cupy.ndarray``), so that ozlinalg
    (:func:`ozlinalg._array.array_namespace`) and dask (its lazy ``"cupy"``
    registrations: concatenate, take, ...) treat these arrays as CuPy arrays
    and run their CuPy code paths. Like CuPy's arrays they do not mix with
    NumPy arrays: a NumPy function or ufunc given one of them and a NumPy array
    (not a scalar) raises CuPy's ``TypeError``; NumPy functions given them
    return them (as CuPy's functions return CuPy arrays, 0-d arrays for
    reductions and single elements); ``.get()`` gives a NumPy copy. Unlike CuPy, ``np.asarray`` of
    one silently gives a NumPy view (a subclass of ndarray cannot refuse it):
    tests check the type of what comes back.
    """

    def get(self):
        return np.array(self.view(np.ndarray))

    def __getitem__(self, key):
        out = super().__getitem__(key)
        return _as_device(out) if isinstance(out, np.generic) else out  # CuPy: 0-d arrays

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _refuse_host(inputs, kwargs.get("out") or ())
        return _as_device(super().__array_ufunc__(ufunc, method, *inputs, **kwargs))

    def __array_function__(self, func, types, args, kwargs):
        _refuse_host(args, kwargs)
        return _as_device(func(*_plain(args), **_plain(kwargs)))


HostDeviceArray.__module__ = "cupy"
HostDeviceArray.__name__ = HostDeviceArray.__qualname__ = "ndarray"


def _leaves(obj):
    if isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    else:
        yield obj


def _refuse_host(*groups):
    for group in groups:
        for x in _leaves(group):
            if isinstance(x, np.ndarray) and not isinstance(x, HostDeviceArray) and x.ndim:
                raise TypeError(f"Unsupported type {type(x)}")  # CuPy's words


def _plain(obj):
    """``obj`` with every device array replaced by a NumPy view of it."""
    if isinstance(obj, HostDeviceArray):
        return obj.view(np.ndarray)
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_plain(v) for v in obj)
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _as_device(obj):
    """Arrays (and NumPy scalars: CuPy gives 0-d arrays) in ``obj`` as device arrays."""
    if isinstance(obj, np.ndarray):
        return obj if obj.dtype == object or isinstance(obj, HostDeviceArray) \
            else obj.view(HostDeviceArray)
    if isinstance(obj, np.generic):
        return np.asarray(obj).view(HostDeviceArray)
    if isinstance(obj, tuple):
        items = [_as_device(v) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [_as_device(v) for v in obj]
    return obj


def _device_function(fn):
    """NumPy's (or SciPy's) ``fn`` as CuPy's: device arrays in and out, NumPy arrays refused.

    CuPy's functions are its own, not NumPy's or SciPy's: a function that
    ``ozlinalg.backend`` patched in ``scipy.linalg`` is unwrapped to SciPy's,
    and the wrapper does not copy the shim's attributes (it is no shim)."""
    while getattr(fn, "_ozlinalg_shim", False):
        fn = fn.__wrapped__

    @functools.wraps(fn, updated=())
    def call(*args, **kwargs):
        _refuse_host(args, kwargs)
        return _as_device(fn(*_plain(args), **_plain(kwargs)))

    return call


def _device_namespace(name, source, **extra):
    """A module whose functions are ``source``'s as :func:`_device_function`;
    types, ufuncs and constants are ``source``'s own."""
    mod = types.ModuleType(name)
    cache = {}

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        obj = getattr(source, attr)
        if isinstance(obj, (type, np.ufunc, types.ModuleType)) or not callable(obj):
            return obj
        if attr not in cache:
            cache[attr] = _device_function(obj)
        return cache[attr]

    mod.__getattr__ = __getattr__
    for k, v in extra.items():
        setattr(mod, k, v)
    return mod


class HostGPU:
    """One process's stand-in GPU: ``import cupy`` (and ``cupyx.scipy.linalg``)
    give :class:`HostDeviceArray` namespaces, ozlinalg's ``cupy`` engine is a
    :class:`HostEngine` on them, and, with ``refuse_cpu_engine``, ozlinalg's
    NumPy engine raises, so an emulated product that ran on host arrays fails
    the run instead of passing unnoticed.

    ``with HostGPU() as engine:`` installs for the block (tests);
    :meth:`install` for good (a dask worker process, :class:`HostGPUPlugin`).
    ``devices`` is what ``cupy.cuda.runtime.getDeviceCount()`` answers.
    """

    def __init__(self, refuse_cpu_engine=True, fused_split=False, devices=1):
        self.refuse_cpu_engine = refuse_cpu_engine
        self.fused_split = fused_split
        self.devices = devices
        self._saved = None
        self.engine = None

    def install(self):
        from ozlinalg.engines import base as registry

        mods = host_gpu_modules(self.devices)
        self.engine = HostEngine(fused_split=self.fused_split, xp=mods["cupy"])
        self._saved = ([(sys.modules, k, sys.modules.get(k)) for k in mods]
                       + [(registry._ENGINES, k, registry._ENGINES.get(k))
                          for k in ("cupy", "numpy")])
        sys.modules.update(mods)
        registry._ENGINES["cupy"] = self.engine
        if self.refuse_cpu_engine:
            registry._ENGINES["numpy"] = _RefusingEngine()
        _register_serializers()
        return self.engine

    def uninstall(self):
        for table, key, value in reversed(self._saved or []):
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        self._saved = None

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.uninstall()


class _RefusingEngine:
    """ozlinalg's NumPy engine while a :class:`HostGPU` is installed: any use fails."""

    name = device = "cpu (refused)"

    def __getattr__(self, attr):
        raise AssertionError(f"an emulated product ran on ozlinalg's CPU engine ({attr}) "
                             "while the GPU stand-in was installed")


_MODULES = {}


def host_gpu_modules(devices=1):
    """``{"cupy": ..., "cupyx": ..., "cupyx.scipy": ..., "cupyx.scipy.linalg": ...}``:
    the stand-in modules (built once per process and device count)."""
    if devices in _MODULES:
        return _MODULES[devices]
    import scipy.linalg

    cp = host_cupy_for_scripts(cls=HostDeviceArray, name="cupy")
    base_asarray = cp.asarray

    def asarray(x, dtype=None, order=None):
        if isinstance(x, HostDeviceArray) and (dtype is None or x.dtype == np.dtype(dtype)) \
                and (order in (None, "K", "A") or (x.flags.f_contiguous if order in "Ff"
                                                   else x.flags.c_contiguous)):
            return x  # as CuPy: no copy
        out = base_asarray(x.view(np.ndarray) if isinstance(x, HostDeviceArray) else x, dtype)
        if order in ("F", "f") and not out.flags.f_contiguous:
            out = _as_device(np.asfortranarray(out.view(np.ndarray)))
        return out

    def array(x, dtype=None, copy=True, order="K", ndmin=0):
        return _as_device(np.array(_plain(x), dtype=dtype, copy=True, order=order, ndmin=ndmin))

    def asnumpy(x, stream=None):
        return x.get() if isinstance(x, HostDeviceArray) else np.asarray(x)

    def get_array_module(*args):
        return cp if any(isinstance(a, HostDeviceArray) for a in args) else np

    mod = _device_namespace("cupy", np, __version__=cp.__version__, ndarray=HostDeviceArray,
                            empty=cp.empty, zeros=cp.zeros, asarray=asarray, array=array,
                            ascontiguousarray=cp.ascontiguousarray, asnumpy=asnumpy,
                            get_array_module=get_array_module, RawKernel=cp.RawKernel,
                            random=cp.random, cuda=cp.cuda,
                            get_default_memory_pool=cp.get_default_memory_pool,
                            linalg=_device_namespace("cupy.linalg", np.linalg))
    mod.cuda.runtime.getDeviceCount = lambda: devices
    linalg = _device_namespace("cupyx.scipy.linalg", scipy.linalg)
    cupyx = types.ModuleType("cupyx")
    cupyx.scipy = types.ModuleType("cupyx.scipy")
    cupyx.scipy.linalg = linalg
    _MODULES[devices] = {"cupy": mod, "cupyx": cupyx, "cupyx.scipy": cupyx.scipy,
                         "cupyx.scipy.linalg": linalg}
    return _MODULES[devices]


def _register_serializers():
    """Device arrays between dask.distributed processes: through host bytes, as
    distributed's own ``dask`` serializer of CuPy arrays (registered for the
    class itself, so distributed's lazy ``cupy`` registration never runs)."""
    try:
        from distributed.protocol import dask_deserialize, dask_serialize
    except ImportError:
        return

    @dask_serialize.register(HostDeviceArray)
    def _serialize(x):
        host = np.ascontiguousarray(x.view(np.ndarray))
        return {"dtype": host.dtype.str, "shape": host.shape}, [host.tobytes()]

    @dask_deserialize.register(HostDeviceArray)
    def _deserialize(header, frames):
        host = np.frombuffer(b"".join(bytes(f) for f in frames), dtype=header["dtype"])
        return sys.modules["cupy"].asarray(host.reshape(header["shape"]))


try:
    from distributed.diagnostics.plugin import WorkerPlugin as _WorkerPlugin
except ImportError:  # distributed is a test extra; only the LocalCluster tests need it
    _WorkerPlugin = object


class HostGPUPlugin(_WorkerPlugin):
    """A ``distributed`` worker plugin that installs :class:`HostGPU` in each
    worker process (``client.register_plugin(HostGPUPlugin())``): the worker's
    tasks then see the stand-in as ``cupy`` and ozlinalg's GPU engine on it.
    ``counters(dask_worker)`` (through ``client.run``) reads what its engine did."""

    name = "ozlinalg-host-gpu"
    idempotent = True

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def setup(self, worker=None):
        gpu = HostGPU(**self.kwargs)
        gpu.install()
        _WORKER_GPU["gpu"] = gpu

    def teardown(self, worker=None):
        pass

    @staticmethod
    def counters(dask_worker=None):
        eng = _WORKER_GPU["gpu"].engine
        return {"products": sum(eng.products.values()), "cublaslt_calls": eng.lt.calls,
                "pid": os.getpid()}


_WORKER_GPU = {}
