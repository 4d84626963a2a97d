"""ozlinalg on dask arrays: lazy, blocked graphs whose block products run on the
emulated DGEMM on dask's workers (threads, processes or ``dask.distributed``).

Importing this module imports dask; ``import ozlinalg`` does not (the public
functions below are reached through :func:`ozlinalg.matmul` and
:mod:`ozlinalg.linalg` when an argument is a dask array).

=================================  ===========================================
matmul                             one emulated product per block triple,
                                   FP64 tree sum over the inner blocks
lu_factor, lu_solve, lu, det       right-looking blocked LU, partial pivoting
                                   over whole column panels
cholesky, cho_factor, cho_solve    left-looking blocked Cholesky
qr                                 TSQR (one column of blocks), blocked
                                   Householder (otherwise)
solve, solve_triangular, inv,      from the above
lstsq
=================================  ===========================================

Chunks may be NumPy or CuPy arrays (one kind per call): the graphs are generic
over the chunks' array namespace, so with CuPy chunks (dask-cuda's
``LocalCUDACluster``, one worker per GPU) every block product runs on the GPU
engine of the worker holding the blocks and the results stay on its GPU.

Signatures are :mod:`scipy.linalg`'s. The options in force when a function is
called (:func:`ozlinalg.options`, or a :func:`ozlinalg.backend` block) are
stored in every task (:class:`~ozlinalg.dask._tasks.OzTask`), so workers
never compute under their own defaults. Existing dask code
(``da.linalg.solve(a, b)``, ``a @ b``, ...) is routed here by one change: a
``with ozlinalg.backend():`` block around the code that BUILDS the graph
(:mod:`ozlinalg.routing._dask`). See docs/dask.md.
"""
from ._basic import det, inv, lstsq, solve
from ._cholesky import cho_factor, cho_solve, cholesky
from ._lu import lu, lu_factor, lu_solve
from ._matmul import matmul
from ._qr import qr
from ._tasks import OzTask
from ._triangular import solve_triangular

__all__ = [
    "matmul",
    "lu_factor", "lu_solve", "lu", "det",
    "cholesky", "cho_factor", "cho_solve",
    "qr",
    "solve", "solve_triangular", "inv", "lstsq",
    "OzTask",
]
