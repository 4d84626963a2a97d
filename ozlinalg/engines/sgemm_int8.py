"""The SGEMM engine on int8 slices: exact INT8 products on BLAS SGEMM, with the INT8
engines' storage and compiled passes.

Why: the float32 SGEMM engine (:mod:`ozlinalg.engines.sgemm`) keeps its slices as
float32 (four bytes an entry) and runs the split / residue / accumulate / rebuild passes
as NumPy code. Where neither the oneDNN nor the AVX2 INT8 GEMM runs but the compiled
passes load (any x86-64 build, the baseline ``x86-64`` one included), those passes took
more than half of an Ozaki-II product's time at n = 2048, and under a ``memory_limit`` the four-byte
slices made tiles of a sixteenth of the area, each paying the NumPy passes' per-call
cost again (7.75x the unlimited time for ``crt`` at n = 2048, 64 MiB). This engine is
:class:`~ozlinalg.engines.onednn.engine.Int8Engine` (int8 slices, EF groups as one
GEMM over the stacked slices, the INT32 runs with their int64 spill, the fused passes,
the scratch pool, the one-time exactness self-test) around a GEMM made of SGEMMs.

The GEMM (:meth:`SGEMMInt8Engine._run_gemm`): the int8 operands are converted to
float32 a piece of the inner dimension at a time into reused buffers (the scratch
pool's from 4 MiB, a buffer per thread below) and multiplied by BLAS SGEMM (SciPy's,
called as the float32 engine calls it; BLAS keeps its own thread count, which the
tuning key records, and the factorizations' panels run on one BLAS thread as on the
other INT8 engines). int8 products are at most ``128 * 128 = 2**14`` in magnitude,
so a sum of at most :data:`KC` = 1024 of them, in any order and any partial grouping, stays
within ``1024 * 2**14 = 2**24``, the range in which float32 holds every integer: each
SGEMM (and SGEMM's ``beta = 1`` accumulation of consecutive pieces, as long as their
total inner length stays within :data:`KC`) is exact. Each such float32 result is
added into the INT32 output (in float64, exact; the engine's INT32 runs keep the sum
within INT32). So the products are exact and the passes are the INT8 engines': the
same bits as every other engine.

Memory: beside the INT32 result, one call holds a float32 buffer of the result's shape
and the float32 copies of one piece of each operand (``(m + p) * min(k, 1024)``
entries, ``k`` the slices' length); :attr:`SGEMMInt8Engine.memory_model` counts them
(4 more bytes per tile input and output entry), so ``memory_limit`` holds.

Selection (:mod:`ozlinalg.engines.select`): the name ``"sgemm"`` (and ``"auto"``'s last
fallback) gives this engine where the compiled passes load, and the float32 engine
where they do not (no build, ``OZLINALG_FUSED=0``); both are named ``cpu-sgemm``, and
``describe()`` says which ran and why.
"""
from __future__ import annotations

import threading

import numpy as np
from scipy.linalg import blas as _blas

from ._scratch import MIN_BYTES
from .onednn import EngineUnavailable
from .onednn.engine import Int8Engine, run_view

__all__ = ["KC", "SGEMMInt8Engine"]

#: Longest inner length of one exact float32 product of int8 operands:
#: ``KC * 128 * 128 = 2**24``, the largest float32 integer range without gaps.
KC = 1024

#: Bytes of float32 temporaries per tile input entry (the operands' pieces) and per
#: tile output entry (the SGEMM result), on top of the INT8 engines' coefficients.
F32_BYTES = 4


class SGEMMInt8Engine(Int8Engine):
    """Exact INT8 GEMMs on BLAS SGEMM over int8 slices, with the compiled passes
    (module docstring) for NumPy arrays.

    ``fused=False``: the passes as NumPy code (the storage stays int8; selection never
    makes this one, it takes the float32 engine then). Raises
    :class:`~ozlinalg.engines.onednn.EngineUnavailable` if SGEMM fails the exactness
    self-test.
    """

    name = "cpu-sgemm"
    label = "SGEMM"
    #: What multiplies (the engine line, the self-test's message, the tuning key).
    isa = "float32 BLAS SGEMM"
    #: Never: the products run at SGEMM's rate, about 2x DGEMM's (``int8_peak_ratio``),
    #: and a DGEMM-level product needs 16 (crt) to 45 of them: 8-26x native DGEMM's
    #: time at n = 2048 on one Zen 2 core (``OZLINALG_ENGINE=sgemm python -m ozlinalg
    #: compare --n 2048``; docs/performance.md, "The SGEMM engine: int8 slices and the
    #: compiled passes").
    crossovers: dict = {}
    #: Why ``"auto"`` chose this engine (the verdicts of the engines passed over), set by
    #: :func:`ozlinalg.engines.select.cpu_engine`; None otherwise.
    selection_reason = selection_verdict = None

    def __init__(self, threads: int | None = None, fused: bool | None = None):
        self._setup(threads, fused)
        ok, detail = self._run_self_test()
        self.self_test = detail
        if not ok:
            raise EngineUnavailable(f"BLAS SGEMM on int8 slices failed the INT8 exactness "
                                    f"self-test: {detail}")

    # -- what ran ---------------------------------------------------------------------

    def tuning_facts(self):
        """The tuning cache's key here: the float32 engine's (name, threads, BLAS
        threads), the multiplier and the passes' build: the float32 engine's cache is
        not this one's."""
        return {**super().tuning_facts(), "isa": self.isa,
                "kernels": self.kernels.isa if self.kernels is not None else None,
                "libraries": {}}

    def describe(self):
        why = self.selection_reason
        return (f"{self.name} (INT8 slices on BLAS SGEMM, int8 self-test passed, passes: "
                f"{self._passes_text()}{'; ' + why if why else ''})")

    @property
    def memory_model(self):
        """The INT8 engines' coefficients (:attr:`Int8Engine.memory_model`) plus the
        float32 temporaries of a GEMM: the operands' pieces (4 bytes per tile input
        entry: ``(mt + pt) * min(k, KC)`` entries) and the SGEMM result (4 bytes per
        tile output entry). None without the compiled passes (the generic model)."""
        model = super().memory_model
        if model is None:
            return None
        extra = {"input": 12, "product_input": 16, "crt_input": 16, "crt_product_input": 8,
                 "output": 32, "product_output": 72, "crt_output": 32}
        for key, generic in extra.items():
            extra[key] = model.get(key, generic) + F32_BYTES
        return {**model, **extra}

    def _k(self, work):
        """The kernel module, on one thread whatever the pass's size.

        The products run on BLAS SGEMM's own threads. OpenMP's workers keep spinning a
        while after each parallel pass (libgomp's wait policy) and take the cores from
        the SGEMM threads that come next: on 2 threads at n = 2048 (a 2-core Zen 4) crt
        took 1.93 s with parallel passes against 1.68 s with one-thread ones, hybrid-ef
        5.28 against 4.63 s, and under a 64 MiB limit, where tiles interleave passes and
        SGEMMs a thousand times, 2.37x against 1.42x the unlimited time
        (``benchmarks/studies/memory_time.py --engines sgemm``). The passes are a few
        percent of this engine's products (``benchmarks/studies/cpu_crt_split.py
        --engine sgemm``: 4 % of crt's time)."""
        ker = self.kernels
        ker.set_threads(1)
        return ker

    # -- the GEMM ---------------------------------------------------------------------

    def _buffer(self, count):
        """``count`` float32 entries for one GEMM's temporaries, reused: from
        :data:`~ozlinalg.engines._scratch.MIN_BYTES` on a lease of the scratch pool
        (kept between products within the pool's cap), below it this thread's own
        buffer, grown as needed (less than MIN_BYTES a thread, within the memory
        bound's fixed allowance). Not ``numpy.empty`` each time: a buffer of a few MiB
        may be fresh pages, and a tiled product makes a thousand GEMMs."""
        if count * 4 >= MIN_BYTES:
            return self.scratch.empty(count, np.float32)
        local = self.__dict__.get("_local")
        if local is None:
            local = self.__dict__.setdefault("_local", threading.local())
        buf = getattr(local, "buf", None)
        if buf is None or buf.size < count:
            buf = local.buf = np.empty(max(count, 1 << 14), np.float32)
        return buf[:count]

    def _run_gemm(self, la, i, lb, j, k0, k1, out, colmajor, beta):
        x, y = run_view(la, i, k0, k1), run_view(lb, j, k0, k1)
        if colmajor:  # C^T = B A^T, row-major
            x, y, out = y, x, out.T
        m, p = out.shape
        kk = k1 - k0
        # Pieces no longer than the slices (so the buffers stay within the memory
        # model's (m + p) k) nor than KC (exact); consecutive pieces accumulate in
        # SGEMM while their inner lengths add up to at most KC.
        kc = max(1, min(KC, la[0].shape[2], kk))
        buf = self._buffer(m * p + (m + p) * kc)
        c = buf[:m * p].reshape(m, p).T  # (p, m) Fortran order: c.T is out's shape
        xbuf, ybuf = buf[m * p:m * p + m * kc], buf[m * p + m * kc:]
        xrows, yrows = x.strides[1] == 1, y.strides[1] == 1
        run = 0  # inner length summed in c since it was last added to out
        first = True
        for c0 in range(0, kk, kc):
            w = min(kk, c0 + kc) - c0
            if run and run + w > KC:
                _add(out, c.T, beta or not first)
                first, run = False, 0
            fx = _piece(xbuf, x, c0, w, xrows)
            fy = _piece(ybuf, y, c0, w, yrows)
            # c (p x m) = Y X^T: c.T = X Y^T, the piece's product
            _blas.sgemm(1.0, fy.T if yrows else fy, fx.T if xrows else fx,
                        beta=1.0 if run else 0.0, c=c, trans_a=1 if yrows else 0,
                        trans_b=0 if xrows else 1, overwrite_c=1)
            run += w
        _add(out, c.T, beta or not first)
        self.launches += 1


def _piece(buf, x, c0, w, rows):
    """Inner indices ``c0 .. c0 + w`` of the int8 operand ``x`` (rows x k) as float32 in
    ``buf`` (exact): rows contiguous (C order) where ``x``'s rows are (``rows``), else
    columns (Fortran order), so the conversion reads ``x`` in its own order. (One
    thread: splitting this and :func:`_add` over the engine's threads gained nothing
    beside SGEMM's own threads, 2048 x 2048 x 2048 on 2 cores.)"""
    n = x.shape[0]
    f = buf[:n * w].reshape(n, w) if rows else buf[:n * w].reshape(w, n).T
    np.copyto(f, x[:, c0:c0 + w], casting="unsafe")
    return f


def _add(out, ct, accumulate):
    """``out (+)= ct``: an exact integer float32 result into the INT32 output (the sum
    formed in float64, exact; the engine's runs keep it within INT32)."""
    if accumulate:
        np.add(out, ct, out=out, casting="unsafe")
    else:
        np.copyto(out, ct, casting="unsafe")

