"""Lines of code per module, docstrings, comments and blank lines not counted.

    python benchmarks/studies/module_sizes.py [ozlinalg] [--top 15]

The figure behind docs/architecture.md's rule "no module over ~500 lines of code":
a line counts when it holds a token that is neither part of a docstring (a module,
class or function docstring) nor a comment.
"""
from __future__ import annotations

import argparse
import ast
import io
import pathlib
import tokenize

_SKIP = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER)


def lines_of_code(path) -> int:
    """Lines of ``path`` holding code (not docstring, comment or blank)."""
    src = pathlib.Path(path).read_text()
    doc = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                doc.update(range(first.lineno, first.end_lineno + 1))
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in _SKIP:
            code.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in doc)
    return len(code)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="*", default=["ozlinalg"])
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    rows = sorted(((lines_of_code(p), str(p)) for root in args.roots
                   for p in pathlib.Path(root).rglob("*.py")), reverse=True)
    for n, p in rows[:args.top]:
        print(f"{n:5d}  {p}")


if __name__ == "__main__":
    main()
