"""``hardmix config``: what a config may hold and what it resolves to.

``hardmix config schema text|vision|compare`` prints the JSON Schema of a task's config or of a comparison
spec (:mod:`hardmix.config.schema`, from the dataclasses the loader reads), for an editor: with the YAML
language server, a first line ``# yaml-language-server: $schema=text.schema.json`` completes and checks the
file as it is typed. ``hardmix config show CONFIG [--set KEY=VALUE ...]`` prints the config as the loader
resolves it (every default filled in, ``--set`` applied, strategies with every argument), each value followed
by its
origin: ``# default``, ``# file`` or ``# --set``. What a config is (a comparison spec, or which task's) is
read from its keys, or given with ``--task``; tasks are found through the ``hardmix.tasks`` entry points.

Example:
    >>> print(render({"train": {"lr": 0.1, "seed": 0}}, {"train": {"lr": 0.1}}, {}))
    train:
      lr: 0.1  # file
      seed: 0  # default
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import yaml

from hardmix.config.loader import apply_overrides, load_yaml
from hardmix.utils.errors import ConfigError

#: What ``hardmix config`` knows besides the registered tasks.
COMPARE = "compare"


def config_class(kind: str) -> type:
    """The config dataclass of a registered task, or of a comparison spec (``compare``)."""
    if kind == COMPARE:
        from hardmix.compare.spec import CompareSpec

        return CompareSpec
    from hardmix.training.registry import load_task

    return load_task(kind).config_class


def schema_of(kind: str) -> dict[str, Any]:
    """The JSON Schema of ``kind``'s config (a task's name, or ``compare``)."""
    from hardmix.config.schema import config_schema

    title = f"the config of hardmix train {kind}"
    return config_schema(config_class(kind), title="a spec of hardmix compare" if kind == COMPARE else title)


def kind_of(data: dict[str, Any], overrides: list[str], path: str | os.PathLike[str]) -> str:
    """What a config is: a comparison spec (it has ``tasks``), else the one registered task whose config
    it is; a config several tasks read alike, or none, is an error saying to name it with ``--task``."""
    if "tasks" in data:
        return COMPARE
    from hardmix.config.loader import build_config
    from hardmix.training.registry import available_tasks

    fits, errors = [], []
    for name in available_tasks():
        try:
            build_config(config_class(name), data, overrides)
            fits.append(name)
        except ConfigError as e:
            errors.append(f"{name}: {e}")
    if len(fits) == 1:
        return fits[0]
    if fits:
        raise ConfigError(f"{path}: a config of {' and '.join(fits)} alike; name its task with --task")
    raise ConfigError(f"{path}: not a config of any task ({'; '.join(errors)}); name its task with --task")


def resolved(kind: str, path: str | os.PathLike[str], overrides: list[str]) -> dict[str, Any]:
    """The config as plain data, as the loader resolves it (errors name the file and the key), once it
    passes the validation of the command it is for, before that command's work: a comparison spec's every
    cell and tuning point (as ``compare --print-commands`` validates them: their configs, not their data),
    a task config's selection score."""
    if kind == COMPARE:
        from pathlib import Path

        from hardmix.compare.grid import build_grid
        from hardmix.compare.spec import parse_spec
        from hardmix.compare.tuning import first_points, tuning_cells
        from hardmix.config.schema import jsonable

        spec = parse_spec(apply_overrides(load_yaml(path), overrides), source=Path(path).resolve())
        out = Path(spec.output or Path("runs/compare") / Path(path).stem)
        if spec.tune:
            tuning_cells(spec, out, check_data=False)
        build_grid(spec, out, check_data=False, points=first_points(spec))
        return jsonable(spec)
    from hardmix.config.loader import load_config
    from hardmix.training.config import plain_config
    from hardmix.training.registry import load_task

    cfg: Any = load_config(config_class(kind), path, overrides)
    load_task(kind).about(cfg).selection_metric()  # a score the task cannot select on: refused by train too
    return plain_config(cfg)


def origin(path: tuple[str, ...], file: dict[str, Any], given: dict[str, Any]) -> str:
    """Where a value comes from: ``--set`` (``given``, the overrides as a mapping), ``file`` or ``default``.
    A value given at or above its key (``loss.strategies: mochi``, a whole section) counts.

    Example:
        >>> origin(("loss", "temperature"), {"loss": {"temperature": 0.1}}, {"loss": {"temperature": 0.2}})
        '--set'
    """
    for source, name in ((given, "--set"), (file, "file")):
        if _names(source, path):
            return name
    return "default"


def _names(data: Any, path: tuple[str, ...]) -> bool:
    """Whether a mapping gives the value of ``path``, itself or a value above it."""
    for part in path:
        if not isinstance(data, dict):
            return True
        if part not in data:
            return False
        data = data[part]
    return True


def _flow(value: Any) -> str:
    """A value as one line of YAML."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, sort_keys=False).strip()
    return text.removesuffix("...").strip()


def render(plain: dict[str, Any], file: dict[str, Any], given: dict[str, Any]) -> str:
    """The resolved config as YAML, each value followed by a comment naming its :func:`origin`."""
    rows: list[tuple[str, str | None]] = []

    def walk(mapping: dict[str, Any], path: tuple[str, ...]) -> None:
        indent = "  " * len(path)
        for key, value in mapping.items():
            if isinstance(value, dict) and value:
                rows.append((f"{indent}{_flow(key)}:", None))
                walk(value, (*path, key))
            else:
                rows.append((f"{indent}{_flow(key)}: {_flow(value)}", origin((*path, key), file, given)))

    walk(plain, ())
    width = min(max((len(text) for text, where in rows if where), default=0), 72)
    return "\n".join(text if where is None else f"{text.ljust(width)}  # {where}" for text, where in rows)


def show(path: str | os.PathLike[str], overrides: list[str], kind: str | None = None) -> str:
    """``hardmix config show``'s output: a header line, then :func:`render`."""
    file = load_yaml(path)
    kind = kind or kind_of(file, overrides, path)
    plain = resolved(kind, path, overrides)
    given = apply_overrides({}, overrides)
    what = "comparison spec" if kind == COMPARE else f"{kind} config"
    header = f"# {path}: a {what} as hardmix reads it; each value's origin: default, file or --set"
    return header + "\n" + render(plain, file, given)


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(schema_of(args.kind), indent=2))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    print(show(args.config, list(args.overrides or []), args.task))
    return 0


__all__ = ["COMPARE", "config_class", "kind_of", "origin", "render", "resolved", "schema_of", "show"]
