"""A strategy spec as a config type: ``loss.strategies``' :data:`Strategies` and the JSON Schema of a spec.

A spec is a strategy name, a mapping ``{name: ..., **arguments}`` or a list of them (null: plain InfoNCE);
an argument may be a ramp ``{start, end, steps | epochs, shape}`` and any entry may wait ``warmup_steps``
or ``warmup_epochs`` (:mod:`hardmix.strategies.schedule`). The schema is built from the registry, so a
plug-in's strategy (entry points ``hardmix.strategies``) is completed and checked like a built-in.

Example:
    >>> mochi = next(s for s in strategy_spec_schema()["anyOf"][0]["anyOf"][1:]
    ...              if s["properties"]["name"]["const"] == "mochi")
    >>> mochi["properties"]["n_hard"]["default"], mochi["additionalProperties"]
    (1024, False)
"""

from __future__ import annotations

import inspect
import typing
from typing import Annotated, Any

from hardmix.config.loader import Parsed, unwrap
from hardmix.config.schema import jsonable, type_schema
from hardmix.strategies.base import Strategy, registry
from hardmix.strategies.build import BuiltStrategies, build_strategies
from hardmix.strategies.schedule import RAMP_KEYS, SHAPES

#: An argument given as a ramp (:func:`hardmix.strategies.schedule.parse_ramp`).
RAMP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "a ramp from start to end over steps or epochs after the warm-up",
    "properties": {
        "start": {"type": "number"},
        "end": {"type": "number"},
        "steps": {"type": "integer", "minimum": 1},
        "epochs": {"type": "number", "exclusiveMinimum": 0},
        "shape": {"enum": list(SHAPES), "default": "linear"},
    },
    "required": ["start", "end"],
    "oneOf": [{"required": ["steps"]}, {"required": ["epochs"]}],
    "additionalProperties": False,
}
assert set(RAMP_SCHEMA["properties"]) == set(RAMP_KEYS)

#: The warm-up any entry may have (:func:`hardmix.strategies.schedule.check_warmup`).
WARMUP_SCHEMA: dict[str, Any] = {
    "warmup_steps": {"type": "integer", "minimum": 0, "default": 0,
                     "description": "optimizer steps before the strategy acts"},
    "warmup_epochs": {"type": "number", "minimum": 0,
                      "description": "epochs before the strategy acts (instead of warmup_steps)"},
}


def entry_schema(cls: type[Strategy], complete: bool = True) -> dict[str, Any]:
    """The schema of one entry of a registered strategy: its name, its arguments (numbers may ramp) and a
    warm-up, no other key; ``complete=False``: a ramp may lack keys (a comparison's entry, which each task's
    ``strategy_args`` completes)."""
    ramp = RAMP_SCHEMA if complete else {k: v for k, v in RAMP_SCHEMA.items() if k not in ("required",
                                                                                          "oneOf")}
    hints = typing.get_type_hints(cls, include_extras=True)
    summary = " ".join([*(inspect.getdoc(cls) or "").splitlines()[:1], f"({cls.paper})" if cls.paper else ""])
    properties: dict[str, Any] = {"name": {"const": cls.name, "description": summary.strip()}}
    for f in cls.params():
        schema = type_schema(hints[f.name])
        if unwrap(hints[f.name])[0] in (int, float, int | None, float | None):
            schema = {"anyOf": [schema, ramp]}
        schema.update(description=f.metadata.get("help", ""), default=jsonable(f.default))
        properties[f.name] = schema
    properties.update(WARMUP_SCHEMA)
    return {"type": "object", "title": cls.name, "properties": properties, "required": ["name"],
            "additionalProperties": False}


def strategy_spec_schema(complete: bool = True) -> dict[str, Any]:
    """The schema of a spec: a registered name, an entry, a non-empty list of them, or null (plain
    InfoNCE); ``complete``: see :func:`entry_schema`."""
    strategies = registry()
    one = {"anyOf": [{"enum": sorted(strategies), "description": "a registered strategy (`hardmix "
                                                                 "strategies`)"},
                     *(entry_schema(strategies[name], complete) for name in sorted(strategies))]}
    return {"anyOf": [one, {"type": "array", "items": one, "minItems": 1}, {"type": "null"}],
            "description": "strategies: a name, {name: ..., **arguments} or a list of them (`hardmix "
                           "strategies` lists them)"}


#: ``loss.strategies``: the list the loss uses, built from its spec once, when the config is read
#: (:func:`hardmix.strategies.build.build_strategies`; errors name ``loss.strategies[i].<argument>``).
Strategies = Annotated[BuiltStrategies, Parsed(build_strategies, strategy_spec_schema)]

__all__ = ["RAMP_SCHEMA", "Strategies", "entry_schema", "strategy_spec_schema"]
