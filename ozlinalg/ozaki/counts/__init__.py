"""How many slices or moduli a product takes: every count decision in one place.

* :mod:`.estimate`: the decisions that do not depend on the engine, defined on the
  exact magnitudes and read from the engines' estimates within their error bounds;
* :mod:`.slices`: ``slices="auto"`` of the Ozaki-I methods (the count rule, its
  thresholds, the per-product plan);
* :mod:`.moduli`: ``moduli="auto"`` of Ozaki scheme II (``crt``), decided from the
  accurate scaling's bound products where they suffice;
* :mod:`.adequacy`: the side check that warns when a fixed count is too small.
"""

# Ozaki II's package first: it re-exports this package's moduli decision, which reads
# its constants, so whichever of the two is imported first, ``crt`` starts the cycle
# and each finds the other's modules it needs already loaded.
from .. import crt  # noqa: E402, F401
