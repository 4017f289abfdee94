"""The linear probe's ``--augment``: per-epoch random crops and flips through the frozen backbone, on real
CIFAR-10 images (a class-balanced 160 train, 50 test) with a tiny ResNet; the default path is unchanged."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from torch import Tensor, nn

from hardmix.cli import main as cli
from hardmix.config.loader import build_config
from hardmix.training.checkpoint import save_checkpoint
from hardmix.vision.augmented_features import AugmentedFeatures, linear_augment_config
from hardmix.vision.backbones import build_backbone
from hardmix.vision.config import VisionConfig
from hardmix.vision.evaluation import LabelledImages, eval_geometry, extract_features
from hardmix.vision.knn import topk_accuracy
from hardmix.vision.linear_probe import RECIPES, LinearRecipe, linear_probe

pytestmark = pytest.mark.usefixtures("vision_one_thread")
N_TRAIN, N_TEST = 160, 50


@pytest.fixture(scope="module")
def setup(tiny_vision_config) -> tuple[nn.Module, VisionConfig, LabelledImages, dict]:
    """A tiny ResNet with trained-looking BatchNorm statistics (a few train-mode passes, then eval), its
    config, and 160 train and 50 test real images of ``cifar_tree``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tiny_vision_config()
    cfg = build_config(VisionConfig, d)
    data = LabelledImages(
        cfg.data.dataset, eval_geometry(cfg)[0], N_TRAIN, N_TEST, cfg.data.cache_dir, cfg.data.num_workers
    )
    torch.manual_seed(0)
    net, _ = build_backbone("resnet10", width=8, small_stem=True)
    net.train()
    mean = torch.tensor(cfg.augment.mean).view(1, 3, 1, 1)
    std = torch.tensor(cfg.augment.std).view(1, 3, 1, 1)
    with torch.no_grad():
        for start in range(0, N_TRAIN, 64):
            net((data.train.images[start : start + 64].float() / 255 - mean) / std)
    torch.set_num_threads(before)
    return net.eval(), cfg, data, d


def _reference_probe(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    c: int,
    recipe: LinearRecipe,
    epochs: int,
) -> dict[str, float]:
    """The frozen-features probe without ``--augment`` (seed 0), written out as a reference."""
    g = torch.Generator().manual_seed(0)
    milestones = [round(m * epochs / recipe.epochs) for m in recipe.milestones]
    head = nn.Linear(train_x.shape[1], c)
    with torch.no_grad():
        head.weight.normal_(0.0, 0.01, generator=g)
        head.bias.zero_()
    opt = torch.optim.SGD(head.parameters(), lr=recipe.lr, momentum=recipe.momentum, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    x, y = train_x.float(), train_y.long()
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], generator=g)
        for start in range(0, x.shape[0], recipe.batch_size):
            idx = order[start : start + recipe.batch_size]
            loss = nn.functional.cross_entropy(head(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
    with torch.no_grad():
        return topk_accuracy(head(test_x.float()).argsort(dim=1, descending=True), test_y)


def test_augmented_features_are_fresh_each_step_through_a_frozen_backbone(setup):
    net, cfg, data, _ = setup
    images = data.train.images
    frozen = {k: v.clone() for k, v in net.state_dict().items()}
    feats = AugmentedFeatures(net, images, linear_augment_config(cfg.augment), seed=0)
    idx = torch.arange(0, N_TRAIN, 5)
    net.train()  # the call must switch to eval mode (else BatchNorm would update its statistics) and back
    a, again, other = feats(idx, 0), feats(idx, 0), feats(idx, 7)
    assert net.training
    for k, v in net.state_dict().items():
        assert torch.equal(v, frozen[k]), k
    net.eval()
    assert a.shape == (32, 64) and a.dtype == torch.float32
    assert torch.equal(a, again)  # a pure function of (indices, step)
    moved = (a - other).norm(dim=1) / a.norm(dim=1)
    assert (moved > 1e-3).float().mean() > 0.9  # another step: other crops (and flips)
    center = extract_features(net, images[idx], cfg.augment.mean, cfg.augment.std)
    assert ((a - center).norm(dim=1) / center.norm(dim=1) > 1e-3).float().mean() > 0.9
    # The identity "augmentation" (the whole image, no flip) gives the un-augmented features: same
    # normalization, eval-mode BatchNorm.
    identity = replace(
        linear_augment_config(cfg.augment), crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0
    )
    plain = AugmentedFeatures(net, images, identity, seed=0)(idx, 3)
    torch.testing.assert_close(plain, center, atol=1e-4, rtol=1e-4)
    # The recipe's crops: scale (0.08, 1) and a flip, nothing else.
    lin = linear_augment_config(cfg.augment)
    assert lin.crop_scale == (0.08, 1.0) and lin.flip_prob == 0.5 and lin.crop_size == 32
    assert lin.jitter_prob == lin.grayscale_prob == lin.blur_prob == 0.0


class _Recorder:
    """The real feature source, remembering what each step fed the head."""

    def __init__(self, inner: AugmentedFeatures) -> None:
        self.inner = inner
        self.calls: list[tuple[Tensor, int, Tensor]] = []

    def __call__(self, idx: Tensor, step: int) -> Tensor:
        out = self.inner(idx, step)
        self.calls.append((idx.clone(), step, out))
        return out


def test_augmented_probe_trains_on_new_views_each_epoch_and_tests_on_center_features(setup):
    net, cfg, data, _ = setup
    recipe = replace(RECIPES["cifar"], batch_size=64)  # 3 steps per epoch over 160 images
    _, test_x = data.features(net, cfg)
    rec = _Recorder(AugmentedFeatures(net, data.train.images, linear_augment_config(cfg.augment), seed=0))
    scores = linear_probe(rec, data.train.labels, test_x, data.test.labels, 10, recipe, epochs=2)
    assert [s for _, s, _ in rec.calls] == list(range(6))
    per_epoch = []
    for epoch in (0, 1):
        idx = torch.cat([i for i, s, _ in rec.calls if s // 3 == epoch])
        out = torch.cat([f for _, s, f in rec.calls if s // 3 == epoch])
        assert sorted(idx.tolist()) == list(range(N_TRAIN))  # every training image once per epoch
        per_epoch.append(out[idx.argsort()])
    changed = (per_epoch[0] - per_epoch[1]).norm(dim=1) / per_epoch[0].norm(dim=1) > 1e-3
    assert changed.float().mean() > 0.9
    assert 0.0 <= scores["top1"] <= scores["top5"] <= 100.0
    # The API's augmented probe trains on the same features (seed 0) and tests on the un-augmented ones.
    api = data.linear(net, cfg, "cifar", epochs=2, augment=True)
    rec.calls.clear()
    assert linear_probe(rec, data.train.labels, test_x, data.test.labels, 10, RECIPES["cifar"], 2) == api
    # Without augmentation: exactly the reference frozen-features probe.
    train_x, test_x2 = data.features(net, cfg)
    assert torch.equal(test_x, test_x2)
    plain = data.linear(net, cfg, "cifar", epochs=3)
    labels = data.train.labels, data.test.labels
    reference = _reference_probe(train_x, labels[0], test_x, labels[1], 10, RECIPES["cifar"], 3)
    assert plain == reference
    assert plain != api


def test_the_cli_flag(setup, tmp_path, capsys):
    net, cfg, data, d = setup
    model = {f"encoder_q.backbone.{k}": v for k, v in net.state_dict().items()}
    save_checkpoint({"config": d, "model": model}, tmp_path / "checkpoint.pt", task="vision")
    out = tmp_path / "linear.json"
    args = ["eval", "linear", str(tmp_path), "--dataset", cfg.data.dataset, "--epochs", "1"]
    args += ["--device", "cpu"]
    args += ["--json", str(out), "--max-train-samples", str(N_TRAIN), "--max-test-samples", str(N_TEST)]
    assert cli([*args, "--augment"]) == 0
    scores = json.loads(out.read_text())
    assert scores == {k: round(v, 4) for k, v in data.linear(net, cfg, "cifar", 1, augment=True).items()}
    assert set(scores) == {"top1", "top5"} and 0.0 <= scores["top1"] <= scores["top5"] <= 100.0
    assert "augmented" in capsys.readouterr().err
    assert cli(args) == 0
    plain = data.linear(net, cfg, "cifar", 1)
    assert json.loads(out.read_text()) == {k: round(v, 4) for k, v in plain.items()}
