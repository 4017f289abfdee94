"""Fixtures of the bad-input suite: a tiny vision run (one step on generated images) to evaluate."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def vision_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-step vision run folder (tiny ResNet, 2 classes x 8 generated images)."""
    import torch

    from hardmix.training.api import load_config_for
    from hardmix.training.engine import run_training
    from hardmix.vision.task import VisionTask
    from tests.conftest import tiny_vision_config_dict
    from tests.reliability.cases import image_tree, rgb_classes

    base = tmp_path_factory.mktemp("vision-run")
    tree = image_tree(base / "images", rgb_classes(2, 8))
    cfg = tiny_vision_config_dict(tree, base / "cache", data={"num_workers": 0},
                                  train={"batch_size": 8, "max_steps": 1, "save_steps": 0},
                                  loss={"queue_size": 16}, eval={"at_end": False})
    before = torch.get_num_threads()
    try:
        run_training(VisionTask, load_config_for(VisionTask, cfg), base / "run")
    finally:
        torch.set_num_threads(before)
    return base / "run"
