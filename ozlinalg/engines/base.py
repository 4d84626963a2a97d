"""The engine interface: exact low-precision products behind one small API.

An engine owns the device-specific part of the emulated GEMM:

* ``empty_slices(s, rows, k, kind, operand=None)``: storage for slices (INT8
  values on the GPU, integer-valued float32 on the CPU where BLAS SGEMM is the
  fast exact route), shape ``(s, rows, k)``, possibly a strided view laid out
  for the products of operand "a" or "b";
* ``int_matmul_sum(a, b, pairs, bound_a, bound_b, ws=None)``: the EXACT
  integer sum ``sum((i, j) in pairs) a[i] @ b[j].T`` of INT8 slice products,
  returned as a float64 or integer array (possibly a buffer of the workspace
  ``ws`` from ``workspace(m, p)``, valid until the next call), plus the number
  of GEMM launches it took;
* ``float_matmul(a, b)``: FP16-valued inputs, FP32 accumulation (SplitFP);
* ``approx_matmul(a, b)``: nonnegative inputs (float64 squares, or float32),
  a few correct bits, a float64 result (the magnitude estimates of
  ``slices="auto"`` / ``moduli="auto"``);
* ``axpy(alpha, x, acc)``: ``acc += alpha * x`` in FP64, in place;
* ``map_rows(fn, rows, k)``: run ``fn(r0, r1)`` over row blocks (threads on the
  CPU, one block on the GPU);
* ``synchronize()``: wait for queued device work (timing);
* ``crossover(op)``: the matrix order from which emulating ``op`` on this
  engine is expected to be at least as fast as native FP64 (``None``: at no
  order), read by ``ozlinalg.backend()``'s "performant" strategy.

``a`` holds slices of A as ``(s, m, k)`` and ``b`` slices of B^T as ``(s, p, k)``,
so every operand is row-major with the inner dimension last.
"""
from __future__ import annotations

__all__ = ["APPROX_PRESCALE", "Engine", "get_engine", "register_engine", "CROSSOVER_OPS"]

#: ``approx_matmul``'s prescale of each operand (exact; undone on the result).
APPROX_PRESCALE = 2.0**48

#: Operations with a crossover: the emulated GEMM and the three blocked
#: factorizations (solves, inverses, determinants and triangular solves are
#: counted with ``getrf``, ``cho_*`` with ``potrf``, ``lstsq`` with ``geqrf``).
CROSSOVER_OPS = ("matmul", "getrf", "potrf", "geqrf")


class Engine:
    name = "abstract"
    device = "none"
    xp = None
    #: Largest inner dimension the exact INT8 product supports in one call.
    max_inner = 1 << 17
    #: Bytes per slice entry (memory planning: ``ozaki.gemm.working_bytes``).
    slice_bytes = 4
    #: ``{op: order}``: measured crossovers (see :meth:`crossover`); an op
    #: that is missing never pays. Each engine's values come with the
    #: benchmark command that measured them.
    crossovers: dict = {}

    def crossover(self, op: str):
        """The matrix order from which emulating `op` on this engine is at least
        as fast as native FP64, or ``None`` when it never is (as measured).

        `op` is one of :data:`CROSSOVER_OPS`.
        """
        if op not in CROSSOVER_OPS:
            raise ValueError(f"ozlinalg: unknown operation {op!r} for a crossover; "
                             f"choose one of {CROSSOVER_OPS}")
        return self.crossovers.get(op)

    def empty_slices(self, s, rows, k, kind, operand=None):  # pragma: no cover - interface
        raise NotImplementedError

    def memory_limit(self):
        """Default working-memory budget (bytes) of one product (``options(memory_limit=None)``)."""
        return 2 * 1024**3

    def workspace(self, m, p):
        """Buffers reused across the products of one call (``None``: none needed)."""
        return None

    def int_matmul_sum(self, a, b, pairs, bound_a, bound_b, ws=None):  # pragma: no cover
        raise NotImplementedError

    def float_matmul(self, a, b):  # pragma: no cover
        raise NotImplementedError

    def approx_matmul(self, a, b):
        """``a @ b.T`` of nonnegative data, only to a few bits (estimates), as float64.

        ``slices="auto"`` and ``moduli="auto"`` need magnitudes, not digits; an
        engine may use a faster, less precise unit here (the GPU: BF16 tensor
        cores). Default: :meth:`float_matmul` of :meth:`approx_operand`, scaled
        back.
        """
        c = self.float_matmul(self.approx_operand(a), self.approx_operand(b))
        return c.astype("float64") * (1.0 / APPROX_PRESCALE**2)

    @staticmethod
    def approx_operand(x):
        """C-ordered float32 ``x * 2**48`` for :meth:`approx_matmul`.

        The scale is applied in ``x``'s own precision (float64 squares) BEFORE
        the cast: squares of normalized entries down to 2**-149 then become
        normal FP32 numbers on every engine. Cast first, those in
        [2**-149, 2**-126) would be FP32 subnormals, which the CPU keeps and a
        GPU kernel compiled with flush-to-zero (CuPy's) turns into zeros, so the
        two could pick different slice counts for the same input. Entries are
        at most 1 and inner dimensions at most 2**17, so scaled sums of
        products stay below 2**113.
        """
        return (x * APPROX_PRESCALE).astype("float32", order="C")

    def axpy(self, alpha, x, acc):
        if alpha == 1.0:
            acc += x
        else:
            acc += alpha * x

    def map_rows(self, fn, rows, k):
        fn(0, rows)

    def synchronize(self):
        pass


_ENGINES: dict = {}
#: Called after :func:`register_engine`: caches of engine facts (the backend's
#: crossover thresholds) drop what they hold.
_ON_REGISTER: list = []


def register_engine(key, factory) -> None:
    """Register an engine factory for an array module name ("numpy", "cupy")."""
    _ENGINES[key] = factory
    for callback in list(_ON_REGISTER):
        callback()


def get_engine(xp) -> Engine:
    """The engine for array namespace ``xp`` (created once, then cached)."""
    key = xp.__name__.split(".")[0]
    eng = _ENGINES.get(key)
    if eng is None:
        raise RuntimeError(f"ozlinalg: no engine registered for {key!r} arrays")
    if not isinstance(eng, Engine):
        eng = eng()
        _ENGINES[key] = eng
    return eng
