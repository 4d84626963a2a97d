"""The INT8 GEMMs an AMX CPU could run under the oneDNN engine, timed in one run: oneDNN's
BLAS-like ``dnnl_gemm_s8s8s32``, oneDNN's matmul primitive (created once per shape and
cached, as a per-shape plan would be; plain row-major weights, and weights pre-packed
into the layout the primitive asks for, the packing not timed), and the compiled AMX
GEMM of the kernels (``gemm_amx``, ``ozlinalg/engines/_csrc/k_gemm_amx.c``), each on
the Ozaki-II products' operands: A's residues in the grouped storage (rows, moduli, k)
and in a dense per-GEMM layout (moduli, rows, k), B's as (moduli, k, columns); and
native DGEMM. Every GEMM's result is checked against int64 NumPy.

Each GEMM runs once per modulus on that modulus' operands (cold caches, as in a product),
and the best of ``--repeat`` rounds is kept, in wall-clock time on ``--threads``
threads (one: the CPU time of one core). Where the CPU has no AMX the compiled GEMM is
left out and the others still run. Usage::

    python benchmarks/studies/amx_gemm.py --n 2048 --threads 1
"""
from __future__ import annotations

import argparse
import ctypes
import time

import numpy as np
from threadpoolctl import threadpool_limits

from ozlinalg.engines import _dnnl, kernels

_VP, _I64 = ctypes.c_void_p, ctypes.c_int64
_DIMS = _I64 * 12
#: oneDNN 3.x C API values: engine kind cpu, stream in-order, data types, format "any",
#: execution argument slots, primitive-descriptor queries.
_CPU, _IN_ORDER, _S32, _S8, _ANY = 1, 1, 4, 5, 1
_ARG_SRC, _ARG_WEIGHTS, _ARG_DST = 1, 33, 17
_QUERY_IMPL, _QUERY_WEIGHTS_MD = 8, 131


class _Arg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _VP)]


class Primitive:
    """oneDNN's matmul primitive through its C API: row-major int8 ``A (m x k)`` with
    row stride ``lda``, ``B (k x n)`` rows of stride ``ldb`` (or the packed layout the
    primitive chooses, ``packed=True``), int32 ``C``."""

    def __init__(self, lib, m, n, k, lda, ldb, packed=False):
        lib_ = self.L = lib.lib
        for name, args in (("dnnl_memory_desc_create_with_strides",
                            [_VP, ctypes.c_int, _VP, ctypes.c_int, _VP]),
                           ("dnnl_memory_desc_create_with_tag",
                            [_VP, ctypes.c_int, _VP, ctypes.c_int, ctypes.c_int]),
                           ("dnnl_matmul_primitive_desc_create", [_VP] * 7),
                           ("dnnl_reorder_primitive_desc_create", [_VP] * 6),
                           ("dnnl_primitive_desc_query", [_VP, ctypes.c_int, ctypes.c_int, _VP]),
                           ("dnnl_memory_create", [_VP] * 4),
                           ("dnnl_memory_set_data_handle", [_VP, _VP]),
                           ("dnnl_primitive_execute", [_VP, _VP, ctypes.c_int, _VP])):
            getattr(lib_, name).argtypes = args
        lib_.dnnl_primitive_desc_query_md.restype = _VP
        lib_.dnnl_primitive_desc_query_md.argtypes = [_VP, ctypes.c_int, ctypes.c_int]
        lib_.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
        lib_.dnnl_memory_desc_get_size.argtypes = [_VP]
        self.eng, self.stream = _VP(), _VP()
        self._ok(lib_.dnnl_engine_create(ctypes.byref(self.eng), _CPU, ctypes.c_size_t(0)))
        self._ok(lib_.dnnl_stream_create(ctypes.byref(self.stream), self.eng, _IN_ORDER))
        a = self._md((m, k), _S8, (lda, 1))
        self.b_plain = self._md((k, n), _S8, (ldb, 1))
        if packed:
            b = _VP()
            self._ok(lib_.dnnl_memory_desc_create_with_tag(ctypes.byref(b), 2, _DIMS(k, n),
                                                           _S8, _ANY))
        else:
            b = self.b_plain
        c = self._md((m, n), _S32, (n, 1))
        pd = _VP()
        self._ok(lib_.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), self.eng, a, b,
                                                        None, c, None))
        info = ctypes.c_char_p()
        lib_.dnnl_primitive_desc_query(pd, _QUERY_IMPL, 0, ctypes.byref(info))
        self.impl = (info.value or b"?").decode()
        self.wmd = lib_.dnnl_primitive_desc_query_md(pd, _QUERY_WEIGHTS_MD, 0)
        self.prim = _VP()
        self._ok(lib_.dnnl_primitive_create(ctypes.byref(self.prim), pd))
        self.mems = [self._mem(d) for d in (a, self.wmd, c)]
        if packed:
            rpd, self.reorder = _VP(), _VP()
            self._ok(lib_.dnnl_reorder_primitive_desc_create(ctypes.byref(rpd), self.b_plain,
                                                             self.eng, self.wmd, self.eng,
                                                             None))
            self._ok(lib_.dnnl_primitive_create(ctypes.byref(self.reorder), rpd))

    def _ok(self, status):
        _dnnl.check_status(status, "oneDNN matmul primitive", "")

    def _md(self, dims, dt, strides):
        d = _VP()
        self._ok(self.L.dnnl_memory_desc_create_with_strides(
            ctypes.byref(d), len(dims), _DIMS(*dims), dt, _DIMS(*strides)))
        return d

    def _mem(self, md):
        mem = _VP()
        self._ok(self.L.dnnl_memory_create(ctypes.byref(mem), md, self.eng, None))
        return mem

    def _exec(self, prim, slots, arrays):
        for (_, mem), x in zip(slots, arrays):
            self.L.dnnl_memory_set_data_handle(mem, _VP(x.ctypes.data))
        args = (_Arg * len(slots))(*[_Arg(s, mem) for s, mem in slots])
        self._ok(self.L.dnnl_primitive_execute(prim, self.stream, len(slots), args))
        self._ok(self.L.dnnl_stream_wait(self.stream))

    def pack(self, b):
        """``b`` (k x n rows) in the primitive's weights layout."""
        out = np.empty(self.L.dnnl_memory_desc_get_size(self.wmd), np.int8)
        src, dst = self._mem(self.b_plain), self._mem(self.wmd)
        self._exec(self.reorder, [(_ARG_SRC, src), (_ARG_DST, dst)], [b, out])
        return out

    def __call__(self, a, b, c):
        slots = list(zip((_ARG_SRC, _ARG_WEIGHTS, _ARG_DST), self.mems))
        self._exec(self.prim, slots, [a, b, c])


def _aligned(shape, dtype):
    """A C-ordered array on a 64-byte boundary (as the engine's scratch pool hands out)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def run_size(lib, amx, n, s, thr, repeat, rng):
    """Time every GEMM of :func:`main` at size ``n`` and print the table."""
    grouped = _aligned((n, s, n), np.int8)
    dense = _aligned((s, n, n), np.int8)
    bres = _aligned((s, n, n), np.int8)
    for x in (grouped, dense, bres):
        x[...] = rng.integers(-128, 128, x.shape, dtype=np.int8)
    c = _aligned((n, n), np.int32)
    prim_d = Primitive(lib, n, n, n, n, n)
    prim_g = Primitive(lib, n, n, n, s * n, n)
    prim_p = Primitive(lib, n, n, n, n, n, packed=True)
    packed = [prim_p.pack(bres[t]) for t in range(s)]

    def dnnl(a_of, lda):
        return lambda t: lib.gemm_s8s8s32(
            b"N", b"N", n, n, n, a_of(t).ctypes.data, lda, bres[t].ctypes.data, n,
            c.ctypes.data, n, 0, threads=thr)

    cases = {
        "oneDNN gemm_s8s8s32, A grouped": dnnl(lambda t: grouped[:, t], s * n),
        "oneDNN gemm_s8s8s32, A dense": dnnl(lambda t: dense[t], n),
        f"oneDNN matmul primitive ({prim_d.impl}), A grouped":
            lambda t: prim_g(grouped[:, t], bres[t], c),
        f"oneDNN matmul primitive ({prim_d.impl}), A dense":
            lambda t: prim_d(dense[t], bres[t], c),
        f"oneDNN matmul primitive ({prim_p.impl}), pre-packed B, A dense":
            lambda t: prim_p(dense[t], packed[t], c),
    }
    checks = {k: (lambda t: grouped[:, t]) if "grouped" in k else (lambda t: dense[t])
              for k in cases}
    if amx is not None:
        amx.set_threads(thr)
        cases["compiled AMX GEMM, A grouped"] = \
            lambda t: amx.gemm_amx(grouped[:, t], bres[t].T, c, 0)
        cases["compiled AMX GEMM, A dense"] = \
            lambda t: amx.gemm_amx(dense[t], bres[t].T, c, 0)
        checks["compiled AMX GEMM, A grouped"] = lambda t: grouped[:, t]
        checks["compiled AMX GEMM, A dense"] = lambda t: dense[t]
    x, y = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    best = {k: np.inf for k in cases}
    best["native DGEMM"] = np.inf
    for _ in range(repeat):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            for t in range(s):
                fn(t)
            best[name] = min(best[name], (time.perf_counter() - t0) / s)
        t0 = time.perf_counter()
        x @ y
        best["native DGEMM"] = min(best["native DGEMM"], time.perf_counter() - t0)
    for name, fn in cases.items():  # every GEMM exact
        fn(s - 1)
        # |sums| < 2**53: float64 BLAS is exact here, and fast at n = 4096
        want = checks[name](s - 1).astype(np.float64) @ bres[s - 1].astype(np.float64)
        if not np.array_equal(c, want):
            raise SystemExit(f"{name}: wrong result")
    dg = best["native DGEMM"]
    print(f"n = {n}: native DGEMM {dg * 1e3:.1f} ms")
    for name in cases:
        t = best[name]
        print(f"  {name:<70} {t * 1e3:7.2f} ms  {2 * n**3 / t / 1e12:5.2f} TOPS  "
              f"DGEMM / GEMM {dg / t:5.1f}x")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2048])
    ap.add_argument("--moduli", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    lib, why = _dnnl.load()
    if lib is None:
        raise SystemExit(f"no oneDNN: {why}")
    amx, amx_why = kernels.load_amx()
    thr, s = args.threads, args.moduli
    print(f"oneDNN {'.'.join(map(str, lib.version))}, ISA {lib.isa_name}; compiled AMX GEMM: "
          f"{amx_why}; {thr} thread(s), {s} GEMMs per round, best of {args.repeat}")
    rng = np.random.default_rng(7)
    # oneDNN's OpenMP threads for the primitives (the BLAS-like GEMM takes its own
    # argument); set before they are created, which is when brgemm picks its blocking
    lib._push_threads(thr)
    with threadpool_limits(thr, "blas"):
        for n in args.n:
            run_size(lib, amx, n, s, thr, args.repeat, rng)


if __name__ == "__main__":
    main()
