"""hardmix.config.loader: YAML configs validated into dataclasses, errors naming the key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from hardmix.config.loader import (
    ConfigError,
    apply_overrides,
    build_config,
    load_config,
    load_yaml,
    parse_override,
)


@dataclass
class Loss:
    temperature: float = field(default=0.05, metadata={"gt": 0.0})
    strategies: list[dict[str, Any]] = field(default_factory=list)
    mode: Literal["in_batch", "queue"] = "in_batch"


@dataclass
class Train:
    lr: float = field(default=3e-5, metadata={"min": 0.0, "max": 1.0})
    steps: int = field(default=10, metadata={"min": 1})
    seed: int | None = None
    betas: tuple[float, float] = (0.9, 0.999)
    fp16: bool = False
    name: str = field(default="run", metadata={"choices": ["run", "debug"]})
    lam: float = field(default=0.2, metadata={"gt": 0.0, "lt": 1.0})

    def validate(self) -> None:
        if self.fp16 and self.steps < 2:
            raise ValueError("fp16 needs at least 2 steps")


@dataclass
class Root:
    train: Train = field(default_factory=Train)
    loss: Loss = field(default_factory=Loss)
    extra: dict[str, int] = field(default_factory=dict)


def test_defaults_values_and_lossless_int_to_float() -> None:
    cfg = build_config(Root, {"train": {"lr": 1, "betas": [0.5, 0.6]}, "extra": {"a": 1}})
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)
    assert cfg.train.betas == (0.5, 0.6) and cfg.train.steps == 10 and cfg.extra == {"a": 1}
    assert build_config(Root, None) == Root()


def test_overrides_are_yaml_values_on_dotted_keys() -> None:
    cfg = build_config(
        Root,
        {},
        overrides=[
            "train.steps=5",
            "train.seed=null",
            "loss.mode=queue",
            "loss.strategies=[{name: mixcse, lam: 0.3}]",
            "train.fp16=true",
        ],
    )
    assert (cfg.train.steps, cfg.train.seed, cfg.loss.mode, cfg.train.fp16) == (5, None, "queue", True)
    assert cfg.loss.strategies == [{"name": "mixcse", "lam": 0.3}]
    assert parse_override("a.b=1") == (["a", "b"], 1)
    assert apply_overrides({"x": 1}, ["y.z=2"]) == {"x": 1, "y": {"z": 2}}
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("train.steps")
    with pytest.raises(ConfigError, match="dotted"):
        parse_override("train..steps=3")
    with pytest.raises(ConfigError, match="not a mapping"):
        apply_overrides({"train": 3}, ["train.steps=1"])


@pytest.mark.parametrize(
    "data,key",
    [
        ({"train": {"lr": "fast"}}, "train.lr"),
        ({"train": {"lr": 2.0}}, "train.lr"),
        ({"train": {"lr": -1.0}}, "train.lr"),
        ({"train": {"steps": 1.5}}, "train.steps"),
        ({"train": {"steps": True}}, "train.steps"),
        ({"train": {"steps": 0}}, "train.steps"),
        ({"train": {"fp16": "yes"}}, "train.fp16"),
        ({"train": {"name": "prod"}}, "train.name"),
        ({"train": {"lam": 1.0}}, "train.lam"),
        ({"train": {"betas": [0.9]}}, "train.betas"),
        ({"train": {"lrr": 0.1}}, "train.lrr"),
        ({"loss": {"temperature": 0}}, "loss.temperature"),
        ({"loss": {"mode": "memory"}}, "loss.mode"),
        ({"loss": {"strategies": "mixcse"}}, "loss.strategies"),
        ({"loss": 3}, "loss"),
        ({"extra": {"a": "b"}}, "extra.a"),
        ({"train": {"seed": "x"}}, "train.seed"),
    ],
)
def test_errors_name_the_key(data: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_config(Root, data)


def test_validate_hook_and_top_level_errors() -> None:
    with pytest.raises(ConfigError, match="train.*fp16 needs"):
        build_config(Root, {"train": {"fp16": True, "steps": 1}})
    with pytest.raises(ConfigError, match="mapping"):
        build_config(Root, [1, 2])
    assert issubclass(ConfigError, ValueError)


def test_files_errors_name_the_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("train:\n  lr: 0.001\n  steps: 3\n")
    cfg = load_config(Root, good, overrides=["train.steps=4"])
    assert (cfg.train.lr, cfg.train.steps) == (0.001, 4)
    bad_value = tmp_path / "bad_value.yaml"
    bad_value.write_text("train:\n  steps: many\n")
    with pytest.raises(ConfigError, match=r"bad_value\.yaml.*train\.steps"):
        load_config(Root, bad_value)
    broken = tmp_path / "broken.yaml"
    broken.write_text("train:\n  lr: [1, 2\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml line \d+"):
        load_yaml(broken)
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml(listing)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_yaml(empty) == {} and load_config(Root, empty) == Root()
