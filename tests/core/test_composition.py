"""The composition rules of ``hardmix/losses/composition.py`` against float64 NumPy computed term by term.

Exclusions unite and reach the pools of the extra-column strategies (MixCSE never mixes with an excluded
negative, MoCHi never selects one), log-weights add to the kept negatives' logits, the order of the
strategies does not matter, an estimator sees the composed columns, and the undefined combinations (two
estimators, an estimator with a reweighting) are refused, as one-line config errors through a config.

The reweighting and estimator strategies here are small test-local classes (the library's own debiased
estimators live elsewhere); the exclusion strategy is ``false_negative_filter``.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

import hardmix.strategies.base as strategy_base
from hardmix.config.loader import ConfigError, build_config
from hardmix.losses import ContrastiveLoss
from hardmix.strategies import ContrastContext, FalseNegativeFilter, MixCSE, Strategy, build_strategies
from hardmix.strategies.build import BuiltStrategies
from hardmix.strategies.mochi import MoCHi
from hardmix.text.config import build_text_config
from hardmix.utils.errors import StrategyArgumentError
from hardmix.vision.config import VisionConfig

from ._reference import (
    composed_direction_np,
    false_negatives_np,
    finite_difference_np,
    hardest_row_np,
    in_batch_valid_np,
    logsumexp,
    mochi_anchor_points_np,
    normalize,
    queue_valid_np,
)

REL = 1e-10
TAU_B, TAU_Q = 0.1, 0.2


# ---- test-local strategies ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ConstantLogWeight(Strategy):
    """Every existing negative's logit plus a constant c (a weight e^c on each term)."""

    name = "test_constant_weight"
    c: float = 0.7

    def reweight(self, ctx: ContrastContext) -> tuple[torch.Tensor, dict]:
        return torch.full_like(ctx.cosines, self.c), {}


@dataclass(frozen=True)
class SimilarityLogWeight(Strategy):
    """log w_ij = beta * h_i . n_j, with its gradient (an HCL-like tilt towards hard negatives)."""

    name = "test_similarity_weight"
    beta: float = 1.5

    def reweight(self, ctx: ContrastContext) -> tuple[torch.Tensor, dict]:
        return self.beta * (ctx.anchors @ ctx.candidates.T), {}


@dataclass(frozen=True)
class NegativesOnlyEstimator(Strategy):
    """An estimator that leaves the positive out of the log-sum-exp: log sum_C exp(c) - p."""

    name = "test_estimator"

    def estimator(self, ctx, positive_logits, negative_logits, temperature):
        return torch.logsumexp(negative_logits, dim=1) - positive_logits, {}


@dataclass(frozen=True)
class OtherEstimator(NegativesOnlyEstimator):
    name = "test_other_estimator"


@pytest.fixture
def registered_test_strategies(monkeypatch: pytest.MonkeyPatch):
    """Register the test-local strategies by name (for configs), in a copy of the registry for this test."""
    monkeypatch.setattr(strategy_base, "_REGISTRY", dict(strategy_base._REGISTRY))
    for cls in (ConstantLogWeight, SimilarityLogWeight, NegativesOnlyEstimator, OtherEstimator):
        strategy_base.register_strategy(cls)


# ---- helpers ------------------------------------------------------------------------------------------


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _queue_inputs(seed: int, b: int = 5, k: int = 24, d: int = 6):
    q, key, queue = _randn(b, d, seed=seed), _randn(b, d, seed=seed + 1), _randn(k, d, seed=seed + 2)
    query_ids = torch.arange(b)
    queue_ids = torch.randint(-1, 8, (k,), generator=torch.Generator().manual_seed(seed + 3))
    return q, key, queue, query_ids, queue_ids


def _in_batch(strategies: Any, z1, z2, both_directions: bool | None = None, seed: int = 3):
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    loss_fn = ContrastiveLoss(TAU_B, build_strategies(strategies), both_directions=both_directions)
    out = loss_fn.in_batch(a, b, generator=torch.Generator().manual_seed(seed))
    out.loss.backward()
    return float(out.loss.detach()), a.grad.numpy(), b.grad.numpy()


def _queue(strategies: Any, q, key, queue, query_ids=None, queue_ids=None, seed: int = 3):
    a = q.clone().requires_grad_(True)
    loss_fn = ContrastiveLoss(TAU_Q, build_strategies(strategies))
    out = loss_fn.queue(a, key, queue, query_ids, queue_ids, generator=torch.Generator().manual_seed(seed))
    out.loss.backward()
    return float(out.loss.detach()), a.grad.numpy()


def _queue_valid(query_ids, queue_ids, b: int, k: int) -> np.ndarray:
    return queue_valid_np(None if query_ids is None else query_ids.numpy(),
                          None if queue_ids is None else queue_ids.numpy(), b, k)


# ---- a filter is InfoNCE with those entries removed ------------------------------------------------------

FILTERS = {"top_k": (3, None), "threshold": (0, 0.2)}


def _filter_in_batch_np(
    z1, z2, both_directions: bool, top_k: int, threshold, log_weight_beta: float | None = None
):
    """In-batch loss with the false negatives removed (and optionally log w = beta * cos on the rest)."""
    h1, h2 = normalize(z1), normalize(z2)
    valid = in_batch_valid_np(len(h1))

    def direction(a, c):
        cos = a @ c.T
        weights = None if log_weight_beta is None else log_weight_beta * cos
        return composed_direction_np(a, c, c, TAU_B, valid, false_negatives_np(cos, valid, top_k, threshold),
                                     log_weights=weights)

    loss = direction(h1, h2)
    return 0.5 * (loss + direction(h2, h1)) if both_directions else loss


@pytest.mark.parametrize("both_directions", [False, True], ids=["one-direction", "both_directions"])
@pytest.mark.parametrize("selection", sorted(FILTERS))
def test_in_batch_filter_is_info_nce_without_the_dropped_negatives(
    selection: str, both_directions: bool
) -> None:
    top_k, threshold = FILTERS[selection]
    z1, z2 = _randn(7, 5, seed=1), _randn(7, 5, seed=2)
    spec = {"name": "false_negative_filter", "top_k": top_k, "threshold": threshold}
    loss, g1, g2 = _in_batch(spec, z1, z2, both_directions=both_directions)
    x1, x2 = z1.numpy(), z2.numpy()
    want = _filter_in_batch_np(x1, x2, both_directions, top_k, threshold)
    assert loss == pytest.approx(want, rel=REL)
    # Something was dropped, and it matters: plain InfoNCE differs.
    dropped = false_negatives_np(normalize(x1) @ normalize(x2).T, in_batch_valid_np(7), top_k, threshold)
    assert dropped.any()
    assert abs(_in_batch(None, z1, z2, both_directions=both_directions)[0] - loss) > 1e-3
    # Gradients of both views against central differences of the NumPy loss (the selection is constant
    # near a point without ties).
    np.testing.assert_allclose(g1, finite_difference_np(
        lambda x: _filter_in_batch_np(x, x2, both_directions, top_k, threshold), x1), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g2, finite_difference_np(
        lambda x: _filter_in_batch_np(x1, x, both_directions, top_k, threshold), x2), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("with_ids", [False, True], ids=["no-ids", "sample-ids"])
@pytest.mark.parametrize("selection", sorted(FILTERS))
def test_queue_filter_is_info_nce_without_the_dropped_negatives(selection: str, with_ids: bool) -> None:
    top_k, threshold = FILTERS[selection]
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=10)
    ids = (query_ids, queue_ids) if with_ids else (None, None)
    valid = _queue_valid(*ids, 5, 24)
    if with_ids:
        assert not valid.all()  # the loss's own exclusions are exercised
    spec = {"name": "false_negative_filter", "top_k": top_k, "threshold": threshold}
    loss, grad = _queue(spec, q, key, queue, *ids)
    qn, kn, nn = q.numpy(), key.numpy(), queue.numpy()

    def reference(x):
        h, hk, n = normalize(x), normalize(kn), normalize(nn)
        dropped = false_negatives_np(h @ n.T, valid, top_k, threshold)
        return composed_direction_np(h, hk, n, TAU_Q, valid, dropped)

    assert loss == pytest.approx(reference(qn), rel=REL)
    dropped = false_negatives_np(normalize(qn) @ normalize(nn).T, valid, top_k, threshold)
    assert dropped.any() and not (dropped & ~valid).any()
    np.testing.assert_allclose(grad, finite_difference_np(reference, qn), rtol=1e-6, atol=1e-8)


# ---- exclusions reach the pools of the extra-column strategies ------------------------------------------


def test_an_excluded_negative_is_never_mixed_by_mixcse() -> None:
    """The context MixCSE sees has the dropped entries masked: their mixture columns are -inf; the loss is
    the NumPy MixCSE over the kept negatives only (queue, with sample ids, and in-batch both directions)."""
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=20)
    valid = _queue_valid(query_ids, queue_ids, 5, 24)
    h, hk, n = normalize(q.numpy()), normalize(key.numpy()), normalize(queue.numpy())
    dropped = false_negatives_np(h @ n.T, valid, 4, None)
    filt, mixcse = FalseNegativeFilter(top_k=4), MixCSE(lam=0.3, second_direction=False)

    # The context as the loss builds it, then the exclusions applied: MixCSE's columns there are -inf.
    hq, hkey, hn = (torch.from_numpy(x) for x in (h, hk, n))
    mask = torch.from_numpy(valid)
    ctx = ContrastContext(
        anchors=hq, positives=hkey, candidates=hn,
        cosines=(hq @ hn.T).masked_fill(~mask, float("-inf")),
        positive_cosines=(hq * hkey).sum(1), negative_mask=mask, mode="queue",
    )
    drop, _ = filt.exclude(ctx)
    np.testing.assert_array_equal(drop.numpy(), dropped)
    excluded = dataclasses.replace(ctx, negative_mask=ctx.negative_mask & ~drop,
                                   cosines=ctx.cosines.masked_fill(drop, float("-inf")))
    mixed = mixcse.extra_cosines(excluded)[0].numpy()
    assert np.all(np.isneginf(mixed[dropped])) and np.all(np.isfinite(mixed[valid & ~dropped]))

    loss, _ = _queue([{"name": "false_negative_filter", "top_k": 4}, {"name": "mixcse", "lam": 0.3,
                                                                     "second_direction": False}],
                     q, key, queue, query_ids, queue_ids)
    want = composed_direction_np(h, hk, n, TAU_Q, valid, dropped, mixcse_lam=0.3)
    assert loss == pytest.approx(want, rel=REL)

    # In-batch, MixCSE's two directions, each with its own anchors' false negatives.
    z1, z2 = _randn(6, 5, seed=21), _randn(6, 5, seed=22)
    loss, _, _ = _in_batch([{"name": "false_negative_filter", "top_k": 2}, {"name": "mixcse", "lam": 0.3}],
                           z1, z2)
    h1, h2 = normalize(z1.numpy()), normalize(z2.numpy())
    v = in_batch_valid_np(6)
    want = 0.5 * sum(
        composed_direction_np(a, c, c, TAU_B, v, false_negatives_np(a @ c.T, v, 2, None), mixcse_lam=0.3)
        for a, c in ((h1, h2), (h2, h1))
    )
    assert loss == pytest.approx(want, rel=REL)


def test_an_excluded_negative_is_never_among_mochis_hardest() -> None:
    """With a filter, MoCHi selects its N hardest among the kept negatives: the loss equals NumPy's MoCHi
    built from its draws over the filtered pool (which differs from the unfiltered one here)."""
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=30, b=5, k=30)
    valid = _queue_valid(query_ids, queue_ids, 5, 30)
    h, hk, n = normalize(q.numpy()), normalize(key.numpy()), normalize(queue.numpy())
    cos = h @ n.T
    dropped = false_negatives_np(cos, valid, 3, None)
    n_hard, n_pair, n_query, beta_max = 6, 5, 3, 0.4
    spec = [{"name": "mochi", "n_hard": n_hard, "n_pair": n_pair, "n_query": n_query, "beta_max": beta_max},
            {"name": "false_negative_filter", "top_k": 3}]
    loss, _ = _queue(spec, q, key, queue, query_ids, queue_ids, seed=4)
    draws = MoCHi(n_hard, n_pair, n_query, beta_max).draws(5, torch.Generator().manual_seed(4),
                                                           torch.device("cpu"), torch.float64)
    first, second, alpha, pick, beta = (x.numpy() for x in draws)
    extra = []
    for i in range(5):
        hard = hardest_row_np(cos[i], valid[i] & ~dropped[i], n_hard)
        assert not dropped[i, hard].any()
        assert set(hard) != set(hardest_row_np(cos[i], valid[i], n_hard))  # the filter changed the pool
        points = mochi_anchor_points_np(h[i], n, hard, first[i], second[i], alpha[i], pick[i], beta[i])
        extra.append([h[i] @ p / TAU_Q for p in points])
    want = composed_direction_np(h, hk, n, TAU_Q, valid, dropped, extra=extra)
    assert loss == pytest.approx(want, rel=REL)


# ---- reweighting --------------------------------------------------------------------------------------


@pytest.mark.parametrize("weight", ["constant", "similarity"])
def test_log_weights_give_the_weighted_info_nce(weight: str) -> None:
    """sum_j w_ij exp(l_ij) in the denominator: in-batch (both directions), queue (with sample ids), and
    with a filter (the weights then apply to the kept negatives only). Gradients by central differences
    (the similarity weights carry their gradient)."""
    strategy = ConstantLogWeight(0.7) if weight == "constant" else SimilarityLogWeight(1.5)

    def log_weights(cos):
        return np.full_like(cos, 0.7) if weight == "constant" else 1.5 * cos

    z1, z2 = _randn(6, 5, seed=40), _randn(6, 5, seed=41)
    v = in_batch_valid_np(6)

    def in_batch_np(x1, x2, top_k=0):
        h1, h2 = normalize(x1), normalize(x2)
        total = 0.0
        for a, c in ((h1, h2), (h2, h1)):
            cos = a @ c.T
            drop = false_negatives_np(cos, v, top_k, None) if top_k else None
            total += composed_direction_np(a, c, c, TAU_B, v, drop, log_weights=log_weights(cos))
        return 0.5 * total

    loss, g1, g2 = _in_batch([strategy], z1, z2, both_directions=True)
    x1, x2 = z1.numpy(), z2.numpy()
    assert loss == pytest.approx(in_batch_np(x1, x2), rel=REL)
    tol = {"rtol": 1e-6, "atol": 1e-8}
    np.testing.assert_allclose(g1, finite_difference_np(lambda x: in_batch_np(x, x2), x1), **tol)
    np.testing.assert_allclose(g2, finite_difference_np(lambda x: in_batch_np(x1, x), x2), **tol)
    loss, g1, _ = _in_batch([strategy, FalseNegativeFilter(top_k=2)], z1, z2, both_directions=True)
    assert loss == pytest.approx(in_batch_np(x1, x2, top_k=2), rel=REL)
    np.testing.assert_allclose(g1, finite_difference_np(lambda x: in_batch_np(x, x2, 2), x1), rtol=1e-6,
                               atol=1e-8)

    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=42)
    valid = _queue_valid(query_ids, queue_ids, 5, 24)
    kn, nn = normalize(key.numpy()), normalize(queue.numpy())

    def queue_np(x):
        h = normalize(x)
        return composed_direction_np(h, kn, nn, TAU_Q, valid, log_weights=log_weights(h @ nn.T))

    loss, grad = _queue([strategy], q, key, queue, query_ids, queue_ids)
    assert loss == pytest.approx(queue_np(q.numpy()), rel=REL)
    np.testing.assert_allclose(grad, finite_difference_np(queue_np, q.numpy()), rtol=1e-6, atol=1e-8)


def test_an_estimator_sees_the_composed_columns() -> None:
    """The estimator's negatives are the kept negatives (-inf where dropped) followed by the extra columns."""
    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=50)
    valid = _queue_valid(query_ids, queue_ids, 5, 24)
    h, hk, n = normalize(q.numpy()), normalize(key.numpy()), normalize(queue.numpy())
    dropped = false_negatives_np(h @ n.T, valid, 2, None)
    loss, _ = _queue([NegativesOnlyEstimator(), FalseNegativeFilter(top_k=2),
                      MixCSE(lam=0.3, second_direction=False)], q, key, queue, query_ids, queue_ids)
    want = []
    for i in range(5):
        row = []
        for j in range(24):
            if valid[i, j] and not dropped[i, j]:
                row += [h[i] @ n[j] / TAU_Q, h[i] @ normalize(0.3 * hk[i] + 0.7 * n[j]) / TAU_Q]
        want.append(logsumexp(np.asarray(row)) - h[i] @ hk[i] / TAU_Q)
    assert loss == pytest.approx(float(np.mean(want)), rel=REL)


# ---- the order of the strategies ------------------------------------------------------------------------


def test_the_order_of_the_strategies_does_not_change_the_loss() -> None:
    z1, z2 = _randn(8, 5, seed=60), _randn(8, 5, seed=61)
    in_batch = [{"name": "false_negative_filter", "top_k": 2}, ConstantLogWeight(0.4),
                {"name": "mixcse", "lam": 0.25}]
    results = [_in_batch([in_batch[i] for i in order], z1, z2) for order in itertools.permutations(range(3))]
    for loss, g1, g2 in results[1:]:
        assert loss == pytest.approx(results[0][0], rel=1e-12)
        np.testing.assert_allclose(g1, results[0][1], rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(g2, results[0][2], rtol=1e-10, atol=1e-13)

    q, key, queue, query_ids, queue_ids = _queue_inputs(seed=62, k=30)
    filt = {"name": "false_negative_filter", "threshold": 0.3, "top_k": 0}
    mochi = {"name": "mochi", "n_hard": 5, "n_pair": 4, "n_query": 2}
    for in_queue in ([filt, SimilarityLogWeight(1.0), mochi], [filt, mochi, NegativesOnlyEstimator()]):
        results = [_queue([in_queue[i] for i in order], q, key, queue, query_ids, queue_ids)
                   for order in itertools.permutations(range(3))]
        for loss, grad in results[1:]:
            assert loss == pytest.approx(results[0][0], rel=1e-12)
            np.testing.assert_allclose(grad, results[0][1], rtol=1e-10, atol=1e-13)


# ---- refused combinations -------------------------------------------------------------------------------


def test_two_estimators_or_an_estimator_with_a_weight_are_refused() -> None:
    with pytest.raises(ConfigError, match="^strategies: test_estimator and test_other_estimator both"):
        ContrastiveLoss(0.1, [NegativesOnlyEstimator(), OtherEstimator()])
    for weight in (ConstantLogWeight(), SimilarityLogWeight()):
        with pytest.raises(StrategyArgumentError, match=f"compose with the reweighting of {weight.name}"):
            BuiltStrategies([FalseNegativeFilter(), weight, NegativesOnlyEstimator()]).check_composition()
    # what does compose: an estimator with exclusions and extra columns; weights with anything else
    BuiltStrategies([NegativesOnlyEstimator(), FalseNegativeFilter(), MixCSE()]).check_composition()
    BuiltStrategies([ConstantLogWeight(), SimilarityLogWeight(), FalseNegativeFilter(),
                     MixCSE()]).check_composition()


@pytest.mark.parametrize("strategies, message", [
    ([{"name": "test_estimator"}, {"name": "test_other_estimator"}], "both replace the negative term"),
    ([{"name": "test_constant_weight"}, {"name": "none"}, {"name": "test_estimator"}],
     "does not compose with the reweighting of test_constant_weight"),
])
def test_refused_combinations_are_one_line_config_errors(registered_test_strategies, strategies, message):
    for build in (lambda s: build_text_config({"loss": {"strategies": s}}),
                  lambda s: build_config(VisionConfig, {"loss": {"strategies": s, "queue_size": 64}})):
        with pytest.raises(ConfigError) as e:
            build(strategies)
        text = str(e.value)
        assert text.startswith("loss.strategies: ") and message in text and "\n" not in text, text
    # the same strategies, one at a time, are accepted
    for spec in strategies:
        build_text_config({"loss": {"strategies": [spec]}})
