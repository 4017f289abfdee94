"""Unlabeled image folders and selection without labels: the scan, the label-free scores against NumPy,
short real runs from the command line, bad inputs, and a comparison selecting on the label-free score."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from hardmix.config.loader import build_config
from hardmix.ops.diagnostics import alignment, uniformity
from hardmix.utils.errors import ConfigError
from hardmix.vision.config import VisionConfig
from hardmix.vision.data import ImageDataError, is_labelled, scan_image_folder
from hardmix.vision.label_free import label_free_scores, proxy_top1
from hardmix.vision.task import VisionTask
from tests.conftest import require_data_path, tiny_vision_config_dict

pytestmark = pytest.mark.usefixtures("vision_one_thread")


def _unlabeled_tree(root: Path, n: int = 300, corrupt: bool = True) -> Path:
    """``n`` real CIFAR-10 training images copied without classes: a third at the top level, the rest in
    nested folders whose names mean nothing; one file that is not an image."""
    src = require_data_path("images", "cifar10", "train")
    files = sorted(src.glob("*/*.jpg"))[::7][:n]
    for i, f in enumerate(files):
        d = root if i < n // 3 else root / f"trip{i % 3}" / ("day" if i % 2 else "night")
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, d / f"img{i:04d}.jpg")
    if corrupt:
        (root / "trip1" / "broken.jpg").write_bytes(b"not a jpeg")
    return root


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return _unlabeled_tree(tmp_path_factory.mktemp("unlabeled") / "photos")


def _config(dataset: Path, cache: Path, **sections: dict) -> dict:
    d = tiny_vision_config_dict(dataset, cache, **sections)
    d["data"].update({"val_samples": 60, "skip_corrupt": True, "labels": False})
    d["eval"].update({"eval_steps": 4, "at_end": True})
    d["log"]["log_steps"] = 4
    return d


def _hardmix(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "hardmix", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


# ------------------------------------------------------------------------------------------------ the scan
def test_a_folder_with_images_at_its_top_and_image_sub_folders_is_refused_unless_labels_says(photos):
    """Images at the top and sub-folders of images: class folders or nested photos? ``data.labels`` unset,
    it was taken as unlabeled without a word (the sub-folders' names dropped); it is now refused, saying how
    to choose. With ``data.labels: false`` every image below it counts."""
    with pytest.raises(ImageDataError, match=r"^data.dataset: .* holds both images at its top level and "
                                             r"sub-folders of images \(trip0, trip1, trip2\): .* Set "
                                             r"data.labels: false .* \(data.labels: true\)$"):
        scan_image_folder(photos)
    images = scan_image_folder(photos, labels=False)
    expected = sorted(str(p) for p in photos.rglob("*.jpg"))
    assert not images.labelled and images.classes == []
    assert sorted(images.paths) == expected and len(images.paths) == 301  # the broken file is listed
    assert images.labels.tolist() == [0] * 301
    assert not is_labelled(str(photos))


def test_sub_folders_alone_are_classes_unless_labels_is_false(tmp_path):
    tree = _unlabeled_tree(tmp_path / "nested", 30, corrupt=False)
    for f in list(tree.glob("*.jpg")):  # no image at the top: the sub-folders are classes
        f.unlink()
    labelled = scan_image_folder(tree)
    assert labelled.labelled and labelled.classes == ["trip0", "trip1", "trip2"]
    assert is_labelled(str(tree))
    unlabeled = scan_image_folder(tree, labels=False)
    assert not unlabeled.labelled and sorted(unlabeled.paths) == sorted(labelled.paths)


@pytest.mark.parametrize("case", ["labels_true", "class_list", "empty", "link_out"])
def test_bad_unlabeled_folders_are_refused_in_one_line(photos, tmp_path, case):
    if case == "labels_true":
        with pytest.raises(ImageDataError, match="data.labels: true, but .* holds images at its top level"):
            scan_image_folder(photos, labels=True)
        return
    if case == "class_list":
        with pytest.raises(ImageDataError, match="data.class_list"):
            scan_image_folder(photos, classes=["trip0"], labels=False)
        return
    folder = tmp_path / "f"
    (folder / "sub").mkdir(parents=True)
    if case == "empty":
        (folder / "notes.txt").write_text("no images here")
        with pytest.raises(ImageDataError, match=r"holds no images") as e:
            scan_image_folder(folder, labels=False)
    else:
        shutil.copyfile(next(photos.glob("*.jpg")), folder / "a.jpg")
        (folder / "sub" / "out").symlink_to(photos)
        with pytest.raises(ImageDataError, match="outside the data set") as e:
            scan_image_folder(folder, labels=False)
    assert "\n" not in str(e.value) and str(folder) in str(e.value)


# ------------------------------------------------------------------------------------ the label-free scores
def test_label_free_scores_equal_a_numpy_computation():
    g = torch.Generator().manual_seed(0)
    z1 = torch.nn.functional.normalize(torch.randn(50, 8, generator=g), dim=1)
    z2 = torch.nn.functional.normalize(z1 + 0.8 * torch.randn(50, 8, generator=g), dim=1)
    a, b = z1.double().numpy(), z2.double().numpy()
    sims = a @ b.T
    hits = sum(int(np.argmax(sims[i]) == i) for i in range(50))
    assert proxy_top1(z1, z2) == pytest.approx(100 * hits / 50)
    assert 0 < hits < 50  # the case tests something
    assert float(alignment(z1, z2)) == pytest.approx(np.mean(np.sum((a - b) ** 2, axis=1)), rel=1e-5)

    def uniform(x: np.ndarray) -> float:
        d2 = [np.sum((x[i] - x[j]) ** 2) for i in range(len(x)) for j in range(i + 1, len(x))]
        return float(np.log(np.mean(np.exp(-2.0 * np.asarray(d2)))))

    assert float(uniformity(z1.double())) == pytest.approx(uniform(a), rel=1e-6)
    assert label_free_scores(z1, z2)["val_alignment"] == pytest.approx(np.mean(np.sum((a - b) ** 2, axis=1)),
                                                                    rel=1e-5)
    scores = label_free_scores(z1, z2)
    assert scores["val_uniformity"] == pytest.approx((uniform(a) + uniform(b)) / 2, rel=1e-6)


# --------------------------------------------------------------------------------------------- real runs
def test_an_unlabeled_folder_trains_and_selects_a_step_without_labels(photos, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(_config(photos, tmp_path / "cache")))
    done = _hardmix("train", "vision", str(cfg), "--output", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    said = (f"data.labels: false: the images of {photos} are used unlabeled (sub-folders are not classes): "
            "selecting on val_proxy_top1, no labelled test scores")
    assert said in done.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["selection_metric"] == "val_proxy_top1"
    assert set(results["final_scores"]) == {"val_proxy_top1", "val_alignment", "val_uniformity"}
    assert results["task_info"]["skipped_images"] == 1 and results["task_info"]["val_samples"] == 60
    evals = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if "val_proxy_top1" in r]
    assert [r["step"] for r in evals] == [4, 8, 12, 14]  # 240 training images, batch 32: 7 steps an epoch
    best = max(evals, key=lambda r: r["val_proxy_top1"])  # the first of equal scores is kept
    assert results["best_step"] == best["step"] and results["best_score"] == best["val_proxy_top1"]
    assert "proxy-task top-1 (label-free)" in done.stdout

    # the selected step's encoder encodes the folder, and its neighbours are listed: from the command line
    best = tmp_path / "run" / "best"
    assert f"the encoder of step {results['best_step']}: " in done.stdout
    done = _hardmix("encode", str(best), "--images", str(photos), "-o", "emb.npy", "--skip-corrupt",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    emb = np.load(tmp_path / "emb.npy")
    paths = (tmp_path / "emb.paths.txt").read_text().splitlines()
    assert emb.shape[0] == len(paths) == 300 and str(photos / "trip1" / "broken.jpg") not in paths
    from hardmix.vision.backbones import build_backbone
    from hardmix.vision.data import decode_images
    from hardmix.vision.evaluation import extract_features

    net, _ = build_backbone("resnet10", 8, True)  # the best step's weights, loaded by hand
    net.load_state_dict(torch.load(best / "backbone.pt", weights_only=True))
    images, _, _ = decode_images(paths[:20], 32)
    a = yaml.safe_load((best / "config.yaml").read_text())["augment"]
    expected = extract_features(net, images, a["mean"], a["std"], progress=False)
    np.testing.assert_allclose(emb[:20], expected.numpy(), atol=1e-5)
    done = _hardmix("neighbours", "emb.npy", paths[0], "-k", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sims = unit[1:] @ unit[0]
    order = np.argsort(-sims)[:3]
    assert lines[0] == f"query #0: {paths[0]}" and [ln.split("\t")[2] for ln in lines[1:]] == [
        paths[1 + i] for i in order]


def test_the_label_free_scores_repeat_for_the_same_model(photos, tmp_path):
    """The views are fixed by the data's seed: the same backbone scores the same, whatever it ran before."""
    from hardmix.vision.backbones import build_backbone
    from hardmix.vision.evaluation import RunEvaluation
    from hardmix.vision.pipeline import train_val_image_list

    cfg = build_config(VisionConfig, _config(photos, tmp_path / "cache"))
    assert VisionTask.about(cfg).selection_metric() == "val_proxy_top1"
    split, _, val = train_val_image_list(cfg)
    net, _ = build_backbone("resnet10", 8, True)
    ev = RunEvaluation(cfg, split, val, torch.device("cpu"))
    first = ev.validation(net, 0)
    torch.randn(100)  # the global RNG moves: the views must not
    assert ev.validation(net, 1) == first
    assert RunEvaluation(cfg, split, val, torch.device("cpu")).validation(net, 0) == first


def test_a_corrupt_image_in_an_unlabeled_folder_is_one_line_without_skip_corrupt(photos, tmp_path):
    d = _config(photos, tmp_path / "cache")
    d["data"]["skip_corrupt"] = False
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(d))
    done = _hardmix("train", "vision", str(cfg), "--output", "run", cwd=tmp_path)
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("hardmix: ") and "broken.jpg" in lines[-1] and "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_the_knn_asked_on_unlabeled_images_is_refused_before_work(photos, tmp_path):
    d = _config(photos, tmp_path / "cache", eval={"selection": "val_knn_top1"})
    with pytest.raises(ConfigError, match="eval.selection: val_knn_top1 needs labelled images"):
        VisionTask.about(build_config(VisionConfig, d)).selection_metric()


def test_labelled_images_can_select_on_the_label_free_score(tiny_vision_config, tmp_path):
    from hardmix.training import run_training

    d = tiny_vision_config(data={"val_samples": 40}, eval={"selection": "val_proxy_top1", "eval_steps": 4,
                                                           "at_end": True, "final_scores": ["knn_top1"]},
                           train={"epochs": 1})
    out = tmp_path / "run"
    results = run_training(VisionTask, build_config(VisionConfig, d), out)
    assert results["selection_metric"] == "val_proxy_top1"
    assert {"val_knn_top1", "val_proxy_top1", "knn_top1"} <= set(results["final_scores"])
    evals = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("val_knn_top1" in r for r in evals if "val_proxy_top1" in r)


def test_a_comparison_accepts_the_label_free_selection_score(tiny_vision_config, tmp_path):
    from hardmix.compare.grid import build_grid, task_metric
    from hardmix.compare.spec import parse_spec

    base = tmp_path / "vision.yaml"
    base.write_text(yaml.safe_dump(tiny_vision_config(data={"val_samples": 40})))
    mochi = [{"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 8}]
    spec = {"strategies": {"none": "none", "mochi": mochi}, "seeds": [1, 2],
            "tasks": {"images": {"task": "vision", "config": str(base), "score": "knn_top1",
                                 "set": {"eval.selection": "val_proxy_top1"}}}}
    cells = build_grid(parse_spec(spec), tmp_path / "out")
    assert len(cells) == 4 and {task_metric(c) for c in cells} == {"val_proxy_top1"}
    spec["tasks"]["images"]["score"] = "val_proxy_top1"
    with pytest.raises(ConfigError, match="'val_proxy_top1' is the task's selection score"):
        build_grid(parse_spec(spec), tmp_path / "out")


@pytest.mark.parametrize("setting, message", [
    ("data.labels=true", "data.labels: true, but {photos} holds images at its top level, outside any class"),
    ("data.val_samples=400", "data.val_samples: 400 validation images of the 301 usable images in {photos} "
                             "leave none to train on"),
    ("eval.selection=val_knn_top1", "eval.selection: val_knn_top1 needs labelled images"),
])
def test_unlabeled_settings_that_cannot_work_are_one_line_before_training(photos, tmp_path, setting, message):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(_config(photos, tmp_path / "cache")))
    before = sorted(p.stat().st_mtime_ns for p in photos.rglob("*"))
    done = _hardmix("train", "vision", str(cfg), "--output", "run", "--set", setting, cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    last = [ln for ln in done.stderr.splitlines() if ln.strip()][-1]
    assert last.startswith("hardmix: error: ") and message.format(photos=photos) in last, last
    assert not list((tmp_path / "run").glob("*"))  # no record, no checkpoint
    assert sorted(p.stat().st_mtime_ns for p in photos.rglob("*")) == before
