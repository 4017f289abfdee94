"""MixCSE ``reference`` mode: the official code's logits (shared/notes/mixcse-official-logits.md)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import ContrastiveLoss, mixcse_loss
from hardmix.strategies import MixCSE

from ._reference import mixcse_reference_np


def _raw_views(b: int, d: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Un-normalized float64 views with very different norms: normalizing before mixing would show."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(b, d, generator=g, dtype=torch.float64)
    z1 = (base + 0.5 * torch.randn(b, d, generator=g, dtype=torch.float64)) * torch.linspace(0.2, 5, b).view(
        -1, 1
    )
    z2 = (base + 0.5 * torch.randn(b, d, generator=g, dtype=torch.float64)) * torch.linspace(4, 0.3, b).view(
        -1, 1
    )
    return z1.to(torch.float64), z2.to(torch.float64)


def _reference_loss(z1: torch.Tensor, z2: torch.Tensor, lam: float, tau: float) -> torch.Tensor:
    return ContrastiveLoss(tau, {"name": "mixcse", "lam": lam, "mode": "reference"}).in_batch(z1, z2).loss


@pytest.mark.parametrize("b", [2, 3, 8])
@pytest.mark.parametrize("lam,tau", [(0.2, 0.05), (0.6, 0.3)])
def test_reference_mode_equals_numpy_transcription_of_the_note(b: int, lam: float, tau: float) -> None:
    z1, z2 = _raw_views(b, seed=b)
    got = _reference_loss(z1, z2, lam, tau)
    want = mixcse_reference_np(z1.numpy(), z2.numpy(), lam, tau)
    assert got.dtype == torch.float64
    assert abs(float(got) - want) < 1e-10


def _literal_official_torch(z1: torch.Tensor, z2: torch.Tensor, lam: float, tau: float) -> torch.Tensor:
    """The note, step by step, in torch: its gradients are what the reference mode must reproduce."""
    b = z1.shape[0]

    def sim(x, y):  # cos(x_i, y_j) / tau
        return F.cosine_similarity(x.unsqueeze(1), y.unsqueeze(0), dim=-1) / tau

    idx = torch.arange(b)
    z3 = (lam * z2 + (1 - lam) * z2[(idx + 1) % b]).detach()
    z4 = (lam * z1 + (1 - lam) * z1[(idx + 1) % b]).detach()
    s1 = sim(z1, z2)
    keep2 = torch.ones(b, b, dtype=z1.dtype)
    keep2[idx, (idx - 1) % b] = 0
    keep3 = torch.ones(b, b, dtype=z1.dtype)
    keep3[idx, (idx + 1) % b] = 0
    s2 = sim(z1, z3) * keep2
    s3 = sim(z4, z2) * keep3
    return F.cross_entropy(torch.cat([s1, s2, s3], 1), idx)


def test_reference_mode_gradients_equal_the_literal_official_computation() -> None:
    z1, z2 = _raw_views(6, seed=11)
    a1, a2 = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    b1, b2 = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    _reference_loss(a1, a2, 0.2, 0.05).backward()
    _literal_official_torch(b1, b2, 0.2, 0.05).backward()
    torch.testing.assert_close(a1.grad, b1.grad, rtol=0, atol=1e-10)
    torch.testing.assert_close(a2.grad, b2.grad, rtol=0, atol=1e-10)


def test_reference_mode_differs_from_the_clean_equation() -> None:
    z1, z2 = _raw_views(8, seed=12)
    clean_single = mixcse_loss(z1, z2, lam=0.2, temperature=0.05, second_direction=False)
    assert abs(float(_reference_loss(z1, z2, 0.2, 0.05)) - float(clean_single)) > 1e-3


def test_reference_mode_is_one_directional_with_stop_gradient_and_in_batch_only() -> None:
    assert ContrastiveLoss(0.05, {"name": "mixcse", "mode": "reference"}).both_directions is False
    with pytest.raises(ValueError, match="second_direction"):
        MixCSE(mode="reference", second_direction=True)
    with pytest.raises(ValueError, match="stop_grad"):
        MixCSE(mode="reference", stop_grad=False)
    with pytest.raises(ValueError, match="both_directions"):
        ContrastiveLoss(0.05, {"name": "mixcse", "mode": "reference"}, both_directions=True)
    with pytest.raises(ValueError, match="mode"):
        MixCSE(mode="paper")
    z = torch.randn(4, 3)
    with pytest.raises(ValueError, match="mode"):
        ContrastiveLoss(0.05, {"name": "mixcse", "mode": "reference"}).queue(z, z, torch.randn(9, 3))
