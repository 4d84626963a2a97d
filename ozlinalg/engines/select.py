"""Which engine multiplies NumPy arrays: oneDNN's INT8 GEMM where it is exact, else the
AVX2 ``vpmaddwd`` GEMM, else SGEMM.

``"auto"`` (the default) takes the oneDNN engine (:mod:`.onednn`) when
``libdnnl.so.3`` loads and its INT8 GEMM passes the one-time exactness
self-test at the extreme values; otherwise the AVX2 engine (:mod:`.avx2`: the
compiled ``vpmaddwd`` GEMM of the x86-64-v3 build, same self-test) where the CPU
has AVX2; and the SGEMM engine where neither can run. The
reasons are kept on the engine (``engine.describe()``, shown by
``ozlinalg.profile()`` and ``python -m ozlinalg compare``).

The SGEMM engine (the name ``"sgemm"``, and ``"auto"``'s last fallback) is the one on
int8 slices with the compiled passes (:mod:`.sgemm_int8`, same self-test) wherever
those load (any x86-64 build, the baseline ``x86-64`` one included), and the float32
one (:mod:`.sgemm`: float32 slices, NumPy passes) where they do not (no build,
``OZLINALG_FUSED=0``). Both are called ``cpu-sgemm``; the engine line says which
ran and why.

Forcing one:

* ``OZLINALG_ENGINE=sgemm|onednn|avx2|auto`` (environment, read when the default
  engine is first created; any other value raises ValueError);
* ``ozlinalg.options(engine="sgemm" | "onednn" | "avx2" | "auto")`` (per context,
  overrides the environment).

What is cached: the engine, or the :class:`~ozlinalg.engines.onednn.EngineUnavailable`
of a genuine verdict (the library or the compiled GEMM is missing, or the INT8 GEMM
gave a wrong answer), for the rest of the process. Anything else raised while
creating an engine (MemoryError during the self-test, KeyboardInterrupt) propagates
and leaves nothing behind: the next call creates it again, so a transient shortage
never demotes ``"auto"`` to a slower engine for good.

Asking for ``"onednn"`` or ``"avx2"`` where it cannot run raises
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
                  "cpu-onednn": "onednn", "int8": "onednn", "avx2": "avx2",
                  "cpu-avx2": "avx2"}

#: What ``"auto"`` runs where oneDNN cannot, in order of preference: the AVX2 engine
#: (exact; measured faster than SGEMM on a 2-core AMD EPYC Zen 2 without VNNI,
#: docs/performance.md "The AVX2 engine"), then SGEMM.
FALLBACKS = ("avx2", "sgemm")

_LOCK = fork_safe_lock()
#: "sgemm" / "onednn" / "avx2" -> Engine or the EngineUnavailable it raised;
#: "fallback" -> the engine "auto" runs where oneDNN cannot
_CACHE: dict = {}


def validate_engine(name):
    """Canonical engine name ("auto", "sgemm", "onednn", "avx2") or ValueError; None
    stays None."""
    if name is None:
        return None
    key = str(name).strip().lower()
    if key not in ENGINE_CHOICES:
        raise ValueError(f"ozlinalg: unknown engine {name!r}; choose 'auto', 'onednn' "
                         "(exact INT8 GEMM on the CPU's INT8 units), 'avx2' (exact INT8 "
                         "GEMM on AVX2 vpmaddwd) or 'sgemm' (INT8 values on BLAS SGEMM)")
    return ENGINE_CHOICES[key]


def _sgemm():
    """The engine called "sgemm": SGEMM on int8 slices with the compiled passes
    (:mod:`.sgemm_int8`) where they load, else the float32 engine (:mod:`.sgemm`), which
    says why in its engine line. Never a verdict: SGEMM runs everywhere."""
    from . import kernels  # noqa: PLC0415

    mod, reason = kernels.load()
    if mod is None:
        return SGEMMEngine(why=f"no compiled passes: {reason}")
    from .onednn import EngineUnavailable  # noqa: PLC0415
    from .sgemm_int8 import SGEMMInt8Engine  # noqa: PLC0415

    try:
        return SGEMMInt8Engine()
    except EngineUnavailable as exc:  # cannot happen with an IEEE SGEMM: said if it does
        return SGEMMEngine(why=str(exc))


def _create(name):
    """A new engine ``name``, or the EngineUnavailable of its verdict."""
    if name == "sgemm":
        return _sgemm()
    from .onednn import EngineUnavailable  # noqa: PLC0415

    # Only a verdict is kept; a MemoryError or KeyboardInterrupt passes
    # through with nothing cached, and the next call tries again.
    try:
        if name == "avx2":
            from .avx2 import AVX2Engine  # noqa: PLC0415

            return AVX2Engine()
        from .onednn import OneDNNEngine  # noqa: PLC0415

        return OneDNNEngine()
    except EngineUnavailable as exc:
        return exc


def _make(name):
    with _LOCK:
        if name not in _CACHE:
            check_environment()  # whichever engine: a bad variable raises, never demotes
            _CACHE[name] = _create(name)
        return _CACHE[name]


_NAMES = {"avx2": "AVX2", "onednn": "oneDNN"}


def _fallback(verdict):
    """The engine "auto" runs when oneDNN cannot: the first of :data:`FALLBACKS` whose
    named engine runs here (SGEMM always does), a new instance carrying ``verdict``
    and the verdicts of the engines passed over as its reason. One engine per
    verdict, never relabelled: an engine already handed out (and cached by
    :func:`~ozlinalg.engines.base.get_engine`) keeps the reason it was chosen for."""
    with _LOCK:
        eng = _CACHE.get("fallback")
        if eng is not None and eng.selection_verdict is verdict:
            return eng
    why = [f"oneDNN engine not used: {verdict}"]
    name = "sgemm"
    for cand in FALLBACKS[:-1]:
        named = _make(cand)  # its verdict, cached: decides once per process
        if not isinstance(named, Exception):
            name = cand
            break
        why.append(f"{_NAMES[cand]} engine not used: {named}")
    with _LOCK:
        eng = _CACHE.get("fallback")
        if eng is None or eng.selection_verdict is not verdict:
            eng = _create(name)
            if isinstance(eng, Exception):  # passed as the named engine: cannot happen
                raise eng
            eng.selection_verdict = verdict
            eng.selection_reason = "; ".join(why)
            _CACHE["fallback"] = eng
        return eng


def cpu_engine(name="auto"):
    """The NumPy engine called ``name`` ("auto", "sgemm", "onednn", "avx2"), created once."""
    name = validate_engine(name) or "auto"
    if name == "auto":
        eng = _make("onednn")
        if not isinstance(eng, Exception):
            return eng
        return _fallback(eng)
    eng = _make(name)
    if isinstance(eng, Exception):
        raise type(eng)(f"ozlinalg: engine {name!r} was asked for but cannot run: {eng}")
    return eng


def _env_engine():
    """``OZLINALG_ENGINE`` as a canonical name, ``"auto"`` when unset, or ValueError."""
    env = env_text(ENV_ENGINE)
    if env is None:
        return "auto"
    try:
        return validate_engine(env)
    except ValueError:
        raise invalid(ENV_ENGINE, env, "auto, onednn, avx2 or sgemm") from None


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
