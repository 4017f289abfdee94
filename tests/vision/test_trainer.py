"""Short real runs of the vision trainer on 320 real CIFAR-10 images with a tiny ResNet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from hardmix.cli import main as cli
from hardmix.config.loader import build_config
from hardmix.training import run_training
from hardmix.utils.errors import ConfigError
from hardmix.vision.config import VisionConfig
from hardmix.vision.data import ImageDataError
from hardmix.vision.task import VisionTask


def train(cfg: VisionConfig, output: Path, resume: bool = False) -> dict:
    return run_training(VisionTask, cfg, output, resume)

pytestmark = pytest.mark.usefixtures("vision_one_thread")


def _losses(run: Path) -> list[float]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in lines if "loss" in r]


def _cfg(d: dict) -> VisionConfig:
    return build_config(VisionConfig, d)


MOCHI = {"strategies": [{"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 8, "warmup_epochs": 0.5}]}
# Milder than MoCo-v2's augmentations, so that a 40-step run of a tiny network visibly learns (with the full
# ones the loss stays near log(K + 1) for longer than a test can afford).
MILD = {"crop_scale": [0.6, 1.0], "blur_prob": 0.0, "grayscale_prob": 0.0, "jitter": [0.2, 0.2, 0.2, 0.05]}


@pytest.fixture(scope="module")
def long_run(tiny_vision_config, tmp_path_factory) -> tuple[Path, dict]:
    """One uninterrupted 4-epoch MoCo-v2 run (40 steps), shared by the tests below."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tiny_vision_config(augment=MILD, train={"epochs": 4})
    out = tmp_path_factory.mktemp("vision-run") / "run"
    summary = train(_cfg(d), out)
    torch.set_num_threads(before)
    return out, summary


def test_loss_falls_and_the_run_directory_is_complete(long_run):
    out, summary = long_run
    losses = _losses(out)
    assert len(losses) == 40 and summary["steps"] == 40 and summary["task_info"]["num_samples"] == 320
    # The queue (96 keys, 32 a step) holds only real keys from step 3 on; from there the loss must fall.
    early, late = sum(losses[3:13]) / 10, sum(losses[-10:]) / 10
    assert late < early - 0.1, (early, late)
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "alignment" in r]
    assert len(logged) == 40
    assert {"proxy_acc", "pos_sim", "neg_sim", "uniformity", "anchor_grad_norm", "momentum"} <= set(
        logged[-1]
    )
    assert yaml.safe_load((out / "config.yaml").read_text())["augment"]["crop_scale"] == [0.6, 1.0]
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["step"] == 40 and "rng" in state["processes"][0]
    assert state["config"]["loss"]["queue_size"] == 96
    assert state["model"]["queue.ids"].min() >= 0  # every slot holds a real key after wrap-around


def test_resume_equals_an_uninterrupted_run(tiny_vision_config, tmp_path):
    d = tiny_vision_config(loss=MOCHI, train={"epochs": 2})
    out = tmp_path / "straight"
    train(_cfg(d), out)
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert "mochi/synthetic_sim" not in records[4] and "mochi/synthetic_sim" in records[9]  # 5 warm-up steps
    d["train"]["stop_after_steps"] = 7
    run = tmp_path / "resumed"
    first = train(_cfg(d), run)
    assert first["steps"] == 7 and len(_losses(run)) == 7 and not first["finished"]
    d["train"]["stop_after_steps"] = None
    train(_cfg(d), run, resume=True)
    assert len(_losses(out)) == 20 and _losses(run) == _losses(out)  # exactly, step for step
    a = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(run / "checkpoint.pt", weights_only=True)["model"]
    assert torch.equal(a["queue.keys"], b["queue.keys"]) and torch.equal(a["queue.ids"], b["queue.ids"])


def test_knn_from_a_checkpoint(long_run, tmp_path, capsys):
    out, _ = long_run
    dataset = yaml.safe_load((out / "config.yaml").read_text())["data"]["dataset"]
    target = tmp_path / "knn.json"
    assert cli(["eval", "knn", str(out), "--dataset", dataset, "--json", str(target), "--k", "20"]) == 0
    scores = json.loads(target.read_text())
    assert (
        set(scores) == {"top1", "top5"}
        and 10.0 <= scores["top1"] <= 100.0
        and scores["top5"] >= scores["top1"]
    )
    file_scores = tmp_path / "knn2.json"
    cli(
        [
            "eval",
            "knn",
            str(out / "checkpoint.pt"),
            "--dataset",
            dataset,
            "--json",
            str(file_scores),
            "--k",
            "20",
        ]
    )
    assert json.loads(file_scores.read_text()) == scores
    lin = tmp_path / "linear.json"
    assert cli(["eval", "linear", str(out), "--dataset", dataset, "--json", str(lin), "--epochs", "5"]) == 0
    assert set(json.loads(lin.read_text())) == {"top1", "top5"}


def test_the_cli_trains_and_prints_the_knn_accuracy(tiny_vision_config, tmp_path, capsys):
    d = tiny_vision_config(data={"val_samples": 20}, train={"epochs": 1},
                           eval={"at_end": True, "linear_epochs": 5})
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(d))
    code = cli(
        [
            "train",
            "vision",
            str(config),
            "--output",
            str(tmp_path / "run"),
            "--set",
            "train.seed=3",
            "--set",
            "data.max_samples=160",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "best validation k-NN top-1: " in printed and "test scores of the final model on" in printed
    summary = json.loads((tmp_path / "run" / "results.json").read_text())
    assert summary["task_info"]["num_samples"] == 160 and summary["steps"] == 5
    assert summary["final_scores"]["knn_top1"] > 0 and summary["selection_metric"] == "val_knn_top1"
    # A second run into the same directory without --resume is refused.
    assert cli(["train", "vision", str(config), "--output", str(tmp_path / "run")]) == 2
    assert "already holds a run" in capsys.readouterr().err


def _assert_nothing_trained(out: Path) -> None:
    assert not (out / "checkpoint.pt").exists() and not (out / "metrics.jsonl").exists()


def test_missing_folder_fails_before_training(tiny_vision_config, tmp_path):
    d = tiny_vision_config(data={"dataset": str(tmp_path / "nowhere")})
    with pytest.raises(FileNotFoundError, match="data.dataset: image folder .*nowhere does not exist"):
        train(_cfg(d), tmp_path / "run")
    _assert_nothing_trained(tmp_path / "run")


def test_empty_class_fails_before_training(tiny_vision_config, vision_tree_factory, tmp_path):
    root = vision_tree_factory()
    for f in (root / "train" / "cat").iterdir():
        f.unlink()
    d = tiny_vision_config(data={"dataset": str(root)}, train={"batch_size": 8})
    with pytest.raises(ImageDataError, match="no images in .*train: cat"):
        train(_cfg(d), tmp_path / "run")
    _assert_nothing_trained(tmp_path / "run")


def test_corrupt_jpeg_fails_naming_the_file_or_is_skipped(tiny_vision_config, vision_tree_factory, tmp_path,
                                                          capsys):
    root = vision_tree_factory()
    bad = root / "train" / "dog" / "broken.jpg"
    good = next((root / "train" / "dog").iterdir()).read_bytes()
    bad.write_bytes(good[: len(good) // 3])  # a truncated JPEG
    d = tiny_vision_config(
        data={"dataset": str(root), "cache_dir": ""},
        train={"batch_size": 8, "epochs": 1},
        loss={"queue_size": 16},
    )
    with pytest.raises(ImageDataError, match=r"cannot decode image .*broken\.jpg.*skip_corrupt"):
        train(_cfg(d), tmp_path / "run")
    _assert_nothing_trained(tmp_path / "run")
    d["data"]["skip_corrupt"] = True
    d["eval"].update(at_end=True, linear_epochs=5)  # the evaluation reads the corrupt file's folder too
    d["data"].update(val_samples=10, max_samples=30)  # the 40 good images: 10 to validate, 30 to train on
    summary = train(_cfg(d), tmp_path / "run2")
    assert summary["task_info"]["skipped_images"] == 1 and summary["task_info"]["num_samples"] == 30
    assert summary["finished"] and summary["final_scores"]["knn_top1"] >= 0.0
    # hardmix eval knn on the same folder names its own option, and takes it.
    knn = ["eval", "knn", str(tmp_path / "run2"), "--dataset", str(root), "--k", "5"]
    assert cli(knn) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "broken.jpg" in err and "pass --skip-corrupt to skip such files" in err
    assert cli([*knn, "--skip-corrupt"]) == 0


@pytest.mark.parametrize("pipeline", ["tensor", "pil"])
def test_undecodable_images_are_dropped_before_the_subset_is_drawn(tiny_vision_config, vision_tree_factory,
                                                                   tmp_path, pipeline):
    from hardmix.vision.data import balanced_subset, scan_image_folder
    from hardmix.vision.pipeline import build_train_data

    root = vision_tree_factory()  # 10 classes x 4 training images
    dogs = sorted((root / "train" / "dog").iterdir())
    for path in dogs[:2]:  # 2 of the 4 dogs: a draw of 3 per class holds at least one
        path.write_bytes(b"not an image")
    d = tiny_vision_config(
        data={"dataset": str(root), "cache_dir": "", "skip_corrupt": True, "max_samples": 30,
              "pipeline": pipeline},
        train={"batch_size": 8, "epochs": 1},
        loss={"queue_size": 16},
    )
    cfg = _cfg(d)
    data = build_train_data(cfg, torch.device("cpu"))
    # The subset is drawn from the 38 decodable images, so it still holds 30 (the dog class gives its 2).
    images = scan_image_folder(root / "train")
    bad = {str(p.resolve()) for p in dogs[:2]}
    drawn = [i for i in range(40) if images.paths[i] not in bad]
    expected = torch.tensor(drawn)[balanced_subset(images.labels[torch.tensor(drawn)], 30, 0)]
    assert data.num_samples == 30 and 1 <= len(data.skipped) <= 2
    assert {str(Path(p).resolve()) for p in data.skipped} <= bad
    if pipeline == "pil":
        assert data.batches.dataset.paths == [images.paths[i] for i in expected.tolist()]
    summary = train(cfg, tmp_path / "run")
    assert summary["finished"] and summary["task_info"]["num_samples"] == 30
    assert json.loads((tmp_path / "run" / "results.json").read_text())["finished"]


def test_invalid_config_fails_naming_the_key(tiny_vision_config, tmp_path, capsys):
    bad = tiny_vision_config(loss={"strategies": [{"name": "mochi", "n_hard": 500}]})
    with pytest.raises(ConfigError, match=r"loss\.strategies\[0\]\.n_hard: 500 .* loss\.queue_size=96"):
        _cfg(bad)
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(tiny_vision_config(train={"lr": -1})))
    assert cli(["train", "vision", str(config), "--output", str(tmp_path / "run")]) == 2
    assert "train.lr" in capsys.readouterr().err
    _assert_nothing_trained(tmp_path / "run")
    # A queue larger than the data leaves too few negatives once the query's own keys are excluded.
    d = tiny_vision_config(loss={"strategies": [{"name": "mochi", "n_hard": 95}]}, data={"max_samples": 32})
    with pytest.raises(ConfigError, match=r"loss\.strategies\[0\]\.n_hard: 95 negatives needed .* own keys"):
        train(_cfg(d), tmp_path / "run")


def test_a_partial_checkpoint_is_refused_key_by_key(long_run, tmp_path, capsys):
    """A checkpoint whose model lacks a tensor (or holds a foreign one) is refused in one
    line naming the tensor, by ``hardmix eval knn`` and by ``--resume``, never half-loaded."""
    import shutil

    from hardmix.training import checkpoint as ckpt

    out, _ = long_run
    dataset = yaml.safe_load((out / "config.yaml").read_text())["data"]["dataset"]
    for change, named in (
        (lambda m: m.pop(next(k for k in m if k.startswith("encoder_q.backbone."))), "missing (first: "),
        (lambda m: m.update({"encoder_q.backbone.extra": torch.zeros(1)}),
         "the model does not have (first: "),
    ):
        run = tmp_path / f"run{len(named)}"
        shutil.copytree(out, run)
        state = ckpt.read_checkpoint_file(run / "checkpoint.pt")
        change(state["model"])
        ckpt.save_checkpoint(state, run / "checkpoint.pt", task="vision")
        capsys.readouterr()
        assert cli(["eval", "knn", str(run), "--dataset", dataset, "--k", "5"]) == 2
        err = capsys.readouterr().err
        assert "does not match the model" in err and named in err and "Traceback" not in err
        (run / "results.json").unlink()  # an unfinished run: --resume loads its checkpoint
        assert cli(["train", "vision", str(run / "config.yaml"), "--output", str(run), "--resume"]) != 0
        err = capsys.readouterr().err
        assert "does not match the model" in err and "Traceback" not in err


def test_test_images_of_a_class_the_training_split_lacks_are_refused_naming_it(vision_tree_factory):
    """The test split was scanned with the training split's classes, so a test class the
    training split lacks was left out of every score without a word; it is refused, naming the class."""
    import shutil

    from hardmix.vision.data import ImageDataError, eval_splits

    root = vision_tree_factory()
    test = next(p for p in root.iterdir() if p.name in ("test", "val"))
    first = sorted(p for p in test.iterdir() if p.is_dir())[0]
    shutil.copytree(first, test / "zebra")
    with pytest.raises(ImageDataError, match=r"1 class folder\(s\) the training split lacks \(zebra\)"):
        eval_splits(str(root))
    shutil.rmtree(test / "zebra")
    train, held = eval_splits(str(root))
    assert held.classes == train.classes
