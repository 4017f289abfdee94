"""What the docs tests read of a vision run's own records, in one place: how its loss and proxy task went
(``metrics.jsonl``), the starts a comparison measured after the fact (``start/<task>/*.json``) and what
``/usr/bin/time -v`` said of a command."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path


def learning(run_dir: Path) -> tuple[float, float, float]:
    """The mean of a run's first 3 and of its last 3 logged training losses, and its last logged
    ``proxy_acc`` (the fraction of a batch's queries whose positive key beats every queue negative)."""
    logged = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    losses = [r["loss"] for r in logged]
    return statistics.fmean(losses[:3]), statistics.fmean(losses[-3:]), logged[-1]["proxy_acc"]


def measured_starts(folder: Path, task: str, score: str) -> dict[str, float]:
    """Cell label (``vision/none/seed1``) -> ``score`` of its start, from a comparison's start files, each
    paired to its cells by its ``cells`` field (a cell named twice is an error)."""
    starts: dict[str, float] = {}
    for path in sorted((folder / "start" / task).glob("*.json")):
        entry = json.loads(path.read_text())
        for cell in entry["cells"]:
            assert cell not in starts, cell
            starts[cell] = entry["scores"][score]
    return starts


def cpu_and_wall(time_v: str) -> tuple[float, int, float]:
    """CPU seconds (user + system), and wall minutes and seconds, from ``/usr/bin/time -v``'s output."""
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", time_v)[1]) for k in ("User", "System"))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\d+):([\d.]+)", time_v)
    return cpu, int(wall[1]), float(wall[2])
