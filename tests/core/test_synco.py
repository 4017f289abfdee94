"""SynCo's extra synthetic hard negatives (``synco``) against independent float64 NumPy constructions.

The random numbers come from :func:`hardmix.strategies.synco.synco_draws` (the one function the strategy
draws through) with the same seed; everything else (the hardest negatives by a full sort, each point
built and normalized one by one, the loss, its gradient with the points held constant) is written in
``_reference.py``. Values at 1e-10 relative in float64, gradients likewise, in-batch (one and both
directions) and against a queue with sample-id exclusions, alone and composed with ``mochi``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import ContrastiveLoss
from hardmix.strategies import SynCo, build_strategies, describe_strategies
from hardmix.strategies.base import ContrastContext
from hardmix.strategies.synco import SYNTHETIC_KINDS, synco_draws, synco_synthesize
from hardmix.utils.errors import ConfigError, StrategyArgumentError

from ._reference import (
    hardest_np,
    info_nce_with_points_np,
    mochi_points_np,
    normalize,
    synco_points_np,
    through_normalization,
)

F64 = {"rtol": 1e-10, "atol": 1e-12}
# Scales far above the defaults, so that each kind moves its points visibly.
SYNCO = {"name": "synco", "n_hard": 6, "n_extrapolated": 5, "extrapolation_max": 0.4, "n_noise": 4,
         "sigma": 0.3, "n_perturbed": 3, "delta": 0.5, "n_adversarial": 3, "eta": 0.2}
ONLY = {
    "extrapolated": {"n_noise": 0, "n_perturbed": 0, "n_adversarial": 0},
    "noise": {"n_extrapolated": 0, "n_perturbed": 0, "n_adversarial": 0},
    "perturbed": {"n_extrapolated": 0, "n_noise": 0, "n_adversarial": 0},
    "adversarial": {"n_extrapolated": 0, "n_noise": 0, "n_perturbed": 0},
}
MOCHI = {"name": "mochi", "n_hard": 5, "n_pair": 4, "n_query": 3, "beta_max": 0.4}


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _np_points(specs, anchors, candidates, valid, gen) -> list[list[np.ndarray]]:
    """Per anchor, the extra points of every strategy in ``specs`` (in order), drawing from ``gen`` in the
    order the loss does; the hardest negatives by a full sort in NumPy."""
    b, d = anchors.shape
    sims = anchors @ candidates.T
    rows: list[list[np.ndarray]] = [[] for _ in range(b)]
    for spec in specs:
        strategy = build_one(spec)
        n = strategy.n_hard
        hard = [hardest_np(sims[i], valid[i], n) for i in range(b)]
        if spec["name"] == "mochi":
            draws = strategy.draws(b, gen, torch.device("cpu"), torch.float64)
            draws = [x.numpy() for x in draws]
            for i in range(b):
                rows[i] += mochi_points_np(anchors[i], candidates, hard[i], *(x[i] for x in draws))
        else:
            draws = [x.numpy() for x in synco_draws(b, d, n, strategy.counts, strategy.extrapolation_max, gen,
                                                   torch.device("cpu"), torch.float64)]
            for i in range(b):
                rows[i] += synco_points_np(anchors[i], candidates, hard[i], *(x[i] for x in draws),
                                           strategy.sigma, strategy.delta, strategy.eta)
    return rows


def _in_batch_np(specs, z1, z2, tau, both_directions, seed):
    """Loss and gradients of (z1, z2) from the NumPy constructions, in-batch."""
    z1, z2 = z1.numpy(), z2.numpy()
    h1, h2 = normalize(z1), normalize(z2)
    b = len(h1)
    valid = ~np.eye(b, dtype=bool)
    gen = torch.Generator().manual_seed(seed)
    points = _np_points(specs, h1, h2, valid, gen)
    loss, g_a1, g_c1 = info_nce_with_points_np(h1, h2, valid, points, tau, positive_index=np.arange(b))
    g_h1, g_h2 = g_a1, g_c1
    if both_directions:
        points2 = _np_points(specs, h2, h1, valid, gen)
        loss2, g_a2, g_c2 = info_nce_with_points_np(h2, h1, valid, points2, tau, positive_index=np.arange(b))
        loss, g_h1, g_h2 = 0.5 * (loss + loss2), 0.5 * (g_a1 + g_c2), 0.5 * (g_c1 + g_a2)
    return loss, through_normalization(z1, g_h1), through_normalization(z2, g_h2)


def _in_batch(specs, z1, z2, tau, both_directions, seed):
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    out = ContrastiveLoss(tau, specs, both_directions=both_directions).in_batch(
        a, b, generator=torch.Generator().manual_seed(seed))
    out.loss.backward()
    return out, a.grad, b.grad


def _queue_inputs(seed: int, b: int = 5, k: int = 30, d: int = 7):
    q, key, queue = _randn(b, d, seed=seed), _randn(b, d, seed=seed + 1), _randn(k, d, seed=seed + 2)
    query_ids = torch.arange(b)
    queue_ids = torch.randint(-1, 8, (k,), generator=torch.Generator().manual_seed(seed + 3))
    return q, key, queue, query_ids, queue_ids


def _queue_np(specs, q, key, queue, query_ids, queue_ids, tau, seed):
    h, hk, n = normalize(q.numpy()), normalize(key.numpy()), normalize(queue.numpy())
    valid = np.ones((len(h), len(n)), dtype=bool)
    if queue_ids is not None:
        valid &= queue_ids.numpy()[None, :] != -1
        valid &= query_ids.numpy()[:, None] != queue_ids.numpy()[None, :]
    points = _np_points(specs, h, n, valid, torch.Generator().manual_seed(seed))
    loss, g_h, _ = info_nce_with_points_np(h, n, valid, points, tau, positives=hk)
    return loss, through_normalization(q.numpy(), g_h)


def _queue(specs, q, key, queue, query_ids, queue_ids, tau, seed):
    a = q.clone().requires_grad_(True)
    out = ContrastiveLoss(tau, specs).queue(a, key, queue, query_ids, queue_ids,
                                                       generator=torch.Generator().manual_seed(seed))
    out.loss.backward()
    return out, a.grad


def _close(got: torch.Tensor, want: np.ndarray | float) -> None:
    torch.testing.assert_close(got.detach(), torch.as_tensor(want, dtype=torch.float64), **F64)


# ---- each kind, values and gradients ---------------------------------------------------------------

CASES = {"all": SYNCO, **{kind: {**SYNCO, **zeros} for kind, zeros in ONLY.items()}}


@pytest.mark.parametrize("both_directions", [False, True], ids=["one-direction", "both_directions"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_in_batch_equals_numpy(case: str, both_directions: bool) -> None:
    z1, z2 = _randn(9, 6, seed=1), _randn(9, 6, seed=2)
    out, g1, g2 = _in_batch([CASES[case]], z1, z2, 0.05, both_directions, seed=3)
    loss, w1, w2 = _in_batch_np([CASES[case]], z1, z2, 0.05, both_directions, seed=3)
    _close(out.loss, loss)
    _close(g1, w1)
    _close(g2, w2)


@pytest.mark.parametrize("with_ids", [False, True], ids=["no-ids", "sample-ids"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_queue_equals_numpy(case: str, with_ids: bool) -> None:
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=10)
    ids = (query_ids, queue_ids) if with_ids else (None, None)
    out, g = _queue([CASES[case]], q, key, queue, *ids, 0.2, seed=4)
    loss, want = _queue_np([CASES[case]], q, key, queue, *ids, 0.2, seed=4)
    _close(out.loss, loss)
    _close(g, want)


@pytest.mark.parametrize("order", ["mochi-first", "synco-first"])
def test_composed_with_mochi_appends_both_columns(order: str) -> None:
    """[mochi, synco]: MoCHi's points and SynCo's, from one generator in list order, all in the
    denominator (queue with exclusions, and in-batch both_directions)."""
    specs = [MOCHI, SYNCO] if order == "mochi-first" else [SYNCO, MOCHI]
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=20)
    out, g = _queue(specs, q, key, queue, query_ids, queue_ids, 0.2, seed=5)
    loss, want = _queue_np(specs, q, key, queue, query_ids, queue_ids, 0.2, seed=5)
    _close(out.loss, loss)
    _close(g, want)
    stats = out.stats()
    assert {"mochi/synthetic_sim", "synco/synthetic_sim"} <= stats.keys()
    z1, z2 = _randn(10, 6, seed=21), _randn(10, 6, seed=22)
    out, g1, g2 = _in_batch(specs, z1, z2, 0.05, True, seed=6)
    loss, w1, w2 = _in_batch_np(specs, z1, z2, 0.05, True, seed=6)
    _close(out.loss, loss)
    _close(g1, w1)
    _close(g2, w2)


def test_the_numpy_gradient_matches_a_finite_difference() -> None:
    """The reference's analytic gradient (points constant) against a central difference of its own loss."""
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=30, b=3, k=12, d=4)
    spec = [{**SYNCO, "n_hard": 4}]
    h, hk, n = normalize(q.numpy()), normalize(key.numpy()), normalize(queue.numpy())
    valid = np.ones((3, 12), dtype=bool)
    points = _np_points(spec, h, n, valid, torch.Generator().manual_seed(1))
    _, g_h, _ = info_nce_with_points_np(h, n, valid, points, 0.2, positives=hk)
    g_q = through_normalization(q.numpy(), g_h)
    eps = 1e-6
    fd = np.zeros_like(g_q)
    for i in range(3):
        for j in range(4):
            z = q.numpy().copy()
            z[i, j] += eps
            up = info_nce_with_points_np(normalize(z), n, valid, points, 0.2, positives=hk)[0]
            z[i, j] -= 2 * eps
            down = info_nce_with_points_np(normalize(z), n, valid, points, 0.2, positives=hk)[0]
            fd[i, j] = (up - down) / (2 * eps)
    np.testing.assert_allclose(g_q, fd, rtol=1e-6, atol=1e-8)


# ---- the points themselves -------------------------------------------------------------------------


def _context(q: torch.Tensor, negatives: torch.Tensor, valid: torch.Tensor, seed: int = 0) -> ContrastContext:
    h, n = F.normalize(q, dim=1), F.normalize(negatives, dim=1)
    return ContrastContext(
        anchors=h, positives=h, candidates=n, cosines=(h @ n.T).masked_fill(~valid, float("-inf")),
        positive_cosines=torch.ones(len(h), dtype=h.dtype), negative_mask=valid, mode="queue",
        generator=torch.Generator().manual_seed(seed),
    )


def test_kinds_have_their_own_counts_in_a_fixed_order_and_zero_disables() -> None:
    q, _, queue, _, _ = _queue_inputs(seed=40)
    valid = torch.ones(5, 30, dtype=torch.bool)
    s = SynCo(n_hard=6, n_extrapolated=3, n_noise=0, n_perturbed=2, n_adversarial=1)
    assert s.extra_cosines(_context(q, queue, valid))[0].shape == (5, 6)
    assert SYNTHETIC_KINDS == ("extrapolated", "noise", "perturbed", "adversarial")
    off = SynCo(n_hard=6, n_extrapolated=0, n_noise=0, n_perturbed=0, n_adversarial=0)
    assert off.extra_cosines(_context(q, queue, valid)) is None


def test_draws_come_from_the_generator_in_the_documented_order() -> None:
    gen = torch.Generator().manual_seed(7)
    d = synco_draws(3, 4, 6, (2, 1, 2, 1), 0.5, gen, torch.device("cpu"), torch.float64)
    g = torch.Generator().manual_seed(7)
    want = [torch.randint(6, (3, 2), generator=g), 0.5 * torch.rand(3, 2, generator=g, dtype=torch.float64),
            torch.randint(6, (3, 1), generator=g), torch.randn(3, 1, 4, generator=g, dtype=torch.float64),
            torch.randint(6, (3, 2), generator=g), torch.randint(6, (3, 1), generator=g)]
    for got, expected in zip(d, want):
        assert torch.equal(got, expected)
    assert float(d.extrapolation.max()) <= 0.5


def test_points_are_unit_detached_and_built_from_the_querys_own_valid_hardest() -> None:
    """Basis negatives e_0..e_{K-1} and queries near a few of them: each point's largest negative
    coordinate is one of the query's N hardest valid negatives (never an excluded one)."""
    g = torch.Generator().manual_seed(8)
    b, k, n = 4, 16, 3
    q = torch.zeros(b, k + b, dtype=torch.float64)
    q[:, :k] = torch.rand(b, k, generator=g, dtype=torch.float64) * 0.2
    q[torch.arange(b), k + torch.arange(b)] = 1.0
    negatives = torch.eye(k + b, dtype=torch.float64)[:k]
    valid = torch.rand(b, k, generator=g) > 0.3
    s = SynCo(n_hard=n, n_extrapolated=8, n_noise=8, sigma=0.01, n_perturbed=8, n_adversarial=8)
    ctx = _context(q.requires_grad_(True), negatives, valid, seed=9)
    cosines, _ = s.extra_cosines(ctx)
    assert cosines.shape == (b, 32) and cosines.requires_grad

    hard = torch.tensor([hardest_np(ctx.cosines[i].detach().numpy(), valid[i].numpy(), n) for i in range(b)])
    draws = synco_draws(b, k + b, n, s.counts, 0.5, torch.Generator().manual_seed(9), torch.device("cpu"),
                        torch.float64)
    points = synco_synthesize(ctx.anchors, negatives, hard, draws, 0.01, 0.01, 0.01)
    assert not points.requires_grad
    torch.testing.assert_close(points.norm(dim=-1), torch.ones(b, 32, dtype=torch.float64))
    torch.testing.assert_close(cosines, (points @ ctx.anchors.unsqueeze(2)).squeeze(2), **F64)
    nearest = points[..., :k].argmax(dim=-1)  # (B, 32)
    for i in range(b):
        assert set(nearest[i].tolist()) <= set(hard[i].tolist())
        assert bool(valid[i, nearest[i]].all())


def test_extrapolated_points_lie_past_their_negative_away_from_the_query() -> None:
    """s ∝ (1 + b) n - b q: in the plane of q and n, with a negative weight on q (so q . s < q . n)."""
    q, _, queue, _, _ = _queue_inputs(seed=50, d=12)
    s = SynCo(n_hard=6, n_extrapolated=20, n_noise=0, n_perturbed=0, n_adversarial=0, extrapolation_max=0.5)
    ctx = _context(q, queue, torch.ones(5, 30, dtype=torch.bool), seed=2)
    cosines, _ = s.extra_cosines(ctx)
    everything = np.ones(30, bool)
    hard = torch.stack([torch.tensor(hardest_np(ctx.cosines[i].numpy(), everything, 6)) for i in range(5)])
    draws = synco_draws(5, 12, 6, s.counts, 0.5, torch.Generator().manual_seed(2), torch.device("cpu"),
                        torch.float64)
    cos = ctx.cosines.gather(1, hard.gather(1, draws.extrapolated))
    assert bool((cosines < cos).all())  # past n on the great circle from q through n
    # And exactly: q . s = ((1 + b) q.n - b) / ||(1 + b) n - b q||.
    b_ = draws.extrapolation
    norm = torch.sqrt((1 + b_) ** 2 + b_**2 - 2 * b_ * (1 + b_) * cos)
    torch.testing.assert_close(cosines, ((1 + b_) * cos - b_) / norm, **F64)


# ---- arguments, registry, configs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arg", "value"),
    [("n_hard", 0), ("n_hard", 2.5), ("n_extrapolated", -1), ("n_noise", True), ("n_perturbed", "4"),
     ("n_adversarial", -2), ("extrapolation_max", 0.0), ("sigma", -0.1),
     ("delta", "big"), ("eta", math.inf), ("eta", False)],
)
def test_bad_arguments_name_themselves(arg: str, value) -> None:
    with pytest.raises(StrategyArgumentError, match=rf"^{arg}: ") as error:
        SynCo(**{arg: value})
    assert error.value.argument == arg
    with pytest.raises(ConfigError, match=rf"loss\.strategies\[0\]\.{arg}: "):
        build_strategies([{"name": "synco", arg: value}])


def test_too_few_negatives_names_n_hard() -> None:
    q, _, queue, _, _ = _queue_inputs(seed=60)
    valid = torch.ones(5, 30, dtype=torch.bool)
    valid[2, 4:] = False
    with pytest.raises(StrategyArgumentError, match="^n_hard: 6 hardest negatives requested but only 4"):
        SynCo(n_hard=6).extra_cosines(_context(q, queue, valid))
    assert SynCo(n_hard=6).required_negatives == 6 and SynCo.negatives_argument == "n_hard"


def test_registry_defaults_and_listing() -> None:
    s = build_one("synco")
    assert (s.n_hard, s.counts, s.extrapolation_max, s.sigma, s.delta, s.eta) == (
        1024, (256, 64, 64, 64), 0.5, 0.01, 0.01, 0.01)
    assert repr(build_one(s.config())) == repr(s)
    text = describe_strategies()
    needles = ("synco:", "n_extrapolated = 256", "sigma = 0.01", "arXiv:2410.02401", "giakoumoglou/synco")
    for needle in needles:
        assert needle in text


def test_configs_check_the_negatives_synco_needs() -> None:
    """Before any work: text's B - 1 in-batch negatives, vision's queue, the key named."""
    from hardmix.text.config import build_text_config

    with pytest.raises(ConfigError, match=r"loss\.strategies\[0\]\.n_hard: 64 negatives needed per anchor"):
        build_text_config({"train": {"batch_size": 32}, "loss": {"strategies": [{"name": "synco",
                                                                                 "n_hard": 64}]}})
    assert build_text_config({"loss": {"strategies": [{"name": "synco", "n_hard": 63}]}}).loss.strategies
    from hardmix.config.loader import build_config
    from hardmix.vision.config import VisionConfig

    with pytest.raises(ConfigError, match=r"loss\.strategies\[0\]\.n_hard: 1024 negatives needed per anchor"):
        build_config(VisionConfig, {"loss": {"strategies": "synco", "queue_size": 512}})


def build_one(spec):  # noqa: ANN001, ANN201
    """The one strategy of a spec, as a config builds it."""
    [strategy] = build_strategies(spec)
    return strategy
