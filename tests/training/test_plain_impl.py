"""``loss.impl: plain`` trains both modalities through the strategies' paper-shaped implementations and logs
the losses of the default (fast) path at every step, to 1e-4 relative in float32."""

from __future__ import annotations

import copy

import numpy as np

from hardmix.text.config import build_text_config
from hardmix.text.task import TextTask
from hardmix.training import run_training
from hardmix.training.config import build_task_config
from hardmix.training.metrics import read_metrics
from hardmix.vision.config import VisionConfig
from hardmix.vision.task import VisionTask


def _losses(run) -> np.ndarray:
    return np.array([r["loss"] for r in read_metrics(run) if "loss" in r])


def test_text_plain_logs_the_fast_losses(tmp_path, tiny_text_config, one_torch_thread, capsys):
    base = copy.deepcopy(tiny_text_config)
    base["train"]["max_steps"] = 10
    base["loss"]["strategies"] = [{"name": "mixcse", "lam": 0.2}]
    runs = {}
    for impl in ("fast", "plain"):
        data = copy.deepcopy(base)
        data["loss"]["impl"] = impl
        run_training(TextTask, build_text_config(data), tmp_path / impl)
        runs[impl] = _losses(tmp_path / impl)
        assert ("impl='plain'" in capsys.readouterr().err) == (impl == "plain")  # the loss it trained with
    assert len(runs["fast"]) == 10
    np.testing.assert_allclose(runs["plain"], runs["fast"], rtol=1e-4, atol=0)


def test_vision_plain_logs_the_fast_losses_with_mochi_mixing(tmp_path, tiny_vision_config, one_torch_thread,
                                                              capsys):
    strategies = [{"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 8, "warmup_epochs": 0}]
    runs = {}
    for impl in ("fast", "plain"):
        data = tiny_vision_config(train={"epochs": 1}, loss={"strategies": strategies, "impl": impl})
        run_training(VisionTask, build_task_config(VisionConfig, data), tmp_path / impl)
        runs[impl] = _losses(tmp_path / impl)
        assert ("impl='plain'" in capsys.readouterr().err) == (impl == "plain")
        assert all("mochi/synthetic_sim" in r for r in read_metrics(tmp_path / impl) if "loss" in r)
    assert len(runs["fast"]) == 10
    np.testing.assert_allclose(runs["plain"], runs["fast"], rtol=1e-4, atol=0)
