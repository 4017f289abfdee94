"""From a config's ``loss.strategies`` to the loss's ``list[Strategy]``: the one way, once per run.

A spec is a strategy name, a mapping ``{name: ..., **arguments}`` or a list of them. An argument given as
a mapping is a ramp and ``warmup_steps`` / ``warmup_epochs`` a warm-up (:mod:`hardmix.strategies.schedule`):
such a strategy is wrapped in :class:`~hardmix.strategies.schedule.Scheduled`, itself a Strategy. The
trainers validate their config with :func:`build_strategies` and hand the list to
:class:`~hardmix.losses.ContrastiveLoss` as it is; :meth:`BuiltStrategies.check_setup` says, where a task
knows its negatives, whether they suffice. Errors are :class:`~hardmix.utils.errors.ConfigError` naming
the key path (``loss.strategies[0].n_hard``), built from the strategies'
:class:`~hardmix.utils.errors.StrategyArgumentError`.

Example:
    >>> [mochi] = build_strategies([{"name": "mochi", "n_hard": 64, "warmup_steps": 10}])
    >>> mochi.name, mochi.final.n_hard, mochi.at(9) is None
    ('mochi', 64, True)
    >>> build_strategies([{"name": "mochi", "n_hard": 0}])
    Traceback (most recent call last):
    ...
    hardmix.utils.errors.ConfigError: loss.strategies[0].n_hard: must be a positive integer, got 0
"""

from __future__ import annotations

from typing import Any

from hardmix.config.loader import YAML11_FLOAT
from hardmix.config.old_keys import OLD_KEYS, STRATEGY_ARGUMENT
from hardmix.strategies.base import (
    Strategy,
    available_strategies,
    broken_plugins,
    check_hook_shapes,
    strategy_classes,
)
from hardmix.strategies.schedule import Scheduled, check_warmup, parse_ramp
from hardmix.utils.errors import ConfigError, StrategyArgumentError


def strategy_entries(spec: Any, key: str = "loss.strategies") -> list[dict[str, Any] | Strategy]:
    """A spec as a list of mappings, each with a string ``name`` (``None``: ``[{"name": "none"}]``; YAML
    1.1's exponent strings such as ``2e-1`` as numbers; a strategy built already as it is), else a
    ConfigError naming ``key[i]``.

    >>> strategy_entries("mixcse")
    [{'name': 'mixcse'}]
    """
    if spec is None:
        return [{"name": "none"}]
    out: list[dict[str, Any] | Strategy] = []
    for i, item in enumerate(spec if isinstance(spec, (list, tuple)) else [spec]):
        if isinstance(item, Strategy):
            out.append(item)
            continue
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise ConfigError(f"{key}[{i}]: expected a mapping with a name (or a name), "
                              f"got {type(item).__name__} {item!r}")
        if not isinstance(item.get("name"), str):
            raise ConfigError(f"{key}[{i}].name: " + ("missing (one of the registered strategies, see "
                                                       "`hardmix strategies`)" if "name" not in item else
                                                       f"expected a string, got {item['name']!r}"))
        out.append({k: float(v) if isinstance(v, str) and YAML11_FLOAT.match(v.strip()) else v
                    for k, v in item.items()})
    if not out:
        raise ConfigError(f"{key}: empty; use [{{name: none}}] for plain InfoNCE")
    return out


class BuiltStrategies(list):
    """A list :func:`build_strategies` built and checked to compose: handed down as it is (a config's
    section, the loss) and never checked again. The list checks itself: how its strategies compose
    (:meth:`check_composition`) and, where a task knows its negatives, whether they suffice
    (:meth:`check_setup`)."""

    def check_composition(self) -> None:
        """Refuse the combinations that are not defined: two estimators; an estimator with a reweighting;
        and a strategy that is not built in whose hooks have the shape of an older hardmix
        (:func:`~hardmix.strategies.base.check_hook_shapes`: the loss would take its numbers wrongly)."""
        for s in self:
            cls = type(s.final if isinstance(s, Scheduled) else s)
            if not cls.builtin():
                try:
                    check_hook_shapes(cls)
                except ValueError as e:
                    raise StrategyArgumentError("name", str(e)) from None
        estimators = [s.name for s in self if "estimator" in s.kinds()]
        if len(estimators) > 1:
            raise StrategyArgumentError(
                "name", f"{' and '.join(estimators)} both replace the negative term of the loss; keep one"
            )
        weighting = [s.name for s in self if "reweight" in s.kinds()]
        if estimators and weighting:
            raise StrategyArgumentError(
                "name",
                f"{estimators[0]} is an estimator that weights the negatives itself; it does not compose "
                f"with the reweighting of {', '.join(weighting)}",
            )

    def check_setup(self, negatives: int, where: str, key: str = "loss.strategies", queue_size: int = 0,
                    keys_per_step: int = 0) -> None:
        """Refuse, before training, a strategy that needs more valid negatives per anchor than the task
        gives.

        Args:
            negatives: the fewest valid negatives an anchor has (``where`` says what gives them).
            where: what gives them, for the message ("the 63 in-batch negatives of ...").
            key: the strategies' key path.
            queue_size, keys_per_step: a queue beside the in-batch negatives and the keys it gains a step: a
                strategy that starts after a warm-up finds what the queue holds by then.

        A strategy's pool is smaller by what the others may exclude first (a top-k filter's k), so those
        count on top of what it needs.

        Example:
            >>> strategies = build_strategies([{"name": "mochi", "n_hard": 64}])
            >>> try:
            ...     strategies.check_setup(63, "63 in-batch negatives")
            ... except ConfigError as e:
            ...     print(e)  # doctest: +ELLIPSIS
            loss.strategies[0].n_hard: 64 negatives needed per anchor; the setup gives only 63 in-batch ...
        """
        for i, s in enumerate(self):
            need = s.required_negatives
            excluded = sum(o.excludes_at_most for j, o in enumerate(self) if j != i) if need else 0
            queued = min(queue_size, (getattr(s, "warmup_steps", 0) or 0) * keys_per_step)
            if need + excluded > negatives + queued:
                also = f" ({need} plus the {excluded} the other strategies exclude first)" if excluded else ""
                gives = where + (f" plus the {queued} queued by step warmup_steps" if queue_size else "")
                raise ConfigError(f"{key}[{i}].{s.negatives_argument or 'name'}: {need + excluded} negatives "
                                  f"needed per anchor{also}; the setup gives only {gives}")


def build_strategies(spec: Any, key: str = "loss.strategies") -> BuiltStrategies:
    """Every strategy of ``spec`` built (``none`` included; a strategy built already passes through), and
    checked to compose (:meth:`BuiltStrategies.check_composition`), as a :class:`BuiltStrategies`; one
    given as it is.

    Raises:
        ConfigError: ``<key>[i].<argument>: <message>`` for a bad name or argument, ``<key>: <message>``
            for strategies that do not compose.
    """
    if isinstance(spec, BuiltStrategies):
        return spec  # built and checked once
    classes, built = strategy_classes(), []
    for i, entry in enumerate(strategy_entries(spec, key)):
        if isinstance(entry, Strategy):
            built.append(entry)
            continue
        try:
            built.append(_build(entry, classes))
        except StrategyArgumentError as e:
            raise ConfigError(f"{key}[{i}].{e.argument}: {e.message}" if e.argument else
                              f"{key}[{i}]: {e.message}") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{key}[{i}]: {e}") from None
    checked = BuiltStrategies(built)
    try:
        checked.check_composition()
    except StrategyArgumentError as e:
        raise ConfigError(f"{key}: {e.message}") from None
    return checked


def _build(entry: dict[str, Any], classes: dict[str, type[Strategy]]) -> Strategy:
    """One entry's strategy (its schedule around it, if any), else a StrategyArgumentError naming the
    argument. A built-in name imports no plug-in (:func:`~hardmix.strategies.base.strategy_classes`)."""
    name, arguments = entry.pop("name"), entry
    try:
        cls = classes[name]  # the one lookup of a strategy by name
    except KeyError:
        cls = None
    if cls is None:
        why = broken_plugins().get(name)
        raise StrategyArgumentError("name", f"strategy {name!r} is a broken plug-in: {why}" if why else
                                    f"unknown strategy {name!r}; registered: "
                                    f"{', '.join(available_strategies())}")
    own = {f.name for f in cls.params()}
    old = sorted(a for a in set(arguments) - own if STRATEGY_ARGUMENT + a in OLD_KEYS)
    if old:
        raise StrategyArgumentError(old[0], OLD_KEYS[STRATEGY_ARGUMENT + old[0]])
    warmup = check_warmup(arguments.pop("warmup_steps", 0), arguments.pop("warmup_epochs", None))
    ramps = {k: parse_ramp(k, v) for k, v in arguments.items() if isinstance(v, dict)}
    unknown = sorted(set(arguments) - own)
    if unknown:
        raise StrategyArgumentError(unknown[0], f"unknown argument of strategy {name} (arguments: "
                                                f"{', '.join(sorted(own))})")
    final = cls(**{**arguments, **{k: r.end for k, r in ramps.items()}})
    return Scheduled(final, ramps, *warmup) if ramps or warmup != (0, None) else final


__all__ = ["BuiltStrategies", "build_strategies", "strategy_entries"]
