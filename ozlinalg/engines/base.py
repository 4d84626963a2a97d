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
  order), read by ``ozlinalg.backend()``'s "performant" strategy; ``tuned(op)``
  the same with the fastest method and where the numbers came from (the tuning
  cache, the constants, the model: :mod:`ozlinalg._tuning`);
* ``tuning_facts()``: what the tuning cache is keyed by on this engine (name,
  ISA, threads, library versions); ``int8_rate()``: a short probe of the exact
  INT8 product's rate (ops/s, once per engine; the tuning model's input);
* ``describe()``: one line naming the engine, its library and ISA (profiles,
  the CLI);
* ``native_blas()``: context for native BLAS / LAPACK calls between emulated
  products (how they share the cores with the engine);
* attributes ``crossovers`` (measured orders from which emulation pays, per
  operation; :meth:`crossover`), ``block_size`` (the factorizations' default
  panel width, or None), ``memory_model`` (coefficients of
  ``ozaki.memory.plan_bytes``, or None), ``output_orders`` (memory orders the
  products can be accumulated in; "F" needs ``workspace(m, p, order="F")``).

Optional passes. An engine may offer a fused form of a pass around its products
(one compiled pass instead of several array operations) by defining the method of
that name; the class attributes below declare every name as ``None`` ("not
offered"). The Ozaki layer never reads them one by one: ``ozlinalg.ozaki.passes.
passes_for(engine)`` pairs each with its generic array code once per engine, and
the driver calls the resulting ``Passes`` callables, which run the fused pass and
fall back on the generic code where it declines a call (returns ``None`` /
``False``: a dtype, a layout, no compiled kernels). (The generic code lives in the
Ozaki layer, which this layer must not import: so the pairing is done there.)

* Passes, each giving the generic code's bits (tests/engines/test_passes.py compares
  them): ``normalize_rows``, ``split_rows``, ``split_raw`` (normalize and split in
  one pass), ``empty_slices_like`` (storage in the operand's memory order),
  ``abs_max``, ``abs_max_both``, ``abs_min_nonzero``, ``fixed_sums``, ``digit_sums``,
  ``bound_r_min``, ``crt_residues``, ``crt_bound``, ``row_stats`` (the Ozaki-II count
  phase's statistics of raw rows), ``crt_accumulator``, ``scale_outer``,
  ``axpy_outer``, and the faithful mode's ``axpy_twosum``, ``finish_twosum``, ``certify_ef`` /
  ``certify_crt`` (:mod:`ozlinalg.ozaki.faithful`).
* Estimates, which need only rigorous bounds, not the generic bits
  (:mod:`ozlinalg.ozaki.counts.estimate`): ``approx_squares`` and
  ``scaled_estimate`` (generic form: :meth:`approx_matmul` of the squares). They
  are paired and called like the passes.
* Routes, other ways through the driver with the same results but other buffers
  (so ``None`` stays meaningful and the driver asks for them): ``finish_ef`` (the
  EF top groups finished with the scaling in one pass), ``crt_bound_shifts`` (the
  accurate scaling's maxima of the bound products kept as int32),
  ``classify_estimate`` / ``kept_below`` (the ``auto`` decisions in one interval
  pass over a float32 estimate) and ``small_product`` (a whole small product in one
  compiled call, read by ``ozlinalg.ozaki.small`` before any pass runs).

``a`` holds slices of A as ``(s, m, k)`` and ``b`` slices of B^T as ``(s, p, k)``
(views; with ``empty_slices_like`` the rows may be the contiguous axis).
"""
from __future__ import annotations

import contextlib
import threading
import time

from .. import _tuning
from ._process import memory_bound

__all__ = ["APPROX_PRESCALE", "CROSSOVER_OPS", "Engine", "get_engine", "group_runs",
           "on_register", "register_engine"]

#: ``approx_matmul``'s prescale of each operand (exact; undone on the result).
APPROX_PRESCALE = 2.0**48

#: Operations with a crossover: the emulated GEMM, the three blocked
#: factorizations (solves, inverses, determinants and triangular solves are
#: counted with ``getrf``, ``cho_*`` with ``potrf``, ``lstsq`` with ``geqrf``),
#: the refined solves (``ozlinalg.solve(a, b, refine=True)``; ``posv_refined``
#: with ``assume_a="pos"``) and the spectral decompositions (``eigh`` /
#: ``eigvalsh`` as ``syevd``; ``svd``, ``svdvals``, ``pinv``, ``matrix_rank``,
#: ``polar`` as ``gesdd``).
CROSSOVER_OPS = _tuning.TUNED_OPS


class Engine:
    name = "abstract"
    device = "none"
    xp = None
    #: Bytes per slice entry (memory planning: ``ozaki.memory.plan_bytes``).
    slice_bytes = 4
    #: Coefficients of ``ozaki.memory.plan_bytes`` for this engine (None, or any key
    #: missing: the generic ``ozaki.memory.MEMORY_MODEL``).
    memory_model = None
    #: Default panel width of the blocked factorizations on this engine (None:
    #: ``ozlinalg.lapack.DEFAULT_BLOCK_SIZE``).
    block_size = None
    #: Memory orders the engine's products can be accumulated in ("F": the driver
    #: gives a column-major result to column-major callers without a transpose).
    output_orders = ("C",)
    #: ``{op: order}``: measured crossovers (see :meth:`crossover`); an op
    #: that is missing never pays. Each engine's values come with the
    #: benchmark command that measured them.
    crossovers: dict = {}

    # The optional passes, estimates and routes (the module docstring lists what each
    # does). ``None`` here means "not offered"; an engine that offers one overrides its
    # entry. Declaring them here makes the contract one list, which
    # ``ozlinalg.ozaki.passes`` reads once per engine.
    #: normalization, splitting, slice storage
    normalize_rows = split_rows = split_raw = None
    empty_slices_like = abs_max = abs_max_both = abs_min_nonzero = None
    #: ``auto``'s estimates and decisions
    approx_squares = scaled_estimate = classify_estimate = kept_below = None
    digit_sums = fixed_sums = bound_r_min = None
    #: crt's residues, bound and accumulation
    crt_residues = crt_bound = row_stats = crt_bound_shifts = crt_accumulator = None
    #: accumulation and the faithful mode's compensated sums and certificates
    scale_outer = finish_ef = finish_twosum = axpy_twosum = axpy_outer = None
    certify_ef = certify_crt = None
    #: the one-call path for small products (compiled kernels)
    small_product = None
    #: threads of the engine's compiled passes and its scratch pool (None: none)
    threads = None
    scratch = None

    def crossover(self, op: str):
        """The matrix order from which emulating `op` on this engine is at least
        as fast as native FP64, or ``None`` when it never is: :meth:`tuned`'s order.

        `op` is one of :data:`CROSSOVER_OPS`.
        """
        return self.tuned(op).order

    def tuned(self, op: str) -> _tuning.Tuned:
        """``Tuned(order, method, source)`` of `op` on this engine: the tuning cache
        of ``python -m ozlinalg tune``, else :attr:`crossovers`, else the model of
        :meth:`int8_rate` against a DGEMM probe, else never
        (:func:`ozlinalg._tuning.tuned`, docs/tuning.md)."""
        if op not in CROSSOVER_OPS:
            raise ValueError(f"ozlinalg: unknown operation {op!r} for a crossover; "
                             f"choose one of {CROSSOVER_OPS}")
        return _tuning.tuned(self, op)

    def tuning_facts(self) -> dict:
        """What the tuning cache is keyed by on this engine, beside the CPU and the
        versions of ozlinalg / NumPy / SciPy: name, device, threads; subclasses add
        their ISA and ``"libraries"`` (``{name: version}``). Read, never changed."""
        return {"engine": self.name, "device": self.device, "threads": self.threads}

    def int8_peak_ratio(self):
        """Upper bound of this engine's INT8 product rate over the host's DGEMM rate
        (ISA peaks: the tuning model's cap on a probe), or None (no bound known)."""
        return None

    #: Shape ``(m, p, k)`` of :meth:`int8_rate`'s product, and its repetitions.
    RATE_PROBE = (512, 512, 1024)
    RATE_REPEAT = 3

    def int8_rate(self):
        """Ops per second of one exact INT8 slice product (:meth:`int_matmul_sum` of
        :data:`RATE_PROBE`, best of :data:`RATE_REPEAT` after a warm-up: about a
        millisecond on an INT8 unit), measured once per engine on first need and
        thread-safe; None where it cannot be measured. The tuning model's input."""
        lock = self.__dict__.setdefault("_rate_lock", threading.Lock())
        with lock:
            rate = self.__dict__.get("_int8_rate", False)
            if rate is not False:
                return rate
            m, p, k = self.RATE_PROBE
            a = self.empty_slices(1, m, k, "bitmask", "a")
            b = self.empty_slices(1, p, k, "bitmask", "b")
            a[...] = 1
            b[...] = 1
            ws = self.workspace(m, p)
            best = float("inf")
            for i in range(self.RATE_REPEAT + 1):
                self.synchronize()
                t = time.perf_counter()
                self.int_matmul_sum(a, b, [(0, 0)], 128, 128, ws)
                self.synchronize()
                if i:
                    best = min(best, time.perf_counter() - t)
            rate = 2.0 * m * p * k / best if best > 0 else None
            self.__dict__["_int8_rate"] = rate
            return rate

    def empty_slices(self, s, rows, k, kind, operand=None):  # pragma: no cover - interface
        raise NotImplementedError

    #: The default budget of one product: this share of the process's memory bound (a
    #: product in a 1 GiB container plans 256 MiB; on a 24 GiB machine 6 GiB). A fixed
    #: cap (2 GiB until the cost-against-n study) tiled products from n ~ 5000 on and
    #: split B once per row tile: crt at n = 6144 cost 2.79x DGEMM against 2.39x in one
    #: tile (``python benchmarks/studies/cost_against_n.py``).
    BOUND_SHARE = 4

    def memory_limit(self):
        """Default working-memory budget (bytes) of one product (``options(memory_limit=None)``):
        1/4 of the memory the process may use (physical memory, a cgroup's limit,
        ``RLIMIT_AS``: :func:`ozlinalg.engines._process.memory_bound`)."""
        return int(max(1, memory_bound()[0] // self.BOUND_SHARE))

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

    def native_blas(self):
        """Context for the native FP64 BLAS / LAPACK calls made between emulated
        products (factorization panels): how they share the cores with the engine."""
        return contextlib.nullcontext()

    def describe(self) -> str:
        """One line naming the engine (what ran: profiles and the CLI show it)."""
        return self.name


def group_runs(pairs, joinable, cmax):
    """``[i, j, count]`` runs of slice pairs ``(i + t, j - t)``, ``t < count <= cmax``.

    In an engine's grouped slice storage (A's slices side by side along the inner
    dimension, B's reversed) such a run is ONE GEMM of inner length ``count * k``;
    ``joinable`` False (other layouts, or bounds past INT32) gives one run per pair.
    """
    runs = []
    for i, j in pairs:
        last = runs[-1] if runs else None
        if (joinable and last is not None and i == last[0] + last[2]
                and j == last[1] - last[2] and last[2] < cmax):
            last[2] += 1
        else:
            runs.append([i, j, 1])
    return runs


_ENGINES: dict = {}
#: Called after :func:`register_engine`: caches of engine facts (the backend's
#: crossover thresholds) drop what they hold.
_ON_REGISTER: list = []
_NAMED: dict = {}


def on_register(callback) -> None:
    """Call ``callback()`` (no arguments) after every later :func:`register_engine`:
    for caches of engine facts (the backend's crossover thresholds), which must
    drop what they hold when an engine is replaced."""
    _ON_REGISTER.append(callback)


def register_engine(key, factory, named=None) -> None:
    """Register the default engine factory for an array module name ("numpy", "cupy").

    ``named``: optional ``callable(name) -> Engine`` for modules with several
    engines, used when ``ozlinalg.options(engine=name)`` asks for one.
    """
    _ENGINES[key] = factory
    if named is not None:
        _NAMED[key] = named
    for callback in list(_ON_REGISTER):
        callback()


_KEYS: dict = {}  # array module -> its top-level name (every product asks)


def get_engine(xp, name=None) -> Engine:
    """The engine for array namespace ``xp`` (created once, then cached).

    ``name`` picks one of several engines of the module (NumPy: ``"onednn"``,
    ``"sgemm"``, ``"auto"``; see :mod:`ozlinalg.engines.select`); ``None``: the
    module's default engine (NumPy: the ``OZLINALG_ENGINE`` environment variable,
    else ``"auto"``). The options in force are the callers' business: they pass
    ``ozlinalg.get_options().engine`` (:func:`ozlinalg._options.current_engine`).
    """
    key = _KEYS.get(xp)
    if key is None:
        key = _KEYS[xp] = xp.__name__.split(".")[0]
    if name is not None and key in _NAMED:
        return _NAMED[key](name)
    eng = _ENGINES.get(key)
    if eng is None:
        raise RuntimeError(f"ozlinalg: no engine registered for {key!r} arrays")
    if not isinstance(eng, Engine):
        eng = eng()
        _ENGINES[key] = eng
    return eng
