"""pytest-benchmark: tiny EMULATED calls (``strategy="eager"``) against native.

Eager is what users choose for the emulation's guarantees, so every product is
emulated, tiny ones too (routed LU / Cholesky calls of order below 16 run as the
original function: docs/process.md, "Tiny calls"). Targets (per call, best of the
rounds, a loop of 10^4 calls, on a quiet machine): the emulated 8 x 8 / 32 x 32 product
at most 30 / 60 us, and ``solve`` at most 100 / 300 us.

One group per (call, n) holds ``native`` (NumPy: ``a @ b``, ``np.linalg.solve``)
and ``eager`` (``ozlinalg.matmul(a, b)``; ``np.linalg.solve`` inside
``ozlinalg.backend(strategy="eager")``; ``ozlinalg.solve``), measured in the same
run; the ``eager`` benchmark also times both loops back to back in each round
(alternating the order) and stores the per-call times and their ratio in
``extra_info``. Each emulated call is checked to be emulated (``profile()``).
Every benchmark checks what its loop returned, against exact references
computed outside the timed loops: a product entry by entry within
``ozlinalg.testing.dot_error_bound`` of the exact one (DGEMM level), a solve
within ``n cond_inf(a) u ||x||_inf`` of the exact solution.

    python benchmarks/suite/bench_tiny_eager.py            # a markdown table with the targets

Environment: ``OZLINALG_BENCH_TINY_LOOP`` (calls per round; 200 by default so that
the test suite runs this quickly, 10000 for the figures), ``OZLINALG_BENCH_ROUNDS``
(default 3).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

import ozlinalg
from ozlinalg.testing import ExactReference, dot_error_bound, exact_solve

LOOP = int(os.environ.get("OZLINALG_BENCH_TINY_LOOP", "200"))
ROUNDS = int(os.environ.get("OZLINALG_BENCH_ROUNDS", "3"))
TARGET_US = {("matmul", 8): 30, ("matmul", 32): 60, ("np.linalg.solve", 8): 100,
             ("np.linalg.solve", 32): 300, ("ozlinalg.solve", 8): 100,
             ("ozlinalg.solve", 32): 300}
CASES = sorted(TARGET_US)


def _problem(n):
    rng = np.random.default_rng(n)
    return rng.standard_normal((n, n)) + n * np.eye(n), rng.standard_normal(n)


def _calls(name, a, b):
    """``(native loop, emulated loop)`` for ``name``; each returns its last call's
    result, for the benchmark to check."""
    solve = ozlinalg.backend.original(np.linalg.solve)
    if name == "matmul":
        def native():
            out = None
            for _ in range(LOOP):
                out = a @ a
            return out

        def eager():
            out = None
            for _ in range(LOOP):
                out = ozlinalg.matmul(a, a)
            return out
    elif name == "np.linalg.solve":
        def native():
            out = None
            for _ in range(LOOP):
                out = solve(a, b)
            return out

        def eager():
            out = None
            with ozlinalg.backend(strategy="eager"):
                for _ in range(LOOP):
                    out = np.linalg.solve(a, b)
            return out
    else:
        def native():
            out = None
            for _ in range(LOOP):
                out = solve(a, b)
            return out

        def eager():
            out = None
            for _ in range(LOOP):
                out = ozlinalg.solve(a, b)
            return out
    return native, eager


def _assert_result(name, a, b, out):
    """``out`` is what ``name`` must return, whichever way it was computed: ``a @ a``
    at DGEMM level (every entry within the FP64 dot-product bound of the exact
    product), or the solution of ``a x = b`` as a backward-stable FP64 solver gives
    it (within ``n cond_inf(a) u ||x*||_inf`` of the exact ``x*``)."""
    out = np.asarray(out)
    if name == "matmul":
        err = ExactReference(a, a).absolute_errors(out)
        bound = dot_error_bound(a, a)
        assert np.all(err <= bound), f"worst error / bound {np.max(err / bound):.3g}"
        return
    want = exact_solve(a, b)
    tol = a.shape[0] * np.linalg.cond(a, np.inf) * 2.0**-53 * np.abs(want).max()
    err = np.abs(out - want).max()
    assert err <= tol, f"solve error {err:.3g} > bound {tol:.3g}"


def _emulated(name, a, b):
    """The emulated call runs emulated products (the eager contract, in profile())."""
    with ozlinalg.profile() as prof:
        if name == "matmul":
            ozlinalg.matmul(a, a)
        elif name == "np.linalg.solve":
            with ozlinalg.backend(strategy="eager"):
                np.linalg.solve(a, b)
        else:
            ozlinalg.solve(a, b)
    return prof


def _interleaved(native, eager):
    def timed(f):
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    t_nat, t_eag = [], []
    for r in range(ROUNDS):
        first, second = (native, eager) if r % 2 == 0 else (eager, native)
        t1, t2 = timed(first), timed(second)
        (t_nat if first is native else t_eag).append(t1)
        (t_eag if first is native else t_nat).append(t2)
    return min(t_nat) / LOOP, min(t_eag) / LOOP


@pytest.mark.parametrize("mode", ["native", "eager"])
@pytest.mark.parametrize("name,n", CASES, ids=[f"{c}-{n}" for c, n in CASES])
def bench_tiny_eager(benchmark, name, n, mode):
    a, b = _problem(n)
    native, eager = _calls(name, a, b)
    benchmark.group = f"{LOOP} x {name} {n}x{n}"
    benchmark.extra_info.update(call=name, n=n, loop=LOOP, mode=mode,
                                target_us=TARGET_US[(name, n)])
    if mode == "native":
        out = benchmark.pedantic(native, rounds=ROUNDS, iterations=1, warmup_rounds=1)
        _assert_result(name, a, b, out)
        return
    prof = _emulated(name, a, b)
    # eager's contract: products emulated, and calls by name; routed LU calls below
    # Options.native_order run as the original function (docs/process.md, "Tiny calls")
    if name == "np.linalg.solve" and n < ozlinalg.get_options().native_order:
        assert prof.emulated_gemm_calls == 0 and prof.routed_native == 1
    else:
        assert prof.emulated_gemm_calls >= 1
    out = benchmark.pedantic(eager, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    _assert_result(name, a, b, out)
    t_nat, t_eag = _interleaved(native, eager)
    benchmark.extra_info.update(native_us=t_nat * 1e6, eager_us=t_eag * 1e6,
                                ratio=t_eag / t_nat, emulated_gemms=prof.emulated_gemm_calls)


def main(argv=None):
    """Run the benchmarks and print the table (per call, against the targets)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "bench.json")
        rc = pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--benchmark-only",
                          f"--benchmark-json={out}", *(argv or [])])
        if rc:
            return rc
        with open(out) as f:
            data = json.load(f)
    rows = {}
    for bm in data["benchmarks"]:
        info = bm["extra_info"]
        rows.setdefault((info["call"], info["n"]), {})[info["mode"]] = bm
    print(f"\n{LOOP} calls per round, best of {ROUNDS} rounds; load {os.getloadavg()}")
    print("| call | n | native us/call | eager us/call | target us | met | "
          "interleaved native / eager us | emulated products per call |")
    print("|---|---|---|---|---|---|---|---|")
    for (call, n), modes in sorted(rows.items()):
        nat = modes["native"]["stats"]["min"] / LOOP * 1e6
        eag = modes["eager"]["stats"]["min"] / LOOP * 1e6
        info = modes["eager"]["extra_info"]
        print(f"| {call} | {n} | {nat:.2f} | {eag:.1f} | {info['target_us']} | "
              f"{'yes' if eag <= info['target_us'] else 'NO'} | {info['native_us']:.2f} / "
              f"{info['eager_us']:.1f} | {info['emulated_gemms']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
