"""Equal tuning before a comparison's evaluation seeds (the spec's ``tune:`` block).

Each strategy, the baseline included, runs every point of its grid on the tuning seeds; a point is scored
by the mean over those seeds of the task's selection metric (``Task.selection_metric``: the score that
selects the model, never a held-out score). The best point per task and strategy is what that strategy's
evaluation cells run. Tuning cells are ordinary run folders, ``DIR/tune/<task>/<strategy>/point<i>/seed<k>``,
finished once and resumed like the evaluation cells. Values added to a grid's knobs (``--resume``) run
only the new points: a point keeps its folder (``DIR/tune/points.json`` records their order,
:func:`point_folders`), the best point is chosen again, and an evaluation cell run at a point no longer
chosen is moved to ``DIR/superseded/`` (kept, and listed in the summary) and run again.

::

    tune:
      seeds: [101, 102]
      grid:                                # every strategy of the spec, the baseline too
        none:   {loss.temperature: [0.05, 0.1]}
        mixcse: {mixcse.lam: [0.1, 0.4]}   # <entry>.<argument>: an argument of the strategy's entry
      tasks: [text]                        # optional: the tasks tuned (default: every one)
      equal_budget: true                   # the default: every grid has as many points
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from hardmix.compare.folder import MISMATCHED, POINT_ORDER, SUPERSEDED, TUNE
from hardmix.compare.grid import (
    Cell,
    check_same_config,
    check_task,
    make_cell,
    task_class,
    task_metric,
)
from hardmix.compare.runner import set_aside
from hardmix.compare.spec import CompareSpec, TaskSpec, grid_points
from hardmix.compare.summary_types import GridScore, SetAside, TuningRow
from hardmix.training.results import ResultsError, read_results
from hardmix.utils.confine import confined, write_text
from hardmix.utils.errors import ConfigError, RunError


def tuned_tasks(spec: CompareSpec) -> list[TaskSpec]:
    """The spec's tasks that are tuned (none without a ``tune:`` block)."""
    if spec.tune is None:
        return []
    return [t for t in spec.tasks.values() if spec.tune.tasks is None or t.name in spec.tune.tasks]


def _axes(spec: CompareSpec, strategy: str) -> dict[str, list[Any]]:
    """``strategy``'s tuning grid (knob -> values; ``{}``: its own arguments), as validation left it."""
    return (spec.tune.grid[strategy] if spec.tune is not None else None) or {}


#: In ``DIR/tune/``: each tuned task's strategies' grid points in the order of their folders ``point<i>``.

Folders = dict[tuple[str, str], list[tuple[int, dict[str, Any]]]]


def point_folders(spec: CompareSpec, output: Path, saved: dict[str, Any] | None = None) -> Folders:
    """Each tuned (task, strategy)'s grid points, each with the index of its folder ``point<i>``.

    The points a comparison has made keep their folders when values are added to the grid: they come in
    the order recorded in ``DIR/tune/points.json`` (:func:`write_point_order`) or, for a comparison from
    before that record, in the order of its saved spec's grid (``saved``, the spec it was made with); new
    points follow, in grid order. Without either, the folders follow the grid's order.

    >>> from hardmix.compare.spec import parse_spec
    >>> def spec(lams):
    ...     grid = {"mixcse": {"mixcse.lam": lams}}
    ...     text = {"config": "configs/text/cpu_simcse.yaml"}
    ...     return parse_spec({"seeds": [1], "strategies": {"mixcse": [{"name": "mixcse"}]},
    ...                        "tasks": {"text": text}, "tune": {"seeds": [9], "grid": grid}})
    >>> old = {"tune": {"grid": {"mixcse": {"mixcse.lam": [0.1, 0.2]}}}}
    >>> point_folders(spec([0.05, 0.1, 0.2]), Path("/nonexistent"), old)[("text", "mixcse")]
    [(2, {'mixcse.lam': 0.05}), (0, {'mixcse.lam': 0.1}), (1, {'mixcse.lam': 0.2})]

    Raises:
        ConfigError: ``points.json`` unreadable or not a record of points (naming it).
    """
    record = output / TUNE / POINT_ORDER
    if record.is_file():
        try:
            known = json.loads(record.read_text(encoding="utf-8"))
            ok = isinstance(known, dict) and all(
                isinstance(rows, dict) and all(isinstance(ps, list) and all(isinstance(p, dict) for p in ps)
                                               for ps in rows.values()) for rows in known.values())
        except (OSError, ValueError):
            ok = False
        if not ok:
            raise ConfigError(f"{record}: not a record of tuning points (task -> strategy -> [points]); "
                              "restore it from the comparison's copy, or choose another --output")
    else:
        grid = ((saved or {}).get("tune") or {}).get("grid") or {}
        known = {t.name: {s: grid_points(axes) for s, axes in grid.items() if isinstance(axes, dict)}
                 for t in tuned_tasks(spec)}
    out: Folders = {}
    for task in tuned_tasks(spec):
        for strategy in task.strategies or spec.strategies:
            current = grid_points(_axes(spec, strategy))
            made = list((known.get(task.name) or {}).get(strategy) or [])
            order = made + [p for p in current if p not in made]
            out[(task.name, strategy)] = [(order.index(p), p) for p in current]
    return out


def write_point_order(folders: Folders, output: Path) -> None:
    """Record ``DIR/tune/points.json`` (:func:`point_folders`), so that a point keeps its folder whatever
    values are added to the grid later."""
    record: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for (task, strategy), points in folders.items():
        order: list[dict[str, Any]] = [{}] * (max(i for i, _ in points) + 1)
        for i, p in points:
            order[i] = p
        record.setdefault(task, {})[strategy] = order
    write_text(json.dumps(record, indent=1) + "\n", output / TUNE / POINT_ORDER, output)


def tuning_cells(spec: CompareSpec, output: Path, check_data: bool = True,
                 folders: Folders | None = None) -> list[Cell]:
    """Every tuning cell, each point's config validated (and the selection metric among its final scores);
    nothing is run or written.

    Args:
        folders: each point's folder index (:func:`point_folders`; default: as a new comparison's).

    Raises:
        ConfigError: naming ``tune.grid.<strategy>`` or the task at fault.
    """
    cells: list[Cell] = []
    assert spec.tune is not None or not tuned_tasks(spec)
    folders = folders if folders is not None else point_folders(spec, output)
    for task in tuned_tasks(spec):
        task_cls = task_class(task)
        for strategy in task.strategies or spec.strategies:
            for i, point in folders[(task.name, strategy)]:
                checked = False  # each point's config through the task's own checks
                for seed in spec.tune.seeds if spec.tune is not None else []:
                    run_dir = output / TUNE / task.name / strategy / f"point{i}" / f"seed{seed}"
                    confined(run_dir, output)
                    cell, cfg = make_cell(spec, task, task_cls, strategy, seed, run_dir, point, i)
                    facts = task_cls.about(cfg)
                    if facts.selection_metric() not in facts.score_names():
                        raise ConfigError(
                            f"tune: tasks.{task.name} scores no {facts.selection_metric()} (its "
                            "selection "
                            "metric, what tuning compares); turn on eval.at_end or eval.eval_steps"
                        )
                    if check_data and not checked:
                        check_task(task, task_cls, cfg, f"{strategy} at tune point {point}", output)
                        checked = True
                    check_same_config(cell)
                    cells.append(cell)
    return cells


#: In the comparison's folder: the evaluation cells run at a point that tuning no longer chooses, kept.


def _made_at(spec: CompareSpec, cell: Cell, folders: Folders) -> int | None:
    """The folder index of the grid point whose config made ``cell``'s run folder, or None."""
    task_cls = task_class(cell.task)
    seed_at = cell.overrides.index(f"train.seed={cell.seed}")
    for i, point in folders.get((cell.task.name, cell.strategy), []):
        other, _ = make_cell(spec, cell.task, task_cls, cell.strategy, cell.seed, cell.run_dir, point,
                             score_overrides=cell.overrides[seed_at + 1:])
        try:
            check_same_config(other)
        except ConfigError:
            continue
        return i
    return None


def stale_cells(spec: CompareSpec, cells: list[Cell], folders: Folders) -> list[tuple[Cell, int]]:
    """The evaluation cells whose folder holds a run made at another point of their strategy's grid (the
    one tuning chose before values were added to the grid), each with that point's folder index; any other
    folder of another config refused (:func:`check_same_config`)."""
    stale = []
    for cell in cells:
        try:
            check_same_config(cell)
        except ConfigError:
            index = _made_at(spec, cell, folders)
            if index is None:
                raise
            stale.append((cell, index))
    return stale


def supersede(cell: Cell, index: int, output: Path) -> Path:
    """Move ``cell``'s run folder, made at the grid point of folder ``index``, and its log to
    ``DIR/superseded/<task>/<strategy>/point<i>/seed<k>`` (``seed<k>.2``, ... when taken): the cell runs
    again at the chosen point and the earlier run is kept and reported. Returns where it went."""
    return set_aside(cell, output, output / SUPERSEDED / cell.task.name / cell.strategy / f"point{index}")


def superseded_table(scores: dict[str, str], output: Path, folders: Folders) -> list[SetAside]:
    """Every run set aside under ``DIR/superseded/``: by :func:`supersede` (an evaluation run at a point
    tuning no longer chooses) and by ``--rerun-mismatched`` (a cell made from other inputs,
    :func:`hardmix.compare.fingerprints.set_aside_mismatched`, tuning cells included): its cell, the point
    it ran (None for an untuned evaluation cell), its compared score (``scores``: task -> the score compared;
    None unless finished) and ``why``, so that every look at the held-out data is disclosed."""

    points = {key: dict(ps) for key, ps in folders.items()}
    rows = []
    top = output / SUPERSEDED
    for task_dir in sorted(top.iterdir()) if top.is_dir() else []:
        for strategy_dir in sorted(d for d in task_dir.iterdir() if d.is_dir()):
            task, strategy = task_dir.name, strategy_dir.name
            known = points.get((task, strategy), {})
            places: list[tuple[Path, str, str | None, bool]] = [
                (d, "a tuning point no longer chosen", d.name, False) for d in strategy_dir.glob("point*")]
            mismatched = strategy_dir / MISMATCHED
            places += [(mismatched, "made from other inputs (--rerun-mismatched)", None, False)]
            places += [(d, "made from other inputs (--rerun-mismatched)", d.name, True)
                       for d in mismatched.glob("point*")]
            for base, why, folder, tuning in sorted(places, key=lambda p: str(p[0])):
                index = int(folder[5:]) if folder and folder[5:].isdigit() else None
                for run in sorted((d for d in base.glob("seed*") if d.is_dir()), key=lambda d: d.name):
                    try:
                        record = read_results(run)
                    except ResultsError:
                        record = {"finished": False}
                    value = ((record.get("final_scores") or {}).get(scores.get(task))
                             if record.get("finished") and not tuning else None)
                    cell = f"{'tune/' if tuning else ''}{task}/{strategy}/{f'{folder}/' if tuning else ''}" \
                           f"{run.name}"
                    rows.append(SetAside(cell=cell, point=known.get(index) if index is not None else None,
                                         score=value, why=why))
    return rows


def first_points(spec: CompareSpec) -> dict[tuple[str, str], dict[str, Any]]:
    """Each tuned (task, strategy)'s first grid point: what the evaluation cells are validated with before
    tuning has chosen."""
    return {
        (t.name, s): grid_points(_axes(spec, s))[0]
        for t in tuned_tasks(spec)
        for s in t.strategies or spec.strategies
    }


def _score(cell: Cell, metric: str) -> float | None:
    try:
        record = cell.record()
    except ResultsError:
        return None
    value = record["final_scores"].get(metric) if record["finished"] else None
    return None if value is None or not math.isfinite(value) else float(value)


def _outcome(cell: Cell, metric: str) -> tuple[str, float | None]:
    """A tuning cell's outcome: ``("scored", score)``, ``("failed", None)`` (its run failed, or it
    finished with a NaN or infinite score) or ``("pending", None)`` (not run, or to resume)."""
    status = cell.status()
    if status == "failed":
        return "failed", None
    if status == "finished":
        score = _score(cell, metric)
        return ("scored", score) if score is not None else ("failed", None)
    return "pending", None


def tuning_table(spec: CompareSpec, cells: list[Cell]) -> dict[str, dict[str, TuningRow]]:
    """``summary["tuning"]``: per task and strategy the selection metric, the budget (steps per run, runs),
    every point's score per tuning seed, its mean and its failed seeds, and the best point: chosen among the
    points every seed scored once no cell is pending (a point with a failed or NaN cell is not chosen; the
    others still are), None until then or when every point failed (``all_failed``); and whether the
    choice can be trusted: ``grid_edge`` (:func:`grid_edge`), ``inert_knob``, ``knob_spread``,
    ``score_se`` and ``score_se_from`` (:func:`inert_knobs`).
    """
    out: dict[str, dict[str, TuningRow]] = {}
    if spec.tune is None:
        return out
    for task in tuned_tasks(spec):
        mine_all = [c for c in cells if c.task.name == task.name]
        metric = task_metric(mine_all[0]) if mine_all else task_class(task).selection_metric
        out[task.name] = {}
        for strategy in task.strategies or spec.strategies:
            mine = [c for c in cells if c.task.name == task.name and c.strategy == strategy]
            grid: list[GridScore] = []
            steps: set[int] = set()
            runs, pending, ses = 0, False, []
            for point in grid_points(_axes(spec, strategy)):
                seeds: dict[int, float] = {}
                failed: dict[int, str] = {}
                for c in (c for c in mine if c.point == point):
                    state, score = _outcome(c, metric)
                    if state == "scored" and score is not None:
                        seeds[c.seed] = score
                        runs += 1
                        steps.add(c.record()["total_steps"])
                        ses.append(_score(c, metric + "_se"))
                    elif state == "failed":
                        failed[c.seed] = c.failure() or f"{metric} is not a number"
                    else:
                        pending = True
                mean = sum(seeds.values()) / len(seeds) if len(seeds) == len(spec.tune.seeds) else None
                grid.append(GridScore(point=point, seeds=seeds, mean=mean, failed=failed))
            scored = [g for g in grid if g.mean is not None]
            best = _chosen(scored, mine) if scored and not pending else None
            se = [v for v in ses if v is not None]
            inert = inert_knobs(_axes(spec, strategy), grid, sum(se) / len(se) if se else None,
                                f"{metric}_se")
            edge = grid_edge(_axes(spec, strategy), best)
            out[task.name][strategy] = TuningRow(
                score=metric, steps_per_run=max(steps) if steps else None, runs=runs, grid=grid, best=best,
                all_failed=not pending and not scored,
                # an inert knob's edge says nothing of what lies beyond the grid: reported as inert only
                grid_edge=None if edge is None else {k: v for k, v in edge.items()
                                                     if k not in (inert["inert_knob"] or [])},
                **inert)
    return out


def _chosen(scored: list[GridScore], cells: list[Cell]) -> dict[str, Any]:
    """The best point: the highest mean score; among points of equal means, the one tuned first (the
    lowest folder ``point<i>``, which keeps its number when values are added to the grid), so growing a
    grid never changes a choice between tied points (nor reruns the evaluation cells)."""
    top = max(g.mean for g in scored if g.mean is not None)
    index = {json.dumps(c.point, sort_keys=True): c.point_index for c in cells if c.point is not None}

    def folder(g: GridScore) -> int:
        i = index.get(json.dumps(g.point, sort_keys=True))
        return i if i is not None else len(index)

    return min((g for g in scored if g.mean == top), key=folder).point


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def grid_edge(axes: dict[str, list[Any]], best: dict[str, Any] | None) -> dict[str, str] | None:
    """Where the chosen point sits on each numeric knob of the grid (a knob with 2 values or more):
    ``"low"`` or ``"high"`` when its value is the knob's smallest or largest (the best may lie beyond the
    grid), ``"low of 2"`` / ``"high of 2"`` for a knob of 2 values (every choice is an edge), absent when
    interior. None before a point is chosen. Knobs of other values (names, flags) have no order: left out.

    >>> axes = {"mixcse.lam": [0.1, 0.2, 0.4], "loss.temperature": [0.05, 0.1], "lr": [1e-5, 3e-5, 1e-4]}
    >>> grid_edge(axes, {"mixcse.lam": 0.4, "loss.temperature": 0.05, "lr": 3e-5})
    {'mixcse.lam': 'high', 'loss.temperature': 'low of 2'}
    """
    if best is None:
        return None
    out = {}
    for knob, values in axes.items():
        values = sorted(set(values)) if all(map(_numeric, values)) else []
        if len(values) < 2 or knob not in best:
            continue
        side = "low" if best[knob] == values[0] else "high" if best[knob] == values[-1] else None
        if side:
            out[knob] = side if len(values) > 2 else f"{side} of 2"
    return out


def inert_knobs(axes: dict[str, list[Any]], grid: list[GridScore], sampling_se: float | None,
                se_name: str = "sampling_se") -> dict[str, Any]:
    """The knobs that made no measurable difference: ``knob_spread`` (per knob of 2 values or more, the
    max - min over its values of the mean score of the scored points with that value: the other knobs
    averaged over), ``score_se`` (the standard error of a point's mean score: the pooled sd of the
    points' scores over the tuning seeds / sqrt(seeds), or the selection score's own sampling standard
    error (``sampling_se``, the mean of the records' ``<score>_se``: one evaluation set for every seed, so
    it does not shrink with them) where that is larger; ``score_se_from`` says which: ``"tuning seeds"``
    or ``se_name``), and ``inert_knob``: the knobs whose
    spread is below ``score_se``, or 0 (points that tie exactly are inert whatever the noise); None where no
    standard error is known (one tuning seed, no ``_se``) and no knob ties exactly.

    >>> grid = [GridScore({"k": k}, {1: 50 + d, 2: 50.4 + d}, 50.2 + d, {})
    ...         for k, d in ((1, 0.0), (2, 0.1), (3, 0.05))]
    >>> r = inert_knobs({"k": [1, 2, 3]}, grid, None)
    >>> r["inert_knob"], round(r["score_se"], 3), r["score_se_from"]
    (['k'], 0.2, 'tuning seeds')
    """
    scored = [g for g in grid if g.mean is not None]
    var = [float(np.var(list(g.seeds.values()), ddof=1)) for g in scored if len(g.seeds) > 1]
    n = min((len(g.seeds) for g in scored), default=0)
    seeds_se = math.sqrt(sum(var) / len(var)) / math.sqrt(n) if var and n > 1 else None
    choices = [(v, f) for v, f in ((seeds_se, "tuning seeds"), (sampling_se, se_name)) if v is not None]
    se, source = max(choices, key=lambda c: c[0]) if choices else (None, None)
    spread = {}
    for knob, values in axes.items():
        by_value = [[g.mean for g in scored if g.mean is not None and g.point.get(knob) == v] for v in values]
        means = [sum(m) / len(m) for m in by_value if m]
        if len(values) > 1 and len(means) > 1:
            spread[knob] = max(means) - min(means)
    # a knob whose points tie exactly is inert whatever the noise (one seed, no standard error known)
    tied = [k for k, d in spread.items() if d == 0] if se is None else \
        [k for k, d in spread.items() if d < se or d == 0]
    inert = tied if se is not None or tied else None
    return {"knob_spread": spread, "score_se": se, "score_se_from": source, "inert_knob": inert}


def best_points(spec: CompareSpec, cells: list[Cell]) -> dict[tuple[str, str], dict[str, Any]] | None:
    """The best point of every tuned (task, strategy), or None while a tuning cell is pending.

    Raises:
        RunError: every point of a strategy failed (naming it and the first reason): it has nothing to
            evaluate, and the comparison says so rather than retrying.
    """
    table = tuning_table(spec, cells)
    for task, rows in table.items():
        for strategy, row in rows.items():
            if row.all_failed:
                reason = next(iter(row.grid[0].failed.values()), "failed")
                raise RunError(f"tune: every point of {strategy} on {task} failed (first: {reason}); its "
                               "grid has nothing to evaluate: give it other points in a new comparison")
    best = {(t, s): row.best for t, rows in table.items() for s, row in rows.items()}
    chosen = {key: p for key, p in best.items() if p is not None}
    return None if len(chosen) < len(best) else chosen


__all__ = [
    "best_points", "first_points", "grid_edge", "inert_knobs", "point_folders",
    "stale_cells", "supersede", "superseded_table", "tuning_cells", "tuning_table", "write_point_order",
]
