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
#: the quickstart's run before its MoCo-v2 learnt its task: the cost a rerun is held to
BEFORE_LEARNING = ROOT / "results/quickstart_2026-12-05_content"


def _times(folder: Path) -> tuple[float, float]:
    """CPU seconds and wall seconds of the ``/usr/bin/time -v`` file in ``folder``."""
    cpu, minutes, seconds = cpu_and_wall((folder / "time_and_stderr.txt").read_text())
    return cpu, 60 * minutes + seconds


def _quoted(folder: Path, unit: str = "CPU-seconds") -> str:
    """How a record's time is quoted: ``M min SS.ss s, C.c CPU-seconds``."""
    cpu, wall = _times(folder)
    return f"{int(wall // 60)} min {wall % 60:05.2f} s, {cpu:.1f} {unit}"


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
    assert _quoted(RECORD) in readme
    (cpu, wall), (old_cpu, old_wall) = _times(RECORD), _times(BEFORE_LEARNING)
    assert cpu < old_cpu
    assert f"({old_cpu:.1f} CPU-seconds; {wall - old_wall:.2f} s more of wall time)" in readme
    printed = (RECORD / "printed.txt").read_text().split("\n\n")[0]
    assert f"```\n{printed}\n```" in (ROOT / "README.md").read_text()


def test_the_record_says_what_it_cost_against_the_runs_before_it() -> None:
    """The record's times are its ``/usr/bin/time -v`` files: this run, the 2026-12-06 spec run the same
    way (``before/``), the 30 text steps (``text30/``) and the run of 2026-12-05 it is held to."""
    text = " ".join((RECORD / "README.md").read_text().split())
    for folder in (RECORD, RECORD / "before", RECORD / "text30", BEFORE_LEARNING):
        assert _quoted(folder) in text, folder
    (cpu, wall), (old_cpu, old_wall) = _times(RECORD), _times(BEFORE_LEARNING)
    assert cpu <= old_cpu  # no more CPU than the run before the learning regime
    assert (f"{old_cpu - cpu:.1f} CPU-seconds fewer than the run of 2026-12-05 and {wall - old_wall:.2f} s "
            "more") in text


def test_each_start_of_the_record_was_measured_once() -> None:
    """The six text cells share one start, each vision seed's three cells one: one cell of each measured it
    (``start_shared_from`` null), the others read its file, which holds the same scores."""
    files = sorted((RECORD / "start_cache").glob("*.json"))
    assert len(files) == 3
    groups: dict[tuple[str, int | None], list[dict]] = {}
    for path in sorted(RECORD.glob("runs/*/*/seed*/results.json")):
        record = json.loads(path.read_text())
        seed = None if record["task"] == "text" else record["seed"]
        groups.setdefault((record["task"], seed), []).append(record)
    assert sorted((k, len(v)) for k, v in groups.items()) == [
        (("text", None), 6), (("vision", 1), 3), (("vision", 2), 3)]
    kept = {json.loads(f.read_text())["key"][:16]: json.loads(f.read_text())["start"] for f in files}
    for records in groups.values():
        measured = [r for r in records if r["start_shared_from"] is None]
        assert len(measured) == 1
        for r in records:
            assert r["start_scores"] == measured[0]["start_scores"]
            if r["start_shared_from"] is not None:
                assert kept[Path(r["start_shared_from"]).stem]["scores"] == r["start_scores"]


def test_docs_performance_quotes_the_record_s_times() -> None:
    text = " ".join((ROOT / "docs/performance.md").read_text().split()).replace("*", "")
    for folder in (RECORD / "before", RECORD, RECORD / "text30"):
        assert _quoted(folder, "CPU-s") in text, folder.name
