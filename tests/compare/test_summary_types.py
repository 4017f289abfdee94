"""The typed summary: every committed comparison's ``summary.json`` read back (``from_json``) and written
again (``as_json``) is the same text, byte for byte, and its ``summary.md`` is the tables rendered from the
typed summary alone; a statistic written as null (NaN) reads back as NaN and writes as null again."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from hardmix.compare.report import summary_json, summary_markdown
from hardmix.compare.stats import paired_difference
from hardmix.compare.summary_types import ComparisonSummary, LearnedRow, PairedRow, StartRow
from hardmix.compare.tables import (
    learned_table,
    markdown_table,
    per_task_table,
    tuning_grid_table,
    verdict_table,
)

ROOT = Path(__file__).resolve().parents[2]
# the comparisons quoted, and the retired ones kept as they were written (results/superseded/)
COMMITTED = sorted(str(p.parent.relative_to(ROOT / "results"))
                   for pattern in ("compare_*/summary.json", "superseded/*/summary.json")
                   for p in (ROOT / "results").glob(pattern))


def test_every_committed_comparison_is_read():
    assert {"compare_peak_fair", "compare_precision", "compare_premise", "superseded/compare_cpu_full",
            "superseded/compare_strategies", "superseded/label_free_2026-12-04"} <= set(COMMITTED)


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_summary_json_reads_back_and_writes_the_same_bytes(name):
    text = (ROOT / "results" / name / "summary.json").read_text(encoding="utf-8")
    data = json.loads(text)
    summary = ComparisonSummary.from_json(data)
    assert summary_json(summary, data["spec"], data["machine"], data["versions"]) == text
    plain = {k: v for k, v in data.items() if k not in ("spec", "machine", "versions")}
    assert json.loads(json.dumps(summary.as_json())) == plain
    assert ComparisonSummary.from_json(summary.as_json()) == summary
    # typed, not dicts: seeds as the integers the spec gave
    for t in summary.tasks.values():
        assert all(isinstance(seed, int) for row in t.strategies.values() for seed in row.seeds)
        assert all(isinstance(p, PairedRow) for p in t.paired.values())
        assert isinstance(t.start, StartRow) and all(isinstance(lr, LearnedRow) for lr in t.learned.values())


def _sections(markdown: str) -> dict[str, str]:
    """A Markdown document's ``### title`` sections, each its text up to the next title."""
    parts = re.split(r"^### (.+)$", markdown, flags=re.M)
    return {title: body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_summary_md_is_the_tables_of_its_typed_summary(name):
    folder = ROOT / "results" / name
    summary = ComparisonSummary.from_json(json.loads((folder / "summary.json").read_text(encoding="utf-8")))
    committed = (folder / "summary.md").read_text(encoding="utf-8")
    assert "# Comparison\n\n" + summary_markdown(summary) == committed
    sections = _sections(committed)
    assert markdown_table(*verdict_table(summary)) in sections["Verdicts"]
    for task in summary.tasks:
        assert markdown_table(*per_task_table(summary, task)) in sections[task]
        assert markdown_table(*learned_table(summary, task)) in sections[task]
    for task, per in (summary.tuning or {}).items():
        for strategy in per:
            assert markdown_table(*tuning_grid_table(summary, task, strategy)) in sections["Tuning"]


def test_a_statistic_written_as_null_reads_back_as_nan_and_writes_null_again():
    d = paired_difference([1.0], [0.0])  # one seed: no test, NaN p-value and interval
    row = PairedRow(**{**d.__dict__}, seeds=[3])
    text = json.dumps(row.as_json())
    assert "NaN" in text  # written by summary.json's writer as null
    back = PairedRow.from_json(json.loads(text.replace("NaN", "null")))
    assert back.seeds == [3] and back.mean == 1.0 and back.verdict == d.verdict
    assert math.isnan(back.p_value) and all(math.isnan(v) for v in back.ci_simultaneous)
    assert back.as_json().keys() == row.as_json().keys()
    assert "strategy" not in back.as_json()  # a contrast's names only on a contrast
