"""A starting encoder scored once among the runs that start from it (``--start-cache``,
:mod:`hardmix.training.shared_start`): the key, the lock, a stale or corrupt file, and real text runs whose
seeds share one start."""

from __future__ import annotations

import copy
import json
import threading
import time

import pytest

from hardmix.text.config import build_text_config
from hardmix.text.task import TextTask
from hardmix.training import run_training
from hardmix.training.shared_start import read_shared, shared_or_measured, shared_start_key

CONFIG = {"model": {"width": 8}, "data": {"dataset": "cifar10"}, "eval": {"knn_k": 20},
          "train": {"precision": "fp32", "device": "cpu", "lr": 0.1, "seed": 1}, "loss": {"temperature": 0.2}}


def _with(**changes: dict) -> dict:
    config = copy.deepcopy(CONFIG)
    for section, values in changes.items():
        config[section].update(values)
    return config


def test_the_key_is_what_decides_the_start_and_nothing_else():
    key = shared_start_key(CONFIG, 1, "inputs", {"images": 10})
    # what training does with the encoder leaves its start as it was
    assert key == shared_start_key(_with(loss={"temperature": 0.1, "strategies": "mochi"},
                                         train={"lr": 0.3, "seed": 7}), 1, "inputs", {"images": 10})
    changed = [shared_start_key(CONFIG, 2, "inputs", {"images": 10}),       # another seed's network
               shared_start_key(CONFIG, None, "inputs", {"images": 10}),    # a seed-free start
               shared_start_key(CONFIG, 1, "other", {"images": 10}),        # other model files or eval sets
               shared_start_key(CONFIG, 1, "inputs", {"images": 11}),       # other data
               shared_start_key(_with(model={"width": 16}), 1, "inputs", {"images": 10}),
               shared_start_key(_with(eval={"knn_k": 200}), 1, "inputs", {"images": 10}),
               shared_start_key(_with(train={"precision": "bf16"}), 1, "inputs", {"images": 10}),
               shared_start_key(_with(train={"device": "cuda"}), 1, "inputs", {"images": 10})]
    assert len({key, *changed}) == len(changed) + 1


def _start(value: float) -> dict:
    return {"scores": {"score": value}, "other": {}, "mode": "all", "seconds": 1.0}


def test_a_second_run_of_the_key_waits_for_the_first_and_reads_its_start(tmp_path):
    calls, said, results = [], [], {}

    def slow_measure() -> dict:
        calls.append("first")
        time.sleep(0.5)  # the second run asks meanwhile: it must wait, not measure
        return _start(42.0)

    def never() -> dict:
        calls.append("second")
        return _start(-1.0)

    first = threading.Thread(target=lambda: results.update(
        first=shared_or_measured(tmp_path, "k" * 64, slow_measure, "score", said.append)))
    first.start()
    time.sleep(0.1)
    results["second"] = shared_or_measured(tmp_path, "k" * 64, never, "score", said.append)
    first.join()
    assert calls == ["first"]
    assert results["first"] == _start(42.0)
    second = results["second"]
    assert second["scores"] == {"score": 42.0} and second["shared_from"] == str(tmp_path / f"{'k' * 16}.json")
    assert second["seconds"] >= 0.3  # the wait, not the first run's measuring
    assert said == [f"the starting encoder: score 42.00 (shared: measured by an earlier run, "
                    f"{tmp_path / ('k' * 16 + '.json')})"]


@pytest.mark.parametrize("content", ["{not json", json.dumps({"key": "x" * 64, "start": _start(1.0)}),
                                     json.dumps({"key": "k" * 64, "start": {"scores": None}}), "[1, 2]"])
def test_a_corrupt_or_foreign_file_is_measured_again_and_replaced(tmp_path, content):
    path = tmp_path / f"{'k' * 16}.json"
    path.write_text(content)
    start = shared_or_measured(tmp_path, "k" * 64, lambda: _start(3.0), "score", print)
    assert start == _start(3.0) and read_shared(path, "k" * 64) == _start(3.0)


def test_text_runs_of_other_seeds_share_one_start_equal_to_measuring_it_alone(
        tmp_path, tiny_text_config, one_torch_thread, monkeypatch):
    cfg = copy.deepcopy(tiny_text_config)
    cfg["train"]["max_steps"] = 2
    cfg["eval"]["at_end"] = True
    cache = tmp_path / "cache"
    first = run_training(TextTask, build_text_config(cfg), tmp_path / "seed1", start_cache=cache)
    alone = run_training(TextTask, build_text_config({**cfg, "train": {**cfg["train"], "seed": 2}}),
                         tmp_path / "alone")  # seed 2 measures its own start: the same numbers
    assert first["start_shared_from"] is None and alone["start_shared_from"] is None
    assert alone["start_scores"] == first["start_scores"]
    assert alone["start_scores_other"] == first["start_scores_other"]

    def never(*args, **kwargs):
        raise AssertionError("the start was measured again")

    monkeypatch.setattr(TextTask, "start_scores", never)
    other = {**cfg, "train": {**cfg["train"], "seed": 3},
             "loss": {**cfg["loss"], "strategies": [{"name": "mixcse", "lam": 0.2}]}}
    shared = run_training(TextTask, build_text_config(other), tmp_path / "seed3", start_cache=cache)
    assert shared["start_scores"] == first["start_scores"]
    assert shared["start_scores_other"] == first["start_scores_other"]
    assert shared["start_shared_from"] == str(next(cache.glob("*.json")))
    assert shared["learned"]["start"] == first["start_scores"]["stsb_dev"]
