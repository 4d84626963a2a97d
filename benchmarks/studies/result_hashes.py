"""Hashes of the result bits of a fixed set of calls, on every CPU engine.

A structural change (moving modules, renaming, splitting functions) must leave
every result bit as it was. This script runs a fixed set of emulated products
(every method, fixed and ``auto`` counts, the faithful mode, float32 and
complex, Inf/NaN, memory orders), factorizations, solves, eigen and SVD calls of the SciPy-style
namespace, ``np.linalg`` calls under the eager backend and one Dask graph, on
each CPU engine that runs here, and prints one SHA-256 per call (of the result
arrays' dtype, shape and bytes in C order).

    python benchmarks/studies/result_hashes.py > before.json       # on the old tree
    python benchmarks/studies/result_hashes.py --compare before.json   # on the new one

``--compare`` exits 1 and names the calls whose bits differ (or that are
missing on one side); 0 when every hash matches.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings

import numpy as np


def _digest(*arrays):
    h = hashlib.sha256()
    for x in arrays:
        x = np.asarray(x)
        h.update(f"{x.dtype.str}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def _operands(rng, m, n, p, dtype=np.float64, spread=0.0):
    a = rng.standard_normal((m, n)) * np.exp2(rng.uniform(-spread, spread, (m, n)))
    b = rng.standard_normal((n, p)) * np.exp2(rng.uniform(-spread, spread, (n, p)))
    return a.astype(dtype), b.astype(dtype)


def _spd(rng, n):
    x = rng.standard_normal((n, n))
    return x @ x.T + n * np.eye(n)


def calls():
    """``{name: zero-argument callable returning arrays}``: the fixed set."""
    import ozlinalg
    import ozlinalg.linalg as oz

    out = {}
    rng = np.random.default_rng(20261202)
    a, b = _operands(rng, 67, 130, 45)
    aw, bw = _operands(rng, 40, 300, 33, spread=30.0)
    for method in ozlinalg.METHODS:
        for slices in ("auto", 5):
            out[f"matmul/{method}/{slices}"] = (
                lambda m=method, s=slices: ozlinalg.matmul(a, b, method=m, slices=s))
        out[f"matmul/{method}/wide-range"] = (
            lambda m=method: ozlinalg.matmul(aw, bw, method=m))
    for method in ("hybrid-ef", "crt"):
        out[f"matmul/{method}/faithful"] = (
            lambda m=method: ozlinalg.matmul(aw, bw, method=m, accuracy="faithful"))
    a32, b32 = _operands(rng, 30, 50, 20, np.float32)
    out["matmul/float32"] = lambda: ozlinalg.matmul(a32, b32)
    ac = a + 1j * rng.standard_normal(a.shape)
    bc = b - 1j * rng.standard_normal(b.shape)
    out["matmul/complex"] = lambda: ozlinalg.matmul(ac, bc)
    an = a.copy()
    an[3, 7] = np.inf
    an[10, 2] = np.nan
    out["matmul/inf-nan"] = lambda: ozlinalg.matmul(an, b)
    af = np.asfortranarray(a[:, :65])
    out["matmul/fortran-strided"] = lambda: ozlinalg.matmul(af, b[::2])
    batch = (rng.standard_normal((3, 20, 31)), rng.standard_normal((3, 31, 17)))
    out["matmul/batched"] = lambda: ozlinalg.matmul(*batch)

    n = 150
    g = rng.standard_normal((n, n))
    s = _spd(rng, n)
    rhs = rng.standard_normal((n, 3))
    tall = rng.standard_normal((170, 60))
    out["linalg/lu_factor"] = lambda: oz.lu_factor(g)
    out["linalg/lu"] = lambda: oz.lu(g)
    out["linalg/lu_solve"] = lambda: oz.lu_solve(oz.lu_factor(g), rhs)
    out["linalg/cho_factor"] = lambda: oz.cho_factor(s)[0]
    out["linalg/cholesky"] = lambda: oz.cholesky(s)
    out["linalg/cho_solve"] = lambda: oz.cho_solve(oz.cho_factor(s), rhs)
    out["linalg/qr"] = lambda: oz.qr(tall)
    out["linalg/qr-r"] = lambda: oz.qr(tall, mode="r")
    out["linalg/solve"] = lambda: oz.solve(g, rhs)
    out["linalg/solve-pos"] = lambda: oz.solve(s, rhs, assume_a="pos")
    out["linalg/solve_triangular"] = lambda: oz.solve_triangular(np.triu(g) + n * np.eye(n), rhs)
    out["linalg/inv"] = lambda: oz.inv(g)
    out["linalg/det"] = lambda: np.asarray(oz.det(g))
    rhs_tall = rng.standard_normal((170, 2))
    out["linalg/lstsq"] = lambda: oz.lstsq(tall, rhs_tall)[0]
    out["ozlinalg.solve"] = lambda: ozlinalg.solve(g, rhs)
    small_rng = np.random.default_rng(8)  # a stream of its own: the inputs above and below
    for k in (8, 33, 100):  # stay as they were (one-level LU in one compiled call each)
        gk, bk = small_rng.standard_normal((k, k)), small_rng.standard_normal((k, 2))
        out[f"ozlinalg.solve/{k}"] = lambda gk=gk, bk=bk: ozlinalg.solve(gk, bk)
        out[f"linalg/lu_factor/{k}"] = lambda gk=gk: oz.lu_factor(gk)
        out[f"linalg/lu_solve/{k}"] = lambda gk=gk, bk=bk: oz.lu_solve(oz.lu_factor(gk),
                                                                        bk[:, 0])
        out[f"linalg/inv/{k}"] = lambda gk=gk: oz.inv(gk)  # products with structural zeros
        out[f"matmul/triangles/{k}"] = lambda gk=gk: ozlinalg.matmul(np.tril(gk), np.triu(gk))
    gc = g + 1j * rng.standard_normal(g.shape)
    out["linalg/lu_factor-complex"] = lambda: oz.lu_factor(gc)
    out["linalg/solve-float32"] = lambda: oz.solve(g.astype(np.float32), rhs.astype(np.float32))
    out["linalg/eigh"] = lambda: oz.eigh(s)
    out["linalg/eigh-values"] = lambda: oz.eigh(s, eigvals_only=True)
    out["linalg/svd"] = lambda: oz.svd(tall)
    out["linalg/svdvals"] = lambda: oz.svdvals(tall)
    out["linalg/pinv"] = lambda: oz.pinv(tall)
    out["linalg/polar"] = lambda: oz.polar(g)

    def eager(fn):
        def run():
            with ozlinalg.backend(strategy="eager", native_order=0):
                return fn()
        return run

    out["numpy/solve"] = eager(lambda: np.linalg.solve(g, rhs))
    out["numpy/inv"] = eager(lambda: np.linalg.inv(g))
    out["numpy/cholesky"] = eager(lambda: np.linalg.cholesky(s))
    out["numpy/qr"] = eager(lambda: np.linalg.qr(tall))
    out["numpy/matmul"] = eager(lambda: np.matmul(a, b))
    out["numpy/slogdet"] = eager(lambda: np.linalg.slogdet(g))
    out["numpy/eigh"] = eager(lambda: np.linalg.eigh(s))
    out["numpy/svd"] = eager(lambda: np.linalg.svd(tall, full_matrices=False))
    out["numpy/pinv"] = eager(lambda: np.linalg.pinv(tall))

    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask is a test extra
        return out
    import ozlinalg.dask as ozd

    def dask_calls():
        x = da.from_array(g, chunks=50)
        y = da.from_array(rhs, chunks=(50, 3))
        q, r = ozd.qr(da.from_array(tall, chunks=(60, 60)))
        return (ozd.solve(x, y).compute(scheduler="sync"),
                ozd.matmul(x, x).compute(scheduler="sync"),
                q.compute(scheduler="sync"), r.compute(scheduler="sync"))

    out["dask/solve-matmul-qr"] = dask_calls
    return out


def engines_here():
    from ozlinalg.engines import select

    names = ["sgemm"]
    for name in ("avx2", "onednn"):
        try:
            select.cpu_engine(name)
            names.append(name)
        except Exception as exc:  # noqa: BLE001 - any reason the engine cannot run
            print(f"# {name} engine not run: {exc}", file=sys.stderr)
    return names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", metavar="JSON", help="hashes of an earlier run to compare with")
    args = ap.parse_args(argv)
    import ozlinalg

    hashes = {}
    warnings.simplefilter("ignore")
    for engine in engines_here():
        with ozlinalg.options(engine=engine):
            for name, fn in calls().items():
                res = fn()
                res = res if isinstance(res, tuple) else (res,)
                hashes[f"{engine}:{name}"] = _digest(*res)
    if not args.compare:
        json.dump(hashes, sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    with open(args.compare) as f:
        before = json.load(f)
    keys = sorted(set(before) | set(hashes))
    bad = [k for k in keys if before.get(k) != hashes.get(k)]
    for k in bad:
        why = ("missing before" if k not in before else "missing now" if k not in hashes
               else "other bits")
        print(f"differs: {k} ({why})")
    print(f"{len(keys) - len(bad)} of {len(keys)} calls give the same bits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
