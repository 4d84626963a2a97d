"""Library-wide defaults, overridable per context with ``ozlinalg.options()``.

Like :func:`numpy.errstate`, the settings live in a ContextVar that is set on
enter and reset with its token on exit, so they are thread- and task-local.
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import operator
from dataclasses import dataclass

import numpy as np

from .engines import get_engine, set_memory_limit_source
from .ozaki import faithful as _faithful
from .ozaki import params as _params
from .ozaki.balance import min_shift_for as _min_shift_for

__all__ = ["Options", "Plan", "options", "get_options", "current_engine", "resolve",
           "STRATEGIES", "default_options", "explicit_names", "options_getter", "use_options",
           "restore_options"]

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
    min_order : int or None
        Calls on matrices of order below this run as native LAPACK: the
        factorizations, solves and decompositions called by name
        (``ozlinalg.linalg.*``, ``ozlinalg.solve``) and, under
        ``strategy="eager"``, the calls routed by the backend. Once a call is
        emulated, every product inside it is, whatever its size. ``None`` (the
        default): the value of `min_size`.
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
    count_check : bool
        Check a fixed ``slices`` count against what ``slices="auto"`` would pick for
        the inputs, with an :class:`~ozlinalg.AccuracyWarning` where it is below
        (:mod:`ozlinalg.ozaki.counts.adequacy`; the result never changes). Default
        True. The refined solves turn it off for their deliberately reduced counts,
        which they verify by FP64 residuals.
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
    min_order: object = None
    native_order: int = 16
    max_slices: int = 20
    memory_limit: object = None
    complex_scheme: str = "4m"
    balance: object = "auto"
    strategy: str = "eager"
    engine: object = None
    accuracy: str = "dgemm"
    count_check: bool = True

    def __post_init__(self):
        # The names set by options() / backend() / install() on the way here (not
        # defaults): the backend's "performant" strategy runs the tuned method only
        # where "method" is not among them (docs/tuning.md). Not a field: it takes
        # no part in equality, hashing or repr; read it with explicit_names().
        object.__setattr__(self, "_explicit", frozenset())

    def __getstate__(self):
        # the plans kept by resolve() hold engines and array modules: not pickled
        # (dask tasks carry options to other processes), made again where needed
        state = dict(self.__dict__)
        state.pop("_plans", None)
        return state

    @property
    def call_min_order(self) -> int:
        """The order from which calls are emulated: `min_order`, else `min_size`."""
        return self.min_size if self.min_order is None else self.min_order

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


@dataclass(frozen=True)
class Plan:
    """What one public call computes with, resolved once at its front door.

    The front doors (:func:`ozlinalg.matmul`, the functions of
    :mod:`ozlinalg.linalg` and :mod:`ozlinalg.dask`, the routed calls) read the
    options in force once, validate them and look the engine up, through
    :func:`resolve`; everything below takes the plan as an argument and reads no
    ambient state.

    Attributes
    ----------
    xp : module
        The array module of the call's operands (NumPy or CuPy).
    options : Options
        The call's options (the product threshold ``options.min_size`` included).
    method : ozlinalg.ozaki.params.Method
        The validated emulated-GEMM method.
    slices : int or "auto"
        The validated slice (crt: moduli) count.
    min_shift : int or None
        The balancing threshold of the products
        (:func:`ozlinalg.ozaki.balance.min_shift_for`; None: no balancing).
    engine : ozlinalg.engines.Engine
        The engine that multiplies `xp` arrays under `options`.
    min_order : int
        Below this matrix order a factorization, solve or decomposition runs as
        native LAPACK (:attr:`Options.call_min_order`).
    """

    xp: object
    options: Options
    method: object
    slices: object
    min_shift: object
    engine: object
    min_order: int

    @property
    def accuracy(self) -> str:
        return self.options.accuracy

    @functools.cached_property
    def inside(self) -> Plan:
        """The plan of the products inside an emulated call: `min_order` decided the
        call, so every product in it is emulated, however small (a trailing update
        narrower than ``min_size`` is not silently native)."""
        if self.options.min_size == 0:
            return self
        return dataclasses.replace(self, options=self.options.replace(min_size=0))

    @functools.cached_property
    def faithful(self) -> Plan:
        """This plan with every product certified faithful (``accuracy="faithful"``)."""
        if self.options.accuracy == "faithful":
            return self
        _faithful.check_method(self.method)
        return dataclasses.replace(self, options=self.options.replace(accuracy="faithful"))

    @functools.cached_property
    def balanced(self) -> Plan:
        """This plan with every product's inner dimension balanced
        (``balance=True``: the blocked factorizations' updates)."""
        return self if self.min_shift == 1 else dataclasses.replace(self, min_shift=1)

    def with_counts(self, method=None, slices=None, count_check=None) -> Plan:
        """This plan with another method and / or count (validated); `count_check`
        False: those counts are deliberate, no :class:`~ozlinalg.AccuracyWarning`."""
        meth = self.method if method is None else _params.METHODS[
            _params.validate_method(method)]
        if slices is not None:
            _params.validate_slices(slices)
        else:
            slices = self.slices
        if self.options.accuracy == "faithful":
            _faithful.check_method(meth)
        opts = self.options
        if count_check is not None and bool(count_check) != opts.count_check:
            opts = opts.replace(count_check=bool(count_check))
        return dataclasses.replace(self, options=opts, method=meth, slices=slices)


def resolve(xp, *, opts=None, method=None, slices=None, moduli=None, balance=None,
            accuracy=None, fname="ozlinalg.matmul") -> Plan:
    """The :class:`Plan` of a call on `xp` arrays: the options in force (or `opts`)
    with the call's own arguments (None: the option's value), validated once,
    and the engine looked up once.

    A call that names nothing but its arrays gets the plan its options value made
    before (kept on that value: ``Options`` is frozen, so its plan cannot go stale),
    as long as the options still name the same engine object."""
    if opts is None:
        opts = _OPTIONS.get(_process_options)
    engine = get_engine(xp, opts.engine)
    plain = (method is None and slices is None and moduli is None and balance is None
             and accuracy is None)
    if plain:
        memo = opts.__dict__.get("_plans")
        plan = None if memo is None else memo.get(xp)
        if plan is not None and plan.engine is engine:
            return plan
    meth = _params.METHODS[_params.validate_method(opts.method if method is None else method)]
    slices = _params.count_from_moduli(meth.name, slices, moduli, fname)
    slices = opts.slices if slices is None else slices
    _params.validate_slices(slices)
    min_shift = _min_shift_for(opts.balance if balance is None else balance)
    if accuracy is not None and accuracy != opts.accuracy:
        opts = opts.replace(accuracy=_faithful.validate_accuracy(accuracy))
    if opts.accuracy == "faithful":
        _faithful.check_method(meth)
    plan = Plan(xp, opts, meth, slices, min_shift, engine, opts.call_min_order)
    if plain:
        memo = opts.__dict__.get("_plans")
        if memo is None:
            memo = {}
            object.__setattr__(opts, "_plans", memo)
        memo[xp] = plan
    return plan


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


def _min_order(value):
    if value is None:
        return None
    m = _integer("min_order", value)
    if m < 0:
        raise ValueError(f"ozlinalg.options: min_order must be >= 0 or None, got {value!r}")
    return m


def _count_check(value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"ozlinalg.options: count_check must be True or False, "
                        f"got {value!r} ({type(value).__name__})")
    return bool(value)


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
    "min_order": _min_order,
    "native_order": _native_order,
    "max_slices": _max_slices,
    "memory_limit": _memory_limit,
    "complex_scheme": _complex_scheme,
    "balance": _balance,
    "strategy": lambda value: _choice("strategy", value, STRATEGIES),
    "engine": _engine,
    "accuracy": _accuracy,
    "count_check": _count_check,
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


# accessors for the routing layer


def default_options() -> Options:
    """The library defaults: what a context sees without :func:`options` blocks or
    :func:`ozlinalg.install` (one shared, frozen instance)."""
    return _DEFAULTS


def explicit_names(opts: Options) -> frozenset:
    """The option names set on the way to `opts` by :func:`options`, ``backend()``
    or ``install()`` (not left at their defaults): the backend's "performant"
    strategy runs its tuned method only where ``"method"`` is not among them."""
    return opts._explicit


def options_getter():
    """The bound ``get`` of the context's options: ``options_getter()(default)`` is
    the options of the innermost :func:`options` block (or ``backend()``) of the
    current context, else `default`. With :func:`ozlinalg.install`'s options as
    `default` it is :func:`get_options` without a Python frame, for the backend's
    shims, which read the options on every call."""
    return _OPTIONS.get


def use_options(opts: Options) -> contextvars.Token:
    """Make `opts` (already merged and validated) the options in force in the
    current context, as entering an :func:`options` block does; returns the token
    that :func:`restore_options` takes. For ``backend()``, which keeps its merged
    Options between entries instead of rebuilding them each time."""
    return _OPTIONS.set(opts)


def restore_options(token: contextvars.Token) -> None:
    """Put back the options in force before :func:`use_options` gave `token`."""
    _OPTIONS.reset(token)
