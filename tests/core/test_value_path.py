"""How far one value travels: during a real one-step vision run with MoCHi, the functions of hardmix that
hold ``loss.temperature`` or MoCHi's ``n_hard`` in an argument, counted with ``sys.setprofile`` on every
call.

A function counts when one of its arguments other than ``self`` is the value itself, a mapping holding it
directly (its config section, its strategy's entry), an object of hardmix holding it as an attribute (the
loss section, the strategy, the loss), or a list or tuple of those. A whole config, whose value is two
mappings or objects down, does not count; nor does anything outside hardmix's own files. Each value is
distinctive (a temperature of 0.1234567, an ``n_hard`` of 37), so that no other argument equals it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

import hardmix
from hardmix.cli import main as cli
from hardmix.strategies.base import registry

PACKAGE = Path(hardmix.__file__).resolve().parent
ROOT = PACKAGE.parent
OWN = str(PACKAGE) + "/"
TEMPERATURE, N_HARD = 0.1234567, 37
#: The most functions, and files, that may hold each value: 8 functions in 4 files for both. This tree
#: measures 5 in 4 for the temperature (the loader's ``_from_dict`` and ``_coerce``, the loss's
#: constructor, ``composed_direction``, which divides every column by it, the one place it is applied, and
#: MoCo's step, which hands the loss on) and 6 in 4 for ``n_hard`` (building the list: ``strategy_entries``,
#: ``build_strategies``, ``_build``; the loss's constructor and ``composed_direction``, which hold the list;
#: the distinct pairs MoCHi draws among its N): the strategies receive cosines, not the temperature, and
#: MoCHi checks, selects and draws in its own methods, which hold ``n_hard`` through ``self``.
CEILING = {"temperature": (8, 4), "n_hard": (8, 4)}


def _is(value: Any, wanted: float) -> bool:
    """``value`` is the number ``wanted`` (a bool is not a number here; a tensor is not compared)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == wanted


def _attributes(value: Any) -> list[Any]:
    """The attributes of an object of hardmix (its ``__dict__`` and slots), else none."""
    if not type(value).__module__.startswith("hardmix"):
        return []
    held = list(getattr(value, "__dict__", {}).values())
    for cls in type(value).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            held.append(getattr(value, slot, None))
    return held


def holds(value: Any, wanted: float, depth: int = 0) -> bool:
    """``value`` is ``wanted``, a mapping or an object of hardmix holding it directly, or (at the top) a
    list or tuple of those."""
    if _is(value, wanted):
        return True
    if isinstance(value, dict):
        return any(_is(v, wanted) for v in list(value.values()))
    if isinstance(value, (list, tuple)):
        return depth == 0 and any(holds(v, wanted, 1) for v in value)
    return any(_is(v, wanted) for v in _attributes(value))


def holders(argv: list[str], wanted: dict[str, float]) -> dict[str, set[tuple[str, str]]]:
    """For each named value, the (file relative to the repository, function's qualified name) of every
    function of hardmix that holds it in an argument other than ``self`` while ``hardmix argv`` runs."""
    seen: dict[str, set[tuple[str, str]]] = {name: set() for name in wanted}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(OWN):
            return
        n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + \
            bool(code.co_flags & 0x08)
        args = [v for k, v in frame.f_locals.items() if k in code.co_varnames[:n] and k != "self"]
        for name, value in wanted.items():
            if any(holds(a, value) for a in args):
                seen[name].add((str(Path(code.co_filename).relative_to(ROOT)), code.co_qualname))

    sys.setprofile(profile)
    try:
        assert cli(argv) == 0
    finally:
        sys.setprofile(None)
    return seen


def test_the_counting_sees_each_kind_of_holder() -> None:
    """The rule counts the value, a mapping holding it, an object of hardmix holding it, a list of those;
    not a whole config (the value two mappings down), nor a number that only looks alike."""
    mochi = registry()["mochi"](n_hard=N_HARD, n_pair=8, n_query=4)
    assert holds(N_HARD, N_HARD) and holds({"n_hard": N_HARD}, N_HARD) and holds(mochi, N_HARD)
    assert holds([mochi], N_HARD) and holds(({"name": "mochi", "n_hard": N_HARD},), N_HARD)
    assert not holds({"loss": {"temperature": TEMPERATURE}}, TEMPERATURE)
    assert not holds([[TEMPERATURE]], TEMPERATURE) and not holds(True, 1)
    assert not holds(0.1234568, TEMPERATURE)


def test_temperature_and_n_hard_reach_the_loss_through_few_functions(tiny_vision_config, tmp_path) -> None:
    cfg = tiny_vision_config(
        loss={"temperature": TEMPERATURE, "queue_size": 96,
              "strategies": [{"name": "mochi", "n_hard": N_HARD, "n_pair": 8, "n_query": 4}]},
        train={"max_steps": 1, "save_steps": 0}, data={"num_workers": 0})
    path = tmp_path / "mochi.yaml"
    path.write_text(yaml.safe_dump(cfg))
    found = holders(["train", "vision", str(path), "--output", str(tmp_path / "run")],
                    {"temperature": TEMPERATURE, "n_hard": N_HARD})
    for name, functions in found.items():  # docs/architecture.md lists them
        files = {f for f, _ in functions}
        assert functions, name  # the run was seen
        most, most_files = CEILING[name]
        assert len(functions) <= most and len(files) <= most_files, (name, sorted(functions))
    # the plug-in guards hold no built-in strategy's context (they ran on every call before)
    assert not {f for f in found["temperature"] if f[1].startswith(("_called", "_checked", "_versions"))}
