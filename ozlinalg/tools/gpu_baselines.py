"""What the GPU check times the engine against, apart from native DGEMM: cuBLAS's own
FP64 emulation (nvmath-python's stateful ``Matmul``; which path cuBLAS took, read from
its cuBLASLt log) and the engine's bare INT8 GEMM rate. Imports no GPU library at import
time; :mod:`ozlinalg.tools.gpu_check` runs them."""
from __future__ import annotations

import logging
import os
import tempfile
import time

__all__ = ["CublasEmulation", "best_of", "classify_emulation", "emulation_probe", "raw_int8_tops",
           "timed"]


class CublasEmulation:
    """cuBLAS's FP64 emulation through nvmath-python's stateful ``Matmul``.

    ``plan(a, b)`` plans once (``COMPUTE_64F_EMULATED_FIXEDPOINT``, or
    ``COMPUTE_64F`` with ``native=True``: the control on the same cuBLASLt
    path) and runs the first ``execute()``; the caller times the next ones.
    Planning and that first execute run with cuBLASLt's logger on (level 5,
    API trace: every call with its parameters, into a file), and nvmath's own log is
    kept; :func:`classify_emulation` reads them.
    """

    LOG_LEVEL = 5

    def __init__(self):
        from nvmath.linalg.advanced import Matmul, MatmulComputeType

        self.Matmul = Matmul
        self.ct = MatmulComputeType
        self.records = []
        self.logger = logging.getLogger("ozlinalg.gpu_check.nvmath")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self.logger.handlers[:] = [_ListHandler(self.records)]
        self.log_path = os.path.join(tempfile.gettempdir(), f"cublaslt-{os.getpid()}.log")
        try:
            from nvmath.bindings import cublasLt

            cublasLt.logger_open_file(self.log_path)
            self._lt = cublasLt
        except Exception:
            self._lt = None

    def _lt_level(self, level):
        if self._lt is not None:
            try:
                self._lt.logger_set_level(level)
            except Exception:
                pass

    def _log_size(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def plan(self, a, b, native=False):
        """``(mm, info)``: the planned ``Matmul`` and what its planning logged."""
        ct = self.ct.COMPUTE_64F if native else self.ct.COMPUTE_64F_EMULATED_FIXEDPOINT
        start, offset = len(self.records), self._log_size()
        self._lt_level(self.LOG_LEVEL)
        try:
            mm = self.Matmul(a, b, options={"compute_type": ct, "logger": self.logger})
            algos = mm.plan()
            mm.execute()
        finally:
            self._lt_level(0)
        info = {"nvmath_log": self.records[start:], "log_offset": offset,
                "algorithm_ids": [getattr(al, "algorithm_id", None)
                                  for al in list(algos or [])[:3]]}
        return mm, info

    def lt_lines(self, start, end=None):
        """cuBLASLt's log lines between two file offsets."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(start)
                text = fh.read(None if end is None else max(0, end - start))
        except OSError:
            return []
        return text.decode(errors="replace").splitlines()


class _ListHandler(logging.Handler):
    def __init__(self, sink):
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record):
        self.sink.append(record.getMessage())


#: Kernel-name words in cuBLASLt's log that only an INT8 (emulated) path shows.
_INT8_WORDS = ("imma", "i8i8", "int8", "s8s8", "_i8")


def classify_emulation(c_emu, c_lt_native, t_emu, t_native, err_emu, err_native, lt_lines):
    """Which path cuBLAS took for an emulation request: ``(label, evidence)``.

    A result bit-identical to cuBLASLt's native FP64 on the same inputs means
    native DGEMM (emulated fixed-point sums round differently). Otherwise the
    log is searched for INT8 kernel names (the request's own compute type,
    which the log echoes, is not evidence and is cut out first); time and
    error against native DGEMM are reported either way.
    """
    same = bool((c_emu == c_lt_native).all())
    cleaned = [ln.lower().replace("compute_64f_emulated_fixedpoint", "")
               for ln in lt_lines]
    words = sorted({w for w in _INT8_WORDS for ln in cleaned if w in ln})
    evidence = {
        "bit-identical to cuBLASLt COMPUTE_64F": same,
        "time / native DGEMM": None if not (t_emu and t_native) else t_emu / t_native,
        "max err / native DGEMM's": None if not err_native else err_emu / err_native,
        "INT8 kernel words in cuBLASLt log": words or "none",
    }
    if same:
        label = "cuBLAS COMPUTE_64F_EMULATED_FIXEDPOINT -> native FP64 (NOT emulated)"
    elif words:
        label = "cuBLAS FP64 emulation (emulated: INT8 kernels in its log)"
    else:
        label = "cuBLAS FP64 emulation (differs from native FP64; no INT8 kernel in its log)"
    return label, evidence


def emulation_probe(rep):
    """A :class:`CublasEmulation`, or None with the reason reported."""
    info = rep.data["cublas_emulation"]
    try:
        emu = CublasEmulation()
    except Exception as exc:
        info["status"] = f"unavailable: {exc!r}"
        return None
    info["status"] = "nvmath Matmul available"
    info["cublaslt_log"] = emu.log_path if emu._lt is not None else "logger not available"
    return emu


def raw_int8_tops(cp, n, reps=3, group=4):
    """The engine's bare INT8 GEMM rate (TOPS) on an n x n x n product, ``group``
    products accumulated per call as the EF groups do."""
    from ozlinalg.engines import get_engine

    eng = get_engine(cp)
    rs = cp.random.RandomState(7)
    a = rs.randint(-127, 128, size=(group, n, n)).astype(cp.int8)
    b = rs.randint(-127, 128, size=(group, n, n)).astype(cp.int8)
    pairs = [(i, group - 1 - i) for i in range(group)]
    ws = eng.workspace(n, n)
    eng.int_matmul_sum(a, b, pairs, 1, 1, ws=ws)  # plans, workspace
    eng.synchronize()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        eng.int_matmul_sum(a, b, pairs, 1, 1, ws=ws)
        eng.synchronize()
        best = min(best, time.perf_counter() - t)
    return group * 2.0 * n**3 / best / 1e12


def best_of(cp, fn, reps):
    """(best time, last result) of ``max(1, reps)`` synchronized runs, no warm-up (the
    first run's time counts: a first use compiles kernels)."""
    out, best = None, float("inf")
    for _ in range(max(1, reps)):
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        out = fn()
        cp.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t)
    return best, out


def timed(cp, fn, reps):
    """(best time, last result) of ``reps`` synchronized runs after one warm-up."""
    c = fn()
    cp.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(reps):
        del c
        t = time.perf_counter()
        c = fn()
        cp.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t)
    return best, c
