"""``benchmarks/gpu_check.sh --dry``: every stage of the GPU check runs its code on the CPU at tiny sizes,
so that an API change breaks CI between GPU runs; and the data helper copies a class-balanced tree."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import require_data_path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["device_tests", "loss_overhead", "text_steps", "vision_steps", "profile", "paths", "training",
          "distributed"]
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One dry run of the whole script (it copies its own tiny tree from HARDMIX_DATA)."""
    data = require_data_path("images", "cifar10").parents[1]
    require_data_path("wiki", "wiki1m-head-11914.txt")  # the text_train case's sentences
    base = tmp_path_factory.mktemp("gpu_check")
    env = {**os.environ, "HARDMIX_DATA": str(data), "PYTHON": sys.executable, "OUT": str(base / "out"),
           "WORK": str(base / "work")}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks/gpu_check.sh"), "--dry"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    return proc, base / "out"


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _load(out: Path, name: str) -> dict:
    return json.loads((out / name).read_text())


def test_dry_mode_runs_every_stage_and_writes_at_most_10_files(dry_run) -> None:
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = _load(out, "gpu_check.json")
    assert summary["mode"] == "dry" and list(summary["stages"]) == STAGES
    status = {name: e["status"] for name, e in summary["stages"].items()}
    assert status == {**dict.fromkeys(STAGES, "ok"), "distributed": "skipped"}
    assert summary["failed_stages"] == []
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 10 and "gpu_check.log" in files
    for e in summary["stages"].values():
        assert e["json"] is None or e["json"] in files
    log = (out / "gpu_check.log").read_text()
    assert "CUDA steps skipped" in log and "NCCL 2-process run skipped" in log
    device = summary["stages"]["device_tests"]["headline"]
    assert device["tests"] >= 15 and device["failed"] == [] and device["cuda_tests"] == 0


def test_dry_mode_measures_the_loss_and_every_step_group(dry_run) -> None:
    _, out = dry_run
    loss = _load(out, "loss_overhead.json")
    cases = {c["case"]: c for c in loss["cases"]}
    methods = ("none-single", "none-sym", "mixcse-single", "mixcse-bi", "mixcse-adaptive-bi",
               "mixcse-sched-bi", "hcl-single", "dcl-single", "fnf-single")
    assert set(cases) == {f"text-64/{m}" for m in methods}
    assert all(c["median_s"] > 0 for c in cases.values()) and cases["text-64/mixcse-bi"]["time_ratio"] > 0

    text = _load(out, "text_steps.json")
    assert list(text["groups"]) == ["b64", "b512", "b64x8-gathered"]
    for name, group in text["groups"].items():
        assert group["status"] == "ok", (name, group.get("error"))
        rows = {r["variant"]: r for r in group["rows"]}
        assert list(rows) == ["floor", "none", "mixcse", "mochi"]
        assert rows["floor"]["vs_floor"] == 1.0
        for r in rows.values():
            assert all(math.isfinite(t) and t > 0 for t in r["step_times_s"])
            assert r["items_per_s"] == pytest.approx(group["batch"] / r["median_step_s"])
    assert text["groups"]["b64x8-gathered"]["gathered_rows"] > 0

    vision = _load(out, "vision_steps.json")
    assert list(vision["groups"]) == ["resnet50-224", "resnet18-32"]
    for name, group in vision["groups"].items():
        assert group["status"] == "ok", (name, group.get("error"))
        assert [r["variant"] for r in group["rows"]] == ["floor", "none", "mochi"]
        assert all(r["median_step_s"] > 0 for r in group["rows"]) and group["augment_only_images_per_s"] > 0
    pil = vision["pil_pinned"]
    assert pil["status"] == "ok" and pil["images_per_s"] > 0 and pil["pin_memory"] is False


def test_dry_mode_profiles_the_vision_and_text_steps(dry_run) -> None:
    _, out = dry_run
    profile = _load(out, "profile.json")
    assert list(profile["steps"]) == ["vision_resnet18_32_none", "text_b64_none"]
    for name, e in profile["steps"].items():
        assert e["status"] == "ok", (name, e.get("error"))
        assert e["ops_per_step"] > 100 and e["step_ms"] > 0 and e["steps"] == 2
        # on the CPU: no kernels or synchronizations to count, but the calls that would wait are counted
        assert e["kernels_per_step"] is None and e["syncs_per_step"] is None
        assert set(e["waiting_ops_per_step"]) == {"aten::_local_scalar_dense", "aten::nonzero"}
        calls = [op["calls_per_step"] for op in e["top_ops"]]
        assert calls and all(c > 0 for c in calls)
        times = [op["self_cpu_ms_per_step"] for op in e["top_ops"]]
        assert times == sorted(times, reverse=True)
    headline = _load(out, "gpu_check.json")["stages"]["profile"]["headline"]
    assert headline["text_b64_none"]["ops_per_step"] == profile["steps"]["text_b64_none"]["ops_per_step"]


def test_dry_mode_covers_the_text_trainer_the_probe_features_and_resume(dry_run) -> None:
    _, out = dry_run
    cases = _load(out, "paths.json")["cases"]
    assert list(cases) == ["text_train", "linear_probe", "resume"]
    assert {n: c["status"] for n, c in cases.items()} == dict.fromkeys(cases, "ok")
    text = cases["text_train"]
    assert text["precision"] == "bf16" and text["steps"] == len(text["losses"]) == 6
    assert text["sentences"] == 200 and all(math.isfinite(x) for x in text["losses"])
    probe = cases["linear_probe"]
    assert probe["same_step_equal"] and probe["other_step_differs"] and probe["min_cosine_vs_cpu_fp32"] > 0.99
    resume = cases["resume"]
    assert resume["stopped_after"] == resume["steps"] // 2 and resume["returncodes"] == [0, 0, 0]
    # on the CPU the resumed run is bitwise the uninterrupted one
    assert resume["bitwise"] and resume["losses_resumed"] == resume["losses_uninterrupted"]
    assert len(resume["losses_resumed"]) == resume["steps"] == 4
    headline = _load(out, "gpu_check.json")["stages"]["paths"]["headline"]
    assert {n: h["status"] for n, h in headline.items()} == dict.fromkeys(cases, "ok")


def test_the_caps_add_up_to_the_bound_and_hold_the_measured_stages() -> None:
    """From the first GPU run's figures (results/gpu_check_2026-12-06): every stage of the next run,
    projected, within its cap, and the caps with the set-up within the 6 minutes."""
    import gpu_budget
    import gpu_check

    rows = gpu_budget.measured()
    assert [r["stage"] for r in rows] == ["set-up", *gpu_check.CAPS]
    for r in rows:
        assert 0 < r["projected_s"] <= r["cap_s"], r
    assert sum(gpu_check.CAPS.values()) + gpu_check.SETUP_S <= gpu_check.BOUND_S == 360
    assert sum(r["cap_s"] for r in rows) <= 360
    # text_steps then: its first two groups took 27.8 s and the stage hit its 35 s cap; now its three
    # groups fit the cap, and each stage that ran ok then is within its cap now
    text = next(r for r in rows if r["stage"] == "text_steps")
    assert text["measured_s"] >= 35 and text["projected_s"] < gpu_check.CAPS["text_steps"]
    for r in rows:
        if r["measured_s"] is not None and r["stage"] not in ("text_steps", "training"):
            assert r["measured_s"] <= r["cap_s"], r


def test_dry_mode_trains_mocov2_and_mochi_and_scores_them(dry_run) -> None:
    _, out = dry_run
    training = _load(out, "training.json")
    assert training["plan"]["epochs"] == 1 and training["train_images"] == 320
    assert 0 <= training["untrained"]["knn_top1"] <= 100 and training["untrained"]["queries"] == 80
    assert set(training["runs"]) == {"mocov2", "mochi"}
    for name, run in training["runs"].items():
        assert run["returncode"] == 0, name
        # 320 images less the 40 of the validation split, in batches of 32
        assert run["steps"] == (320 - 40) // 32 and 0 <= run["knn_top1"] <= run["knn_top5"] <= 100
        curve = run["proxy_acc"]
        assert [p[0] for p in curve] == list(range(2, run["steps"] + 1, 2))  # every log step (2) to the last
        assert all(0 <= p[2] <= 1 for p in curve) and isinstance(run["premise_reached"], bool)
    assert training["mochi"][0]["name"] == "mochi"
    # did they learn: recorded with its margin, not enforced in dry mode (tiny runs cannot learn)
    learned = training["learned"]
    assert learned["margin_points"] == 1.0 and learned["enforced"] is False
    assert learned["untrained_knn_top1"] == training["untrained"]["knn_top1"]
    for name, run in training["runs"].items():
        gain = run["knn_top1"] - training["untrained"]["knn_top1"]
        assert learned["runs"][name]["gain"] == pytest.approx(gain)
        assert learned["runs"][name]["learned"] is (gain >= 1.0)
    assert learned["verdict"] is all(gain["learned"] for gain in learned["runs"].values())
    stage = _load(out, "gpu_check.json")["stages"]["training"]
    assert stage["status"] == "ok" and stage["headline"]["learned"]["verdict"] == learned["verdict"]
    distributed = _load(out, "distributed.json")
    assert distributed["status"] == "skipped" and distributed["gpus"] == 0
    assert "torch.distributed.run" in distributed["command"]


def test_prepare_data_copies_a_class_balanced_tree(tmp_path) -> None:
    import gpu_data

    src = require_data_path("images", "cifar10")
    dest = tmp_path / "gpu_data"
    info = gpu_data.prepare(src, dest, {"train": 3, "test": 2})
    root = dest / "images" / "cifar10"
    classes = (root / "classes.txt").read_text().split()
    assert classes == (src / "classes.txt").read_text().split() and len(classes) == 10
    for split, n in (("train", 3), ("test", 2)):
        for c in classes:
            files = sorted((root / split / c).iterdir())
            assert [f.name for f in files] == sorted(f.name for f in (src / split / c).iterdir())[:n]
            assert all(f.is_file() and not f.is_symlink() for f in files)
    assert info["images"] == {"train": 30, "test": 20}
    assert info["bytes"] == sum(f.stat().st_size for f in root.rglob("*.jpg"))
    # A second call replaces the copy with exactly the new subset.
    gpu_data.prepare(src, dest, {"train": 1, "test": 1})
    assert len(list((root / "train").rglob("*.jpg"))) == 10


def test_prepare_data_copies_the_text_cases_tokenizer_and_sentences(tmp_path) -> None:
    import gpu_data

    root = require_data_path(*gpu_data.TOKENIZER_SOURCE.parts).parents[1]
    require_data_path(*gpu_data.SENTENCES_SOURCE.parts)
    info = gpu_data.prepare_text(root, tmp_path, 7)
    out = tmp_path / "text"
    for name in gpu_data.TOKENIZER_FILES:
        copied = (out / "tokenizer" / name).read_bytes()
        assert copied == (root / gpu_data.TOKENIZER_SOURCE / name).read_bytes()
    assert not (out / "tokenizer" / "model.safetensors").exists()  # no weights travel
    source = [x for x in (root / gpu_data.SENTENCES_SOURCE).read_text().splitlines() if x.strip()][:7]
    assert (out / "sentences.txt").read_text().splitlines() == source and info["sentences"] == 7
    assert info["bytes"] == sum(f.stat().st_size for f in out.rglob("*") if f.is_file())


def test_prepare_data_takes_the_stand_in_tokenizer_where_the_shared_model_is_absent(tmp_path) -> None:
    import shutil

    import gpu_data

    shared = require_data_path(*gpu_data.TOKENIZER_SOURCE.parts)
    sentences = require_data_path(*gpu_data.SENTENCES_SOURCE.parts)
    root = tmp_path / "data"
    (root / gpu_data.TOKENIZER_STAND_IN).mkdir(parents=True)
    for name in gpu_data.TOKENIZER_REQUIRED:  # what `hardmix data download bert-mini` leaves, less weights
        shutil.copyfile(shared / name, root / gpu_data.TOKENIZER_STAND_IN / name)
    (root / gpu_data.SENTENCES_SOURCE).parent.mkdir(parents=True)
    shutil.copyfile(sentences, root / gpu_data.SENTENCES_SOURCE)
    info = gpu_data.prepare_text(root, tmp_path / "out", 3)
    assert info["files"] == ["config.json", "vocab.txt", "sentences.txt"]
    assert info["source"] == str(root / gpu_data.TOKENIZER_STAND_IN)
    (root / gpu_data.TOKENIZER_STAND_IN / "vocab.txt").unlink()
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        gpu_data.prepare_text(root, tmp_path / "out", 3)


def test_the_epoch_plan_fills_the_seconds_at_the_measured_rate() -> None:
    import gpu_training

    plan = gpu_training.plan_epochs(20_000.0, 60.0, 20_000, dry=False)
    assert plan["epochs"] == int(60.0 * gpu_training.SAFETY)  # one epoch a second
    assert gpu_training.plan_epochs(1.0, 60.0, 20_000, dry=False)["epochs"] == 1
    assert gpu_training.plan_epochs(1e9, 60.0, 20_000, dry=False)["epochs"] == gpu_training.MAX_EPOCHS
    assert gpu_training.plan_epochs(None, 60.0, 20_000, dry=True)["epochs"] == 1


def test_a_full_mode_stage_runs_in_its_own_process_and_writes_its_json(tmp_path) -> None:
    """The full mode's path (a subprocess per stage, headline, summary) on the one stage that needs no GPU
    to decide: with fewer than 2 GPUs the NCCL run is skipped, after building its config."""
    import gpu_check

    out, work = tmp_path / "out", tmp_path / "work"
    assert gpu_check.main(["--out", str(out), "--work", str(work), "--only", "distributed"]) == 0
    summary = _load(out, "gpu_check.json")
    entry = summary["stages"]["distributed"]
    assert summary["mode"] == "full" and list(summary["stages"]) == ["distributed"]
    assert entry["status"] == "skipped" and entry["returncode"] == 0 and "--dry" not in entry["argv"]
    assert _load(out, "distributed.json")["status"] == "skipped"


def test_run_capped_kills_the_stage_and_its_children_at_the_cap(tmp_path) -> None:
    import gpu_check

    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    assert gpu_check.run_capped([sys.executable, "-c", script], timeout=3) == "timeout"
    child = int(pid_file.read_text())
    for _ in range(50):  # a killed process stays a zombie until it is reaped: that counts as stopped
        if not _running(child):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the stage's child {child} survived the cap")
    assert gpu_check.run_capped([sys.executable, "-c", "pass"], timeout=30) == 0


def test_a_failing_case_is_recorded_and_each_case_is_written_as_it_ends(tmp_path, monkeypatch) -> None:
    """The paths stage writes its JSON after every case (a stage stopped at its cap keeps the cases it
    finished); a case that fails (here: no carried tokenizer) says why in one line and the next runs."""
    import argparse
    import copy

    import gpu_data
    import gpu_paths
    import torch

    data = tmp_path / "data"
    gpu_data.prepare(require_data_path("images", "cifar10"), data, {"train": 4, "test": 1})  # no text/
    monkeypatch.setenv("HARDMIX_DATA", str(data))
    snapshots: list[dict] = []
    args = argparse.Namespace(dry=True, work=str(tmp_path / "work"), cases="text_train,linear_probe")
    rc = gpu_paths.cmd_paths(args, torch.device("cpu"), lambda r: snapshots.append(copy.deepcopy(r)))
    assert rc == 1
    assert [list(s["cases"]) for s in snapshots] == [["text_train"], ["text_train", "linear_probe"]]
    text, probe = snapshots[-1]["cases"]["text_train"], snapshots[-1]["cases"]["linear_probe"]
    assert text["status"] == "failed" and text["error"].startswith("FileNotFoundError: ")
    assert "no carried tokenizer" in text["error"] and "\n" not in text["error"]
    assert probe["status"] == "ok" and probe["images"] == 32


def _constructed_training(untrained: float, runs: dict[str, float]):
    """A stand-in for the full mode's training subprocess: it writes a training.json of runs with these
    k-NN top-1 scores (judged by gpu_training's own check) and exits 0."""
    import gpu_training

    def run(cmd: list[str], timeout: float) -> int:
        out = Path(cmd[cmd.index("--out") + 1])
        record = {"mode": "full", "untrained": {"knn_top1": untrained},
                  "runs": {n: {"knn_top1": k, "returncode": 0} for n, k in runs.items()}}
        record["learned"] = gpu_training.learned_check(record["untrained"], record["runs"], enforced=True)
        out.write_text(json.dumps(record))
        return 0

    return run


def test_a_full_mode_run_below_its_untrained_network_fails_the_training_stage(tmp_path, monkeypatch) -> None:
    import gpu_check

    # the H100 check of 2026-12-06: MoCo-v2 30.74, MoCHi 32.20, the untrained network 34.38
    monkeypatch.setattr(gpu_check, "run_capped", _constructed_training(34.38, {"mocov2": 30.74,
                                                                               "mochi": 32.20}))
    out, work = tmp_path / "out", tmp_path / "work"
    assert gpu_check.main(["--out", str(out), "--work", str(work), "--only", "training"]) == 1
    entry = _load(out, "gpu_check.json")["stages"]["training"]
    assert entry["returncode"] == 0 and entry["status"] == "failed"  # the exit status alone said ok
    assert entry["why"] == ("did not learn: k-NN top-1 of mocov2 30.74 (-3.64), mochi 32.20 (-2.18) against "
                            "the untrained network's 34.38; a run must beat it by 1 points")
    assert entry["headline"]["learned"]["margin_points"] == 1.0
    assert _load(out, "gpu_check.json")["failed_stages"] == ["training"]
    # within the margin is not enough; beyond it, the stage is ok
    monkeypatch.setattr(gpu_check, "run_capped", _constructed_training(25.9, {"mocov2": 26.5, "mochi": 33.2}))
    assert gpu_check.main(["--out", str(out), "--work", str(work), "--only", "training"]) == 1
    assert "mocov2 26.50 (+0.60)" in _load(out, "gpu_check.json")["stages"]["training"]["why"]
    monkeypatch.setattr(gpu_check, "run_capped", _constructed_training(25.9, {"mocov2": 33.2, "mochi": 34.1}))
    assert gpu_check.main(["--out", str(out), "--work", str(work), "--only", "training"]) == 0
    entry = _load(out, "gpu_check.json")["stages"]["training"]
    assert entry["status"] == "ok" and "why" not in entry and entry["headline"]["learned"]["verdict"] is True


def test_judge_recomputes_the_verdict_of_the_h100_record(tmp_path) -> None:
    import gpu_training

    record = ROOT / "results" / "gpu_check_2026-12-06" / "training.json"  # the committed H100 record
    copy = tmp_path / "training.json"
    copy.write_text(record.read_text())
    assert gpu_training.main(["judge", "--out", str(copy)]) == 1
    learned = json.loads(copy.read_text())["learned"]
    saved = json.loads(record.read_text())
    assert learned["verdict"] is False and learned["enforced"] is True
    for name in ("mocov2", "mochi"):
        gain = saved["runs"][name]["knn_top1"] - saved["untrained"]["knn_top1"]
        assert learned["runs"][name]["gain"] == gain
