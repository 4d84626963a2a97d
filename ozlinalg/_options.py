"""Library-wide defaults, overridable per context with ``ozlinalg.options()``.

Like :func:`numpy.errstate`, the settings live in a ContextVar that is set on
enter and reset with its token on exit, so they are thread- and task-local.
"""
from __future__ import annotations

import contextvars
import dataclasses
import operator
from dataclasses import dataclass

from .engines import get_engine
from .engines._scratch import set_memory_limit_source

__all__ = ["Options", "options", "get_options", "current_engine", "STRATEGIES"]

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
    native_order : int
        Under ``strategy="eager"``: routed calls of LU / Cholesky based functions
        (``np.linalg.solve``, ``inv``, ``det``, ``cholesky``, ``scipy.linalg.solve``,
        ``lu_factor``, ...) and of the eigen / singular value decompositions
        (``eigh``, ``svd``, ``pinv``, ``matrix_rank``, ``polar``, ...) on matrices of
        order below this run as the original NumPy / SciPy function: the blocked
        factorizations are one native LAPACK panel there, its products of inner
        dimension below 8 add nothing native FP64 lacks; the decompositions'
        refinement would cost about ten emulated products' fixed per-call cost
        (docs/process.md, "Tiny calls"). 0 routes them to the emulation too. Calls
        made by name and products are not affected. Default 16.
    max_slices : int
        Upper limit for ``slices="auto"``, between 1 and 64 (Ozaki scheme II
        takes at most ``min(max_slices, 32)`` moduli).
    memory_limit : int or None
        Working memory (bytes) one emulated product may use beside its inputs
        and result, within 5 % plus 4 MiB (:mod:`ozlinalg.ozaki.memory`; every
        method and both accuracies); larger products are computed in output
        tiles, with the same result. A limit below the product's smallest plan
        raises :class:`MemoryError` (naming that minimum) before anything is
        allocated. ``None`` (the default) lets the engine decide: 1/4 of the
        process's memory bound on the CPU, half of the free device memory
        (including CuPy's pooled free blocks) on the GPU; there the smallest plan
        is attempted.
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
    engine : {None, "auto", "onednn", "avx2", "sgemm"}
        Which engine multiplies NumPy arrays (see :mod:`ozlinalg.engines.select`):
        ``"onednn"`` (exact INT8 GEMM on the CPU's INT8 units), ``"avx2"`` (exact
        INT8 GEMM on AVX2 ``vpmaddwd``, for CPUs without VNNI), ``"sgemm"`` (INT8
        values on BLAS SGEMM), ``"auto"`` (oneDNN where it loads and passes its
        exactness self-test, else the AVX2 engine where the CPU has AVX2, else
        SGEMM). ``None`` (the default): the ``OZLINALG_ENGINE`` environment
        variable, else ``"auto"``.
    """

    method: str = "hybrid-ef"
    slices: object = "auto"
    min_size: int = 0
    native_order: int = 16
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
        # The names set by options() / backend() / install() on the way here (not
        # defaults): the backend's "performant" strategy runs the tuned method only
        # where "method" is not among them (docs/tuning.md).
        object.__setattr__(self, "_explicit", frozenset())

    def replace(self, **changes) -> Options:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"ozlinalg.options: unknown option(s) {sorted(unknown)}")
        new = dataclasses.replace(self, **changes)
        object.__setattr__(new, "_explicit", self._explicit | frozenset(changes))
        return new


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


def current_engine(xp):
    """The engine that multiplies ``xp`` arrays under the options in force:
    :func:`ozlinalg.engines.get_engine` with ``get_options().engine`` (the engines
    take the name as an argument; they never read the options)."""
    return get_engine(xp, _OPTIONS.get(_process_options).engine)


def _memory_limit_in_force():
    return _OPTIONS.get(_process_options).memory_limit


# the scratch pools keep at most the working-memory limit in force (engines/_scratch.py)
set_memory_limit_source(_memory_limit_in_force)


#: Upper limit of ``max_slices``: the largest slice count any method takes
#: (:func:`ozlinalg.ozaki.params.validate_slices`); Ozaki scheme II uses at most
#: ``min(max_slices, 32)`` moduli (``ozlinalg.ozaki.crt.MAX_MODULI``).
MAX_SLICES_LIMIT = 64


def _integer(name, value):
    """``operator.index(value)`` (bools excluded), or TypeError naming the option."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(f"ozlinalg.options: {name} must be an integer, "
                        f"got {value!r} ({type(value).__name__})") from None


def _choice(name, value, choices):
    """`value` if it is one of the strings `choices`, else ValueError naming the option."""
    if not (isinstance(value, str) and value in choices):
        raise ValueError(f"ozlinalg.options: {name} must be one of "
                         f"{', '.join(map(repr, choices))}, got {value!r}")
    return value


def _min_size(value):
    m = _integer("min_size", value)
    if m < 0:
        raise ValueError(f"ozlinalg.options: min_size must be >= 0, got {value!r}")
    return m


def _native_order(value):
    m = _integer("native_order", value)
    if m < 0:
        raise ValueError(f"ozlinalg.options: native_order must be >= 0, got {value!r}")
    return m


def _max_slices(value):
    s = _integer("max_slices", value)
    if not 1 <= s <= MAX_SLICES_LIMIT:
        raise ValueError(f"ozlinalg.options: max_slices must be between 1 and "
                         f"{MAX_SLICES_LIMIT}, got {value!r}")
    return s


def _memory_limit(value):
    if value is None:
        return None
    try:
        lim = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        lim = None
    if lim is None or lim <= 0:
        raise ValueError(
            f"ozlinalg.options: memory_limit must be a positive number of bytes or "
            f"None (the engine's default), got {value!r}")
    return lim


def _slices(value):
    from .ozaki.params import validate_slices  # noqa: PLC0415

    validate_slices(value)
    return value


def _balance(value):
    from .ozaki.balance import min_shift_for  # noqa: PLC0415

    min_shift_for(value)  # validates
    return value


def _accuracy(value):
    from .ozaki.faithful import validate_accuracy  # noqa: PLC0415

    return validate_accuracy(value)


def _engine(value):
    from .engines.select import validate_engine  # noqa: PLC0415

    return validate_engine(value)


def _method(value):
    from .ozaki.params import validate_method  # noqa: PLC0415

    return validate_method(value)


def _complex_scheme(value):
    from .ozaki.complex import COMPLEX_SCHEMES  # noqa: PLC0415

    return _choice("complex_scheme", value, COMPLEX_SCHEMES)


#: The check of each field: returns the canonical value, or raises
#: TypeError / ValueError naming the option and the value.
_CHECKS = {
    "method": _method,
    "slices": _slices,
    "min_size": _min_size,
    "native_order": _native_order,
    "max_slices": _max_slices,
    "memory_limit": _memory_limit,
    "complex_scheme": _complex_scheme,
    "balance": _balance,
    "strategy": lambda value: _choice("strategy", value, STRATEGIES),
    "engine": _engine,
    "accuracy": _accuracy,
}


def validate(overrides: dict) -> dict:
    """Check option values (names are checked by :meth:`Options.replace`);
    returns `overrides` with canonical values.

    Every field has a check (``tests/test_options.py`` makes sure of it): a
    value of the wrong type raises TypeError, one out of range or unknown
    ValueError, each naming the option and the value.
    """
    for name in [n for n in overrides if n in _CHECKS]:
        overrides[name] = _CHECKS[name](overrides[name])
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
