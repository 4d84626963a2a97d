"""Accuracy harness (see ozlinalg/tools/sweep.py): writes docs/accuracy-table.md and the plot.

    python benchmarks/studies/accuracy.py  # m = p = 256, n = 4096, phi 0.5 1 2 4, slices 3..14
"""
import sys
from pathlib import Path

from ozlinalg.tools.sweep import main

DOCS = Path(__file__).resolve().parents[2] / "docs"

if __name__ == "__main__":
    main(["--out", str(DOCS / "accuracy-table.md"), "--plot", str(DOCS / "img" / "accuracy.png")]
         + sys.argv[1:], prog="benchmarks/studies/accuracy.py")
