"""YAML configs validated into dataclasses, with ``--set key=value`` overrides: the one loader of every
config hardmix reads (a task's config, a comparison spec).

A config is a dataclass whose fields are its keys: a field without a default is required, a nested
dataclass is a section, and a field's type says what a value may be (``int``, ``float | None``,
``Literal[...]``, ``list[str]``, ``dict[str, Section]``, ``Path``). Ranges are the field's metadata (``min``,
``max``, ``gt``, ``lt``, ``choices``, ``min_items``, ``min_length``), or, for a type inside another
(``dict[str, list[int]]``'s lists), a mapping in ``Annotated[T, {...}]``. A value no generic rule describes
(the strategy list, a comparison's seeds) has a type that reads itself, ``Annotated[T, Parsed(parse,
schema)]``. A section's ``validate()`` checks what spans several keys. Every error names the offending key
(``train.lr``) and, for files, the file, before any work starts; :mod:`hardmix.config.schema` turns the same
dataclasses into a JSON Schema.

Example:
    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Train:
    ...     lr: float = field(default=3e-5, metadata={"min": 0.0})
    ...     steps: int = 10
    >>> @dataclass
    ... class Root:
    ...     train: Train = field(default_factory=Train)
    >>> cfg = build_config(Root, {"train": {"lr": 1e-4}}, overrides=["train.steps=5"])
    >>> (cfg.train.lr, cfg.train.steps)
    (0.0001, 5)
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from hardmix.config.old_keys import OLD_KEYS
from hardmix.utils.errors import ConfigError

T = TypeVar("T")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


#: YAML 1.1 (PyYAML) reads 3e-5 (an exponent without a dot) as a string; YAML 1.2 reads a number.
YAML11_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


@dataclasses.dataclass(frozen=True)
class Parsed:
    """A config type that reads itself, for a value no generic rule describes, as the annotation
    ``Annotated[T, Parsed(parse, schema)]`` (``T``: what ``parse`` returns).

    Attributes:
        parse: ``parse(value, key)``: the value read, or a ConfigError naming ``key``.
        schema: the JSON Schema of the values ``parse`` accepts (:mod:`hardmix.config.schema`).
    """

    parse: Callable[[Any, str], Any]
    schema: Callable[[], dict[str, Any]]


def unwrap(tp: Any) -> tuple[Any, dict[str, Any], Parsed | None]:
    """An annotation's type, its checks (the mappings of ``Annotated``) and its :class:`Parsed`, if any.

    Example:
        >>> unwrap(Annotated[list[int], {"min_items": 1}])
        (list[int], {'min_items': 1}, None)
    """
    if get_origin(tp) is not Annotated:
        return tp, {}, None
    base, *extras = get_args(tp)
    checks = {k: v for e in extras if isinstance(e, Mapping) for k, v in e.items()}
    return base, checks, next((e for e in extras if isinstance(e, Parsed)), None)


def config_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of a config dataclass that are keys of its file (not those its reader fills in, marked
    ``metadata={"internal": True}``)."""
    return [f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("internal")]


def config_hints(cls: type) -> dict[str, Any]:
    """The annotations of a config dataclass, ``Annotated`` kept. Nested sections named by their
    ``default_factory`` also resolve when the classes are not module globals (string annotations of
    classes defined in a function or a doctest)."""
    nested: dict[str, type] = {}
    for f in dataclasses.fields(cls):
        if isinstance(factory := f.default_factory, type):
            nested[factory.__name__] = factory
    return get_type_hints(cls, localns=nested, include_extras=True)


def _coerce(value: Any, tp: Any, key: str, meta: Mapping[str, Any] | None = None) -> Any:
    """``value`` checked against the annotation ``tp`` and converted where lossless (int -> float, YAML
    1.1's exponent strings -> float, a string -> Path), then against the range checks of ``tp``'s
    ``Annotated`` and of ``meta`` (a field's metadata; see :func:`check_range`): the one function a config
    value passes through, else a ConfigError naming ``key``."""
    base, checks, parsed = unwrap(tp)
    if parsed is not None:
        return parsed.parse(value, key)
    origin, out = get_origin(base), value
    if base is Any:
        pass
    elif origin in (Union, types.UnionType):
        if value is None and type(None) not in get_args(base):
            raise ConfigError(f"{key}: must not be null")
        errors: list[str] = []
        for arg in get_args(base) if value is not None else ():
            if arg is type(None):
                continue
            try:
                out = _coerce(value, arg, key)
                break
            except ConfigError as e:
                errors.append(str(e))
        else:
            if errors:
                raise ConfigError(errors[0] if len(errors) == 1 else
                                  f"{key}: {value!r} matches none of {base}")
    elif origin is typing.Literal:
        if value not in get_args(base):
            raise ConfigError(f"{key}: {value!r} is not one of {list(get_args(base))}")
    elif origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            what = "a non-empty list" if checks.get("min_items") else "a list"
            raise ConfigError(f"{key}: expected {what}, got {type(value).__name__} {value!r}")
        (item_tp, *rest) = get_args(base) or (Any,)
        if origin is tuple and rest and rest[0] is not Ellipsis:
            item_tps = [item_tp, *rest]
            if len(value) != len(item_tps):
                raise ConfigError(f"{key}: expected {len(item_tps)} items, got {len(value)}")
            out = tuple(_coerce(v, t, f"{key}[{i}]") for i, (v, t) in enumerate(zip(value, item_tps)))
        else:
            items = [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
            out = tuple(items) if origin is tuple else items
    elif origin is dict:
        if not isinstance(value, dict):
            what = "a non-empty mapping" if checks.get("min_items") else "a mapping"
            raise ConfigError(f"{key}: expected {what}, got {type(value).__name__} {value!r}")
        _, val_tp = get_args(base) or (Any, Any)
        out = {k: _coerce(v, val_tp, f"{key}.{k}") for k, v in value.items()}
    elif isinstance(base, type) and dataclasses.is_dataclass(base):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        out = _from_dict(base, value, key)
    elif base is float:
        if isinstance(value, str) and YAML11_FLOAT.match(value.strip()):
            # YAML 1.1 (PyYAML) reads 3e-5 (an exponent without a dot) as a string; YAML 1.2 reads a number.
            out = float(value)
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {type(value).__name__} {value!r}")
        elif not math.isfinite(value):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        else:
            out = float(value)
    elif base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {type(value).__name__} {value!r}")
    elif base is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {type(value).__name__} {value!r}")
    elif base is str or base is Path:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
        out = Path(value) if base is Path else value
    elif isinstance(base, type) and not isinstance(value, base):
        raise ConfigError(f"{key}: expected {_type_name(base)}, got {type(value).__name__} {value!r}")
    for rules in (checks, meta or {}):  # the ranges: None passes
        if out is None:
            break
        if rules.get("min_items") and len(out) < rules["min_items"]:
            what = "mapping" if isinstance(out, dict) else "list"
            raise ConfigError(f"{key}: expected a non-empty {what}, got {out!r}")
        if rules.get("min_length") and len(out) < rules["min_length"]:
            raise ConfigError(f"{key}: expected a non-empty string, got {out!r}")
        if "choices" in rules and out not in rules["choices"]:
            raise ConfigError(f"{key}: {out!r} is not one of {list(rules['choices'])}")
        if "min" in rules and out < rules["min"]:
            raise ConfigError(f"{key}: {out!r} is below the minimum {rules['min']}")
        if "max" in rules and out > rules["max"]:
            raise ConfigError(f"{key}: {out!r} is above the maximum {rules['max']}")
        if "gt" in rules and not out > rules["gt"]:
            raise ConfigError(f"{key}: {out!r} must be greater than {rules['gt']}")
        if "lt" in rules and not out < rules["lt"]:
            raise ConfigError(f"{key}: {out!r} must be less than {rules['lt']}")
    return out


def check_range(value: Any, meta: typing.Mapping[str, Any], key: str) -> None:
    """Check a read value against the checks of ``meta`` (a field's metadata, or ``Annotated``'s mapping):
    ``choices``, ``min``, ``max``, ``gt``, ``lt``, ``min_items``, ``min_length``; None passes (the ranges
    of :func:`_coerce`, for a value read already).

    >>> check_range(0.0, {"gt": 0.0}, "loss.temperature")
    Traceback (most recent call last):
    ...
    hardmix.utils.errors.ConfigError: loss.temperature: 0.0 must be greater than 0.0
    """
    _coerce(value, Any, key, meta)


def _from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    fields = {f.name: f for f in config_fields(cls)}
    hints = config_hints(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(
            f"unknown key {where}{unknown[0]} (known keys of {prefix or 'the config'}: {', '.join(fields)})"
        )
    missing = [n for n, f in fields.items() if n not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{prefix + '.' if prefix else ''}{missing[0]}: missing")
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        parsed = unwrap(hints[name])[2]
        if parsed is not None:  # read here, not through _coerce: the value passes through no other function
            kwargs[name] = parsed.parse(value, key)
            continue
        kwargs[name] = _coerce(value, hints[name], key, fields[name].metadata)
    try:
        obj = cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{prefix or 'config'}: {e}") from e
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(f"{prefix + ': ' if prefix else ''}{e}") from e
    return obj


def yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error on one line: what the parser found and, where it says, in what context and where.

    Example:
        >>> try:
        ...     yaml.safe_load("a: [1, 2")
        ... except yaml.YAMLError as e:
        ...     print(*yaml_problem(e).split(" (", 1), sep="\\n(")
        expected ',' or ']', but got '<stream end>'
        (while parsing a flow sequence started at line 1, column 4)
    """
    problem = getattr(e, "problem", None)
    if not problem:
        return " ".join(str(e).split())
    context, mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context and mark is not None:
        return f"{problem} ({context} started at line {mark.line + 1}, column {mark.column + 1})"
    return f"{problem} ({context})" if context else str(problem)


def check_options(args: Any, positive: typing.Sequence[str] = (), devices: typing.Sequence[str] = ()) -> None:
    """Refuse command-line numbers that must be positive (``--k 0``) and device names torch does not know,
    naming the option (``batch_size`` -> ``--batch-size``); None (not given) passes.

    Example:
        >>> import argparse
        >>> check_options(argparse.Namespace(k=0), positive=["k"])
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.ConfigError: --k: expected a positive number, got 0
    """
    for name in positive:
        value = getattr(args, name, None)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ConfigError(f"--{name.replace('_', '-')}: expected a positive number, got {value}")
    for name in devices:
        value = getattr(args, name, None)
        if value is not None and not re.fullmatch(r"cpu|cuda(:\d+)?|mps", str(value)):
            raise ConfigError(f"--{name.replace('_', '-')}: {value!r} is not a device; use cpu, cuda or "
                              "cuda:N")


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b.c=value`` into (["a", "b", "c"], value); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value, for example train.max_steps=100")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: the key {key!r} is not a dotted name like train.seed")
    try:
        value = safe_load_unique(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {key}: cannot read value {raw!r}: {yaml_problem(e)}; quote it "
                          "(--set 'key=\"text\"') or write valid YAML") from None
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``key=value`` overrides to a nested dict (a copy); intermediate mappings are created."""
    import copy

    out = copy.deepcopy(data)
    for text in overrides or []:
        parts, value = parse_override(text)
        node = out
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {'.'.join(parts)}: {'.'.join(parts[: i + 1])} is not a mapping")
            node = nxt
        leaf = parts[-1]
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            node[leaf] = merge_mappings(node[leaf], value)  # a section's keys not named keep their values
        else:
            node[leaf] = value
    return out


def merge_mappings(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` merged in, recursively: a mapping given for a mapping merges into it (the
    keys it does not name keep their values); any other value replaces. Neither argument is changed.

    Example:
        >>> merge_mappings({"train": {"lr": 0.1, "max_steps": 5}}, {"train": {"max_steps": 2}})
        {'train': {'lr': 0.1, 'max_steps': 2}}
    """
    import copy

    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_mappings(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def flatten_keys(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys (``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}``); a strategy list
    stays one value.

    >>> flatten_keys({"train": {"lr": 1, "opt": {"b": 2}}, "loss": {"strategies": {"name": "mochi"}}})
    {'train.lr': 1, 'train.opt.b': 2, 'loss.strategies': {'name': 'mochi'}}
    """
    out: dict[str, Any] = {}
    stack = [(prefix, iter(d.items()))]  # walked here, depth first, not by recursion
    while stack:
        at, items = stack[-1]
        for k, v in items:
            if isinstance(v, dict) and v and k != "strategies":
                stack.append((f"{at}{k}.", iter(v.items())))
                break
            out[f"{at}{k}"] = v
        else:
            stack.pop()
    return out


def check_old_keys(data: dict[str, Any]) -> None:
    """Refuse a key of an older hardmix (before any other check), saying what replaces it
    (:data:`hardmix.config.old_keys.OLD_KEYS`).

    >>> check_old_keys({"train": {"cpu_threads": 1}})
    Traceback (most recent call last):
    ...
    hardmix.utils.errors.ConfigError: train.cpu_threads was renamed to train.threads
    """
    for key in flatten_keys(data):
        if key in OLD_KEYS:
            raise ConfigError(f"{key} {OLD_KEYS[key]}")


def build_config(cls: type[T], data: dict[str, Any] | None, overrides: list[str] | None = None,
                 source: str | os.PathLike[str] | None = None) -> T:
    """Validate a nested dict (plus ``key=value`` overrides, ``--set``) into the dataclass ``cls``: a key of
    an older hardmix is refused saying what replaces it (:func:`check_old_keys`), then every key and value.

    Args:
        cls: the config dataclass (a task's, a comparison spec's).
        data: the YAML content (None: the defaults).
        overrides: ``--set`` items; an error the file alone does not have is said to be theirs (``--set:``).
        source: the file it came from, to prefix errors with.
    """
    if data is None:
        data = {}
    try:
        if not isinstance(data, dict):
            raise ConfigError(f"the config must be a mapping at the top level, got {type(data).__name__}")
        merged = apply_overrides(data, overrides)
        check_old_keys(merged)
        return _from_dict(cls, merged)
    except ConfigError as e:
        if overrides and not str(e).startswith("--set") and _valid(cls, data):
            raise ConfigError(f"--set: {e}") from None  # the file alone is valid: the override is at fault
        if source is not None:
            raise ConfigError(f"{source}: {e}") from None
        raise


def _valid(cls: type, data: dict[str, Any]) -> bool:
    try:
        build_config(cls, data)
    except ConfigError:
        return False
    return True


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader refusing a key given twice in one mapping (the safe loader keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the base loader names it
                continue
            if first != key_node.start_mark.line + 1:
                raise DuplicateKeyError(key, first, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep=deep)


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one YAML mapping."""

    def __init__(self, key: Any, first: int, again: int) -> None:
        super().__init__(f"line {again}: the key {key!r} is given twice (first on line {first}); keep one")
        self.line = again


def safe_load_unique(text: Any) -> Any:
    """``yaml.safe_load`` that refuses a key given twice in one mapping (:class:`DuplicateKeyError`).

    Example:
        >>> safe_load_unique("train:\\n  lr: 1\\n  lr: 2\\n")
        Traceback (most recent call last):
        ...
        hardmix.config.loader.DuplicateKeyError: line 3: the key 'lr' is given twice (first on line 2); ...
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML mapping; errors name the file (and line, for syntax errors and a key given twice)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a folder, not a file: pass a YAML file (see configs/)")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            data = safe_load_unique(f)
    except DuplicateKeyError as e:
        raise ConfigError(f"{path} {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); save the config as "
                          "UTF-8") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: invalid YAML: {yaml_problem(e)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping at the top level")
    return data


def load_config(cls: type[T], path: str | os.PathLike[str], overrides: list[str] | None = None) -> T:
    """Load the YAML file ``path`` and validate it (with ``--set`` overrides) into ``cls``
    (:func:`build_config`); every error names the file and the key."""
    return build_config(cls, load_yaml(path), overrides, source=path)

