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

Every function also takes dask arrays and then returns a lazy dask array
(:mod:`ozlinalg.dask`: blocked graphs whose block products run emulated on
the workers). That dispatch is added by ``import ozlinalg``
(:func:`ozlinalg.routing.make_dask_aware`), not here: this package and
:mod:`ozlinalg.dask` are siblings and neither imports the other.

The NumPy-compatible functions (``numpy.linalg`` semantics, stacked inputs)
are in :mod:`ozlinalg.numpy_linalg`.
"""
from ._basic import det, inv, lstsq, matmul, solve, solve_triangular
from ._certify import certify_eigh
from ._decomp_cholesky import cho_factor, cho_solve, cholesky
from ._decomp_eigh import eigh, eigvalsh
from ._decomp_lu import lu, lu_factor, lu_solve
from ._decomp_polar import polar
from ._decomp_qr import qr
from ._decomp_svd import pinv, svd, svdvals
from ._validation import LinAlgError, LinAlgWarning

__all__ = [
    "lu_factor", "lu_solve", "lu",
    "cho_factor", "cho_solve", "cholesky",
    "qr",
    "eigh", "eigvalsh", "svd", "svdvals", "pinv", "polar",
    "solve", "solve_triangular", "inv", "det", "lstsq", "matmul",
    "certify_eigh",
    "LinAlgError", "LinAlgWarning",
]
