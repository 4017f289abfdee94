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
STAGES = ["device_tests", "loss_overhead", "text_steps", "vision_steps", "training", "distributed"]
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One dry run of the whole script (it copies its own tiny tree from HARDMIX_DATA)."""
    data = require_data_path("images", "cifar10").parents[1]
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


def test_dry_mode_runs_every_stage_and_writes_at_most_8_files(dry_run) -> None:
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = _load(out, "gpu_check.json")
    assert summary["mode"] == "dry" and list(summary["stages"]) == STAGES
    status = {name: e["status"] for name, e in summary["stages"].items()}
    assert status == {**dict.fromkeys(STAGES, "ok"), "distributed": "skipped"}
    assert summary["failed_stages"] == []
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and "gpu_check.log" in files
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

    record = Path("/work/shared/gpu/2026-12-06/check/training.json")
    if not record.is_file():
        pytest.skip(f"{record}: the H100 record is not on this machine")
    copy = tmp_path / "training.json"
    copy.write_text(record.read_text())
    assert gpu_training.main(["judge", "--out", str(copy)]) == 1
    learned = json.loads(copy.read_text())["learned"]
    saved = json.loads(record.read_text())
    assert learned["verdict"] is False and learned["enforced"] is True
    for name in ("mocov2", "mochi"):
        gain = saved["runs"][name]["knn_top1"] - saved["untrained"]["knn_top1"]
        assert learned["runs"][name]["gain"] == gain
