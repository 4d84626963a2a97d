"""pytest plugin of ``fault_injection.py``: a relative error injected into ozlinalg's
emulated products at one point, for a whole test run.

``OZLINALG_FAULT_POINT`` names the point (:data:`POINTS`), ``OZLINALG_FAULT_DELTA`` the
relative error ``delta``: each value the point produces is multiplied by
``1 + delta``. The point's function is replaced in its own module and in every
``ozlinalg`` module that imported it by name, before any test runs (modules imported
later take the replaced one from its source). Loaded with ``-p fault_plugin``.
"""
from __future__ import annotations

import functools
import os
import sys

#: point -> (module, attribute, what the fault perturbs)
POINTS = {
    "front-door": ("ozlinalg._matmul", "product",
                   "every emulated product, as ozlinalg.matmul, the factorizations and the "
                   "namespaces get it (_matmul.product, under the call's plan)"),
    "ozaki-1": ("ozlinalg.ozaki.gemm", "emulate_block",
                "the Ozaki-I core: one inner block of a product (and the one-call path of "
                "small products)"),
    "ozaki-2": ("ozlinalg.ozaki.crt.product", "crt_matmul_2d",
                "the Ozaki-II (crt) core: one 2-D product"),
    "residual": ("ozlinalg.linalg._refine", "_Refinement.residual",
                 "the refined solve's FP64 residual b - A x (A x scaled)"),
}


def _scaled(result, delta):
    if isinstance(result, tuple):  # (value, certificate / bound): the value only
        return (_scaled(result[0], delta),) + result[1:]
    if result is None:
        return None
    return result * (1.0 + delta)


def _replace_everywhere(original, wrapped):
    for name, mod in list(sys.modules.items()):
        if not name.startswith("ozlinalg") or mod is None:
            continue
        for attr, val in list(vars(mod).items()):
            if val is original:
                setattr(mod, attr, wrapped)


def install(point, delta):
    """Inject ``delta`` at ``point`` in this process."""
    import importlib

    import ozlinalg  # noqa: F401  (every module the library imports at start)
    import ozlinalg.linalg  # noqa: F401

    modname, attr, _ = POINTS[point]
    mod = importlib.import_module(modname)
    if point == "residual":
        cls = mod._Refinement

        def residual(self, x):
            return self.b - (1.0 + delta) * (self.a @ x)

        cls.residual = residual
        return
    original = getattr(mod, attr)

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        return _scaled(original(*args, **kwargs), delta)

    _replace_everywhere(original, wrapped)
    # the compiled one-level steps run their products inside one kernel call (the tests
    # hold them to the Python steps' bits): off, so that the fault reaches them
    steps = importlib.import_module("ozlinalg.lapack.compiled_steps")
    steps.arguments = lambda *args: None
    if point == "ozaki-1":  # small products never reach emulate_block: the same core
        small = importlib.import_module("ozlinalg.ozaki.small")
        orig_small = small.small_product

        @functools.wraps(orig_small)
        def small_wrapped(*args, **kwargs):
            return _scaled(orig_small(*args, **kwargs), delta)

        _replace_everywhere(orig_small, small_wrapped)


def pytest_configure(config):
    point = os.environ.get("OZLINALG_FAULT_POINT")
    if point:
        install(point, float(os.environ["OZLINALG_FAULT_DELTA"]))
