"""Which engine multiplies NumPy arrays: oneDNN's INT8 GEMM where it is exact, else SGEMM.

``"auto"`` (the default) takes the oneDNN engine (:mod:`.onednn`) when
``libdnnl.so.3`` loads and its INT8 GEMM passes the one-time exactness
self-test at the extreme values, and the SGEMM engine (:mod:`.sgemm`)
otherwise; the reason is kept on the engine (``engine.describe()``, shown by
``ozlinalg.profile()`` and ``python -m ozlinalg compare``).

Forcing one:

* ``OZLINALG_ENGINE=sgemm|onednn|auto`` (environment, read when the default
  engine is first created; any other value raises ValueError);
* ``ozlinalg.options(engine="sgemm" | "onednn" | "auto")`` (per context,
  overrides the environment).

What is cached: the engine, or the :class:`~ozlinalg.engines.onednn.EngineUnavailable`
of a genuine verdict (the library does not load, or its INT8 GEMM gave a wrong
answer), for the rest of the process. Anything else raised while creating an
engine (MemoryError during the self-test, KeyboardInterrupt) propagates and
leaves nothing behind: the next call creates it again, so a transient shortage
never demotes ``"auto"`` to SGEMM for good.

Asking for ``"onednn"`` where it cannot run raises
:class:`~ozlinalg.engines.onednn.EngineUnavailable` with the reason: it
never falls back silently to an engine the caller did not choose, and never
runs where it is not exact.
"""
from __future__ import annotations

from .._env import env_text, invalid
from ._process import fork_safe_lock
from .base import register_engine
from .sgemm import SGEMMEngine

__all__ = ["ENGINE_CHOICES", "ENV_ENGINE", "check_environment", "cpu_engine",
           "default_cpu_engine", "validate_engine"]

ENV_ENGINE = "OZLINALG_ENGINE"

#: Accepted names (and aliases) of the NumPy engines.
ENGINE_CHOICES = {"auto": "auto", "sgemm": "sgemm", "cpu-sgemm": "sgemm", "onednn": "onednn",
                  "cpu-onednn": "onednn", "int8": "onednn"}

_LOCK = fork_safe_lock()
_CACHE: dict = {}  # "sgemm" / "onednn" -> Engine or the EngineUnavailable it raised


def validate_engine(name):
    """Canonical engine name ("auto", "sgemm", "onednn") or ValueError; None stays None."""
    if name is None:
        return None
    key = str(name).strip().lower()
    if key not in ENGINE_CHOICES:
        raise ValueError(f"ozlinalg: unknown engine {name!r}; choose 'auto', 'onednn' "
                         "(exact INT8 GEMM on the CPU's INT8 units) or 'sgemm' "
                         "(INT8 values on BLAS SGEMM)")
    return ENGINE_CHOICES[key]


def _make(name):
    with _LOCK:
        if name not in _CACHE:
            check_environment()  # whichever engine: a bad variable raises, never demotes
            if name == "sgemm":
                _CACHE[name] = SGEMMEngine()
            else:
                from .onednn import EngineUnavailable, OneDNNEngine  # noqa: PLC0415

                # Only a verdict is kept; a MemoryError or KeyboardInterrupt passes
                # through with nothing cached, and the next call tries again.
                try:
                    _CACHE[name] = OneDNNEngine()
                except EngineUnavailable as exc:
                    _CACHE[name] = exc
        return _CACHE[name]


def _fallback(verdict):
    """The SGEMM engine "auto" runs when oneDNN cannot, carrying ``verdict`` as its
    reason. One engine per verdict, never relabelled: an engine already handed out
    (and cached by :func:`~ozlinalg.engines.base.get_engine`) keeps the reason it
    was chosen for."""
    with _LOCK:
        eng = _CACHE.get("sgemm-fallback")
        if eng is None or eng.selection_verdict is not verdict:
            eng = SGEMMEngine()
            eng.selection_verdict = verdict
            eng.selection_reason = f"oneDNN engine not used: {verdict}"
            _CACHE["sgemm-fallback"] = eng
        return eng


def cpu_engine(name="auto"):
    """The NumPy engine called ``name`` ("auto", "sgemm", "onednn"), created once."""
    name = validate_engine(name) or "auto"
    if name == "auto":
        eng = _make("onednn")
        if not isinstance(eng, Exception):
            return eng
        return _fallback(eng)
    eng = _make(name)
    if isinstance(eng, Exception):
        raise type(eng)(f"ozlinalg: engine 'onednn' was asked for but cannot run: {eng}")
    return eng


def _env_engine():
    """``OZLINALG_ENGINE`` as a canonical name, ``"auto"`` when unset, or ValueError."""
    env = env_text(ENV_ENGINE)
    if env is None:
        return "auto"
    try:
        return validate_engine(env)
    except ValueError:
        raise invalid(ENV_ENGINE, env, "auto, onednn or sgemm") from None


def default_cpu_engine():
    """The default NumPy engine: ``OZLINALG_ENGINE`` if set, else ``"auto"``."""
    return cpu_engine(_env_engine())


def check_environment():
    """Check every environment variable the NumPy engines read, without creating one.

    ``OZLINALG_ENGINE``, ``OZLINALG_SCRATCH_CACHE``, ``OZLINALG_FUSED``,
    ``OZLINALG_KERNELS_ISA`` and ``OZLINALG_ONEDNN_LIBRARY``: ValueError naming
    the first bad one (see
    :mod:`ozlinalg._env`). Runs before each NumPy engine is created (so a bad
    value raises whichever engine is asked for, and ``"auto"`` never takes it
    for a failed oneDNN), and in ``python -m ozlinalg run`` before the program
    starts.
    """
    from . import _dnnl, kernels  # noqa: PLC0415
    from ._scratch import default_limit  # noqa: PLC0415

    _env_engine()
    default_limit()
    kernels.check_environment()
    if env_text(_dnnl.ENV_LIBRARY) is not None:
        _dnnl.find_library()  # decided by the variable alone: checks it, loads nothing


register_engine("numpy", default_cpu_engine, named=cpu_engine)
