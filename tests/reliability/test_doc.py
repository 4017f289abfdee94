"""``docs/reliability.md`` is the case table rendered; regenerate it with
``python -m tests.reliability.cases``."""

from __future__ import annotations

from tests.reliability.cases import CASES, DOC, render


def test_docs_reliability_md_is_the_rendered_case_table() -> None:
    assert DOC.is_file(), f"{DOC} is missing: run python -m tests.reliability.cases"
    assert DOC.read_text(encoding="utf-8") == render(), \
        f"{DOC} differs from the case table: run python -m tests.reliability.cases"


def test_every_case_is_a_row() -> None:
    text = render()
    for case in CASES:
        assert f"`{case.name}`" in text
