"""The CPU vision recipe's runs: the table of ``results/cpu_vision_recipe_2026-12-06``.

Each run folder under ``RUNS`` is one ``hardmix train vision CONFIG --output RUNS/<name>_seed<S> --set
train.seed=S``; its row is read from the folder's own files: the mean of the first 3 and of the last 3
logged training losses, the last logged ``proxy_acc`` (the fraction of a batch's queries whose positive key
beats every queue negative), the test k-NN top-1 of the untrained network of the same seed
(``results.json``'s ``start_scores``, scored before the first step by the same protocol) and of the final
model (``final_scores``), their difference, and the engine's ``wall_seconds``.

    python benchmarks/cpu_vision_recipe.py --table [RUNS]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "results/cpu_vision_recipe_2026-12-06/runs"
# Which runs each shipped config is (the name before ``_seed<S>``): the variant kept for the config.
KEPT = {"mocov2": "mocov2", "mochi": "mochi", "folder": "folder"}
HEADER = ["| run | seed | steps | loss first -> last | final proxy acc | test k-NN top-1 start -> end | gain "
          "| wall s |", "|---|---:|---:|---|---:|---|---:|---:|"]
NAME = re.compile(r"^(?P<run>.+)_seed(?P<seed>\d+)$")


def summarize(run_dir: Path) -> dict[str, Any]:
    """One run folder's row, from its ``metrics.jsonl`` and ``results.json``."""
    found = NAME.match(run_dir.name)
    if not found:
        raise ValueError(f"{run_dir}: not a run folder name (<run>_seed<S>)")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in rows if "loss" in r]
    losses = [r["loss"] for r in train]
    record = json.loads((run_dir / "results.json").read_text())
    start = record["start_scores"]["knn_top1"]
    end = record["final_scores"]["knn_top1"]
    return {
        "run": found["run"], "seed": int(found["seed"]), "steps": record["steps"],
        "loss_first": sum(losses[:3]) / 3, "loss_last": sum(losses[-3:]) / 3,
        "proxy_acc": train[-1]["proxy_acc"], "knn_start": start, "knn_end": end, "gain": end - start,
        "wall_seconds": record["wall_seconds"],
    }


def learned(row: dict[str, Any]) -> bool:
    """The recipe's bar: the loss falls, the final proxy accuracy is above 0.5, and test k-NN top-1 ends at
    least 10 points above the untrained network of the same seed."""
    return row["loss_last"] < row["loss_first"] and row["proxy_acc"] > 0.5 and row["gain"] >= 10.0


def _line(row: dict[str, Any]) -> str:
    return (f"| {row['run']} | {row['seed']} | {row['steps']} | {row['loss_first']:.2f} -> "
            f"{row['loss_last']:.2f} | {row['proxy_acc']:.2f} | {row['knn_start']:.1f} -> "
            f"{row['knn_end']:.1f} | {row['gain']:+.1f} | {row['wall_seconds']:.0f} |")


def rows(runs: Path = RUNS) -> list[dict[str, Any]]:
    """Every run folder's row: the shipped configs' runs first, then by run name and seed."""
    found = [summarize(d) for d in runs.iterdir() if d.is_dir() and (d / "results.json").is_file()]
    first = {name: i for i, name in enumerate(KEPT.values())}  # the shipped configs' runs, then the others
    return sorted(found, key=lambda r: (first.get(r["run"], len(first)), r["run"], r["seed"]))


def table(runs: Path = RUNS) -> list[str]:
    """The README's table: its header and one line a run."""
    return [*HEADER, *(_line(r) for r in rows(runs))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", nargs="?", const=str(RUNS), metavar="RUNS", required=True,
                   help="print the table of the run folders in RUNS")
    args = p.parse_args(argv)
    print("\n".join(table(Path(args.table))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
