"""Every table of a comparison, rendered from its typed summary
(:class:`~hardmix.compare.summary_types.ComparisonSummary`): each ``*_table`` function gives a header and
rows of strings, and :func:`markdown_table` (``summary.md``, ``docs/``), :func:`text_table` (the terminal)
and :func:`html_table` (``report.html``) lay them out. The verdict's words and marks
(:func:`verdict_text`) are said here once, for every table and plot.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from hardmix.compare.stats import ALPHA, SIGNIFICANT, PairedDifference
from hardmix.compare.summary_types import ComparisonSummary, LearnedRow, PairedRow, StartRow
from hardmix.training.learned import NOT_MEASURED

Table = tuple[list[str], list[list[str]]]

#: Beside a verdict whose baseline was not shown to beat its start (its interval over the start reaches 0).
BASELINE_NOT_SHOWN_TO_LEARN = "(baseline not shown to beat its start)"
#: Beside a verdict that the t-test finds and the exact sign-flip test does not.
T_TEST_ONLY = "(t-test only)"


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _fmt(x: Any, digits: int = 2) -> str:
    return "n/a" if _missing(x) else f"{x:.{digits}f}"


def _signed(x: Any) -> str:
    return "n/a" if _missing(x) else f"{x:+.2f}"


def finite(x: Any) -> bool:
    """Whether ``x`` is a finite number (not None, NaN or infinite)."""
    return isinstance(x, (int, float)) and math.isfinite(x)


def interval_text(p: PairedDifference | LearnedRow) -> str:
    """A difference and its 95% interval, ``+1.53 [1.15, 1.92]``; the difference alone without one."""
    if _missing(p.ci_low):
        return _signed(p.mean)
    return f"{_signed(p.mean)} [{_fmt(p.ci_low)}, {_fmt(p.ci_high)}]"


def _simultaneous(p: PairedDifference) -> str:
    lo, hi = p.ci_simultaneous
    return f"[{_fmt(lo)}, {_fmt(hi)}]" if finite(lo) and finite(hi) else "n/a"


def _p(x: Any) -> str:
    """A p-value: 3 decimals, or ``<0.001``."""
    if _missing(x):
        return "n/a"
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def edge_mark(summary: ComparisonSummary, task: str, strategy: str) -> str:
    """The mark beside the verdict of a test (better, worse, n.s.) whose cells (the strategy's and the
    baseline's) selected their first or last evaluated step: ``(edge: k/N at first step)``, ``(edge: k/N
    at last step)``, both, or ``(edge: N/N evaluated once)`` when no cell had a step to choose; ``""`` when
    none did, or without a test (too few seeds, a NaN score, no spread)."""
    t = summary.tasks[task]
    p = t.paired.get(strategy)
    if p is None or not finite(p.p_value):
        return ""
    both = [t.strategies[s].diagnostics.boundary for s in (strategy, summary.baseline) if s in t.strategies]
    first, last, n = (sum(getattr(b, k) for b in both) for k in ("at_first", "at_last", "cells"))
    if not (first or last):
        return ""
    if first == last == n:
        return f"(edge: {n}/{n} evaluated once)"
    parts = [f"{k}/{n} at {w}" for k, w in ((first, "first"), (last, "last")) if k]
    return f"(edge: {', '.join(parts)} step)"


def verdict_label(p: PairedDifference) -> str:
    """A comparison's verdict as the tables show it: the t-test's (Holm), marked ``(t-test only)`` when
    the exact sign-flip test (Holm) does not find it too.

    >>> d = PairedDifference(1.0, 0.5, 1.5, 0.01, 4, "better", p_exact_holm=0.0625)
    >>> verdict_label(d), verdict_label(PairedDifference(1.0, 0.5, 1.5, 0.01, 4, "n.s."))
    ('better (t-test only)', 'n.s.')
    """
    exact = p.p_exact_holm
    if p.verdict in SIGNIFICANT and not (finite(exact) and exact < ALPHA):
        return f"{p.verdict} {T_TEST_ONLY}"
    return p.verdict


def learned_mark(summary: ComparisonSummary, task: str) -> str:
    """:data:`BASELINE_NOT_SHOWN_TO_LEARN` where the task's baseline was not shown to beat its start (its
    ``learned`` verdict is false), else ``""`` (a start not measured is said in the start row, not here)."""
    base = summary.tasks[task].learned.get(summary.baseline)
    return BASELINE_NOT_SHOWN_TO_LEARN if base is not None and base.verdict is False else ""


def baselines_not_shown_to_learn(summary: ComparisonSummary) -> list[str]:
    """The tasks whose baseline was not shown to beat its start (what ``--strict`` refuses)."""
    return [t for t in summary.tasks if learned_mark(summary, t)]


def verdict_text(summary: ComparisonSummary, task: str, strategy: str) -> str:
    """A comparison's verdict as every table shows it: :func:`verdict_label`, its :func:`edge_mark`, its
    :func:`learned_mark` and the arm's differences from the baseline's other than its strategy."""
    t = summary.tasks[task]
    differ = t.arm_differences.get(strategy)
    return " ".join(x for x in (verdict_label(t.paired[strategy]), edge_mark(summary, task, strategy),
                                learned_mark(summary, task),
                                f"(differs: {'; '.join(differ)})" if differ else "") if x)


def learned_table(summary: ComparisonSummary, task: str) -> Table:
    """Did they learn: the ``start`` row (the starting encoder's score, per seed where it depends on the
    seed) and each strategy's score, its paired difference from its cells' start with the 95% interval,
    and the verdict (``start not measured`` where the records lack it)."""
    t = summary.tasks[task]
    start = t.start or StartRow(status=NOT_MEASURED)
    head = ["", f"{t.score} (mean ± std)", "n", "Δ vs start [95% CI]", "learned"]
    other = "; ".join(f"{name} {_fmt(o.mean)}" for name, o in (start.other or {}).items())
    rows = [["start", f"{_fmt(start.mean)} ± {_fmt(start.std)}" if start.measured else "n/a", str(start.n),
             other, (start.source or "") if start.measured else start.status]]
    for strategy, row in t.strategies.items():
        lr = t.learned.get(strategy) or LearnedRow()
        verdict = lr.verdict
        said = lr.status if verdict is None else ("yes" if verdict else "no")
        if verdict is not None and lr.status != "measured":
            said += f" ({lr.status})"
        rows.append([strategy, f"{_fmt(row.mean)} ± {_fmt(row.std)}", str(lr.n),
                     interval_text(lr) if verdict is not None else "n/a", said])
    return head, rows


def verdict_table(summary: ComparisonSummary) -> Table:
    """The answer: one row per task and strategy: the paired difference from the baseline with its 95%
    interval, the t-test's p-value and its Holm adjustment, the exact sign-flip test's and its Holm
    adjustment, and the verdict (which follows ``p_holm``; :func:`verdict_text`)."""
    head = ["task", "score", "strategy", f"Δ vs {summary.baseline} [95% CI]", "n", "p", "p_holm",
            "p_exact", "p_exact_holm", "verdict"]
    rows = [[task, t.score, strategy, interval_text(p), str(p.n), _p(p.p_value), _p(p.p_holm), _p(p.p_exact),
             _p(p.p_exact_holm), verdict_text(summary, task, strategy)]
            for task, t in summary.tasks.items() for strategy, p in t.paired.items()]
    return head, rows


def cross_table(summary: ComparisonSummary) -> Table:
    """Strategies by tasks, each cell the paired difference from the baseline, its 95% interval, the
    Holm-adjusted p-value and the verdict (what ``hardmix compare`` prints first)."""
    head = ["strategy"] + [f"{name} ({t.score})" for name, t in summary.tasks.items()]
    strategies = list(dict.fromkeys(s for t in summary.tasks.values() for s in t.paired))
    rows = []
    for s in strategies:
        cells = []
        for name, t in summary.tasks.items():
            p = t.paired.get(s)
            cells.append(f"{interval_text(p)} p_holm={_p(p.p_holm)} {verdict_text(summary, name, s)}" if p
                         else "(not run)")
        rows.append([s, *cells])
    return head, rows


def contrast_table(summary: ComparisonSummary, task: str) -> Table:
    """Header and rows of one task's contrasts (each strategy against its control, a family of its own:
    ``contrasts`` in the spec): the paired difference, its 95% and simultaneous intervals, Holm's p under
    both tests, the verdict."""
    pairs = summary.tasks[task].contrasts or {}
    m = sum(finite(p.p_value) for p in pairs.values())
    head = ["strategy - control", "n", "Δ [95% CI]", f"Bonferroni CI (m = {m})", "p_holm", "p_exact_holm",
            "verdict"]
    rows = [[label, str(p.n), interval_text(p), _simultaneous(p), _p(p.p_holm), _p(p.p_exact_holm),
             verdict_label(p)] for label, p in pairs.items()]
    return head, rows


def per_task_table(summary: ComparisonSummary, task: str) -> Table:
    """Header and rows of one task's table: score mean +- std (n), the paired difference and its
    statistics (its 95% interval and the family's simultaneous one), the evaluation's sampling error, the
    verdict and the training seconds per run."""
    t = summary.tasks[task]
    m = sum(finite(p.p_value) for p in t.paired.values())
    head = ["strategy", f"{t.score} (mean ± std)", "n", f"Δ vs {summary.baseline} [95% CI]",
            f"Bonferroni CI (m = {m})", "p", "p_holm", "p_exact_holm", "effect size", "MDD (80%)", "eval SE",
            "verdict", "train s / run"]
    rows = []
    for strategy, row in t.strategies.items():
        p: PairedRow | None = t.paired.get(strategy)
        tested = [interval_text(p), _simultaneous(p), _p(p.p_value), _p(p.p_holm), _p(p.p_exact_holm),
                  _fmt(p.effect_size), _fmt(p.min_detectable_difference)] if p else ["(baseline)", *[""] * 6]
        rows.append([strategy, f"{_fmt(row.mean)} ± {_fmt(row.std)}", str(row.n), *tested,
                     _fmt(row.sampling_se), verdict_text(summary, task, strategy) if p else "",
                     _fmt(row.wall_seconds_mean, 0)])
    return head, rows


def secondary_table(summary: ComparisonSummary, task: str) -> Table:
    """The other final scores of a task (mean ± std per strategy)."""
    t = summary.tasks[task]
    keys = sorted({k for row in t.strategies.values() for k in row.secondary})
    head = ["strategy", *keys]
    rows = [[s, *(f"{_fmt(row.secondary[k].mean)} ± {_fmt(row.secondary[k].std)}" if k in row.secondary
                  else "n/a" for k in keys)] for s, row in t.strategies.items()]
    return head, rows


def _point(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items()) or "(defaults)"


def tuning_grid_table(summary: ComparisonSummary, task: str, strategy: str) -> Table:
    """One strategy's tuning grid on a task (``summary.tuning``): each point, its selection score per
    tuning seed (``failed`` where that run failed or scored NaN) and their mean; the chosen point marked."""
    tu = (summary.tuning or {})[task][strategy]
    seeds = list(dict.fromkeys(str(s) for g in tu.grid for s in [*g.seeds, *g.failed]))
    head = ["point", *(f"seed {s}" for s in seeds), f"mean {tu.score}", "chosen"]
    rows = []
    for g in tu.grid:
        by_seed = {str(k): _fmt(v) for k, v in g.seeds.items()}
        by_seed.update({str(k): "failed" for k in g.failed})
        rows.append([_point(g.point), *(by_seed.get(s, "n/a") for s in seeds), _fmt(g.mean),
                     "✓" if g.point == tu.best else ""])
    return head, rows


def tuning_budget_table(summary: ComparisonSummary) -> Table:
    """The tuning budget each strategy got per task: grid points, runs, steps per run, steps in all."""
    head = ["task", "strategy", "points", "runs", "steps / run", "steps in all", "chosen"]
    rows = []
    for task, per in (summary.tuning or {}).items():
        for strategy, tu in per.items():
            best = "(not every point scored yet)" if tu.best is None else _point(tu.best)
            steps = tu.steps_per_run
            total = "n/a" if steps is None else str(tu.runs * steps)
            rows.append([task, strategy, str(len(tu.grid)), str(tu.runs), str(steps or "n/a"), total, best])
    return head, rows


def set_aside_table(summary: ComparisonSummary) -> Table:
    """Every run set aside under ``superseded/``: its cell, the point it ran, its score and why."""
    rows = [[r.cell, "" if r.point is None else json.dumps(r.point), "" if r.score is None else str(r.score),
             r.why] for r in summary.superseded or []]
    return ["cell", "point", "score", "why"], rows


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """A table in Markdown.

    >>> print(markdown_table(["a", "b"], [["1", "2"]]))
    | a | b |
    |---|---|
    | 1 | 2 |
    """
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def text_table(head: list[str], rows: list[list[str]]) -> str:
    """A table in plain text, each column as wide as its widest cell (the terminal's)."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(
        [fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)]
    )


def html_table(head: list[str], rows: list[list[str]], classes: str = "") -> str:
    """A table in HTML (``report.html``'s), a verdict cell of better or worse classed so."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = []
    for r in rows:
        cells = "".join(f"<td class='{_cell_class(c)}'>{html.escape(str(c))}</td>" for c in r)
        body.append(f"<tr>{cells}</tr>")
    return f"<table class='{classes}'><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _cell_class(value: Any) -> str:
    return {"better": "better", "worse": "worse"}.get(str(value), "")


__all__ = [
    "BASELINE_NOT_SHOWN_TO_LEARN", "T_TEST_ONLY", "Table", "baselines_not_shown_to_learn", "contrast_table",
    "cross_table", "edge_mark", "finite", "html_table", "interval_text", "learned_mark", "learned_table",
    "markdown_table", "per_task_table", "secondary_table", "set_aside_table", "text_table",
    "tuning_budget_table", "tuning_grid_table", "verdict_label", "verdict_table", "verdict_text",
]
