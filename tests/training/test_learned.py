"""Did the run learn: the starting encoder scored like the end (``start_scores``), ``learned``, the warnings
of a run that ended at or below its start or stayed at chance, the start kept across a resume, and which
code ran (``code``)."""

from __future__ import annotations

import copy
import math
import subprocess
from pathlib import Path

import pytest
import torch

from hardmix.cli import main as cli
from hardmix.config.loader import build_config
from hardmix.text.config import build_text_config
from hardmix.text.evaluation import stsb_dev_score
from hardmix.text.model import ContrastiveSentenceModel, load_backbone
from hardmix.text.task import TextTask
from hardmix.training import read_results, run_training
from hardmix.training.checkpoint import load_checkpoint
from hardmix.training.learned import (
    CHANCE_ACCURACY_TIMES,
    CHANCE_LOSS_FRACTION,
    NOT_MEASURED,
    chance_check,
    learned_entry,
    start_end_lines,
    warnings,
)
from hardmix.utils.provenance import NOT_A_CHECKOUT, code_of
from hardmix.vision.config import VisionConfig
from hardmix.vision.task import VisionTask


def _text(base: dict, **sections) -> dict:
    data = copy.deepcopy(base)
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return data


def _start_model_score(model_dir: Path, pooling: str) -> float:
    """STS-B dev of the starting model, loaded anew from its folder, with ``pooling`` at evaluation."""
    backbone, tokenizer = load_backbone(str(model_dir), 0.1, True)
    torch.manual_seed(1)
    net = ContrastiveSentenceModel(backbone, "cls", tokenizer)
    net.eval_pooling = pooling
    return stsb_dev_score(lambda s: net.encode(s, batch_size=128))


# ------------------------------------------------------------------------------------ real runs
def test_a_text_run_scores_its_start_with_its_pooling_and_mean_pooling_and_keeps_it_on_resume(
        tmp_path, tiny_text_config, tiny_bert_dir, monkeypatch, one_torch_thread):
    cfg = _text(tiny_text_config, train={"max_steps": 6, "save_steps": 3, "stop_after_steps": 3},
                eval={"at_end": True})
    run_training(TextTask, build_text_config(cfg), tmp_path / "run")
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt", task="text")
    start = state["engine"]["start"]
    # the start, scored again from the model's own files (an independent load and encoding)
    own = _start_model_score(tiny_bert_dir, "cls_before_pooler")
    assert start["scores"]["stsb_dev"] == pytest.approx(own, abs=1e-9)
    assert start["other"]["mean pooling"]["stsb_dev"] == pytest.approx(
        _start_model_score(tiny_bert_dir, "avg"), abs=1e-9)
    assert start["mode"] == "all" and start["seconds"] >= 0

    def never(*args, **kwargs):
        raise AssertionError("the start was measured again on --resume")

    monkeypatch.setattr(TextTask, "start_scores", never)
    cfg["train"]["stop_after_steps"] = None
    done = run_training(TextTask, build_text_config(cfg), tmp_path / "run", resume=True)
    assert done["finished"] and done["start_scores"] == start["scores"]
    assert set(done["start_scores"]) == set(done["final_scores"]) == {"stsb_dev"}
    learned = done["learned"]
    end = done["final_scores"]["stsb_dev"]
    assert learned["start"] == start["scores"]["stsb_dev"] and learned["end"] == end
    assert learned["difference"] == pytest.approx(end - start["scores"]["stsb_dev"], abs=1e-12)
    assert learned["verdict"] is (end > start["scores"]["stsb_dev"])
    assert learned["against"]["mean pooling"]["difference"] == pytest.approx(
        end - start["other"]["mean pooling"]["stsb_dev"], abs=1e-12)
    assert read_results(tmp_path / "run") == done
    # the chance check read the run's own logged losses: chance is ln(batch 16)
    assert done["chance"]["negatives"] == 15 and done["chance"]["chance_loss"] == pytest.approx(math.log(16))


def test_eval_start_selection_scores_only_the_selection_and_none_measures_nothing(
        tmp_path, tiny_text_config, one_torch_thread):
    base = _text(tiny_text_config, train={"max_steps": 2},
                 eval={"at_end": True, "final_sts": True, "sts_tasks": ["STS-B"], "sts_bootstrap": 0})
    full = run_training(TextTask, build_text_config(base), tmp_path / "full")
    assert set(full["start_scores"]) == set(full["final_scores"]) == {"stsb_dev", "STS-B"}
    cheap = run_training(TextTask, build_text_config(_text(base, eval={"start": "selection"})),
                         tmp_path / "c")
    assert set(cheap["start_scores"]) == {"stsb_dev"}
    assert cheap["start_scores"]["stsb_dev"] == full["start_scores"]["stsb_dev"]  # the same start, seed 1
    # eval.start changes no result: the cells pair in a comparison
    assert cheap["fingerprint"]["config"] == full["fingerprint"]["config"]
    none = run_training(TextTask, build_text_config(_text(base, eval={"start": "none"})), tmp_path / "n")
    assert none["start_scores"] is None and none["learned"]["verdict"] is None
    assert none["learned"]["why"] == NOT_MEASURED
    assert start_end_lines(none) == [f"stsb_dev: {NOT_MEASURED}"]


def test_a_vision_run_scores_its_untrained_network_on_every_final_score(tmp_path, tiny_vision_config,
                                                                         one_torch_thread):
    cfg = tiny_vision_config(data={"val_samples": 20}, train={"epochs": 1},
                             eval={"at_end": True, "linear_epochs": 5})
    done = run_training(VisionTask, build_config(VisionConfig, cfg), tmp_path / "v")
    assert set(done["start_scores"]) == set(done["final_scores"])
    assert "linear_top1" in done["start_scores"] and done["start_scores_other"] == {}
    assert all(0 <= done["start_scores"][k] <= 100 for k in ("val_knn_top1", "knn_top1", "linear_top1"))
    learned = done["learned"]
    assert learned["score"] == "val_knn_top1"
    assert learned["difference"] == pytest.approx(done["final_scores"]["val_knn_top1"]
                                                  - done["start_scores"]["val_knn_top1"])
    assert done["chance"]["negatives"] == 96 and done["chance"]["proxy_acc"] is not None
    held = learned["held_out"]  # the test k-NN beside the selection score
    assert held["score"] == "knn_top1" and held["start"] == done["start_scores"]["knn_top1"]
    gain = done["final_scores"]["knn_top1"] - done["start_scores"]["knn_top1"]
    assert held["difference"] == pytest.approx(gain)


def test_hardmix_train_prints_start_end_and_gain(tmp_path, tiny_text_config, capsys, one_torch_thread):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_text(tiny_text_config, train={"max_steps": 2}, eval={"at_end": True})))
    assert cli(["train", "text", str(path), "--output", str(tmp_path / "r")]) == 0
    record = read_results(tmp_path / "r")
    out = capsys.readouterr().out
    lr = record["learned"]
    assert (f"stsb_dev: start {lr['start']:.2f}, end {lr['end']:.2f}, gain {lr['difference']:+.2f}") in out


# ----------------------------------------------------------------------------- constructed runs
def _record(start: float | None, end: float, losses: list[float], accs: list[float] | None,
            negatives: int) -> dict:
    lines = [{"step": i + 1, "loss": v, **({"proxy_acc": accs[i]} if accs else {})}
             for i, v in enumerate(losses)]
    return {"learned": learned_entry("val_knn_top1", None if start is None else {"val_knn_top1": start},
                                     {"val_knn_top1": end}),
            "chance": chance_check(lines, negatives)}


def test_a_run_that_learned_gets_no_warning():
    rec = _record(25.9, 33.2, [8.0 - 0.05 * i for i in range(100)], [0.01 * i for i in range(100)], 4096)
    assert rec["learned"]["verdict"] is True and rec["learned"]["difference"] == pytest.approx(7.3)
    assert rec["chance"]["at_chance"] is False  # the last tenth: loss ~3.3, accuracy ~0.95
    assert warnings(rec) == []


def test_a_run_that_ended_below_its_start_says_so_in_one_line():
    rec = _record(34.38, 30.74, [6.0 - 0.02 * i for i in range(50)], [0.3] * 50, 4096)
    assert rec["learned"]["verdict"] is False
    assert rec["learned"]["difference"] == pytest.approx(30.74 - 34.38)
    lines = warnings(rec)
    assert len(lines) == 1 and "did not learn" in lines[0] and "-3.64" in lines[0]
    # at the start exactly: not learned either
    assert learned_entry("s", {"s": 1.0}, {"s": 1.0})["verdict"] is False


def test_a_run_whose_task_stayed_at_chance_says_so_over_its_last_tenth():
    n = 4096
    chance = math.log(n + 1)
    # it learned early, then rose back to chance: only the last tenth counts
    losses = [5.9] * 90 + [0.95 * chance] * 10
    accs = [0.5] * 90 + [2.0 / (n + 1)] * 10
    rec = _record(25.0, 26.0, losses, accs, n)
    c = rec["chance"]
    assert c["at_chance"] and c["logged_steps"] == 10
    assert c["loss"] == pytest.approx(0.95 * chance) and c["chance_accuracy"] == pytest.approx(1 / (n + 1))
    lines = warnings(rec)
    assert len(lines) == 1 and "stayed at chance" in lines[0] and f"{chance:.3f}" in lines[0]
    # the rule's edges: the loss just under its fraction, or an accuracy above its multiple, is not chance
    below = chance_check([{"loss": CHANCE_LOSS_FRACTION * chance - 1e-6, "proxy_acc": 0.0}], n)
    assert below["at_chance"] is False
    above = chance_check([{"loss": chance, "proxy_acc": (CHANCE_ACCURACY_TIMES + 0.1) / (n + 1)}], n)
    assert above["at_chance"] is False
    # text logs no proxy accuracy: the loss decides
    assert chance_check([{"loss": math.log(64)}], 63)["at_chance"] is True
    assert chance_check([], 63) is None and chance_check([{"loss": 1.0}], None) is None


def test_a_selection_score_that_fell_while_the_held_out_score_rose_is_not_called_unlearned():
    # cpu_mocov2_folder.yaml at seed 2: 50 validation images fell from 34 to 30, the test k-NN rose 11.5
    start, end = {"val_knn_top1": 34.0, "knn_top1": 25.1}, {"val_knn_top1": 30.0, "knn_top1": 36.6}
    rec = {"learned": learned_entry("val_knn_top1", start, end, held_out=["knn_top1", "linear_top1"])}
    assert rec["learned"]["verdict"] is False
    assert rec["learned"]["held_out"] == {"score": "knn_top1", "start": 25.1, "end": 36.6,
                                          "difference": pytest.approx(11.5)}
    (line,) = warnings(rec)
    assert "did not learn" not in line and "val_knn_top1 ended at 30.00" in line and "+11.50" in line
    assert start_end_lines(rec)[1] == "knn_top1 (held out): start 25.10, end 36.60, gain +11.50"
    # both fell: not learned, and both said
    fell = {"learned": learned_entry("val_knn_top1", start, {"val_knn_top1": 30.0, "knn_top1": 24.0},
                                     held_out=["knn_top1"])}
    (line,) = warnings(fell)
    assert line.startswith("the run did not learn") and "-1.10" in line
    # the selection score rose, the held-out one did not: said too
    rose = {"learned": learned_entry("val_knn_top1", start, {"val_knn_top1": 40.0, "knn_top1": 25.1},
                                     held_out=["knn_top1"])}
    assert rose["learned"]["verdict"] is True
    (line,) = warnings(rose)
    assert "did not learn on its held-out score" in line and "+0.00" in line
    # a held-out score missing at either end is left out
    missing = learned_entry("val_knn_top1", start, {"val_knn_top1": 40.0}, held_out=["knn_top1"])
    assert "held_out" not in missing
    # the selection score missing at the end: no verdict, and no warning about it
    unscored = {"learned": learned_entry("val_knn_top1", start, {"knn_top1": 20.0}, held_out=["knn_top1"])}
    assert unscored["learned"]["verdict"] is None and unscored["learned"]["held_out"]["difference"] < 0
    assert warnings(unscored) == []


def test_both_warnings_and_a_start_not_measured():
    rec = _record(30.0, 29.0, [8.3] * 20, [0.0] * 20, 4096)
    assert len(warnings(rec)) == 2
    old = _record(None, 29.0, [1.0] * 5, None, 63)
    assert old["learned"]["verdict"] is None and old["learned"]["why"] == NOT_MEASURED and warnings(old) == []


# ---------------------------------------------------------------------------------------- code
def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_code_records_the_checkout_commit_and_whether_it_was_dirty(tmp_path, monkeypatch):
    repo = tmp_path / "clone"
    (repo / "hardmix").mkdir(parents=True)
    (repo / "hardmix" / "a.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    assert code_of(repo) == {"commit": head, "dirty": False} and len(head) == 40
    (repo / "untracked.txt").write_text("not code\n")  # a file git does not track: not dirty
    assert code_of(repo)["dirty"] is False
    (repo / "hardmix" / "a.py").write_text("x = 2\n")
    assert code_of(repo) == {"commit": head, "dirty": True}
    # a hardmix folder inside another repository's tree is not that repository's checkout
    inner = repo / "sub"
    (inner / ".git").mkdir(parents=True)
    assert code_of(inner)["checkout"] == NOT_A_CHECKOUT
    # a folder without .git, and a machine without git
    assert code_of(tmp_path)["commit"] is None and code_of(tmp_path)["checkout"] == NOT_A_CHECKOUT
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    fallback = code_of(repo)
    assert fallback["commit"] is None and fallback["checkout"] == NOT_A_CHECKOUT and fallback["version"]


def test_every_results_record_says_which_code_ran():
    from hardmix.training.results import results_record
    from hardmix.utils.provenance import package_root

    rec = results_record(task="t", final_scores={})
    assert rec["code"] == code_of(package_root())
    root = package_root()
    if (root / ".git").exists():  # this checkout: the commit git names
        assert rec["code"]["commit"] == _git(root, "rev-parse", "HEAD")
