"""The comparison's files: ``summary.md``, ``summary.csv``, ``summary.json`` and ``report.html`` (one
self-contained page: the tables as HTML tables, every plot embedded as a PNG data URI, the spec, the
machine, the versions and the wall times)."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import os
import platform
from pathlib import Path
from typing import Any

import yaml

from hardmix.compare.summary import cross_table, markdown_table, per_task_table, secondary_table
from hardmix.training.results import versions
from hardmix.utils.checkpoint import atomic_write_text
from hardmix.utils.machine import cpu_model


def machine() -> dict[str, Any]:
    """What ran the comparison."""
    return {
        "platform": platform.platform(),
        "processor": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def verdict_note(summary: dict[str, Any]) -> str:
    """One plain sentence on what is and is not significant."""
    sig, nonsig = [], []
    for task, t in summary["tasks"].items():
        for s, p in t["paired"].items():
            (sig if p["verdict"] in ("better", "worse") else nonsig).append(f"{s} on {task} ({p['verdict']})")
    parts = []
    if sig:
        parts.append("Significant at p < 0.05 (paired t-test over seeds): " + "; ".join(sig) + ".")
    if nonsig:
        parts.append("Not significant: " + "; ".join(nonsig) + ".")
    if summary["missing"]:
        parts.append(
            f"{len(summary['missing'])} of {summary['cells']} runs are missing: "
            + ", ".join(summary["missing"])
            + "."
        )
    return " ".join(parts)


def summary_markdown(summary: dict[str, Any]) -> str:
    """The summary's tables in Markdown (``summary.md`` less its title; ``docs/results.md`` quotes it)."""
    lines = [
        f"Baseline: `{summary['baseline']}`; seeds {summary['seeds']}; "
        f"{summary['finished']} of {summary['cells']} runs finished.",
        "",
        "### Paired difference from the baseline, across modalities",
        "",
        markdown_table(*cross_table(summary)),
        "",
        verdict_note(summary),
        "",
    ]
    for task in summary["tasks"]:
        lines += [f"### {task}", "", markdown_table(*per_task_table(summary, task)), ""]
        head, rows = secondary_table(summary, task)
        if len(head) > 1:
            lines += ["Other final scores:", "", markdown_table(head, rows), ""]
    return "\n".join(lines)


def write_markdown(summary: dict[str, Any], path: Path) -> Path:
    return atomic_write_text("# Comparison\n\n" + summary_markdown(summary), path)


def write_csv(summary: dict[str, Any], path: Path) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        [
            "task",
            "score",
            "strategy",
            "n",
            "mean",
            "std",
            "diff",
            "ci_low",
            "ci_high",
            "p_value",
            "verdict",
            "wall_seconds_mean",
        ]
    )
    for task, t in summary["tasks"].items():
        for s, row in t["strategies"].items():
            p = t["paired"].get(s, {})
            w.writerow(
                [
                    task,
                    t["score"],
                    s,
                    row["n"],
                    row["mean"],
                    row["std"],
                    p.get("mean", ""),
                    p.get("ci_low", ""),
                    p.get("ci_high", ""),
                    p.get("p_value", ""),
                    p.get("verdict", ""),
                    row["wall_seconds_mean"],
                ]
            )
    return atomic_write_text(buf.getvalue(), path)


def write_json(summary: dict[str, Any], spec_raw: dict[str, Any], path: Path) -> Path:
    record = {**summary, "spec": spec_raw, "machine": machine(), "versions": versions()}
    return atomic_write_text(json.dumps(record, indent=2, default=str) + "\n", path)


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def write_html(summary: dict[str, Any], spec_raw: dict[str, Any], plots: list[Path], path: Path) -> Path:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>hardmix compare</title><style>",
        "body{font-family:sans-serif;max-width:1200px;margin:2em auto}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}th{background:#eee}"
        "img{max-width:100%}pre{background:#f6f6f6;padding:1em}</style></head><body>",
        "<h1>hardmix compare</h1>",
        f"<p>Baseline <code>{html.escape(summary['baseline'])}</code>, seeds {summary['seeds']}, "
        f"{summary['finished']} of {summary['cells']} runs finished.</p>",
        "<h2>Paired difference from the baseline, across modalities</h2>",
        _html_table(*cross_table(summary)),
        f"<p>{html.escape(verdict_note(summary))}</p>",
    ]
    for task in summary["tasks"]:
        parts += [f"<h2>{html.escape(task)}</h2>", _html_table(*per_task_table(summary, task))]
        head, rows = secondary_table(summary, task)
        if len(head) > 1:
            parts += ["<p>Other final scores:</p>", _html_table(head, rows)]
    parts.append("<h2>Plots</h2>")
    for p in plots:
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        parts.append(
            f"<h3>{html.escape(p.stem.replace('_', ' '))}</h3><img alt='{html.escape(p.stem)}' "
            f"src='data:image/png;base64,{data}'>"
        )
    walls = {
        t: {s: r["wall_seconds_total"] for s, r in v["strategies"].items()}
        for t, v in summary["tasks"].items()
    }
    parts += [
        "<h2>Spec</h2>",
        f"<pre>{html.escape(yaml.safe_dump(spec_raw, sort_keys=False))}</pre>",
        "<h2>Machine and versions</h2>",
        f"<pre>{html.escape(json.dumps({**machine(), **versions()}, indent=2))}</pre>",
        "<h2>Training seconds (all seeds)</h2>",
        f"<pre>{html.escape(json.dumps(walls, indent=2))}</pre>",
        "</body></html>",
    ]
    return atomic_write_text("".join(parts), path)


__all__ = ["machine", "verdict_note", "write_csv", "write_html", "write_json", "write_markdown"]
