"""The typed values of a comparison spec's keys, each parsed (a one-line error naming the key) and described
for the JSON Schema by the config loader (:class:`hardmix.config.loader.Parsed`): :data:`Seeds` (a
comparison's or a task's seeds, a tuning's), :data:`StrategyEntries` (one strategy's ``loss.strategies``
entries) and :data:`Axes` (a tuning grid's).
"""

from __future__ import annotations

from typing import Annotated, Any

from hardmix.config.loader import Parsed
from hardmix.strategies import available_strategies
from hardmix.strategies.base import lookup
from hardmix.strategies.build import strategy_entries
from hardmix.strategies.spec_type import strategy_spec_schema
from hardmix.utils.errors import ConfigError


def parse_seeds(seeds: Any, key: str) -> list[int]:
    """A list of distinct non-negative integer seeds, or a ConfigError naming ``key``."""
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)
    ):
        raise ConfigError(f"{key}: expected a list of non-negative integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{key}: {seeds} repeats a seed")
    return list(seeds)


#: Seeds of a comparison: distinct non-negative integers, at least one.
Seeds = Annotated[list[int], Parsed(parse_seeds, lambda: {
    "type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1, "uniqueItems": True})]


def parse_entries(entries: Any, key: str) -> list[dict[str, Any]]:
    """A strategy's ``loss.strategies`` entries as mappings with a registered ``name`` (built with each
    task's config, when the cells are: :func:`hardmix.compare.grid.build_grid`), else a ConfigError naming
    ``key[i]``."""
    normalized = [e if isinstance(e, dict) else e.config() for e in strategy_entries(entries, key=key)]
    for i, entry in enumerate(normalized):
        if not is_strategy(entry["name"]):  # a built-in name imports no plug-in
            raise ConfigError(f"{key}[{i}].name: unknown strategy {entry['name']!r}; "
                              f"registered: {', '.join(available_strategies())}")
    return normalized


#: One strategy of a comparison: a ``loss.strategies`` spec, its entries as mappings (a ramp may lack what
#: a task's ``strategy_args`` give it).
StrategyEntries = Annotated[list[dict[str, Any]], Parsed(parse_entries,
                                                         lambda: strategy_spec_schema(complete=False))]

#: A tuning grid's axes: a key (``mixcse.lam``, ``loss.temperature``) to its values.
Axes = dict[str, Annotated[list[Any], {"min_items": 1}]]


def is_strategy(name: str) -> bool:
    """Whether ``name`` is a registered strategy (a built-in name imports no plug-in)."""
    return lookup(name) is not None




__all__ = ["Axes", "Seeds", "StrategyEntries", "is_strategy", "parse_entries", "parse_seeds"]
