"""The config keys a comparison cannot give its cells (:data:`NOT_IN_A_CELL`): refused where the spec names
them (a task's ``set``, ``strategy_set``, a tuning grid: :func:`check_cell_key`) and again on each cell's
final config, wherever the value came from (:func:`check_cell_config`); and the arguments a spec merges into
a strategy's entries, which never change which strategy a label names (:func:`check_entry_arguments`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hardmix.utils.errors import ConfigError

# Config keys a comparison cannot set for its cells (in a task's ``set``, ``strategy_set`` or a tuning grid).
NOT_IN_A_CELL = {
    "output": "the comparison gives every cell its own folder under --output",
    "train.stop_after_steps": "it stops a cell short of its budget, which a comparison cannot pair",
    "train.seed": "the comparison gives each cell its seed, from seeds (tuning points: from tune.seeds)",
    "loss.strategies": "the comparison gives each cell its strategies, from strategies (their arguments: "
                       "strategy_args, tune.grid)",
}


def check_cell_key(key: str, where: str) -> None:
    """Refuse a key a comparison's cell cannot be given (:data:`NOT_IN_A_CELL`, or a key inside one),
    naming where."""
    for taken, why in NOT_IN_A_CELL.items():
        if key == taken or key.startswith((f"{taken}.", f"{taken}[")):
            raise ConfigError(f"{where}.{key}: not a key a comparison can set ({why})")


# Keys of NOT_IN_A_CELL whose value the comparison gives each cell itself (its command's --output, its
# --set of the seed and of the strategies, last): the final config holds the comparison's own value.
GIVEN_TO_A_CELL = ("output", "train.seed", "loss.strategies")


def check_cell_config(cfg: Any, seed: int, names: list[str], config_file: Path,
                      items: list[tuple[str, str]], where: str) -> None:
    """The keys a cell may not carry, checked on its final config (the task's config file, ``set``,
    ``strategy_set``, ``strategy_args`` and the tuning point merged), not on the spec's text: a key of
    :data:`NOT_IN_A_CELL` the comparison does not give (``train.stop_after_steps``) at its default, the
    cell's own seed, and the strategies its label names; else a one-line ConfigError naming the cell, the
    key and where it was given (the task's config file, or the spec's entry).

    Args:
        cfg: the cell's validated config object.
        seed: the cell's seed.
        names: the registered names of its label's entries, in order.
        config_file: the task's config file.
        items: the cell's ``--set`` items before the comparison's own, each ``(key=value, the spec's key
            that gave it)``.
        where: the cell, for the message (``SPEC: tasks.text with strategy mixcse``).
    """
    for key, why in NOT_IN_A_CELL.items():
        if key in GIVEN_TO_A_CELL:
            continue
        value, default = _value_and_default(cfg, key)
        if value != default:
            raise ConfigError(f"{where}: {key}: {value!r} {_given_by(key, config_file, items)}: not a key a "
                              f"comparison can set ({why})")
    got_seed = getattr(getattr(cfg, "train", None), "seed", seed)
    if got_seed != seed:
        raise ConfigError(f"{where}: train.seed: {got_seed!r} {_given_by('train.seed', config_file, items)}, "
                          f"not the cell's seed {seed}")
    built = [getattr(s, "name", s) for s in getattr(getattr(cfg, "loss", None), "strategies", None) or []]
    if built and built != names:
        raise ConfigError(f"{where}: loss.strategies: {', '.join(map(str, built))}, not the strategies its "
                          f"label names ({', '.join(names)}): an entry cannot change which strategy a label "
                          "names")


def _value_and_default(cfg: Any, key: str) -> tuple[Any, Any]:
    """A dotted key's value in a config object and its dataclass field's default (both None where the
    config has no such key)."""
    *sections, last = key.split(".")
    obj = cfg
    for part in sections:
        obj = getattr(obj, part, None)
    if not dataclasses.is_dataclass(obj):
        return None, None
    f = {f.name: f for f in dataclasses.fields(obj)}.get(last)
    if f is None:
        return None, None
    default = f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
    return getattr(obj, last), default


def _given_by(key: str, config_file: Path, items: list[tuple[str, str]]) -> str:
    """Where a cell's value of ``key`` came from: the last ``--set`` item that sets it or a section holding
    it (naming the spec's key), else the task's config file."""
    for item, origin in reversed(items):
        k = item.split("=", 1)[0]
        if key == k or key.startswith(k + "."):
            return f"given by {origin} ({item})"
    return f"in the task's config file {config_file}"


def check_entry_arguments(arguments: dict[str, Any], where: str) -> None:
    """Refuse ``name`` among the arguments a spec merges into a strategy's entries (a task's
    ``strategy_args``, a tuning grid's ``<entry>.<argument>``): an entry cannot change which strategy its
    label names (the cells of ``mixcse`` would train mochi, reported as mixcse)."""
    if "name" in arguments:
        raise ConfigError(f"{where}.name: an entry's arguments cannot change which strategy a label names "
                          "(give the strategy a label of its own under strategies)")



__all__ = ["GIVEN_TO_A_CELL", "NOT_IN_A_CELL", "check_cell_config", "check_cell_key", "check_entry_arguments"]
