"""A comparison spec (``hardmix compare SPEC.yaml``): tasks x strategies x seeds, validated before any run.

::

    seeds: [1, 2, 3]
    baseline: none                      # the strategy the others are compared with, paired by seed
    strategies:                         # a name for each loss.strategies list; one list serves every task
      none:   [{name: none}]
      mixcse: [{name: mixcse, lam: 0.2}]
      mochi:  [{name: mochi}]
    strategy_set:                       # optional: config overrides of one strategy's cells, every task
      mochi: {train.lr: 0.05}           # (two arms that differ in a setting: fp32 / bf16 precision)
    tasks:
      text:                             # a name; `task:` the registered task (default: the name)
        config: configs/text/cpu_simcse.yaml
        set: {train.max_steps: 40}      # --set overrides of every cell of the task
        score: sts_avg                  # optional: the task's held-out default_score
        secondary: [stsb_test]          # optional: further reported scores (default: the other held-out)
        strategy_args:                  # this task's arguments for a strategy, merged into its entries
          mochi: {n_hard: 48, n_pair: 48, n_query: 16}
        strategies: [none, mixcse, mochi]   # optional: the task runs only these (default: all)
        seeds: [1, 2, 3, 4, 5]          # optional: this task's evaluation seeds (default: the spec's)
      vision:
        config: configs/vision/cpu_mocov2_cifar10.yaml
        set: {train.epochs: 24}
        strategy_args:
          mochi: {n_hard: 32, n_pair: 32, n_query: 8}
    tune:                               # optional: equal tuning on the selection score before the seeds
      seeds: [101]
      grid:
        none: {loss.temperature: [0.05, 0.1]}
        mixcse: {mixcse.lam: [0.1, 0.4]}
        mochi: {mochi.n_hard: [16, 32]}

The spec is read by the config loader (:mod:`hardmix.config.loader`), as a task's config is:
:class:`CompareSpec`, :class:`TaskSpec` and :class:`TuneSpec` are its keys (``hardmix config schema compare``
their JSON Schema), and :meth:`CompareSpec.validate` what spans several keys. Every cell's full config is then
built and
validated (the task's own validation, strategies included) before the first run, so a bad key, value,
strategy, score or config file is an error naming it.
"""

from __future__ import annotations

import copy
import itertools
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from hardmix.compare.cell_keys import check_cell_key, check_entry_arguments
from hardmix.compare.launcher_spec import LauncherBlock
from hardmix.compare.spec_types import Axes, Seeds, StrategyEntries, is_strategy
from hardmix.config.loader import build_config, flatten_keys, load_yaml
from hardmix.utils.errors import ConfigError


@dataclass(kw_only=True)
class TaskSpec:
    """One task of a comparison (the mapping's key is its ``name``: a folder name and a table column).

    Attributes:
        task: the registered task (``text``, ``vision``, ...); default: the task's name.
        config: the task's base config file (relative: from the working directory, else the spec's folder).
        set: config overrides of every cell of the task, dotted keys (``train.lr``) or nested mappings.
        score: the compared score (a key of ``results.json`` ``final_scores``); default: the task's held-out
            ``default_score``.
        allow_selection_score: allow comparing the task's selection score (the report labels it as a
            selection score, not held out).
        secondary: further reported scores (default: the task's other held-out scores).
        strategy_args: strategy name -> arguments merged into that strategy's entries for this task (a
            registered name: every list that uses it; a spec's name: that list only).
        strategies: the names of the strategies this task runs (default: every one; the baseline always).
        launcher: this task's ``launcher:`` block, merged over the spec's.
        seeds: this task's evaluation seeds (default: the spec's; cheap cells can have more seeds than
            costly ones).
    """

    name: str = field(default="", metadata={"internal": True})
    task: str | None = None
    config: Path
    set: dict[str, Any] | None = None
    score: str = field(default="", metadata={"min_length": 1})
    allow_selection_score: bool = False
    secondary: list[Annotated[str, {"min_length": 1}]] | None = None
    strategy_args: dict[str, dict[str, Any]] | None = None
    strategies: Annotated[list[str] | None, {"min_items": 1}] = None
    launcher: LauncherBlock = None
    seeds: Seeds | None = None

    def __post_init__(self) -> None:
        self.set = dict(self.set or {})
        self.strategy_args = dict(self.strategy_args or {})
        self.task = self.task or self.name or None

    @property
    def overrides(self) -> list[str]:
        """``set`` as ``key=value`` items for every cell of the task."""
        return [f"{k}={override_value(v)}" for k, v in (self.set or {}).items()]


@dataclass(kw_only=True)
class TuneSpec:
    """Equal tuning before the evaluation seeds: per strategy a grid, run on ``seeds``, scored on the task's
    selection metric only (:mod:`hardmix.compare.tuning`).

    Attributes:
        seeds: the tuning seeds (never the evaluation seeds: their own runs).
        grid: strategy -> key -> values, for every strategy (``{}``: its own arguments); a key is
            ``<entry>.<argument>`` (an argument of the strategy's entry of that registered name, e.g.
            ``mixcse.lam``) or a dotted config key (``loss.temperature``).
        tasks: the tasks tuned (default: every one); the others run the spec's own arguments.
        equal_budget: every strategy's grid must have as many points, so each gets as many runs of as many
            steps.
    """

    seeds: Seeds
    grid: Annotated[dict[str, Axes | None], {"min_items": 1}]
    tasks: Annotated[list[str] | None, {"min_items": 1}] = None
    equal_budget: bool = True

    def __post_init__(self) -> None:
        self.grid = {name: {str(k): list(v) for k, v in (axes or {}).items()}
                     for name, axes in self.grid.items()}


@dataclass(kw_only=True)
class CompareSpec:
    """A comparison: ``seeds`` x ``strategies`` x ``tasks``, each strategy compared with the ``baseline``.

    Attributes:
        seeds: the evaluation seeds; each strategy's cells are paired with the baseline's by seed.
        baseline: the strategy the others are compared with (default: the first).
        strategies: a name for each ``loss.strategies`` list; one list serves every task.
        strategy_set: strategy name -> config overrides (dotted keys) of that strategy's cells in every
            task (two arms that differ in a setting: fp32 / bf16 precision).
        tasks: a name for each task: its config, and what is compared.
        output: the comparison's folder (``--output`` overrides it).
        jobs: cells run at once on this machine (``--jobs`` overrides it).
        tune: equal tuning on the selection score before the evaluation seeds.
        launcher: the resources of each cell's SLURM job (``--launcher slurm``).
        contrasts: strategy -> its control (two strategies other than the baseline): each pair's paired
            difference is reported apart from the verdicts against the baseline, Holm-corrected over the
            contrasts (``summary.json``'s ``contrasts``); what is reported, not what runs.
        auto_precision: task -> the precision its cells run where their config leaves ``train.precision:
            auto``: resolved once, where the comparison first builds the task's cells
            (:mod:`hardmix.compare.precision`), and recorded by ``hardmix compare`` in its copy of the spec
            (``DIR/spec.yaml``), so that every later ``--resume`` or extension, on whatever machine, runs
            that precision. Written by hardmix; a spec may set it to choose.
        arm_differences: what to do where arms differ in more than their strategy (loss direction,
            precision, steps, tuning grid size; :func:`hardmix.compare.summary.arm_differences`):
            ``accept`` (the default) reports the verdicts with each difference named beside the verdict it
            touches; ``equalize`` refuses to report a verdict between arms that differ (make them equal
            in the spec: ``strategy_set``, the strategies' arguments, the grid) and names the differences.
    """

    seeds: Seeds
    baseline: str | None = None
    strategies: Annotated[dict[str, StrategyEntries], {"min_items": 1}]
    strategy_set: dict[str, dict[str, Any]] | None = None
    tasks: Annotated[dict[str, TaskSpec], {"min_items": 1}]
    output: str | None = None
    jobs: int = field(default=1, metadata={"min": 1})
    tune: TuneSpec | None = None
    launcher: LauncherBlock = None
    contrasts: dict[str, str] = field(default_factory=dict)
    auto_precision: dict[str, Literal["fp32", "bf16"]] | None = None
    arm_differences: Literal["accept", "equalize"] = "accept"
    source: Path | None = field(default=None, metadata={"internal": True})
    raw: dict[str, Any] = field(default_factory=dict, metadata={"internal": True})

    def validate(self) -> None:
        """What spans several keys: names, the baseline, each name a key refers to, the tuning seeds."""
        check_names(list(self.strategies), "strategies")
        if self.baseline is None:
            self.baseline = next(iter(self.strategies))
        if self.baseline not in self.strategies:
            raise ConfigError(f"baseline: {self.baseline!r} is not one of the strategies "
                              f"({', '.join(self.strategies)})")
        self.strategy_set = dict(self.strategy_set or {})
        for name, sets in self.strategy_set.items():
            if name not in self.strategies:
                raise ConfigError(f"strategy_set.{name}: not one of the strategies "
                                  f"({', '.join(self.strategies)})")
            for k in sets:
                check_cell_key(str(k), f"strategy_set.{name}")
                if not isinstance(k, str) or "." not in k:
                    raise ConfigError(f"strategy_set.{name}.{k}: expected a dotted config key")
        check_names(list(self.tasks), "tasks")
        for name, task in self.tasks.items():
            key = f"tasks.{name}"
            task.name, task.task = name, task.task or name
            for k in flatten_keys({str(k): v for k, v in (task.set or {}).items()}):  # nested or dotted
                check_cell_key(k, f"{key}.set")
            for strategy_name, arguments in (task.strategy_args or {}).items():
                check_entry_arguments(arguments, f"{key}.strategy_args.{strategy_name}")
            if task.strategies is not None:
                bad = [n for n in task.strategies if n not in self.strategies]
                if bad:
                    raise ConfigError(f"{key}.strategies: {bad[0]!r} is not one of the strategies "
                                      f"({', '.join(self.strategies)})")
                if self.baseline not in task.strategies:
                    raise ConfigError(f"{key}.strategies: the baseline {self.baseline!r} must be among them")
            if task.seeds is None:
                task.seeds = list(self.seeds)
        if self.tune is not None:
            self._validate_tune(self.tune)
        self.auto_precision = dict(self.auto_precision or {})
        for name in self.auto_precision:
            if name not in self.tasks:
                raise ConfigError(f"auto_precision.{name}: not one of the tasks ({', '.join(self.tasks)})")
        others = [s for s in self.strategies if s != self.baseline]
        for name, control in self.contrasts.items():
            if name not in others or control not in others or name == control:
                raise ConfigError(f"contrasts.{name}: a strategy and its control are two strategies other "
                                  f"than the baseline ({', '.join(others)}); got {name!r} and {control!r}")

    def _validate_tune(self, tune: TuneSpec) -> None:
        """The ``tune:`` block against the strategies and tasks; each point's config is validated with the
        cells."""
        grid = {name: axes or {} for name, axes in tune.grid.items()}  # no None left by __post_init__
        for name, axes in grid.items():
            if name not in self.strategies:
                raise ConfigError(f"tune.grid.{name}: not one of the strategies "
                                  f"({', '.join(self.strategies)})")
            for k in axes:
                check_cell_key(k, f"tune.grid.{name}")
                seen: list[Any] = []
                for v in axes[k]:  # 0.1 twice: two folders, twice the runs, one point
                    if any(v == u and isinstance(v, bool) == isinstance(u, bool) for u in seen):
                        raise ConfigError(f"tune.grid.{name}.{k}: the value {v!r} is listed twice; give each "
                                          "value once (a point is run once per tuning seed)")
                    seen.append(v)
                if "." not in k:
                    raise ConfigError(
                        f"tune.grid.{name}.{k}: expected <strategy>.<argument> or a dotted config key"
                    )
                entry = k.split(".", 1)[0]
                names = [e["name"] for e in self.strategies[name]]
                if entry in names:  # an entry's argument: never its name
                    check_entry_arguments({k.split(".", 1)[1]: axes[k]}, f"tune.grid.{name}.{entry}")
                if is_strategy(entry) and entry not in names:
                    raise ConfigError(f"tune.grid.{name}.{k}: {name}'s entries are {', '.join(names)}, "
                                      f"not {entry}")
        missing = [s for s in self.strategies if s not in tune.grid]
        if missing:
            raise ConfigError(
                f"tune.grid: {missing[0]} has no grid; every strategy (the baseline too) is tuned, "
                f"give it one ({missing[0]}: {{}} runs its own arguments)"
            )
        if tune.tasks is not None and any(t not in self.tasks for t in tune.tasks):
            raise ConfigError(f"tune.tasks: expected a list of the spec's tasks ({', '.join(self.tasks)})")
        if tune.equal_budget:
            sizes = {s: grid_size(axes) for s, axes in grid.items()}
            if len(set(sizes.values())) > 1:
                shown = ", ".join(f"{s} {n}" for s, n in sizes.items())
                raise ConfigError(
                    f"tune.grid: the strategies' grids differ in size ({shown} points): give each as many "
                    "points, or set tune.equal_budget: false (the report then shows the unequal budgets)"
                )
        evaluation = set(self.seeds).union(*(t.seeds or [] for t in self.tasks.values()))
        overlap = sorted(set(tune.seeds) & evaluation)
        if overlap:
            raise ConfigError(f"tune.seeds: {overlap[0]} is also an evaluation seed; tuning seeds must be "
                              "their own")

    def strategies_for(self, task: TaskSpec, strategy: str) -> list[dict[str, Any]]:
        """The ``loss.strategies`` list of one cell: the strategy's entries with the task's arguments,
        first those given under the entry's registered name (``mochi``: every list that uses mochi), then
        those given under the spec's name of this strategy (``mochi_ramp``: this list only)."""
        entries = copy.deepcopy(self.strategies[strategy])
        args = task.strategy_args or {}
        for entry in entries:
            entry.update(args.get(entry["name"], {}))
            if strategy != entry["name"]:
                entry.update(args.get(strategy, {}))
        return entries

    def strategy_overrides(self, strategy: str) -> list[str]:
        """``strategy_set``'s overrides of one strategy's cells, as ``key=value`` items."""
        return [f"{k}={override_value(v)}" for k, v in (self.strategy_set or {}).get(strategy, {}).items()]




def override_value(v: Any) -> str:
    """A value as the right-hand side of a ``--set key=value`` override (one line of YAML flow style)."""
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
    """Read a spec's mapping with the config loader (:func:`hardmix.config.build_config`: keys, types,
    names), each task's config file found; cells are validated by :func:`hardmix.compare.grid.build_grid`.
    Errors name the key, and the file (``source``)."""
    where = f"{source}: " if source else ""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}the spec must be a mapping with seeds, baseline, strategies and tasks")
    try:
        spec = build_config(CompareSpec, data)
        for name, task in spec.tasks.items():
            task.config = _resolve_config(str(task.config), source.parent if source else None,
                                          f"tasks.{name}.config")
    except ConfigError as e:
        raise ConfigError(f"{where}{e}") from None
    spec.source, spec.raw = source, copy.deepcopy(data)
    return spec


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def check_names(names: list[Any], key: str) -> None:
    """Names a spec gives its tasks and strategies become folder names (``runs/<task>/<strategy>``), so
    each must be a plain ASCII identifier (a letter or digit, then letters, digits, ``-`` and ``_``: never a
    path, ``..`` or an absolute one) and unique after normalization (case and ``-``/``_`` ignored, as a
    case-insensitive file system would see them); else a ConfigError naming it.

    >>> check_names(["none", "mixcse_single", "SynCo-2"], "strategies")
    >>> check_names(["text", "../../x"], "tasks")
    Traceback (most recent call last):
    ...
    hardmix.utils.errors.ConfigError: tasks: '../../x' is not a plain name (ASCII letters, digits, - ...
    >>> check_names(["mixcse-single", "MixCSE_single"], "strategies")
    Traceback (most recent call last):
    ...
    hardmix.utils.errors.ConfigError: strategies: 'MixCSE_single' and 'mixcse-single' name one folder on a ...
    """
    seen: dict[str, str] = {}
    for name in names:
        if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name):
            raise ConfigError(f"{key}: {name!r} is not a plain name (ASCII letters, digits, - and _; a name "
                              "becomes a folder)")
        folded = name.casefold().replace("-", "_")
        if folded in seen:
            raise ConfigError(f"{key}: {name!r} and {seen[folded]!r} name one folder on a case-insensitive "
                              "file system; rename one")
        seen[folded] = name


def grid_size(axes: dict[str, list[Any]]) -> int:
    """The number of points of a grid (the product of its axes' lengths; 1 for no axis)."""
    n = 1
    for values in axes.values():
        n *= len(values)
    return n



def grid_points(axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every point of a grid, the first axis varying slowest.

    >>> grid_points({"mixcse.lam": [0.1, 0.2], "loss.temperature": [0.05]})
    [{'mixcse.lam': 0.1, 'loss.temperature': 0.05}, {'mixcse.lam': 0.2, 'loss.temperature': 0.05}]
    >>> grid_points({})
    [{}]
    """
    keys = list(axes)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*axes.values())]


def apply_point(
    spec: CompareSpec, task: TaskSpec, strategy: str, point: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[str]]:
    """A cell's ``loss.strategies`` entries and extra ``--set`` items at a grid point: ``<entry>.<arg>``
    sets the argument of the strategy's entries of that registered name, any other key is a config key.
    """
    entries = spec.strategies_for(task, strategy)
    sets = []
    for key, value in point.items():
        prefix, arg = key.split(".", 1)
        hits = [e for e in entries if e["name"] == prefix]
        for e in hits:
            e[arg] = value
        if not hits:
            sets.append(f"{key}={override_value(value)}")
    return entries, sets




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


__all__ = [
    "CompareSpec", "TaskSpec", "TuneSpec", "apply_point", "check_names", "grid_points", "grid_size",
    "load_spec", "override_value", "parse_spec", "select_tasks",
]
