"""Config of ``hardmix train text``: validation names the key, before any work; ``--set`` overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from hardmix.cli import main
from hardmix.config.loader import ConfigError
from hardmix.strategies import MixCSE
from hardmix.text.config import build_loss, build_text_config, load_text_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "text"


@pytest.mark.parametrize("data, key", [
    ({"train": {"lrate": 1e-3}}, "train.lrate"),
    ({"modle": {}}, "modle"),
    ({"train": {"batch_size": "64"}}, "train.batch_size"),
    ({"train": {"lr": "fast"}}, "train.lr"),
    ({"train": {"epochs": 1.5}}, "train.epochs"),
    ({"loss": {"temperature": 0}}, "loss.temperature"),
    ({"loss": {"temperature": 1.0e-300}}, "loss.temperature"),  # once trained on NaN, advising train.lr
    ({"loss": {"strategies": [{"name": "mixcse", "lam": 1.5}]}}, "loss.strategies[0].lam"),
    ({"loss": {"strategies": [{"name": "none"}, {"name": "mixcse", "lam": 0.0}]}}, "loss.strategies[1].lam"),
    ({"loss": {"strategies": [{"name": "mixup"}]}}, "loss.strategies[0].name"),
    ({"loss": {"strategies": [{"name": "mixcse", "lamda": 0.2}]}}, "loss.strategies[0].lamda"),
    ({"loss": {"strategies": [{"lam": 0.2}]}}, "loss.strategies[0].name"),
    ({"loss": {"strategies": "mixcse", "both_directions": False}}, "loss.both_directions"),
    ({"loss": {"strategies": "mixcse", "queue_size": 128}}, "loss.queue_size"),
    ({"loss": {"strategies": [{"name": "mochi", "n_hard": 64, "n_pair": 8, "n_query": 8}]}},
     "loss.strategies[0].n_hard"),
    ({"model": {"pooling": "max"}}, "model.pooling"),
    ({"train": {"precision": "fp8"}}, "train.precision"),
    ({"train": {"max_steps": 0}}, "train.max_steps"),
])
def test_bad_values_name_the_key(data, key):
    with pytest.raises(ConfigError) as err:
        build_text_config(data)
    assert key in str(err.value), str(err.value)


def test_strategy_forms_and_defaults():
    cfg = build_text_config({"loss": {"strategies": "mixcse"}})
    assert cfg.loss.strategies == [MixCSE()]
    default = build_text_config({})
    assert (default.train.batch_size, default.train.lr, default.data.max_length, default.train.epochs,
            default.loss.temperature, default.eval.eval_steps) == (64, 3e-5, 32, 1, 0.05, 125)
    queue = build_text_config({"loss": {"queue_size": 256, "strategies": [
        {"name": "mochi", "n_hard": 100, "n_pair": 16, "n_query": 8, "warmup_steps": 1}]}})
    assert queue.loss.queue_size == 256


def test_set_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("loss:\n  strategies: [{name: mixcse, lam: 0.2}]\ntrain:\n  seed: 3\n")
    cfg = load_text_config(path, ["train.max_steps=7", "train.seed=5", "loss.temperature=0.1",
                                  "loss.strategies=[{name: mixcse, lam: 0.3, stop_grad: false}]"])
    assert (cfg.train.max_steps, cfg.train.seed, cfg.loss.temperature) == (7, 5, 0.1)
    assert cfg.loss.strategies == [MixCSE(lam=0.3, stop_grad=False)]
    cfg = load_text_config(path, ["train.lr=3e-5", "loss.strategies=[{name: mixcse, lam: 2e-1}]"])
    assert cfg.train.lr == 3e-5 and cfg.loss.strategies[0].lam == 0.2  # YAML 1.1 reads 3e-5 as a string
    with pytest.raises(ConfigError, match="train.max_step"):
        load_text_config(path, ["train.max_step=7"])
    with pytest.raises(ConfigError, match="key=value"):
        load_text_config(path, ["train.max_steps"])
    with pytest.raises(ConfigError, match=r"--set: train\.seed: expected an integer"):
        load_text_config(path, ["train.seed=abc"])


def test_cli_reports_config_errors_before_work(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("loss:\n  strategies: [{name: mixcse, lam: 2}]\n")
    out = tmp_path / "run"
    assert main(["train", "text", str(path), "--output", str(out)]) == 2
    assert "loss.strategies[0].lam" in capsys.readouterr().err
    assert main(["train", "text", str(tmp_path / "missing.yaml"), "--output", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["train", "text", str(path), "--set", "loss.strategies=none", "--set", "train.lr=x",
                 "--output", str(out)]) == 2
    assert "train.lr" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_shipped_configs_load(name):
    cfg = load_text_config(CONFIGS / name, ["train.max_steps=3", "train.seed=7"])
    assert cfg.train.max_steps == 3 and cfg.train.seed == 7


@pytest.mark.parametrize("strategy", ["mixcse", "mixcse_adaptive"])
def test_mixcse_s_old_bidirectional_is_refused_naming_second_direction(strategy):
    """MixCSE's second direction is ``second_direction``; the old ``bidirectional`` names it."""
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[0\]\.bidirectional: was renamed to "
                                          r"second_direction"):
        build_text_config({"loss": {"strategies": [{"name": strategy, "bidirectional": False}]}})
    single = build_text_config({"loss": {"strategies": [{"name": strategy, "second_direction": False}]}})
    assert build_loss(single.loss).both_directions is False
