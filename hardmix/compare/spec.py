"""A comparison spec (``hardmix compare SPEC.yaml``): tasks x strategies x seeds, validated before any run.

::

    seeds: [1, 2, 3]
    baseline: none                      # the strategy the others are compared with, paired by seed
    strategies:                         # a name for each loss.strategies list; one list serves every task
      none:   [{name: none}]
      mixcse: [{name: mixcse, lam: 0.2}]
      mochi:  [{name: mochi}]
    tasks:
      text:                             # a name; `task:` the registered task (default: the name)
        config: configs/text/cpu_simcse.yaml
        set: {train.max_steps: 40}      # --set overrides of every cell of the task
        score: stsb_dev                 # a key of the runs' results.json final_scores
        strategy_args:                  # this task's arguments for a strategy, merged into its entries
          mochi: {n_hard: 48, n_pair: 48, n_query: 16}
        strategies: [none, mixcse, mochi]   # optional: the task runs only these (default: all)
      vision:
        config: configs/vision/cpu_mocov2_cifar10.yaml
        set: {data.max_samples: 2000}
        score: knn_top1

Every cell's full config is built and validated (the task's own validation, strategies included) before the
first run, so a bad key, value, strategy, score or config file is an error naming it.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hardmix.config import load_yaml
from hardmix.errors import ConfigError

SPEC_KEYS = ("seeds", "baseline", "strategies", "tasks", "output", "jobs", "launcher")
TASK_KEYS = ("task", "config", "set", "score", "strategy_args", "strategies", "launcher")


@dataclass
class TaskSpec:
    """One task of a comparison.

    Attributes:
        name: the task's name in the comparison (a folder name and a table column).
        task: the registered task (``text``, ``vision``, ...).
        config: the base config file.
        overrides: ``key=value`` items for every cell of the task.
        score: the compared score (a key of ``results.json`` ``final_scores``).
        strategy_args: strategy name -> arguments merged into that strategy's entries for this task.
        strategies: the names of the strategies this task runs (None: every one).
    """

    name: str
    task: str
    config: Path
    overrides: list[str] = field(default_factory=list)
    score: str = ""
    strategy_args: dict[str, dict[str, Any]] = field(default_factory=dict)
    strategies: list[str] | None = None


@dataclass
class CompareSpec:
    """A validated comparison: ``seeds`` x ``strategies`` x ``tasks``, and the ``baseline`` strategy."""

    seeds: list[int]
    baseline: str
    strategies: dict[str, list[dict[str, Any]]]
    tasks: dict[str, TaskSpec]
    source: Path | None = None
    output: str | None = None
    jobs: int = 1
    raw: dict[str, Any] = field(default_factory=dict)

    def strategies_for(self, task: TaskSpec, strategy: str) -> list[dict[str, Any]]:
        """The ``loss.strategies`` list of one cell: the strategy's entries with the task's arguments,
        first those given under the entry's registered name (``mochi``: every list that uses mochi), then
        those given under the spec's name of this strategy (``mochi_ramp``: this list only)."""
        entries = copy.deepcopy(self.strategies[strategy])
        for entry in entries:
            entry.update(task.strategy_args.get(entry["name"], {}))
            if strategy != entry["name"]:
                entry.update(task.strategy_args.get(strategy, {}))
        return entries


def override_value(v: Any) -> str:
    """A value as the right-hand side of a ``--set key=value`` override (one line of YAML flow style)."""
    import yaml

    return (
        yaml.safe_dump(v, default_flow_style=True, width=10_000, sort_keys=False)
        .strip()
        .removesuffix("...")
        .strip()
    )


def _resolve_config(path: str, spec_dir: Path | None, key: str) -> Path:
    p = Path(path).expanduser()
    for candidate in [p] if p.is_absolute() else [Path.cwd() / p] + ([spec_dir / p] if spec_dir else []):
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"{key}: config file {path} not found (looked from {Path.cwd()}"
        + (f" and {spec_dir}" if spec_dir else "")
        + ")"
    )


def parse_spec(data: Any, source: Path | None = None) -> CompareSpec:
    """Check the spec's structure (keys, types, names) and return it; cells are validated by
    :func:`hardmix.compare.grid.build_grid`."""
    where = f"{source}: " if source else ""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}the spec must be a mapping with seeds, baseline, strategies and tasks")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise ConfigError(f"{where}unknown key {unknown[0]} (known keys: {', '.join(SPEC_KEYS)})")
    for key in ("seeds", "strategies", "tasks"):
        if key not in data:
            raise ConfigError(f"{where}{key}: missing")
    seeds = data["seeds"]
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)
    ):
        raise ConfigError(f"{where}seeds: expected a list of non-negative integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}seeds: {seeds} repeats a seed")
    strategies = data["strategies"]
    if not isinstance(strategies, dict) or not strategies:
        raise ConfigError(f"{where}strategies: expected a mapping of names to loss.strategies lists")
    from hardmix.strategies import available_strategies
    from hardmix.strategies.specs import normalize_strategy_specs

    normalized = {}
    for name, entries in strategies.items():
        if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"{where}strategies: {name!r} is not a usable name (letters, digits, - and _)")
        normalized[name] = normalize_strategy_specs(entries, key=f"strategies.{name}")
        for i, entry in enumerate(normalized[name]):
            if entry["name"] not in available_strategies():
                raise ConfigError(
                    f"{where}strategies.{name}[{i}].name: unknown strategy {entry['name']!r}; "
                    f"registered: {', '.join(available_strategies())}"
                )
    baseline = data.get("baseline", next(iter(normalized)))
    if baseline not in normalized:
        raise ConfigError(
            f"{where}baseline: {baseline!r} is not one of the strategies ({', '.join(normalized)})"
        )
    tasks = data["tasks"]
    if not isinstance(tasks, dict) or not tasks:
        raise ConfigError(f"{where}tasks: expected a mapping of task names to {{config, score, ...}}")
    parsed = {}
    spec_dir = source.parent if source else None
    for name, t in tasks.items():
        key = f"tasks.{name}"
        if not isinstance(t, dict):
            raise ConfigError(f"{where}{key}: expected a mapping with config and score")
        bad = sorted(set(t) - set(TASK_KEYS))
        if bad:
            raise ConfigError(f"{where}{key}: unknown key {bad[0]} (known keys: {', '.join(TASK_KEYS)})")
        for required in ("config", "score"):
            if required not in t:
                raise ConfigError(f"{where}{key}.{required}: missing")
        sets = t.get("set") or {}
        if not isinstance(sets, dict):
            raise ConfigError(f"{where}{key}.set: expected a mapping of dotted keys to values")
        args = t.get("strategy_args") or {}
        if not isinstance(args, dict) or any(not isinstance(v, dict) for v in args.values()):
            raise ConfigError(f"{where}{key}.strategy_args: expected strategy name -> mapping of arguments")
        only = t.get("strategies")
        if only is not None:
            if not isinstance(only, list) or not only:
                raise ConfigError(f"{where}{key}.strategies: expected a list of strategy names")
            bad_names = [n for n in only if n not in normalized]
            if bad_names:
                raise ConfigError(
                    f"{where}{key}.strategies: {bad_names[0]!r} is not one of the strategies "
                    f"({', '.join(normalized)})"
                )
            if baseline not in only:
                raise ConfigError(f"{where}{key}.strategies: the baseline {baseline!r} must be among them")
        try:
            config = _resolve_config(str(t["config"]), spec_dir, f"{key}.config")
        except ConfigError as e:
            raise ConfigError(f"{where}{e}") from None
        parsed[name] = TaskSpec(
            name=name,
            task=str(t.get("task", name)),
            config=config,
            overrides=[f"{k}={override_value(v)}" for k, v in sets.items()],
            score=str(t["score"]),
            strategy_args=args,
            strategies=None if only is None else [str(n) for n in only],
        )
    jobs = data.get("jobs", 1)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"{where}jobs: expected a positive integer, got {jobs!r}")
    return CompareSpec(
        seeds=list(seeds),
        baseline=baseline,
        strategies=normalized,
        tasks=parsed,
        source=source,
        output=data.get("output"),
        jobs=jobs,
        raw=copy.deepcopy(data),
    )


def select_tasks(spec: CompareSpec, names: str | None) -> CompareSpec:
    """The spec restricted to a comma list of its tasks (``--tasks``); None keeps them all."""
    if names is None:
        return spec
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in spec.tasks]
    if not wanted or unknown:
        bad = unknown[0] if unknown else names
        raise ConfigError(f"--tasks: {bad!r} is not a task of the spec (tasks: {', '.join(spec.tasks)})")
    return replace(spec, tasks={n: t for n, t in spec.tasks.items() if n in wanted})


def load_spec(path: str | os.PathLike[str]) -> CompareSpec:
    """Read and check a spec file (errors name the file and the key)."""
    p = Path(path)
    return parse_spec(load_yaml(p), source=p.resolve())


__all__ = ["CompareSpec", "TaskSpec", "load_spec", "parse_spec"]
