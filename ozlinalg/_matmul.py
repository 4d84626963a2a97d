"""The front door of the emulated GEMM: :func:`ozlinalg.matmul` and
:func:`matmul_ordered` read the options in force (:func:`ozlinalg.options`),
validate and promote the operands, and call the driver (:mod:`ozlinalg.ozaki.tiling`)
with an options value; the Ozaki code below never reads the ambient options.

Dask arrays are the public face's business: ``ozlinalg.matmul`` is this
:func:`matmul` wrapped by the dask-collection dispatch (``ozlinalg/__init__.py``).
"""
from __future__ import annotations

import numpy as np

from ._array import array_namespace
from ._options import get_options, resolve
from .engines import get_engine
from .ozaki import params
from .ozaki.small import small_product
from .ozaki.tiling import emulated_matmul, product_memory_plan

__all__ = ["matmul", "matmul_ordered", "product", "memory_plan"]


def _as_float64(xp, x, name):
    """float64 (complex128 for complex input) view or copy of ``x``, or TypeError."""
    x = xp.asarray(x)
    kind = x.dtype.kind
    if kind not in "biufc":
        raise TypeError(f"ozlinalg.matmul: {name} has unsupported dtype {x.dtype}")
    if (kind == "f" and x.dtype.itemsize > 8) or (kind == "c" and x.dtype.itemsize > 16):
        raise TypeError(
            f"ozlinalg.matmul: {name} has dtype {x.dtype}; the emulation computes in "
            "float64 / complex128 only (convert explicitly if that is what you want)"
        )
    return x.astype(xp.complex128 if kind == "c" else xp.float64, copy=False)


def matmul(a, b, *, slices=None, method=None, balance=None, accuracy=None, moduli=None):
    """Matrix product ``a @ b`` in FP64 accuracy from exact INT8 products.

    Parameters
    ----------
    a, b : array_like (NumPy or CuPy)
        Operands with NumPy's matmul shape rules: 2-D matrices, 1-D vectors
        (promoted to a row / column and squeezed back), or stacks of matrices
        broadcast over the leading axes. Integer, boolean and lower-precision
        float inputs are converted to float64, complex ones to complex128
        (built from real emulated products, ``options(complex_scheme=...)``,
        see :mod:`ozlinalg.ozaki.complex`). Inputs are never modified.
    slices : int or "auto", optional
        Number of slices per operand. ``"auto"`` (the default, from
        :func:`ozlinalg.options`) picks the smallest count whose error is at
        DGEMM level for the given inputs (see :mod:`ozlinalg.ozaki.counts.slices`). A
        fixed count is used as given; when it is below what ``"auto"`` would
        pick for the inputs (or ``"auto"`` would compute some entries in
        native FP64), the product warns with an
        :class:`~ozlinalg.AccuracyWarning` naming auto's count. The check
        never changes the result; it is a bound from a sample of the inputs,
        and auto's own plan only when that bound cannot settle it
        (:mod:`ozlinalg.ozaki.counts.adequacy`). ``accuracy="faithful"`` does not
        warn: it recomputes what it cannot certify.
    method : str, optional
        Ozaki scheme I: ``"hybrid-ef"`` (default), ``"bitmask-ef"``,
        ``"bitmask"``, ``"rn"``, ``"splitfp"``; Ozaki scheme II: ``"crt"``
        (accurate scaling), ``"crt-fast"``; or a peer alias (``"ozimmu_h"``,
        ``"ozimmu_ef"``, ``"ozimmu"``, ``"ootomo"``, ``"gemmul8"``). For the
        ``crt`` methods ``slices`` counts moduli (``moduli=`` says so by name).
    balance : {"auto", True, False}, optional
        Exact power-of-two balancing of the inner dimension (column k of ``a``
        against row k of ``b``) before splitting; ``"auto"`` (the default, from
        :func:`ozlinalg.options`) balances only strongly imbalanced products
        (see :mod:`ozlinalg.ozaki.balance`), which keeps ``slices="auto"`` at
        its calibrated counts for them.
    accuracy : {"dgemm", "faithful"}, optional
        ``"dgemm"`` (the default, from :func:`ozlinalg.options`): the count
        ``slices="auto"`` picks reaches native DGEMM's max error on the
        calibrated inputs. ``"faithful"``: every finite entry is a faithful
        rounding of the exact product (one of the two floats around it),
        certified entry by entry by a deterministic bound; entries the bound
        cannot certify are recomputed exactly (:mod:`ozlinalg.ozaki.faithful`;
        methods ``hybrid-ef``, ``bitmask-ef``, ``crt``, ``crt-fast``). Whatever
        the accuracy, the result has the same bits on every engine, memory
        limit and thread count (docs/guarantees.md).
    moduli : int or "auto", optional
        The count of the ``crt`` methods by its own name: the number of INT8
        moduli (Ozaki scheme II), the same value as ``slices`` there. Only for
        ``crt`` / ``crt-fast``, and not together with ``slices``.

    Returns
    -------
    c : ndarray of float64 (complex128 for complex input)
        The product, on the device of the inputs; a lazy dask array when `a`
        or `b` is one (:func:`ozlinalg.dask.matmul`).

    Notes
    -----
    The Ozaki scheme (Ozaki et al.; Ootomo, Ozaki & Yokota 2024; Uchino,
    Ozaki & Imamura 2024): each row of ``a`` and column of ``b`` is scaled by
    a power of two and cut into ``s`` slices of ``beta = 7`` bits held in
    INT8; only the ``s (s + 1) / 2`` slice products with ``i + j <= s + 1``
    are formed, each exactly (INT32 accumulation), and summed in FP64. The
    EF methods first sum a whole group of equal ``i + j`` exactly in integer
    arithmetic, so FP64 work drops from ``s (s + 1) / 2`` passes to ``s``.
    Rows of ``a`` or columns of ``b`` holding Inf or NaN are multiplied
    natively so that non-finite entries match FP64 exactly.

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> rng = np.random.default_rng(0)
    >>> a, b = rng.standard_normal((3, 50)), rng.standard_normal((50, 2))
    >>> bool(np.allclose(ozlinalg.matmul(a, b), a @ b, rtol=1e-14, atol=1e-14))
    True
    """
    return matmul_ordered(a, b, slices=slices, method=method, balance=balance,
                          accuracy=accuracy, moduli=moduli)


def matmul_ordered(a, b, *, slices=None, method=None, balance=None, accuracy=None, order="C",
                   moduli=None):
    """:func:`matmul` with the memory order of a real 2-D result chosen: "C" (what
    :func:`matmul` returns, as NumPy does) or "F" (the blocked factorizations
    update column-major work arrays). Same values either way."""
    xp = array_namespace(a, b)
    a = _as_float64(xp, a, "a")
    b = _as_float64(xp, b, "b")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("ozlinalg.matmul: operands must be at least 1-D (use * for scalars)")
    plan = resolve(xp, method=method, slices=slices, moduli=moduli, balance=balance,
                   accuracy=accuracy)
    return product(plan, a, b, order=order)


def product(plan, a, b, order="C"):
    """``a @ b`` under a resolved :class:`~ozlinalg._options.Plan`, for the code below
    the front doors: operands of at least one dimension (not checked again; other
    dtypes than float64 / complex128 converted as by :func:`matmul`), the memory
    order of a real 2-D result chosen as in :func:`matmul_ordered`."""
    xp = plan.xp
    tried = (xp is np and a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0]
             and a.dtype.char == "d" and b.dtype.char == "d")
    if tried:
        # the one-call small path first, as emulated_matmul's own first step: the
        # blocked routines' many small updates, without its set-up
        c = small_product(np, a, b, plan.method, plan.slices, plan.options, plan.min_shift,
                          order=order, engine=plan.engine)
        if c is not None:
            return c
    if a.dtype.char not in "dD":
        a = _as_float64(xp, a, "a")
    if b.dtype.char not in "dD":
        b = _as_float64(xp, b, "b")
    return emulated_matmul(xp, a, b, plan.method, plan.slices, plan.options,
                           plan.min_shift, order=order, engine=plan.engine, small=not tried)


def memory_plan(m, n, p, method=None, slices=None, accuracy=None, limit=None, engine=None):
    """The memory plan (:class:`~ozlinalg.ozaki.memory.MemoryPlan`) the driver makes for a
    finite ``(m x n) @ (n x p)`` product under the options in force (``method``,
    ``slices``, ``accuracy``, ``limit`` in bytes override them; ``engine``: the NumPy
    engine's by default). For benchmarks and tests: the driver's own plan adds the
    copies that Inf / NaN lines need."""
    opts = get_options()
    meth = params.METHODS[params.validate_method(opts.method if method is None else method)]
    opts = opts.replace(accuracy=opts.accuracy if accuracy is None else accuracy,
                        memory_limit=opts.memory_limit if limit is None else limit)
    engine = engine or get_engine(np, opts.engine)
    return product_memory_plan(m, n, p, meth, opts.slices if slices is None else slices,
                               opts, engine)
