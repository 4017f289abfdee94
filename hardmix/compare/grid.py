"""The cells of a comparison (task x strategy x seed), each an ordinary run folder: their names, configs,
commands and states. Running them is :mod:`hardmix.compare.runner`'s (here, ``--jobs`` at a time) or
:mod:`hardmix.compare.launcher`'s (SLURM jobs).

Cell ``(task, strategy, seed)`` is ``hardmix train TASK CONFIG --output DIR/runs/<task>/<strategy>/seed<k>
--set ...`` with the task's overrides, ``loss.strategies`` and ``train.seed``: it can be inspected,
evaluated and resumed like any run. A finished cell (its ``results.json`` says so) is never run again; an
interrupted one (a ``checkpoint.pt`` without a finished record) resumes. A cell whose run failed (it
diverged, or exited with an error) is a result too: ``failure.json`` in its folder records why, the
comparison goes on without it, and ``--resume`` runs it again only when asked (``--retry-failed``).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from hardmix.compare.cell_keys import check_cell_config
from hardmix.compare.folder import FAILURE, LOGS, RUNS
from hardmix.compare.precision import cell_precision
from hardmix.compare.spec import CompareSpec, TaskSpec, apply_point, override_value
from hardmix.config.loader import build_config
from hardmix.training.api import load_config_for, resolve_task
from hardmix.training.config import config_differences, key_in, plain_config
from hardmix.training.fingerprint import FREE_OF_RESULT
from hardmix.training.results import ResultsError, read_results
from hardmix.training.run_folder import CONFIG, RESULTS, run_files
from hardmix.training.runtime import Runtime
from hardmix.training.task import Task
from hardmix.utils.confine import confined, write_text
from hardmix.utils.errors import ConfigError


@dataclass
class Cell:
    """One run of the grid.

    Attributes:
        task: the task's spec; strategy: the strategy's name; seed: the seed.
        run_dir: its run folder.
        overrides: every ``--set`` of its command (the task's, the strategies, the seed).
        config: its validated config (plain, as ``config.yaml`` will hold it).
        point: a tuning cell's grid point (key -> value), None for an evaluation cell.
        point_index: the point's index in its strategy's grid (its folder ``point<i>``).
    """

    task: TaskSpec
    strategy: str
    seed: int
    run_dir: Path
    overrides: list[str]
    config: dict[str, Any]
    point: dict[str, Any] | None = None
    point_index: int | None = None

    @property
    def label(self) -> str:
        if self.point_index is not None:
            return f"tune/{self.task.name}/{self.strategy}/point{self.point_index}/seed{self.seed}"
        return f"{self.task.name}/{self.strategy}/seed{self.seed}"

    def record(self) -> dict[str, Any]:
        """The cell's ``results.json``, its types checked (:func:`check_record`).

        Raises:
            ResultsError: missing, unreadable, or not a record of this cell.
        """
        return check_record(read_results(self.run_dir), self.run_dir / RESULTS, self.seed)

    def status(self) -> str:
        """``finished``, ``failed`` (its run failed: :meth:`failure` says why), ``corrupt`` (a
        ``results.json`` that is not a record of this cell), ``partial`` (a run to resume: its checkpoint,
        or its files from before the first) or ``pending``."""
        if (self.run_dir / RESULTS).exists():
            try:
                if self.record()["finished"]:
                    return "finished"
            except ResultsError:
                return "corrupt"
        if (self.run_dir / FAILURE).is_file():
            return "failed"
        # a run folder stopped before its first checkpoint is resumed too (from step 0): a new run may not
        # write over it
        return "partial" if run_files(self.run_dir) else "pending"

    def failure(self) -> str | None:
        """Why the cell's run failed (its record's ``reason``), or None."""
        try:
            return str(json.loads((self.run_dir / FAILURE).read_text(encoding="utf-8"))["reason"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record_failure(self, returncode: int, log: Path, output: Path) -> None:
        """Record that the cell's run failed: its exit status and the last line of its log (written inside
        the comparison's folder ``output``)."""
        text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        lines = text.strip().splitlines()
        reason = lines[-1] if lines else f"exit status {returncode}"
        write_text(json.dumps({"returncode": returncode, "reason": reason}, indent=2) + "\n",
                   self.run_dir / FAILURE, output)

    def command(self, resume: bool = False, extra: list[str] | None = None) -> list[str]:
        """The ``hardmix train`` command of this cell (``--resume`` for a partial one)."""
        task = self.task.task or self.task.name  # (validation names the task: its name by default)
        cmd = ["hardmix", "train", task, str(self.task.config), "--output", str(self.run_dir)]
        for item in [*self.overrides, *(extra or [])]:
            cmd += ["--set", item]
        return cmd + (["--resume"] if resume else [])


def is_number(x: Any) -> bool:
    """A JSON number (int or float), not a bool."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_record(record: dict[str, Any], path: Path, seed: int | None = None) -> dict[str, Any]:
    """``record`` if its values have the schema's types (and its seed is ``seed``), else a ResultsError
    naming the file and the key: a comparison never computes from a record it cannot trust.

    >>> check_record({"finished": True, "final_scores": {"a": 1.5}, "steps": 3, "total_steps": 3,
    ...               "wall_seconds": 2.0, "best_step": None, "seed": 1}, Path("r.json"), 1)["steps"]
    3
    >>> check_record({"finished": "yes"}, Path("r.json"))
    Traceback (most recent call last):
    ...
    hardmix.training.results.ResultsError: r.json: corrupt results record: finished is 'yes', not ...
    """
    checks = (
        ("finished", lambda v: isinstance(v, bool), "not true or false"),
        ("final_scores", lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and (v[k] is None or is_number(v[k])) for k in v), "not a mapping of numbers"),
        ("steps", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "not a step count"),
        ("total_steps", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
         "not a step count"),
        ("wall_seconds", is_number, "not a number"),
        ("best_step", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)), "not a step"),
        ("seed", lambda v: seed is None or v == seed, f"not this cell's seed {seed}"),
    )
    for key, ok, what in checks:
        if key not in record or not ok(record[key]):
            shown = repr(record.get(key))[:60]
            raise ResultsError(f"{path}: corrupt results record: {key} is {shown}, {what}")
    if record["finished"] and record["steps"] != record["total_steps"]:
        raise ResultsError(f"{path}: corrupt results record: finished with {record['steps']} of "
                           f"{record['total_steps']} steps")
    return record


def make_cell(
    spec: CompareSpec,
    task: TaskSpec,
    task_cls: type[Task],
    strategy: str,
    seed: int,
    run_dir: Path,
    point: dict[str, Any] | None = None,
    point_index: int | None = None,
    score_overrides: list[str] | None = None,
) -> tuple[Cell, Any]:
    """One cell, its config built and validated: the task's overrides, the point's (a tuning point, or the
    best one for an evaluation cell), ``loss.strategies``, ``train.seed``, then what the scores need.

    Returns:
        The cell and its config object (for the score checks).
    """
    entries, point_sets = apply_point(spec, task, strategy, point or {})
    overrides = [
        *task.overrides,
        *spec.strategy_overrides(strategy),
        *point_sets,
        f"loss.strategies={override_value(entries)}",
        f"train.seed={seed}",
        *(score_overrides or []),
    ]
    try:
        cfg = load_config_for(task_cls, task.config, overrides)
        if cfg.train.precision == "auto":  # one precision for every cell of the task, wherever it runs
            overrides.append(f"train.precision={cell_precision(spec, task, task_cls, cfg)}")
            cfg = load_config_for(task_cls, task.config, overrides)
    except ConfigError as e:
        where = f" at tune point {point}" if point_index is not None else ""
        raise ConfigError(f"tasks.{task.name} with strategy {strategy}{where}: {e}") from None
    origins = [(f"tasks.{task.name}.set", task.overrides),
               (f"strategy_set.{strategy}", spec.strategy_overrides(strategy)),
               (f"tune.grid.{strategy}", point_sets)]
    check_cell_config(cfg, seed, [e["name"] for e in spec.strategies[strategy]], task.config,
                      [(item, origin) for origin, given in origins for item in given],
                      f"{f'{spec.source}: ' if spec.source else ''}tasks.{task.name} with strategy {strategy}"
                      + (f" at tune point {point}" if point_index is not None else ""))
    cell = Cell(task, strategy, seed, run_dir, overrides, plain_config(cfg), point, point_index)
    return cell, cfg


def _resolve_scores(task: TaskSpec, task_cls: type[Task], cfg: Any) -> list[str]:
    """Fill in the task's compared score (its ``default_score`` when the spec names none), refuse the
    selection score unless allowed, and return the overrides that make the cells' final scores hold the
    compared and secondary scores."""
    if not task.score:
        if not task_cls.default_score:
            raise ConfigError(
                f"tasks.{task.name}.score: missing (task {task.task} declares no default score)"
            )
        task.score = task_cls.default_score
    if task.score == task_cls.about(cfg).selection_metric() and not task.allow_selection_score:
        held = ", ".join(task_cls.about(cfg).held_out_scores()) or task_cls.default_score
        raise ConfigError(
            f"tasks.{task.name}.score: {task.score!r} is the task's selection score (it picks the "
            f"model), not held out; compare a held-out score{f' ({held})' if held else ''} or set "
            f"tasks.{task.name}.allow_selection_score: true"
        )
    extra = task_cls.about(cfg).overrides_for_scores([task.score, *(task.secondary or [])])
    if not isinstance(extra, list) or any(not isinstance(x, str) or "=" not in x for x in extra):
        raise ConfigError(f"task {task.task}: overrides_for_scores returned {extra!r}, not key=value items")
    return list(extra)


def _check_scores(task: TaskSpec, task_cls: type[Task], cfg: Any) -> None:
    scores = task_cls.about(cfg).score_names()
    if task.score not in scores:
        raise ConfigError(
            f"tasks.{task.name}.score: {task.score!r} is not a final score of this "
            f"{task.task} config (it has: {', '.join(scores) or 'none'})"
        )
    if task.secondary is None:
        task.secondary = [s for s in task_cls.about(cfg).held_out_scores() if s != task.score and s in scores]
    for name in task.secondary:
        if name not in scores:
            raise ConfigError(
                f"tasks.{task.name}.secondary: {name!r} is not a final score of this {task.task} config "
                f"(it has: {', '.join(scores) or 'none'})"
            )


def task_class(task: TaskSpec) -> type[Task]:
    """The registered task class of a spec's task (the error names ``tasks.<t>.task``)."""
    try:
        return resolve_task(task.task)
    except ConfigError as e:
        raise ConfigError(f"tasks.{task.name}.task: {str(e).split(': ', 1)[-1]}") from None


def build_grid(
    spec: CompareSpec,
    output: Path,
    check_data: bool = True,
    points: dict[tuple[str, str], dict[str, Any]] | None = None,
    check_existing: bool = True,
) -> list[Cell]:
    """Every evaluation cell, its config built and validated, its score known to its task and not the
    selection score (unless allowed), its data there (the task's own checks, with ``check_data``), and any
    run folder of another config refused (with ``check_existing``); nothing is run or written here.

    Args:
        points: (task, strategy) -> the tuned point its cells run (tuning's best; a task or strategy not
            in it runs the spec's own arguments).

    Raises:
        ConfigError: naming the task, strategy or key at fault.
    """
    cells = []
    for task in spec.tasks.values():
        task_cls = task_class(task)
        for name in task.strategy_args:
            used = name in spec.strategies or any(
                e["name"] == name for entries in spec.strategies.values() for e in entries
            )
            if not used:
                raise ConfigError(
                    f"tasks.{task.name}.strategy_args.{name}: neither a strategy of the spec nor used by one"
                )
        score_sets: list[str] | None = None
        for strategy in task.strategies or spec.strategies:
            point = (points or {}).get((task.name, strategy))
            checked = False  # each strategy's config through the task's own checks (its data, its negatives)
            for seed in task.seeds:
                run_dir = output / RUNS / task.name / strategy / f"seed{seed}"
                confined(run_dir, output)  # a link planted in the output folder leads nowhere else
                if score_sets is None:
                    _, cfg = make_cell(spec, task, task_cls, strategy, seed, run_dir, point)
                    score_sets = _resolve_scores(task, task_cls, cfg)
                cell, cfg = make_cell(spec, task, task_cls, strategy, seed, run_dir, point,
                                      score_overrides=score_sets)
                _check_scores(task, task_cls, cfg)
                if check_data and not checked:  # data, models, evaluation data, what the strategy needs
                    check_task(task, task_cls, cfg, strategy, output)
                    checked = True
                if check_existing:
                    check_same_config(cell)
                cells.append(cell)
    return cells


def check_task(task: TaskSpec, task_cls: type[Task], cfg: Any, strategy: str | None = None,
               output: Path | None = None) -> None:
    """The task's own cheap checks (files, models, evaluation data, what the strategy needs of them)
    before any cell runs: the checks a cell would run at its start, so none fails in mid-comparison; and
    the comparison's ``output`` is none of the folders the task reads, nor inside one (its plots would
    become training images, its runs part of a model's fingerprint)."""
    which = f" with strategy {strategy}" if strategy else ""
    try:
        checked = task_cls(cfg, Runtime(torch.device("cpu")))
        checked.check()
        folders = checked.facts.input_folders() if output is not None else {}
    except (OSError, ValueError) as e:
        raise ConfigError(f"tasks.{task.name}{which}: {e}") from None
    real = os.path.realpath(output) if output is not None else ""
    for key, folder in folders.items():
        src = os.path.realpath(folder)
        if real == src or real.startswith(src.rstrip(os.sep) + os.sep):
            raise ConfigError(f"--output: {real} is {'' if real == src else 'inside '}tasks.{task.name}'s "
                              f"{key} ({src}), a folder the comparison reads: its runs and plots would "
                              "change it (a model's fingerprint, an image folder's images); choose another "
                              "--output")


# What may differ between a cell's recorded config and the spec's without changing its result: where and
# how it ran, its checkpoints and its logs. Everything else (the evaluation's keys included: they make the
# scores a test pairs) must be equal, or the cell is not one of this comparison.
CELL_FREE_KEYS = tuple(k for k in FREE_OF_RESULT if k != "train.seed")  # each cell has its own seed


def check_same_config(cell: Cell) -> None:
    """A cell folder holding a run (finished or not) was made from this cell's config, every key but
    :data:`CELL_FREE_KEYS` equal, else a ConfigError naming the keys: a comparison never pools cells of
    two configs (an ``eval.*`` key edited between two resumes, say)."""
    saved = cell.run_dir / CONFIG
    if not saved.is_file():
        return
    done = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
    done["output"] = cell.config.get("output")
    changed = [k for k in config_differences(done, cell.config) if not key_in(k, CELL_FREE_KEYS)]
    if (cell.config.get("train") or {}).get("precision") == "auto":  # auto keeps the precision recorded
        changed = [k for k in changed if k != "train.precision"]
    if changed:
        raise ConfigError(
            f"{cell.label}: {cell.run_dir} was trained with another config ({', '.join(changed)} "
            "differ); choose another --output, or restore the spec"
        )


def print_commands(cells: list[Cell]) -> list[str]:
    """One shell line per cell that is not finished (``--resume`` for a partial one)."""
    return [shlex.join(c.command(resume=bool(run_files(c.run_dir))))
            for c in cells if c.status() != "finished"]


def cell_log(cell: Cell, output: Path) -> Path:
    """The file a cell's output goes to in the comparison folder ``output``, with the local runner and
    under a launcher alike (``DIR/logs/<task>-<strategy>-seed<k>.log``; tuning cells
    ``tune-<task>-<strategy>-point<i>-seed<k>.log``)."""
    return output / LOGS / (cell.label.replace("/", "-") + ".log")


def task_metric(cell: Cell) -> str:
    """The selection metric of a cell (what its evaluation lines carry): its task's for the cell's config
    (:meth:`hardmix.training.task.ConfigFacts.selection_metric`, e.g. vision's ``eval.selection``)."""
    if (key := str(cell.run_dir)) not in _METRICS:
        cls = task_class(cell.task)
        _METRICS[key] = cls.about(build_config(cls.config_class, cell.config)).selection_metric()
    return _METRICS[key]


_METRICS: dict[str, str] = {}


__all__ = [
    "Cell", "build_grid", "cell_log", "check_record", "check_same_config", "check_task", "is_number",
    "make_cell", "print_commands", "task_class", "task_metric",
]
