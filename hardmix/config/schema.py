"""The JSON Schema of a config dataclass: what ``hardmix config schema text|vision|compare`` prints, for an
editor (the YAML language server) to complete and check a config as it is typed.

It is generated from the dataclasses the loader reads (:mod:`hardmix.config.loader`), so the two say one
thing: each field's type, its range (``min``, ``max``, ``gt``, ``lt``, ``choices``, ``min_items``,
``min_length``), its default, and its help, from the field's ``metadata["help"]`` or the ``Attributes:``
section of its class's docstring (a base class's, for a field the subclass does not describe). A type that
reads itself (:class:`hardmix.config.loader.Parsed`) gives its own schema. What spans several keys
(``validate()``) only the loader checks: ``docs/training.md``, "What only the loader checks", lists it. The
schema is draft 7, the draft the YAML language server reads best. It describes the YAML 1.2 reading of a file,
the editors' (PyYAML reads ``3e-5`` as a string, which the loader then reads as the number).

Example:
    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Train:
    ...     '''Attributes:
    ...         lr: the learning rate.
    ...     '''
    ...     lr: float = field(default=0.1, metadata={"gt": 0.0})
    >>> config_schema(Train)["properties"]["lr"]
    {'type': 'number', 'exclusiveMinimum': 0.0, 'description': 'the learning rate.', 'default': 0.1}
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from hardmix.config.loader import check_range, config_fields, config_hints, unwrap
from hardmix.utils.errors import ConfigError

#: The draft the schemas declare.
DRAFT = "http://json-schema.org/draft-07/schema#"

_RANGES = {"min": "minimum", "max": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def config_schema(cls: type, title: str | None = None) -> dict[str, Any]:
    """The whole JSON Schema document of the config dataclass ``cls``."""
    return {"$schema": DRAFT, **dataclass_schema(cls), **({"title": title} if title else {})}


def dataclass_schema(cls: type) -> dict[str, Any]:
    """An object with the config keys of ``cls`` (:func:`hardmix.config.config_fields`), none other."""
    hints, helps = config_hints(cls), field_help(cls)
    properties: dict[str, Any] = {}
    required = []
    for f in config_fields(cls):
        schema = type_schema(hints[f.name], f.metadata)
        help_text = f.metadata.get("help") or helps.get(f.name)
        if help_text:
            schema["description"] = help_text
        default = field_default(f)
        if default is dataclasses.MISSING:
            required.append(f.name)
        elif _satisfies(default, f.metadata):
            schema["default"] = jsonable(default)
        properties[f.name] = schema
    out: dict[str, Any] = {"type": "object", "title": cls.__name__}
    summary = _summary(cls)
    if summary:
        out["description"] = summary
    out.update(properties=properties, additionalProperties=False)
    if required:
        out["required"] = required
    return out


def type_schema(tp: Any, checks: typing.Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of the values the loader reads for the annotation ``tp`` with ``checks`` (a field's
    metadata).

    Example:
        >>> type_schema(int | None, {"min": 1})
        {'anyOf': [{'type': 'integer', 'minimum': 1}, {'type': 'null'}]}
        >>> type_schema(tuple[float, float])
        {'type': 'array', 'items': [{'type': 'number'}, {'type': 'number'}], 'minItems': 2, 'maxItems': 2}
    """
    base, own, parsed = unwrap(tp)
    checks = {**own, **(checks or {})}
    if parsed is not None:
        return parsed.schema()
    origin = get_origin(base)
    if base is Any:
        return {}
    if origin in (Union, types.UnionType):
        return {"anyOf": [type_schema(a, None if a is type(None) else checks) for a in get_args(base)]}
    if origin is Literal:
        return {"enum": list(get_args(base))}
    out: dict[str, Any]
    if origin in (list, tuple):
        args = get_args(base)
        if origin is tuple and args and args[-1] is not Ellipsis:
            out = {"type": "array", "items": [type_schema(a) for a in args], "minItems": len(args),
                   "maxItems": len(args)}
        else:
            out = {"type": "array", "items": type_schema(args[0]) if args else {}}
    elif origin is dict:
        args = get_args(base)
        out = {"type": "object", "additionalProperties": type_schema(args[1]) if args else {}}
    elif isinstance(base, type) and dataclasses.is_dataclass(base):
        out = dataclass_schema(base)
    elif base is bool:
        out = {"type": "boolean"}
    elif base is int:
        out = {"type": "integer"}
    elif base is float:
        out = {"type": "number"}
    elif base is str or base is Path:
        out = {"type": "string"}
    elif base is type(None):
        return {"type": "null"}
    else:
        raise TypeError(f"no JSON Schema for the config type {base!r}")
    return {**out, **_checks_schema(checks, out.get("type"))}


def _checks_schema(checks: typing.Mapping[str, Any], kind: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "choices" in checks:
        out["enum"] = list(checks["choices"])
    for name, keyword in _RANGES.items():
        if name in checks and kind in ("integer", "number"):
            out[keyword] = checks[name]
    if checks.get("min_items"):
        out["minProperties" if kind == "object" else "minItems"] = checks["min_items"]
    if checks.get("min_length"):
        out["minLength"] = checks["min_length"]
    return out


def field_default(f: dataclasses.Field) -> Any:
    """A field's default (its factory's value), or ``dataclasses.MISSING`` for a required field."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _satisfies(value: Any, checks: typing.Mapping[str, Any]) -> bool:
    """Whether a default passes its own field's checks (``score: ""``, "the task's own", does not: the schema
    then shows no default)."""
    try:
        check_range(value, checks, "")
    except ConfigError:
        return False
    return True


def jsonable(value: Any) -> Any:
    """A default as plain JSON data (a section as its keys, a tuple as a list, a path as a string)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in config_fields(type(value))}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


_ENTRY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:, [A-Za-z_][A-Za-z0-9_]*)*): (.*)$")


def field_help(cls: type) -> dict[str, str]:
    """Each field's help from the ``Attributes:`` sections of the docstrings of ``cls`` and its bases (the
    class's own first); an entry ``a, b: text`` describes both.

    Example:
        >>> class Section:
        ...     '''Attributes:
        ...         lr: the learning rate,
        ...             peak.
        ...         beta1, beta2: Adam's.
        ...     '''
        >>> field_help(Section)
        {'lr': 'the learning rate, peak.', 'beta1': "Adam's.", 'beta2': "Adam's."}
    """
    out: dict[str, str] = {}
    for klass in cls.__mro__:
        for name, text in _attributes(klass.__dict__.get("__doc__") or "").items():
            out.setdefault(name, text)
    return out


def _attributes(doc: str) -> dict[str, str]:
    lines = doc.expandtabs().splitlines()
    out: dict[str, str] = {}
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return out
    indent = len(lines[start]) - len(lines[start].lstrip())
    if start == 0:  # a docstring opening on "Attributes:": its entries are indented past the others' margin
        indent = min(len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()) - 1
    names: list[str] = []
    entry_indent = None
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        here = len(line) - len(line.lstrip())
        if here <= indent:
            break
        match = _ENTRY.match(line.strip())
        if match and (entry_indent is None or here == entry_indent):
            entry_indent = here
            names = match.group(1).split(", ")
            for name in names:
                out[name] = match.group(2)
        else:
            for name in names:
                out[name] += " " + line.strip()
    return out


def _summary(cls: type) -> str:
    """The first paragraph of a class's own docstring, on one line."""
    doc = cls.__dict__.get("__doc__") or ""
    first = inspect.cleandoc(doc).split("\n\n", 1)[0] if doc else ""
    return "" if first.startswith("Attributes:") else " ".join(first.split())


__all__ = ["DRAFT", "config_schema", "dataclass_schema", "field_default", "field_help", "jsonable",
           "type_schema"]
