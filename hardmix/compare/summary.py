"""What a comparison measured, read from the cells' ``results.json`` and ``metrics.jsonl``.

The summary (``summary.json``) holds, per task: the compared score, per strategy its scores over seeds
(``strategies.<s>.seeds``: {seed: score}), mean, std, the mean training seconds and the evaluation's own
sampling error; per strategy other than the baseline the paired difference from the baseline
(``paired.<s>``: mean, 95% interval, ``p_value``, ``p_holm``, the exact test's, ``effect_size``,
``min_detectable_difference``, the simultaneous interval ``ci_simultaneous``, ``verdict``;
:mod:`hardmix.compare.stats`); ``cells`` and ``finished`` count the cells and the finished ones,
``missing`` names the others. Under ``cell_records``, one record per
finished cell: every final score, the best step, the training seconds (pauses and evaluations excluded)
and each evaluation's scores with the diagnostics logged at that step, so anyone can recompute the tables.

What a verdict can rest on (``strategies.<s>.diagnostics``): ``boundary``, how many of the strategy's
cells selected their first or their last evaluated step (:func:`boundary`), and ``flags``, a short list in
words of that and of its tuning's diagnostics (``tuning.<task>.<s>``: ``grid_edge``, ``inert_knob``;
:mod:`hardmix.compare.tuning`). Every table marks a verdict whose cells (the strategy's and the
baseline's) selected an edge step (:func:`hardmix.compare.tables.edge_mark`).

Did they learn (:func:`start_and_learned`)? Per task, ``start``: the starting encoder's compared score, as
the cells measured it before their first step (``results.json`` ``start_scores``), per seed (``seeds``),
its mean, and every start score's mean (``scores``); ``status`` "start not measured" where no cell's record
holds it (an older hardmix's). Per strategy, ``learned.<s>``: the paired difference of its score from its
own cells' start, seed by seed (a start that does not depend on the seed, text's, is the same number in
every pair), with its 95% interval and ``verdict``: true when the interval lies above 0 (with one seed or
no spread, when the difference is above 0), false otherwise, null where the start was not measured. A
verdict between strategies whose baseline was not shown to beat its start says so beside it
(:func:`hardmix.compare.tables.verdict_text`).
``code`` lists the code (``results.json`` ``code``: git commit) that trained the cells, ``mixed`` when
they differ.

The summary is a :class:`~hardmix.compare.summary_types.ComparisonSummary`; :mod:`hardmix.compare.tables`
renders its tables.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from hardmix.compare.grid import Cell, task_metric
from hardmix.compare.records import collect
from hardmix.compare.spec import CompareSpec
from hardmix.compare.start import HOW, starts_for
from hardmix.compare.stats import PairedDifference, holm_adjusted, mean_std, paired_difference
from hardmix.compare.summary_types import (
    Boundary,
    CellRecord,
    CodeTable,
    ComparisonSummary,
    Diagnostics,
    LearnedRow,
    MeanStd,
    PairedRow,
    StartRow,
    StrategyRow,
    TaskSummary,
    TuningRow,
    ViewStart,
)
from hardmix.training.api import resolve_task
from hardmix.training.learned import NOT_MEASURED
from hardmix.training.metrics import read_metrics
from hardmix.training.run_folder import METRICS
from hardmix.utils.errors import ConfigError
from hardmix.utils.provenance import code_label

SE_SUFFIX = "_se"  # final_scores["<score>_se"]: the evaluation's sampling standard error of <score>


def check_fingerprints(cells: list[Cell], records: dict[tuple[str, str, int], dict[str, Any]]) -> None:
    """The finished cells of a task agree on their data, inputs and hardmix version, and those of a
    strategy on their config too (``results.json`` ``fingerprint``, from the seed aside), else a
    ConfigError naming two cells and what differs: a paired test never pools cells made from other data,
    evaluation sets or configs (a fingerprint of another form, an older hardmix's, differs too). Records
    without a fingerprint (made before there were any) are not compared here, so a comparison of such
    records alone is still summarized; adding cells to them is refused before anything trains
    (:mod:`hardmix.compare.fingerprints`)."""
    first: dict[tuple[str, ...], tuple[str, Any]] = {}
    for c in cells:
        record = records.get((c.task.name, c.strategy, c.seed))
        fp = (record or {}).get("fingerprint")
        if not isinstance(fp, dict):
            continue
        for part in ("data", "inputs", "hardmix", "config"):
            where = (c.task.name, part) if part != "config" else (c.task.name, c.strategy, part)
            seen = first.setdefault(where, (c.label, fp.get(part)))
            if seen[1] != fp.get(part):
                raise ConfigError(
                    f"{c.label} and {seen[0]} were made from different {part} (their results.json "
                    "fingerprints differ): they cannot be compared; `hardmix compare SPEC --output DIR "
                    "--resume --rerun-mismatched` runs again the cells not made from what they would be made "
                    "from now, or compare them in separate comparisons")


def _number(v: Any) -> float | None:
    """A JSON value as a float (None for anything that is not a number, NaN for null scores)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def evaluations(cell: Cell, selection_metric: str) -> list[dict[str, float]]:
    """Each evaluation of a cell (the ``metrics.jsonl`` lines holding the selection score): its step, every
    score it measured and every number the training logged at that step (``loss``, ``proxy_acc``, ...).
    Where no training line has that step, the last one before it is used and its step is recorded as
    ``diagnostics_step``."""
    path = cell.run_dir / METRICS
    if not path.is_file():
        return []
    lines = read_metrics(path)
    evals = [r for r in lines if selection_metric in r]
    logs = [r for r in lines if selection_metric not in r]
    out = []
    for e in evals:
        step = e["step"]
        record: dict[str, float] = {"step": step}
        for k, v in e.items():
            if k not in ("step", "epoch") and not k.startswith("best_") and _number(v) is not None:
                record[k] = v
        before = [r for r in logs if r.get("step", math.inf) <= step]
        if before:
            log = before[-1]
            if log["step"] != step:
                record["diagnostics_step"] = log["step"]
            for k, v in log.items():
                if k not in record and k not in ("step", "epoch") and _number(v) is not None:
                    record[k] = v
        out.append(record)
    return out


def cell_records(cells: list[Cell], records: dict[tuple[str, str, int], dict[str, Any]]
                 ) -> list[CellRecord]:
    """One record per finished cell, in the grid's order (``summary.json``'s ``cell_records``)."""
    return [CellRecord(task=c.task.name, strategy=c.strategy, seed=c.seed,
                       final_scores=dict(r["final_scores"]), best_step=r["best_step"],
                       training_seconds=r["wall_seconds"], selection_metric=r["selection_metric"],
                       evaluations=evaluations(c, r["selection_metric"]))
            for c in cells if (r := records.get((c.task.name, c.strategy, c.seed))) is not None]


def boundary(records: list[CellRecord]) -> Boundary:
    """How many of these cell records (``cell_records``) selected their first (``at_first``) or their last
    (``at_last``) evaluated step, of the ``cells`` that logged an evaluation; a cell evaluated once counts
    in both (its model was never chosen among steps).

    >>> def cell(best, steps):
    ...     return CellRecord("t", "s", 1, {}, best, 1.0, "m", [{"step": s} for s in steps])
    >>> boundary([cell(20, (20, 40, 60)), cell(40, (20, 40, 60)), cell(60, (20, 40, 60)), cell(9, (9,))])
    Boundary(at_first=2, at_last=2, cells=4)
    """
    first = last = n = 0
    for r in records:
        steps = [e["step"] for e in r.evaluations]
        if steps:
            n += 1
            first += r.best_step <= min(steps)
            last += r.best_step >= max(steps)
    return Boundary(at_first=first, at_last=last, cells=n)


def flags(b: Boundary, tuned: TuningRow | None = None) -> list[str]:
    """A strategy's diagnostics in words: its boundary counts and, when tuned, the knobs its chosen point
    took at the grid's edge and the knobs that made no measurable difference.

    >>> flags(Boundary(at_first=10, at_last=0, cells=10))
    ['10/10 cells at first step']
    """
    out = [f"{k}/{b.cells} cells at {w} step" for k, w in ((b.at_first, "first"), (b.at_last, "last")) if k]
    out += [f"grid edge: {k} {side}" for k, side in ((tuned.grid_edge if tuned else None) or {}).items()]
    return out + [f"inert knob: {k}" for k in (tuned.inert_knob if tuned else None) or []]


def paired_table(per: dict[str, StrategyRow], baseline: str, seeds: list[int]) -> dict[str, PairedRow]:
    """Each strategy's paired difference from ``baseline`` over the seeds both have a score for (NaN
    scores included: they are stated), Holm-adjusted over the task's family."""
    return family_table(per, {s: (s, baseline) for s in per if s != baseline}, seeds)


def family_table(
    per: dict[str, StrategyRow], pairs: dict[str, tuple[str, str]], seeds: list[int]
) -> dict[str, PairedRow]:
    """One family of paired differences, ``label -> (strategy, reference)``: each over the seeds both have
    a score for, Holm-adjusted over the family (:func:`hardmix.compare.stats.holm_adjusted`)."""
    family, common = {}, {}
    for label, (strategy, reference) in pairs.items():
        row, base = per[strategy].seeds, per[reference].seeds
        common[label] = [s for s in seeds if s in row and s in base]
        family[label] = paired_difference(
            [_nan(row[s]) for s in common[label]], [_nan(base[s]) for s in common[label]]
        )
    return {k: PairedRow(**asdict(d), seeds=common[k]) for k, d in holm_adjusted(family).items()}


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)


def _start(record: dict[str, Any], score: str) -> float | None:
    """A cell's starting score on ``score`` (None: not measured)."""
    start = record.get("start_scores")
    return _number(start.get(score)) if isinstance(start, dict) else None


def learned_verdict(p: PairedDifference) -> bool | None:
    """Did it learn: the 95% interval of the difference from the start lies above 0; with no interval (one
    seed, no spread), the difference is above 0; None without a finite difference.

    >>> nan = math.nan
    >>> [learned_verdict(PairedDifference(m, lo, nan, nan, 2, "")) for m, lo in ((1.0, 0.2), (1.0, -0.1))]
    [True, False]
    >>> [learned_verdict(PairedDifference(m, nan, nan, nan, 1, "")) for m in (0.5, nan)]
    [True, None]
    """
    if not math.isfinite(p.mean):
        return None
    return bool(p.ci_low > 0) if math.isfinite(p.ci_low) else bool(p.mean > 0)


Records = dict[str, dict[int, dict[str, Any]]]  # strategy -> seed -> a finished cell's results.json


def start_and_learned(score: str, recs: Records, baseline: str) -> tuple[StartRow, dict[str, LearnedRow]]:
    """A task's ``start`` row and each strategy's ``learned`` entry, from its finished cells' records
    (``recs``: strategy -> seed -> record)."""
    learned: dict[str, LearnedRow] = {}
    for strategy, by_seed in recs.items():
        pairs: list[tuple[int, float, float]] = []
        for seed, r in by_seed.items():
            end, begin = _number(r["final_scores"].get(score)), _start(r, score)
            if end is not None and begin is not None:
                pairs.append((seed, end, begin))
        if not pairs:
            learned[strategy] = LearnedRow(status=NOT_MEASURED, verdict=None, n=0, seeds=[])
            continue
        d = paired_difference([p[1] for p in pairs], [p[2] for p in pairs])
        status = "measured" if len(pairs) == len(by_seed) else \
            f"measured in {len(pairs)} of {len(by_seed)} cells"
        learned[strategy] = LearnedRow(**{**asdict(d), "verdict": learned_verdict(d)},
                                       seeds=[p[0] for p in pairs], status=status)
    seeds: dict[int, float] = {}
    spread = 0.0
    for strategy in [baseline, *[s for s in recs if s != baseline]]:
        for seed, r in recs.get(strategy, {}).items():
            v = _start(r, score)
            if v is None:
                continue
            if seed in seeds:
                spread = max(spread, abs(v - seeds[seed]))
            else:
                seeds[seed] = v
    if not seeds:
        return StartRow(status=NOT_MEASURED), learned
    starts = [r["start_scores"] for by_seed in recs.values() for r in by_seed.values()
              if isinstance(r.get("start_scores"), dict)]
    keys = sorted({k for st in starts for k in st})
    scores = {}
    for k in keys:
        vals = [v for v in (_number(st.get(k)) for st in starts) if v is not None and math.isfinite(v)]
        if vals:
            scores[k] = sum(vals) / len(vals)
    other: dict[str, list[float]] = {}
    for by_seed in recs.values():
        for r in by_seed.values():
            for name, view in (r.get("start_scores_other") or {}).items():
                v = _number((view or {}).get(score))
                if v is not None:
                    other.setdefault(name, []).append(v)
    m, sd = mean_std(list(seeds.values()))
    values = list(seeds.values())
    return StartRow(status="measured", seeds=seeds, mean=m, std=sd, n=len(seeds),
                    depends_on_seed=max(values) - min(values) > 1e-9 * max(1.0, abs(m)),
                    spread_across_strategies=spread, scores=scores,
                    other={name: ViewStart(mean=sum(o) / len(o), n=len(o)) for name, o in other.items()}
                    ), learned


#: The properties of an arm beside its strategy that :func:`arm_differences` compares.
ARM_PROPERTIES = ("loss direction", "precision", "steps", "grid points")


def _arm(records: list[dict[str, Any]], tuned: TuningRow | None) -> dict[str, str]:
    """One arm's properties beside its strategy, each as one value or its values joined (``n/a`` where
    no record says: a task that records no loss direction)."""
    def one(values: list[Any]) -> str:
        vals = sorted({str(v) for v in values if v is not None})
        return ", ".join(vals) if vals else "n/a"

    words: dict[Any, str] = {True: "two-direction", False: "one-direction"}
    direction = [words.get((r.get("task_info") or {}).get("both_directions")) for r in records]
    return {"loss direction": one(direction),
            "precision": one([r.get("precision", "fp32") for r in records]),  # older records: CPU fp32
            "steps": one([r.get("steps") for r in records]),
            "grid points": str(len(tuned.grid)) if tuned is not None else "n/a"}


def arm_differences(recs: Records, baseline: str,
                    tuning: dict[str, TuningRow] | None = None) -> dict[str, list[str]]:
    """Each strategy's differences from the baseline's arm other than the strategy (:data:`ARM_PROPERTIES`:
    MixCSE's two-direction loss against a one-direction baseline, another precision, another number of
    steps, another tuning grid size), as ``property: mine vs the baseline's``; strategies without any are
    left out.

    >>> r = {"none": {1: {"task_info": {"both_directions": False}, "steps": 500}},
    ...      "mixcse": {1: {"task_info": {"both_directions": True}, "steps": 500}}}
    >>> arm_differences(r, "none")
    {'mixcse': ['loss direction: two-direction vs one-direction']}
    """
    arms = {s: _arm(list(by_seed.values()), (tuning or {}).get(s)) for s, by_seed in recs.items()}
    base = arms.get(baseline)
    if base is None:
        return {}
    out = {}
    for s, arm in arms.items():
        diff = [f"{k}: {arm[k]} vs {base[k]}" for k in ARM_PROPERTIES
                if arm[k] != base[k] and "n/a" not in (arm[k], base[k])]
        if s != baseline and diff:
            out[s] = diff
    return out


def code_table(cells: list[Cell], records: dict[tuple[str, str, int], dict[str, Any]]) -> CodeTable:
    """Which code trained the finished cells (``results.json`` ``code``): how many by commit label
    (:func:`hardmix.utils.provenance.code_label`: ``not recorded`` for older records), the full commits,
    ``mixed`` when more than one recorded code trained them, and then the cells of each (``cells``)."""
    by: dict[str, list[str]] = {}
    for c in cells:
        r = records.get((c.task.name, c.strategy, c.seed))
        if r is not None:
            by.setdefault(code_label(r.get("code")), []).append(c.label)
    commits = {r["code"].get("commit") for r in records.values() if isinstance(r.get("code"), dict)}
    mixed = len([k for k in by if k != "not recorded"]) > 1
    return CodeTable(counts={k: len(v) for k, v in by.items()}, commits=sorted(str(c) for c in commits if c),
                     mixed=mixed, cells=by if mixed else None)


def strategy_row(recs: dict[int, dict[str, Any]], score: str, diagnostics: Diagnostics) -> StrategyRow:
    """One strategy's row on a task from its finished cells' records (``recs``: seed -> record)."""
    se_key = score + SE_SUFFIX
    # A score the run wrote as NaN (null) is kept as NaN and stated; one it never wrote is missing.
    scores = {seed: _nan(r["final_scores"][score]) for seed, r in recs.items() if score in r["final_scores"]}
    finite = [v for v in scores.values() if math.isfinite(v)]
    secondary: dict[str, MeanStd] = {}
    for k in sorted({k for r in recs.values() for k in r["final_scores"]} - {score, se_key}):
        vals = [v for v in (_number(r["final_scores"].get(k)) for r in recs.values())
                if v is not None and math.isfinite(v)]
        if vals:
            secondary[k] = MeanStd(*mean_std(vals), n=len(vals))
    m, sd = mean_std(finite) if finite else (math.nan, math.nan)
    walls = [r["wall_seconds"] for r in recs.values()]
    ses = [v for v in (_number(r["final_scores"].get(se_key)) for r in recs.values())
           if v is not None and math.isfinite(v)]
    return StrategyRow(mean=m, std=sd, n=len(finite), seeds=scores,
                       nan_seeds=[s for s, v in scores.items() if not math.isfinite(v)],
                       wall_seconds_mean=sum(walls) / len(walls) if walls else None,
                       wall_seconds_total=sum(walls), sampling_se=sum(ses) / len(ses) if ses else None,
                       secondary=secondary, diagnostics=diagnostics)


def summarize(spec: CompareSpec, cells: list[Cell], tuning: dict[str, dict[str, TuningRow]] | None = None,
              folder: Path | None = None) -> ComparisonSummary:
    """The summary: per task, per strategy (mean, std, n, seeds, training seconds, sampling error, other
    scores, diagnostics) and the paired difference of each strategy from the baseline; the per-cell
    records; the finished and missing cells; and ``tuning`` (:func:`hardmix.compare.tuning.tuning_table`)
    when given, its diagnostics among each strategy's flags. With ``folder`` (the comparison's), a cell
    whose record holds no ``start_scores`` takes the start measured after the fact for it
    (:func:`hardmix.compare.start.starts_for`), and its task's start row says so (``source``, ``files``)."""
    records, missing = collect(cells)
    after: dict[str, dict[str, Any]] = {}  # task -> the files of the starts measured after the fact it used
    for key, entry in starts_for(cells, folder).items():
        r = records.get(key)
        if r is not None and not isinstance(r.get("start_scores"), dict):
            records[key] = {**r, "start_scores": entry["scores"],
                            "start_scores_other": entry.get("other") or {}}
            used = after.setdefault(key[0], {})
            used[entry["path"]] = entry.get("date")
    check_fingerprints(cells, records)
    by_cell = cell_records(cells, records)
    failed = {c.label: c.failure() or "failed" for c in cells if c.status() == "failed"}
    tasks: dict[str, TaskSummary] = {}
    baseline = str(spec.baseline)
    for task in spec.tasks.values():
        seeds = task.seeds or []
        tuned = (tuning or {}).get(task.name, {})
        arms: Records = {
            str(strategy): {seed: records[(task.name, strategy, seed)] for seed in seeds
                            if (task.name, strategy, seed) in records}
            for strategy in task.strategies or spec.strategies}
        per: dict[str, StrategyRow] = {}
        for strategy, recs in arms.items():
            b = boundary([r for r in by_cell if (r.task, r.strategy) == (task.name, strategy)])
            per[strategy] = strategy_row(recs, task.score, Diagnostics(b, flags(b, tuned.get(strategy))))
        own = [c for c in cells if c.task.name == task.name]
        selection = task_metric(own[0]) if own else resolve_task(str(task.task)).selection_metric
        start_row, learned = start_and_learned(task.score, arms, baseline)
        if task.name in after and start_row.measured:
            dates = sorted({str(d) for d in after[task.name].values()})
            start_row = replace(start_row, source=f"{HOW} on {', '.join(dates)}",
                                files=sorted(after[task.name]))
        differ = arm_differences(arms, baseline, tuned)
        if differ and getattr(spec, "arm_differences", "accept") == "equalize":
            raise ConfigError(f"arm_differences: equalize, but on {task.name} " + "; ".join(
                f"{s} differs from {spec.baseline} in {', '.join(d)}" for s, d in differ.items())
                + ": make the arms equal in the spec, or set arm_differences: accept to report them named")
        pairs = [(a, b) for a, b in spec.contrasts.items() if a in per and b in per]
        family = family_table(per, {f"{a} - {b}": (a, b) for a, b in pairs}, seeds)
        contrasts = {  # each strategy against its control, a family of its own
            label: replace(row, strategy=a, control=b)
            for (a, b), (label, row) in zip(pairs, family.items(), strict=True)}
        tasks[task.name] = TaskSummary(
            task=str(task.task), score=task.score, strategies=per, seeds=seeds,
            paired=paired_table(per, baseline, seeds), contrasts=contrasts or None,
            selection_metric=selection, score_is_selection=task.score == selection,
            allow_selection_score=bool(getattr(task, "allow_selection_score", False)),
            start=start_row, learned=learned, arm_differences=differ)
    return ComparisonSummary(
        baseline=baseline, seeds=spec.seeds, tasks=tasks, missing=[m for m in missing if m not in failed],
        failed=failed, finished=len(records), cells=len(cells), cell_records=by_cell,
        code=code_table(cells, records), tuning=tuning or None)


__all__ = [
    "SE_SUFFIX",
    "ARM_PROPERTIES",
    "arm_differences",
    "boundary",
    "code_table",
    "cell_records",
    "evaluations",
    "flags",
    "learned_verdict",
    "start_and_learned",
    "family_table",
    "paired_table",
    "strategy_row",
    "summarize",
]
