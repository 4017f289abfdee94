"""Meaning fixed at the start: every key that changes what a run's recorded numbers mean
is refused on ``--resume``, naming it, even where its section (``eval.*``) may otherwise change."""

from __future__ import annotations

import copy

import pytest
import yaml

from hardmix.cli import main
from hardmix.text.task import TextTask
from hardmix.training.config import (
    MEANING,
    RESUMABLE,
    flatten_keys,
    key_in,
    meaning_differences,
    plain_config,
)
from hardmix.vision.task import VisionTask


@pytest.mark.parametrize("task", [TextTask, VisionTask], ids=["text", "vision"])
def test_every_meaning_key_is_a_key_of_the_config_that_a_resume_would_otherwise_let_change(task):
    """A misspelt key would guard nothing; a key outside the resumable sections is refused already."""
    keys = {**MEANING, **task.meaning_keys}
    defaults = flatten_keys(plain_config(task.config_class()))
    for key, what in keys.items():
        assert key in defaults, key
        assert key_in(key, RESUMABLE + task.resumable_keys), key
        assert what


@pytest.mark.parametrize("task", [TextTask, VisionTask], ids=["text", "vision"])
def test_a_change_of_any_meaning_key_is_named_and_of_no_other_eval_key(task):
    saved = plain_config(task.config_class())
    keys = {**MEANING, **task.meaning_keys}
    for key in flatten_keys(saved["eval"], "eval."):
        now = copy.deepcopy(saved)
        section, name = key.split(".")
        value = now[section][name]
        now[section][name] = {True: False, False: True, None: 7}.get(value, value) if isinstance(
            value, (bool, type(None))) else (value + 1 if isinstance(value, (int, float)) else ["x"])
        got = meaning_differences(saved, now, keys)
        assert [g[0] for g in got] == ([key] if key in keys else []), (key, got)


def _stopped_text_run(tmp_path, tiny_text_config) -> list[str]:
    cfg = copy.deepcopy(tiny_text_config)
    cfg["train"].update({"max_steps": 2, "stop_after_steps": 1, "threads": 1})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    argv = ["train", "text", str(path), "--output", str(tmp_path / "run")]
    assert main(argv) != 1
    return argv


def test_resuming_with_another_dev_truncation_is_refused_naming_it(tmp_path, tiny_text_config, capsys,
                                                                   one_torch_thread):
    """Once accepted: ``eval.*`` could all change, so the best dev score recorded before the resume and the
    one after were computed on differently truncated sentences."""
    argv = _stopped_text_run(tmp_path, tiny_text_config)
    before = (tmp_path / "run" / "checkpoint.pt").read_bytes()
    capsys.readouterr()
    assert main([*argv, "--resume", "--set", "eval.max_length=16"]) == 2
    err = capsys.readouterr().err
    assert "--resume: eval.max_length was None in the run" in err and "16 now" in err, err
    assert "the truncation of the STS-B dev sentences" in err
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == before
    # a key that leaves the meaning (the evaluation's batch) still may change
    assert main([*argv, "--resume", "--set", "eval.batch_size=4"]) == 0
