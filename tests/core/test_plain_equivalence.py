"""The fast path (``impl="fast"``, the kernels) against the plain path (``impl="plain"``, each strategy's
definition: the mixtures built as vectors, logits by matrix products, one cross-entropy): the same losses,
gradients and logged statistics, for every strategy and mode, with the same random draws.

The plain path is checked against the papers' equations independently, by the NumPy references of
``_reference.py`` (below, and in the strategy tests); these tests make the kernels answer to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import hardmix.losses.contrastive as contrastive_module
import hardmix.strategies.mixcse as mixcse_module
import hardmix.strategies.mochi as mochi_module
from hardmix.errors import StrategyArgumentError
from hardmix.losses import ContrastiveLoss

from ._reference import logsumexp, mixcse_loss_np, mixcse_queue_np, normalize

F64 = {"rtol": 1e-10, "atol": 1e-12}
MOCHI = {"name": "mochi", "n_hard": 6, "n_pair": 9, "n_query": 4}
MIXCSE = {"name": "mixcse", "lam": 0.3}
SYNCO = {"name": "synco", "n_hard": 5, "n_extrapolated": 3, "n_noise": 2, "n_perturbed": 2,
         "n_adversarial": 2, "sigma": 0.2, "delta": 0.3, "eta": 0.1}
# MoCHi's ramp: warm-up 2, ramp over 4 steps; the steps below cover the warm-up, the ramp's
# start (no points), its middle and its end.
MOCHI_RAMPS = {
    "linear": {**MOCHI, "warmup_steps": 2, "schedule": "linear", "ramp_steps": 4},
    "cosine": {**MOCHI, "warmup_steps": 2, "schedule": "cosine", "ramp_steps": 4},
}
RAMP_STEPS = (0, 2, 3, 4, 5, 6, 9)
HARD_COPIES = {"name": "hard_copies", "n_hard": 6, "n_pair": 9, "n_query": 4}
ADAPTIVE = {"name": "mixcse_adaptive", "margin": 0.05, "lam_max": 0.5}  # bites in some rows of these inputs
SCHEDULED = {"name": "mixcse", "lam": 0.2, "lam_end": 0.4, "schedule_steps": 4}


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _in_batch(impl: str, strategies: Any, z1: torch.Tensor, z2: torch.Tensor, seed: int = 7, step: int = 0,
              **kwargs: Any):
    """Loss, gradients of (z1, z2) and stats of one in-batch call (generator seeded with ``seed``)."""
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    loss_fn = ContrastiveLoss(0.05, strategies, impl=impl, **kwargs)
    out = loss_fn.in_batch(a, b, step=step, generator=torch.Generator().manual_seed(seed))
    out.loss.backward()
    return out.loss.detach(), (a.grad, b.grad), out.stats()


def _queue(impl: str, strategies: Any, q, k, queue, query_ids=None, queue_ids=None, seed: int = 7,
           step: int = 0):
    """Loss, gradient of q and stats of one queue call (generator seeded with ``seed``)."""
    a = q.clone().requires_grad_(True)
    loss_fn = ContrastiveLoss(0.2, strategies, impl=impl)
    gen = torch.Generator().manual_seed(seed)
    out = loss_fn.queue(a, k, queue, query_ids, queue_ids, step=step, generator=gen)
    out.loss.backward()
    return out.loss.detach(), (a.grad,), out.stats()


def _assert_same(fast, plain, rtol: float = F64["rtol"], atol: float = F64["atol"]) -> None:
    (loss_f, grads_f, stats_f), (loss_p, grads_p, stats_p) = fast, plain
    torch.testing.assert_close(loss_f, loss_p, rtol=rtol, atol=atol)
    for g_f, g_p in zip(grads_f, grads_p):
        torch.testing.assert_close(g_f, g_p, rtol=rtol, atol=atol)
    assert stats_f.keys() == stats_p.keys()
    for key in stats_f:
        assert stats_f[key] == pytest.approx(stats_p[key], rel=max(rtol, 1e-9), abs=max(atol, 1e-12)), key


IN_BATCH_CASES = {
    "none": (None, {}),
    "none-symmetric": (None, {"symmetric": True}),
    "mixcse": (MIXCSE, {}),  # bidirectional, stop-gradient: the fused kernel
    "mixcse-composed": (MIXCSE, {"fused": False}),  # the same through the composed kernels
    "mixcse-single": ({**MIXCSE, "bidirectional": False}, {}),
    "mixcse-single-composed": ({**MIXCSE, "bidirectional": False}, {"fused": False}),
    "mixcse-wo-sg": ({**MIXCSE, "stop_grad": False}, {}),
    "mixcse-wo-sg-single": ({**MIXCSE, "stop_grad": False, "bidirectional": False}, {}),
    "mixcse-reference": ({"name": "mixcse", "mode": "reference"}, {}),
    "mochi": (MOCHI, {}),
    "mochi-symmetric": (MOCHI, {"symmetric": True}),
    "mochi+mixcse": ([MOCHI, MIXCSE], {}),
    "synco": (SYNCO, {}),
    "synco-symmetric": (SYNCO, {"symmetric": True}),
    "mochi+synco": ([MOCHI, SYNCO], {}),
    "hard_copies": (HARD_COPIES, {}),
    "hard_copies-symmetric": (HARD_COPIES, {"symmetric": True}),
    "hard_copies+mixcse": ([HARD_COPIES, MIXCSE], {}),
    "mixcse_adaptive": (ADAPTIVE, {}),
    "mixcse_adaptive-single": ({**ADAPTIVE, "bidirectional": False}, {}),
    "mixcse_adaptive-wo-sg": ({**ADAPTIVE, "stop_grad": False}, {}),
    "mixcse_adaptive-floor": ({**ADAPTIVE, "lam_min": 0.3}, {}),
    "mochi+mixcse_adaptive": ([MOCHI, ADAPTIVE], {}),
}


@pytest.mark.parametrize("case", sorted(IN_BATCH_CASES))
def test_in_batch_fast_equals_plain_float64(case: str) -> None:
    strategies, kwargs = IN_BATCH_CASES[case]
    z1, z2 = _randn(12, 8, seed=1), _randn(12, 8, seed=2)
    fast = _in_batch("fast", strategies, z1, z2, **kwargs)
    _assert_same(fast, _in_batch("plain", strategies, z1, z2, **kwargs))


@pytest.mark.parametrize("case", ["none-symmetric", "mixcse", "mixcse-wo-sg", "mochi", "mochi+mixcse",
                                  "hard_copies+mixcse", "mixcse_adaptive"])
def test_distributed_in_batch_fast_equals_plain_float64(case: str) -> None:
    """One rank's view of a gathered batch: local rows 4..8 of a global batch of 12."""
    strategies, kwargs = IN_BATCH_CASES[case]
    kwargs = {k: v for k, v in kwargs.items() if k != "fused"}
    g1, g2 = _randn(12, 8, seed=3), _randn(12, 8, seed=4)

    def run(impl: str):
        a, b = g1.clone().requires_grad_(True), g2.clone().requires_grad_(True)
        loss_fn = ContrastiveLoss(0.05, strategies, impl=impl, **kwargs)
        gen = torch.Generator().manual_seed(5)
        out = loss_fn.in_batch(a[4:8], b[4:8], a, b, offset=4, generator=gen)
        out.loss.backward()
        return out.loss.detach(), (a.grad, b.grad), out.stats()

    _assert_same(run("fast"), run("plain"))


def _queue_inputs(seed: int, b: int = 6, k: int = 40, d: int = 8, dtype: torch.dtype = torch.float64):
    q, key = _randn(b, d, seed=seed, dtype=dtype), _randn(b, d, seed=seed + 1, dtype=dtype)
    queue = _randn(k, d, seed=seed + 2, dtype=dtype)
    query_ids = torch.arange(b)
    queue_ids = torch.randint(-1, 10, (k,), generator=torch.Generator().manual_seed(seed + 3))
    return q, key, queue, query_ids, queue_ids


QUEUE_CASES = {
    "none": None,
    "mixcse": MIXCSE,
    "mixcse-wo-sg": {**MIXCSE, "stop_grad": False},
    "mochi": MOCHI,
    "mochi-query-only": {**MOCHI, "n_pair": 0},
    "mochi-pairs-only": {**MOCHI, "n_query": 0},
    "mochi+mixcse": [MOCHI, MIXCSE],
    "synco": SYNCO,
    "mochi+synco": [MOCHI, SYNCO],
    "hard_copies": HARD_COPIES,
    "hard_copies+mochi": [HARD_COPIES, MOCHI],
    "mixcse_adaptive": ADAPTIVE,
    "mixcse_adaptive-wo-sg": {**ADAPTIVE, "stop_grad": False},
    "mochi+mixcse_adaptive": [MOCHI, ADAPTIVE],
}


@pytest.mark.parametrize("with_ids", [False, True], ids=["no-ids", "sample-ids"])
@pytest.mark.parametrize("case", sorted(QUEUE_CASES))
def test_queue_fast_equals_plain_float64(case: str, with_ids: bool) -> None:
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=10)
    ids = (query_ids, queue_ids) if with_ids else (None, None)
    strategies = QUEUE_CASES[case]
    fast = _queue("fast", strategies, q, key, queue, *ids)
    _assert_same(fast, _queue("plain", strategies, q, key, queue, *ids))


@pytest.mark.parametrize("step", [0, 1, 2, 4, 9])
@pytest.mark.parametrize("case", ["scheduled", "scheduled-cosine", "scheduled-single", "scheduled+mochi"])
def test_scheduled_mixcse_fast_equals_plain_at_each_step(case: str, step: int) -> None:
    """A lambda schedule: the fast path (fast_logits, which reads ctx.step; the fused loss declines) and the
    plain one use the step's lam, in-batch and against a queue with sample ids."""
    spec = {
        "scheduled": SCHEDULED,
        "scheduled-cosine": {**SCHEDULED, "lam_schedule": "cosine"},
        "scheduled-single": {**SCHEDULED, "bidirectional": False},
        "scheduled+mochi": [MOCHI, SCHEDULED],
    }[case]
    z1, z2 = _randn(12, 8, seed=60), _randn(12, 8, seed=61)

    def in_batch(impl: str):
        a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
        out = ContrastiveLoss(0.05, spec, impl=impl).in_batch(
            a, b, step=step, generator=torch.Generator().manual_seed(7)
        )
        out.loss.backward()
        return out.loss.detach(), (a.grad, b.grad), out.stats()

    fast = in_batch("fast")
    _assert_same(fast, in_batch("plain"))
    assert fast[2]["mixcse/lam"] == mixcse_module.scheduled_lam(
        step, 0.2, 0.4, 4, "cosine" if case == "scheduled-cosine" else "linear"
    )
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=62)

    def queue_run(impl: str):
        a = q.clone().requires_grad_(True)
        out = ContrastiveLoss(0.2, spec, impl=impl).queue(
            a, key, queue, query_ids, queue_ids, step=step, generator=torch.Generator().manual_seed(7)
        )
        out.loss.backward()
        return out.loss.detach(), (a.grad,), out.stats()

    _assert_same(queue_run("fast"), queue_run("plain"))


def test_float32_fast_equals_plain_to_1e4_relative_with_mochi_draws() -> None:
    """The engine's end-to-end check runs in float32 at 1e-4 relative; the loss-level one is tighter."""
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=20, b=32, k=512, d=16, dtype=torch.float32)
    spec = [{"name": "mochi", "n_hard": 64, "n_pair": 64, "n_query": 16}, MIXCSE]
    for seed in (0, 1, 2):
        fast = _queue("fast", spec, q, key, queue, query_ids, queue_ids, seed=seed)
        plain = _queue("plain", spec, q, key, queue, query_ids, queue_ids, seed=seed)
        _assert_same(fast, plain, rtol=1e-5, atol=1e-6)
    z1, z2 = _randn(32, 16, seed=21, dtype=torch.float32), _randn(32, 16, seed=22, dtype=torch.float32)
    for strategies in (MIXCSE, ADAPTIVE, {"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 4}):
        fast = _in_batch("fast", strategies, z1, z2)
        _assert_same(fast, _in_batch("plain", strategies, z1, z2), rtol=1e-5, atol=1e-6)


def test_plain_path_uses_no_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain path is an independent computation: with every kernel it could reach disabled, it still
    gives its numbers (and the fast path, which needs them, fails)."""

    def disabled(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a kernel was called")

    for module, name in [
        (contrastive_module, "pairwise_logits"),
        (contrastive_module, "info_nce_from_blocks"),
        (contrastive_module, "fused_in_batch_loss"),
        (contrastive_module, "excluded_queue_entries"),
        (mixcse_module, "mixcse_fast_logits"),
        (mixcse_module, "fused_in_batch_loss"),
        (mochi_module, "mochi_logits"),
        (mochi_module, "hardest_negatives"),
    ]:
        monkeypatch.setattr(module, name, disabled)
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=30)
    plain = _queue("plain", [MOCHI, MIXCSE], q, key, queue, query_ids, queue_ids)
    assert torch.isfinite(plain[0])
    z1, z2 = _randn(12, 8, seed=31), _randn(12, 8, seed=32)
    assert torch.isfinite(_in_batch("plain", [MOCHI, MIXCSE], z1, z2)[0])
    with pytest.raises(AssertionError, match="a kernel was called"):
        _queue("fast", [MOCHI, MIXCSE], q, key, queue, query_ids, queue_ids)


def test_plain_mixcse_equals_the_numpy_equations() -> None:
    """The third opinion: the plain path against the hand-written NumPy MixCSE, in-batch and queue."""
    z1, z2 = _randn(7, 5, seed=40), _randn(7, 5, seed=41)
    for bidirectional in (True, False):
        spec = {"name": "mixcse", "lam": 0.3, "bidirectional": bidirectional}
        got = ContrastiveLoss(0.05, spec, impl="plain").in_batch(z1, z2).loss
        want = mixcse_loss_np(z1.numpy(), z2.numpy(), 0.3, 0.05, bidirectional)
        assert float(got) == pytest.approx(want, rel=1e-12)
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=42)
    got = ContrastiveLoss(0.2, MIXCSE, impl="plain").queue(q, key, queue, query_ids, queue_ids).loss
    valid = (queue_ids.view(1, -1) != -1) & (query_ids.view(-1, 1) != queue_ids.view(1, -1))
    want = mixcse_queue_np(q.numpy(), key.numpy(), queue.numpy(), 0.3, 0.2, valid.numpy())
    assert float(got) == pytest.approx(want, rel=1e-12)


def test_plain_mochi_builds_the_points_of_its_draws() -> None:
    """The plain path's MoCHi logits are those of points built, in NumPy, from its own draws and the
    hardest negatives found by a full sort: q . normalize(alpha n_a + (1 - alpha) n_b) / tau and
    q . normalize(beta q + (1 - beta) n_c) / tau."""
    q, key, queue, _, _ = _queue_inputs(seed=50)
    spec = {"name": "mochi", "n_hard": 5, "n_pair": 7, "n_query": 3, "beta_max": 0.4}
    loss_fn = ContrastiveLoss(0.2, spec, impl="plain")
    got = loss_fn.queue(q, key, queue, generator=torch.Generator().manual_seed(1))
    h, hk, n = normalize(q.numpy()), normalize(key.numpy()), normalize(queue.numpy())
    draws = mochi_module.mochi_draws(6, 5, 7, 3, 0.4, torch.Generator().manual_seed(1), q.device, q.dtype)
    first, second, alpha, pick, beta = (x.numpy() for x in draws)
    losses = []
    for i in range(6):
        hard = np.sort(np.argsort(-(h[i] @ n.T))[:5])  # the 5 most similar, ascending index
        row = [h[i] @ hk[i] / 0.2, *(h[i] @ n.T / 0.2)]
        for a, b, w in zip(first[i], second[i], alpha[i]):
            m = w * n[hard[a]] + (1 - w) * n[hard[b]]
            row.append(h[i] @ m / np.linalg.norm(m) / 0.2)
        for c, w in zip(pick[i], beta[i]):
            m = w * h[i] + (1 - w) * n[hard[c]]
            row.append(h[i] @ m / np.linalg.norm(m) / 0.2)
        losses.append(logsumexp(np.asarray(row)) - row[0])
    assert float(got.loss) == pytest.approx(float(np.mean(losses)), rel=1e-12)


def test_impl_is_validated() -> None:
    with pytest.raises(StrategyArgumentError, match=r"^impl: must be 'fast' or 'plain', got 'reference'$"):
        ContrastiveLoss(0.1, impl="reference")
    assert "impl='plain'" in repr(ContrastiveLoss(0.1, "mixcse", impl="plain"))


@pytest.mark.parametrize("step", RAMP_STEPS)
@pytest.mark.parametrize("schedule", sorted(MOCHI_RAMPS))
def test_scheduled_mochi_fast_equals_plain_float64(schedule: str, step: int) -> None:
    """Under a ramp the fast path draws and gathers the same (fewer) points as the plain one, in-batch
    (one and both directions, with mixcse too) and against a queue with sample ids."""
    spec = MOCHI_RAMPS[schedule]
    z1, z2 = _randn(12, 8, seed=60), _randn(12, 8, seed=61)
    for strategies, kwargs in ((spec, {}), (spec, {"symmetric": True}), ([spec, MIXCSE], {})):
        fast = _in_batch("fast", strategies, z1, z2, step=step, **kwargs)
        _assert_same(fast, _in_batch("plain", strategies, z1, z2, step=step, **kwargs))
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=62)
    for strategies in (spec, [spec, SYNCO]):
        fast = _queue("fast", strategies, q, key, queue, query_ids, queue_ids, step=step)
        _assert_same(fast, _queue("plain", strategies, q, key, queue, query_ids, queue_ids, step=step))
