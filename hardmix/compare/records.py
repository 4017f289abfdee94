"""The finished cells' results records, read once for whatever reads a comparison's cells (the summary,
the start measured after the fact)."""

from __future__ import annotations

from typing import Any

from hardmix.compare.grid import Cell
from hardmix.training.results import ResultsError, read_results


def collect(cells: list[Cell]) -> tuple[dict[tuple[str, str, int], dict[str, Any]], list[str]]:
    """The finished cells' results records by (task, strategy, seed), and the labels of the others."""
    records, missing = {}, []
    for c in cells:
        try:
            record = read_results(c.run_dir)
        except ResultsError:
            record = None
        if record is None or not record.get("finished"):
            missing.append(c.label)
            continue
        records[(c.task.name, c.strategy, c.seed)] = record
    return records, missing


__all__ = ["collect"]
