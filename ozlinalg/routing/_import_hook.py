"""Run a function right after a module is first imported (a post-import hook).

:func:`ozlinalg.install` patches ``dask.array``'s linear algebra, but a
program may import dask after it (``python -m ozlinalg run script.py``, where
the script imports dask itself). Patching at install time would either miss
dask or import it for programs that never use it, so a finder on
``sys.meta_path`` waits for the import: it finds the module's spec with the
other finders, wraps the loader, and calls the hook once the module has
executed (the way coverage and tracing libraries patch later-imported
modules). The hook runs in the importing thread, before the import
returns, so the first ``import dask.array`` already sees the patched
functions.
"""
from __future__ import annotations

import importlib.abc
import sys
import threading

__all__ = ["PostImportFinder", "add", "active", "remove"]

_LOCK = threading.Lock()


class _Loader(importlib.abc.Loader):
    """The module's own loader, and the hook after ``exec_module``."""

    def __init__(self, loader, hook):
        self.loader, self.hook = loader, hook

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # the module is put back under its own loader first, so that
        # reloading it or reading its resources never goes through this one
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.hook(module)

    def __getattr__(self, name):   # get_resource_reader, is_package, ...
        return getattr(self.loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Calls ``hook(module)`` after module ``name`` is first executed.

    A hook that raises is reported as a warning and never breaks the import:
    a program must keep working (unrouted) when routing cannot be installed.
    """

    def __init__(self, name, hook):
        self.name, self.hook = name, hook
        self._busy = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or getattr(self._busy, "on", False):
            return None
        self._busy.on = True   # importlib.util.find_spec asks sys.meta_path again
        try:
            spec = _find_with_others(self, fullname, path, target)
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self._safe_hook)
        return spec

    def _safe_hook(self, module):
        try:
            self.hook(module)
        except Exception as exc:  # routing is optional; the import is not
            import warnings

            warnings.warn(f"ozlinalg: could not install the routes for {self.name}: {exc!r}",
                          RuntimeWarning, stacklevel=2)


def _find_with_others(me, fullname, path, target):
    """The spec the finders after (and before) ``me`` on ``sys.meta_path`` give."""
    for finder in list(sys.meta_path):
        if finder is me or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


def add(name, hook) -> PostImportFinder | None:
    """Put a :class:`PostImportFinder` for ``name`` first on ``sys.meta_path``
    (once per name: a second call returns None and adds nothing)."""
    with _LOCK:
        if any(isinstance(f, PostImportFinder) and f.name == name for f in sys.meta_path):
            return None
        finder = PostImportFinder(name, hook)
        sys.meta_path.insert(0, finder)
        return finder


def active(name) -> bool:
    """Whether a finder for ``name`` is on ``sys.meta_path``."""
    return any(isinstance(f, PostImportFinder) and f.name == name for f in sys.meta_path)


def remove(name) -> None:
    """Take the finders for ``name`` off ``sys.meta_path``."""
    with _LOCK:
        sys.meta_path[:] = [f for f in sys.meta_path
                            if not (isinstance(f, PostImportFinder) and f.name == name)]
