"""``results/superseded/``: every record there has its line in the folder's README saying why it was retired,
and every number of that line is recomputed here from the record's own files: the `none` vision cells'
logged losses and proxy accuracy, their held-out k-NN top-1 against the same seed's untrained network (the
record's ``start/vision/*.json``, paired to cells by each file's ``cells``), and the text baseline's end
against the same untrained model mean-pooled (``summary.json``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.compare.markdown_tables import parse_tables
from tests.run_records import learning, measured_starts

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "results/superseded"
LINE = re.compile(
    r"over (?P<n>\d+) seeds the loss rose from (?P<first>\d+\.\d\d-\d+\.\d\d) "
    r"to (?P<last>\d+\.\d\d-\d+\.\d\d) "
    r"at every seed, the final proxy_acc was (?P<proxy>\d+\.\d\d-\d+\.\d\d), and k-NN top-1 gained "
    r"(?P<gain>[+-]\d+\.\d to [+-]\d+\.\d) over the untrained network")
TEXT = re.compile(r"sts_avg (?P<end>\d+\.\d\d), below the (?:same )?untrained model mean-pooled "
                  r"\((?P<pooled>\d+\.\d\d)\)")


def _rows() -> dict[str, str]:
    (table,) = parse_tables((FOLDER / "README.md").read_text(encoding="utf-8"))
    return {r["record"].strip("`/"): r["why it was retired"] for r in table["rows"]}


def _vision_none(record: Path) -> list[dict]:
    """Per `none` vision cell: the mean of its first 3 and of its last 3 logged losses, its last logged
    proxy accuracy, and its held-out k-NN top-1 minus its seed's untrained network's."""
    starts = measured_starts(record, "vision", "knn_top1")
    cells = []
    for cell in sorted((record / "runs/vision/none").glob("seed*")):
        first, last, proxy = learning(cell)
        end = json.loads((cell / "results.json").read_text())["final_scores"]["knn_top1"]
        gain = end - starts[f"vision/none/{cell.name}"]
        cells.append({"first": first, "last": last, "proxy": proxy, "gain": gain})
    return cells


def _span(values: list[float], fmt: str, sep: str) -> str:
    return f"{min(values):{fmt}}{sep}{max(values):{fmt}}"


def test_every_superseded_record_has_its_line():
    folders = sorted(p.name for p in FOLDER.iterdir() if p.is_dir())
    assert folders and sorted(_rows()) == folders


def test_every_number_of_the_readme_recomputes_from_the_records():
    for name, why in _rows().items():
        record = FOLDER / name
        m = LINE.search(why)
        assert m, name
        cells = _vision_none(record)
        assert int(m["n"]) == len(cells) > 1, name
        assert all(c["last"] > c["first"] for c in cells), name  # "rose ... at every seed"
        assert m["first"] == _span([c["first"] for c in cells], ".2f", "-"), name
        assert m["last"] == _span([c["last"] for c in cells], ".2f", "-"), name
        assert m["proxy"] == _span([c["proxy"] for c in cells], ".2f", "-"), name
        assert max(c["proxy"] for c in cells) < 0.5, name  # "never learned its task"
        assert m["gain"] == _span([c["gain"] for c in cells], "+.1f", " to "), name
        summary = json.loads((record / "summary.json").read_text())
        text = summary["tasks"].get("text")
        t = TEXT.search(why)
        assert (t is not None) == (text is not None), name
        if text is not None:
            pooled = text["start"]["other"]["mean pooling"]["mean"]
            end = text["strategies"][summary["baseline"]]["mean"]
            assert (t["end"], t["pooled"]) == (f"{end:.2f}", f"{pooled:.2f}") and end < pooled, name


def test_compare_strategies_holds_compare_cpu_full_s_cells_byte_for_byte():
    """"`compare_cpu_full`'s cells byte for byte": every file of its runs and tuning is in
    compare_strategies at the same place, with the same bytes."""
    full, strategies = FOLDER / "compare_cpu_full", FOLDER / "compare_strategies"
    shared = [p for part in ("runs", "tune") for p in sorted(full.glob(f"{part}/**/*")) if p.is_file()]
    assert len(shared) > 100
    for path in shared:
        assert (strategies / path.relative_to(full)).read_bytes() == path.read_bytes(), path
