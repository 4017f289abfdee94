"""The training engine, through both real tasks: one run folder and results schema, resume after SIGKILL
bit for bit, SIGTERM, a non-finite loss, the lock, safe and atomic checkpoints, the old vocabulary."""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

import hardmix
from hardmix.cli import main as cli
from hardmix.config.loader import build_config
from hardmix.strategies import MixCSE
from hardmix.text.config import build_text_config
from hardmix.text.task import TextTask
from hardmix.training import RunFolderError, read_results, run_training
from hardmix.training.checkpoint import CheckpointError, load_checkpoint
from hardmix.training.metrics import read_metrics
from hardmix.utils.errors import ConfigError, RunError
from hardmix.vision.config import VisionConfig
from hardmix.vision.task import VisionTask

COMMON_METRICS = {"step", "epoch", "loss", "lr", "wall_seconds", "pos_sim", "neg_sim", "alignment",
                  "uniformity", "anchor_grad_norm"}


def _text(base: dict, **sections) -> dict:
    data = copy.deepcopy(base)
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return data


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run) if "loss" in r]


def _subprocess(task: str, config: dict, out: Path, tmp: Path, *extra: str) -> subprocess.Popen:
    path = tmp / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "hardmix", "train", task, str(path), "--output", str(out), *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_lines(run: Path, n: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until metrics.jsonl holds n lines (the process still running)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if (run / "metrics.jsonl").is_file() and len(_losses(run)) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before step {n}: {proc.stderr.read()}")
        time.sleep(0.01)
    pytest.fail("timed out")


# ------------------------------------------------------------------------------------------ layout
def test_both_tasks_write_one_layout_and_one_results_schema(tmp_path, tiny_text_config, tiny_vision_config,
                                                            data_root, one_torch_thread):
    text = run_training(TextTask, build_text_config(_text(tiny_text_config, train={"max_steps": 4},
                                                          eval={"at_end": True})), tmp_path / "text")
    vision_cfg = tiny_vision_config(data={"val_samples": 20}, train={"epochs": 1},
                                    eval={"at_end": True, "linear_epochs": 5})
    vision = run_training(VisionTask, build_config(VisionConfig, vision_cfg), tmp_path / "vision")
    top = {"config.yaml", "metrics.jsonl", "checkpoint.pt", "results.json"}
    assert top <= {p.name for p in (tmp_path / "text").iterdir()}
    assert top <= {p.name for p in (tmp_path / "vision").iterdir()}
    assert not (tmp_path / "text" / ".lock").exists() and not (tmp_path / "vision" / ".lock").exists()
    for run, returned, task, metric, scores in (
        ("text", text, "text", "stsb_dev", {"stsb_dev"}),
        ("vision", vision, "vision", "val_knn_top1",
         {"val_knn_top1", "val_knn_top5", "knn_top1", "knn_top1_se", "knn_top5", "knn_top5_se", "linear_top1",
          "linear_top1_se"}),
    ):
        record = read_results(tmp_path / run)  # the same reader for both
        assert record == returned
        assert record["task"] == task and record["selection_metric"] == metric and record["finished"]
        assert set(record["final_scores"]) == scores
        assert record["best_score"] == record["final_scores"][metric]
        assert record["versions"]["torch"] == str(torch.__version__) and record["seed"] in (0, 1)
        # what the floats depend on beyond the config: read here another way (PyTorch's own dispatch
        # and the run's thread setting), so two records say whether they can agree bitwise
        assert record["machine"]["cpu_kernels"] == torch.backends.cpu.get_cpu_capability()
        assert record["machine"]["threads"] == torch.get_num_threads() and record["machine"]["cpu"]
        fp = record["fingerprint"]  # what determines the result, compared by hardmix compare
        assert set(fp) == {"config", "data", "inputs", "hardmix"} and len(fp["config"]) == 64 and fp["data"]
        assert record["wall_seconds"] > 0 and record["steps"] == record["total_steps"]
        lines = read_metrics(tmp_path / run)
        assert COMMON_METRICS <= set(lines[0]), set(lines[0]) ^ COMMON_METRICS
        evals = [r for r in lines if metric in r]
        assert evals[-1]["step"] == record["steps"] and evals[-1][metric] == record["best_score"]
        state = load_checkpoint(tmp_path / run / "checkpoint.pt", task=task)
        assert state["step"] == record["steps"]
    assert (tmp_path / "text" / "best" / "hardmix.json").is_file()


# ------------------------------------------------------------------------------------------ resume
@pytest.mark.parametrize("task", ["text", "vision"])
def test_sigkill_at_a_random_moment_then_resume_equals_an_uninterrupted_run(task, tmp_path, tiny_text_config,
                                                                             tiny_vision_config):
    if task == "text":
        cfg = _text(tiny_text_config, train={"max_steps": 24, "save_steps": 4, "threads": 1},
                    loss={"strategies": [{"name": "mochi", "n_hard": 12, "n_pair": 8, "n_query": 4}]})
        build, cls = build_text_config, TextTask
    else:
        cfg = tiny_vision_config(train={"epochs": 3, "save_steps": 4},
                         loss={"strategies": [{"name": "mochi", "n_hard": 16, "n_pair": 8, "n_query": 4}]})
        build, cls = (lambda d: build_config(VisionConfig, d)), VisionTask
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_training(cls, build(cfg), tmp_path / "straight")
        kill_after = random.Random().randint(5, 20)  # a random moment, after at least one checkpoint
        proc = _subprocess(task, cfg, tmp_path / "killed", tmp_path)
        _wait_for_lines(tmp_path / "killed", kill_after, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        total = 24 if task == "text" else 30
        assert kill_after <= len(_losses(tmp_path / "killed")) < total  # killed mid-run
        killed = load_checkpoint(tmp_path / "killed" / "checkpoint.pt")
        assert killed["step"] % 4 == 0
        # the periodic checkpoint carries the killed process's training time, so the resumed total keeps it
        logged = [r["wall_seconds"] for r in read_metrics(tmp_path / "killed")
                  if "loss" in r and r["step"] <= killed["step"]]
        assert killed["engine"]["wall_seconds"] >= logged[-1] > 0
        done = run_training(cls, build(cfg), tmp_path / "killed", resume=True)
    finally:
        torch.set_num_threads(before)
    assert done["finished"] and done["wall_seconds"] > killed["engine"]["wall_seconds"]
    straight, resumed = _losses(tmp_path / "straight"), _losses(tmp_path / "killed")
    assert len(straight) == done["steps"] and resumed == straight  # exactly, step for step
    a = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")["model"]
    b = load_checkpoint(tmp_path / "killed" / "checkpoint.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sigterm_checkpoints_at_the_step_and_says_how_to_resume(tmp_path, tiny_text_config, one_torch_thread):
    cfg = _text(tiny_text_config, train={"max_steps": 40, "save_steps": 0, "threads": 1})
    run_training(TextTask, build_text_config(cfg), tmp_path / "straight")
    proc = _subprocess("text", cfg, tmp_path / "term", tmp_path)
    _wait_for_lines(tmp_path / "term", 5, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err and "--resume" in err and "Traceback" not in err
    record = read_results(tmp_path / "term")
    assert record["interrupted"] == "SIGTERM" and not record["finished"]
    assert load_checkpoint(tmp_path / "term" / "checkpoint.pt")["step"] == record["steps"] < 40
    assert run_training(TextTask, build_text_config(cfg), tmp_path / "term", resume=True)["finished"]
    assert _losses(tmp_path / "term") == _losses(tmp_path / "straight")


def test_resuming_a_finished_run_says_so_and_exits_0(tmp_path, tiny_text_config, capsys, one_torch_thread):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_text(tiny_text_config, train={"max_steps": 2})))
    assert cli(["train", "text", str(path), "--output", str(tmp_path / "run")]) == 0
    before = (tmp_path / "run" / "checkpoint.pt").stat().st_mtime_ns
    capsys.readouterr()
    assert cli(["train", "text", str(path), "--output", str(tmp_path / "run"), "--resume"]) == 0
    assert "finished already" in capsys.readouterr().err
    assert (tmp_path / "run" / "checkpoint.pt").stat().st_mtime_ns == before
    # Without its checkpoint (a comparison's cells never keep one) a finished run was
    # retrained from step 0 over its results; it is final, in the folder it was copied to as well.
    results = (tmp_path / "run" / "results.json").read_bytes()
    (tmp_path / "run" / "checkpoint.pt").unlink()
    (tmp_path / "run").rename(tmp_path / "copied")
    assert cli(["train", "text", str(path), "--output", str(tmp_path / "copied"), "--resume"]) == 0
    said = capsys.readouterr()
    assert f"{tmp_path / 'copied'} finished already (2 steps); nothing to do" in said.err
    # its report names where it is now, and the files it holds (the record still says where it ran)
    assert f"model: {tmp_path / 'copied' / 'best'}\n" in said.out
    assert f"run folder: {tmp_path / 'copied'} (config.yaml, metrics.jsonl, results.json, best/)" in said.out
    assert str(tmp_path / "run") not in said.out
    shutil.rmtree(tmp_path / "copied" / "best")  # as a comparison's finished cells keep no model
    assert cli(["train", "text", str(path), "--output", str(tmp_path / "copied"), "--resume"]) == 0
    said = capsys.readouterr().out
    assert f"model: not kept ({tmp_path / 'copied' / 'best'} is not there)\n" in said
    assert f"run folder: {tmp_path / 'copied'} (config.yaml, metrics.jsonl, results.json)\n" in said
    assert (tmp_path / "copied" / "results.json").read_bytes() == results
    assert not (tmp_path / "copied" / "checkpoint.pt").exists()


def test_resume_refuses_changed_keys_naming_each(tmp_path, tiny_text_config, one_torch_thread):
    cfg = _text(tiny_text_config, train={"max_steps": 4, "stop_after_steps": 2})
    run_training(TextTask, build_text_config(cfg), tmp_path / "run")
    changed = _text(cfg, train={"seed": 5}, loss={"temperature": 0.1})
    with pytest.raises(ConfigError, match=r"loss\.temperature, train\.seed"):
        run_training(TextTask, build_text_config(changed), tmp_path / "run", resume=True)
    # Budget and logging keys may change.
    ok = _text(cfg, train={"stop_after_steps": None, "save_steps": 1}, log={"log_steps": 2})
    assert run_training(TextTask, build_text_config(ok), tmp_path / "run", resume=True)["finished"]


# ----------------------------------------------------------------------------------- non-finite loss
def test_a_nonfinite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, tiny_text_config,
                                                                           monkeypatch, one_torch_thread):
    original = TextTask.train_step

    def nan_at_step_5(self, batch, step):
        result = original(self, batch, step)
        if step == 4:
            result.loss = result.loss * float("nan")
        return result

    monkeypatch.setattr(TextTask, "train_step", nan_at_step_5)
    cfg = _text(tiny_text_config, train={"max_steps": 8, "save_steps": 2})
    with pytest.raises(RunError, match=r"nan at step 5 .*checkpoint\.pt \(step 4\).*lower train\.lr"):
        run_training(TextTask, build_text_config(cfg), tmp_path / "run")
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["step"] == 4
    assert not (tmp_path / "run" / "best").exists() and not (tmp_path / "run" / ".lock").exists()
    # Allowed to skip one: the run finishes, with one update fewer.
    cfg["train"]["max_nonfinite_steps"] = 1
    done = run_training(TextTask, build_text_config(cfg), tmp_path / "skip")
    assert done["finished"] and done["steps"] == 8 and len(_losses(tmp_path / "skip")) == 7


def test_the_cli_reports_a_diverged_run_in_one_line(tmp_path, tiny_text_config, capsys, one_torch_thread):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_text(tiny_text_config, train={"max_steps": 30, "lr": 1e9})))
    assert cli(["train", "text", str(path), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and err[-1].startswith("hardmix: error: the loss is nan at step")


# ------------------------------------------------------------------------------ folder and checkpoint
def test_a_live_lock_refuses_a_second_process_and_a_dead_one_is_taken_over(tmp_path, tiny_text_config,
                                                                            one_torch_thread):
    run = tmp_path / "run"
    run.mkdir()
    cfg = build_text_config(_text(tiny_text_config, train={"max_steps": 2}))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run / ".lock").write_text(json.dumps({"pid": sleeper.pid, "host": os.uname().nodename}))
        with pytest.raises(RunError, match=f"in progress there \\(process {sleeper.pid}"):
            run_training(TextTask, cfg, run)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not (run / "metrics.jsonl").exists()
    assert run_training(TextTask, cfg, run)["finished"]  # the dead process's lock is taken over


def test_a_crash_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, tiny_text_config, monkeypatch,
                                                                   one_torch_thread):
    from hardmix.training import checkpoint as atomic

    cfg = _text(tiny_text_config, train={"max_steps": 6, "save_steps": 2})
    real_save, calls = torch.save, []

    def dies_on_the_second_write(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            f.write(b"PK\x03\x04 half a checkpoint")
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(atomic.torch, "save", dies_on_the_second_write)
    with pytest.raises(OSError, match="No space left"):
        run_training(TextTask, build_text_config(cfg), tmp_path / "run")
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["step"] == 2
    assert not list((tmp_path / "run").glob(".checkpoint.pt.*"))  # no temporary file left behind


def test_foreign_and_other_task_checkpoints_get_one_line(tmp_path, tiny_text_config, tiny_vision_config,
                                                         one_torch_thread):
    run = tmp_path / "run"
    run.mkdir()
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"format": "hardmix-checkpoint", "x": Exploit()}, run / "checkpoint.pt")
    cfg = build_text_config(_text(tiny_text_config, train={"max_steps": 2}))
    with pytest.raises(CheckpointError, match="not a readable hardmix checkpoint"):
        run_training(TextTask, cfg, run, resume=True)
    assert not marker.exists()  # the pickle never ran
    (run / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="not a readable"):
        run_training(TextTask, cfg, run, resume=True)
    (run / "checkpoint.pt").unlink()
    run_training(TextTask, cfg, run)
    vision = build_config(VisionConfig, tiny_vision_config())
    with pytest.raises(CheckpointError, match="holds a text run's checkpoint, not a vision run's"):
        run_training(VisionTask, vision, run, resume=True)
    with pytest.raises(RunFolderError, match="already holds a run"):
        run_training(TextTask, cfg, run)


def test_an_older_run_folder_is_named(tmp_path, tiny_text_config):
    (tmp_path / "last.pt").write_bytes(b"old")
    with pytest.raises(RunFolderError, match="last.pt: a run of an older hardmix"):
        run_training(TextTask, build_text_config(tiny_text_config), tmp_path)


# -------------------------------------------------------------------------------------- vocabulary
@pytest.mark.parametrize("task, data, message", [
    ("vision", {"train": {"log_every": 5}}, "train.log_every was renamed to log.log_steps"),
    ("vision", {"model": {"queue_size": 4096}}, "model.queue_size was renamed to loss.queue_size"),
    ("vision", {"train": {"amp": True}}, "train.amp was renamed to train.precision"),
    ("vision", {"eval": {"knn_every_epochs": 1}}, "eval.knn_every_epochs was renamed to eval.eval_steps"),
    ("text", {"train": {"cpu_threads": 1}}, "train.cpu_threads was renamed to train.threads"),
    ("text", {"loss": {"symmetric": True}}, "loss.symmetric was renamed: loss.both_directions (text"),
    ("vision", {"loss": {"symmetric": True}}, "loss.symmetric was renamed: .* or loss.two_queries (vision"),
])
def test_a_key_of_the_old_vocabulary_names_its_new_name(task, data, message):
    pattern = message.replace(".", r"\.").replace(r"\.*", ".*").replace("(", r"\(")
    with pytest.raises(ConfigError, match=pattern):
        hardmix.training.load_config_for(task, data)
    with pytest.raises(ConfigError, match=pattern):
        key = message.split(" ")[0]
        hardmix.training.load_config_for(task, None, [f"{key}=1"])


def test_tensorboard_missing_names_the_extra_before_any_work(tmp_path, tiny_text_config, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if the package were absent
    cfg = build_text_config(_text(tiny_text_config, log={"tensorboard": True}))
    with pytest.raises(ConfigError, match=r"log\.tensorboard: .*hardmix\[tensorboard\]"):
        run_training(TextTask, cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------- API
def test_the_python_api_returns_the_results_record(tmp_path, tiny_text_config, one_torch_thread):
    results = hardmix.train("text", tiny_text_config, overrides={"train.max_steps": 3, "loss.strategies":
                            [{"name": "mixcse", "lam": 0.3}]}, output=tmp_path / "run")
    assert results == read_results(tmp_path / "run") and results["steps"] == 3
    assert results["strategies"] == [MixCSE(lam=0.3).config()]  # every argument, as built
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["train"]["max_steps"] == 3


def test_a_full_disk_while_the_best_model_is_written_is_one_line_and_the_run_resumes(
    tmp_path, tiny_text_config, capsys, monkeypatch, one_torch_thread
):
    """Fault injection: the export of ``best/`` fails as a full disk makes safetensors
    fail; the run stops with one line naming the folder and its last checkpoint, no half ``best/`` is
    left, and ``--resume`` finishes it with the losses of an uninterrupted run."""
    import hardmix.text.task as text_task

    cfg = _text(tiny_text_config, train={"max_steps": 4, "save_steps": 2}, eval={"eval_steps": 2})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli(["train", "text", str(path), "--output", str(tmp_path / "straight")]) == 0
    real, calls = text_task.export_model, []

    class SafetensorError(Exception):  # what safetensors raises: not an OSError
        pass

    def full_disk(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")
        return real(*args, **kwargs)

    monkeypatch.setattr(text_task, "export_model", full_disk)
    capsys.readouterr()
    assert cli(["train", "text", str(path), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"writing {tmp_path / 'run' / 'best'} failed at step 2 (SafetensorError: " in err, err
    assert "no checkpoint was written yet" in err and "--resume" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "results.json").exists() or not read_results(tmp_path / "run")["finished"]
    assert not any(p.name.startswith(".best") for p in (tmp_path / "run").iterdir())
    monkeypatch.setattr(text_task, "export_model", real)
    assert cli(["train", "text", str(path), "--output", str(tmp_path / "run"), "--resume"]) == 0
    assert read_results(tmp_path / "run")["finished"]
    assert _losses(tmp_path / "run") == _losses(tmp_path / "straight")
