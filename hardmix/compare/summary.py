"""What a comparison measured: per task and strategy the score over seeds, and the paired differences
from the baseline (the cross-modal table), read from the cells' ``results.json``."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from hardmix.compare.grid import Cell
from hardmix.compare.spec import CompareSpec
from hardmix.compare.stats import mean_std, paired_difference
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


def _fmt(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def summarize(spec: CompareSpec, cells: list[Cell]) -> dict[str, Any]:
    """The summary: per task, per strategy (mean, std, n, seeds, wall time, secondary scores) and the
    paired difference of each strategy from the baseline; the finished and missing cells."""
    records, missing = collect(cells)
    out: dict[str, Any] = {
        "baseline": spec.baseline,
        "seeds": spec.seeds,
        "tasks": {},
        "missing": missing,
        "finished": len(records),
        "cells": len(cells),
    }
    for task in spec.tasks.values():
        per: dict[str, Any] = {}
        for strategy in task.strategies or spec.strategies:
            recs = {
                seed: records[(task.name, strategy, seed)]
                for seed in spec.seeds
                if (task.name, strategy, seed) in records
            }
            scores = {seed: r["final_scores"].get(task.score) for seed, r in recs.items()}
            scores = {s: v for s, v in scores.items() if v is not None}
            secondary: dict[str, Any] = {}
            keys = sorted({k for r in recs.values() for k in r["final_scores"]} - {task.score})
            for k in keys:
                vals = [r["final_scores"][k] for r in recs.values() if r["final_scores"].get(k) is not None]
                if vals:
                    m, sd = mean_std(vals)
                    secondary[k] = {"mean": m, "std": sd, "n": len(vals)}
            m, sd = mean_std(list(scores.values())) if scores else (math.nan, math.nan)
            walls = [r["wall_seconds"] for r in recs.values()]
            per[strategy] = {
                "mean": m,
                "std": sd,
                "n": len(scores),
                "seeds": scores,
                "wall_seconds_mean": sum(walls) / len(walls) if walls else None,
                "wall_seconds_total": sum(walls),
                "secondary": secondary,
            }
        base = per[spec.baseline]["seeds"]
        paired = {}
        for strategy, row in per.items():
            if strategy == spec.baseline:
                continue
            common = [s for s in spec.seeds if s in row["seeds"] and s in base]
            d = paired_difference([row["seeds"][s] for s in common], [base[s] for s in common])
            paired[strategy] = {**asdict(d), "seeds": common}
        from hardmix.training.api import resolve_task

        out["tasks"][task.name] = {
            "task": task.task,
            "score": task.score,
            "strategies": per,
            "paired": paired,
            "selection_metric": resolve_task(task.task).selection_metric,
        }
    return out


def per_task_table(summary: dict[str, Any], task: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one task's table: score mean +- std (n), the paired difference and the verdict."""
    t = summary["tasks"][task]
    head = [
        "strategy",
        f"{t['score']} (mean ± std)",
        "n",
        f"Δ vs {summary['baseline']} [95% CI]",
        "p",
        "verdict",
        "wall s / run",
    ]
    rows = []
    for strategy, row in t["strategies"].items():
        p = t["paired"].get(strategy)
        mean = "n/a" if p is None or math.isnan(p["mean"]) else f"{p['mean']:+.2f}"
        diff = f"{mean} [{_fmt(p['ci_low'])}, {_fmt(p['ci_high'])}]" if p else "(baseline)"
        rows.append(
            [
                strategy,
                f"{_fmt(row['mean'])} ± {_fmt(row['std'])}",
                str(row["n"]),
                diff,
                _fmt(p["p_value"], 3) if p else "",
                p["verdict"] if p else "",
                _fmt(row["wall_seconds_mean"], 0) if row["wall_seconds_mean"] is not None else "n/a",
            ]
        )
    return head, rows


def cross_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The headline: rows are strategies, columns tasks, cells the paired difference from the baseline."""
    tasks = list(summary["tasks"])
    head = ["strategy"] + [f"{t} ({summary['tasks'][t]['score']})" for t in tasks]
    strategies = list(dict.fromkeys(s for t in summary["tasks"].values() for s in t["strategies"]))
    strategies = [s for s in strategies if s != summary["baseline"]]
    rows = []
    for s in strategies:
        cells = []
        for t in tasks:
            p = summary["tasks"][t]["paired"].get(s)
            if p is None:
                cells.append("(not run)")
                continue
            cells.append(
                f"{p['mean']:+.2f} [{_fmt(p['ci_low'])}, {_fmt(p['ci_high'])}] p={_fmt(p['p_value'], 3)} "
                f"{p['verdict']}"
                if p["n"]
                else "n/a"
            )
        rows.append([s, *cells])
    return head, rows


def secondary_table(summary: dict[str, Any], task: str) -> tuple[list[str], list[list[str]]]:
    """The other final scores of a task (mean ± std per strategy)."""
    t = summary["tasks"][task]
    keys = sorted({k for row in t["strategies"].values() for k in row["secondary"]})
    head = ["strategy", *keys]
    rows = [
        [
            s,
            *(
                f"{_fmt(row['secondary'][k]['mean'])} ± {_fmt(row['secondary'][k]['std'])}"
                if k in row["secondary"]
                else "n/a"
                for k in keys
            ),
        ]
        for s, row in t["strategies"].items()
    ]
    return head, rows


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def text_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(
        [fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)]
    )


__all__ = [
    "collect",
    "cross_table",
    "markdown_table",
    "per_task_table",
    "secondary_table",
    "summarize",
    "text_table",
]
