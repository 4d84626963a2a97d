"""``ozlinalg.profile()``: what ran, and where the time went.

State lives in a :class:`contextvars.ContextVar` holding the tuple of active
profiles, set on enter and reset with its token on exit (the pattern of
``numpy.errstate``), so threads and asyncio tasks never see each other's
profiles and nested profiles each record what ran inside them.
"""
from __future__ import annotations

import contextvars
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["Profile", "profile", "active_profiles", "profiles_getter", "record_native_flops",
           "Route", "record_route", "RefineRecord", "record_refine"]

_ACTIVE: contextvars.ContextVar[tuple] = contextvars.ContextVar(
    "ozlinalg_profiles", default=()
)


@dataclass
class CallRecord:
    """One emulated GEMM call."""

    method: str
    shape: tuple  # (m, n, p): a is m x n, b is n x p
    slices: int
    int8_gemms: int
    engine_calls: int
    accumulation_passes: int
    time_split: float
    time_int8: float
    time_accumulate: float
    time_total: float
    device: str
    engine: str = ""  # the engine's describe(): name, library, ISA
    accuracy: str = "dgemm"
    certified: int = 0  # faithful mode: entries certified by the bound
    recomputed: int = 0  # faithful mode: entries recomputed exactly


@dataclass
class RefineRecord:
    """One system solved by a refined solve (:mod:`ozlinalg.linalg._refine`)."""

    shape: tuple  # (n, nrhs)
    method: str
    counts: tuple  # the count of each factorization tried, in order ("auto": DGEMM level)
    count: object  # the count of the factorization the answer was refined from
    iterations: int  # classical refinement steps
    gmres_steps: int  # GMRES-IR inner steps (0: classical refinement sufficed)
    fell_back: bool  # refinement failed at DGEMM level too: the plain DGEMM-level solve
    failed: bool  # no factorization at all (singular): the unrefined path decided
    backward_error: float  # max normwise backward error over the right-hand sides
    rcond: object  # the factors' reciprocal condition estimate (None on a device)
    time: float


class Route(NamedTuple):
    """One kind of routing decision of :func:`ozlinalg.backend` (a key of
    :attr:`Profile.routing`)."""

    function: str  # the routed name, e.g. "numpy.linalg.solve"
    op: str  # the operation whose crossover decided: matmul, getrf, potrf, geqrf, ...
    order: int  # the matrix order the decision was made on (-1: unknown, NaN chunks)
    engine: str  # the engine that would emulate it, e.g. "cpu-sgemm"
    emulated: bool
    reason: str  # "eager", "at or above crossover N", "below crossover N",
    #              "no crossover (never faster)", "below min_size N"; the dask
    #              route's hand-backs: "unknown chunk sizes", "dask rejects this
    #              block structure"
    source: str = ""  # where the threshold came from: "cache <path>", "engine
    #                   constants", "model (int8 x TOPS, dgemm y GFLOPS)", "none",
    #                   "eager" (docs/tuning.md)
    method: str = ""  # the method an emulated call ran with ("" when native)
    refine: bool = False  # the refined solve was chosen (op gesv_refined / posv_refined)


@dataclass
class Profile:
    """Counters and timers filled while a :func:`profile` block is active.

    Attributes
    ----------
    emulated_gemm_calls : int
        Calls of the emulated GEMM (``ozlinalg.matmul`` and the factorizations'
        trailing updates).
    int8_gemms : int
        Exact INT8 x INT8 -> INT32 products formed (slice pairs times inner
        blocks); SplitFP's FP16 products are counted here too.
    engine_calls : int
        Engine invocations. Group-wise (EF) accumulation batches the products
        of a group into fewer, longer GEMMs, so this can be below ``int8_gemms``.
    accumulation_passes : int
        FP64 convert-scale-add passes over the output.
    slices : list of int
        Slice count used by each call, in order.
    methods : collections.Counter
        Calls per method name.
    time_split, time_int8, time_accumulate, time_other : float
        Seconds spent splitting, in the engine's GEMMs, accumulating in FP64,
        and elsewhere in the emulated calls (validation, special values).
    emulated_flops, native_flops : float
        ``2*m*n*p`` of the emulated GEMMs, and flops reported by code that ran
        natively (factorization panels, fallbacks below the size threshold).
    calls : list of CallRecord
        One record per emulated call.
    routing : collections.Counter
        Decisions of :func:`ozlinalg.backend` on the calls it screened:
        :class:`Route` (function, op, order, engine, emulated, reason, source,
        method, refine) -> number of calls. Calls that are not routable (other array types, dtypes,
        nested inside ozlinalg) are not counted.
    engines : collections.Counter
        Calls per engine, each named by its ``describe()`` line (engine, library,
        ISA, and why it was chosen).
    refined : list of RefineRecord
        One record per system solved by a refined solve (``refine=`` of
        :func:`ozlinalg.solve`): the counts tried, the refinement's iterations, GMRES
        steps, whether it fell back to the DGEMM-level solve, its backward error.
    entries_certified, entries_recomputed : int
        ``accuracy="faithful"``: output entries the bound certified, and entries
        recomputed exactly (the rest of the finite entries).
    """

    emulated_gemm_calls: int = 0
    int8_gemms: int = 0
    engine_calls: int = 0
    accumulation_passes: int = 0
    slices: list = field(default_factory=list)
    methods: Counter = field(default_factory=Counter)
    time_split: float = 0.0
    time_int8: float = 0.0
    time_accumulate: float = 0.0
    time_other: float = 0.0
    emulated_flops: float = 0.0
    native_flops: float = 0.0
    native_calls: Counter = field(default_factory=Counter)
    calls: list = field(default_factory=list)
    routing: Counter = field(default_factory=Counter)
    entries_certified: int = 0
    entries_recomputed: int = 0
    refined: list = field(default_factory=list)

    @property
    def routed_emulated(self) -> int:
        """Calls :func:`ozlinalg.backend` sent to the emulation."""
        return sum(c for r, c in self.routing.items() if r.emulated)

    @property
    def routed_native(self) -> int:
        """Routable calls :func:`ozlinalg.backend` ran natively (below the
        crossover or ``min_size``)."""
        return sum(c for r, c in self.routing.items() if not r.emulated)
    engines: Counter = field(default_factory=Counter)

    @property
    def time_total(self) -> float:
        return self.time_split + self.time_int8 + self.time_accumulate + self.time_other

    @property
    def emulated_flop_share(self) -> float:
        """Fraction of all recorded flops that went through the emulated GEMM."""
        total = self.emulated_flops + self.native_flops
        return self.emulated_flops / total if total else 0.0

    def _add_call(self, rec: CallRecord) -> None:
        self.emulated_gemm_calls += 1
        self.int8_gemms += rec.int8_gemms
        self.engine_calls += rec.engine_calls
        self.accumulation_passes += rec.accumulation_passes
        self.slices.append(rec.slices)
        self.methods[rec.method] += 1
        self.time_split += rec.time_split
        self.time_int8 += rec.time_int8
        self.time_accumulate += rec.time_accumulate
        self.time_other += max(
            0.0, rec.time_total - rec.time_split - rec.time_int8 - rec.time_accumulate
        )
        m, n, p = rec.shape
        self.emulated_flops += 2.0 * m * n * p
        self.calls.append(rec)
        self.entries_certified += rec.certified
        self.entries_recomputed += rec.recomputed
        if rec.engine:
            self.engines[rec.engine] += 1

    def summary(self) -> str:
        """A short human-readable report."""
        tot = self.time_total or 1.0
        lines = [
            f"emulated GEMM calls : {self.emulated_gemm_calls}",
            f"methods             : {dict(self.methods)}",
            *(f"engine              : {name}" for name in self.engines),
            f"slices              : {sorted(set(self.slices))}",
            f"INT8 GEMMs          : {self.int8_gemms} ({self.engine_calls} engine calls)",
            f"FP64 accum. passes  : {self.accumulation_passes}",
            *([f"faithful entries    : {self.entries_certified} certified, "
               f"{self.entries_recomputed} recomputed exactly"]
              if self.entries_certified or self.entries_recomputed else []),
            "time split / int8 / accumulate / other : "
            f"{self.time_split:.4f} / {self.time_int8:.4f} / "
            f"{self.time_accumulate:.4f} / {self.time_other:.4f} s "
            f"({100 * self.time_split / tot:.1f}% / {100 * self.time_int8 / tot:.1f}% / "
            f"{100 * self.time_accumulate / tot:.1f}% / {100 * self.time_other / tot:.1f}%)",
        ]
        if self.routing:
            lines.append(f"backend routing     : {self.routed_emulated} emulated, "
                         f"{self.routed_native} native")
            for r, c in sorted(self.routing.items(), key=lambda rc: (rc[0].function,
                                                                     rc[0].order)):
                how = ""
                if r.emulated and (r.method or r.refine):
                    how = f" with {r.method or 'the default method'}" + (
                        ", refine=True" if r.refine else "")
                lines.append(f"  {c:>7} x {r.function} (order {r.order}, {r.op} on "
                             f"{r.engine}): {'emulated' if r.emulated else 'native'}{how}, "
                             f"{r.reason}" + (f" [{r.source}]" if r.source else ""))
        for r in self.refined:
            how = ("fell back to the DGEMM-level solve" if r.fell_back else
                   "singular: unrefined path" if r.failed else
                   f"{r.iterations} iterations" + (f", {r.gmres_steps} GMRES steps"
                                                   if r.gmres_steps else ""))
            rc = "" if r.rcond is None else f", rcond {r.rcond:.1e}"
            lines.append(f"refined solve       : n={r.shape[0]} nrhs={r.shape[1]} {r.method} "
                         f"counts {list(r.counts)}: {how}, backward error "
                         f"{r.backward_error:.1e}{rc}")
        if self.native_flops:
            lines.append(
                f"emulated flop share : {100 * self.emulated_flop_share:.1f}% "
                f"(native: {dict(self.native_calls)})"
            )
        return "\n".join(lines)


class profile:
    """Context manager (and decorator) recording the emulated work inside it.

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> a = np.ones((64, 64)); b = np.ones((64, 64))
    >>> with ozlinalg.profile() as prof:
    ...     c = ozlinalg.matmul(a, b, slices=9)
    >>> prof.emulated_gemm_calls
    1
    """

    def __init__(self):
        self._token = None
        self.result: Profile | None = None

    def __enter__(self) -> Profile:
        if self._token is not None:
            raise RuntimeError("this ozlinalg.profile() instance is already active")
        self.result = Profile()
        self._token = _ACTIVE.set(_ACTIVE.get() + (self.result,))
        return self.result

    def __exit__(self, *exc):
        _ACTIVE.reset(self._token)
        self._token = None
        return False

    def __call__(self, func):
        import functools

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with profile():
                return func(*args, **kwargs)

        return wrapper


def active_profiles() -> tuple:
    """The profiles recording in the current context (innermost last)."""
    return _ACTIVE.get()


def profiles_getter():
    """:func:`active_profiles` as a bound method with no Python frame of its own:
    for the backend's shims, which ask on every call whether a profile watches
    (an empty tuple: none)."""
    return _ACTIVE.get


def record_call(rec: CallRecord) -> None:
    for p in _ACTIVE.get():
        p._add_call(rec)


def record_route(route: Route) -> None:
    """Count one routing decision of :func:`ozlinalg.backend`."""
    for p in _ACTIVE.get():
        p.routing[route] += 1


def record_refine(rec: RefineRecord) -> None:
    """Add a refined solve's record to every active profile."""
    for p in _ACTIVE.get():
        p.refined.append(rec)


def record_native_flops(flops: float, what: str = "native") -> None:
    """Record flops that ran natively (a factorization panel, a small fallback)."""
    for p in _ACTIVE.get():
        p.native_flops += float(flops)
        p.native_calls[what] += 1


class Timer:
    """Accumulating wall-clock timer; synchronizes the device when asked.

    Timing is only taken while a profile is active, since device
    synchronization would otherwise cost the caller for nothing.
    """

    __slots__ = ("enabled", "sync", "_t0", "total")

    def __init__(self, enabled: bool, sync=None):
        self.enabled = enabled
        self.sync = sync
        self.total = 0.0
        self._t0 = 0.0

    def __enter__(self):
        if self.enabled:
            if self.sync is not None:
                self.sync()
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            if self.sync is not None:
                self.sync()
            self.total += time.perf_counter() - self._t0
        return False
