"""The quickstart's committed runs in the learning regime (``results/quickstart_2026-12-06``, and
``results/quickstart_2026-12-07``, the spec as it is now): each README's table of the vision cells is
recomputed from each cell's records, MoCo-v2 (``none``) learns its task at every seed (the loss falls, the
final proxy accuracy is above 0.5, the test k-NN ends at least 5 points above the untrained network of the
same seed), the newer record ran the quickstart spec as it is now, and its cost against the run before it
is the records' own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.run_records import cpu_and_wall, learning

ROOT = Path(__file__).resolve().parents[1]
RECORDS = [ROOT / "results/quickstart_2026-12-06", ROOT / "results/quickstart_2026-12-07"]
RECORD = RECORDS[-1]


def _row(cell: Path) -> tuple[float, float, float, float, float]:
    results = json.loads((cell / "results.json").read_text())
    return (*learning(cell), results["start_scores"]["knn_top1"], results["final_scores"]["knn_top1"])


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.name)
def test_the_readme_table_recomputes_from_the_cells(record: Path) -> None:
    readme = (record / "README.md").read_text()
    rows = re.findall(r"^\| `(\w+)/seed(\d+)` \| (.*) \|$", readme, flags=re.M)
    cells = sorted(record.glob("runs/vision/*/seed*"))
    assert len(rows) == len(cells) == 6
    for strategy, seed, rest in rows:
        first, last, proxy, start, end = _row(record / "runs/vision" / strategy / f"seed{seed}")
        assert [c.strip() for c in rest.split("|")] == [
            f"{first:.2f} -> {last:.2f}", f"{proxy:.2f}", f"{start:.1f} -> {end:.1f}", f"{end - start:+.1f}"]


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.name)
def test_mocov2_learns_its_task_at_every_seed_of_the_quickstart(record: Path) -> None:
    for cell in sorted(record.glob("runs/vision/none/seed*")):
        first, last, proxy, start, end = _row(cell)
        assert last < first and proxy > 0.5 and end - start >= 5.0, cell.name


def test_the_record_ran_the_quickstart_spec_as_it_is() -> None:
    saved = yaml.safe_load((RECORD / "spec.yaml").read_text())
    saved.pop("auto_precision")  # the comparison's own note of how train.precision: auto resolved
    assert saved == yaml.safe_load((ROOT / "configs/compare/quickstart.yaml").read_text())


def test_the_readme_quotes_the_record() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    gains = [end - start for *_, start, end in map(_row, sorted(RECORD.glob("runs/vision/none/seed*")))]
    assert f"k-NN top-1 {gains[0]:+.1f} and {gains[1]:+.1f} over its untrained network" in readme
    cpu, minutes, seconds = cpu_and_wall((RECORD / "time_and_stderr.txt").read_text())
    assert f"{minutes} min {seconds:.1f} s, {cpu:.1f} CPU-seconds" in readme
    printed = (RECORD / "printed.txt").read_text().split("\n\n")[0]
    assert f"```\n{printed}\n```" in (ROOT / "README.md").read_text()
