"""Library-wide defaults, overridable per context with ``ozlinalg.options()``.

Like :func:`numpy.errstate`, the settings live in a ContextVar that is set on
enter and reset with its token on exit, so they are thread- and task-local.
"""
from __future__ import annotations

import contextvars
import dataclasses
from dataclasses import dataclass

__all__ = ["Options", "options", "get_options"]


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
    """

    method: str = "hybrid-ef"
    slices: object = "auto"
    min_size: int = 0
    max_slices: int = 20
    memory_limit: object = None
    complex_scheme: str = "4m"
    balance: object = "auto"

    def replace(self, **changes) -> Options:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"ozlinalg.options: unknown option(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


_DEFAULTS = Options()  # frozen, so sharing it as the ContextVar default is safe
_OPTIONS: contextvars.ContextVar[Options] = contextvars.ContextVar(
    "ozlinalg_options", default=_DEFAULTS  # noqa: B039
)


def get_options() -> Options:
    """The options in force in the current context."""
    return _OPTIONS.get()


class options:
    """Context manager overriding defaults inside a block.

    >>> import ozlinalg
    >>> with ozlinalg.options(method="bitmask-ef", slices=9):
    ...     ozlinalg.get_options().slices
    9
    """

    def __init__(self, **overrides):
        from .ozaki.params import validate_method, validate_slices

        if "method" in overrides:
            overrides["method"] = validate_method(overrides["method"])
        if "slices" in overrides:
            validate_slices(overrides["slices"])
        if "balance" in overrides:
            from .ozaki.balance import min_shift_for

            min_shift_for(overrides["balance"])  # validates
        if overrides.get("memory_limit") is not None:
            lim = overrides["memory_limit"]
            if isinstance(lim, bool) or not isinstance(lim, int) or lim <= 0:
                raise ValueError(
                    f"ozlinalg.options: memory_limit must be a positive number of bytes or "
                    f"None (the engine's default), got {lim!r}")
        self._overrides = overrides
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
