"""Vision config validation: defaults are MoCo-v2's, and every error names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from hardmix.config.loader import ConfigError, build_config, load_config
from hardmix.strategies import MixCSE, MoCHi
from hardmix.training.config import plain_config
from hardmix.vision.config import VisionConfig

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs" / "vision").glob("*.yaml"))


def test_defaults_are_mocov2():
    cfg = build_config(VisionConfig, {})
    assert (cfg.loss.queue_size, cfg.model.momentum, cfg.loss.temperature) == (65536, 0.999, 0.2)
    assert (cfg.train.lr, cfg.train.sgd_momentum, cfg.train.weight_decay, cfg.train.schedule) == (
        0.03,
        0.9,
        1e-4,
        "cosine",
    )
    assert cfg.augment.crop_scale == (0.2, 1.0) and cfg.augment.jitter == (0.4, 0.4, 0.4, 0.1)
    assert cfg.augment.kernel_size == 23 and (cfg.model.proj_hidden, cfg.model.proj_dim) == (2048, 128)


def test_mochi_warmup_epochs_become_steps():
    cfg = build_config(
        VisionConfig,
        {
            "loss": {
                "strategies": [
                    {"name": "mochi", "n_hard": 64, "n_pair": 32, "n_query": 8, "warmup_epochs": 1.5},
                    "mixcse",
                ]
            }
        },
    )
    mochi, mixcse = cfg.loss.strategies
    assert mochi.final == MoCHi(n_hard=64, n_pair=32, n_query=8) and mochi.in_steps(10).warmup_steps == 15
    assert mixcse == MixCSE()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"loss": {"strategies": [{"name": "mochi", "n_hard": 4, "n_pair": 7}]}},
            r"loss\.strategies\[0\]\.n_pair: 7",
        ),
        (
            {"loss": {"strategies": ["none", {"name": "mochi", "foo": 1}]}},
            r"loss\.strategies\[1\]\.foo: unknown argument",
        ),
        (
            {"loss": {"strategies": [{"name": "mixcse", "warmup_epochs": -1}]}},
            r"loss\.strategies\[0\]\.warmup_epochs",
        ),
        (
            {"loss": {"strategies": [{"name": "mochi", "ramp_epochs": 1}]}},
            r"loss\.strategies\[0\]\.ramp_epochs: is gone",
        ),
        (
            {"loss": {"strategies": [{"name": "mochi", "n_hard": 70000}]}},
            r"loss\.strategies\[0\]\.n_hard: 70000",
        ),
        ({"loss": {"strategies": ["nope"]}}, r"loss\.strategies\[0\]\.name: unknown strategy 'nope'"),
        ({"augment": {"crop_scale": [0.9, 0.1]}}, r"augment\.crop_scale"),
        ({"augment": {"blur_kernel": 4}}, r"augment\.blur_kernel: must be odd"),
        ({"model": {"bn_splits": 3}}, r"model\.bn_splits: train\.batch_size=256"),
        ({"model": {"momentum": 1.5}}, r"model\.momentum: 1\.5 is above"),
        ({"train": {"epochs": 0}}, r"train\.epochs: 0 is below"),
        ({"data": {"pipeline": "gpu"}}, r"data\.pipeline"),
        ({"model": {"widht": 3}}, r"unknown key model\.widht"),
    ],
)
def test_errors_name_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        build_config(VisionConfig, data)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_load_and_take_the_common_overrides(path):
    cfg = load_config(VisionConfig, path, ["train.epochs=3", "train.seed=7", "data.max_samples=500"])
    assert (cfg.train.epochs, cfg.train.seed, cfg.data.max_samples) == (3, 7, 500)
    assert build_config(VisionConfig, plain_config(cfg)) == cfg


def test_the_cpu_and_paper_configs_exist():
    names = {p.name for p in CONFIGS}
    assert {
        "cpu_mocov2_cifar10.yaml",
        "cpu_mochi_cifar10.yaml",
        "cpu_mocov2_imagenette64.yaml",
        "cpu_mochi_imagenette64.yaml",
    } <= names
    assert len(names) >= 9


@pytest.mark.parametrize("strategy", ["mixcse", "mixcse_adaptive"])
@pytest.mark.parametrize("value", [False, True])
def test_a_setting_of_the_in_batch_loss_s_directions_is_refused_on_the_queue(strategy, value):
    """``mixcse: {second_direction: false}`` was accepted on images and did nothing: the queue loss has no
    second direction. Given at all, it is refused naming the key; left out, MixCSE runs as before."""
    message = (r"^loss\.strategies\[0\]\.second_direction: sets the in-batch loss's second direction; the "
               r"vision trainer's queue loss has none")
    with pytest.raises(ConfigError, match=message):
        build_config(VisionConfig, {"loss": {"strategies": [{"name": strategy, "second_direction": value}]}})
    cfg = build_config(VisionConfig, {"loss": {"strategies": [{"name": strategy}]}})
    assert cfg.loss.strategies[0].second_direction is None
