"""The mixing step against the plain one, from interleaved A/B runs of the repository's step benchmarks.

Reads the records that ``results/step_time_2026-12-06/run_ab.sh`` leaves (``ab/round<r>_<side>_<kind>.json``:
``vision_throughput.py``'s, MoCo-v2 against MoCHi; ``text_throughput.py``'s, SimCSE against MixCSE) and
writes, per side (``old``: the code before, ``new``: after) and modality, each run's ratio (the median
mixing step over the median plain step of that run, the two interleaved step by step or round by round
inside it) and the median of those ratios over the runs.

Usage:
    python benchmarks/step_ratio.py results/step_time_2026-12-06
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any

PAIRS = {"vision": ("none (MoCo-v2), tensor path", "mochi, tensor path"), "text": ("none", "mixcse")}
RUN = re.compile(r"round(\d+)_(old|new)_(vision|text)\.json$")


def run_ratio(record: dict[str, Any], kind: str) -> tuple[float, float, float]:
    """(plain median seconds, mixing median seconds, their ratio) of one run's record."""
    plain, mixing = PAIRS[kind]
    if kind == "vision":
        a, b = (statistics.median(record["times_s"][v]) for v in (plain, mixing))
    else:
        rows = {r["variant"]: r for r in record["rows"]}
        a, b = (statistics.median(rows[v]["step_times_s"]) for v in (plain, mixing))
    return a, b, b / a


def summarize(folder: Path) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for path in sorted((folder / "ab").glob("round*_*_*.json")):
        m = RUN.search(path.name)
        if m is None:
            continue
        rnd, side, kind = int(m[1]), m[2], m[3]
        a, b, ratio = run_ratio(json.loads(path.read_text()), kind)
        load = (folder / "ab" / path.name.replace(".json", ".load_before")).read_text().split()
        runs.setdefault(kind, {}).setdefault(side, []).append(
            {"round": rnd, "plain_s": a, "mixing_s": b, "ratio": ratio, "load_1m_before": float(load[1])})
    out: dict[str, Any] = {}
    for kind, sides in runs.items():
        out[kind] = {side: {"runs": sorted(rs, key=lambda r: r["round"]),
                            "median_ratio": statistics.median(r["ratio"] for r in rs)}
                     for side, rs in sides.items()}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    args = p.parse_args()
    summary = summarize(args.folder)
    (args.folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for kind, sides in summary.items():
        for side, s in sides.items():
            ratios = ", ".join(f"{r['ratio']:.3f}" for r in s["runs"])
            n = len(s["runs"])
            print(f"{kind:6s} {side}: median ratio {s['median_ratio']:.3f} over {n} runs ({ratios})")


if __name__ == "__main__":
    main()
