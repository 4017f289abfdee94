"""``synco`` and a ramped ``mochi`` train in both modalities from a config: short real runs of
the tiny fixtures, finite losses, the strategies' diagnostics in metrics.jsonl, a finished results.json."""

from __future__ import annotations

import copy
import math

from hardmix.config.loader import build_config
from hardmix.text.config import build_text_config
from hardmix.text.task import TextTask
from hardmix.training import read_results, run_training
from hardmix.training.metrics import read_metrics
from hardmix.vision.config import VisionConfig
from hardmix.vision.task import VisionTask

SYNCO = {"name": "synco", "n_hard": 8, "n_extrapolated": 6, "n_noise": 4, "n_perturbed": 4,
         "n_adversarial": 4}


def _steps(run) -> list[dict]:
    return [r for r in read_metrics(run) if "loss" in r]


def _check_finished(run, steps: int) -> list[dict]:
    lines = _steps(run)
    assert len(lines) == steps and all(math.isfinite(r["loss"]) for r in lines)
    record = read_results(run)
    assert record["finished"] and record["steps"] == steps
    return lines


def test_text_synco_and_ramped_mochi_train(tmp_path, tiny_text_config, one_torch_thread):
    ramp = {"name": "mochi", "n_hard": 8, "n_pair": {"start": 0, "end": 8, "steps": 4},
            "n_query": {"start": 0, "end": 4, "steps": 4}, "warmup_steps": 2}
    for name, strategies in (("synco", [SYNCO]), ("ramp", [ramp]), ("both", [ramp, SYNCO])):
        data = copy.deepcopy(tiny_text_config)
        data["train"]["max_steps"] = 8
        data["loss"]["strategies"] = strategies
        run_training(TextTask, build_text_config(data), tmp_path / name)
        lines = _check_finished(tmp_path / name, 8)
        if name != "ramp":
            keys = {"synco/synthetic_sim", "synco/synthetic_harder_than_positive"}
            assert all(keys <= r.keys() for r in lines)
        if name != "synco":
            counts = [r["mochi/n_pair"] for r in lines]
            assert counts == [0.0, 0.0, 0.0, 2.0, 4.0, 6.0, 8.0, 8.0]  # steps 0..7: warm-up 2, ramp 4
            mixed = [("mochi/synthetic_sim" in r) for r in lines]
            assert mixed == [False, False, False, True, True, True, True, True]


def test_vision_synco_and_ramped_mochi_train(tmp_path, tiny_vision_config, one_torch_thread):
    # 320 images in batches of 32: 10 steps per epoch; the ramp's 0.5 epochs are 5 steps.
    cosine = {"start": 0, "epochs": 0.5, "shape": "cosine"}
    ramp = {"name": "mochi", "n_hard": 16, "n_pair": {**cosine, "end": 16}, "n_query": {**cosine, "end": 8}}
    for name, strategies in (("synco", [{**SYNCO, "n_hard": 16, "warmup_epochs": 0.2}]), ("ramp", [ramp]),
                             ("both", [ramp, {**SYNCO, "n_hard": 16}])):
        data = tiny_vision_config(train={"epochs": 1}, loss={"strategies": strategies})
        run_training(VisionTask, build_config(VisionConfig, data), tmp_path / name)
        lines = _check_finished(tmp_path / name, 10)
        if name == "synco":  # warm-up of 0.2 epochs = 2 steps
            assert ["synco/synthetic_sim" in r for r in lines] == [False] * 2 + [True] * 8
        elif name == "both":
            assert all("synco/synthetic_sim" in r for r in lines)
        if name != "synco":
            ramps = [r["mochi/n_pair"] for r in lines]
            assert ramps[0] == 0.0 and ramps[5:] == [16.0] * 5
            assert all(a < b for a, b in zip(ramps[:6], ramps[1:6]))
            assert ["mochi/synthetic_sim" in r for r in lines] == [False] + [True] * 9
