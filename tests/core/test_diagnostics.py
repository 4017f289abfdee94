"""Diagnostics of the embedding space, against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import mixcse_loss
from hardmix.ops.diagnostics import (
    alignment,
    anchor_gradient_norm,
    embedding_diagnostics,
    max_pairwise_angle,
    similarity_stats,
    uniformity,
)

from ._reference import normalize


def _unit(b: int, d: int, seed: int) -> torch.Tensor:
    return F.normalize(
        torch.randn(b, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=1
    )


@pytest.mark.parametrize("alpha", [1, 2, 3])
def test_alignment_is_mean_distance_to_the_power_alpha(alpha: float) -> None:
    x, y = _unit(7, 5, 0), _unit(7, 5, 1)
    want = np.mean([np.linalg.norm(a - b) ** alpha for a, b in zip(x.numpy(), y.numpy())])
    assert abs(float(alignment(x, y, alpha=alpha)) - want) < 1e-12
    assert float(alignment(x, x)) == 0.0


@pytest.mark.parametrize("t", [1, 2, 5])
def test_uniformity_is_log_mean_gaussian_potential_over_distinct_pairs(t: float) -> None:
    x = _unit(9, 4, 2).numpy()
    pairs = [np.exp(-t * np.sum((x[i] - x[j]) ** 2)) for i in range(9) for j in range(i + 1, 9)]
    assert abs(float(uniformity(torch.from_numpy(x), t=t)) - np.log(np.mean(pairs))) < 1e-12
    # Collapsed embeddings are maximally non-uniform (0); spread ones are negative.
    assert float(uniformity(torch.ones(4, 3) / math.sqrt(3))) == pytest.approx(0.0, abs=1e-6)
    assert float(uniformity(torch.from_numpy(x))) < 0


def test_similarity_stats_positive_and_random_negatives() -> None:
    a, p = torch.randn(6, 5, dtype=torch.float64) * 3, torch.randn(6, 5, dtype=torch.float64)
    s = normalize(a.numpy()) @ normalize(p.numpy()).T
    stats = similarity_stats(a, p)
    assert abs(stats["pos_sim"] - np.mean(np.diag(s))) < 1e-6
    assert abs(stats["neg_sim"] - s[~np.eye(6, dtype=bool)].mean()) < 1e-6


def test_anchor_gradient_norm_matches_the_analytic_info_nce_gradient() -> None:
    """Plain InfoNCE on unit anchors h against positives h': dL_i/dh_i = (sum_j p_ij h'_j - h'_i) / tau
    (MixCSE Sec. 4.1). The diagnostic is mean_i B * ||dL/dh_i|| of the mean loss."""
    tau = 0.1
    h, hp = _unit(6, 4, 3), _unit(6, 4, 4)

    def loss_fn(a: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(a @ p.T / tau, torch.arange(a.shape[0]))

    hn, hpn = h.numpy(), hp.numpy()
    norms = []
    for i in range(6):
        logits = hn[i] @ hpn.T / tau
        p = np.exp(logits - logits.max())
        p /= p.sum()
        g = (p @ hpn - hpn[i]) / tau  # dL_i/dh_i; other rows' terms do not involve h_i
        norms.append(np.linalg.norm(g))
    assert abs(anchor_gradient_norm(loss_fn, h, hp) - np.mean(norms)) < 1e-4
    # Works with the library loss and leaves the inputs' graph alone.
    a = h.clone().float().requires_grad_(True)
    value = anchor_gradient_norm(lambda x, y: mixcse_loss(x, y, second_direction=False), a, hp.float())
    assert value > 0 and a.grad is None


def test_max_pairwise_angle_is_brute_force_maximum() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(50):  # near-antipodal pairs included: 3-d points often have one
        x = torch.randn(8, 3, dtype=torch.float64, generator=g)
        u = normalize(x.numpy())
        want = max(np.arccos(np.clip(u[i] @ u[j], -1, 1)) for i in range(8) for j in range(8))
        assert abs(max_pairwise_angle(x) - want) < 1e-6
        assert abs(max_pairwise_angle(x.float()) - want) < 1e-5
    assert max_pairwise_angle(torch.tensor([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(math.pi)
    assert max_pairwise_angle(torch.randn(1, 4)) == 0.0


def test_embedding_diagnostics_bundle() -> None:
    a, p = torch.randn(10, 4) * 2, torch.randn(10, 4)
    out = embedding_diagnostics(a, p)
    an, pn = F.normalize(a, dim=1), F.normalize(p, dim=1)
    assert set(out) == {"pos_sim", "neg_sim", "alignment", "uniformity", "max_angle"}
    assert out["alignment"] == pytest.approx(float(alignment(an, pn)), abs=1e-6)
    assert out["uniformity"] == pytest.approx(float(uniformity(an)), abs=1e-6)
    assert math.isnan(embedding_diagnostics(a[:1], p[:1])["uniformity"])
