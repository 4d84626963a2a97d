"""ozlinalg: FP64-accurate dense linear algebra on exact INT8 matrix products.

The Ozaki scheme splits FP64 matrices into INT8 slices, multiplies the slices
exactly (INT8 x INT8 -> INT32 on tensor cores, or BLAS on the CPU) and sums
the products in FP64. See https://arxiv.org/abs/2306.11975 (ozIMMU) and
https://arxiv.org/abs/2409.13313 (EF / hybrid splits).
"""
# The subpackages by name first: a re-import after an interrupted one (Ctrl-C during
# ``import ozlinalg``) then binds them as attributes again, even where Python kept them
# in sys.modules.
from . import engines, exact, lapack, ozaki  # noqa: F401
from ._exceptions import AccuracyWarning, PerformanceWarning
from ._options import Options, get_options, options
from ._profile import Profile, profile
from .ozaki import METHODS

# isort: split
# the scipy- and numpy-compatible namespaces, the routing (backend, install), the wrapper type
from . import linalg, numpy_linalg
from ._array import set_dask_namespace
from .linalg import certify_eigh, matmul
from .routing import OzArray, asarray, backend, install, uninstall


def _dask_namespace():
    """:mod:`ozlinalg.dask`, imported with dask on the first dask array."""
    from . import dask

    return dask


# The functions that take dask arrays (ozlinalg.matmul, ozlinalg.linalg's: defined with
# _array.dask_aware) hand them to ozlinalg.dask, which neither linalg nor the floor below
# may import; the container, which may import every layer, says where it is.
set_dask_namespace(_dask_namespace)


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False, *, refine="auto"):
    """Solve ``a @ x = b``, refined where it pays: :func:`ozlinalg.linalg.solve` with
    ``refine="auto"``.

    The fastest FP64-accurate answer: where a refined solve can pay (see
    :func:`ozlinalg.linalg.solve`'s `refine`), the LU / Cholesky is factored at a
    reduced count on the INT8 units and the solution refined in FP64 to LAPACK-level
    backward error; ``refine=False`` gives the DGEMM-level solve. Every other argument,
    the result and the errors are :func:`scipy.linalg.solve`'s. Dask arrays give a lazy
    DGEMM-level solve (:func:`ozlinalg.dask.solve`).

    One solve per namespace, each with its own default: this one (``refine="auto"``),
    :func:`ozlinalg.linalg.solve` (``refine=False``: a call SciPy could make computes as
    SciPy's), :func:`ozlinalg.numpy_linalg.solve` (NumPy's semantics, ``refine=False``)
    and :func:`ozlinalg.dask.solve` (lazy, DGEMM level).

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> ozlinalg.solve(np.array([[3., 2.], [1., -1.]]), np.array([2., 4.]))
    array([ 2., -2.])
    """
    return linalg.solve(a, b, lower=lower, overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                        check_finite=check_finite, assume_a=assume_a, transposed=transposed,
                        refine=refine)


__version__ = "0.1.0"

__all__ = [
    "matmul",
    "profile",
    "Profile",
    "options",
    "get_options",
    "Options",
    "METHODS",
    "AccuracyWarning",
    "PerformanceWarning",
    "__version__",
    "linalg",
    "numpy_linalg",
    "solve",
    "certify_eigh",
    "backend",
    "install",
    "uninstall",
    "OzArray",
    "asarray",
]
