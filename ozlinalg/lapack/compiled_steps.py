"""The compiled one-level steps: a factorization or triangular solve of one recursion
level in one kernel call (``k_one_level.c``).

Below a few dozen rows the Python steps of a one-level LU, Cholesky or triangular
solve (native blocks, interchanges, one or two emulated products) cost ten times
their arithmetic. The kernels run the same steps in the same order on the same
primitives: LAPACK ``dgetrf`` / ``dpotrf`` and BLAS ``dtrsm`` through the addresses
SciPy exports (``scipy.linalg.cython_lapack`` / ``cython_blas``: the library SciPy's
own wrappers call), each on a packed copy of its block as those wrappers pass it, and
the one-call small product (:mod:`ozlinalg.ozaki.small`) for the emulated products.
So the results have the Python steps' bits (tests/linalg/test_lu_one_level.py and
test_one_level_cholesky.py compare both ways).

:func:`arguments` says where they apply: real NumPy arrays, emulated products, no
profile recording the products one by one, and every product on the small path (the
EF methods). The callers keep native blocks of
:data:`~ozlinalg.lapack._common.NATIVE_LIMIT_FROM` entries and more on the Python
steps, which run them under the engine's BLAS thread limit (a threaded ``dgetrf``
gives other bits). A kernel that stops part way (Inf / NaN in a product, a structural
pattern the small product leaves to the driver, a fixed slice count below auto's,
which warns, a matrix that is not positive definite) reports it; the caller puts its
data back and runs the Python steps (:func:`run`). Tools that perturb or check each product from
Python (``benchmarks/studies/fault_plugin.py``, tests/linalg/test_checked_products.py)
replace :func:`arguments` with one that returns None.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from .._profile import active_profiles
from ..ozaki.small import small_args

__all__ = ["arguments", "run", "scipy_routines"]


@functools.cache
def scipy_routines():
    """``{name: address}`` of LAPACK ``dgetrf``, ``dpotrf`` and BLAS ``dtrsm`` as SciPy
    exports them, or None where they cannot be read."""
    try:
        from scipy.linalg import cython_blas, cython_lapack

        # prototypes of our own: ctypes.pythonapi's functions are shared with the process
        name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
            ("PyCapsule_GetName", ctypes.pythonapi))
        pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", ctypes.pythonapi))
        caps = {"dgetrf": cython_lapack.__pyx_capi__["dgetrf"],
                "dpotrf": cython_lapack.__pyx_capi__["dpotrf"],
                "dtrsm": cython_blas.__pyx_capi__["dtrsm"]}
        got = {k: pointer(c, name(c)) for k, c in caps.items()}
    except (ImportError, AttributeError, KeyError, ValueError, OSError):
        return None
    return got if all(got.values()) else None


def arguments(run, x, *products):
    """``(kernels, routines, kind, fixed count, min_shift, [(width, thresholds)] per
    product)`` where the compiled steps apply to a real ``x`` under the Runner ``run``:
    NumPy, emulated, no profile recording the products one by one, every ``(m, n, p)``
    product on the small path with one engine's kernels. Else None."""
    if run.xp is not np or not run.emulate or x.dtype.char != "d" or active_profiles():
        return None
    plan = run.plan
    ker = getattr(plan.engine, "kernels", None)
    if ker is None or not hasattr(ker, "trsm_one_level"):
        return None
    routines = scipy_routines()
    if routines is None:
        return None
    meth, opts, per, fixed = plan.method, plan.options, [], 0
    for m, n, p in products:
        got = small_args(np, m, n, p, meth, plan.slices, opts, plan.engine)
        if got is None:
            return None
        per.append((got[1], got[3]))
        fixed = got[2]
    shift = 0 if plan.min_shift is None else int(plan.min_shift)
    return ker, routines, int(meth.split == "bitmask"), fixed, shift, per


def run(kernel, target, *args):
    """``kernel(*args, info)``, a kernel of ``k_one_level.c`` that writes ``target``:
    LAPACK's info, or None where the kernel stopped part way (``target`` then holds what
    it held, for the Python steps)."""
    saved = target.copy(order="K")
    info = np.zeros(2, np.int64)
    kernel(*args, info)
    if info[1]:
        target[...] = saved
        return None
    return int(info[0])
