"""Fault injection: a real signal delivered at points drawn at random (a training step, an evaluation, the
final evaluation, a checkpoint write, two in a row), in both modalities. Each interrupted run must end with
one ``hardmix: error:``-free line saying how to resume, exit 128 + the signal and no traceback, and its
``--resume`` must equal an uninterrupted run: the same losses step for step and the same weights.

The points are drawn by a seeded generator, so CI runs the same ones every time."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import hardmix.training.checkpoint as atomic
from hardmix.cli import main
from hardmix.training import run_training
from hardmix.training.api import load_config_for
from hardmix.training.checkpoint import load_checkpoint
from hardmix.training.metrics import read_metrics

#: Where a signal is delivered: the n-th call of a method of the task (or of ``torch.save``).
#: ``evaluate`` calls are the periodic evaluations and, last, the final one.
HOOKS = {"build": "building the model and data", "train_step": "a training step", "evaluate": "an evaluation",
         "save": "a checkpoint write"}


def _configs(task: str, tiny_text_config: dict, tiny_vision_config: Any) -> tuple[dict, int, int]:
    """(config, steps, evaluations): 10 steps, evaluated at 4, 8 and at the end, checkpoints every 3."""
    if task == "text":
        cfg = {**tiny_text_config}
        cfg["train"] = {**cfg["train"], "max_steps": 10, "save_steps": 3, "threads": 1}
        cfg["eval"] = {"eval_steps": 4, "at_end": True}
        return cfg, 10, 3
    cfg = tiny_vision_config(train={"epochs": 2, "max_steps": 10, "save_steps": 3},
                             eval={"eval_steps": 4, "at_end": True},
                             data={"num_workers": 0, "val_samples": 32})
    return cfg, 10, 3


def _deliver(monkeypatch: pytest.MonkeyPatch, task_cls: type, hook: str, call: int,
             signals: list[int]) -> None:
    """Send ``signals`` to this process during the ``call``-th call of ``hook``."""
    calls = {"n": 0}

    def fire() -> None:
        calls["n"] += 1
        if calls["n"] == call:
            for s in signals:
                os.kill(os.getpid(), s)

    if hook == "save":
        real_save = torch.save

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
            if isinstance(obj, dict) and "processes" in obj:  # a checkpoint, mid-write
                fire()
            real_save(obj, f, *args, **kwargs)

        monkeypatch.setattr(atomic.torch, "save", save)
        return
    real = getattr(task_cls, hook)

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        fire()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(task_cls, hook, wrapped)


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run) if "loss" in r]


def _points(task: str, steps: int, evaluations: int) -> list[tuple[str, int, list[int]]]:
    """The drawn points: one of each kind (building, a step, a periodic evaluation, the final evaluation, a
    checkpoint write, two SIGINTs in a row in a step), the signal drawn among SIGTERM, SIGUSR1 and SIGINT."""
    rng = random.Random(f"hardmix-signals-{task}")
    pick = lambda: rng.choice([signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])  # noqa: E731
    return [
        ("build", 1, [pick()]),
        ("train_step", rng.randint(1, steps), [pick()]),
        ("evaluate", rng.randint(1, evaluations - 1), [pick()]),
        ("evaluate", evaluations, [pick()]),
        ("save", rng.randint(1, 3), [pick()]),
        ("train_step", rng.randint(2, steps), [signal.SIGINT, signal.SIGINT]),
    ]


@pytest.mark.parametrize("task", ["text", "vision"])
def test_a_signal_at_random_points_then_resume_equals_an_uninterrupted_run(
        task, tmp_path, tiny_text_config, tiny_vision_config, monkeypatch, capsys, vision_one_thread):
    from hardmix.training.api import resolve_task

    task_cls = resolve_task(task)
    cfg, steps, evaluations = _configs(task, tiny_text_config, tiny_vision_config)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    straight = run_training(task_cls, load_config_for(task_cls, cfg), tmp_path / "straight")
    assert straight["finished"] and straight["steps"] == steps
    reference = _losses(tmp_path / "straight")
    weights = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")["model"]
    for i, (hook, call, signals) in enumerate(_points(task, steps, evaluations)):
        run = tmp_path / f"run{i}"
        what = f"{' and '.join(signal.Signals(s).name for s in signals)} during {HOOKS[hook]} (call {call})"
        with monkeypatch.context() as mp:
            _deliver(mp, task_cls, hook, call, signals)
            capsys.readouterr()
            status = main(["train", task, str(config), "--output", str(run)])
        err = capsys.readouterr().err
        name = signal.Signals(signals[-1]).name
        assert status == 128 + signals[0], f"{what}: exit {status}: {err}"
        assert "Traceback" not in err and "--resume" in err, f"{what}: {err}"
        assert f"stopped by {'a second ' if len(signals) > 1 else ''}{name}" in err, f"{what}: {err}"
        results = run / "results.json"
        record = yaml.safe_load(results.read_text()) if results.is_file() else {}
        assert not record.get("finished"), f"{what}: reported finished"
        assert main(["train", task, str(config), "--output", str(run), "--resume"]) == 0, what
        done = yaml.safe_load((run / "results.json").read_text())
        assert done["finished"] and done["steps"] == steps == done["total_steps"], (what, done)
        assert _losses(run) == reference, f"{what}: the resumed run's losses differ"
        resumed = load_checkpoint(run / "checkpoint.pt")["model"]
        assert all(torch.equal(weights[k], resumed[k]) for k in weights), f"{what}: the weights differ"
        assert done["best_score"] == straight["best_score"], what
        assert not list(run.glob(".*.tmp")) and not (run / ".lock").exists(), what
