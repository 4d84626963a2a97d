"""Installing the shims of :data:`~ozlinalg.routing.ROUTES`, and routing the
whole process: :func:`install`, :func:`uninstall`.

Shims are installed ONCE (under a lock) on the module attributes, by the first
:class:`ozlinalg.backend` block or by :func:`install`. Installing before the
user's imports is what makes names bound at import (``from scipy.linalg import
cholesky``) routable: they are bound to the shim. The launcher ``python -m
ozlinalg run script.py`` (:mod:`ozlinalg.tools.launcher`) does that for a whole program.
Each shim carries ``__wrapped__`` (the original); :func:`installed` lists the
patched names.

Every ``backend()`` entry asks for the shims again, so the repeat must cost next to
nothing: once done, :func:`install_shims` returns at once unless :data:`ROUTES`
changed or a module that could not be imported then (CuPy's, where CuPy is not
installed) has been imported since, by the program or a stand-in put in
``sys.modules``: asking the import system again for a missing module would search
``sys.path`` on every entry. The first pass imports NumPy's and SciPy's modules
itself, whenever they were imported; dask, imported later, is patched by its
post-import hook (:mod:`._import_hook`). :func:`uninstall` starts over.
"""
from __future__ import annotations

import importlib
import sys
import threading

from .._options import default_options, set_process_options, validate
from . import _dask, _import_hook, _state
from ._policy import op_of
from ._registry import ROUTES, is_adapter
from ._shims import make_shim
from ._state import INSTALLED as _INSTALLED
from ._state import LOCK as _LOCK
from ._state import State

__all__ = ["install_shims", "installed", "install", "uninstall"]


#: After a complete :func:`install_shims`: ``(number of routes, modules that could
#: not be imported)``, what its quick return checks; None: not done (or uninstalled).
_done = None


def _route_count():
    return sum(map(len, ROUTES.values()))


def install_shims():
    """Patch the module attributes of :data:`ROUTES` (once; thread-safe).

    A repeat returns at once (no lock, no import) unless routes were added or a
    module missing last time is in ``sys.modules`` now (see the module's doc)."""
    done = _done
    # _route_count() inlined: this runs on every backend() entry
    if done is not None and done[0] == sum(map(len, ROUTES.values())):
        for mod_name in done[1]:
            if sys.modules.get(mod_name) is not None:
                break
        else:
            return
    _install_all()


def _install_all():
    global _done
    with _LOCK:
        count = _route_count()  # before the pass: a route added meanwhile is done next time
        missing = []
        for mod_name, funcs in ROUTES.items():
            if any(is_adapter(t) for t in funcs.values()):
                continue  # the dask routes: below, once dask.array is imported
            try:
                mod = importlib.import_module(mod_name)
            except Exception:  # CuPy absent or without a working CUDA runtime
                missing.append(mod_name)
                continue
            for name, target in funcs.items():
                key = f"{mod_name}.{name}"
                if key in _INSTALLED:
                    continue
                original = getattr(mod, name, None)
                if original is None:
                    continue
                if getattr(original, "_ozlinalg_shim", False):  # e.g. after a reload
                    _INSTALLED[key] = (mod, name, original.__wrapped__)
                    continue
                setattr(mod, name, make_shim(key, original, target, op_of(name)))
                _INSTALLED[key] = (mod, name, original)
        top = sys.modules.get("dask.array")   # dask's linalg and `@` (routing/_dask.py)
        if top is None:  # dask imported later (a script importing it after install()
            # or its launcher): a post-import hook installs the routes as it is imported
            _import_hook.add("dask.array", _on_dask_import)
        elif getattr(getattr(top, "__spec__", None), "_initializing", False):
            _after_import_elsewhere()
        else:
            _dask.install(_INSTALLED)
        _done = (count, tuple(missing))


def _after_import_elsewhere():
    """Another thread is importing dask.array right now, begun before any hook
    was there: waiting for it here, under the registry's lock, could deadlock
    with that import, so a helper thread waits for the import to finish (the
    import system's module lock) and installs the routes then."""
    def finish():
        try:
            importlib.import_module("dask.array")
        except Exception:  # that import failed: nothing to route
            return
        _on_dask_import(None)

    threading.Thread(target=finish, name="ozlinalg-dask-routes", daemon=True).start()


def _on_dask_import(module):
    """Post-import hook of ``dask.array``: install its routes (see :func:`install_shims`)."""
    with _LOCK:
        if _import_hook.active("dask.array") or module is None:
            _dask.install(_INSTALLED, importing=True)


def installed() -> list:
    """Names of the patched functions (``"numpy.linalg.solve"``, ...), sorted."""
    with _LOCK:
        return sorted(_INSTALLED)


def install(**opts):
    """Route ``numpy.linalg`` / ``scipy.linalg`` calls for the whole program.

    Call it at program start, before the modules that use NumPy/SciPy are
    imported: it installs the shims on the module attributes, so a later
    ``from scipy.linalg import cholesky`` binds the shim, and it makes routing
    active process-wide, as if the whole program, every thread included, ran
    inside ``with ozlinalg.backend(**opts):``. ``python -m ozlinalg run
    script.py`` does this for a script. Calling it again replaces the options.

    Parameters
    ----------
    **opts
        Options as for :func:`ozlinalg.options`; ``strategy`` defaults to
        ``"performant"`` (emulate only where the engine's crossover says it
        pays). They become the process-wide defaults: every context without
        an :func:`ozlinalg.options` or :func:`backend` block of its own,
        including threads started later, sees them; such blocks still
        override them locally.

    Returns
    -------
    Options
        The process-wide options now in force.

    See Also
    --------
    uninstall : the inverse.
    backend : the same routing inside a block.

    Notes
    -----
    Routing state lives in two places: a :class:`contextvars.ContextVar` set
    by :func:`backend` blocks (thread- and task-local), and a module global
    set here, which a shim consults when its context has no value. A new
    thread starts with an empty context, so it sees the process-wide state:
    that is how threads started later are routed. The options work the same
    way (:func:`ozlinalg.get_options` falls back to the process-wide options).

    Examples
    --------
    >>> import numpy as np, ozlinalg
    >>> _ = ozlinalg.install(strategy="eager", native_order=0)
    >>> from numpy.linalg import solve     # bound after install: the shim
    >>> with ozlinalg.profile() as prof:
    ...     x = solve(np.eye(3) * 2, np.ones(3))
    >>> prof.routed_emulated
    1
    >>> ozlinalg.uninstall()
    """
    opts.setdefault("strategy", "performant")
    merged = default_options().replace(**validate(dict(opts)))
    install_shims()
    with _LOCK:
        set_process_options(merged)
        _state.set_process(State(merged, process_wide=True))
    return merged


def uninstall() -> None:
    """Undo :func:`install` and restore the original functions.

    Routing stops process-wide, the process-wide options return to the library
    defaults, and the module attributes get their original functions back.
    Names bound to a shim earlier keep it; a shim with no routing active calls
    the original. Safe only when no other thread is inside a :func:`backend`
    block; the next block (or :func:`install`) installs the shims again.
    """
    global _done
    with _LOCK:
        _done = None
        _state.set_process(None)
        set_process_options(None)
        _import_hook.remove("dask.array")
        for mod, name, original in _INSTALLED.values():
            if getattr(getattr(mod, name, None), "_ozlinalg_shim", False):
                setattr(mod, name, original)
        _INSTALLED.clear()
