"""A run folder's files follow the user's umask (a team shares run folders), atomic writes included."""

from __future__ import annotations

import os
import stat

from hardmix.text.task import TextTask
from hardmix.training import run_training
from hardmix.training.api import load_config_for


def test_every_file_of_a_run_follows_the_umask(tmp_path, tiny_text_config, one_torch_thread):
    cfg = {**tiny_text_config, "train": {**tiny_text_config["train"], "max_steps": 1, "threads": 1}}
    before = os.umask(0o002)  # group-writable, as a shared project folder has it
    try:
        run_training(TextTask, load_config_for(TextTask, cfg), tmp_path / "run")
    finally:
        os.umask(before)
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert {"checkpoint.pt", "config.yaml", "metrics.jsonl", "results.json"} <= {p.name for p in files}
    modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {oct(0o664)}, {k: v for k, v in modes.items() if v != oct(0o664)}
