"""Whether routing is active, and with which options: the state every shim reads.

Two places (see :func:`ozlinalg.install`): a :class:`contextvars.ContextVar` set
by :class:`ozlinalg.backend` blocks (thread- and task-local), and the process-wide
state of :func:`ozlinalg.install`, which a context without a block of its own sees.
"""
from __future__ import annotations

import contextlib
import contextvars
import threading

__all__ = ["State", "SUSPENDED", "ACTIVE", "LOCK", "INSTALLED", "MISSING", "process",
           "set_process", "active", "suspended"]


class State:
    """What routing is active with: the options of the block (or of install())."""

    __slots__ = ("options", "process_wide")

    def __init__(self, options, process_wide=False):
        self.options = options
        self.process_wide = process_wide


#: Set inside an ozlinalg routine that a shim called: nested calls run natively.
SUSPENDED = State(None)
ACTIVE: contextvars.ContextVar = contextvars.ContextVar("ozlinalg_backend", default=None)
#: The state of install(): what a context without a backend() block sees. A module
#: global (not a ContextVar) so that threads started later see it.
process: State | None = None
#: Guards the registry of installed shims, the process-wide state and the
#: thresholds' caches (an engine replaced while a threshold is computed).
LOCK = threading.Lock()
INSTALLED: dict = {}  # "module.name" -> (module, name, original)
MISSING = object()


def set_process(state) -> None:
    """Make `state` (or ``None``: not routed) the process-wide state."""
    global process
    process = state


def active() -> bool:
    """Whether routing is active in the current context (a block, or install())."""
    state = ACTIVE.get(process)
    return state is not None and state is not SUSPENDED


@contextlib.contextmanager
def suspended():
    """Routing off in this context while the block runs (ozlinalg's own calls)."""
    token = ACTIVE.set(SUSPENDED)
    try:
        yield
    finally:
        ACTIVE.reset(token)
