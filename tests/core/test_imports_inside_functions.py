"""A module of ``hardmix/compare/`` imports hardmix's own modules at its top; an import of ``hardmix``
inside a function (a method, a nested function) is there only where import time or a cycle needs it, and
says why in a comment on its line (on any line of an import written over several). A comment that is only
a pragma (``# noqa: ...``, ``# type: ignore``) says nothing.

Read with :mod:`ast` (where the imports are) and :mod:`tokenize` (the comments). No module is left out.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "hardmix" / "compare"
#: Modules not checked yet, each with its reason (a module listed must still have an import to excuse).
_PRAGMA = re.compile(r"^\s*(noqa\b[:\s\w,-]*|type:\s*ignore\b[\[\]\w,-]*|pragma\b.*)\s*$")


def _comments(source: str) -> dict[int, str]:
    """Line -> the text of its comment (without ``#``), pragmas dropped (``# why  # noqa: X`` keeps
    ``why``)."""
    found: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            parts = [p.strip() for p in tok.string.split("#") if p.strip()]
            words = " ".join(p for p in parts if not _PRAGMA.match(p))
            if words:
                found[tok.start[0]] = words
    return found


def _imports_hardmix(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "hardmix"
    return any(alias.name.split(".")[0] == "hardmix" for alias in node.names)


def unexplained_imports(source: str, filename: str = "<source>") -> list[str]:
    """``'line: import'`` for every import of ``hardmix`` inside a function of ``source`` with no comment
    saying why on its lines."""
    tree = ast.parse(source, filename)
    comments = _comments(source)
    lines = source.splitlines()
    found = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and _imports_hardmix(node):
                span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
                if not any(line in comments for line in span):
                    found.add((node.lineno, lines[node.lineno - 1].strip()))
    return [f"{line}: {text}" for line, text in sorted(found)]


def test_the_reader_finds_an_import_inside_a_function_without_a_why() -> None:
    source = '''import os

from hardmix.utils.errors import ConfigError


def f():
    from hardmix.compare.grid import Cell
    from hardmix.compare.plots import make_plots  # matplotlib: only when a report is drawn
    from hardmix.compare.stats import ALPHA  # noqa: F401
    import json

    class Inner:
        def g(self):
            from . import runner
            import hardmix.training.engine as engine  # a cycle: the engine imports this module
            return runner, engine

    from hardmix.compare.summary import (  # torch: only when a summary is built
        summarize,
    )
    from hardmix.compare.report import (
        write_html,
    )
    return Cell, make_plots, ALPHA, json, Inner, os, ConfigError, summarize, write_html
'''
    assert unexplained_imports(source) == [
        "7: from hardmix.compare.grid import Cell",
        "9: from hardmix.compare.stats import ALPHA  # noqa: F401",
        "14: from . import runner",
        "21: from hardmix.compare.report import (",
    ]


def test_every_import_of_hardmix_inside_a_function_of_compare_says_why() -> None:
    modules = sorted(FOLDER.glob("*.py"))
    assert {"cli.py", "command.py", "spec.py", "grid.py", "summary.py"} <= {p.name for p in modules}
    unexplained = {}
    for path in modules:
        found = unexplained_imports(path.read_text(encoding="utf-8"), str(path))
        if found:
            unexplained[path.name] = found
    assert not unexplained, ("an import of hardmix inside a function, with no comment saying why (move it "
                             f"to the module's top, or say why it cannot be there): {unexplained}")

