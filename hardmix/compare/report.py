"""The comparison's files: ``summary.md``, ``summary.csv``, ``summary.json`` and ``report.html`` (one
self-contained page: the tables as HTML tables, every plot embedded as a PNG data URI, the spec, the
machine, the versions and the wall times)."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from hardmix.compare.stats import ALPHA, FEW_SEEDS, NAN_SCORE, NO_SPREAD, TOO_FEW
from hardmix.compare.summary_types import ComparisonSummary, TuningRow
from hardmix.compare.tables import (
    BASELINE_NOT_SHOWN_TO_LEARN,
    T_TEST_ONLY,
    contrast_table,
    edge_mark,
    html_table,
    interval_text,
    learned_table,
    markdown_table,
    per_task_table,
    secondary_table,
    set_aside_table,
    tuning_budget_table,
    tuning_grid_table,
    verdict_table,
)
from hardmix.training.results import versions
from hardmix.utils.confine import write_text
from hardmix.utils.machine import host


def notes(summary: ComparisonSummary) -> list[str]:
    """What the reader must know to read the verdicts, in words: the correction, few seeds, degenerate
    comparisons, a compared score that is the selection score, missing runs."""
    out = [
        f"Verdicts: each strategy against `{summary.baseline}`, paired by seed (paired t-test); p_holm is "
        "Holm-adjusted over the comparisons of each task, and a difference is called better or worse only "
        f"when p_holm < {ALPHA}, else n.s. (not significant)."
    ]
    exact_min = sorted({(p.n, p.p_exact_min) for t in summary.tasks.values()
                        for p in t.paired.values() if p.p_exact_min is not None
                        and math.isfinite(p.p_exact_min)})
    if exact_min:
        reach = ", ".join(f"{m:.4g} at n = {n}" for n, m in exact_min)
        out.append(
            "Beside it, the exact sign-flip test (p_exact, Holm-adjusted over the same family: p_exact_holm) "
            "assumes nothing of the differences' distribution; it cannot go below 2 / 2^n whatever the "
            f"differences ({reach}). A verdict marked {T_TEST_ONLY} holds under the t-test, which assumes "
            "normal differences, but not under the exact test."
        )
    ns = sorted({p.n for t in summary.tasks.values() for p in t.paired.values() if p.n >= 2})
    few = [n for n in ns if n < FEW_SEEDS]
    if few:
        out.append(
            f"Few seeds: comparisons over {' or '.join(map(str, few))} paired seeds (fewer than "
            f"{FEW_SEEDS}). The t-test then has {' or '.join(str(n - 1) for n in few)} "
            f"degree{'s' if few != [2] else ''} of freedom "
            "and little power: only differences above the minimum detectable difference (MDD: 80% power at "
            "Holm's strictest alpha, from the observed spread of the paired differences) would be found "
            "reliably, so "
            "n.s. is not evidence of no difference, and a spread estimated from so few seeds is itself "
            "uncertain."
        )
    meaning = {
        TOO_FEW: "fewer than 2 paired seeds: no test",
        NAN_SCORE: "a run scored NaN: no statistic is computed",
        NO_SPREAD: "every paired difference is the same: the t-test is undefined (the difference is shown, "
        "not tested)",
    }
    for verdict, what in meaning.items():
        hit = [f"{s} on {task}" for task, t in summary.tasks.items() for s, p in t.paired.items()
               if p.verdict == verdict]
        if hit:
            out.append(f"{verdict} ({what}): " + ", ".join(hit) + ".")
    note = diagnostics_note(summary)
    if note:
        out.append(note)
    for task, t in summary.tasks.items():
        if t.score == t.selection_metric:
            out.append(
                f"{task}: the compared score {t.score} is the selection score (the best step is chosen on "
                "it), not held out" + (" (allowed by the spec)." if t.allow_selection_score else ".")
            )
        elif t.selection_metric:
            out.append(
                f"{task}: {t.score} is held out; the best step is selected on {t.selection_metric}."
            )
    if summary.failed:
        out.append(
            f"{len(summary.failed)} of {summary.cells} runs failed, each a recorded result left out "
            "of the tests (rerun them with --resume --retry-failed): "
            + "; ".join(f"{label} ({why})" for label, why in summary.failed.items())
            + "."
        )
    out += learned_notes(summary)
    if summary.missing:
        out.append(
            f"{len(summary.missing)} of {summary.cells} runs are missing: "
            + ", ".join(summary.missing)
            + "."
        )
    return out


def learned_notes(summary: ComparisonSummary) -> list[str]:
    """Whether each task's baseline learned (beat its starting encoder), and which code trained the cells
    when more than one did; nothing for a summary of an older hardmix (no start rows)."""
    out = []
    base = summary.baseline
    for task, t in summary.tasks.items():
        if t.start is None:
            continue
        lr = t.learned.get(base)
        if lr is None or lr.verdict is None:
            out.append(f"{task}: the start was not measured (the cells' records hold no start_scores), so "
                       f"whether `{base}` learned is not known; no verdict here says it did.")
        elif lr.verdict:
            out.append(f"{task}: `{base}` beat its starting encoder ({interval_text(lr)} {t.score}).")
        else:
            out.append(f"{task}: `{base}` was not shown to beat its starting encoder ({interval_text(lr)} "
                       f"{t.score}): every verdict against it is marked {BASELINE_NOT_SHOWN_TO_LEARN}, "
                       "and --strict refuses the comparison.")
    if summary.code.mixed:
        out.append("The cells were trained by different code: " + "; ".join(
            f"{label}: {', '.join(cells)}" for label, cells in (summary.code.cells or {}).items()) + ".")
    for g in summary.growth or []:
        seen = "after its results were seen" if g.after_results else "before any result was reported"
        out.append(f"Grown on {g.date}, {seen}: added {'; '.join(g.added)}.")
    return out


def diagnostics_note(summary: ComparisonSummary) -> str | None:
    """What the verdicts' marks and the tuning's diagnostics say, in one paragraph (None when nothing is
    flagged): the legend of :func:`~hardmix.compare.tables.edge_mark`, the chosen points at their grid's
    edge and the knobs that made no measurable difference."""
    parts = []
    if any(edge_mark(summary, task, s) for task, t in summary.tasks.items() for s in t.paired):
        parts.append(
            "A verdict marked (edge: k/N at first or last step) rests on cells that selected the first or "
            "the last step they evaluated: k of the N cells of the strategy and the baseline ('evaluated "
            "once': no step to choose from), so the best model may lie outside the steps evaluated and the "
            "verdict compares where evaluation cut training, not each strategy at its best."
        )
    tuning = summary.tuning or {}
    edges = _grouped(tuning, lambda tu: ", ".join(f"{k} {v}" for k, v in (tu.grid_edge or {}).items()))
    inert = _grouped(tuning, lambda tu: ", ".join(tu.inert_knob or []))
    if edges:
        parts.append(f"Tuning chose a grid edge (a better point may lie beyond it): {edges}.")
    if inert:
        parts.append(f"Inert knobs (their grid points' mean selection scores within one standard error): "
                     f"{inert}.")
    return " ".join(parts) or None


def _grouped(tuning: dict[str, dict[str, TuningRow]], what: Callable[[TuningRow], str]) -> str:
    """``what`` of each tuned strategy, the strategies that share it together, a task at a time:
    ``text: mixcse.lam high for mixcse, mixcse_nosg; loss.temperature low for none. vision: ...``."""
    out = []
    for task, per in tuning.items():
        groups: dict[str, list[str]] = {}
        for s, tu in per.items():
            if what(tu):
                groups.setdefault(what(tu), []).append(s)
        if groups:
            out.append(f"{task}: " + "; ".join(f"{k} for {', '.join(ss)}" for k, ss in groups.items()))
    return ". ".join(out)


def _seeds_line(summary: ComparisonSummary) -> str:
    own = {t: v.seeds for t, v in summary.tasks.items() if v.seeds != summary.seeds}
    seeds = f"seeds {summary.seeds}" + "".join(f" ({t}: {s})" for t, s in own.items())
    done = f"{summary.finished} of {summary.cells} runs finished."
    return f"Baseline: `{summary.baseline}`; {seeds}; {done}"


def verdicts_markdown(summary: ComparisonSummary, other_scores: bool = False, learned: bool = True) -> str:
    """The answer in Markdown: the verdict table, what to know to read it (whether each task's baseline
    learned among it), and per task its table, its start table (``learned``) and, with ``other_scores``,
    its other final scores. What ``docs/`` quotes of a comparison (without the start tables: the notes say
    whether each baseline beat its start, ``summary.md`` has the tables)."""
    lines = [
        _seeds_line(summary),
        "",
        "### Verdicts",
        "",
        markdown_table(*verdict_table(summary)),
        "",
        *(f"- {n}" for n in notes(summary)),
        "",
    ]
    for task, t in summary.tasks.items():
        lines += [f"### {task}", "", markdown_table(*per_task_table(summary, task)), ""]
        if learned and t.start is not None:  # a summary of an older hardmix has none
            lines += [f"Did they learn? Each against its cells' starting encoder ({task}):", "",
                      markdown_table(*learned_table(summary, task)), ""]
        head, rows = secondary_table(summary, task)
        if other_scores and len(head) > 1:
            lines += ["Other final scores:", "", markdown_table(head, rows), ""]
    return "\n".join(lines)


def summary_markdown(summary: ComparisonSummary) -> str:
    """The summary's tables in Markdown (``summary.md`` less its title): the verdict table, what to know
    to read it, then per task its table and its other final scores, and the tuning when there was one."""
    lines = [verdicts_markdown(summary, other_scores=True)]
    for task, t in summary.tasks.items():
        if t.contrasts:
            lines += [f"### {task}: each strategy against its control (Holm over these contrasts)", "",
                      markdown_table(*contrast_table(summary, task)), ""]
    if summary.tuning:
        lines += ["### Tuning", "", markdown_table(*tuning_budget_table(summary)), ""]
        for task, per in summary.tuning.items():
            for strategy in per:
                table = markdown_table(*tuning_grid_table(summary, task, strategy))
                lines += [f"{task}, {strategy}{_tuning_flags(per[strategy])}:", "", table, ""]
    if summary.superseded:  # every run set aside, every look at the held-out data disclosed
        lines += ["### Set aside (kept in superseded/)", "", markdown_table(*set_aside_table(summary)), ""]
    return "\n".join(lines)


def _tuning_flags(tu: TuningRow) -> str:
    """A tuned strategy's diagnostics beside its grid's title: `` (grid edge: mixcse.lam high; inert:
    loss.temperature)``, or ``""``."""
    parts = [f"grid edge: {', '.join(f'{k} {v}' for k, v in tu.grid_edge.items())}"] if tu.grid_edge else []
    parts += [f"inert: {', '.join(tu.inert_knob)}"] if tu.inert_knob else []
    return f" ({'; '.join(parts)})" if parts else ""


def write_markdown(summary: ComparisonSummary, path: Path, root: Path) -> Path:
    """``summary.md`` at ``path``, inside the comparison's folder ``root``."""
    return write_text("# Comparison\n\n" + summary_markdown(summary), path, root)


def write_csv(summary: ComparisonSummary, path: Path, root: Path) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf)
    keys = ["mean", "ci_low", "ci_high", "p_value", "p_holm", "p_exact", "p_exact_holm", "effect_size",
            "min_detectable_difference", "verdict"]
    w.writerow(["task", "score", "strategy", "n", "mean", "std", "sampling_se", "diff", *keys[1:],
                "ci_simultaneous_low", "ci_simultaneous_high", "ci_simultaneous_method", "edge",
                "wall_seconds_mean"])
    for task, t in summary.tasks.items():
        for s, row in t.strategies.items():
            p = t.paired.get(s)
            lo, hi = p.ci_simultaneous if p else ("", "")
            w.writerow([task, t.score, s, row.n, row.mean, row.std, row.sampling_se,
                        *((getattr(p, k) if p else "") for k in keys), lo, hi,
                        p.ci_simultaneous_method if p else "", edge_mark(summary, task, s) if p else "",
                        row.wall_seconds_mean])
    return write_text(buf.getvalue(), path, root)


def _strict(value: Any) -> Any:
    """``value`` with NaN and infinities as None (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def summary_json(summary: ComparisonSummary, spec_raw: dict[str, Any], machine: dict[str, Any],
                 used: dict[str, Any]) -> str:
    """The text of ``summary.json``: the summary, the spec, the ``machine`` and the versions ``used`` (NaN
    written as null)."""
    record = {**summary.as_json(), "spec": spec_raw, "machine": machine, "versions": used}
    return json.dumps(_strict(record), indent=2, default=str, allow_nan=False) + "\n"


def write_json(summary: ComparisonSummary, spec_raw: dict[str, Any], path: Path, root: Path) -> Path:
    """``summary.json``, written here (:func:`summary_json`)."""
    return write_text(summary_json(summary, spec_raw, host(), versions()), path, root)


def _image(path: Path, caption: str) -> str:
    """A plot embedded as the base64 of its file, byte for byte."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f"<figure><img alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


CAPTIONS = {
    "forest": "Each strategy minus the baseline, paired by seed: the mean difference (point), its 95% "
    "interval (thin line) and the family's simultaneous interval (thick line: Bonferroni over the task's "
    "comparisons); a point is filled where the simultaneous interval excludes 0. The verdict on the right is "
    "Holm's (more powerful: rarely, significant with a thick line touching 0). Right of the zero line is "
    "better. The grey diamond (start) is the starting encoder minus the baseline: right of zero, the "
    "baseline ended below its start on average.",
    "scores": "The compared score per strategy: each seed a small point, the mean a large one with its 95% "
    "interval.",
    "selection_curves": "The selection score at each evaluation: mean over seeds, the band their range.",
    "dynamics": "What explains a result: similarities and the anchors' gradient norm over training steps.",
    "alignment_uniformity": "Each strategy's path in the alignment-uniformity plane (Wang and Isola), the "
    "dot its end.",
}


def write_html(summary: ComparisonSummary, spec_raw: dict[str, Any], plots: list[Path], path: Path,
               root: Path) -> Path:
    """``report.html``: the forest plot of the paired differences first, then the verdict table and what to
    know to read it, then per task its tables, the tuning, the other plots, the spec and the machine."""
    forest = [p for p in plots if p.stem == "forest"]
    rest = [p for p in plots if p.stem != "forest"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>hardmix compare</title><style>",
        "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}table{border-collapse:"
        "collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left}"
        "th{background:#eee}td.better{color:#1a7f37;font-weight:bold}td.worse{color:#c62828;font-weight:bold}"
        "img{max-width:100%}figure{margin:1em 0}figcaption{font-size:13px;color:#444}"
        "pre{background:#f6f6f6;padding:1em;overflow-x:auto}li{margin:.3em 0}</style></head><body>",
        "<h1>hardmix compare</h1>",
        f"<p>Baseline <code>{html.escape(summary.baseline)}</code>, seeds {summary.seeds}, "
        f"{summary.finished} of {summary.cells} runs finished.</p>",
        "<h2>Paired difference from the baseline</h2>",
        *(_image(p, CAPTIONS["forest"]) for p in forest),
        "<h2>Verdicts</h2>",
        html_table(*verdict_table(summary), classes="verdicts"),
        "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes(summary)) + "</ul>",
    ]
    for task, t in summary.tasks.items():
        parts += [f"<h2>{html.escape(task)}</h2>", html_table(*per_task_table(summary, task))]
        if t.start is not None:
            parts += ["<p>Did they learn? Each against its cells' starting encoder:</p>",
                      html_table(*learned_table(summary, task))]
        head, rows = secondary_table(summary, task)
        if len(head) > 1:
            parts += ["<p>Other final scores (mean ± std over seeds):</p>", html_table(head, rows)]
    if summary.tuning:
        parts += ["<h2>Tuning</h2>", "<p>Each strategy's grid, scored on the selection split only; the "
                  "chosen point then ran on the evaluation seeds. The budget each strategy got:</p>",
                  html_table(*tuning_budget_table(summary))]
        for task, per in summary.tuning.items():
            for strategy, tu in per.items():
                title = f"{task}, {strategy} ({tu.score}){_tuning_flags(tu)}"
                table = html_table(*tuning_grid_table(summary, task, strategy))
                parts += [f"<h3>{html.escape(title)}</h3>", table]
    parts.append("<h2>Plots</h2>")
    parts += [f"<h3>{html.escape(p.stem.replace('_', ' '))}</h3>" + _image(p, CAPTIONS.get(p.stem, ""))
              for p in rest]
    walls = {t: {s: r.wall_seconds_total for s, r in v.strategies.items()} for t, v in summary.tasks.items()}
    parts += [
        "<h2>Spec</h2>",
        f"<pre>{html.escape(yaml.safe_dump(spec_raw, sort_keys=False))}</pre>",
        "<h2>Machine and versions</h2>",
        f"<pre>{html.escape(json.dumps({**host(), **versions()}, indent=2))}</pre>",
        "<h2>Training seconds (all seeds; pauses and evaluations excluded)</h2>",
        f"<pre>{html.escape(json.dumps(walls, indent=2))}</pre>",
        "</body></html>",
    ]
    return write_text("".join(parts), path, root)


__all__ = [
    "diagnostics_note", "notes", "summary_json", "summary_markdown", "verdicts_markdown", "write_csv",
    "write_html", "write_json", "write_markdown",
]
