"""``numpy.linalg``-compatible functions on the emulated DGEMM.

NumPy's semantics, not SciPy's: stacked (batched) inputs ``(..., M, M)``
broadcast against each other, ``LinAlgError("Singular matrix")`` and
``LinAlgError("Matrix is not positive definite")``, no conditioning
warnings, float32 in -> float32 out, ``QRResult`` / ``SlogdetResult`` named
tuples, ``lstsq``'s ``rcond=None`` meaning ``eps * max(M, N)`` (NumPy 2.x).

=============  ====================================================
solve          blocked LU (getrf/getrs) per matrix of the stack
inv            LU, then ``A X = I``
det, slogdet   LU: product / sum of logs of U's diagonal, pivot sign
cholesky       blocked Cholesky (potrf), ``upper=`` as NumPy 2.x
qr             blocked Householder QR (geqrf/orgqr), all four modes
lstsq          QR (full rank; rank-deficient -> native SVD lstsq)
eigh,          symmetric / Hermitian eigensolver refined on the emulated GEMM
eigvalsh       (``linalg._spectral.eigh_core``) per matrix; ``EighResult``
svd            SVD refined on the emulated GEMM (``linalg._spectral.svd_core``) per
               matrix; ``hermitian=True`` through ``eigh``, as NumPy
pinv           ``V diag(1/s) U^H`` (one emulated product), NumPy's cutoff
matrix_rank    count of singular values above NumPy's default tolerance
matmul         :func:`ozlinalg.matmul` (float inputs)
multi_dot      optimal chain order (NumPy's), each product emulated
=============  ====================================================

Complex input (complex64, complex128) is computed in complex128 on complex
products built from real emulated ones (complex64 results are returned as
complex64, as NumPy). Inputs that leave nothing to emulate or that the
emulation does not cover (empty matrices, float16, long double, clongdouble,
object arrays, integer or boolean ``matmul``) are passed to the native NumPy
(or CuPy) function, so that results and errors are exactly NumPy's there.

The functions are written in :mod:`ozlinalg.linalg.numpy_api` and
:mod:`ozlinalg.linalg._numpy_spectral`, on the blocked routines and the validation
the SciPy-compatible :mod:`ozlinalg.linalg` uses; this module is their public
face (the routing shims of ``numpy.linalg`` and ``cupy.linalg`` call them there).
They take NumPy and CuPy arrays (the lazy functions on dask arrays are in
:mod:`ozlinalg.dask`).
"""
from ..linalg.numpy_api import (
    LinAlgError,
    cholesky,
    det,
    eigh,
    eigvalsh,
    inv,
    lstsq,
    matmul,
    matrix_rank,
    multi_dot,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
)

__all__ = ["solve", "inv", "det", "slogdet", "cholesky", "qr", "lstsq", "matmul",
           "multi_dot", "eigh", "eigvalsh", "svd", "pinv", "matrix_rank", "LinAlgError"]
