"""MoCHi's optional ramp of s and s': the counts at given steps, the loss at those steps, the
default constant path unchanged. (fast == plain under a ramp: tests/core/test_plain_equivalence.py.)"""

from __future__ import annotations

import math

import pytest
import torch

from hardmix.errors import ConfigError, StrategyArgumentError
from hardmix.losses import ContrastiveLoss
from hardmix.strategies import MoCHi
from hardmix.strategies.specs import build_strategy_specs
from hardmix.training.config import build_task_config
from hardmix.vision.config import VisionConfig

BASE = {"n_hard": 8, "n_pair": 20, "n_query": 8}


def test_linear_ramp_counts_at_given_steps() -> None:
    m = MoCHi(**BASE, warmup_steps=10, schedule="linear", ramp_steps=8)
    want = {0: (0, 0), 9: (0, 0), 10: (0, 0), 11: (2, 1), 12: (5, 2), 14: (10, 4), 17: (17, 7), 18: (20, 8),
            1000: (20, 8)}
    assert {t: m.counts_at(t) for t in want} == want
    assert m.ramp_at(14) == 0.5 and m.ramp_at(18) == 1.0 and m.ramp_at(5) == 0.0


def test_cosine_ramp_counts_at_given_steps() -> None:
    m = MoCHi(**BASE, warmup_steps=0, schedule="cosine", ramp_steps=4)
    ramps = [m.ramp_at(t) for t in range(6)]
    assert ramps == pytest.approx([0.0, (1 - math.cos(math.pi / 4)) / 2, 0.5, (1 + math.cos(math.pi / 4)) / 2,
                                   1.0, 1.0], abs=1e-15)
    assert [m.counts_at(t) for t in range(6)] == [(0, 0), (2, 1), (10, 4), (17, 6), (20, 8), (20, 8)]


def test_constant_is_the_paper_and_the_default() -> None:
    m = MoCHi(**BASE, warmup_steps=3)
    assert (m.schedule, m.ramp_steps) == ("constant", 0)
    assert [m.counts_at(t) for t in (0, 2, 3, 100)] == [(0, 0), (0, 0), (20, 8), (20, 8)]
    assert m.ramp_at(2) == 0.0 and m.ramp_at(3) == 1.0


def _queue_inputs(seed: int = 0, b: int = 6, k: int = 40, d: int = 8):
    g = torch.Generator().manual_seed(seed)
    q, key, queue = (torch.randn(n, d, generator=g, dtype=torch.float64) for n in (b, b, k))
    return q, key, queue, torch.arange(b), torch.randint(-1, 10, (k,), generator=g)


def _queue_loss(spec, step: int, impl: str = "fast", seed: int = 3):
    q, key, queue, query_ids, queue_ids = _queue_inputs()
    a = q.clone().requires_grad_(True)
    loss_fn = ContrastiveLoss(0.2, spec, impl=impl)
    gen = torch.Generator().manual_seed(seed)
    out = loss_fn.queue(a, key, queue, query_ids, queue_ids, step=step, generator=gen)
    out.loss.backward()
    return out, a.grad


@pytest.mark.parametrize("impl", ["fast", "plain"])
def test_the_loss_adds_the_ramped_counts(impl: str) -> None:
    """Before and at the ramp's start the loss is plain InfoNCE; in the ramp it adds s(t) + s'(t)
    columns (their draws: the plain loss with those counts); past it, bit for bit the constant loss."""
    ramp = {"name": "mochi", **BASE, "warmup_steps": 2, "schedule": "linear", "ramp_steps": 4}
    plain_info_nce, _ = _queue_loss(None, 0, impl)
    for step in (0, 2):
        out, _ = _queue_loss(ramp, step, impl)
        assert torch.equal(out.loss, plain_info_nce.loss)
        assert out.stats()["mochi/ramp"] == 0.0 and "mochi/synthetic_sim" not in out.stats()
    out, grad = _queue_loss(ramp, 4, impl)  # r = 0.5: s = 10, s' = 4
    want, want_grad = _queue_loss({"name": "mochi", **BASE, "n_pair": 10, "n_query": 4}, 4, impl)
    assert torch.equal(out.loss, want.loss) and torch.equal(grad, want_grad)
    assert out.stats()["mochi/ramp"] == 0.5
    for step in (6, 50):
        out, grad = _queue_loss(ramp, step, impl)
        want, want_grad = _queue_loss({"name": "mochi", **BASE, "warmup_steps": 2}, step, impl)
        assert torch.equal(out.loss, want.loss) and torch.equal(grad, want_grad)
        assert "ramp" not in {k.split("/")[1] for k in want.stats() if "/" in k}


def test_the_extra_columns_have_the_ramped_width() -> None:
    from hardmix.strategies.base import ContrastContext

    q, _, queue, _, _ = _queue_inputs()
    h, n = torch.nn.functional.normalize(q, dim=1), torch.nn.functional.normalize(queue, dim=1)
    m = MoCHi(**BASE, schedule="cosine", ramp_steps=4)
    for step, width in ((1, 3), (2, 14), (3, 23), (4, 28)):
        ctx = ContrastContext(
            anchors=h, positives=h, candidates=n, logits=h @ n.T / 0.2,
            positive_logits=torch.zeros(6, dtype=h.dtype), negative_mask=torch.ones(6, 40, dtype=torch.bool),
            temperature=0.2, mode="queue", step=step, generator=torch.Generator().manual_seed(0),
        )
        assert m.extra_logits(ctx).shape == (6, width)


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [({"schedule": "step"}, "schedule"), ({"schedule": "linear"}, "ramp_steps"),
     ({"schedule": "cosine", "ramp_steps": 0}, "ramp_steps"), ({"ramp_steps": 5}, "ramp_steps"),
     ({"schedule": "linear", "ramp_steps": -1}, "ramp_steps"),
     ({"schedule": "linear", "ramp_steps": 2.5}, "ramp_steps")],
)
def test_bad_schedules_name_their_argument(kwargs, arg: str) -> None:
    with pytest.raises(StrategyArgumentError, match=rf"^{arg}: "):
        MoCHi(**BASE, **kwargs)
    with pytest.raises(ConfigError, match=rf"loss\.strategies\[0\]\.{arg}: "):
        build_strategy_specs([{"name": "mochi", **BASE, **kwargs}])


def test_vision_ramp_epochs_become_steps_like_warmup_epochs() -> None:
    spec = {"name": "mochi", **BASE, "warmup_epochs": 1.5, "schedule": "cosine", "ramp_epochs": 2.25}
    strategies = [spec, {"name": "synco", "warmup_epochs": 1}]
    cfg = build_task_config(VisionConfig, {"loss": {"strategies": strategies}})
    mochi, synco = cfg.strategy_specs(steps_per_epoch=10)
    assert mochi == {"name": "mochi", **BASE, "schedule": "cosine", "warmup_steps": 15, "ramp_steps": 22}
    assert synco == {"name": "synco", "warmup_steps": 10}
    assert cfg.strategy_specs(steps_per_epoch=1)[0]["ramp_steps"] == 2
    built = cfg.strategies(steps_per_epoch=10)
    assert (built[0].ramp_steps, built[0].warmup_steps, built[1].warmup_steps) == (22, 15, 10)


@pytest.mark.parametrize(
    ("spec", "message"),
    [({"name": "mochi", "ramp_epochs": 1}, r"loss\.strategies\[0\]\.ramp_epochs: a ramp needs schedule"),
     ({"name": "mochi", "schedule": "linear", "ramp_epochs": 0},
      r"loss\.strategies\[0\]\.ramp_epochs: must be"),
     ({"name": "mochi", "schedule": "linear", "ramp_epochs": 1, "ramp_steps": 3}, r"not both"),
     ({"name": "synco", "ramp_epochs": 1},
      r"loss\.strategies\[0\]\.ramp_epochs: only a strategy with ramp_steps"),
     ({"name": "mixcse", "warmup_epochs": 1},
      r"loss\.strategies\[0\]\.warmup_epochs: only a strategy with warmup_steps")],
)
def test_vision_epoch_keys_are_checked(spec, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_task_config(VisionConfig, {"loss": {"strategies": [spec]}})
