"""The comparison's plots (matplotlib, PNG): one colour per strategy in every plot.

- ``scores.png``: the compared score per strategy, each seed a point, the mean a bar;
- ``selection_curves.png``: the selection score over training steps, mean and min-max band over seeds;
- ``dynamics.png``: what explains a result (MixCSE's argument, Sec. 4.1): positive, negative and
  synthetic-negative similarity and the anchors' gradient norm over steps;
- ``alignment_uniformity.png``: each strategy's path in the alignment-uniformity plane (Wang and Isola).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from hardmix.compare.grid import Cell
from hardmix.training.metrics import read_metrics

DYNAMICS = (
    ("pos_sim", "positive similarity"),
    ("neg_sim", "negative similarity"),
    ("synthetic_sim", "synthetic-negative similarity"),
    ("anchor_grad_norm", "anchors' gradient norm"),
)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def colours(strategies: list[str]) -> dict[str, Any]:
    """One distinct colour per strategy (the spec's order), the same in every plot: ``tab10`` up to 10
    strategies, ``tab20`` up to 20 (its 10 dark shades first, then the light ones), beyond that evenly
    spaced colours of ``turbo``.

    >>> c = colours([f"s{i}" for i in range(11)])
    >>> len(set(c.values())), c["s0"] != c["s10"]
    (11, True)
    """
    plt = _pyplot()
    n = len(strategies)
    if n <= 10:
        return {s: plt.get_cmap("tab10")(i) for i, s in enumerate(strategies)}
    if n <= 20:
        order = list(range(0, 20, 2)) + list(range(1, 20, 2))
        return {s: plt.get_cmap("tab20")(order[i]) for i, s in enumerate(strategies)}
    return {s: plt.get_cmap("turbo")(i / (n - 1)) for i, s in enumerate(strategies)}


def _series(cells: list[Cell], key: str) -> dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]]:
    """(task, strategy) -> one (steps, values) per seed of ``key`` from metrics.jsonl (a key ending
    ``/synthetic_sim`` matches ``synthetic_sim``)."""
    out: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for c in cells:
        path = c.run_dir / "metrics.jsonl"
        if not path.is_file():
            continue
        steps, values = [], []
        for r in read_metrics(path):
            match = key if key in r else next((k for k in r if k.endswith("/" + key)), None)
            if match is not None and isinstance(r[match], (int, float)):
                steps.append(r["step"])
                values.append(r[match])
        if steps:
            out[(c.task.name, c.strategy)].append((np.asarray(steps), np.asarray(values, dtype=float)))
    return out


def _band(runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max over seeds at the steps every seed logged."""
    common = sorted(set.intersection(*(set(s.tolist()) for s, _ in runs)))
    table = np.array([[dict(zip(s.tolist(), v.tolist()))[k] for k in common] for s, v in runs])
    return np.asarray(common), table.mean(0), table.min(0), table.max(0)


def _strategies(summary: dict[str, Any]) -> list[str]:
    """Every strategy of any task, in the spec's order (their colours)."""
    return list(dict.fromkeys(s for t in summary["tasks"].values() for s in t["strategies"]))


def plot_scores(summary: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    tasks = list(summary["tasks"])
    strategies = _strategies(summary)
    col = colours(strategies)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        t = summary["tasks"][task]
        for i, s in enumerate(strategies):
            row = t["strategies"].get(s)
            if row is None:
                continue
            values = list(row["seeds"].values())
            if values:
                ax.bar(i, np.mean(values), color=col[s], alpha=0.35, width=0.6)
                ax.scatter(i + np.linspace(-0.12, 0.12, len(values)), values, color=col[s], zorder=3, s=18)
        ax.set_xticks(range(len(strategies)), strategies, rotation=20)
        ax.set_title(f"{task}: {t['score']}")
        finite = [v for row in t["strategies"].values() for v in row["seeds"].values()]
        if finite:
            lo, hi = min(finite), max(finite)
            pad = max(0.5, 0.15 * (hi - lo))
            ax.set_ylim(lo - pad, hi + pad)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _lines(
    cells: list[Cell],
    summary: dict[str, Any],
    keys: list[tuple[str, str]],
    path: Path,
    per_task_key: bool = False,
) -> Path:
    plt = _pyplot()
    tasks = list(summary["tasks"])
    strategies = _strategies(summary)
    col = colours(strategies)
    fig, axes = plt.subplots(
        len(tasks), len(keys), figsize=(4.2 * len(keys), 3.2 * len(tasks)), squeeze=False
    )
    for i, task in enumerate(tasks):
        for j, (key, title) in enumerate(keys):
            ax = axes[i][j]
            key = summary["tasks"][task]["selection_metric"] if per_task_key else key
            series = _series([c for c in cells if c.task.name == task], key)
            for s in strategies:
                runs = series.get((task, s))
                if not runs:
                    continue
                steps, mean, lo, hi = _band(runs)
                ax.plot(steps, mean, color=col[s], label=s)
                if len(runs) > 1:
                    ax.fill_between(steps, lo, hi, color=col[s], alpha=0.2)
            ax.set_title(f"{task}: {key if per_task_key else title}", fontsize=9)
            ax.set_xlabel("step")
            if i == 0 and j == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_alignment_uniformity(cells: list[Cell], summary: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    tasks = list(summary["tasks"])
    strategies = _strategies(summary)
    col = colours(strategies)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        mine = [c for c in cells if c.task.name == task]
        align, unif = _series(mine, "alignment"), _series(mine, "uniformity")
        for s in strategies:
            if not align.get((task, s)) or not unif.get((task, s)):
                continue
            _, a, _, _ = _band(align[(task, s)])
            _, u, _, _ = _band(unif[(task, s)])
            n = min(len(a), len(u))
            ax.plot(u[:n], a[:n], color=col[s], label=s, alpha=0.8)
            ax.scatter(u[n - 1 : n], a[n - 1 : n], color=col[s], s=30, zorder=3)
        ax.set_xlabel("uniformity (lower: more uniform)")
        ax.set_ylabel("alignment (lower: closer positives)")
        ax.set_title(f"{task}: alignment and uniformity over training", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def make_plots(cells: list[Cell], summary: dict[str, Any], folder: Path) -> list[Path]:
    """Write every plot into ``folder`` (``DIR/plots``); returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    return [
        plot_scores(summary, folder / "scores.png"),
        _lines(
            cells,
            summary,
            [("selection", "selection score")],
            folder / "selection_curves.png",
            per_task_key=True,
        ),
        _lines(cells, summary, list(DYNAMICS), folder / "dynamics.png"),
        plot_alignment_uniformity(cells, summary, folder / "alignment_uniformity.png"),
    ]


__all__ = ["DYNAMICS", "colours", "make_plots"]
