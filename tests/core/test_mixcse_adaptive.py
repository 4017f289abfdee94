"""mixcse_adaptive (a per-anchor lambda from MixCSE's Sec. 4.3 bound) and mixcse's lambda schedule, against
float64 NumPy: the lambdas (bisection on vector mixtures, and a dense grid), the logits and losses, the
gradients (central differences with the stop-gradient quantities held fixed), in-batch in both directions
and against a queue with sample-id exclusions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.cli import main
from hardmix.losses import ContrastiveLoss
from hardmix.strategies import MixCSEAdaptive, build_strategies, describe_strategies
from hardmix.strategies.base import ContrastContext
from hardmix.strategies.mixcse_adaptive import adaptive_lam
from hardmix.text.config import build_text_config
from hardmix.utils.errors import ConfigError, StrategyArgumentError

from ._reference import (
    adaptive_lam_np,
    finite_difference_np,
    mix,
    mixcse_adaptive_loss_np,
    mixcse_adaptive_queue_np,
    normalize,
)
from ._views import correlated_views

TAU = 0.05


def _views(b: int = 8, d: int = 4, seed: int = 0, shared: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Two correlated float64 views with unequal norms (at d = 4 the bound bites in some rows, not all)."""
    return correlated_views(b, d, seed, shared)


def _queue_inputs(seed: int = 3, b: int = 6, k: int = 30, d: int = 4):
    """Queries, keys and a queue partly made of noisy copies of the queries (so the bound bites), with ids:
    some queue entries carry a query's id (excluded for it) and some are empty (-1)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, d, generator=g, dtype=torch.float64)
    key = q + 0.5 * torch.randn(b, d, generator=g, dtype=torch.float64)
    near = q.repeat(3, 1)[: k // 2] + 0.6 * torch.randn(k // 2, d, generator=g, dtype=torch.float64)
    queue = torch.cat([near, torch.randn(k - k // 2, d, generator=g, dtype=torch.float64)])
    queue_ids = torch.randint(-1, 12, (k,), generator=g)
    return q, key, queue, torch.arange(b), queue_ids


def _np(*xs: torch.Tensor):
    return tuple(x.detach().numpy() for x in xs)


# ---- the per-anchor lambda ----------------------------------------------------------------------------


@pytest.mark.parametrize("margin,lam_max", [(0.1, 0.2), (0.1, 0.5), (0.0, 0.5), (0.3, 0.8)])
@pytest.mark.parametrize("direction", [0, 1])
def test_lambda_equals_numpy_bisection_on_vector_mixtures(margin, lam_max, direction) -> None:
    z1, z2 = _views(seed=1)
    h1, h2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    anchors, positives = (h1, h2) if direction == 0 else (h2, h1)
    valid = ~torch.eye(8, dtype=torch.bool)
    got = adaptive_lam(anchors, positives, positives, valid, margin, lam_max)
    lam, raw, constrained, _ = adaptive_lam_np(*_np(anchors, positives, positives), valid.numpy(), margin,
                                               lam_max)
    np.testing.assert_allclose(got.lam.numpy(), lam, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got.bites.numpy(), raw < lam_max)
    assert constrained.any()
    if (margin, lam_max) == (0.1, 0.5):  # this case has both kinds of rows
        assert 0 < got.bites.sum() < 8


def test_lambda_is_the_largest_feasible_on_a_dense_grid() -> None:
    """Independently of any bisection: on a grid of 4001 lambdas in [0, lam_max], each constrained pair's
    feasible set (h_i . m'_ij(lam) <= t_i, mixtures built as vectors) is a prefix of the grid (the interval
    [0, lam*] of the module's argument), lam_i is feasible for every constrained pair of its row, and the
    next grid point above lam_i is infeasible for one of them where the bound bites."""
    z1, z2 = _views(seed=2)
    h, p = normalize(z1.numpy()), normalize(z2.numpy())
    margin, lam_max = 0.1, 0.5
    valid = ~np.eye(8, dtype=bool)
    got = adaptive_lam(torch.from_numpy(h), torch.from_numpy(p), torch.from_numpy(p), torch.from_numpy(valid),
                       margin, lam_max).lam.numpy()
    grid = np.linspace(0.0, lam_max, 4001)
    step = grid[1]
    bites = 0
    for i in range(8):
        t = h[i] @ p[i] - margin
        constrained = [j for j in range(8) if valid[i, j] and h[i] @ p[j] <= t]
        for j in constrained:
            feasible = np.array([h[i] @ mix(p[i], p[j], lam) <= t for lam in grid])
            first_bad = np.argmin(feasible) if not feasible.all() else len(grid)
            assert feasible[:first_bad].all() and not feasible[first_bad:].any(), (i, j)  # a prefix
            assert h[i] @ mix(p[i], p[j], got[i]) <= t + 1e-12
        if got[i] < lam_max - step:
            bites += 1
            above = got[i] + step
            assert any(h[i] @ mix(p[i], p[j], above) > t for j in constrained), i
        else:  # lam_max itself (up to the grid) is feasible for every constrained pair
            assert all(h[i] @ mix(p[i], p[j], got[i]) <= t + 1e-12 for j in constrained)
    assert 0 < bites < 8


def test_every_mixture_at_its_lambda_satisfies_the_bound() -> None:
    """The logits the strategy returns: h_i . m'_ij(lam_i) <= t_i for every constrained j, both directions;
    the unconstrained (already too similar) negatives are the only ones above t_i."""
    z1, z2 = _views(seed=3)
    seen: list[tuple[ContrastContext, torch.Tensor]] = []

    @dataclasses.dataclass(frozen=True)
    class Recording(MixCSEAdaptive):
        def extra_cosines(self, ctx):
            out = super().extra_cosines(ctx)
            seen.append((ctx, out[0]))
            return out

    strategy = Recording(margin=0.1, lam_max=0.5)
    ContrastiveLoss(TAU, strategy).in_batch(z1, z2)
    assert [ctx.direction for ctx, _ in seen] == [0, 1]
    for ctx, cosines in seen:
        cos = cosines.detach()
        t = (ctx.anchors * ctx.positives).sum(1, keepdim=True).detach() - 0.1
        constrained = ctx.negative_mask & (ctx.cosines.detach() <= t)
        assert constrained.any()
        assert bool((cos[constrained] <= (t.expand_as(cos))[constrained] + 1e-12).all())
        assert bool(torch.isinf(cos[~ctx.negative_mask]).all())


def test_lambda_floor_and_nothing_constrained() -> None:
    z1, z2 = _views(seed=1)
    h1, h2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    valid = ~torch.eye(8, dtype=torch.bool)
    free = adaptive_lam(h1, h2, h2, valid, 0.1, 0.5)
    floored = adaptive_lam(h1, h2, h2, valid, 0.1, 0.5, lam_min=0.3)
    torch.testing.assert_close(floored.lam, free.lam.clamp_min(0.3), rtol=0, atol=0)
    assert torch.equal(floored.bites, free.bites)  # "bites" is before the floor
    # margin 2: t_i <= -1, no negative constrains, lam_i = lam_max everywhere.
    lam_max_everywhere = torch.full((8,), 0.5, dtype=torch.float64)
    assert torch.equal(adaptive_lam(h1, h2, h2, valid, 2.0, 0.5).lam, lam_max_everywhere)


def test_without_binding_negatives_the_loss_is_mixcse_at_lam_max() -> None:
    z1, z2 = _views(seed=4)
    got = ContrastiveLoss(TAU, {"name": "mixcse_adaptive", "margin": 2.0, "lam_max": 0.3})
    want = ContrastiveLoss(TAU, {"name": "mixcse", "lam": 0.3})
    torch.testing.assert_close(got.in_batch(z1, z2).loss, want.in_batch(z1, z2).loss, rtol=1e-12, atol=0)


def test_float32_lambda_under_autocast_matches_float64() -> None:
    z1, z2 = _views(seed=5)
    h1, h2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    valid = ~torch.eye(8, dtype=torch.bool)
    want = adaptive_lam(h1, h2, h2, valid, 0.1, 0.5).lam
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = adaptive_lam(h1.float(), h2.float(), h2.float(), valid, 0.1, 0.5)
    assert got.lam.dtype == torch.float32
    torch.testing.assert_close(got.lam.double(), want, rtol=0, atol=1e-5)


# ---- the loss, in-batch and queue -----------------------------------------------------------------------


@pytest.mark.parametrize("second_direction", [True, False])
@pytest.mark.parametrize("lam_min", [0.0, 0.15])
def test_in_batch_loss_and_gradients_equal_numpy(second_direction, lam_min) -> None:
    z1, z2 = _views(seed=6)
    spec = {"name": "mixcse_adaptive", "margin": 0.1, "lam_max": 0.5, "lam_min": lam_min,
            "second_direction": second_direction}
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    loss_fn = ContrastiveLoss(TAU, spec)
    assert loss_fn.both_directions == second_direction
    out = loss_fn.in_batch(a, b)
    out.loss.backward()
    args = (0.1, 0.5, lam_min, TAU, second_direction)
    want, frozen = mixcse_adaptive_loss_np(z1.numpy(), z2.numpy(), *args)
    assert float(out.loss.detach()) == pytest.approx(want, rel=1e-10)
    # Gradients: the lambdas and the mixtures are constants (SG), so the finite difference holds them.
    x1, x2 = z1.numpy(), z2.numpy()
    g1 = finite_difference_np(lambda x: mixcse_adaptive_loss_np(x, x2, *args, frozen=frozen)[0], x1)
    g2 = finite_difference_np(lambda x: mixcse_adaptive_loss_np(x1, x, *args, frozen=frozen)[0], x2)
    np.testing.assert_allclose(a.grad.numpy(), g1, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(b.grad.numpy(), g2, rtol=1e-6, atol=1e-8)
    # Diagnostics: the first direction's lambdas.
    lam, raw, _, _ = adaptive_lam_np(normalize(z1.numpy()), normalize(z2.numpy()), normalize(z2.numpy()),
                                     ~np.eye(8, dtype=bool), 0.1, 0.5, lam_min)
    stats = out.stats()
    assert stats["mixcse_adaptive/lam_mean"] == pytest.approx(lam.mean(), abs=1e-12)
    assert stats["mixcse_adaptive/lam_smallest"] == pytest.approx(lam.min(), abs=1e-12)
    assert stats["mixcse_adaptive/bound_bites"] == pytest.approx(np.mean(raw < 0.5))
    assert 0.0 < stats["mixcse_adaptive/bound_bites"] < 1.0


def test_without_stop_gradient_the_gradient_flows_through_the_mixtures_at_fixed_lambdas() -> None:
    z1, z2 = _views(seed=7)
    spec = {"name": "mixcse_adaptive", "margin": 0.1, "lam_max": 0.5, "stop_grad": False}
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    ContrastiveLoss(TAU, spec).in_batch(a, b).loss.backward()
    args = (0.1, 0.5, 0.0, TAU, True)
    _, frozen = mixcse_adaptive_loss_np(z1.numpy(), z2.numpy(), *args)
    lams = [(lam, None) for lam, _ in frozen]  # the lambdas fixed, the mixtures rebuilt from the inputs
    x1, x2 = z1.numpy(), z2.numpy()
    g1 = finite_difference_np(lambda x: mixcse_adaptive_loss_np(x, x2, *args, frozen=lams)[0], x1)
    np.testing.assert_allclose(a.grad.numpy(), g1, rtol=1e-6, atol=1e-8)
    a_sg = z1.clone().requires_grad_(True)
    ContrastiveLoss(TAU, {**spec, "stop_grad": True}).in_batch(a_sg, z2).loss.backward()
    assert not torch.allclose(a_sg.grad, a.grad)


@pytest.mark.parametrize("with_ids", [False, True], ids=["no-ids", "sample-ids"])
def test_queue_loss_and_gradient_equal_numpy(with_ids) -> None:
    q, key, queue, query_ids, queue_ids = _queue_inputs()
    spec = {"name": "mixcse_adaptive", "margin": 0.1, "lam_max": 0.5}
    a = q.clone().requires_grad_(True)
    ids = (query_ids, queue_ids) if with_ids else (None, None)
    out = ContrastiveLoss(0.2, spec).queue(a, key, queue, *ids)
    out.loss.backward()
    if with_ids:
        valid = ((queue_ids.view(1, -1) != -1) & (query_ids.view(-1, 1) != queue_ids.view(1, -1))).numpy()
        assert not valid.all()
    else:
        valid = np.ones((6, 30), dtype=bool)
    args = (key.numpy(), queue.numpy(), valid, 0.1, 0.5, 0.0, 0.2)
    want, frozen = mixcse_adaptive_queue_np(q.numpy(), *args)
    assert float(out.loss.detach()) == pytest.approx(want, rel=1e-10)
    g = finite_difference_np(lambda x: mixcse_adaptive_queue_np(x, *args, frozen=frozen)[0], q.numpy())
    np.testing.assert_allclose(a.grad.numpy(), g, rtol=1e-6, atol=1e-8)
    assert 0.0 < out.stats()["mixcse_adaptive/bound_bites"] <= 1.0


# ---- arguments, registry --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        ({"margin": -0.1}, "margin"),
        ({"margin": 2.5}, "margin"),
        ({"margin": "big"}, "margin"),
        ({"lam_max": 0.0}, "lam_max"),
        ({"lam_max": 1.0}, "lam_max"),
        ({"lam_max": True}, "lam_max"),
        ({"lam_min": -0.1}, "lam_min"),
        ({"lam_min": 0.3}, "lam_min"),  # above lam_max = 0.2
        ({"stop_grad": "yes"}, "stop_grad"),
        ({"second_direction": 1}, "second_direction"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, argument) -> None:
    with pytest.raises(StrategyArgumentError) as info:
        MixCSEAdaptive(**kwargs)
    assert info.value.argument == argument


def test_bad_argument_through_a_config_names_its_key(tiny_text_config) -> None:
    data = {**tiny_text_config, "loss": {"temperature": 0.05,
                                         "strategies": [{"name": "mixcse_adaptive", "margin": -1}]}}
    with pytest.raises(ConfigError, match=r"loss\.strategies\[0\]\.margin: must be in \[0, 2\]"):
        build_text_config(data)
    data["loss"]["strategies"] = [{"name": "mixcse", "lam_end": 0.4}]
    with pytest.raises(ConfigError, match=r"loss\.strategies\[0\]\.lam_end: is gone; .*lam: \{start"):
        build_text_config(data)


def test_hardmix_strategies_lists_it(capsys) -> None:
    assert main(["strategies"]) == 0
    text = capsys.readouterr().out
    for needle in ("mixcse_adaptive:", "margin = 0.1", "lam_max = 0.2", "lam_min = 0.0"):
        assert needle in text, needle


def test_registry_config_round_trip_and_listing() -> None:
    s = build_one({"name": "mixcse_adaptive", "margin": 0.05, "lam_max": 0.3, "lam_min": 0.1})
    assert isinstance(s, MixCSEAdaptive) and (s.margin, s.lam_max, s.lam_min) == (0.05, 0.3, 0.1)
    assert repr(build_one(s.config())) == repr(s)
    listing = describe_strategies()
    assert "mixcse_adaptive: MixCSE with a per-anchor lambda" in listing
    assert "margin = 0.1" in listing and "hardmix's choice" in listing
    assert "lam_max = 0.2" in listing and "paper's constant" in listing
    assert MixCSEAdaptive.kinds() == ("extra",)


def build_one(spec):  # noqa: ANN001, ANN201
    """The one strategy of a spec, as a config builds it."""
    [strategy] = build_strategies(spec)
    return strategy
