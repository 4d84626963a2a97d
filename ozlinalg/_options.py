"""Library-wide defaults, overridable per context with ``ozlinalg.options()``.

Like :func:`numpy.errstate`, the settings live in a ContextVar that is set on
enter and reset with its token on exit, so they are thread- and task-local.
"""
from __future__ import annotations

import contextvars
import dataclasses
import operator
from dataclasses import dataclass

__all__ = ["Options", "options", "get_options", "STRATEGIES"]

#: Values of ``Options.strategy`` (see :class:`Options`).
STRATEGIES = ("eager", "performant")


@dataclass(frozen=True)
class Options:
    """Defaults used when a call leaves an argument unset.

    Attributes
    ----------
    method : str
        Emulated GEMM method (see :data:`ozlinalg.ozaki.METHODS`).
    slices : int or "auto"
        Slice count; ``"auto"`` picks the smallest count that reaches
        DGEMM-level accuracy (see :func:`ozlinalg.ozaki.choose_slices`).
    min_size : int
        Products whose smallest dimension is below this run natively in FP64
        (emulation pays only for large products). 0 emulates everything.
    max_slices : int
        Upper limit for ``slices="auto"``.
    memory_limit : int or None
        Working memory (bytes) one emulated product may use beside its inputs
        and result; larger products are computed in output tiles (see
        :func:`ozlinalg.ozaki.gemm.working_bytes`). ``None`` (the default)
        lets the engine decide: 2 GiB on the CPU, half of the free device
        memory (including CuPy's pooled free blocks) on the GPU.
    balance : {"auto", True, False}
        Power-of-two balancing of each product's inner dimension (see
        :mod:`ozlinalg.ozaki.balance`): ``"auto"`` only when strongly
        imbalanced, ``True`` always, ``False`` never.
    complex_scheme : {"4m", "4m-fused", "3m"}
        How complex products are built from real emulated ones (see
        :mod:`ozlinalg.ozaki.complex`).
    strategy : {"eager", "performant"}
        Which calls routed by :func:`ozlinalg.backend` / :func:`ozlinalg.install`
        are emulated. ``"eager"`` (the library default): every call whose
        matrix order is at least `min_size`. ``"performant"`` (what
        ``backend()`` and ``install()`` use unless told otherwise): only calls
        whose order reaches the engine's measured crossover for the operation
        (:meth:`ozlinalg.engines.Engine.crossover`), where emulation is
        expected to be at least as fast as native FP64; the rest run natively.
        Calls made by name (``ozlinalg.matmul``, ``ozlinalg.linalg.*``) are
        emulated at or above `min_size` whatever the strategy: the caller
        asked for emulation.
    accuracy : {"dgemm", "faithful"}
        ``"dgemm"`` (the default): ``slices="auto"`` picks the count that reaches
        native DGEMM's max error. ``"faithful"``: every entry of every emulated
        product is a faithful rounding of the exact one (within one ulp),
        certified per entry, uncertified entries recomputed exactly; applies to
        the factorizations' and solvers' products too (see
        :mod:`ozlinalg.ozaki.faithful`, docs/guarantees.md).
    engine : {None, "auto", "onednn", "sgemm"}
        Which engine multiplies NumPy arrays (see :mod:`ozlinalg.engines.select`):
        ``"onednn"`` (exact INT8 GEMM on the CPU's INT8 units), ``"sgemm"``
        (INT8 values on BLAS SGEMM), ``"auto"`` (oneDNN where it loads and
        passes its exactness self-test). ``None`` (the default): the
        ``OZLINALG_ENGINE`` environment variable, else ``"auto"``.
    """

    method: str = "hybrid-ef"
    slices: object = "auto"
    min_size: int = 0
    max_slices: int = 20
    memory_limit: object = None
    complex_scheme: str = "4m"
    balance: object = "auto"
    strategy: str = "eager"
    engine: object = None
    accuracy: str = "dgemm"

    def __post_init__(self):
        # Per-instance cache of the backend's routing thresholds
        # ({(array module, op): order or None}), filled by ozlinalg.backend.
        # Not a field: it takes no part in equality, repr or replace().
        object.__setattr__(self, "_route", {})

    def replace(self, **changes) -> Options:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"ozlinalg.options: unknown option(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


_DEFAULTS = Options()  # frozen, so sharing it as the ContextVar default is safe
_OPTIONS: contextvars.ContextVar[Options] = contextvars.ContextVar(
    "ozlinalg_options", default=_DEFAULTS  # noqa: B039
)
#: What a context without an ``options()`` block sees: ``_DEFAULTS``, or the
#: options of :func:`ozlinalg.install` (process-wide, so that threads started
#: later, whose context is empty, see them too).
_process_options: Options = _DEFAULTS


def get_options() -> Options:
    """The options in force in the current context."""
    return _OPTIONS.get(_process_options)


def set_process_options(opts: Options | None) -> None:
    """Make ``opts`` what every context without an ``options()`` block sees
    (``None``: the library defaults). Used by :func:`ozlinalg.install`."""
    global _process_options
    _process_options = _DEFAULTS if opts is None else opts


def validate(overrides: dict) -> dict:
    """Check option values (names are checked by :meth:`Options.replace`);
    returns `overrides` with canonical values."""
    from .ozaki.params import validate_method, validate_slices

    if "method" in overrides:
        overrides["method"] = validate_method(overrides["method"])
    if "slices" in overrides:
        validate_slices(overrides["slices"])
    if "balance" in overrides:
        from .ozaki.balance import min_shift_for

        min_shift_for(overrides["balance"])  # validates
    if "accuracy" in overrides:
        from .ozaki.faithful import validate_accuracy

        validate_accuracy(overrides["accuracy"])
    if "engine" in overrides:
        from .engines.select import validate_engine

        overrides["engine"] = validate_engine(overrides["engine"])
    if overrides.get("memory_limit") is not None:
        lim = overrides["memory_limit"]
        if isinstance(lim, bool) or not isinstance(lim, int) or lim <= 0:
            raise ValueError(
                f"ozlinalg.options: memory_limit must be a positive number of bytes or "
                f"None (the engine's default), got {lim!r}")
    if "strategy" in overrides and overrides["strategy"] not in STRATEGIES:
        raise ValueError(f"ozlinalg.options: strategy must be one of {STRATEGIES}, "
                         f"got {overrides['strategy']!r}")
    if "min_size" in overrides:
        m = overrides["min_size"]
        try:
            if isinstance(m, bool):
                raise TypeError
            overrides["min_size"] = operator.index(m)
        except TypeError:
            raise TypeError(f"ozlinalg.options: min_size must be an integer, "
                            f"got {type(m).__name__}") from None
        if overrides["min_size"] < 0:
            raise ValueError(f"ozlinalg.options: min_size must be >= 0, got {m!r}")
    return overrides


class options:
    """Context manager overriding defaults inside a block.

    >>> import ozlinalg
    >>> with ozlinalg.options(method="bitmask-ef", slices=9):
    ...     ozlinalg.get_options().slices
    9
    """

    def __init__(self, **overrides):
        self._overrides = validate(overrides)
        get_options().replace(**overrides)  # validates the names now
        self._token = None

    def __enter__(self) -> Options:
        if self._token is not None:
            raise RuntimeError("this ozlinalg.options() instance is already active")
        new = get_options().replace(**self._overrides)
        self._token = _OPTIONS.set(new)
        return new

    def __exit__(self, *exc):
        _OPTIONS.reset(self._token)
        self._token = None
        return False
