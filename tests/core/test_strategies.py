"""The strategy registry, the mochi strategy inside the loss, and composition of strategies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import ContrastiveLoss
from hardmix.strategies import (
    MixCSE,
    MoCHi,
    NoMixing,
    Strategy,
    available_strategies,
    build_strategies,
    describe_strategies,
    register_strategy,
)
from hardmix.strategies.mochi import mochi_synthesize

from ._reference import cross_entropy, mix, normalize

# ---- registry ---------------------------------------------------------------------------------------


def test_registry_lists_and_builds_the_strategies() -> None:
    assert available_strategies() == [
        "dcl", "false_negative_filter", "hard_copies", "hcl", "mixcse", "mixcse_adaptive", "mochi", "none",
        "synco",
    ]
    assert isinstance(build_one("none"), NoMixing)
    s = build_one({"name": "mochi", "n_hard": 8, "n_pair": 4, "n_query": 2, "beta_max": 0.3})
    assert isinstance(s, MoCHi) and (s.n_hard, s.n_pair, s.n_query, s.beta_max) == (8, 4, 2, 0.3)
    m = MixCSE(lam=0.4)
    assert build_one(m) is m
    # config() rebuilds an equal strategy
    assert repr(build_one(s.config())) == repr(s)
    assert build_one(MixCSE(lam=0.3, mode="reference").config()).mode == "reference"
    # a config's list keeps its 'none' (plain InfoNCE: the loss acts on none of it); a single spec is a list
    built = build_strategies(["none", "mixcse", {"name": "mochi", "n_hard": 4, "n_pair": 2, "n_query": 1}])
    assert [x.name for x in built] == ["none", "mixcse", "mochi"]
    assert build_strategies(None) == build_strategies("none") == [NoMixing()]
    assert ContrastiveLoss(0.1, built).strategies == built[1:] and ContrastiveLoss(0.1, None).strategies == []


def test_unknown_strategy_and_arguments_raise_naming_them() -> None:
    with pytest.raises(ValueError, match="strategy.*'mocha'"):
        build_one("mocha")
    with pytest.raises(ValueError, match="strategy"):
        ContrastiveLoss(0.1, ["mixcse", {"name": "hardneg"}])
    with pytest.raises(ValueError, match="lambda: unknown argument"):
        build_one({"name": "mixcse", "lambda": 0.2})
    with pytest.raises(ValueError, match="name"):
        build_one({"lam": 0.2})
    with pytest.raises(ValueError, match="warmup_steps"):
        ContrastiveLoss(0.1, {"name": "mochi", "n_hard": 4, "n_pair": 2, "n_query": 1, "warmup_steps": -1})
    with pytest.raises(ValueError, match="stop_grad"):
        MixCSE(stop_grad="yes")


def test_register_strategy_refuses_nameless_and_duplicate_names() -> None:
    class Nameless(Strategy):
        def extra_cosines(self, ctx):
            return None

    with pytest.raises(ValueError):
        register_strategy(Nameless)

    class Impostor(Strategy):
        name = "mixcse"

        def extra_cosines(self, ctx):
            return None

    with pytest.raises(ValueError, match="'mixcse' is a built-in strategy of hardmix"):
        register_strategy(Impostor)
    assert build_one("mixcse").__class__ is MixCSE


def test_describe_strategies_lists_parameters_defaults_and_papers() -> None:
    text = describe_strategies()
    for needle in (
        "mixcse:",
        "mochi:",
        "none:",
        "lam = 0.2",
        "n_hard = 1024",
        "beta_max = 0.5",
        "AAAI 2022",
        "NeurIPS 2020",
        "(no parameters)",
    ):
        assert needle in text


def test_both_directions_must_agree_with_the_strategies() -> None:
    assert ContrastiveLoss(0.05, "mixcse").both_directions is True
    assert ContrastiveLoss(0.05, {"name": "mixcse", "second_direction": False}).both_directions is False
    mochi = {"name": "mochi", "n_hard": 4, "n_pair": 2, "n_query": 1}
    assert ContrastiveLoss(0.05, mochi).both_directions is False
    with pytest.raises(ValueError, match="both_directions"):
        ContrastiveLoss(0.05, {"name": "mixcse", "second_direction": False}, both_directions=True)
    with pytest.raises(ValueError, match="both_directions"):
        ContrastiveLoss(0.05, [MixCSE(second_direction=True), MixCSE(lam=0.3, second_direction=False)])


# ---- mochi inside the loss --------------------------------------------------------------------------


def _queue_batch(b: int = 6, k: int = 48, d: int = 12, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, d, generator=g)
    key = q + 0.5 * torch.randn(b, d, generator=g)
    queue = torch.randn(k, d, generator=g)
    queue[:b] = q + 0.3 * torch.randn(b, d, generator=g)  # the queries' own earlier keys: very hard
    queue_ids = torch.arange(k)
    queue_ids[-3:] = -1
    return q, key, queue, torch.arange(b), queue_ids


def _mochi_logits_np(q, synthetic, tau) -> np.ndarray:
    qn = normalize(q.detach().numpy())
    s = synthetic.double().numpy()
    return np.einsum("bd,bmd->bm", qn, s) / tau


def test_mochi_strategy_logits_equal_query_dot_synthetic_over_tau() -> None:
    q, key, queue, qids, kids = _queue_batch()
    tau, n_hard, n_pair, n_query = 0.2, 10, 12, 5
    loss_fn = ContrastiveLoss(tau, {"name": "mochi", "n_hard": n_hard, "n_pair": n_pair, "n_query": n_query})
    got = loss_fn.queue(q, key, queue, qids, kids, generator=torch.Generator().manual_seed(7)).loss
    valid = (kids.view(1, -1) != -1) & (qids.view(-1, 1) != kids.view(1, -1))
    synthetic = mochi_synthesize(
        F.normalize(q, dim=1),
        F.normalize(queue, dim=1),
        n_hard,
        n_pair,
        n_query,
        generator=torch.Generator().manual_seed(7),
        valid=valid,
    )
    qn, kn, nn_ = (normalize(x.numpy()) for x in (q, key, queue))
    base = np.where(valid.numpy(), qn @ nn_.T / tau, -np.inf)
    logits = np.concatenate(
        [np.sum(qn * kn, 1, keepdims=True) / tau, base, _mochi_logits_np(q, synthetic, tau)], 1
    )
    assert abs(float(got.detach()) - cross_entropy(logits, np.zeros(len(q), int))) < 1e-5
    # The query's own earlier key (the hardest negative) is excluded from selection as from the queue.
    s = synthetic.numpy()
    own = normalize(queue[:6].numpy())
    assert np.all(np.einsum("bmd,bd->bm", s, own) < 0.999)


def test_mochi_strategy_in_batch_uses_the_other_rows_as_negatives() -> None:
    g = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(10, 8, generator=g), torch.randn(10, 8, generator=g)
    tau = 0.1
    loss_fn = ContrastiveLoss(tau, {"name": "mochi", "n_hard": 5, "n_pair": 6, "n_query": 3})
    got = loss_fn.in_batch(z1, z2, generator=torch.Generator().manual_seed(2)).loss
    valid = ~torch.eye(10, dtype=torch.bool)
    h1, h2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    synthetic = mochi_synthesize(h1, h2, 5, 6, 3, generator=torch.Generator().manual_seed(2), valid=valid)
    plain = normalize(z1.numpy()) @ normalize(z2.numpy()).T / tau
    logits = np.concatenate([plain, _mochi_logits_np(z1, synthetic, tau)], 1)
    assert abs(float(got) - cross_entropy(logits, np.arange(10))) < 1e-5


def test_mochi_warmup_is_plain_info_nce_until_the_step() -> None:
    q, key, queue, qids, kids = _queue_batch(seed=3)
    mochi = ContrastiveLoss(0.2, {"name": "mochi", "n_hard": 8, "n_pair": 6, "n_query": 2, "warmup_steps": 5})
    plain = ContrastiveLoss(0.2).queue(q, key, queue, qids, kids).loss
    for step in (0, 4):
        assert float(mochi.queue(q, key, queue, qids, kids, step=step).loss) == float(plain)
    assert float(mochi.queue(q, key, queue, qids, kids, step=5).loss) > float(plain) + 1e-3


def test_mochi_needs_enough_valid_negatives_at_call_time() -> None:
    q, key, queue, qids, kids = _queue_batch(k=12, seed=4)  # 12 - 3 empty - own id = 8 valid per query
    with pytest.raises(ValueError, match="n_hard"):
        ContrastiveLoss(0.2, {"name": "mochi", "n_hard": 9, "n_pair": 2, "n_query": 1}).queue(
            q, key, queue, qids, kids
        )
    ContrastiveLoss(0.2, {"name": "mochi", "n_hard": 8, "n_pair": 2, "n_query": 1}).queue(
        q, key, queue, qids, kids
    )


def test_mochi_strategy_selects_in_fp32_under_bf16_autocast() -> None:
    """Negatives e_0..e_7 whose similarities to the query tie in bf16; the fp32 top 2 are e_3 and e_4.
    With many query mixtures of those two, the gradient on coordinates 3 and 4 dominates; an autocast
    (bf16) selection would pick tied others."""
    w = 0.30078125 + torch.tensor([1.0, 2, 3, 7, 6, 4, 5, 0]) * 1e-4
    q = torch.cat([w, torch.sqrt(1 - (w * w).sum()).view(1), torch.zeros(1)]).view(1, -1).requires_grad_(True)
    negatives = torch.eye(10)[:8]
    key = torch.eye(10)[9:]
    loss_fn = ContrastiveLoss(0.2, {"name": "mochi", "n_hard": 2, "n_pair": 1, "n_query": 64})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn.queue(q, key, negatives, generator=torch.Generator().manual_seed(0)).loss
    loss.backward()
    g = q.grad[0, :8]
    chosen = g[[3, 4]]
    others = g[[0, 1, 2, 5, 6, 7]]
    assert float(chosen.min()) > float(others.max()) + 0.5 * float(others.abs().max())


def test_mochi_diagnostics() -> None:
    q, key, queue, qids, kids = _queue_batch(seed=5)
    strategy = MoCHi(n_hard=8, n_pair=6, n_query=2)
    out = ContrastiveLoss(0.2, strategy).queue(
        q, key, queue, qids, kids, generator=torch.Generator().manual_seed(1)
    )
    valid = (kids.view(1, -1) != -1) & (qids.view(-1, 1) != kids.view(1, -1))
    synthetic = mochi_synthesize(
        F.normalize(q, dim=1),
        F.normalize(queue, dim=1),
        8,
        6,
        2,
        generator=torch.Generator().manual_seed(1),
        valid=valid,
    )
    sims = _mochi_logits_np(q, synthetic, 1.0)
    pos = np.sum(normalize(q.numpy()) * normalize(key.numpy()), 1)
    stats = out.stats()
    assert abs(stats["mochi/synthetic_sim"] - sims.mean()) < 1e-5
    assert abs(stats["mochi/synthetic_harder_than_positive"] - np.mean(sims > pos[:, None])) < 1e-6


# ---- composition ------------------------------------------------------------------------------------


def test_mochi_and_mixcse_compose_in_queue_mode() -> None:
    """Both strategies append their columns: the loss is the cross-entropy of
    [q.k | q.queue (masked) | q.m_ij (MixCSE, masked) | q.synthetic (MoCHi)] / tau, target 0."""
    q, key, queue, qids, kids = _queue_batch(seed=6)
    tau, lam = 0.2, 0.3
    specs = [{"name": "mochi", "n_hard": 10, "n_pair": 8, "n_query": 4}, {"name": "mixcse", "lam": lam}]
    got = ContrastiveLoss(tau, specs).queue(
        q, key, queue, qids, kids, generator=torch.Generator().manual_seed(3)
    )
    valid = (kids.view(1, -1) != -1) & (qids.view(-1, 1) != kids.view(1, -1))
    synthetic = mochi_synthesize(
        F.normalize(q, dim=1),
        F.normalize(queue, dim=1),
        10,
        8,
        4,
        generator=torch.Generator().manual_seed(3),
        valid=valid,
    )
    qn, kn, nn_ = (normalize(x.numpy()) for x in (q, key, queue))
    v = valid.numpy()
    b, k = v.shape
    mixed = np.array(
        [[qn[i] @ mix(kn[i], nn_[j], lam) / tau if v[i, j] else -np.inf for j in range(k)] for i in range(b)]
    )
    logits = np.concatenate(
        [
            np.sum(qn * kn, 1, keepdims=True) / tau,
            np.where(v, qn @ nn_.T / tau, -np.inf),
            mixed,
            _mochi_logits_np(q, synthetic, tau),
        ],
        1,
    )
    assert abs(float(got.loss) - cross_entropy(logits, np.zeros(b, int))) < 1e-5
    # The order of the list does not matter (mixcse draws no random numbers).
    swapped = ContrastiveLoss(tau, specs[::-1]).queue(
        q, key, queue, qids, kids, generator=torch.Generator().manual_seed(3)
    )
    assert abs(float(swapped.loss) - float(got.loss)) < 1e-5
    assert {"mochi/synthetic_sim", "mixcse/synthetic_sim"} <= set(got.stats())


def test_mochi_and_mixcse_compose_in_batch() -> None:
    g = torch.Generator().manual_seed(8)
    z1, z2 = (
        torch.randn(9, 6, generator=g, dtype=torch.float64),
        torch.randn(9, 6, generator=g, dtype=torch.float64),
    )
    tau, lam = 0.1, 0.2
    specs = [
        {"name": "mixcse", "lam": lam, "second_direction": False},
        {"name": "mochi", "n_hard": 4, "n_pair": 5, "n_query": 2},
    ]
    got = ContrastiveLoss(tau, specs).in_batch(z1, z2, generator=torch.Generator().manual_seed(9)).loss
    h1, h2 = normalize(z1.numpy()), normalize(z2.numpy())
    synthetic = mochi_synthesize(
        F.normalize(z1, dim=1),
        F.normalize(z2, dim=1),
        4,
        5,
        2,
        generator=torch.Generator().manual_seed(9),
        valid=~torch.eye(9, dtype=torch.bool),
    )
    mixed = np.array(
        [[h1[i] @ mix(h2[i], h2[j], lam) / tau if i != j else -np.inf for j in range(9)] for i in range(9)]
    )
    logits = np.concatenate([h1 @ h2.T / tau, mixed, _mochi_logits_np(z1, synthetic, tau)], 1)
    assert abs(float(got) - cross_entropy(logits, np.arange(9))) < 1e-6


@pytest.mark.parametrize("mode", ["queue", "queue_ids", "in_batch"])
def test_mochi_gradient_is_that_of_detached_synthetic_points(mode: str) -> None:
    """The strategy computes q . SG(h) / tau in closed form; its value and gradient must equal those of
    cross-entropy with the explicitly built, detached synthetic points (float64)."""
    g = torch.Generator().manual_seed(11)
    q = torch.randn(7, 10, generator=g, dtype=torch.float64)
    other = torch.randn(7, 10, generator=g, dtype=torch.float64)
    queue = torch.randn(40, 10, generator=g, dtype=torch.float64)
    tau, spec = 0.2, {"name": "mochi", "n_hard": 6, "n_pair": 9, "n_query": 4}
    a = q.clone().requires_grad_(True)
    b = other.clone().requires_grad_(True)
    loss_fn = ContrastiveLoss(tau, spec)
    # queue_ids: queries 0..6 have sample ids 0..6; queue entries 0..6 carry them (each query's own key,
    # excluded), entry 7 is an empty slot (-1, excluded), the rest are other samples.
    query_ids = torch.arange(7)
    queue_ids = torch.cat([torch.arange(7), torch.tensor([-1]), 100 + torch.arange(32)])
    if mode == "queue":
        loss = loss_fn.queue(a, b, queue, generator=torch.Generator().manual_seed(5)).loss
    elif mode == "queue_ids":
        gen = torch.Generator().manual_seed(5)
        loss = loss_fn.queue(a, b, queue, query_ids, queue_ids, generator=gen).loss
    else:
        loss = loss_fn.in_batch(a, b, generator=torch.Generator().manual_seed(5)).loss
    loss.backward()

    c = q.clone().requires_grad_(True)
    d = other.clone().requires_grad_(True)
    h = F.normalize(c, dim=1)
    if mode in ("queue", "queue_ids"):
        key, negatives = F.normalize(d, dim=1).detach(), F.normalize(queue, dim=1)
        valid = None
        queue_logits = h @ negatives.T
        if mode == "queue_ids":
            valid = (query_ids.view(-1, 1) != queue_ids.view(1, -1)) & (queue_ids.view(1, -1) != -1)
            queue_logits = queue_logits.masked_fill(~valid, float("-inf"))
        plain = torch.cat([(h * key).sum(1, keepdim=True), queue_logits], 1) / tau
        target = torch.zeros(7, dtype=torch.long)
    else:
        negatives = F.normalize(d, dim=1)
        valid = ~torch.eye(7, dtype=torch.bool)
        plain = h @ negatives.T / tau
        target = torch.arange(7)
    synthetic = mochi_synthesize(
        h.detach(), negatives.detach(), 6, 9, 4, generator=torch.Generator().manual_seed(5), valid=valid
    )
    logits = torch.cat([plain, torch.einsum("bd,bmd->bm", h, synthetic) / tau], 1)
    ref = F.cross_entropy(logits, target)
    ref.backward()
    assert abs(float(loss.detach()) - float(ref.detach())) < 1e-10
    torch.testing.assert_close(a.grad, c.grad, rtol=0, atol=1e-10)
    if mode == "in_batch":  # the candidates get gradient from the plain logits only, never from h
        torch.testing.assert_close(b.grad, d.grad, rtol=0, atol=1e-10)
    else:
        assert b.grad is None


def build_one(spec):  # noqa: ANN001, ANN201
    """The one strategy of a spec, as a config builds it."""
    [strategy] = build_strategies(spec)
    return strategy
