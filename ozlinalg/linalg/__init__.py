"""``scipy.linalg``-compatible namespace whose BLAS-3 work runs on the emulated DGEMM.

Same names, signatures, defaults, return types, memory layouts, in-place
(``overwrite_*``) behaviour, warnings and errors as :mod:`scipy.linalg` 1.17
(``tests/routing/test_fidelity.py`` compares them side by side; the deliberate
differences are listed in docs/backend.md); the factorizations call the blocked
routines of :mod:`ozlinalg.lapack`, so their trailing updates go through the
Ozaki-scheme GEMM (``slices`` and ``method`` from :func:`ozlinalg.get_options`;
``Options.min_size`` is the order below which a call runs in native LAPACK,
0 by default: emulate at every size).

==================  ===================================================
lu_factor, lu_solve  blocked LU with partial pivoting (``getrf``/``getrs``)
lu                   ``p, l, u`` from the same factorization
cho_factor,          blocked Cholesky (``potrf``/``potrs``)
cho_solve, cholesky
qr                   blocked Householder QR (``geqrf``/``orgqr``)
solve                by `assume_a`: LU, Cholesky, trsm, or a division
                     (tridiagonal / banded: native ``gttrf`` / ``gbsv``)
solve_triangular     recursive blocked ``trsm``
inv, det             from the LU (or Cholesky / trsm) factors
lstsq                QR (full rank), native fallback when rank deficient
eigh, eigvalsh       single-precision start refined by Ogita-Aishima steps
                     (every O(n^3) step an emulated product; clusters by
                     Rayleigh-Ritz); generalized: emulated Cholesky of b
svd, svdvals, pinv   the SVD form of the same refinement (rectangular: the
                     emulated QR first)
polar                QDWH (emulated QR, Cholesky, trsm, GEMM)
certify_eigh         certified eigenvalue radii from faithful products
matmul               :func:`ozlinalg.matmul` (not in scipy.linalg)
==================  ===================================================

The functions that :mod:`ozlinalg.dask` also has (``lu_factor`` ... ``lstsq`` and
``matmul``) take dask arrays too and then return a lazy dask array (blocked graphs
whose block products run emulated on the workers): they are defined below with
:func:`ozlinalg._array.dask_aware`, which hands such a call to the function of the same
name in :mod:`ozlinalg.dask`. This package and :mod:`ozlinalg.dask` are siblings and
neither imports the other; ``import ozlinalg`` registers how the dask namespace is
imported (on the first dask array), so importing this package never imports dask.

The NumPy-compatible functions (``numpy.linalg`` semantics, stacked inputs)
are in :mod:`ozlinalg.numpy_linalg`.
"""
from .._array import dask_aware
from .._matmul import matmul as _front_matmul
from . import _basic, _decomp_cholesky, _decomp_lu, _decomp_qr
from ._certify import certify_eigh
from ._decomp_eigh import eigh, eigvalsh
from ._decomp_polar import polar
from ._decomp_svd import pinv, svd, svdvals
from ._validation import LinAlgError, LinAlgWarning

# Dask arrays in, lazy dask arrays out (ozlinalg.dask): the functions it also has.
lu_factor = dask_aware(_decomp_lu.lu_factor)
lu_solve = dask_aware(_decomp_lu.lu_solve)
lu = dask_aware(_decomp_lu.lu)
cho_factor = dask_aware(_decomp_cholesky.cho_factor)
cho_solve = dask_aware(_decomp_cholesky.cho_solve)
cholesky = dask_aware(_decomp_cholesky.cholesky)
qr = dask_aware(_decomp_qr.qr)
solve = dask_aware(_basic.solve)
solve_triangular = dask_aware(_basic.solve_triangular)
inv = dask_aware(_basic.inv)
det = dask_aware(_basic.det)
lstsq = dask_aware(_basic.lstsq)
#: :func:`ozlinalg.matmul` (the same function)
matmul = dask_aware(_front_matmul)

__all__ = [
    "lu_factor", "lu_solve", "lu",
    "cho_factor", "cho_solve", "cholesky",
    "qr",
    "eigh", "eigvalsh", "svd", "svdvals", "pinv", "polar",
    "solve", "solve_triangular", "inv", "det", "lstsq", "matmul",
    "certify_eigh",
    "LinAlgError", "LinAlgWarning",
]
