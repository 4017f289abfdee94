"""The fused one-process in-batch loss (plain InfoNCE and MixCSE) against the composed path and NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hardmix.kernels import fused_in_batch as fused_module
from hardmix.kernels.fused_in_batch import fused_in_batch_loss, fused_in_batch_supported
from hardmix.losses import ContrastiveLoss
from hardmix.strategies import MixCSE

from ._reference import info_nce_in_batch, mixcse_loss_np, mixcse_stopgrad_grads_np, normalize


def _views(b: int, d: int, seed: int, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(b, d, generator=g, dtype=torch.float64)
    z1 = base + 0.7 * torch.randn(b, d, generator=g, dtype=torch.float64)
    z2 = (base + 0.7 * torch.randn(b, d, generator=g, dtype=torch.float64)) * 2.5
    return z1.to(dtype).requires_grad_(True), z2.to(dtype).requires_grad_(True)


def _run(z1, z2, strategies, symmetric, fused, tau=0.05):
    loss_fn = ContrastiveLoss(tau, strategies, symmetric=symmetric, fused=fused)
    out = loss_fn.in_batch(z1, z2)
    grads = torch.autograd.grad(out.loss, [z1, z2])
    return out, grads


STRATEGIES = [None, {"name": "mixcse", "lam": 0.2}, {"name": "mixcse", "lam": 0.65}]


@pytest.mark.parametrize("batch", [33, 520])  # plain Gram products; the block-triangle Gram (4 blocks)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("strategies", STRATEGIES)
def test_fused_equals_composed_path_values_gradients_and_stats(strategies, symmetric, batch) -> None:
    if strategies is not None:
        strategies = {**strategies, "bidirectional": symmetric}
    z1, z2 = _views(batch, 12, seed=1)
    fused, g_fused = _run(z1, z2, strategies, symmetric, fused=True)
    composed, g_composed = _run(z1, z2, strategies, symmetric, fused=False)
    assert "FusedInBatch" in type(fused.loss.grad_fn).__name__
    assert "FusedInBatch" not in type(composed.loss.grad_fn).__name__
    assert abs(fused.loss.item() - composed.loss.item()) < 1e-12
    for a, b in zip(g_fused, g_composed):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    s_fused, s_composed = fused.stats(), composed.stats()
    assert s_fused.keys() == s_composed.keys()
    for key in s_fused:
        assert abs(s_fused[key] - s_composed[key]) < 1e-12, key


@pytest.mark.parametrize("symmetric", [True, False])
def test_fused_mixcse_in_row_strips_equals_composed_path(symmetric, monkeypatch) -> None:
    # From 8 strips up the CPU forward works strip by strip; strips of 64 rows make B = 520 take that
    # path (8 full strips and a partial one), as B >= 1024 does with the default 128.
    monkeypatch.setattr(fused_module, "_STRIP_ROWS", 64)
    strategies = {"name": "mixcse", "lam": 0.2, "bidirectional": symmetric}
    z1, z2 = _views(520, 12, seed=4)
    fused, g_fused = _run(z1, z2, strategies, symmetric, fused=True)
    composed, g_composed = _run(z1, z2, strategies, symmetric, fused=False)
    assert abs(fused.loss.item() - composed.loss.item()) < 1e-12
    for a, b in zip(g_fused, g_composed):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_fused_mixcse_equals_numpy_value_and_analytic_gradient(bidirectional) -> None:
    z1, z2 = _views(40, 9, seed=2)
    lam, tau = 0.2, 0.05
    loss, pos = fused_in_batch_loss(
        torch.nn.functional.normalize(z1, dim=1), torch.nn.functional.normalize(z2, dim=1), tau,
        bidirectional, lam=lam,
    )
    loss.backward()
    want = mixcse_loss_np(z1.detach().numpy(), z2.detach().numpy(), lam, tau, bidirectional)
    assert abs(loss.item() - want) < 1e-10
    g1, g2 = mixcse_stopgrad_grads_np(z1.detach().numpy(), z2.detach().numpy(), lam, tau, bidirectional)
    np.testing.assert_allclose(z1.grad.numpy(), g1, rtol=0, atol=1e-10)
    np.testing.assert_allclose(z2.grad.numpy(), g2, rtol=0, atol=1e-10)
    h1, h2 = normalize(z1.detach().numpy()), normalize(z2.detach().numpy())
    np.testing.assert_allclose(pos.numpy(), (h1 * h2).sum(1) / tau, rtol=0, atol=1e-12)
    assert not pos.requires_grad


@pytest.mark.parametrize("symmetric", [True, False])
def test_fused_plain_info_nce_equals_numpy(symmetric) -> None:
    z1, z2 = _views(25, 7, seed=3)
    loss = ContrastiveLoss(0.1, None, symmetric=symmetric).in_batch(z1, z2).loss
    want = info_nce_in_batch(z1.detach().numpy(), z2.detach().numpy(), 0.1, symmetric)
    assert "FusedInBatch" in type(loss.grad_fn).__name__
    assert abs(loss.item() - want) < 1e-12


def test_second_backward_with_retain_graph_gives_the_same_gradients() -> None:
    # The backward works in place on its saved buffers; a second one must recompute them, not reuse them.
    z1, z2 = _views(16, 6, seed=4)
    loss = ContrastiveLoss(0.05, "mixcse").in_batch(z1, z2).loss
    first = torch.autograd.grad(loss, [z1, z2], retain_graph=True)
    second = torch.autograd.grad(loss, [z1, z2])
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_float32_near_the_temperature_limit_matches_float64() -> None:
    # tau = 0.02 (1 / tau = 50, the float32 limit) with identical views: every logit reaches e^50.
    z1, _ = _views(20, 8, seed=5, dtype=torch.float32)
    z2 = z1.detach().clone().requires_grad_(True)
    assert fused_in_batch_supported(z1, 0.02)
    out, grads = _run(z1, z2, "mixcse", True, fused=True, tau=0.02)
    ref, ref_grads = _run(z1.double(), z2.double(), "mixcse", True, fused=False, tau=0.02)
    assert torch.isfinite(out.loss)
    assert abs(out.loss.item() - ref.loss.item()) < 1e-4 * max(1.0, abs(ref.loss.item()))
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a.double(), b, rtol=1e-3, atol=1e-5)


def test_unsupported_inputs_fall_back_to_the_composed_path() -> None:
    h = torch.nn.functional.normalize(torch.randn(6, 4), dim=1)
    assert not fused_in_batch_supported(h, 0.01)  # 1 / tau = 100 > 50 in float32
    assert fused_in_batch_supported(h.double(), 0.01)
    assert not fused_in_batch_supported(h.half(), 0.05)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fused_in_batch_supported(h, 0.05)
    assert MixCSE(stop_grad=False).fused_in_batch(h, h, 0.05, True) is None
    assert MixCSE(mode="reference").fused_in_batch(h, h, 0.05, False) is None
    # tau = 0.01 in float32 still gives the right loss (through the composed path, with max shifts).
    z1, z2 = _views(12, 5, seed=6, dtype=torch.float32)
    out = ContrastiveLoss(0.01, "mixcse").in_batch(z1, z2)
    assert "FusedInBatch" not in type(out.loss.grad_fn).__name__
    want = mixcse_loss_np(z1.detach().double().numpy(), z2.detach().double().numpy(), 0.2, 0.01, True)
    assert abs(out.loss.item() - want) < 1e-3


def test_mean_negative_similarity_is_the_mean_over_off_diagonal_pairs() -> None:
    z1, z2 = _views(10, 6, seed=7)
    out = ContrastiveLoss(0.05, None).in_batch(z1, z2)
    h1, h2 = normalize(z1.detach().numpy()), normalize(z2.detach().numpy())
    cos = h1 @ h2.T
    want = cos[~np.eye(10, dtype=bool)].mean()
    assert abs(float(out.negative_sim) - want) < 1e-12
    queue = torch.randn(17, 6, dtype=torch.float64)
    q_out = ContrastiveLoss(0.2, None).queue(z1, z2, queue)
    assert abs(float(q_out.negative_sim) - float((h1 @ normalize(queue.numpy()).T).mean())) < 1e-12
