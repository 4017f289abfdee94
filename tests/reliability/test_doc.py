"""``docs/reliability.md`` is the invariants and the case table rendered; regenerate it with
``python -m tests.reliability.cases``."""

from __future__ import annotations

import ast
import importlib
from functools import reduce
from pathlib import Path

from tests.reliability.cases import CASES, DOC, INVARIANTS, render

ROOT = Path(__file__).resolve().parents[2]


def test_docs_reliability_md_is_the_rendered_case_table() -> None:
    assert DOC.is_file(), f"{DOC} is missing: run python -m tests.reliability.cases"
    assert DOC.read_text(encoding="utf-8") == render(), \
        f"{DOC} differs from the case table: run python -m tests.reliability.cases"


def test_every_case_is_a_row() -> None:
    text = render()
    for case in CASES:
        assert f"`{case.name}`" in text


def test_every_invariant_names_functions_that_exist_and_tests_that_are_in_their_files() -> None:
    assert len(INVARIANTS) == 6
    for inv in INVARIANTS:
        for where in inv.kept_by:
            module, name = where.split(":")
            assert callable(reduce(getattr, name.split("."), importlib.import_module(module))), where
        for test in inv.tests:
            path, name = test.split("::")
            tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
            assert name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, test
