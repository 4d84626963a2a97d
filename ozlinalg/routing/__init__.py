"""Routing: existing ``numpy.linalg`` / ``scipy.linalg`` / CuPy / dask calls sent
to the emulation.

==================  ====================================================
``_state``          whether routing is active (block, install()), the lock
``_policy``         which calls are emulated: screening, strategy, crossover
``_registry``       ROUTES: the one registry of routed functions
``_shims``          the shims of the NumPy, SciPy and CuPy routes
``_dask``           the dask routes (adapters registered in ROUTES)
``_import_hook``    the post-import hook that patches a later-imported dask
``_install``        installing the shims; install(), uninstall()
``_backend``        the ``backend`` context manager / decorator
``_ozarray``        OzArray: ``@`` and ``np.linalg`` on a wrapped array (NEP 13 / 18)
==================  ====================================================

See docs/backend.md and docs/dask.md.
"""
from .._emulable import original
from ._backend import backend
from ._install import install, installed, uninstall
from ._ozarray import OzArray, asarray
from ._policy import OPS, declines, emulates
from ._registry import ROUTES, implements

__all__ = ["backend", "install", "uninstall", "installed", "original", "emulates",
           "declines", "ROUTES", "OPS", "implements", "OzArray", "asarray"]
