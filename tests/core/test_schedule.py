"""Generic schedules: a warm-up and ramps of any numeric argument of any strategy, in steps or in epochs;
the keys of the per-paper schedules they replace are refused naming the new form."""

from __future__ import annotations

import math

import pytest
import torch

from hardmix.config.loader import build_config
from hardmix.losses import ContrastiveLoss
from hardmix.strategies import MixCSE, MoCHi, Scheduled, build_strategies
from hardmix.text.config import build_text_config
from hardmix.utils.errors import ConfigError
from hardmix.vision.config import VisionConfig

from ._reference import mixcse_loss_np
from ._views import correlated_views

TAU = 0.05


def test_ramp_values_at_given_steps_linear_cosine_and_integer() -> None:
    lam = build_one({"name": "mixcse", "lam": {"start": 0.2, "end": 0.4, "steps": 10}})
    assert isinstance(lam, Scheduled)
    assert [lam.at(t).lam for t in (0, 10, 11, 1000)] == [0.2, 0.4, 0.4, 0.4]
    assert lam.at(5).lam == pytest.approx(0.3, abs=1e-15)
    cos = build_one({"name": "mixcse", "lam": {"start": 0.2, "end": 0.1, "steps": 8, "shape": "cosine"}})
    assert cos.at(2).lam == pytest.approx(0.2 - 0.1 * (1 - math.cos(math.pi / 4)) / 2, abs=1e-15)
    counts = build_one({"name": "mochi", "n_hard": 8, "n_query": {"start": 0, "end": 4, "steps": 4},
                        "n_pair": {"start": 0, "end": 10, "steps": 4}, "warmup_steps": 2})
    assert [counts.at(t) for t in (0, 1)] == [None, None]  # the warm-up: the strategy does not act
    assert [(counts.at(t).n_pair, counts.at(t).n_query) for t in (2, 3, 5, 6, 9)] == [
        (0, 0), (2, 1), (7, 3), (10, 4), (10, 4)]  # floor(r s), the ramp counted from the warm-up's end
    assert counts.final == MoCHi(n_hard=8, n_pair=10, n_query=4)
    assert build_one({"name": "mixcse", "lam": 0.3}) == MixCSE(lam=0.3)  # nothing scheduled: the strategy


@pytest.mark.parametrize("step", [0, 3, 6, 50])
def test_a_ramped_lambda_is_mixcse_at_the_steps_lambda(step) -> None:
    z1, z2 = correlated_views(8, 4, 8, 0.5)
    spec = {"name": "mixcse", "lam": {"start": 0.2, "end": 0.45, "steps": 6}}
    lam = 0.2 + 0.25 * min(step / 6, 1.0)
    out = ContrastiveLoss(TAU, spec).in_batch(z1, z2, step=step)
    assert float(out.loss) == pytest.approx(mixcse_loss_np(z1.numpy(), z2.numpy(), lam, TAU, True), rel=1e-10)
    assert out.stats()["mixcse/lam"] == pytest.approx(lam) and out.stats()["mixcse/active"] == 1.0


def test_a_ramped_mochi_is_mochi_with_the_steps_counts_and_the_warm_up_is_info_nce() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, queue = (torch.randn(n, 8, generator=g) for n in (4, 4, 40))
    spec = {"name": "mochi", "n_hard": 8, "n_pair": {"start": 0, "end": 10, "steps": 4},
            "n_query": {"start": 0, "end": 4, "steps": 4}, "warmup_steps": 2}
    loss = ContrastiveLoss(0.2, spec)
    for step, counts in ((3, (2, 1)), (5, (7, 3))):
        got = loss.queue(q, k, queue, step=step, generator=torch.Generator().manual_seed(1))
        fixed = ContrastiveLoss(0.2, MoCHi(n_hard=8, n_pair=counts[0], n_query=counts[1]))
        want = fixed.queue(q, k, queue, generator=torch.Generator().manual_seed(1))
        assert torch.equal(got.loss, want.loss)
        assert got.stats()["mochi/n_pair"] == counts[0]
    warm = loss.queue(q, k, queue, step=1)
    assert torch.equal(warm.loss, ContrastiveLoss(0.2).queue(q, k, queue).loss)
    assert warm.stats()["mochi/active"] == 0.0


def test_epochs_become_steps_when_resolved() -> None:
    cfg = build_config(VisionConfig, {"loss": {"queue_size": 64, "strategies": [
        {"name": "mochi", "n_hard": 8, "n_pair": {"start": 0, "end": 8, "epochs": 0.5},
         "warmup_epochs": 1.5}]}})
    (strategy,) = cfg.loss.strategies
    with pytest.raises(ValueError, match="in_steps"):
        strategy.at(0)
    loss = ContrastiveLoss(0.2, cfg.loss.strategies)
    loss.resolve_epochs(10)
    (resolved,) = loss.strategies
    assert resolved.warmup_steps == 15 and resolved.ramps["n_pair"].steps == 5
    assert resolved.at(14) is None and resolved.at(20).n_pair == 8


@pytest.mark.parametrize("key,new", [
    ("lam_end", "lam: {start"), ("schedule_steps", "lam: {start"), ("lam_schedule", "shape"),
    ("schedule", "n_pair: {start: 0"), ("ramp_steps", "n_pair: {start: 0"), ("ramp_epochs", "epochs"),
])
def test_the_per_paper_schedule_keys_are_refused_naming_the_new_form(key, new) -> None:
    with pytest.raises(ConfigError, match=rf"^loss\.strategies\[0\]\.{key}: is gone") as e:
        build_one({"name": "mochi", key: 1})
    assert new in str(e.value)
    with pytest.raises(ConfigError, match=rf"loss\.strategies\[0\]\.{key}: is gone"):
        build_text_config({"loss": {"strategies": [{"name": "mixcse", key: 1}]}})


@pytest.mark.parametrize("spec,argument", [
    ({"lam": {"start": 0.2, "end": 1.5, "steps": 3}}, "lam"),
    ({"lam": {"start": 0.2, "end": 0.3}}, "lam"),
    ({"lam": {"start": 0.2, "end": 0.3, "steps": 0}}, "lam"),
    ({"lam": {"start": 0.2, "end": 0.3, "steps": 3, "shape": "step"}}, "lam"),
    ({"lam": {"start": 0.2, "end": 0.3, "steps": 3, "epochs": 1}}, "lam"),
    ({"lam": {"begin": 0.2, "end": 0.3, "steps": 3}}, "lam"),
    ({"warmup_steps": -1}, "warmup_steps"),
    ({"warmup_steps": 2, "warmup_epochs": 1}, "warmup_epochs"),
])
def test_bad_schedules_name_their_argument(spec, argument) -> None:
    with pytest.raises(ConfigError, match=rf"^loss\.strategies\[0\]\.{argument}: "):
        build_one({"name": "mixcse", **spec})


def build_one(spec):  # noqa: ANN001, ANN201
    """The one strategy of a spec, as a config builds it."""
    [strategy] = build_strategies(spec)
    return strategy
