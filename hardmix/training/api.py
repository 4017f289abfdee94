"""``hardmix.train``: a training run from Python, as ``hardmix train`` runs it from the shell."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hardmix.config.loader import build_config, load_config
from hardmix.training.engine import run_training
from hardmix.training.registry import load_task
from hardmix.training.task import Task


def resolve_task(task: str | type[Task]) -> type[Task]:
    """A task class from its registered name, or the class itself."""
    return load_task(task) if isinstance(task, str) else task


def load_config_for(task: str | type[Task], config: str | os.PathLike[str] | dict[str, Any] | None,
                    overrides: list[str] | dict[str, Any] | None = None) -> Any:
    """The task's validated config from a YAML path or a mapping, with ``--set``-style overrides (a list
    of ``key=value`` strings, or a mapping of dotted keys to values)."""
    cls = resolve_task(task)
    items = _override_items(overrides)
    if isinstance(config, (str, os.PathLike)):
        return load_config(cls.config_class, config, items)
    return build_config(cls.config_class, config, items)


def _override_items(overrides: list[str] | dict[str, Any] | None) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, dict):
        import yaml

        return [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
                for k, v in overrides.items()]
    return list(overrides)


def train(task: str | type[Task], config: str | os.PathLike[str] | dict[str, Any] | None = None,
          overrides: list[str] | dict[str, Any] | None = None, output: str | os.PathLike[str] | None = None,
          resume: bool = False) -> dict[str, Any]:
    """Train and return the results record (the content of ``RUN/results.json``).

    Args:
        task: a registered task name (``"text"``, ``"vision"``) or a Task class.
        config: a YAML file, a mapping of the config's sections, or None for the task's defaults.
        overrides: ``["train.max_steps=100", ...]`` or ``{"train.max_steps": 100, ...}``.
        output: the run folder (default: the config's ``output``).
        resume: continue the run in ``output``.

    Example (not run here: it trains)::

        import hardmix
        results = hardmix.train("text", "configs/text/cpu_mixcse.yaml",
                                overrides={"train.max_steps": 20}, output="runs/try")
        results["best_score"], results["final_scores"]
    """
    cls = resolve_task(task)
    cfg = load_config_for(cls, config, overrides)
    return run_training(cls, cfg, Path(output) if output is not None else None, resume)


__all__ = ["load_config_for", "resolve_task", "train"]
