"""MixCSE (clean mode): values, closed form, gradients and stop-gradient, against hand-written NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.autograd.gradcheck import GradcheckError
from torch.utils._python_dispatch import TorchDispatchMode

from hardmix.losses import ContrastiveLoss, mixcse_loss
from hardmix.ops.mixing import mix_normalize, mixture_cosines
from hardmix.strategies import MixCSE

from ._reference import (
    info_nce_in_batch,
    mix,
    mixcse_loss_np,
    mixcse_queue_np,
    mixcse_stopgrad_grads_np,
    normalize,
)
from ._views import correlated_views


def _views(b: int = 7, d: int = 5, seed: int = 0, shared: float = 0.6) -> tuple[torch.Tensor, torch.Tensor]:
    """Two correlated float64 views with unequal norms (so normalization matters)."""
    return correlated_views(b, d, seed, shared)


@pytest.mark.parametrize("second_direction", [True, False])
@pytest.mark.parametrize("lam,tau", [(0.2, 0.05), (0.5, 0.1), (0.85, 0.7)])
def test_mixcse_loss_equals_numpy_equations(second_direction: bool, lam: float, tau: float) -> None:
    z1, z2 = _views(seed=int(lam * 100))
    got = mixcse_loss(z1, z2, lam=lam, temperature=tau, second_direction=second_direction)
    want = mixcse_loss_np(z1.numpy(), z2.numpy(), lam, tau, second_direction)
    assert got.dtype == torch.float64 and got.dim() == 0
    assert abs(float(got) - want) < 1e-8


@pytest.mark.parametrize("second_direction", [True, False])
def test_mixcse_loss_without_lam_is_plain_info_nce(second_direction: bool) -> None:
    z1, z2 = _views(seed=3)
    got = mixcse_loss(z1, z2, lam=None, temperature=0.05, second_direction=second_direction)
    want = info_nce_in_batch(z1.numpy(), z2.numpy(), 0.05, both_directions=second_direction)
    assert abs(float(got) - want) < 1e-8
    # ... and the mixtures make it strictly larger (extra positive terms in every denominator).
    assert float(mixcse_loss(z1, z2, lam=0.2, second_direction=second_direction)) > float(got)


def test_mixcse_loss_stop_grad_flag_does_not_change_the_value() -> None:
    z1, z2 = _views(seed=4)
    a = mixcse_loss(z1, z2, stop_grad=True)
    b = mixcse_loss(z1, z2, stop_grad=False)
    assert abs(float(a) - float(b)) < 1e-12


def test_closed_form_mixed_logits_equal_explicit_mixtures() -> None:
    g = torch.Generator().manual_seed(1)
    h = F.normalize(torch.randn(6, 9, generator=g, dtype=torch.float64), dim=1)  # anchors
    p = F.normalize(torch.randn(6, 9, generator=g, dtype=torch.float64), dim=1)  # positives
    n = F.normalize(torch.randn(11, 9, generator=g, dtype=torch.float64), dim=1)  # negatives
    tau, lam = 0.07, 0.3
    got = mixture_cosines((h * p).sum(1, keepdim=True) / tau, h @ n.T / tau, p @ n.T, lam)
    hn, pn, nn_ = h.numpy(), p.numpy(), n.numpy()
    want = np.array([[hn[i] @ mix(pn[i], nn_[j], lam) / tau for j in range(11)] for i in range(6)])
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)
    # The explicit helper.
    explicit = mix_normalize(p.unsqueeze(1), n.unsqueeze(0), lam)  # (6, 11, 9)
    np.testing.assert_allclose(torch.einsum("bd,bnd->bn", h, explicit).numpy() / tau, want, atol=1e-12)


@pytest.mark.parametrize("second_direction", [True, False])
def test_stop_grad_gradient_equals_analytic_numpy_gradient(second_direction: bool) -> None:
    z1, z2 = _views(seed=5)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    lam, tau = 0.2, 0.05
    mixcse_loss(z1, z2, lam=lam, temperature=tau, second_direction=second_direction).backward()
    g1, g2 = mixcse_stopgrad_grads_np(z1.detach().numpy(), z2.detach().numpy(), lam, tau, second_direction)
    np.testing.assert_allclose(z1.grad.numpy(), g1, rtol=0, atol=1e-10)
    np.testing.assert_allclose(z2.grad.numpy(), g2, rtol=0, atol=1e-10)


def _explicit_mixcse_torch(z1, z2, lam, tau, second_direction, constant_mixtures):
    """MixCSE in torch with the (B, B, D) mixtures built explicitly; optionally detached."""

    def direction(a_raw, p_raw):
        a, p = F.normalize(a_raw, dim=1), F.normalize(p_raw, dim=1)
        b = a.shape[0]
        m = mix_normalize(p.unsqueeze(1), p.unsqueeze(0), lam)  # m[i, j] = normalize(lam p_i + (1-lam) p_j)
        if constant_mixtures:
            m = m.detach()
        plain = a @ p.T / tau
        mixed = torch.einsum("id,ijd->ij", a, m) / tau
        mixed = mixed.masked_fill(torch.eye(b, dtype=torch.bool), float("-inf"))
        return F.cross_entropy(torch.cat([plain, mixed], 1), torch.arange(b))

    loss = direction(z1, z2)
    return 0.5 * (loss + direction(z2, z1)) if second_direction else loss


@pytest.mark.parametrize("second_direction", [True, False])
def test_stop_grad_blocks_every_gradient_through_the_mixtures(second_direction: bool) -> None:
    lam, tau = 0.3, 0.1
    z1, z2 = _views(seed=6)
    grads = {}
    for name, fn in {
        "sg": lambda a, b: mixcse_loss(a, b, lam, tau, stop_grad=True, second_direction=second_direction),
        "nosg": lambda a, b: mixcse_loss(a, b, lam, tau, stop_grad=False, second_direction=second_direction),
        "const": lambda a, b: _explicit_mixcse_torch(a, b, lam, tau, second_direction, True),
        "live": lambda a, b: _explicit_mixcse_torch(a, b, lam, tau, second_direction, False),
    }.items():
        a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
        fn(a, b).backward()
        grads[name] = (a.grad, b.grad)
    for k in (0, 1):
        # stop_grad: exactly the gradient of the loss whose mixtures are constants ...
        torch.testing.assert_close(grads["sg"][k], grads["const"][k], rtol=0, atol=1e-11)
        # ... without it: the gradient through live mixtures, which differs.
        torch.testing.assert_close(grads["nosg"][k], grads["live"][k], rtol=0, atol=1e-11)
        # The mixtures are built from the positives' view (z2 in direction 1, z1 in direction 2): only a
        # view that feeds a mixture can receive gradient through one.
        feeds_a_mixture = k == 1 or second_direction
        differs = bool((grads["nosg"][k] - grads["sg"][k]).abs().max() > 1e-4)
        assert differs == feeds_a_mixture


def test_without_stop_grad_gradient_matches_finite_differences() -> None:
    z1, z2 = _views(b=5, d=4, seed=7)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, b: mixcse_loss(a, b, 0.4, 0.2, stop_grad=False, second_direction=True), (z1, z2), eps=1e-6
    )


def test_stop_grad_gradient_is_not_the_full_derivative() -> None:
    """Finite differences see the mixtures move; the stop-gradient gradient must not."""
    z1, z2 = _views(b=5, d=4, seed=8)
    z1.requires_grad_(True)
    with pytest.raises(GradcheckError):
        torch.autograd.gradcheck(
            lambda a: mixcse_loss(a, z2, 0.4, 0.2, stop_grad=True, second_direction=True), (z1,), eps=1e-6
        )


@pytest.mark.parametrize("stop_grad", [True, False])
def test_mixcse_against_a_queue_equals_numpy(stop_grad: bool) -> None:
    g = torch.Generator().manual_seed(9)
    q = torch.randn(5, 6, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(5, 6, generator=g, dtype=torch.float64)
    queue = torch.randn(12, 6, generator=g, dtype=torch.float64)
    query_ids = torch.arange(5)
    queue_ids = torch.tensor([0, 1, -1, 7, 3, 9, -2, 2, 11, 12, 4, 13])
    loss_fn = ContrastiveLoss(0.1, {"name": "mixcse", "lam": 0.25, "stop_grad": stop_grad})
    got = loss_fn.queue(q, k, queue, query_ids, queue_ids).loss
    valid = (queue_ids.numpy()[None, :] != -1) & (query_ids.numpy()[:, None] != queue_ids.numpy()[None, :])
    want = mixcse_queue_np(q.detach().numpy(), k.numpy(), queue.numpy(), 0.25, 0.1, valid)
    assert abs(float(got.detach()) - want) < 1e-10
    got.backward()
    # The key and the queue are constants: the gradient w.r.t. q is that of the explicit mixtures.
    qq = q.detach().clone().requires_grad_(True)
    h, key, n = F.normalize(qq, dim=1), F.normalize(k, dim=1), F.normalize(queue, dim=1)
    m = mix_normalize(key.unsqueeze(1), n.unsqueeze(0), 0.25)
    v = torch.from_numpy(valid)
    logits = (
        torch.cat(
            [
                (h * key).sum(1, keepdim=True),
                (h @ n.T).masked_fill(~v, -np.inf),
                torch.einsum("bd,bnd->bn", h, m).masked_fill(~v, -np.inf),
            ],
            1,
        )
        / 0.1
    )
    F.cross_entropy(logits, torch.zeros(5, dtype=torch.long)).backward()
    torch.testing.assert_close(q.grad, qq.grad, rtol=0, atol=1e-10)


def test_mixcse_never_materializes_a_batch_by_batch_by_dim_tensor() -> None:
    """Record every tensor the forward and backward produce: none has B * N * D elements."""
    b, d = 48, 40

    class Largest(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.largest = max(self.largest, t.numel())
            return out

    for stop_grad in (True, False):
        z1 = torch.randn(b, d, requires_grad=True)
        z2 = torch.randn(b, d, requires_grad=True)
        with Largest() as mode:
            mixcse_loss(z1, z2, stop_grad=stop_grad).backward()
        assert 0 < mode.largest <= 2 * b * b < b * b * d
    # The detector works: the explicit construction does trip it.
    with Largest() as mode:
        _explicit_mixcse_torch(z1, z2, 0.2, 0.05, True, True).backward()
    assert mode.largest >= b * b * d


@pytest.mark.parametrize("lam", [0.0, 1.0, -0.1, 1.5, True, "0.2"])
def test_lam_outside_open_unit_interval_raises_naming_lam(lam) -> None:
    z = torch.randn(4, 3)
    with pytest.raises(ValueError, match="lam"):
        mixcse_loss(z, z, lam=lam)
    with pytest.raises(ValueError, match="lam"):
        MixCSE(lam=lam)


def test_mixcse_diagnostics_report_the_mixed_negatives() -> None:
    z1, z2 = _views(seed=10)
    stats = ContrastiveLoss(0.05, MixCSE(lam=0.2, second_direction=False)).in_batch(z1, z2).stats()
    stats = {k.removeprefix("mixcse/"): v for k, v in stats.items()}
    h1, h2 = normalize(z1.numpy()), normalize(z2.numpy())
    b = len(h1)
    sims = np.array([[h1[i] @ mix(h2[i], h2[j], 0.2) for j in range(b) if j != i] for i in range(b)])
    pos = np.sum(h1 * h2, axis=1)
    assert abs(stats["synthetic_sim"] - sims.mean()) < 1e-6
    assert abs(stats["synthetic_harder_than_positive"] - np.mean(sims > pos[:, None])) < 1e-6


@pytest.mark.parametrize("second_direction", [True, False])
def test_large_batch_equals_vectorized_numpy(second_direction: bool) -> None:
    """B = 600, against a vectorized NumPy computation of the equations."""
    z1, z2 = _views(b=600, d=8, seed=13)
    lam, tau = 0.2, 0.1
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    got = mixcse_loss(a, b, lam=lam, temperature=tau, second_direction=second_direction)

    def direction(x: np.ndarray, y: np.ndarray) -> float:
        h, hp = normalize(x), normalize(y)
        m = lam * hp[:, None, :] + (1 - lam) * hp[None, :, :]  # (B, B, D) explicit mixtures
        m /= np.linalg.norm(m, axis=-1, keepdims=True)
        mixed = np.einsum("id,ijd->ij", h, m) / tau
        np.fill_diagonal(mixed, -np.inf)
        logits = np.concatenate([h @ hp.T / tau, mixed], 1)
        mx = logits.max(1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(logits - mx).sum(1))
        return float(np.mean(lse - np.diag(logits)))

    want = direction(z1.numpy(), z2.numpy())
    if second_direction:
        want = 0.5 * (want + direction(z2.numpy(), z1.numpy()))
    assert abs(float(got.detach()) - want) < 1e-9
    got.backward()
    c, d = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    _explicit_mixcse_torch(c, d, lam, tau, second_direction, constant_mixtures=True).backward()
    torch.testing.assert_close(a.grad, c.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(b.grad, d.grad, rtol=0, atol=1e-12)
