"""k-NN (faiss and torch agree) and the linear probe."""

from __future__ import annotations

import pytest
import torch

from hardmix.vision.knn import faiss_available, knn_predict, nearest_neighbours, topk_accuracy
from hardmix.vision.linear_probe import RECIPES, linear_probe, recipe_for


def test_weighted_vote_by_hand():
    bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    labels = torch.tensor([0, 1, 1])
    # Query nearest to class 0's single point, but the two class-1 votes outweigh it at high temperature.
    q = torch.tensor([[1.0, 0.05]])
    assert knn_predict(bank, labels, q, k=3, temperature=0.1, backend="torch")[0, 0] == 0
    assert knn_predict(bank, labels, q, k=3, temperature=100.0, backend="torch")[0, 0] == 1


@pytest.mark.skipif(not faiss_available(), reason="faiss is not installed")
def test_faiss_and_torch_give_the_same_predictions(long_run_features):
    bank, bank_labels, queries = long_run_features
    a = knn_predict(bank, bank_labels, queries, k=50, temperature=0.1, num_classes=10, backend="torch")
    b = knn_predict(bank, bank_labels, queries, k=50, temperature=0.1, num_classes=10, backend="faiss")
    assert torch.equal(a, b)
    unit = torch.nn.functional.normalize
    sa, ia = nearest_neighbours(unit(bank, dim=1), unit(queries, dim=1), 5, "torch")
    sb, ib = nearest_neighbours(unit(bank, dim=1), unit(queries, dim=1), 5, "faiss")
    torch.testing.assert_close(sa, sb, atol=1e-5, rtol=0)
    assert (ia == ib).float().mean() > 0.9  # near-ties may swap places; the votes above do not change


@pytest.fixture(scope="module")
def long_run_features(cifar_tree):
    """Features of real CIFAR-10 images from a randomly initialized tiny ResNet (320 bank, 100 queries)."""
    from hardmix.vision.augment import normalize_uint8
    from hardmix.vision.backbones import build_backbone
    from hardmix.vision.data import decode_images, scan_image_folder

    torch.manual_seed(0)
    net, _ = build_backbone("resnet10", width=8, small_stem=True)
    net.eval()
    out = []
    for split in ("train", "test"):
        listing = scan_image_folder(cifar_tree / split)
        images, _, _ = decode_images(listing.paths)
        with torch.no_grad():
            out.append((net(normalize_uint8(images, (0.5,) * 3, (0.25,) * 3)), listing.labels))
    return out[0][0], out[0][1], out[1][0]


def test_topk_accuracy():
    ranked = torch.tensor([[2, 0, 1], [1, 2, 0]])
    assert topk_accuracy(ranked, torch.tensor([0, 1])) == {"top1": 50.0, "top5": 100.0}


def test_linear_probe_learns_separable_features():
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 16, generator=g) * 3
    y = torch.arange(400) % 4
    x = centers[y] + torch.randn(400, 16, generator=g)
    scores = linear_probe(x[:300], y[:300], x[300:], y[300:], 4, RECIPES["cifar"], epochs=10)
    assert scores["top1"] > 95.0 and scores["top5"] == 100.0
    assert recipe_for("cifar10") == "cifar" and recipe_for("imagenette-64") == "moco"
