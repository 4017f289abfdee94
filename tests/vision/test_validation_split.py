"""The validation split carved from the training images, the selection score on it and the final model's
held-out test scores, checked against an independent NumPy computation on a tiny real run."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from hardmix.config.loader import build_config
from hardmix.training import run_training
from hardmix.utils.errors import ConfigError
from hardmix.vision.config import VisionConfig
from hardmix.vision.data import ImageDataError, load_tensors, scan_image_folder, validation_split
from hardmix.vision.evaluation import backbone_and_config, extract_features
from hardmix.vision.linear_probe import RECIPES, linear_probe, recipe_for
from hardmix.vision.pipeline import train_val_image_list
from hardmix.vision.task import VisionTask


def _cfg(d: dict) -> VisionConfig:
    return build_config(VisionConfig, d)


def train(cfg: VisionConfig, output) -> dict:  # noqa: ANN001
    return run_training(VisionTask, cfg, output)


def _split(tiny_vision_config, **data):
    images, train_idx, val_idx = train_val_image_list(_cfg(tiny_vision_config(data=data)))
    return images, train_idx, val_idx


def test_the_split_is_disjoint_balanced_and_deterministic(tiny_vision_config):
    images, train_idx, val_idx = _split(tiny_vision_config, val_samples=20, max_samples=100)
    assert len(val_idx) == 20 and len(train_idx) == 100
    assert not set(val_idx.tolist()) & set(train_idx.tolist())
    assert torch.bincount(images.labels[val_idx], minlength=10).tolist() == [2] * 10
    assert torch.bincount(images.labels[train_idx], minlength=10).tolist() == [10] * 10
    # Deterministic per data.subset_seed, whatever the training seed; another subset_seed draws another one.
    again = train_val_image_list(_cfg(tiny_vision_config(data={"val_samples": 20, "max_samples": 100},
                                                         train={"seed": 7})))
    assert torch.equal(again[2], val_idx) and torch.equal(again[1], train_idx)
    other = _split(tiny_vision_config, val_samples=20, max_samples=100, subset_seed=1)
    assert not torch.equal(other[2], val_idx)
    # Without max_samples every image but the validation ones is trained on.
    images, train_idx, val_idx = _split(tiny_vision_config, val_samples=20)
    assert sorted(train_idx.tolist() + val_idx.tolist()) == list(range(len(images.paths)))
    # Without val_samples nothing is carved out.
    assert len(_split(tiny_vision_config)[2]) == 0


def test_a_folder_of_a_few_dozen_images(tiny_vision_config, vision_tree_factory):
    root = vision_tree_factory(per_class_train=4, per_class_test=2)  # 40 training images, 10 classes
    images, train_idx, val_idx = _split(tiny_vision_config, dataset=str(root), val_samples=10)
    assert torch.bincount(images.labels[val_idx], minlength=10).tolist() == [1] * 10 and len(train_idx) == 30
    images, train_idx, val_idx = _split(tiny_vision_config, dataset=str(root), val_samples=30)
    assert torch.bincount(images.labels[train_idx], minlength=10).tolist() == [1] * 10
    with pytest.raises(ImageDataError, match=r"data.val_samples: 31 .* without a training image"):
        _split(tiny_vision_config, dataset=str(root), val_samples=31)
    with pytest.raises(ImageDataError, match=r"data.val_samples: 10 .*data.max_samples: 35 .* has 40"):
        _split(tiny_vision_config, dataset=str(root), val_samples=10, max_samples=35)


def test_validation_split_function():
    labels = torch.tensor([0] * 5 + [1] * 3 + [2] * 7)
    val, rest = validation_split(labels, 6, seed=3)
    assert torch.bincount(labels[val], minlength=3).tolist() == [2, 2, 2]
    assert sorted(val.tolist() + rest.tolist()) == list(range(15))
    assert torch.equal(validation_split(labels, 6, seed=3)[0], val)
    with pytest.raises(ImageDataError, match="data.val_samples"):
        validation_split(labels, 9, seed=0)  # 3 a class leaves class 1 no training image


def test_evaluation_without_a_validation_split_is_refused(tiny_vision_config, tmp_path):
    d = tiny_vision_config(eval={"at_end": True})
    with pytest.raises(ConfigError, match="data.val_samples: the evaluation"):
        train(_cfg(d), tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_k_nn_with_more_neighbours_than_its_bank_is_refused_before_training(tiny_vision_config, tmp_path):
    """``eval.knn_k`` above the bank's size ran, and the k-NN voted with the bank's every image instead
    (a score of another k, reported as the configured one). Refused before any step: against an explicit
    ``eval.knn_train_samples`` when the config is read, and against the images left beside the validation
    split when the task is built."""
    with pytest.raises(ConfigError, match=r"^eval\.knn_k: 30 neighbours from a bank of "
                                          r"eval\.knn_train_samples=20 images"):
        _cfg(tiny_vision_config(eval={"knn_k": 30, "knn_train_samples": 20}))
    d = tiny_vision_config(data={"val_samples": 40}, eval={"at_end": True, "knn_k": 1000})
    with pytest.raises(ConfigError, match=r"^eval\.knn_k: 1000 neighbours from a bank of the \d+ training "
                                          r"images left beside the validation split"):
        train(_cfg(d), tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_task_contract():
    cfg = _cfg({"data": {"val_samples": 100}, "eval": {"final_scores": ["knn_top1"]}})
    assert VisionTask.selection_metric == "val_knn_top1" and VisionTask.default_score == "knn_top1"
    held = VisionTask.about(cfg).held_out_scores()
    assert held == ["knn_top1", "knn_top5", "linear_top1"] and VisionTask.selection_metric not in held
    assert VisionTask.about(cfg).score_names() == ["val_knn_top1", "val_knn_top5", "knn_top1"]
    assert VisionTask.about(cfg).overrides_for_scores(["knn_top1"]) == []
    overrides = VisionTask.about(cfg).overrides_for_scores(["knn_top1", "linear_top1_se"])
    assert overrides == ["eval.final_scores=[knn_top1, linear_top1]"]
    off = VisionTask.about(_cfg({"eval": {"at_end": False}}))
    with_them = build_config(VisionConfig, {"data": {"val_samples": 100}, "eval": {"at_end": False}},
                             off.overrides_for_scores(["knn_top5"]))
    assert with_them.eval.at_end and "knn_top5" in VisionTask.about(with_them).score_names()


# ------------------------------------------------------------------------------ independent recomputation
def _features(net: torch.nn.Module, paths: list[str], mean, std) -> np.ndarray:
    """Decode with PIL, normalize in NumPy, one forward pass in eval mode (32-pixel images: no resize)."""
    x = np.stack([np.asarray(Image.open(p).convert("RGB"), dtype=np.float64) / 255.0 for p in paths])
    x = (x - np.asarray(mean)) / np.asarray(std)
    with torch.no_grad():
        return net(torch.from_numpy(x.transpose(0, 3, 1, 2)).float()).double().numpy()


def _knn_ranked(bank: np.ndarray, bank_y: np.ndarray, queries: np.ndarray, k: int, tau: float, c: int):
    bank = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    sims = queries @ bank.T
    ranked = []
    for row in sims:
        nn = np.argsort(-row, kind="stable")[:k]
        votes = np.zeros(c)
        for j in nn:
            votes[bank_y[j]] += np.exp(row[j] / tau)
        ranked.append(np.argsort(-votes, kind="stable"))
    return np.array(ranked)


def _accuracy(ranked: np.ndarray, y: np.ndarray, k: int) -> float:
    return 100.0 * float(np.mean([y[i] in ranked[i, :k] for i in range(len(y))]))


def test_scores_equal_an_independent_recomputation(tiny_vision_config, tmp_path, vision_one_thread):
    d = tiny_vision_config(data={"val_samples": 40}, train={"epochs": 1},
                           eval={"at_end": True, "eval_steps": 4, "linear_epochs": 5})
    out = tmp_path / "run"
    summary = train(_cfg(d), out)
    final = summary["final_scores"]
    assert summary["selection_metric"] == "val_knn_top1"
    evals = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if "val_knn_top1" in e]
    assert [e["step"] for e in evals] == [4, 8]  # 280 images: 8 steps of 32
    assert summary["best_score"] == max(e["val_knn_top1"] for e in evals)
    assert summary["task_info"]["val_samples"] == 40 and summary["task_info"]["num_samples"] == 280

    cfg = _cfg(d)
    images, train_idx, val_idx = train_val_image_list(cfg)
    net, _ = backbone_and_config(out)
    a, e = cfg.augment, cfg.eval
    test_split = scan_image_folder(images.folder.parent / "test", images.classes)
    test_paths = test_split.paths
    test_y = np.array([images.classes.index(p.split("/")[-2]) for p in test_paths])
    bank_idx = [i for i in range(len(images.paths)) if i not in set(val_idx.tolist())]
    bank = _features(net, [images.paths[i] for i in bank_idx], a.mean, a.std)
    bank_y = images.labels[bank_idx].numpy()
    val = _features(net, [images.paths[i] for i in val_idx.tolist()], a.mean, a.std)
    test = _features(net, test_paths, a.mean, a.std)

    ranked_val = _knn_ranked(bank, bank_y, val, e.knn_k, e.knn_temperature, 10)
    val_y = images.labels[val_idx].numpy()
    assert final["val_knn_top1"] == pytest.approx(_accuracy(ranked_val, val_y, 1), abs=1e-4)
    assert final["val_knn_top5"] == pytest.approx(_accuracy(ranked_val, val_y, 5), abs=1e-4)
    ranked = _knn_ranked(bank, bank_y, test, e.knn_k, e.knn_temperature, 10)
    n = len(test_y)
    for k in (1, 5):
        acc = _accuracy(ranked, test_y, k)
        assert final[f"knn_top{k}"] == pytest.approx(acc, abs=1e-4)
        assert final[f"knn_top{k}_se"] == pytest.approx(100 * np.sqrt(acc / 100 * (1 - acc / 100) / n))
    # The probe, trained on the bank's features (the k-NN's subsets), scored on the test images: its SGD at
    # the recipe's lr amplifies float rounding, so it is rerun on the library's own features of the same
    # images, which equal the independent ones.
    lib = {name: extract_features(net, load_tensors(split, torch.as_tensor(idx)).images, a.mean, a.std)
           for name, split, idx in (("bank", images, bank_idx),
                                    ("test", test_split, range(len(test_split.paths))))}
    np.testing.assert_allclose(lib["bank"].numpy(), bank, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lib["test"].numpy(), test, rtol=1e-4, atol=1e-4)
    probe = linear_probe(lib["bank"], torch.from_numpy(bank_y), lib["test"], torch.from_numpy(test_y), 10,
                         RECIPES[recipe_for(str(images.folder.parent))], 5)
    assert final["linear_top1"] == pytest.approx(probe["top1"], abs=1e-6)
    p = final["linear_top1"] / 100
    assert final["linear_top1_se"] == pytest.approx(100 * np.sqrt(p * (1 - p) / n))


def test_tuning_never_reads_the_test_split(tiny_vision_config, vision_tree_factory, tmp_path,
                                           vision_one_thread):
    root = vision_tree_factory(per_class_train=8, per_class_test=2)
    shutil.rmtree(root / "test")  # no test split at all: the selection score does not need one
    d = tiny_vision_config(data={"dataset": str(root), "val_samples": 20, "cache_dir": ""},
                           train={"batch_size": 16, "epochs": 1}, loss={"queue_size": 32},
                           eval={"at_end": True, "final_scores": []})
    summary = train(_cfg(d), tmp_path / "run")
    assert set(summary["final_scores"]) == {"val_knn_top1", "val_knn_top5"}
    assert summary["best_score"] == summary["final_scores"]["val_knn_top1"]
