"""pytest-benchmark: tiny solves under the default ``ozlinalg.backend()`` against native.

Under the default strategy ("performant") a call below the engine's crossover
runs natively; what it pays is the shim's screening (ContextVar look-ups, the
first argument's type, the cached crossover threshold). The budget:
a loop of 10^4 8x8 and 32x32 solves, ``np.linalg.solve`` and
``scipy.linalg.solve``, within 1.2x of native.

One group per (function, n) holds two benchmarks measured in the same run:
``native`` (the original function, no backend) and ``backend`` (the same loop
inside ``with ozlinalg.backend():``); pytest-benchmark's table prints each
one's time relative to the faster (the ratio). Because timings on a shared
machine drift between the two benchmarks, the ``backend`` benchmark also
times both loops back to back in each round (alternating which goes first)
and stores ``extra_info["ratio_interleaved"]``: the median over rounds of
backend time / native time. Every benchmark checks what its loop returned:
a solve is within the forward error bound ``n cond_inf(a) u ||x||_inf`` of the
exact solution (``ozlinalg.testing.exact_solve``), and the ``backend`` one has
the bits of the original function's (it ran natively); the no-op returns its
argument, called directly or through the shim.

``bench_backend_entry`` times entering and leaving ``ozlinalg.backend(strategy=
"eager")`` (a new instance each time, as ``with`` statements and the decorator make
them): the budget is 10 us per entry. The shims are installed once per process and a
missing optional module (CuPy's) is remembered, not looked for again on each entry;
the block's merged options are kept between entries.
Run it and print the ratios::

    OZLINALG_BENCH_SHIM_LOOP=10000 python benchmarks/suite/bench_backend_overhead.py

or ``pytest benchmarks/suite/bench_backend_overhead.py --benchmark-only``.
Environment: ``OZLINALG_BENCH_SHIM_LOOP`` (calls per round; 500 by default so that the
test suite runs this quickly, 10000 for the figures), ``OZLINALG_BENCH_ROUNDS``
(default 3).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
import scipy.linalg

import ozlinalg
from ozlinalg.testing import exact_solve

LOOP = int(os.environ.get("OZLINALG_BENCH_SHIM_LOOP", "500"))
ROUNDS = int(os.environ.get("OZLINALG_BENCH_ROUNDS", "3"))
FUNCS = {"np.linalg.solve": lambda: np.linalg.solve,
         "scipy.linalg.solve": lambda: scipy.linalg.solve}
CASES = [(f, n) for f in FUNCS for n in (8, 32)]


def _problem(n):
    rng = np.random.default_rng(n)
    return rng.standard_normal((n, n)) + n * np.eye(n), rng.standard_normal(n)


def _loop(fn, a, b):
    out = None
    for _ in range(LOOP):
        out = fn(a, b)
    return out  # the last call's result, for the benchmark to check


def _routed_loop(name, a, b):
    # The module attribute, looked up the way user code does, inside the block.
    fn = FUNCS[name]()
    with ozlinalg.backend():
        return _loop(fn, a, b)


def _assert_solves(x, a, b):
    """``x`` solves ``a x = b`` as a backward-stable FP64 solver does: within
    ``n cond_inf(a) u ||x*||_inf`` of the exact solution ``x*`` (rational
    arithmetic on the inputs' values, computed here, outside the timed loops)."""
    want = exact_solve(a, b)
    n = a.shape[0]
    tol = n * np.linalg.cond(a, np.inf) * 2.0**-53 * np.abs(want).max()
    err = np.abs(np.asarray(x) - want).max()
    assert err <= tol, f"solve error {err:.3g} > bound {tol:.3g}"


def _interleaved_ratio(name, a, b):
    """Median over rounds of (backend loop time / native loop time), the two
    loops of a round run back to back, in alternating order (ABBA), so that a
    change of load on the shared machine hits both sides of a ratio alike."""
    native = ozlinalg.backend.original(FUNCS[name]())
    t_nat, t_bk = [], []

    def timed(f):
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    for r in range(ROUNDS):
        if r % 2:
            t_bk.append(timed(lambda: _routed_loop(name, a, b)))
            t_nat.append(timed(lambda: _loop(native, a, b)))
        else:
            t_nat.append(timed(lambda: _loop(native, a, b)))
            t_bk.append(timed(lambda: _routed_loop(name, a, b)))
    ratio = float(np.median([tb / tn for tb, tn in zip(t_bk, t_nat)]))
    return ratio, min(t_nat) / LOOP, min(t_bk) / LOOP


@pytest.mark.parametrize("mode", ["native", "backend"])
@pytest.mark.parametrize("name,n", CASES, ids=[f"{f}-{n}" for f, n in CASES])
def bench_tiny_solves(benchmark, name, n, mode):
    a, b = _problem(n)
    with ozlinalg.backend():
        FUNCS[name]()(a, b)  # installs the shims; fills the threshold cache
    benchmark.group = f"{LOOP} x {name} {n}x{n}"
    benchmark.extra_info.update(function=name, n=n, loop=LOOP, mode=mode)
    native = ozlinalg.backend.original(FUNCS[name]())
    if mode == "native":
        x = benchmark.pedantic(_loop, args=(native, a, b), rounds=ROUNDS, iterations=1,
                               warmup_rounds=1)
        _assert_solves(x, a, b)
        return
    with ozlinalg.backend(), ozlinalg.profile() as prof:
        FUNCS[name]()(a, b)
    # what the block decided: run natively, below the crossover
    assert prof.routed_native == 1 and prof.emulated_gemm_calls == 0
    x = benchmark.pedantic(_routed_loop, args=(name, a, b), rounds=ROUNDS, iterations=1,
                           warmup_rounds=1)
    _assert_solves(x, a, b)
    # run natively: the original function's result, bit for bit
    assert np.array_equal(x, native(a, b))
    ratio, t_nat, t_bk = _interleaved_ratio(name, a, b)
    benchmark.extra_info.update(ratio_interleaved=ratio, native_us_per_call=t_nat * 1e6,
                                backend_us_per_call=t_bk * 1e6)


def _noop(a, b):
    return a


@pytest.mark.parametrize("mode", ["direct", "shim"])
def bench_shim_fast_path(benchmark, mode):
    """The shim's own cost: a no-op function called directly, and through a
    shim (the "performant" fast path: NumPy input, no crossover, no profile)."""
    from ozlinalg.routing._shims import make_shim

    # the target is inv, not solve: a solve's shim also waits for the refined
    # solve's thresholds, which a call named "bench.noop" never computes, so it
    # would never take the fast path
    fn = _noop if mode == "direct" else make_shim(
        "bench.noop", _noop, "ozlinalg.numpy_linalg:inv", "getrf")
    a = np.ones((8, 8))
    calls = 10 * LOOP
    benchmark.group = f"{calls} x no-op, direct or through a shim"
    benchmark.extra_info.update(function="no-op", n=8, loop=calls, mode=mode)

    def loop():
        out = None
        for _ in range(calls):
            out = fn(a, a)
        return out

    with ozlinalg.backend():
        fn(a, a)  # fills the threshold cache
        with ozlinalg.profile() as prof:
            fn(a, a)
        if mode == "shim":
            assert prof.routed_native == 1
        out = benchmark.pedantic(loop, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    # the no-op's own return value, directly or through the shim
    assert out is a


def bench_backend_entry(benchmark):
    """Entering and leaving ``ozlinalg.backend(strategy="eager")``, 10 * LOOP times."""
    calls = 10 * LOOP
    benchmark.group = f"{calls} x backend() entry"
    benchmark.extra_info.update(function="backend-entry", n=0, loop=calls, mode="entry")

    def loop():
        for _ in range(calls):
            with ozlinalg.backend(strategy="eager"):
                pass
        return ozlinalg.backend.active()

    with ozlinalg.backend(strategy="eager"):
        pass  # installs the shims
    assert benchmark.pedantic(loop, rounds=ROUNDS, iterations=1, warmup_rounds=1) is False


def main(argv=None):
    """Run the benchmarks and print ratio tables (pytest-benchmark's and interleaved)."""
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
    by, shim, entry = {}, {}, None
    for bm in data["benchmarks"]:
        info = bm["extra_info"]
        if info["function"] == "backend-entry":
            entry = bm["stats"]["min"] / info["loop"]
            continue
        if info["function"] == "no-op":
            shim[info["mode"]] = bm["stats"]["min"] / info["loop"]
            continue
        by.setdefault((info["function"], info["n"]), {})[info["mode"]] = bm
    print(f"\n{LOOP} calls per round, best of {ROUNDS} rounds; load: {os.getloadavg()}")
    print("| function | n | native us/call | backend us/call | ratio (benchmarks) "
          "| ratio (interleaved) |")
    print("|---|---|---|---|---|---|")
    for (fn, n), modes in sorted(by.items()):
        nat, bk = modes["native"]["stats"]["min"], modes["backend"]["stats"]["min"]
        inter = modes["backend"]["extra_info"]["ratio_interleaved"]
        print(f"| {fn} | {n} | {nat / LOOP * 1e6:.2f} | {bk / LOOP * 1e6:.2f} | "
              f"{bk / nat:.3f} | {inter:.3f} |")
    print(f"\nshim fast path: {(shim['shim'] - shim['direct']) * 1e9:.0f} ns per call over a "
          f"direct call ({shim['direct'] * 1e9:.0f} ns -> {shim['shim'] * 1e9:.0f} ns)")
    print(f"backend() entry: {entry * 1e6:.2f} us per enter and exit (budget 10 us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
