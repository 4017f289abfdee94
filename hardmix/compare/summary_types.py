"""The comparison's summary as typed objects: what :func:`hardmix.compare.summary.summarize` builds, what
``summary.json`` holds (:meth:`ComparisonSummary.as_json`) and what reading it back gives
(:meth:`ComparisonSummary.from_json`), so every table (:mod:`hardmix.compare.tables`) reads attributes,
never nested dicts.

``as_json`` writes the keys in ``summary.json``'s order, leaves out what a summary leaves out (a task's
contrasts, a start not measured) and writes seeds (integers here) as string keys; ``from_json`` reads a
paired difference's ``null`` back as NaN (what was computed), any other ``null`` as None.

>>> row = StrategyRow(mean=1.0, std=0.5, n=2, seeds={1: 0.5, 2: 1.5}, nan_seeds=[], wall_seconds_mean=3.0,
...                   wall_seconds_total=6.0, sampling_se=None, secondary={},
...                   diagnostics=Diagnostics(Boundary(0, 2, 2), ["2/2 cells at last step"]))
>>> row.as_json()["seeds"]
{'1': 0.5, '2': 1.5}
>>> StrategyRow.from_json(row.as_json()) == row
True
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from hardmix.compare.stats import PairedDifference
from hardmix.training.learned import NOT_MEASURED

Json = dict[str, Any]
_T = TypeVar("_T")


def _seeded(values: dict[str, Any]) -> dict[int, Any]:
    """A JSON object keyed by seed, its keys as the integers they were."""
    return {int(k): v for k, v in values.items()}


def _keyed(values: dict[int, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in values.items()}


def _nan(v: Any) -> Any:
    """A statistic read back: ``null`` as NaN (what was computed and written as null)."""
    return math.nan if v is None else v


_FLOATS = {f.name for f in fields(PairedDifference) if f.type in ("float", float)}


def _difference_fields(data: Json) -> Json:
    """The :class:`~hardmix.compare.stats.PairedDifference` fields of a JSON entry, as computed."""
    out = {f.name: data[f.name] for f in fields(PairedDifference) if f.name in data}
    out.update({k: _nan(out[k]) for k in _FLOATS if k in out})
    if "ci_simultaneous" in out:
        out["ci_simultaneous"] = tuple(_nan(v) for v in out["ci_simultaneous"])
    return out


class _Plain:
    """A part of the summary written as its fields, in their order, and read back from them."""

    def as_json(self) -> Json:
        return asdict(self)  # type: ignore[call-overload]  # every subclass is a dataclass

    @classmethod
    def from_json(cls: type[_T], data: Json) -> _T:
        return cls(**data)


@dataclass(frozen=True)
class PairedRow(PairedDifference):
    """A paired difference of a strategy from a reference (the baseline, or in ``contrasts`` its control)
    over the seeds both have a score for: the statistics (:class:`~hardmix.compare.stats.PairedDifference`),
    those ``seeds`` and, for a contrast, the ``strategy`` and its ``control``."""

    seeds: list[int] = field(default_factory=list)
    strategy: str | None = None
    control: str | None = None

    def as_json(self) -> Json:
        out = asdict(self)
        out["ci_simultaneous"] = list(self.ci_simultaneous)
        return {k: v for k, v in out.items() if k not in ("strategy", "control") or v is not None}

    @classmethod
    def from_json(cls, data: Json) -> PairedRow:
        return cls(**_difference_fields(data), seeds=list(data.get("seeds", [])),
                   strategy=data.get("strategy"), control=data.get("control"))


@dataclass(frozen=True)
class Boundary:
    """How many of a strategy's ``cells`` (those that logged an evaluation) selected their first
    (``at_first``) or last (``at_last``) evaluated step (:func:`hardmix.compare.summary.boundary`)."""

    at_first: int
    at_last: int
    cells: int


@dataclass(frozen=True)
class Diagnostics(_Plain):
    """What a strategy's verdict can rest on: its :class:`Boundary` and its ``flags`` in words."""

    boundary: Boundary
    flags: list[str]

    @classmethod
    def from_json(cls, data: Json) -> Diagnostics:
        return cls(Boundary(**data["boundary"]), list(data["flags"]))


@dataclass(frozen=True)
class MeanStd:
    """A score's mean and standard deviation over ``n`` finished cells."""

    mean: float
    std: float
    n: int


@dataclass(frozen=True)
class ViewStart:
    """The start's compared score seen through another view of the encoder (e.g. mean pooling): its mean
    over the ``n`` cells that measured it."""

    mean: float
    n: int


@dataclass(frozen=True)
class StrategyRow:
    """One strategy on one task: its compared score's ``mean``, ``std`` and ``n`` over the finite scores,
    every seed's score (NaN: scored NaN, also in ``nan_seeds``), the training seconds, the evaluation's
    own sampling error, its other final scores (``secondary``) and its :class:`Diagnostics`."""

    mean: float
    std: float
    n: int
    seeds: dict[int, float]
    nan_seeds: list[int]
    wall_seconds_mean: float | None
    wall_seconds_total: float
    sampling_se: float | None
    secondary: dict[str, MeanStd]
    diagnostics: Diagnostics

    def as_json(self) -> Json:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "seeds": _keyed(self.seeds),
                "secondary": {k: asdict(v) for k, v in self.secondary.items()},
                "diagnostics": self.diagnostics.as_json()}

    @classmethod
    def from_json(cls, data: Json) -> StrategyRow:
        return cls(**{**data, "mean": _nan(data["mean"]), "std": _nan(data["std"]),
                      "seeds": {k: _nan(v) for k, v in _seeded(data["seeds"]).items()},
                      "nan_seeds": list(data["nan_seeds"]),
                      "secondary": {k: MeanStd(**v) for k, v in data["secondary"].items()},
                      "diagnostics": Diagnostics.from_json(data["diagnostics"])})


@dataclass(frozen=True)
class StartRow:
    """A task's starting encoder, as its cells measured it before their first step: per seed (the
    baseline's cells first), its mean, std and ``n``, every start score's mean (``scores``), the other
    views' compared score (``other``: name -> mean and count), and, where it was measured after the fact,
    how (``source``) and from which ``files``. A start not measured has its ``status`` only."""

    status: str
    seeds: dict[int, float] = field(default_factory=dict)
    mean: float | None = None
    std: float | None = None
    n: int = 0
    scores: dict[str, float] = field(default_factory=dict)
    depends_on_seed: bool | None = None
    spread_across_strategies: float | None = None
    other: dict[str, ViewStart] | None = None
    source: str | None = None
    files: list[str] | None = None

    @property
    def measured(self) -> bool:
        return self.status == "measured"

    def as_json(self) -> Json:
        head = {"status": self.status, "seeds": _keyed(self.seeds), "mean": self.mean, "std": self.std,
                "n": self.n}
        if not self.measured:
            return {**head, "scores": self.scores}
        out = {**head, "depends_on_seed": self.depends_on_seed,
               "spread_across_strategies": self.spread_across_strategies, "scores": self.scores,
               "other": None if self.other is None else {k: asdict(v) for k, v in self.other.items()}}
        return {**out, **({"source": self.source, "files": self.files} if self.source is not None else {})}

    @classmethod
    def from_json(cls, data: Json) -> StartRow:
        other = data.get("other")
        return cls(**{**data, "seeds": _seeded(data.get("seeds") or {}),
                      "other": None if other is None else {k: ViewStart(**v) for k, v in other.items()}})


@dataclass(frozen=True)
class LearnedRow:
    """Did a strategy learn: the paired difference of its scores from its own cells' start over ``seeds``
    (``n`` pairs), its statistics as a :class:`~hardmix.compare.stats.PairedDifference` has them, and the
    ``verdict``: True when its 95% interval lies above 0 (:func:`hardmix.compare.summary.learned_verdict`),
    False otherwise, None where the start was not measured (``status``)."""

    mean: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_value: float = math.nan
    n: int = 0
    verdict: bool | None = None
    sd: float = math.nan
    effect_size: float = math.nan
    min_detectable_difference: float = math.nan
    p_holm: float = math.nan
    p_exact: float = math.nan
    p_exact_holm: float = math.nan
    p_exact_min: float = math.nan
    ci_simultaneous: tuple[float, float] = (math.nan, math.nan)
    ci_simultaneous_method: str | None = None
    seeds: list[int] = field(default_factory=list)
    status: str = NOT_MEASURED

    def as_json(self) -> Json:
        if self.status == NOT_MEASURED:
            return {"status": self.status, "verdict": self.verdict, "n": self.n, "seeds": self.seeds}
        out = asdict(self)
        return {**out, "ci_simultaneous": list(self.ci_simultaneous)}

    @classmethod
    def from_json(cls, data: Json) -> LearnedRow:
        values = {**data, **_difference_fields(data), "verdict": data.get("verdict")}
        return cls(**values)


@dataclass(frozen=True)
class TaskSummary:
    """One task of the comparison: its compared ``score``, each strategy's :class:`StrategyRow`, its
    seeds, each strategy's paired difference from the baseline (``paired``), each strategy against its
    control (``contrasts``, None without any), the selection score, the start, whether each strategy
    learned and each strategy's arm differences from the baseline's (property: mine vs the baseline's)."""

    task: str
    score: str
    strategies: dict[str, StrategyRow]
    seeds: list[int]
    paired: dict[str, PairedRow]
    selection_metric: str
    score_is_selection: bool
    allow_selection_score: bool
    start: StartRow | None
    learned: dict[str, LearnedRow]
    arm_differences: dict[str, list[str]]
    contrasts: dict[str, PairedRow] | None = None

    def as_json(self) -> Json:
        out: Json = {"task": self.task, "score": self.score,
                     "strategies": {s: r.as_json() for s, r in self.strategies.items()},
                     "seeds": self.seeds, "paired": {s: p.as_json() for s, p in self.paired.items()}}
        if self.contrasts is not None:
            out["contrasts"] = {k: p.as_json() for k, p in self.contrasts.items()}
        out.update({"selection_metric": self.selection_metric, "score_is_selection": self.score_is_selection,
                    "allow_selection_score": self.allow_selection_score})
        if self.start is not None:
            out["start"] = self.start.as_json()
        return {**out, "learned": {s: r.as_json() for s, r in self.learned.items()},
                "arm_differences": self.arm_differences}

    @classmethod
    def from_json(cls, data: Json) -> TaskSummary:
        contrasts = data.get("contrasts")
        return cls(
            task=data["task"], score=data["score"],
            strategies={s: StrategyRow.from_json(r) for s, r in data["strategies"].items()},
            seeds=list(data.get("seeds") or []),
            paired={s: PairedRow.from_json(p) for s, p in data["paired"].items()},
            selection_metric=data.get("selection_metric") or "",
            score_is_selection=bool(data.get("score_is_selection")),
            allow_selection_score=bool(data.get("allow_selection_score")),
            start=StartRow.from_json(data["start"]) if "start" in data else None,
            learned={s: LearnedRow.from_json(r) for s, r in (data.get("learned") or {}).items()},
            arm_differences={s: list(d) for s, d in (data.get("arm_differences") or {}).items()},
            contrasts=None if contrasts is None else {
                k: PairedRow.from_json(p) for k, p in contrasts.items()})


@dataclass(frozen=True)
class CellRecord(_Plain):
    """One finished cell (``summary.json``'s ``cell_records``): every final score, the best step, the
    training seconds (pauses and evaluations excluded), the selection score and each evaluation: its step,
    its scores and the diagnostics logged at that step (:func:`hardmix.compare.summary.evaluations`)."""

    task: str
    strategy: str
    seed: int
    final_scores: dict[str, float | None]
    best_step: int
    training_seconds: float
    selection_metric: str
    evaluations: list[dict[str, float]]


@dataclass(frozen=True)
class CodeTable(_Plain):
    """Which code trained the finished cells: how many by commit label (``counts``), the full
    ``commits``, whether more than one recorded code did (``mixed``) and then the cells of each."""

    counts: dict[str, int]
    commits: list[str]
    mixed: bool
    cells: dict[str, list[str]] | None = None

    def as_json(self) -> Json:
        out = asdict(self)
        return out if self.cells is not None else {k: v for k, v in out.items() if k != "cells"}


@dataclass(frozen=True)
class GridScore:
    """One point of a tuning grid: its selection score per tuning seed, their ``mean`` (None until every
    seed scored) and the seeds whose run failed or scored NaN (``failed``: seed -> why)."""

    point: dict[str, Any]
    seeds: dict[int, float]
    mean: float | None
    failed: dict[int, str]

    def as_json(self) -> Json:
        return {"point": self.point, "seeds": _keyed(self.seeds), "mean": self.mean,
                "failed": _keyed(self.failed)}

    @classmethod
    def from_json(cls, data: Json) -> GridScore:
        return cls(data["point"], _seeded(data["seeds"]), data["mean"], _seeded(data.get("failed") or {}))


@dataclass(frozen=True)
class TuningRow:
    """One strategy's tuning on one task (:func:`hardmix.compare.tuning.tuning_table`): the selection
    ``score``, the budget, every :class:`GridScore`, the ``best`` point (None until chosen), whether every
    point failed, and whether the choice can be trusted (:func:`hardmix.compare.tuning.grid_edge`,
    :func:`hardmix.compare.tuning.inert_knobs`)."""

    score: str
    steps_per_run: int | None
    runs: int
    grid: list[GridScore]
    best: dict[str, Any] | None
    all_failed: bool
    grid_edge: dict[str, str] | None
    knob_spread: dict[str, float]
    score_se: float | None
    score_se_from: str | None
    inert_knob: list[str] | None

    def as_json(self) -> Json:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "grid": [g.as_json() for g in self.grid]}

    @classmethod
    def from_json(cls, data: Json) -> TuningRow:
        return cls(**{**data, "grid": [GridScore.from_json(g) for g in data["grid"]]})


@dataclass(frozen=True)
class Growth(_Plain):
    """One growth of the comparison (``growth.json``): when, what was added, whether after its results
    had been seen, and how it was ``recorded`` where that was written afterwards."""

    date: str
    added: list[str]
    after_results: bool
    recorded: str | None = None

    def as_json(self) -> Json:
        out = asdict(self)
        return out if self.recorded is not None else {k: v for k, v in out.items() if k != "recorded"}


@dataclass(frozen=True)
class SetAside(_Plain):
    """A run set aside under ``superseded/``: its cell, the point it ran (None: an untuned cell), its
    compared score (None unless finished) and why (:func:`hardmix.compare.tuning.superseded_table`)."""

    cell: str
    point: dict[str, Any] | None
    score: float | None
    why: str


@dataclass(frozen=True)
class ComparisonSummary:
    """What a comparison measured (``summary.json`` less its spec, machine and versions): the baseline,
    the seeds, each :class:`TaskSummary`, the missing and failed cells, how many cells finished of how many,
    every finished cell's :class:`CellRecord`, the :class:`CodeTable`, and where there were any, the
    tuning (task -> strategy -> :class:`TuningRow`), the growths and the runs set aside."""

    baseline: str
    seeds: list[int]
    tasks: dict[str, TaskSummary]
    missing: list[str]
    failed: dict[str, str]
    finished: int
    cells: int
    cell_records: list[CellRecord]
    code: CodeTable
    tuning: dict[str, dict[str, TuningRow]] | None = None
    growth: list[Growth] | None = None
    superseded: list[SetAside] | None = None

    def as_json(self) -> Json:
        out: Json = {"baseline": self.baseline, "seeds": self.seeds,
                     "tasks": {t: v.as_json() for t, v in self.tasks.items()}, "missing": self.missing,
                     "failed": self.failed, "finished": self.finished, "cells": self.cells,
                     "cell_records": [r.as_json() for r in self.cell_records], "code": self.code.as_json()}
        if self.tuning:
            out["tuning"] = {t: {s: r.as_json() for s, r in per.items()} for t, per in self.tuning.items()}
        if self.growth:
            out["growth"] = [g.as_json() for g in self.growth]
        if self.superseded:
            out["superseded"] = [r.as_json() for r in self.superseded]
        return out

    @classmethod
    def from_json(cls, data: Json) -> ComparisonSummary:
        """A summary read back from ``summary.json`` (its ``spec``, ``machine`` and ``versions`` left
        aside)."""
        tuning, growth, superseded = data.get("tuning"), data.get("growth"), data.get("superseded")
        return cls(
            baseline=data["baseline"], seeds=list(data["seeds"]),
            tasks={t: TaskSummary.from_json(v) for t, v in data["tasks"].items()},
            missing=list(data.get("missing") or []), failed=dict(data.get("failed") or {}),
            finished=data["finished"], cells=data["cells"],
            cell_records=[CellRecord.from_json(r) for r in data.get("cell_records") or []],
            code=CodeTable.from_json(data.get("code") or {"counts": {}, "commits": [], "mixed": False}),
            tuning=None if not tuning else {t: {s: TuningRow.from_json(r) for s, r in per.items()}
                                            for t, per in tuning.items()},
            growth=None if not growth else [Growth.from_json(g) for g in growth],
            superseded=None if not superseded else [SetAside.from_json(r) for r in superseded])


__all__ = [
    "Boundary", "CellRecord", "CodeTable", "ComparisonSummary", "Diagnostics",
    "GridScore", "Growth", "LearnedRow", "MeanStd", "PairedRow", "SetAside", "StartRow", "StrategyRow",
    "TaskSummary", "TuningRow", "ViewStart",
]
