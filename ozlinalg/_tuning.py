"""Per-machine tuning: where the backend's "performant" strategy starts to emulate.

:meth:`ozlinalg.engines.base.Engine.tuned` asks :func:`tuned` for the crossover of an
operation (:data:`TUNED_OPS`) and the method that runs it fastest. The answer comes
from the first of

1. **the cache** that ``python -m ozlinalg tune`` wrote for this machine
   (:func:`load`): plain JSON, keyed by the CPU, its ISA features, the engine and
   its threads, the BLAS threads and the library versions, validated on every
   read against :func:`validate` (types, ranges, known operations and methods);
2. **the engine's committed constants** (``Engine.crossovers``, measured once on
   the machine their comment names);
3. **a conservative model** (:func:`model_crossover`, CPU engines): the engine's
   INT8 GEMM rate (``Engine.int8_rate()``, a probe of about a millisecond) and the
   DGEMM rate of a probe here at n = 1024 (:func:`host_rates`), each taken once per
   process on first need, predict the emulated / native time ratio per method
   from the INT8 GEMMs and passes a DGEMM-level product takes; the INT8 / DGEMM
   rate ratio is capped at what the ISA allows (``Engine.int8_peak_ratio()``: a
   DGEMM probe slowed by a busy machine must not make emulation look fast); an
   order is named only where the ratio times :data:`MODEL_MARGIN` stays below 1
   from there on;
4. **never** (``None``).

``OZLINALG_TUNING`` chooses the sources: ``auto`` (the default: all four),
``cache`` (no model), ``off`` (the engine's constants only, no file read).
``OZLINALG_CACHE_DIR`` overrides the cache directory (default: platformdirs'
user cache dir where platformdirs is installed, else ``$XDG_CACHE_HOME/ozlinalg``
or ``~/.cache/ozlinalg``).

A cache file that cannot be used -- not JSON, wrong types or ranges, another
machine's key (*foreign*), other library versions (*stale*) -- is ignored with
one :class:`ozlinalg.PerformanceWarning` per process, and the model answers.
Nothing in a file is ever evaluated: it is parsed by :func:`json.loads` and
checked field by field. A missing or read-only directory is no error: the
library falls back, and ``tune`` reports that it cannot write. Writes are atomic
(a temporary file in the same directory, then :func:`os.replace`).

This module is on the ground floor: it gets the engine as an argument and calls
its documented methods (``tuning_facts``, ``int8_rate``, ``crossovers``,
``block_size``); it imports nothing of ozlinalg but :mod:`ozlinalg._env` and
:mod:`ozlinalg._exceptions`. See docs/tuning.md.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import sys
import tempfile
import threading
import time
import warnings
from typing import NamedTuple

from ._env import env_text, invalid
from ._exceptions import PerformanceWarning

__all__ = ["ENV_CACHE_DIR", "ENV_TUNING", "FACTORIZATION_OPS", "REFINED_OPS", "SCHEMA",
           "SPECTRAL_OPS", "TUNABLE_METHODS", "TUNED_OPS", "Tuned", "cache_dir", "cache_path",
           "host_rates", "key_for", "load", "model_crossover", "store", "tuned", "validate"]

ENV_CACHE_DIR = "OZLINALG_CACHE_DIR"
ENV_TUNING = "OZLINALG_TUNING"
TUNING_MODES = ("auto", "cache", "off")

#: Version of the file layout (:func:`validate`); another number is a stale file.
SCHEMA = 1

FACTORIZATION_OPS = ("getrf", "potrf", "geqrf")
#: The refined solves (``ozlinalg.solve(a, b, refine=True)``, ``assume_a="pos"``).
REFINED_OPS = ("gesv_refined", "posv_refined")
#: The spectral decompositions, named by the LAPACK driver of their native baseline:
#: ``syevd`` (``eigh``, ``eigvalsh``), ``gesdd`` (``svd``, ``svdvals``, ``pinv``,
#: ``matrix_rank``, ``polar``).
SPECTRAL_OPS = ("syevd", "gesdd")
#: Every operation with a crossover (``ozlinalg.engines.base.CROSSOVER_OPS``).
TUNED_OPS = ("matmul", *FACTORIZATION_OPS, *REFINED_OPS, *SPECTRAL_OPS)
#: The methods the tuner compares; both meet the DGEMM-level accuracy contract
#: with ``slices="auto"`` (the count rules of ozaki/counts/).
TUNABLE_METHODS = ("hybrid-ef", "crt")

#: Largest order a cache may name (anything above is a corrupt file).
MAX_ORDER = 1 << 20
#: A cache file larger than this is not read.
MAX_FILE_BYTES = 1 << 20


class Tuned(NamedTuple):
    """What the tuning says about one operation on one engine."""

    order: int | None  # emulate from this order on; None: never
    method: str | None  # the fastest method meeting the accuracy contract (None: default)
    source: str  # "cache <path>", "engine constants", "model (...)", "none"


# -- the cache's place and key ---------------------------------------------------------

def tuning_mode() -> str:
    text = env_text(ENV_TUNING)
    if text is None:
        return "auto"
    if text.lower() not in TUNING_MODES:
        raise invalid(ENV_TUNING, text, "one of " + ", ".join(TUNING_MODES))
    return text.lower()


def cache_dir() -> str:
    """The cache directory: ``OZLINALG_CACHE_DIR``, platformdirs' user cache dir,
    ``$XDG_CACHE_HOME/ozlinalg`` or ``~/.cache/ozlinalg`` (it need not exist)."""
    env = env_text(ENV_CACHE_DIR)
    if env is not None:
        return os.path.abspath(os.path.expanduser(env))
    try:
        import platformdirs  # noqa: PLC0415

        return platformdirs.user_cache_dir("ozlinalg", appauthor=False)
    except ImportError:
        base = env_text("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "ozlinalg")


#: CPU features that decide an engine's INT8 and FP64 rates.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni",
             "amx_tile", "amx_int8", "amx_bf16")


def _cpu(cpuinfo="/proc/cpuinfo"):
    """``(model name, relevant ISA flags)`` of this CPU."""
    model, flags = None, set()
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "model name" and model is None:
                    model = value.strip()
                elif name == "flags" and not flags:
                    flags = set(value.split())
                if model is not None and flags:
                    break
    except OSError:
        pass
    return (model or platform.processor() or platform.machine() or "unknown",
            [f for f in ISA_FLAGS if f in flags])


def _version(mod):
    m = sys.modules.get(mod)
    v = getattr(m, "__version__", None)
    if v is None:
        try:
            from importlib.metadata import version  # noqa: PLC0415

            v = version(mod)
        except Exception:  # noqa: BLE001 (not installed: no version to compare)
            v = None
    return None if v is None else str(v)


def key_for(engine) -> dict:
    """The cache key of `engine` on this machine: ``{"machine": {...}, "versions": {...}}``.

    ``machine``: CPU model, its ISA flags (:data:`ISA_FLAGS`), and the engine's
    ``tuning_facts()`` (name, ISA, threads, BLAS threads); ``versions``: ozlinalg,
    NumPy, SciPy and the engine's libraries (oneDNN). A file with another machine
    part is foreign, one with other versions stale. Computed once per engine.
    """
    cached = engine.__dict__.get("_tuning_key")
    if cached is not None:
        return cached
    model, flags = _cpu()
    facts = dict(engine.tuning_facts())
    libs = facts.pop("libraries", {}) or {}
    versions = {"ozlinalg": _version("ozlinalg"), "numpy": _version("numpy"),
                "scipy": _version("scipy"), **{k: str(v) for k, v in libs.items()}}
    key = {"machine": {"cpu": model, "isa_flags": flags, **facts}, "versions": versions}
    key = json.loads(json.dumps(key))  # plain JSON types, as a file would give them back
    engine.__dict__["_tuning_key"] = key
    return key


def cache_path(engine, directory=None) -> str:
    """The file of `engine`'s key: ``tuning-<engine>-<hash of the machine part>.json``
    (the versions are checked inside, so a stale file is found and reported)."""
    key = key_for(engine)
    digest = hashlib.sha256(json.dumps(key["machine"], sort_keys=True).encode()).hexdigest()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(key["machine"].get("engine", "engine")))
    return os.path.join(directory or cache_dir(), f"tuning-{name}-{digest[:16]}.json")


# -- validation -------------------------------------------------------------------------

class CacheError(ValueError):
    """A cache file that cannot be used; ``kind`` is "corrupt", "foreign" or "stale"."""

    def __init__(self, kind, detail):
        super().__init__(detail)
        self.kind = kind


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x):
    return (_is_int(x) or isinstance(x, float)) and math.isfinite(x)


def _check_op(op, entry):
    if op not in TUNED_OPS:
        raise CacheError("corrupt", f"unknown operation {op!r}")
    if not isinstance(entry, dict):
        raise CacheError("corrupt", f"{op}: not an object")
    unknown = set(entry) - {"crossover", "method", "measured", "extrapolated", "ratios",
                            "note"}
    if unknown:
        raise CacheError("corrupt", f"{op}: unknown fields {sorted(unknown)}")
    cross = entry.get("crossover")
    if cross is not None and not (_is_int(cross) and 1 <= cross <= MAX_ORDER):
        raise CacheError("corrupt", f"{op}: crossover {cross!r} is not an order")
    method = entry.get("method")
    if method is not None and method not in TUNABLE_METHODS:
        raise CacheError("corrupt", f"{op}: unknown method {method!r}")
    for flag in ("measured", "extrapolated"):
        if not isinstance(entry.get(flag, False), bool):
            raise CacheError("corrupt", f"{op}: {flag} is not a boolean")
    if not isinstance(entry.get("note", ""), str):
        raise CacheError("corrupt", f"{op}: note is not text")
    ratios = entry.get("ratios", {})
    if not isinstance(ratios, dict):
        raise CacheError("corrupt", f"{op}: ratios is not an object")
    for n, per in ratios.items():
        if not (isinstance(n, str) and n.isdigit() and 1 <= int(n) <= MAX_ORDER
                and isinstance(per, dict)):
            raise CacheError("corrupt", f"{op}: ratios[{n!r}] is not order -> methods")
        for m, r in per.items():
            if m not in TUNABLE_METHODS or not (_is_num(r) and 0 < r < 1e6):
                raise CacheError("corrupt", f"{op}: ratio {m!r}: {r!r} at order {n}")


def validate(data, key) -> dict:
    """`data` (parsed JSON) as a cache of `key`, or :class:`CacheError`.

    The layout: ``{"schema": 1, "key": key, "created": str, "elapsed_s": number,
    "ops": {op: {"crossover": int | null, "method": "hybrid-ef" | "crt" | null,
    "measured": bool, "extrapolated": bool, "ratios": {"n": {method: ratio}},
    "note": str}}}``; ops from :data:`TUNED_OPS`, orders 1 .. 2**20, ratios
    positive and finite.
    """
    if not isinstance(data, dict):
        raise CacheError("corrupt", "not a JSON object")
    if data.get("schema") != SCHEMA:
        raise CacheError("stale", f"schema {data.get('schema')!r}, this ozlinalg reads {SCHEMA}")
    unknown = set(data) - {"schema", "key", "created", "elapsed_s", "ops"}
    if unknown:
        raise CacheError("corrupt", f"unknown fields {sorted(unknown)}")
    got = data.get("key")
    if not (isinstance(got, dict) and isinstance(got.get("machine"), dict)
            and isinstance(got.get("versions"), dict)):
        raise CacheError("corrupt", "no key")
    if got["machine"] != key["machine"]:
        raise CacheError("foreign", "written for another machine or engine configuration")
    if got["versions"] != key["versions"]:
        raise CacheError("stale", f"written with {got['versions']}, running {key['versions']}")
    if not isinstance(data.get("created", ""), str) or not _is_num(data.get("elapsed_s", 0)):
        raise CacheError("corrupt", "created / elapsed_s of the wrong type")
    ops = data.get("ops")
    if not isinstance(ops, dict):
        raise CacheError("corrupt", "ops is not an object")
    for op, entry in ops.items():
        _check_op(op, entry)
    return data


# -- reading and writing ----------------------------------------------------------------

_LOCK = threading.Lock()
_WARNED: list = []  # one warning per process
_READ: dict = {}  # path -> ((mtime_ns, size), data or None)


def _warn_once(path, exc):
    with _LOCK:
        if _WARNED:
            return
        _WARNED.append(True)
    warnings.warn(f"ozlinalg: ignoring the tuning cache {path} ({exc.kind}: {exc}); the "
                  "backend uses the engine's model instead. Run `python -m ozlinalg tune` "
                  "to measure this machine again.", PerformanceWarning, stacklevel=4)


def load(engine, directory=None):
    """``(data, path)``: `engine`'s validated cache, or ``(None, path)`` where there is
    none (missing, unreadable) or it cannot be used (one warning per process).

    Read again only when the file changes (modification time and size)."""
    path = cache_path(engine, directory)
    try:
        st = os.stat(path)
    except OSError:
        return None, path
    stamp = (st.st_mtime_ns, st.st_size)
    seen = _READ.get(path)
    if seen is not None and seen[0] == stamp:
        return seen[1], path
    data = None
    try:
        if st.st_size > MAX_FILE_BYTES:
            raise CacheError("corrupt", f"{st.st_size} bytes")
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        try:
            parsed = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise CacheError("corrupt", f"not JSON ({type(exc).__name__})") from None
        data = validate(parsed, key_for(engine))
    except CacheError as exc:
        _warn_once(path, exc)
    except OSError:
        return None, path
    _READ[path] = (stamp, data)
    return data, path


def store(engine, ops, elapsed_s, directory=None) -> str:
    """Write `engine`'s cache (``ops`` as :func:`validate` describes) atomically;
    returns the path. Raises OSError where the directory cannot be written, and
    :class:`CacheError` for ops that would not validate."""
    data = {"schema": SCHEMA, "key": key_for(engine),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "elapsed_s": round(float(elapsed_s), 3), "ops": ops}
    data = validate(json.loads(json.dumps(data)), key_for(engine))
    path = cache_path(engine, directory)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


# -- the model --------------------------------------------------------------------------

#: Per method: INT8 GEMMs of one DGEMM-level product (hybrid-ef: 9 slices, s (s + 1) / 2
#: = 45 products; crt: 15 moduli and the bound product; both counted by
#: ``ozlinalg.profile()`` at n = 256 .. 2048, phi = 0.5) and passes over an n x n array
#: (splits of both operands, one accumulation per product group or modulus, the
#: rebuild), each costed as an FP64 ``acc += x`` of that size.
MODEL_METHODS = {"hybrid-ef": (45, 30), "crt": (16, 50)}
#: The model names an order only where ``ratio * MODEL_MARGIN < 1`` there and at
#: every larger order of :data:`MODEL_ORDERS`, and never below :data:`MODEL_MIN_ORDER`
#: (the probes say nothing about small calls' fixed costs).
MODEL_MARGIN = 1.25
MODEL_MIN_ORDER = 1024
MODEL_ORDERS = tuple(range(512, 16384 + 1, 256)) + (24576, 32768, 65536)
#: Share of a blocked factorization's flops in its native panels: about
#: ``PANEL_SHARE[op] * block_size / n``; the panels run on one BLAS thread.
PANEL_SHARE = {"getrf": 0.75, "potrf": 1.5, "geqrf": 1.5}
DEFAULT_BLOCK = 256

_RATES: dict = {}


def host_rates(n=MODEL_MIN_ORDER, repeat=3):
    """``(dgemm flops/s, seconds per entry of an FP64 pass)`` of NumPy here, measured
    once per process (an n x n DGEMM and ``acc += x``, best of `repeat` after a warm-up:
    about 0.2 s at 40 GFLOP/s), thread-safe. The BLAS keeps the threads it has.

    n = 1024, the smallest order the model names (and ``python -m ozlinalg compare``'s
    default n): the model applies this rate at n >= 1024, so it is taken there. At
    n = 512 a call is a few ms of work, and a fixed cost per call (a multithreaded BLAS
    call waits until each of its threads gets a core: about 10 ms on a shared 2-core
    machine) made the probe report 11 GFLOP/s where the same process multiplied at
    38-42 GFLOP/s from n = 1000 on -- a third of the rate ``compare`` prints, and a
    model that took native FP64 for slower than it is."""
    with _LOCK:
        if "host" in _RATES:
            return _RATES["host"]
    import numpy as np  # noqa: PLC0415

    a = np.random.default_rng(0).standard_normal((n, n))
    acc = np.zeros((n, n))
    best_g = best_p = float("inf")
    a @ a  # noqa: B018 (warm: the BLAS threads start)
    for _ in range(repeat):
        t = time.perf_counter()
        a @ a  # noqa: B018
        best_g = min(best_g, time.perf_counter() - t)
        t = time.perf_counter()
        acc += a
        best_p = min(best_p, time.perf_counter() - t)
    rates = (2.0 * n**3 / max(best_g, 1e-9), max(best_p, 1e-12) / (n * n))
    with _LOCK:
        return _RATES.setdefault("host", rates)


def model_ratio(op, n, int8_rate, dgemm_rate, pass_seconds, method, *, block=DEFAULT_BLOCK,
                threads=1):
    """Predicted emulated / native time of `op` at order `n` with `method`."""
    gemms, passes = MODEL_METHODS[method]
    products = gemms * dgemm_rate / int8_rate
    pass_cost = passes * pass_seconds * dgemm_rate  # per output entry, over 2 k flops
    if op == "matmul":
        return products + pass_cost / (2.0 * n)
    share = min(1.0, PANEL_SHARE[op] * block / n)
    update = products + pass_cost / (2.0 * block)
    return share * max(1, threads) + (1.0 - share) * update


#: Per spectral op: ``(emulated n x n x n products, LAPACK's flops / n^3, start)``. The
#: emulated decomposition refines an approximate one: ``syevd`` about 4 products a step,
#: ``gesdd`` about 7 (and a QR of a non-square matrix), 3 steps at most; ``start`` is the
#: approximate decomposition's time as a share of native FP64's (a single-precision
#: LAPACK call: about half). Native with vectors: about 9 n^3 flops (``dsyevd``) and 22
#: n^3 (``dgesdd``), costed at the DGEMM rate although their reductions to tri- / bidiagonal
#: form are half BLAS-2, slower: native is taken as fast as it could be (conservative).
SPECTRAL_MODEL = {"syevd": (4 * 3, 9.0, 0.5), "gesdd": (7 * 3, 22.0, 0.5)}


def model_spectral_ratio(op, n, int8_rate, dgemm_rate, pass_seconds, method):
    """Predicted emulated / native time of the spectral `op` at order `n` with `method`:
    the start plus the refinement's products, each at the emulated GEMM's predicted ratio
    to DGEMM (``model_ratio("matmul", ...)``), against LAPACK's flops at the DGEMM rate."""
    products, native_flops, start = SPECTRAL_MODEL[op]
    gemm = model_ratio("matmul", n, int8_rate, dgemm_rate, pass_seconds, method)
    return start + products * 2.0 / native_flops * gemm


def model_crossover(op, int8_rate, dgemm_rate, pass_seconds, *, block=DEFAULT_BLOCK,
                    threads=1):
    """``(order or None, method)``: the smallest order of :data:`MODEL_ORDERS` (at least
    :data:`MODEL_MIN_ORDER`) from which the predicted ratio times :data:`MODEL_MARGIN`
    stays below 1, with the method predicted fastest; ``(None, None)`` where there is
    none or the op has no model (the refined solves)."""
    if op not in ("matmul", *FACTORIZATION_OPS, *SPECTRAL_OPS) or not int8_rate \
            or int8_rate <= 0:
        return None, None
    best = None
    for method in MODEL_METHODS:
        if op in SPECTRAL_OPS:
            ratios = [model_spectral_ratio(op, n, int8_rate, dgemm_rate, pass_seconds,
                                           method) for n in MODEL_ORDERS]
        else:
            ratios = [model_ratio(op, n, int8_rate, dgemm_rate, pass_seconds, method,
                                  block=block, threads=threads) for n in MODEL_ORDERS]
        order = None
        for n, r in zip(reversed(MODEL_ORDERS), reversed(ratios)):
            if r * MODEL_MARGIN >= 1:
                break
            order = n
        if order is not None:
            order = max(order, MODEL_MIN_ORDER)
            if best is None or order < best[0]:
                best = (order, method)
    return best if best is not None else (None, None)


def _model(engine, op):
    if engine.device != "cpu":  # the probe here times the host's DGEMM, not the device's
        return Tuned(None, None, f"none (no model for {engine.device} engines)")
    try:
        rate = engine.int8_rate()
    except Exception:  # noqa: BLE001 (a probe that fails is no rate: no model)
        rate = None
    if not rate:
        return Tuned(None, None, "none (no INT8 rate for the model)")
    dgemm, pass_s = host_rates()
    cap = engine.int8_peak_ratio()
    used, capped = rate, ""
    if cap is not None and rate > cap * dgemm:  # a probe slowed by a busy machine
        used, capped = cap * dgemm, f", capped at the ISA's {cap:g}x"
    order, method = model_crossover(op, used, dgemm, pass_s,
                                    block=engine.block_size or DEFAULT_BLOCK,
                                    threads=engine.threads or 1)
    return Tuned(order, method, f"model (int8 {rate / 1e12:.2f} TOPS, dgemm "
                                f"{dgemm / 1e9:.1f} GFLOPS{capped})")


def tuned(engine, op) -> Tuned:
    """`op`'s crossover on `engine`: cache, then the engine's constants, then the model,
    then never (module docstring)."""
    mode = tuning_mode()
    if mode != "off":
        data, path = load(engine)
        entry = data["ops"].get(op) if data is not None else None
        if entry is not None and entry.get("measured", True):
            return Tuned(entry.get("crossover"), entry.get("method"), f"cache {path}")
    cross = engine.crossovers.get(op)
    if cross is not None:
        return Tuned(int(cross), None, "engine constants")
    if mode == "auto":
        return _model(engine, op)
    return Tuned(None, None, "none")
