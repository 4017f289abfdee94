"""mixcse_adaptive and mixcse with a lambda schedule train in both modalities from a config: short real runs
on the tiny fixtures, finite losses, the strategies' diagnostics in metrics.jsonl, a finished results.json."""

from __future__ import annotations

import copy
import math

import pytest

from hardmix.config.loader import build_config
from hardmix.text.config import build_text_config
from hardmix.text.task import TextTask
from hardmix.training import read_results, run_training
from hardmix.training.metrics import read_metrics
from hardmix.vision.config import VisionConfig
from hardmix.vision.task import VisionTask

ADAPTIVE = {"name": "mixcse_adaptive", "margin": 0.1, "lam_max": 0.2}
SCHEDULED = {"name": "mixcse", "lam": {"start": 0.1, "end": 0.3, "steps": 6, "shape": "cosine"}}
KEYS = {
    "mixcse_adaptive": tuple(f"mixcse_adaptive/{k}" for k in ("lam_mean", "lam_smallest", "bound_bites")),
    "mixcse": ("mixcse/lam", "mixcse/synthetic_sim"),
}


def _check(run, spec: dict, steps: int) -> None:
    record = read_results(run)
    assert record["finished"] and record["steps"] == steps
    rows = [r for r in read_metrics(run) if "loss" in r]
    assert len(rows) == steps
    for r in rows:
        assert math.isfinite(r["loss"])
        for key in KEYS[spec["name"]]:
            assert key in r and math.isfinite(r[key]), key
    if spec["name"] == "mixcse_adaptive":
        for r in rows:  # (float32 lambdas: 0.2 is 0.2000000030)
            assert 0.0 <= r["mixcse_adaptive/lam_smallest"] <= r["mixcse_adaptive/lam_mean"] <= 0.2 + 1e-7
        assert all(0.0 <= r["mixcse_adaptive/bound_bites"] <= 1.0 for r in rows)
    else:  # the logged lam follows the schedule of the step it was used at
        lams = [r["mixcse/lam"] for r in rows]
        want = [0.1 + 0.2 * (1 - math.cos(math.pi * min(t / 6, 1.0))) / 2 for t in range(steps)]
        assert lams == pytest.approx(want)


@pytest.mark.parametrize("spec", [ADAPTIVE, SCHEDULED], ids=["mixcse_adaptive", "scheduled-mixcse"])
def test_text_trains_from_a_config(spec, tmp_path, tiny_text_config, one_torch_thread) -> None:
    data = copy.deepcopy(tiny_text_config)
    data["train"]["max_steps"] = 8
    data["loss"]["strategies"] = [spec]
    run_training(TextTask, build_text_config(data), tmp_path / "run")
    _check(tmp_path / "run", spec, 8)


@pytest.mark.parametrize("spec", [ADAPTIVE, SCHEDULED], ids=["mixcse_adaptive", "scheduled-mixcse"])
def test_vision_trains_from_a_config(spec, tmp_path, tiny_vision_config, one_torch_thread) -> None:
    data = tiny_vision_config(train={"epochs": 1}, loss={"strategies": [spec]})
    run_training(VisionTask, build_config(VisionConfig, data), tmp_path / "run")
    _check(tmp_path / "run", spec, 10)
