"""InfoNCE's cross-entropy (the function ContrastiveLoss computes it with) and ContrastiveLoss without
mixing, in both layouts, against hand-written NumPy; the loss's refusals of inputs that have no defined
value."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import ContrastiveLoss, info_nce
from hardmix.strategies import ContrastContext, Strategy

from ._reference import cross_entropy, info_nce_in_batch, logsumexp, normalize


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_info_nce_is_cross_entropy() -> None:
    logits = _randn(5, 9, seed=1)
    logits[1, 4] = float("-inf")  # an excluded entry
    targets = torch.tensor([0, 3, 8, 2, 2])
    assert abs(float(info_nce(logits, targets)) - cross_entropy(logits.numpy(), targets.numpy())) < 1e-12


def test_the_loss_is_info_nce_of_its_cosines_divided_by_tau() -> None:
    """ContrastiveLoss's queue loss is info_nce of [q.k | q.queue] / tau with target 0, and its in-batch
    loss info_nce of the cosines / tau with the diagonal as targets: bit for bit."""
    q, k, queue = (F.normalize(_randn(n, 6, seed=s), dim=1) for n, s in ((4, 5), (4, 6), (9, 7)))
    logits = torch.cat([(q * k).sum(1, keepdim=True), q @ queue.T], dim=1) / 0.2
    want = info_nce(logits, torch.zeros(4, dtype=torch.long))
    assert torch.equal(ContrastiveLoss(0.2).queue(q, k, queue).loss, want)
    want = info_nce(q @ k.T / 0.05, torch.arange(4))
    assert torch.equal(ContrastiveLoss(0.05).in_batch(q, k).loss, want)


def test_inputs_without_a_defined_loss_are_refused_naming_the_argument() -> None:
    """An empty batch, a batch of one (no in-batch negative), an empty or all-excluded queue, mismatched
    dtypes, devices and id lengths: a ValueError naming the argument, never a NaN or a silent 0."""
    loss = ContrastiveLoss(0.2)
    q, k, queue = _randn(3, 4, seed=11), _randn(3, 4, seed=12), _randn(8, 4, seed=13)
    cases = [
        ("z1", lambda: loss.in_batch(torch.zeros(0, 4), torch.zeros(0, 4))),
        ("z1", lambda: loss.in_batch(_randn(1, 4), _randn(1, 4))),
        ("z1, z2", lambda: loss.in_batch(_randn(3, 4), _randn(3, 4).float())),
        ("q", lambda: loss.queue(q[:0], k[:0], queue)),
        ("queue", lambda: loss.queue(q, k, torch.zeros(0, 4, dtype=torch.float64))),
        ("queue_ids", lambda: loss.queue(q, k, queue, torch.arange(3), torch.full((8,), -1))),
        ("queue_ids", lambda: loss.queue(q, k, queue, torch.arange(3), torch.arange(5))),
        ("query_ids", lambda: loss.queue(q, k, queue, torch.arange(4), torch.arange(8))),
        ("q, k, queue", lambda: loss.queue(q, k, queue.float())),
    ]
    for argument, call in cases:
        with pytest.raises(ValueError, match=f"^{argument}:"):
            call()


@pytest.mark.parametrize("both_directions", [False, True])
def test_in_batch_plain_info_nce(both_directions: bool) -> None:
    z1, z2 = _randn(8, 5, seed=14) * 3, _randn(8, 5, seed=15)
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    out = ContrastiveLoss(0.05, both_directions=both_directions).in_batch(a, b)
    want = info_nce_in_batch(z1.numpy(), z2.numpy(), 0.05, both_directions)
    assert abs(float(out.loss.detach()) - want) < 1e-10
    out.loss.backward()
    # Gradient: that of cross_entropy on explicitly built logits.
    c, d = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    logits = F.normalize(c, dim=1) @ F.normalize(d, dim=1).T / 0.05
    ref = F.cross_entropy(logits, torch.arange(8))
    if both_directions:
        ref = 0.5 * (ref + F.cross_entropy(logits.T, torch.arange(8)))
    ref.backward()
    torch.testing.assert_close(a.grad, c.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(b.grad, d.grad, rtol=0, atol=1e-12)
    # The logged similarities.
    h1, h2 = normalize(z1.numpy()), normalize(z2.numpy())
    sims = h1 @ h2.T
    np.testing.assert_allclose(out.positive_sim.numpy(), np.diag(sims), atol=1e-12)
    assert abs(float(out.negative_sim) - (sims.sum() - np.trace(sims)) / 56) < 1e-12
    assert set(out.stats()) == {"loss", "pos_sim", "neg_sim"}


def test_queue_layout_masks_own_ids_and_empty_slots() -> None:
    q, k, queue = _randn(4, 6, seed=16), _randn(4, 6, seed=17), _randn(10, 6, seed=18)
    query_ids = torch.tensor([3, 5, 8, 100])
    queue_ids = torch.tensor([3, -1, 5, -2, 7, 8, 3, 9, -2, 11])  # -1 empty, -2 no id, 3 twice
    got = ContrastiveLoss(0.2).queue(q, k, queue, query_ids, queue_ids).loss
    qn, kn, nn_ = normalize(q.numpy()), normalize(k.numpy()), normalize(queue.numpy())
    losses = []
    for i in range(4):
        keep = [j for j in range(10) if queue_ids[j] != -1 and queue_ids[j] != query_ids[i]]
        row = np.concatenate([[qn[i] @ kn[i]], nn_[keep] @ qn[i]]) / 0.2
        losses.append(logsumexp(row) - row[0])
    assert abs(float(got) - np.mean(losses)) < 1e-12
    # Without ids nothing is masked: every queue entry is a negative.
    plain = ContrastiveLoss(0.2).queue(q, k, queue).loss
    want = cross_entropy(
        np.concatenate([np.sum(qn * kn, 1, keepdims=True), qn @ nn_.T], 1) / 0.2, np.zeros(4, int)
    )
    assert abs(float(plain) - want) < 1e-12
    # Queue ids alone: only empty slots are excluded.
    only_empty = ContrastiveLoss(0.2).queue(q, k, queue, None, queue_ids).loss
    keep = [j for j in range(10) if queue_ids[j] != -1]
    want = cross_entropy(
        np.concatenate([np.sum(qn * kn, 1, keepdims=True), qn @ nn_[keep].T], 1) / 0.2, np.zeros(4, int)
    )
    assert abs(float(only_empty) - want) < 1e-12


def test_queue_layout_gradient_reaches_the_query_only() -> None:
    q = _randn(3, 5, seed=19).requires_grad_(True)
    k = _randn(3, 5, seed=20).requires_grad_(True)
    queue = _randn(6, 5, seed=21).requires_grad_(True)
    ContrastiveLoss(0.2).queue(q, k, queue).loss.backward()
    assert q.grad is not None and k.grad is None and queue.grad is None


@dataclass(frozen=True)
class _FixedColumns(Strategy):
    """A strategy that appends given cosine columns (the plug-in interface, not a stand-in for one)."""

    name = "fixed-columns-test"
    columns: torch.Tensor | None = None
    seen: list = field(default_factory=list)

    def extra_cosines(self, ctx: ContrastContext) -> tuple[torch.Tensor, dict]:
        self.seen.append(ctx)
        return self.columns, {}


def test_extra_negative_cosines_are_appended_as_columns_divided_by_tau() -> None:
    z1, z2 = _randn(5, 4, seed=22), _randn(5, 4, seed=23)
    extra = torch.tanh(_randn(5, 3, seed=24))
    extra[0, 1] = float("-inf")  # an excluded extra entry
    strategy = _FixedColumns(extra)
    got = ContrastiveLoss(0.1, strategy).in_batch(z1, z2).loss
    cosines = normalize(z1.numpy()) @ normalize(z2.numpy()).T
    want = cross_entropy(np.concatenate([cosines, extra.numpy()], 1) / 0.1, np.arange(5))
    assert abs(float(got) - want) < 1e-12
    (ctx,) = strategy.seen
    assert ctx.mode == "in_batch" and ctx.direction == 0
    assert not ctx.negative_mask.diagonal().any() and ctx.negative_mask.sum() == 20
    torch.testing.assert_close(ctx.cosines, torch.from_numpy(cosines))


@pytest.mark.parametrize(
    "strategies", [None, "mixcse", {"name": "mochi", "n_hard": 6, "n_pair": 5, "n_query": 2}]
)
def test_in_batch_under_bf16_autocast(strategies) -> None:
    """Regression: the custom matmul's backward used to multiply a bf16 gradient by fp32 inputs."""
    g = torch.Generator().manual_seed(30)
    z1 = torch.randn(16, 32, generator=g)
    z2 = z1 + 1.5 * torch.randn(16, 32, generator=g)
    loss_fn = ContrastiveLoss(0.05, strategies)
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = loss_fn.in_batch(a, b, generator=torch.Generator().manual_seed(1)).loss
    low.backward()
    c, d = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    full = loss_fn.in_batch(c, d, generator=torch.Generator().manual_seed(1)).loss
    full.backward()
    assert low.dtype == torch.float32 and a.grad.dtype == torch.float32
    assert abs(float(low.detach()) - float(full.detach())) < 0.05 * float(full.detach())
    assert F.cosine_similarity(a.grad.flatten(), c.grad.flatten(), dim=0) > 0.98


_SMALL_MOCHI = {"name": "mochi", "n_hard": 6, "n_pair": 5, "n_query": 2}


@pytest.mark.parametrize("strategies", [None, "mixcse", _SMALL_MOCHI, ["mixcse", _SMALL_MOCHI]])
def test_queue_under_bf16_autocast(strategies) -> None:
    """The queue loss's fused blocks (MoCHi's gathered, MixCSE's scaled columns) under bf16 autocast: an
    fp32 loss and gradient close to the fp32 run's."""
    g = torch.Generator().manual_seed(31)
    q = torch.randn(16, 32, generator=g)
    k = q + 1.5 * torch.randn(16, 32, generator=g)
    queue = torch.randn(40, 32, generator=g)
    loss_fn = ContrastiveLoss(0.2, strategies)
    a, c = q.clone().requires_grad_(True), q.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = loss_fn.queue(a, k, queue, generator=torch.Generator().manual_seed(1)).loss
    low.backward()
    full = loss_fn.queue(c, k, queue, generator=torch.Generator().manual_seed(1)).loss
    full.backward()
    assert low.dtype == torch.float32 and a.grad.dtype == torch.float32
    assert abs(float(low.detach()) - float(full.detach())) < 0.01 * float(full.detach())
    assert F.cosine_similarity(a.grad.flatten(), c.grad.flatten(), dim=0) > 0.99


@pytest.mark.parametrize("tau", [0, -0.1, True, "0.05", None, 1e-300, 0.99e-4])
def test_temperature_must_be_positive(tau) -> None:
    with pytest.raises(ValueError, match="temperature"):
        ContrastiveLoss(tau)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_the_smallest_temperature_keeps_loss_and_gradient_finite(dtype) -> None:
    """At MIN_TEMPERATURE, aligned unit vectors give the largest logits 1 / tau: the loss and its gradient
    stay finite in every precision; at tau 1e-300 (once accepted) float32 already divides to inf."""
    from hardmix.losses.info_nce import MIN_TEMPERATURE

    z = F.normalize(torch.randn(8, 16, generator=torch.Generator().manual_seed(0)), dim=1)
    a = torch.cat([z[:1], z[:1], z[2:]]).to(dtype).requires_grad_(True)  # a repeated row: a tie at 1 / tau
    logits = a @ z.to(dtype).T / MIN_TEMPERATURE
    loss = info_nce(logits.float(), torch.arange(8))
    loss.backward()
    assert torch.isfinite(logits).all() and torch.isfinite(loss) and torch.isfinite(a.grad).all()
    assert not torch.isfinite(z @ z.T / 1e-300).all()
    ContrastiveLoss(MIN_TEMPERATURE)  # accepted


def test_shape_errors() -> None:
    with pytest.raises(ValueError, match="z1, z2"):
        ContrastiveLoss(0.1).in_batch(torch.randn(3, 4), torch.randn(4, 4))
    with pytest.raises(ValueError, match="z1_all, z2_all"):
        ContrastiveLoss(0.1).in_batch(torch.randn(3, 4), torch.randn(3, 4), z1_all=torch.randn(6, 4))
    with pytest.raises(ValueError, match="queue"):
        ContrastiveLoss(0.1).queue(torch.randn(3, 4), torch.randn(3, 4), torch.randn(5, 3))


def test_queue_with_sample_ids_against_numpy() -> None:
    """Sample ids: a query's own id several times in the queue, empty slots (-1), a random initial key
    (-2), ids in no query, and a query id of -1 (it matches only empty slots). Loss, gradient, the mean
    negative cosine and the per-query counts of valid negatives must equal a dense NumPy computation."""
    q, k, queue = _randn(6, 5, seed=40), _randn(6, 5, seed=41), _randn(20, 5, seed=42)
    query_ids = torch.tensor([3, 7, 7, 11, -1, 50])
    queue_ids = torch.tensor([3, -1, 7, 7, 100, 3, -2, 11, -1, 7, 3, 200, 201, 202, 203, 204, 205, 206, 1, 2])
    queue_ids = queue_ids[torch.randperm(20, generator=torch.Generator().manual_seed(43))]
    a = q.clone().requires_grad_(True)
    out = ContrastiveLoss(0.1).queue(a, k, queue, query_ids, queue_ids)
    out.loss.backward()

    qn, kn, nn_ = normalize(q.numpy()), normalize(k.numpy()), normalize(queue.numpy())
    valid = (queue_ids.numpy()[None, :] != -1) & (query_ids.numpy()[:, None] != queue_ids.numpy()[None, :])
    sims = qn @ nn_.T
    logits = np.concatenate([np.sum(qn * kn, 1, keepdims=True), np.where(valid, sims, -np.inf)], 1) / 0.1
    assert abs(float(out.loss.detach()) - cross_entropy(logits, np.zeros(6, dtype=int))) < 1e-12
    assert abs(float(out.negative_sim) - sims[valid].mean()) < 1e-12

    c = q.clone().requires_grad_(True)
    h = F.normalize(c, dim=1)
    positive = (h * F.normalize(k, dim=1)).sum(1, keepdim=True)
    negative = (h @ F.normalize(queue, dim=1).T).masked_fill(~torch.from_numpy(valid), float("-inf"))
    ref_logits = torch.cat([positive, negative], 1)
    F.cross_entropy(ref_logits / 0.1, torch.zeros(6, dtype=torch.long)).backward()
    torch.testing.assert_close(a.grad, c.grad, rtol=0, atol=1e-12)
