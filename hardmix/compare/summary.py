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
baseline's) selected an edge step (:func:`edge_mark`).

Did they learn (:func:`start_and_learned`)? Per task, ``start``: the starting encoder's compared score, as
the cells measured it before their first step (``results.json`` ``start_scores``), per seed (``seeds``),
its mean, and every start score's mean (``scores``); ``status`` "start not measured" where no cell's record
holds it (an older hardmix's). Per strategy, ``learned.<s>``: the paired difference of its score from its
own cells' start, seed by seed (a start that does not depend on the seed, text's, is the same number in
every pair), with its 95% interval and ``verdict``: true when the interval lies above 0 (with one seed or
no spread, when the difference is above 0), false otherwise, null where the start was not measured. A
verdict between strategies whose baseline did not beat its start says so beside it (:func:`verdict_text`).
``code`` lists the code (``results.json`` ``code``: git commit) that trained the cells, ``mixed`` when
they differ.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from hardmix.compare.grid import Cell, task_metric
from hardmix.compare.records import collect
from hardmix.compare.spec import CompareSpec
from hardmix.compare.stats import ALPHA, SIGNIFICANT, holm_adjusted, mean_std, paired_difference
from hardmix.training.metrics import read_metrics
from hardmix.training.run_folder import METRICS
from hardmix.utils.errors import ConfigError

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


def evaluations(cell: Cell, selection_metric: str) -> list[dict[str, Any]]:
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
        record: dict[str, Any] = {"step": step}
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


def cell_records(
    cells: list[Cell], records: dict[tuple[str, str, int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """One record per finished cell, in the grid's order (``summary.json``'s ``cell_records``)."""
    out = []
    for c in cells:
        r = records.get((c.task.name, c.strategy, c.seed))
        if r is None:
            continue
        out.append(
            {
                "task": c.task.name,
                "strategy": c.strategy,
                "seed": c.seed,
                "final_scores": dict(r["final_scores"]),
                "best_step": r["best_step"],
                "training_seconds": r["wall_seconds"],
                "selection_metric": r["selection_metric"],
                "evaluations": evaluations(c, r["selection_metric"]),
            }
        )
    return out


def boundary(records: list[dict[str, Any]]) -> dict[str, int]:
    """How many of these cell records (``cell_records``) selected their first (``at_first``) or their last
    (``at_last``) evaluated step, of the ``cells`` that logged an evaluation; a cell evaluated once counts
    in both (its model was never chosen among steps).

    >>> ev = [{"step": s} for s in (20, 40, 60)]
    >>> boundary([{"best_step": 20, "evaluations": ev}, {"best_step": 40, "evaluations": ev},
    ...           {"best_step": 60, "evaluations": ev}, {"best_step": 9, "evaluations": [{"step": 9}]}])
    {'at_first': 2, 'at_last': 2, 'cells': 4}
    """
    out = {"at_first": 0, "at_last": 0, "cells": 0}
    for r in records:
        steps = [e["step"] for e in r["evaluations"]]
        if steps:
            out["cells"] += 1
            out["at_first"] += r["best_step"] <= min(steps)
            out["at_last"] += r["best_step"] >= max(steps)
    return out


def flags(diagnostics: dict[str, Any], tuned: dict[str, Any] | None = None) -> list[str]:
    """A strategy's diagnostics in words: its boundary counts and, when tuned, the knobs its chosen point
    took at the grid's edge and the knobs that made no measurable difference.

    >>> flags({"boundary": {"at_first": 10, "at_last": 0, "cells": 10}},
    ...       {"grid_edge": {"mixcse.lam": "high"}, "inert_knob": ["loss.temperature"]})
    ['10/10 cells at first step', 'grid edge: mixcse.lam high', 'inert knob: loss.temperature']
    """
    b = diagnostics["boundary"]
    out = [f"{b[k]}/{b['cells']} cells at {w} step" for k, w in (("at_first", "first"), ("at_last", "last"))
           if b[k]]
    out += [f"grid edge: {k} {side}" for k, side in ((tuned or {}).get("grid_edge") or {}).items()]
    return out + [f"inert knob: {k}" for k in (tuned or {}).get("inert_knob") or []]


def paired_table(
    per: dict[str, dict[str, Any]], baseline: str, seeds: list[Any]
) -> dict[str, dict[str, Any]]:
    """Each strategy's paired difference from ``baseline`` over the seeds both have a score for (NaN
    scores included: they are stated), Holm-adjusted over the task's family."""
    return family_table(per, {s: (s, baseline) for s in per if s != baseline}, seeds)


def family_table(
    per: dict[str, dict[str, Any]], pairs: dict[str, tuple[str, str]], seeds: list[Any]
) -> dict[str, dict[str, Any]]:
    """One family of paired differences, ``label -> (strategy, reference)``: each over the seeds both have
    a score for, Holm-adjusted over the family (:func:`hardmix.compare.stats.holm_adjusted`)."""
    family, common = {}, {}
    for label, (strategy, reference) in pairs.items():
        row, base = per[strategy]["seeds"], per[reference]["seeds"]
        common[label] = [s for s in seeds if s in row and s in base]
        family[label] = paired_difference(
            [_nan(row[s]) for s in common[label]], [_nan(base[s]) for s in common[label]]
        )
    return {k: {**asdict(d), "seeds": common[k]} for k, d in holm_adjusted(family).items()}


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)


#: Beside a verdict whose baseline did not beat its start.
BASELINE_DID_NOT_LEARN = "(baseline did not beat its start)"


def _start(record: dict[str, Any], score: str) -> float | None:
    """A cell's starting score on ``score`` (None: not measured)."""
    start = record.get("start_scores")
    return _number(start.get(score)) if isinstance(start, dict) else None


def learned_verdict(p: dict[str, Any]) -> bool | None:
    """Did it learn: the 95% interval of the difference from the start lies above 0; with no interval (one
    seed, no spread), the difference is above 0; None without a finite difference.

    >>> learned_verdict({"mean": 1.0, "ci_low": 0.2}), learned_verdict({"mean": 1.0, "ci_low": -0.1})
    (True, False)
    >>> learned_verdict({"mean": 0.5, "ci_low": None}), learned_verdict({"mean": None})
    (True, None)
    """
    mean, low = p.get("mean"), p.get("ci_low")
    if not _finite(mean):
        return None
    return bool(float(low) > 0) if low is not None and _finite(low) else bool(float(mean) > 0)


def start_and_learned(
    score: str, recs: dict[str, dict[Any, dict[str, Any]]], baseline: str
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A task's ``start`` row and each strategy's ``learned`` entry, from its finished cells' records
    (``recs``: strategy -> seed -> record)."""
    from hardmix.training.learned import NOT_MEASURED

    learned: dict[str, dict[str, Any]] = {}
    for strategy, by_seed in recs.items():
        pairs: list[tuple[Any, float, float]] = []
        for seed, r in by_seed.items():
            end, begin = _number(r["final_scores"].get(score)), _start(r, score)
            if end is not None and begin is not None:
                pairs.append((seed, end, begin))
        if not pairs:
            learned[strategy] = {"status": NOT_MEASURED, "verdict": None, "n": 0, "seeds": []}
            continue
        d = asdict(paired_difference([p[1] for p in pairs], [p[2] for p in pairs]))
        status = "measured" if len(pairs) == len(by_seed) else \
            f"measured in {len(pairs)} of {len(by_seed)} cells"
        learned[strategy] = {**d, "seeds": [p[0] for p in pairs], "status": status,
                             "verdict": learned_verdict(d)}
    seeds: dict[Any, float] = {}
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
        return {"status": NOT_MEASURED, "seeds": {}, "mean": None, "std": None, "n": 0, "scores": {}}, learned
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
    return {"status": "measured", "seeds": seeds, "mean": m, "std": sd, "n": len(seeds),
            "depends_on_seed": max(values) - min(values) > 1e-9 * max(1.0, abs(m)),
            "spread_across_strategies": spread, "scores": scores,
            "other": {name: {"mean": sum(o) / len(o), "n": len(o)} for name, o in other.items()}}, learned


#: The properties of an arm beside its strategy that :func:`arm_differences` compares.
ARM_PROPERTIES = ("loss direction", "precision", "steps", "grid points")


def _arm(records: list[dict[str, Any]], tuned: dict[str, Any] | None) -> dict[str, str]:
    """One arm's properties beside its strategy, each as one value or its values joined (``n/a`` where
    no record says: a task that records no loss direction)."""
    def one(values: list[Any]) -> str:
        vals = sorted({str(v) for v in values if v is not None})
        return ", ".join(vals) if vals else "n/a"

    direction = [{True: "two-direction", False: "one-direction"}.get((r.get("task_info") or {}).get(
        "both_directions")) for r in records]
    return {"loss direction": one(direction),
            "precision": one([r.get("precision", "fp32") for r in records]),  # older records: CPU fp32
            "steps": one([r.get("steps") for r in records]),
            "grid points": str(len(tuned["grid"])) if tuned and tuned.get("grid") is not None else "n/a"}


def arm_differences(recs: dict[str, dict[Any, dict[str, Any]]], baseline: str,
                    tuning: dict[str, Any] | None = None) -> dict[str, list[str]]:
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


def code_table(cells: list[Cell], records: dict[tuple[str, str, int], dict[str, Any]]) -> dict[str, Any]:
    """Which code trained the finished cells (``results.json`` ``code``): how many by commit label
    (:func:`hardmix.utils.provenance.code_label`: ``not recorded`` for older records), the full commits,
    ``mixed`` when more than one recorded code trained them, and then the cells of each (``cells``)."""
    from hardmix.utils.provenance import code_label

    by: dict[str, list[str]] = {}
    for c in cells:
        r = records.get((c.task.name, c.strategy, c.seed))
        if r is not None:
            by.setdefault(code_label(r.get("code")), []).append(c.label)
    commits = {r["code"].get("commit") for r in records.values() if isinstance(r.get("code"), dict)}
    mixed = len([k for k in by if k != "not recorded"]) > 1
    return {"counts": {k: len(v) for k, v in by.items()}, "commits": sorted(str(c) for c in commits if c),
            "mixed": mixed, **({"cells": by} if mixed else {})}


def summarize(spec: CompareSpec, cells: list[Cell], tuning: dict[str, Any] | None = None,
              folder: Any = None) -> dict[str, Any]:
    """The summary: per task, per strategy (mean, std, n, seeds, training seconds, sampling error, other
    scores, diagnostics) and the paired difference of each strategy from the baseline; the per-cell
    records; the finished and missing cells; and ``tuning`` (:func:`hardmix.compare.tuning.tuning_table`)
    when given, its diagnostics among each strategy's flags. With ``folder`` (the comparison's), a cell
    whose record holds no ``start_scores`` takes the start measured after the fact for it
    (:func:`hardmix.compare.start.starts_for`), and its task's start row says so (``source``, ``files``)."""
    from hardmix.compare.start import HOW, starts_for
    from hardmix.training.api import resolve_task

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
    out: dict[str, Any] = {
        "baseline": spec.baseline,
        "seeds": spec.seeds,
        "tasks": {},
        "missing": [label for label in missing if label not in failed],
        "failed": failed,
        "finished": len(records),
        "cells": len(cells),
    }
    for task in spec.tasks.values():
        per: dict[str, Any] = {}
        se_key = task.score + SE_SUFFIX
        for strategy in task.strategies or spec.strategies:
            recs = {
                seed: records[(task.name, strategy, seed)]
                for seed in task.seeds
                if (task.name, strategy, seed) in records
            }
            # A score the run wrote as NaN (null) is kept as NaN and stated; one it never wrote is missing.
            scores = {
                seed: _nan(r["final_scores"][task.score])
                for seed, r in recs.items()
                if task.score in r["final_scores"]
            }
            finite = [v for v in scores.values() if math.isfinite(v)]
            secondary: dict[str, Any] = {}
            keys = sorted({k for r in recs.values() for k in r["final_scores"]} - {task.score, se_key})
            for k in keys:
                vals = [_number(r["final_scores"].get(k)) for r in recs.values()]
                vals = [v for v in vals if v is not None and math.isfinite(v)]
                if vals:
                    m, sd = mean_std(vals)
                    secondary[k] = {"mean": m, "std": sd, "n": len(vals)}
            m, sd = mean_std(finite) if finite else (math.nan, math.nan)
            walls = [r["wall_seconds"] for r in recs.values()]
            ses = [_number(r["final_scores"].get(se_key)) for r in recs.values()]
            ses = [v for v in ses if v is not None and math.isfinite(v)]
            per[strategy] = {
                "mean": m,
                "std": sd,
                "n": len(finite),
                "seeds": scores,
                "nan_seeds": [s for s, v in scores.items() if not math.isfinite(v)],
                "wall_seconds_mean": sum(walls) / len(walls) if walls else None,
                "wall_seconds_total": sum(walls),
                "sampling_se": sum(ses) / len(ses) if ses else None,
                "secondary": secondary,
            }
            mine = [r for r in by_cell if (r["task"], r["strategy"]) == (task.name, strategy)]
            diagnostics = {"boundary": boundary(mine)}
            tuned = (tuning or {}).get(task.name, {}).get(strategy)
            per[strategy]["diagnostics"] = {**diagnostics, "flags": flags(diagnostics, tuned)}
        own = [c for c in cells if c.task.name == task.name]
        selection = task_metric(own[0]) if own else resolve_task(task.task).selection_metric
        arms: dict[str, dict[Any, dict[str, Any]]] = {
            str(strategy): {seed: records[(task.name, strategy, seed)] for seed in task.seeds or []
                            if (task.name, strategy, seed) in records}
            for strategy in task.strategies or spec.strategies}
        start_row, learned = start_and_learned(task.score, arms, str(spec.baseline))
        if task.name in after and start_row.get("status") == "measured":
            dates = sorted({str(d) for d in after[task.name].values()})
            start_row["source"] = f"{HOW} on {', '.join(dates)}"
            start_row["files"] = sorted(after[task.name])
        differ = arm_differences(arms, str(spec.baseline), (tuning or {}).get(task.name))
        if differ and getattr(spec, "arm_differences", "accept") == "equalize":
            raise ConfigError(f"arm_differences: equalize, but on {task.name} " + "; ".join(
                f"{s} differs from {spec.baseline} in {', '.join(d)}" for s, d in differ.items())
                + ": make the arms equal in the spec, or set arm_differences: accept to report them named")
        out["tasks"][task.name] = {
            "task": task.task,
            "score": task.score,
            "strategies": per,
            "seeds": task.seeds,
            "paired": paired_table(per, spec.baseline, task.seeds),
            **({"contrasts": {  # each strategy against its control, a family of its own
                f"{a} - {b}": {**row, "strategy": a, "control": b} for (a, b), row in zip(
                    pairs, family_table(per, {f"{a} - {b}": (a, b) for a, b in pairs}, task.seeds).values(),
                    strict=True)}} if (pairs := [(a, b) for a, b in spec.contrasts.items()
                                                if a in per and b in per]) else {}),
            "selection_metric": selection,
            "score_is_selection": task.score == selection,
            "allow_selection_score": bool(getattr(task, "allow_selection_score", False)),
            "start": start_row,
            "learned": learned,
            "arm_differences": differ,
        }
    out["cell_records"] = by_cell
    out["code"] = code_table(cells, records)
    if tuning:
        out["tuning"] = tuning
    return out


# ------------------------------------------------------------------------------------------ tables
def cell_count(summary: dict[str, Any]) -> int:
    """How many cells the comparison has."""
    return int(summary["cells"])


def _fmt(x: Any, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _signed(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.2f}"


def interval_text(p: dict[str, Any]) -> str:
    if p.get("ci_low") is None or (isinstance(p["ci_low"], float) and math.isnan(p["ci_low"])):
        return _signed(p.get("mean"))
    return f"{_signed(p['mean'])} [{_fmt(p['ci_low'])}, {_fmt(p['ci_high'])}]"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _simultaneous(p: dict[str, Any]) -> str:
    lo, hi = p.get("ci_simultaneous") or (None, None)
    return f"[{_fmt(lo)}, {_fmt(hi)}]" if _finite(lo) and _finite(hi) else "n/a"


def _p(x: Any) -> str:
    """A p-value: 3 decimals, or ``<0.001``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "<0.001" if x < 0.001 else f"{x:.3f}"


T_TEST_ONLY = "(t-test only)"


def edge_mark(summary: dict[str, Any], task: str, strategy: str) -> str:
    """The mark beside the verdict of a test (better, worse, n.s.) whose cells (the strategy's and the
    baseline's) selected their first or last evaluated step: ``(edge: k/N at first step)``, ``(edge: k/N
    at last step)``, both, or ``(edge: N/N evaluated once)`` when no cell had a step to choose; ``""`` when
    none did, without diagnostics, or without a test (too few seeds, a NaN score, no spread).

    >>> s = {"baseline": "none", "tasks": {"t": {"paired": {"mix": {"p_value": 0.01}}, "strategies": {
    ...     "none": {"diagnostics": {"boundary": {"at_first": 5, "at_last": 0, "cells": 5}}},
    ...     "mix": {"diagnostics": {"boundary": {"at_first": 4, "at_last": 1, "cells": 5}}}}}}}
    >>> edge_mark(s, "t", "mix")
    '(edge: 9/10 at first, 1/10 at last step)'
    """
    if not _finite(summary["tasks"][task]["paired"].get(strategy, {}).get("p_value")):
        return ""
    rows = summary["tasks"][task]["strategies"]
    both = [rows.get(s, {}).get("diagnostics", {}).get("boundary") for s in (strategy, summary["baseline"])]
    first, last, n = (sum(b[k] for b in both if b) for k in ("at_first", "at_last", "cells"))
    if not (first or last):
        return ""
    if first == last == n:
        return f"(edge: {n}/{n} evaluated once)"
    parts = [f"{k}/{n} at {w}" for k, w in ((first, "first"), (last, "last")) if k]
    return f"(edge: {', '.join(parts)} step)"


def verdict_label(p: dict[str, Any]) -> str:
    """A comparison's verdict as the tables show it: the t-test's (Holm), marked ``(t-test only)`` when
    the exact sign-flip test (Holm) does not find it too.

    >>> verdict_label({"verdict": "better", "p_exact_holm": 0.0625})
    'better (t-test only)'
    >>> verdict_label({"verdict": "better", "p_exact_holm": 0.004}), verdict_label({"verdict": "n.s."})
    ('better', 'n.s.')
    """
    v = p["verdict"]
    exact = p.get("p_exact_holm")
    if v in SIGNIFICANT and "p_exact_holm" in p and not (exact is not None and exact < ALPHA):
        return f"{v} {T_TEST_ONLY}"
    return v


def verdict_text(summary: dict[str, Any], task: str, strategy: str) -> str:
    """A comparison's verdict as every table shows it: :func:`verdict_label` and its :func:`edge_mark`."""
    p = summary["tasks"][task]["paired"][strategy]
    differ = (summary["tasks"][task].get("arm_differences") or {}).get(strategy)
    return " ".join(x for x in (verdict_label(p), edge_mark(summary, task, strategy),
                                learned_mark(summary, task),
                                f"(differs: {'; '.join(differ)})" if differ else "") if x)


def learned_mark(summary: dict[str, Any], task: str) -> str:
    """:data:`BASELINE_DID_NOT_LEARN` where the task's baseline did not beat its start (its ``learned``
    verdict is false), else ``""`` (a start not measured is said in the start row, not here)."""
    base = (summary["tasks"][task].get("learned") or {}).get(summary["baseline"]) or {}
    return BASELINE_DID_NOT_LEARN if base.get("verdict") is False else ""


def baselines_that_did_not_learn(summary: dict[str, Any]) -> list[str]:
    """The tasks whose baseline did not beat its start (what ``--strict`` refuses)."""
    return [t for t in summary["tasks"] if learned_mark(summary, t)]


def learned_table(summary: dict[str, Any], task: str) -> tuple[list[str], list[list[str]]]:
    """Did they learn: the ``start`` row (the starting encoder's score, per seed where it depends on the
    seed) and each strategy's score, its paired difference from its cells' start with the 95% interval,
    and the verdict (``start not measured`` where the records lack it)."""
    t = summary["tasks"][task]
    start = t.get("start") or {}
    head = ["", f"{t['score']} (mean ± std)", "n", "Δ vs start [95% CI]", "learned"]
    measured = start.get("status") == "measured"
    other = "; ".join(f"{name} {_fmt(o['mean'])}" for name, o in (start.get("other") or {}).items())
    rows = [["start", f"{_fmt(start.get('mean'))} ± {_fmt(start.get('std'))}" if measured else "n/a",
             str(start.get("n", 0)), other,
             start.get("source", "") if measured else start.get("status", "start not measured")]]
    for strategy, row in t["strategies"].items():
        lr = (t.get("learned") or {}).get(strategy) or {}
        verdict = lr.get("verdict")
        said = lr.get("status", "start not measured") if verdict is None else ("yes" if verdict else "no")
        if verdict is not None and lr.get("status") != "measured":
            said += f" ({lr['status']})"
        rows.append([strategy, f"{_fmt(row['mean'])} ± {_fmt(row['std'])}", str(lr.get("n", 0)),
                     interval_text(lr) if verdict is not None else "n/a", said])
    return head, rows


def verdict_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The answer: one row per task and strategy: the paired difference from the baseline with its 95%
    interval, the t-test's p-value and its Holm adjustment, the exact sign-flip test's and its Holm
    adjustment, and the verdict (which follows ``p_holm``; :func:`verdict_text`)."""
    head = ["task", "score", "strategy", f"Δ vs {summary['baseline']} [95% CI]", "n", "p", "p_holm",
            "p_exact", "p_exact_holm", "verdict"]
    rows = []
    for task, t in summary["tasks"].items():
        for strategy, p in t["paired"].items():
            rows.append(
                [task, t["score"], strategy, interval_text(p), str(p["n"]), _p(p["p_value"]),
                 _p(p.get("p_holm")), _p(p.get("p_exact")), _p(p.get("p_exact_holm")),
                 verdict_text(summary, task, strategy)]
            )
    return head, rows


def cross_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Strategies by tasks, each cell the paired difference from the baseline, its 95% interval, the
    Holm-adjusted p-value and the verdict (what ``hardmix compare`` prints first)."""
    tasks = list(summary["tasks"])
    head = ["strategy"] + [f"{t} ({summary['tasks'][t]['score']})" for t in tasks]
    strategies = list(dict.fromkeys(s for t in summary["tasks"].values() for s in t["paired"]))
    rows = []
    for s in strategies:
        cells = []
        for t in tasks:
            p = summary["tasks"][t]["paired"].get(s)
            text = (f"{interval_text(p)} p_holm={_p(p.get('p_holm'))} {verdict_text(summary, t, s)}" if p
                    else "(not run)")
            cells.append(text)
        rows.append([s, *cells])
    return head, rows


def contrast_table(summary: dict[str, Any], task: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one task's contrasts (each strategy against its control, a family of its own:
    ``contrasts`` in the spec): the paired difference, its 95% and simultaneous intervals, Holm's p under
    both tests, the verdict."""
    pairs = summary["tasks"][task].get("contrasts") or {}
    m = sum(_finite(p.get("p_value")) for p in pairs.values())
    head = ["strategy - control", "n", "Δ [95% CI]", f"Bonferroni CI (m = {m})", "p_holm", "p_exact_holm",
            "verdict"]
    rows = [[label, str(p["n"]), interval_text(p), _simultaneous(p), _p(p.get("p_holm")),
             _p(p.get("p_exact_holm")), verdict_label(p)] for label, p in pairs.items()]
    return head, rows


def per_task_table(summary: dict[str, Any], task: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one task's table: score mean +- std (n), the paired difference and its
    statistics (its 95% interval and the family's simultaneous one), the evaluation's sampling error, the
    verdict and the training seconds per run."""
    t = summary["tasks"][task]
    m = sum(_finite(p.get("p_value")) for p in t["paired"].values())
    head = [
        "strategy",
        f"{t['score']} (mean ± std)",
        "n",
        f"Δ vs {summary['baseline']} [95% CI]",
        f"Bonferroni CI (m = {m})",
        "p",
        "p_holm",
        "p_exact_holm",
        "effect size",
        "MDD (80%)",
        "eval SE",
        "verdict",
        "train s / run",
    ]
    rows = []
    for strategy, row in t["strategies"].items():
        p = t["paired"].get(strategy)
        rows.append(
            [
                strategy,
                f"{_fmt(row['mean'])} ± {_fmt(row['std'])}",
                str(row["n"]),
                interval_text(p) if p else "(baseline)",
                _simultaneous(p) if p else "",
                _p(p["p_value"]) if p else "",
                _p(p.get("p_holm")) if p else "",
                _p(p.get("p_exact_holm")) if p else "",
                _fmt(p.get("effect_size")) if p else "",
                _fmt(p.get("min_detectable_difference")) if p else "",
                _fmt(row.get("sampling_se")),
                verdict_text(summary, task, strategy) if p else "",
                _fmt(row["wall_seconds_mean"], 0),
            ]
        )
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


def tuning_grid_table(summary: dict[str, Any], task: str,
                      strategy: str) -> tuple[list[str], list[list[str]]]:
    """One strategy's tuning grid on a task (``summary["tuning"]``): each point, its selection score per
    tuning seed (``failed`` where that run failed or scored NaN) and their mean; the chosen point marked."""
    tu = summary["tuning"][task][strategy]
    seeds = list(dict.fromkeys(str(s) for g in tu["grid"] for s in [*g["seeds"], *g.get("failed", {})]))
    head = ["point", *(f"seed {s}" for s in seeds), f"mean {tu['score']}", "chosen"]
    rows = []
    for g in tu["grid"]:
        point = ", ".join(f"{k}={v}" for k, v in g["point"].items()) or "(defaults)"
        by_seed = {str(k): _fmt(v) for k, v in g["seeds"].items()}
        by_seed.update({str(k): "failed" for k in g.get("failed", {})})
        chosen = "✓" if g["point"] == tu["best"] else ""
        rows.append([point, *(by_seed.get(s, "n/a") for s in seeds), _fmt(g["mean"]), chosen])
    return head, rows


def tuning_budget_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The tuning budget each strategy got per task: grid points, runs, steps per run, steps in all."""
    head = ["task", "strategy", "points", "runs", "steps / run", "steps in all", "chosen"]
    rows = []
    for task, per in summary["tuning"].items():
        for strategy, tu in per.items():
            if tu["best"] is None:
                best = "(not every point scored yet)"
            else:
                best = ", ".join(f"{k}={v}" for k, v in tu["best"].items()) or "(defaults)"
            steps = tu["steps_per_run"]
            total = "n/a" if steps is None else str(tu["runs"] * steps)
            rows.append([task, strategy, str(len(tu["grid"])), str(tu["runs"]), str(steps or "n/a"), total,
                         best])
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
    "SE_SUFFIX",
    "ARM_PROPERTIES",
    "BASELINE_DID_NOT_LEARN",
    "arm_differences",
    "baselines_that_did_not_learn",
    "boundary",
    "cell_count",
    "code_table",
    "cell_records",
    "contrast_table",
    "cross_table",
    "edge_mark",
    "evaluations",
    "flags",
    "learned_mark",
    "learned_table",
    "learned_verdict",
    "start_and_learned",
    "markdown_table",
    "family_table",
    "paired_table",
    "per_task_table",
    "secondary_table",
    "summarize",
    "text_table",
    "tuning_budget_table",
    "tuning_grid_table",
    "verdict_label",
    "verdict_table",
    "verdict_text",
]
