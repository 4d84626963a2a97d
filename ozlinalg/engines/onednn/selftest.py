"""The oneDNN engine's one-time exactness self-test (see :mod:`ozlinalg.engines.onednn`)."""
from __future__ import annotations

import numpy as np

__all__ = ["self_test"]


def self_test(engine):
    """``(ok, detail)``: is ``engine``'s INT8 GEMM exact at the extreme values?

    Products of -128 and 127 in every sign combination, a long inner dimension
    whose worst case is just below 2**31 (k = 2**17 - 1024 of (-128)(-128),
    the Ozaki-II bound GEMM's case), random full-range values, and the grouped
    storage with a multi-GEMM ``beta = 1`` run, all against int64 NumPy.
    Below VNNI, oneDNN's ``vpmaddubsw`` path saturates on these and fails.

    A call that raises is a failed test, except MemoryError (and KeyboardInterrupt),
    which propagate: they are no verdict on the GEMM, and the caller tries again.
    """
    rng = np.random.default_rng(20250)
    checks = []
    try:
        k = (1 << 17) - 1024
        pat = np.empty((6, k), np.int8)
        pat[0] = -128
        pat[1] = 127
        pat[2] = np.where(np.arange(k) % 2, 127, -128)
        pat[3] = np.where(np.arange(k) % 3, -128, 127)
        pat[4] = rng.choice(np.array([-128, 127, -127, 126], np.int8), k)
        pat[5] = rng.integers(-128, 128, k)
        checks.append(("extremes, k = 2**17 - 1024", pat[None], pat[None], [(0, 0)], 128))
        for kk in (1, 3, 64, 1000, 4099):
            a = rng.choice(np.array([-128, 127], np.int8), (2, 9, kk))
            b = rng.choice(np.array([-128, 127], np.int8), (2, 7, kk))
            checks.append((f"+-128/127, k = {kk}", a, b, [(0, 0), (0, 1), (1, 0)], 128))
        # several 32 x 32 blocks with edges, a partial last group of 64 inner indices,
        # one operand stored column-wise (a compiled GEMM's register blocks, edge tiles
        # and packing paths), into a result of either memory order
        kk = 4099
        wide = rng.choice(np.array([-128, 127], np.int8), (1, 70, kk))
        cols = rng.choice(np.array([-128, 127], np.int8), (1, kk, 45)).transpose(0, 2, 1)
        checks.append((f"+-128/127, 70 x 45 x {kk}", wide, cols, [(0, 0)], 128))
        checks.append((f"+-128/127, 45 x 70 x {kk}, column-major result", cols, wide,
                       [(0, 0)], 128, "F"))
        s, kk = 4, 515
        da = engine.empty_slices(s, 33, kk, "bitmask", "a")
        db = engine.empty_slices(s, 17, kk, "bitmask", "b")
        da[...] = rng.integers(-128, 128, da.shape)
        db[...] = rng.integers(-128, 128, db.shape)
        checks.append(("grouped storage, one EF group", da, db, [(i, 3 - i) for i in range(4)],
                       128))
        for name, a, b, pairs, bound, *order in checks:
            ws = engine.workspace(a.shape[1], b.shape[1], *order) if order else None
            got, _ = engine.int_matmul_sum(a, b, pairs, bound, bound, ws=ws)
            a64, b64 = a.astype(np.int64), b.astype(np.int64)
            want = sum(a64[i] @ b64[j].T for i, j in pairs)
            if not np.array_equal(got, want):
                bad = int(np.count_nonzero(got != want))
                return False, f"{name}: {bad} of {want.size} entries wrong"
        # beta = 1 accumulation over several GEMMs (claimed bounds force one GEMM each)
        a = rng.choice(np.array([-128, 127], np.int8), (3, 5, 300))
        got, calls = engine.int_matmul_sum(a, a, [(0, 0), (1, 1), (2, 2)], 1 << 10, 1 << 10)
        want = sum(a[t].astype(np.int64) @ a[t].astype(np.int64).T for t in range(3))
        if calls < 2 or not np.array_equal(got, want):
            return False, "beta = 1 accumulation wrong"
    except MemoryError:  # not a verdict: the engine's creation says so and is retried
        raise
    except Exception as exc:  # a failing call is a failed test, never a crash
        return False, f"{type(exc).__name__}: {exc}"
    return True, f"exact on {len(checks) + 1} checks (ISA {engine.isa})"
