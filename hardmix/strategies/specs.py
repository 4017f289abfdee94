"""``loss.strategies`` as a config holds it: normalized and validated once, for every trainer.

A spec is a strategy name, a mapping ``{name: ..., **arguments}`` or a list of them. Errors are
:class:`~hardmix.errors.ConfigError` carrying the key path of the offending entry, built from the
strategies' :class:`~hardmix.errors.StrategyArgumentError` (never from the text of a message).

Example:
    >>> normalize_strategy_specs("mixcse")
    [{'name': 'mixcse'}]
    >>> build_strategy_specs([{"name": "mochi", "n_hard": 0}])
    Traceback (most recent call last):
    ...
    hardmix.errors.ConfigError: loss.strategies[0].n_hard: must be a positive integer, got 0
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hardmix.errors import ConfigError, StrategyArgumentError
from hardmix.strategies.base import Strategy, check_composition
from hardmix.strategies.schedule import Scheduled, scheduled

_YAML11_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def normalize_strategy_specs(spec: Any, key: str = "loss.strategies") -> list[Any]:
    """A name, a mapping or a list of them -> a list of mappings, each with a string ``name``.

    ``None`` is ``[{"name": "none"}]``; YAML 1.1's exponent strings (``2e-1``) become numbers; strategies
    built already pass through.

    Raises:
        ConfigError: naming ``key[i]`` or ``key[i].name``.
    """
    if spec is None:
        return [{"name": "none"}]
    items = spec if isinstance(spec, (list, tuple)) else [spec]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, (Strategy, Scheduled)):  # built already
            out.append(item)
            continue
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise ConfigError(f"{key}[{i}]: expected a mapping with a name (or a name), "
                              f"got {type(item).__name__} {item!r}")
        if "name" not in item:
            raise ConfigError(f"{key}[{i}].name: missing (one of the registered strategies, "
                              "see `hardmix strategies`)")
        if not isinstance(item["name"], str):
            raise ConfigError(f"{key}[{i}].name: expected a string, got {item['name']!r}")
        out.append({k: float(v) if isinstance(v, str) and _YAML11_FLOAT.match(v.strip()) else v
                    for k, v in item.items()})
    if not out:
        raise ConfigError(f"{key}: empty; use [{{name: none}}] for plain InfoNCE")
    return out


def build_strategy_specs(spec: Any, key: str = "loss.strategies") -> list[Strategy | Scheduled]:
    """Normalize ``spec`` and build every strategy (``none`` included), errors naming the key path.

    Raises:
        ConfigError: ``loss.strategies[i].<argument>: <message>`` for a bad argument or name;
            ``loss.strategies: <message>`` for strategies that do not compose (two estimators, an estimator
            with a reweighting; :func:`hardmix.strategies.base.check_composition`).
    """
    built = []
    for i, item in enumerate(normalize_strategy_specs(spec, key)):
        try:
            built.append(scheduled(item))
        except StrategyArgumentError as e:
            where = f"{key}[{i}].{e.argument}" if e.argument else f"{key}[{i}]"
            raise ConfigError(f"{where}: {e.message}") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{key}[{i}]: {e}") from None
    try:
        check_composition(built)
    except StrategyArgumentError as e:
        raise ConfigError(f"{key}: {e.message}") from None
    return built


def excluded_by_others(strategies: Sequence[Strategy | Scheduled], i: int) -> int:
    """How many of an anchor's negatives the strategies other than ``strategies[i]`` may exclude at most
    (known before training: a top-k filter's k); the pool ``strategies[i]`` draws from is that much smaller
    (exclusions come first, :mod:`hardmix.losses.composition`)."""
    return sum(s.excludes_at_most for j, s in enumerate(strategies) if j != i)


def check_negatives_available(
    strategy: Strategy | Scheduled, available: int, where: str, key: str, excluded: int = 0
) -> None:
    """Refuse, before training, a strategy that needs more valid negatives than the setup gives.

    Args:
        strategy: as built by :func:`build_strategy_specs`.
        available: the fewest valid negatives an anchor will have when the strategy is active.
        where: what gives them, for the message ("the 63 in-batch negatives").
        key: the strategy's key path (``loss.strategies[0]``).
        excluded: negatives the other strategies exclude first (:func:`excluded_by_others`); a strategy
            that needs negatives needs these on top.

    Example:
        >>> [s] = build_strategy_specs([{"name": "mochi", "n_hard": 64, "n_pair": 8, "n_query": 8}])
        >>> try:
        ...     check_negatives_available(s, 63, "63 in-batch negatives", "loss.strategies[0]")
        ... except ValueError as e:
        ...     print(e)
        loss.strategies[0].n_hard: 64 negatives needed per anchor; the setup gives only 63 in-batch negatives
    """
    need = strategy.required_negatives
    if need and excluded:
        need += excluded
    if need > available:
        arg = strategy.negatives_argument or "name"
        also = (f" ({strategy.required_negatives} plus the {excluded} the other strategies exclude first)"
                if need != strategy.required_negatives else "")
        raise ConfigError(f"{key}.{arg}: {need} negatives needed per anchor{also}; the setup gives only "
                          f"{where}")


__all__ = [
    "build_strategy_specs",
    "check_negatives_available",
    "excluded_by_others",
    "normalize_strategy_specs",
]
