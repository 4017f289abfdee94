"""``train.precision: auto`` resolved once for all the cells of a comparison's task.

``auto`` runs bf16 only where the machine computes it natively and the task's bf16 was shown to give fp32's
answers for the run's strategies (:meth:`hardmix.training.task.ConfigFacts.auto_bf16`). Resolved cell by cell,
a comparison of a shown strategy against one not shown would pit bf16 against fp32, and its differences
would measure the precision too. So a task whose config leaves ``auto`` runs every cell, tuning cells
included, in the one precision that every strategy of the task may use: bf16 only if it holds for each.

The machine's part of that answer is resolved once per comparison: ``hardmix compare`` records it in its
copy of the spec (``DIR/spec.yaml``'s ``auto_precision``, :func:`cell_precision`), and a ``--resume`` or an
extension, here or on another machine, runs the recorded precision instead of resolving it again; a
strategy added since whose bf16 was not shown is refused in a comparison recorded in bf16.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import torch

from hardmix.compare.spec import CompareSpec, TaskSpec, override_value
from hardmix.training import runtime
from hardmix.training.api import load_config_for
from hardmix.training.task import Task
from hardmix.utils.errors import ConfigError


def task_precision(spec: CompareSpec, task: TaskSpec, task_cls: type[Task], cfg: Any) -> str:
    """The precision of every cell of ``task`` (``fp32`` or ``bf16``; ``cfg``: one cell's config,
    which names ``auto``): bf16 where this machine computes it natively and every strategy of the task is
    one its bf16 was shown for (resolved once per spec and task)."""
    names = task.strategies or list(spec.strategies)
    key = repr((task.name, str(task.config), task.overrides, [(s, spec.strategies_for(task, s),
               spec.strategy_overrides(s)) for s in names], runtime.cpu_bf16_flags(), cfg.train.device))
    if key not in _RESOLVED:
        _RESOLVED[key] = _resolve(spec, task, task_cls, cfg)
    return _RESOLVED[key]


def cell_precision(spec: CompareSpec, task: TaskSpec, task_cls: type[Task], cfg: Any) -> str:
    """The precision of ``task``'s cells whose config (``cfg``) names ``auto``: the one recorded in
    ``spec.auto_precision`` (the comparison's spec copy), else :func:`task_precision`'s, then recorded there
    for ``hardmix compare`` to write into its spec copy.

    Raises:
        ConfigError: the recorded precision is bf16 and a strategy of the task is not one its bf16 was
            shown for (added to the comparison since, or recorded by hand).
    """
    recorded: str | None = (spec.auto_precision or {}).get(task.name)
    if recorded is None:
        recorded = task_precision(spec, task, task_cls, cfg)
        resolved = cast(Literal["fp32", "bf16"], recorded)  # "auto" resolved (choose_precision)
        spec.auto_precision = {**(spec.auto_precision or {}), task.name: resolved}
    elif recorded == "bf16" and not _shown(spec, task, task_cls):
        raise ConfigError(
            f"auto_precision.{task.name}: this comparison's {task.name} cells run bf16 (recorded in its spec "
            f"copy), but not every strategy of the task is one whose bf16 was shown to give fp32's answers "
            f"({task_cls.name}: {', '.join(task_cls.bf16_shown_for) or 'none'}); compare the others in a new "
            "comparison, or set train.precision in the task's set")
    return recorded


def _shown(spec: CompareSpec, task: TaskSpec, task_cls: type[Task]) -> bool:
    """Whether every strategy of ``task`` is one its bf16 was shown for (the machine aside)."""
    key = repr((task.name, str(task.config), task.overrides, [(s, spec.strategies_for(task, s),
               spec.strategy_overrides(s)) for s in task.strategies or spec.strategies]))
    if key not in _SHOWN:
        _SHOWN[key] = all(
            task_cls.about(load_config_for(task_cls, task.config, [
                *task.overrides, *spec.strategy_overrides(s),
                f"loss.strategies={override_value(spec.strategies_for(task, s))}"])).auto_bf16()
            for s in task.strategies or spec.strategies
        )
    return _SHOWN[key]


def _resolve(spec: CompareSpec, task: TaskSpec, task_cls: type[Task], cfg: Any) -> str:
    shown = _shown(spec, task, task_cls)
    want = cfg.train.device
    cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
    return runtime.choose_precision("auto", torch.device("cuda" if cuda else "cpu"), task=task_cls.name,
                            auto_bf16=shown)[0]


_RESOLVED: dict[str, str] = {}
_SHOWN: dict[str, bool] = {}


__all__ = ["cell_precision", "task_precision"]
