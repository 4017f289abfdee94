"""The comparison's plots (matplotlib, PNG): one colour per strategy in every plot.

- ``forest.png``: the answer: per task, each strategy's paired difference from the baseline with its 95%
  interval and its simultaneous (Bonferroni) interval, filled where the latter excludes 0;
- ``scores.png``: the compared score per strategy, each seed a point, the mean with its 95% interval;
- ``selection_curves.png``: the selection score over training steps, mean and min-max band over seeds;
- ``dynamics.png``: what explains a result (MixCSE's argument, Sec. 4.1): positive, negative and
  synthetic-negative similarity and the anchors' gradient norm over steps;
- ``alignment_uniformity.png``: each strategy's path in the alignment-uniformity plane (Wang and Isola).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from hardmix.training.fingerprint import cache_folder

# matplotlib's own cache (its font list) goes under hardmix's cache folder, not $HOME, unless the user
# named one: set before matplotlib is first imported, which reads it then
os.environ.setdefault("MPLCONFIGDIR", str(cache_folder() / "matplotlib"))

from matplotlib.ticker import MaxNLocator  # noqa: E402

from hardmix.compare.grid import Cell
from hardmix.compare.summary_types import ComparisonSummary
from hardmix.compare.tables import edge_mark, learned_mark, verdict_label
from hardmix.training.metrics import read_metrics
from hardmix.training.run_folder import METRICS
from hardmix.utils.confine import makedirs, save_figure

DYNAMICS = (
    ("pos_sim", "positive similarity"),
    ("neg_sim", "negative similarity"),
    ("synthetic_sim", "synthetic-negative similarity"),
    ("anchor_grad_norm", "anchors' gradient norm"),
)
UNITS = {
    "pos_sim": "cosine similarity",
    "neg_sim": "cosine similarity",
    "synthetic_sim": "cosine similarity",
    "anchor_grad_norm": "L2 norm of the gradient",
}


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
        path = c.run_dir / METRICS
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


def _strategies(summary: ComparisonSummary) -> list[str]:
    """Every strategy of any task, in the spec's order (their colours)."""
    return list(dict.fromkeys(s for t in summary.tasks.values() for s in t.strategies))


def score_unit(score: str, difference: bool = False) -> str:
    """The unit of a score (or of a ``difference`` of two), from its name: accuracies (``*top1``,
    ``*acc*``) in % (differences in percentage points), STS scores (STS tasks, their average, STS-B dev) as
    Spearman's rho x 100.

    >>> score_unit("knn_top1"), score_unit("knn_top1", difference=True), score_unit("sts_avg")
    ('accuracy, %', 'accuracy, percentage points', 'Spearman ρ × 100')
    """
    low = score.lower()
    if "top" in low or "acc" in low:
        return "accuracy, percentage points" if difference else "accuracy, %"
    if low.startswith(("sts", "sick")):
        return "Spearman ρ × 100"
    return "score units"


def _finite(v: Any) -> TypeGuard[float]:
    return v is not None and bool(np.isfinite(v))


def _save(fig: Any, path: Path, root: Path, dpi: int = 110) -> Path:
    """Write the figure as ``path`` inside the comparison's folder ``root``, and close it."""
    try:
        save_figure(fig, path, root, dpi=dpi, bbox_inches="tight")
    finally:
        _pyplot().close(fig)
    return path


def _start_row(summary: ComparisonSummary, task: str) -> dict[str, Any] | None:
    """The forest plot's ``start`` row of a task: the starting encoder minus the baseline (the baseline's
    ``learned`` difference, negated, with its interval) and its label; None for a summary without start
    rows (an older hardmix's)."""
    t = summary.tasks[task]
    if t.start is None:
        return None
    lr = t.learned.get(summary.baseline)
    if lr is None or lr.verdict is None:
        return {"mean": None, "ci_low": None, "ci_high": None, "label": "start not measured"}
    neg = {k: -v if _finite(v := getattr(lr, k)) else None for k in ("mean", "ci_low", "ci_high")}
    return {"mean": neg["mean"], "ci_low": neg["ci_high"], "ci_high": neg["ci_low"],
            "label": "baseline beat its start" if lr.verdict else "baseline not shown to beat its start"}


def plot_forest(summary: ComparisonSummary, path: Path, root: Path) -> Path:
    """The answer: per task, each strategy's paired difference from the baseline (point) with its 95%
    t-interval (thin line; uncorrected) and the family's simultaneous interval (thick line: Bonferroni over
    the task's comparisons, ``ci_simultaneous``), a zero line, filled points where the simultaneous
    interval excludes 0 (so the filled points agree with the thick lines); on the right each row's p_holm
    and verdict, Holm's (:func:`~hardmix.compare.tables.verdict_label`, its edge mark under it): Holm is more
    powerful than Bonferroni, so rarely a significant verdict sits beside a thick line touching 0.
    Comparisons without an interval (too few seeds, no spread) are drawn as a cross at their mean; NaN ones
    are named on the right only. The legend says all of this."""
    plt = _pyplot()
    tasks = list(summary.tasks)
    col = colours(_strategies(summary))
    sizes = [max(1, len(summary.tasks[t].paired) + (summary.tasks[t].start is not None)) for t in tasks]
    fig, axes = plt.subplots(
        len(tasks), 1, figsize=(8.5, 1.3 * len(tasks) + 0.38 * sum(sizes)), squeeze=False,
        gridspec_kw={"height_ratios": sizes},
    )
    for ax, task in zip(axes[:, 0], tasks):
        t = summary.tasks[task]
        names = list(t.paired)
        for i, s in enumerate(names):
            p = t.paired[s]
            y = len(names) - 1 - i
            lo, hi = p.ci_simultaneous
            excludes = _finite(lo) and _finite(hi) and (lo > 0 or hi < 0)
            if _finite(p.ci_low):
                ax.plot([p.ci_low, p.ci_high], [y, y], color=col[s], lw=1.2)
                if _finite(lo) and _finite(hi):
                    ax.plot([lo, hi], [y, y], color=col[s], lw=4, alpha=0.45, solid_capstyle="butt")
                ax.plot(p.mean, y, "o", ms=8, color=col[s], mfc=col[s] if excludes else "white", mew=2)
            elif _finite(p.mean):
                ax.plot(p.mean, y, "x", ms=8, color=col[s], mew=2)
            holm = p.p_holm
            label = verdict_label(p) if not _finite(holm) else f"p_holm {holm:.3f}  {verdict_label(p)}"
            mark = " ".join(x for x in (edge_mark(summary, task, s), learned_mark(summary, task)) if x)
            ax.text(1.02, y, label, transform=ax.get_yaxis_transform(), va="bottom" if mark else "center",
                    fontsize=9, fontweight="bold" if p.verdict in ("better", "worse") else "normal")
            if mark:
                ax.text(1.02, y, mark, transform=ax.get_yaxis_transform(), va="top", fontsize=8)
        start = _start_row(summary, task)
        if start is not None:  # the starting encoder minus the baseline, below the strategies
            y = -1
            if _finite(start.get("ci_low")):
                ax.plot([start["ci_low"], start["ci_high"]], [y, y], color="grey", lw=1.2)
            if _finite(start.get("mean")):
                ax.plot(start["mean"], y, "D", ms=7, color="grey")
            ax.text(1.02, y, start["label"], transform=ax.get_yaxis_transform(), va="center", fontsize=8)
        low = -1 if start is not None else 0
        ax.axvline(0.0, color="black", lw=1, zorder=0)
        ax.set_yticks(range(low, len(names)), ([] if start is None else ["start"]) + names[::-1], fontsize=9)
        ax.set_ylim(low - 0.7, len(names) - 0.3)
        ax.grid(axis="x", alpha=0.3)
        unit = score_unit(t.score, difference=True)
        ax.set_xlabel(f"{t.score} − {summary.baseline} ({unit}); higher is better")
        ax.set_title(f"{task}: paired difference from {summary.baseline}, 95% interval (thin) and "
                     "simultaneous (thick)", fontsize=10)
    handles = [
        plt.Line2D([], [], marker="o", color="grey", mfc="grey", ls="-",
                   label="filled: the simultaneous interval excludes 0"),
        plt.Line2D([], [], marker="o", color="grey", mfc="white", mew=2, ls="-",
                   label="open: it does not"),
        plt.Line2D([], [], marker="x", color="grey", ls="", mew=2, label="no interval (see verdict)"),
    ]
    fig.tight_layout()
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=9,
               frameon=False, title="thin lines: 95% t-intervals, each uncorrected; thick: simultaneous over "
               "the task's comparisons (Bonferroni); verdicts: Holm", title_fontsize=8)
    return _save(fig, path, root)


def plot_scores(summary: ComparisonSummary, path: Path, root: Path) -> Path:
    """The compared score per strategy: each seed a small point, the mean a large point with its 95%
    t-interval over seeds; strategies on the vertical axis (readable at any number)."""
    from scipy import stats

    plt = _pyplot()
    tasks = list(summary.tasks)
    strategies = _strategies(summary)
    col = colours(strategies)
    n = max(len(summary.tasks[t].strategies) for t in tasks)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 1.2 + 0.38 * n), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        t = summary.tasks[task]
        names = [s for s in strategies if s in t.strategies]
        for i, s in enumerate(names):
            y = len(names) - 1 - i
            values = np.asarray([v for v in t.strategies[s].seeds.values() if _finite(v)], dtype=float)
            if not values.size:
                continue
            ax.scatter(values, np.full(values.size, y + 0.18), color=col[s], s=14, alpha=0.7, zorder=3)
            mean = values.mean()
            if values.size > 1:
                half = stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
                ax.plot([mean - half, mean + half], [y, y], color=col[s], lw=2)
            ax.plot(mean, y, "o", ms=8, color=col[s], zorder=4)
        ax.set_yticks(range(len(names)), names[::-1], fontsize=9)
        ax.set_ylim(-0.7, len(names) - 0.3)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel(f"{t.score} ({score_unit(t.score)}); higher is better")
        ax.set_title(f"{task}: {t.score} per seed (small) and mean with 95% interval", fontsize=10)
    fig.tight_layout()
    return _save(fig, path, root)


def _panels(
    cells: list[Cell], summary: ComparisonSummary, keys: list[tuple[str, str]], per_task_key: bool
) -> tuple[list[tuple[str, str, str, dict]], list[str]]:
    """The (task, key, label, series) panels that hold data, and a note for each one left out."""
    panels, empty = [], []
    for task, t in summary.tasks.items():
        mine = [c for c in cells if c.task.name == task]
        for key, label in keys:
            key = t.selection_metric if per_task_key else key
            series = _series(mine, key)
            if series:
                panels.append((task, key, label, series))
            else:
                empty.append(f"{task}: {key if per_task_key else label}")
    return panels, empty


def _lines(
    cells: list[Cell],
    summary: ComparisonSummary,
    keys: list[tuple[str, str]],
    path: Path,
    root: Path,
    per_task_key: bool = False,
) -> Path | None:
    """One panel per task and key that some strategy logged (the others named in a note under the
    figure); each point an evaluation or log step, so a single one shows; None when nothing was logged."""
    plt = _pyplot()
    strategies = _strategies(summary)
    col = colours(strategies)
    panels, empty = _panels(cells, summary, keys, per_task_key)
    if not panels:
        return None
    ncols = min(len(panels), 2)
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, 3.4 * nrows), squeeze=False)
    shown: dict[str, Any] = {}
    for ax, (task, key, label, series) in zip(axes.flat, panels):
        for s in strategies:
            runs = series.get((task, s))
            if not runs:
                continue
            steps, mean, lo, hi = _band(runs)
            (line,) = ax.plot(steps, mean, "o-", ms=3, color=col[s], label=s)
            shown.setdefault(s, line)
            if len(runs) > 1 and len(steps) > 1:
                ax.fill_between(steps, lo, hi, color=col[s], alpha=0.2)
        ax.set_title(f"{task}: {key if per_task_key else label}", fontsize=10)
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(f"{key} ({score_unit(key)})" if per_task_key else UNITS.get(key, key), fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.remove()
    fig.tight_layout()
    fig.legend(list(shown.values()), list(shown), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
               frameon=False)
    if empty:
        fig.text(0.0, -0.02, "Not logged by any strategy, left out: " + "; ".join(empty), fontsize=8,
                 va="top")
    return _save(fig, path, root, dpi=100)


def plot_alignment_uniformity(cells: list[Cell], summary: ComparisonSummary, path: Path,
                              root: Path) -> Path | None:
    """Each strategy's path in the alignment-uniformity plane over training (the dot its end); tasks that
    logged neither are left out; None when none did."""
    plt = _pyplot()
    strategies = _strategies(summary)
    col = colours(strategies)
    tasks = []
    for task in summary.tasks:
        mine = [c for c in cells if c.task.name == task]
        align, unif = _series(mine, "alignment"), _series(mine, "uniformity")
        if any(align.get((task, s)) and unif.get((task, s)) for s in strategies):
            tasks.append((task, align, unif))
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.8 * len(tasks), 3.9), squeeze=False)
    shown: dict[str, Any] = {}
    for ax, (task, align, unif) in zip(axes[0], tasks):
        for s in strategies:
            if not align.get((task, s)) or not unif.get((task, s)):
                continue
            _, a, _, _ = _band(align[(task, s)])
            _, u, _, _ = _band(unif[(task, s)])
            n = min(len(a), len(u))
            (line,) = ax.plot(u[:n], a[:n], "o-", ms=2, color=col[s], label=s, alpha=0.8)
            ax.scatter(u[n - 1 : n], a[n - 1 : n], color=col[s], s=30, zorder=3)
            shown.setdefault(s, line)
        ax.set_xlabel("uniformity: log E exp(-2‖u-v‖²) (lower: more uniform)", fontsize=9)
        ax.set_ylabel("alignment: E ‖u-u⁺‖² (lower: closer positives)", fontsize=9)
        ax.set_title(f"{task}: alignment and uniformity over training", fontsize=9)
    fig.tight_layout()
    fig.legend(list(shown.values()), list(shown), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
               frameon=False)
    return _save(fig, path, root, dpi=100)


PLOTS = ("forest", "scores", "selection_curves", "dynamics", "alignment_uniformity")


def make_plots(cells: list[Cell], summary: ComparisonSummary, folder: Path, root: Path) -> list[Path]:
    """Write every plot that has data into ``folder`` (``DIR/plots``, inside the comparison's folder
    ``root``), the forest plot first; returns their paths (a plot nothing was logged for is not drawn:
    :data:`PLOTS` names them all)."""
    makedirs(folder, root)
    made = [
        plot_forest(summary, folder / "forest.png", root),
        plot_scores(summary, folder / "scores.png", root),
        _lines(cells, summary, [("selection", "selection score")], folder / "selection_curves.png", root,
               per_task_key=True),
        _lines(cells, summary, list(DYNAMICS), folder / "dynamics.png", root),
        plot_alignment_uniformity(cells, summary, folder / "alignment_uniformity.png", root),
    ]
    return [p for p in made if p is not None]


__all__ = ["DYNAMICS", "PLOTS", "colours", "make_plots", "plot_forest", "plot_scores", "score_unit"]
