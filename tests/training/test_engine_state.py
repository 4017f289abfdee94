"""The engine's checkpointed state is one object (:class:`EngineState`): a checkpoint keeps exactly the keys
it kept before under ``engine``, a round trip gives the same state back, and a checkpoint written in the
format before the state object (the engine's dict literal; an older hardmix's, without ``start``) resumes
to the same losses as an uninterrupted run."""

from __future__ import annotations

import copy
from dataclasses import asdict
from pathlib import Path

import pytest

from hardmix.text.config import build_text_config
from hardmix.text.task import TextTask
from hardmix.training import run_training
from hardmix.training.checkpoint import load_checkpoint, save_checkpoint
from hardmix.training.engine_state import EngineState
from hardmix.training.metrics import read_metrics

#: The keys of ``checkpoint.pt``'s ``engine`` entry as the engine wrote them before the state object (its
#: ``_save`` named each), in that order.
ENGINE_KEYS = ["best_score", "best_step", "last_score", "last_score_step", "last_eval", "best_eval",
               "window_loss", "window_steps", "wall_seconds", "nonfinite", "start"]


def _text(base: dict, **sections) -> dict:
    data = copy.deepcopy(base)
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return data


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run) if "loss" in r]


def test_the_state_round_trips_with_the_keys_of_before() -> None:
    kept = EngineState(best_score=71.25, best_step=40, last_score=70.5, last_score_step=60,
                       last_eval={"stsb_dev": 70.5, "sts12": 61.0}, best_eval={"stsb_dev": 71.25},
                       window_loss=3.5, window_steps=2, wall_seconds=12.75, nonfinite=1,
                       start={"scores": {"stsb_dev": 50.0}, "other": {}, "mode": "all", "seconds": 1.5})
    saved = kept.to_checkpoint()
    assert list(saved) == ENGINE_KEYS
    assert EngineState.from_checkpoint(saved) == kept
    assert kept.to_checkpoint(wall_seconds=20.0)["wall_seconds"] == 20.0 and kept.wall_seconds == 12.75
    assert list(asdict(EngineState())) == ENGINE_KEYS  # a new field must be added here on purpose


def test_an_older_state_takes_the_defaults_and_plain_numbers_their_types() -> None:
    older = {"best_score": None, "best_step": None, "last_score": None, "last_score_step": None,
             "last_eval": None, "best_eval": None, "window_loss": 2, "window_steps": 1.0,
             "wall_seconds": 3, "nonfinite": 0.0}  # no start: a checkpoint of an older hardmix
    kept = EngineState.from_checkpoint(older)
    assert kept.start is None
    assert (type(kept.window_loss), type(kept.window_steps), type(kept.wall_seconds), type(kept.nonfinite)) \
        == (float, int, float, int)
    assert EngineState.from_checkpoint({**older, "a later entry": 1}) == kept  # a newer one's: left aside


@pytest.mark.parametrize("with_start", [True, False])
def test_a_checkpoint_in_the_format_before_resumes_to_the_uninterrupted_losses(
        with_start, tmp_path, tiny_text_config, one_torch_thread):
    cfg = _text(tiny_text_config, train={"max_steps": 6, "save_steps": 3, "stop_after_steps": 3},
                eval={"at_end": True, "eval_steps": 3, "start": "selection"})
    straight = _text(cfg, train={"stop_after_steps": None})
    done_straight = run_training(TextTask, build_text_config(straight), tmp_path / "straight")
    run_training(TextTask, build_text_config(cfg), tmp_path / "run")
    path = tmp_path / "run" / "checkpoint.pt"
    state = load_checkpoint(path, task="text")
    kept = state["engine"]
    assert list(kept) == ENGINE_KEYS and kept["last_score_step"] == 3
    # the engine entry as the engine's dict literal wrote it before the state object, value by value
    old = {"best_score": kept["best_score"], "best_step": kept["best_step"],
           "last_score": kept["last_score"], "last_score_step": kept["last_score_step"],
           "last_eval": kept["last_eval"], "best_eval": kept["best_eval"],
           "window_loss": kept["window_loss"],
           "window_steps": kept["window_steps"], "wall_seconds": kept["wall_seconds"],
           "nonfinite": kept["nonfinite"]}
    if with_start:
        old["start"] = kept["start"]
    save_checkpoint({k: v for k, v in state.items() if k not in ("format", "version", "task")}
                    | {"engine": old}, path, task="text")
    done = run_training(TextTask, build_text_config(_text(cfg, train={"stop_after_steps": None})),
                        tmp_path / "run", resume=True)
    assert done["finished"] and done["steps"] == done_straight["steps"] == 6
    assert _losses(tmp_path / "run") == _losses(tmp_path / "straight")  # exactly, step for step
    assert done["best_score"] == done_straight["best_score"]
    assert done["final_scores"] == done_straight["final_scores"]
    assert done["wall_seconds"] > kept["wall_seconds"] > 0
    if with_start:
        assert done["start_scores"] == done_straight["start_scores"] == kept["start"]["scores"]
    else:  # an older hardmix's checkpoint holds no start: "start not measured", never measured on resume
        assert done["start_scores"] is None and done["learned"]["verdict"] is None
    resumed = load_checkpoint(path, task="text")["engine"]
    assert list(resumed) == ENGINE_KEYS and resumed["last_score_step"] == 6
