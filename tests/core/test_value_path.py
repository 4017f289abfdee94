"""How far a strategy's value travels: during a one-step vision run with MoCHi, the functions that hold
MoCHi's spec or object in an argument (other than ``self``), counted with ``sys.setprofile`` on every call.

A function counts when one of its arguments other than ``self`` is MoCHi's spec (a mapping or name of
``mochi``), its object (the strategy, or a schedule wrapping it), or a list holding one; generator
expressions and calls made from MoCHi's own file are not counted; only hardmix's own files are."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

import hardmix
from hardmix.cli import main as cli
from hardmix.strategies.base import Strategy

ROOT = Path(hardmix.__file__).resolve().parents[1]
OWN = tuple(str(ROOT / d) + "/" for d in ("hardmix", "text", "vision"))
MOCHI_FILE = str(ROOT / "hardmix" / "strategies" / "mochi.py")


def _is_mochi(value: Any, depth: int = 0) -> bool:
    if isinstance(value, Strategy) or type(value).__name__ == "Scheduled":
        return getattr(value, "name", None) == "mochi"
    if isinstance(value, dict):
        return value.get("name") == "mochi" or (depth == 0 and any(_is_mochi(v, 1) for v in value.values()))
    if isinstance(value, (list, tuple)) and depth == 0:
        return any(_is_mochi(v, 1) for v in value)
    return value == "mochi" if isinstance(value, str) else False


def holders(argv: list[str]) -> set[tuple[str, str]]:
    """(file relative to the repository, function's qualified name) of every function of hardmix that
    holds MoCHi's value in an argument while ``hardmix argv`` runs."""
    seen: set[tuple[str, str]] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(OWN) or code.co_name.startswith("<"):
            return
        caller = frame.f_back
        if caller is not None and caller.f_code.co_filename == MOCHI_FILE:
            return
        n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + \
            bool(code.co_flags & 0x08)
        f_locals = frame.f_locals
        for name in code.co_varnames[:n]:
            if name != "self" and _is_mochi(f_locals.get(name)):
                seen.add((str(Path(code.co_filename).relative_to(ROOT)), code.co_qualname))
                return

    sys.setprofile(profile)
    try:
        assert cli(argv) == 0
    finally:
        sys.setprofile(None)
    return seen


def test_mochi_s_value_reaches_the_loss_through_few_functions(tiny_vision_config, tmp_path) -> None:
    cfg = tiny_vision_config(loss={"strategies": [{"name": "mochi", "n_hard": 16, "n_pair": 8, "n_query": 4}],
                                   "queue_size": 96},
                             train={"max_steps": 1, "save_steps": 0}, data={"num_workers": 0})
    path = tmp_path / "mochi.yaml"
    path.write_text(yaml.safe_dump(cfg))
    found = holders(["train", "vision", str(path), "--output", str(tmp_path / "run")])
    files = {f for f, _ in found}
    assert len(found) <= 8 and len(files) <= 4, sorted(found)  # docs/architecture.md lists them
