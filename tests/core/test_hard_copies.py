"""``hard_copies``, MoCHi's control: copies of the negatives MoCHi's draws pick, as many as its mixtures.

Checked: its columns are exactly the logits of the negatives that MoCHi's selection and draws pick (for one
generator seed), they are the first sources of MoCHi's own points, the loss against float64 NumPy with the
copies held constant (values and gradients, in-batch both directions and queue with sample ids), the
gradient reaches the anchors only, the warm-up, the validation shared with MoCHi, and a short training run
in each modality.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hardmix.cli import main as cli
from hardmix.config.loader import ConfigError, build_config
from hardmix.losses import ContrastiveLoss
from hardmix.ops.mixing import hardest
from hardmix.strategies import ContrastContext, HardCopies, MoCHi, build_strategies
from hardmix.strategies.mochi import mochi_synthesize
from hardmix.text.config import build_text_config
from hardmix.text.task import TextTask
from hardmix.training import read_results, run_training
from hardmix.training.metrics import read_metrics
from hardmix.utils.errors import StrategyArgumentError
from hardmix.vision.config import VisionConfig
from hardmix.vision.task import VisionTask

from ._reference import (
    composed_direction_np,
    false_negatives_np,
    finite_difference_np,
    hard_copy_points_np,
    hardest_row_np,
    in_batch_valid_np,
    normalize,
    queue_valid_np,
)

REL = 1e-10
SPEC = {"n_hard": 6, "n_pair": 7, "n_query": 3, "beta_max": 0.4}


def _randn(*shape: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _unit(*shape: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.nn.functional.normalize(_randn(*shape, seed=seed), dim=-1).to(dtype)


def _context(anchors, candidates, valid, seed: int = 0, step: int = 0) -> ContrastContext:
    cosines = (anchors @ candidates.T).masked_fill(~valid, float("-inf"))
    return ContrastContext(
        anchors=anchors, positives=anchors.detach(), candidates=candidates, cosines=cosines,
        positive_cosines=(anchors * anchors).sum(1), negative_mask=valid, mode="queue",
        step=step, generator=torch.Generator().manual_seed(seed),
    )


# ---- the copies are MoCHi's picks ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_columns_are_exactly_the_cosines_of_the_negatives_mochis_draws_pick(dtype) -> None:
    a, c = _unit(5, 8, seed=1, dtype=dtype), _unit(30, 8, seed=2, dtype=dtype)
    valid = torch.rand(5, 30, generator=torch.Generator().manual_seed(3)) > 0.25
    ctx = _context(a, c, valid, seed=11)
    got, _ = HardCopies(**SPEC).extra_cosines(ctx)
    assert got.shape == (5, SPEC["n_pair"] + SPEC["n_query"])
    # MoCHi's selection and draws, for the same seed
    hard = hardest(ctx.cosines, SPEC["n_hard"], valid)
    draws = MoCHi(**SPEC).draws(5, torch.Generator().manual_seed(11), a.device, a.dtype)
    picked = hard.gather(1, torch.cat([draws.first, draws.pick], dim=1).long())
    assert torch.equal(got, ctx.cosines.gather(1, picked))  # exactly, bit for bit
    # and independently: the NumPy full sort of each row, the draws' positions into it
    cos = a.double().numpy() @ c.double().numpy().T
    first, pick = draws.first.numpy(), draws.pick.numpy()
    for i in range(5):
        top = hardest_row_np(cos[i], valid[i].numpy(), SPEC["n_hard"])
        want = [cos[i, top[p]] for p in (*first[i], *pick[i])]
        rtol = 1e-12 if dtype == torch.float64 else 1e-5
        np.testing.assert_allclose(got[i].double().numpy(), want, rtol=rtol)


def test_copies_are_the_first_sources_of_mochis_own_points() -> None:
    """Negatives e_0..e_{K-1} (basis vectors): MoCHi's pair mixture k is supported on {e_a, e_b}, a < b,
    and its query mixture k on {q, e_c}; with the same seed, copy k is n_a and copy s + k is n_c."""
    b, k, n_hard, n_pair, n_query = 4, 12, 6, 8, 3
    g = torch.Generator().manual_seed(0)
    w = torch.rand(b, k, generator=g, dtype=torch.float64) * 0.5 / math.sqrt(k)
    q = torch.zeros(b, k + b, dtype=torch.float64)
    q[:, :k] = w
    q[torch.arange(b), k + torch.arange(b)] = torch.sqrt(1 - (w * w).sum(1))
    negatives = torch.eye(k + b, dtype=torch.float64)[:k]
    valid = torch.ones(b, k, dtype=torch.bool)
    points = mochi_synthesize(q, negatives, n_hard, n_pair, n_query, 0.5, torch.Generator().manual_seed(5))
    copies, _ = HardCopies(n_hard=n_hard, n_pair=n_pair, n_query=n_query).extra_cosines(
        _context(q, negatives, valid, seed=5))
    x = points.numpy()
    for i in range(b):
        for m in range(n_pair + n_query):
            support = np.flatnonzero(np.abs(x[i, m, :k]) > 1e-12)
            if m < n_pair:
                source = support.min()
            else:  # h' = (beta q + (1 - beta) e_c) / norm: remove the query's part, e_c remains
                scale = x[i, m, k + i] / q[i, k + i].item()
                source = int(np.argmax(x[i, m, :k] - scale * q[i, :k].numpy()))
            assert copies[i, m].item() == pytest.approx(w[i, source].item(), rel=1e-12)  # q . e_c / 1


def test_beta_max_changes_no_copy_and_one_spec_builds_both() -> None:
    a, c = _unit(4, 6, seed=20), _unit(20, 6, seed=21)
    valid = torch.ones(4, 20, dtype=torch.bool)
    base, _ = HardCopies(**SPEC).extra_cosines(_context(a, c, valid, seed=2))
    other, _ = HardCopies(**{**SPEC, "beta_max": 0.1}).extra_cosines(_context(a, c, valid, seed=2))
    assert torch.equal(base, other)
    assert isinstance(build_one({"name": "mochi", **SPEC}), MoCHi)
    copies = build_one({"name": "hard_copies", **SPEC})
    assert isinstance(copies, HardCopies)
    assert copies.config() == {"name": "hard_copies", **SPEC}
    assert [(p.name, p.default) for p in HardCopies.params()] == [(p.name, p.default) for p in MoCHi.params()]


# ---- the loss, against NumPy with the copies held constant --------------------------------------------


def _copies_np(anchors, candidates, valid, draws) -> list:
    """Each anchor's copied vectors (float64), from its NumPy hardest negatives and the draws."""
    first, pick = draws.first.numpy(), draws.pick.numpy()
    cos = anchors @ candidates.T
    out = []
    for i in range(len(anchors)):
        hard = hardest_row_np(cos[i], valid[i], SPEC["n_hard"])
        out.append(hard_copy_points_np(candidates, hard, first[i], pick[i]))
    return out


def _with_copies(anchors, positives, candidates, tau, valid, copies) -> float:
    extra = [[a @ p / tau for p in row] for a, row in zip(anchors, copies)]
    return composed_direction_np(anchors, positives, candidates, tau, valid, extra=extra)


def _draws(batch: int, generator: torch.Generator):
    return MoCHi(**SPEC).draws(batch, generator, torch.device("cpu"), torch.float64)


@pytest.mark.parametrize("both_directions", [False, True], ids=["one-direction", "both_directions"])
def test_in_batch_loss_and_gradients_equal_numpy(both_directions: bool) -> None:
    z1, z2 = _randn(9, 5, seed=30), _randn(9, 5, seed=31)
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    loss_fn = ContrastiveLoss(0.1, {"name": "hard_copies", **SPEC}, both_directions=both_directions)
    out = loss_fn.in_batch(a, b, generator=torch.Generator().manual_seed(8))
    out.loss.backward()
    gen = torch.Generator().manual_seed(8)  # direction 0 draws first, then direction 1
    x1, x2 = z1.numpy(), z2.numpy()
    h1, h2 = normalize(x1), normalize(x2)
    v = in_batch_valid_np(9)
    frozen = [_copies_np(h1, h2, v, _draws(9, gen))]
    if both_directions:
        frozen.append(_copies_np(h2, h1, v, _draws(9, gen)))

    def reference(y1, y2):
        g1, g2 = normalize(y1), normalize(y2)
        loss = _with_copies(g1, g2, g2, 0.1, v, frozen[0])
        return 0.5 * (loss + _with_copies(g2, g1, g1, 0.1, v, frozen[1])) if both_directions else loss

    assert float(out.loss.detach()) == pytest.approx(reference(x1, x2), rel=REL)
    plain_info_nce = float(ContrastiveLoss(0.1, both_directions=both_directions).in_batch(z1, z2).loss)
    assert abs(plain_info_nce - reference(x1, x2)) > 0.1  # the copies matter
    tol = {"rtol": 1e-6, "atol": 1e-8}
    np.testing.assert_allclose(a.grad.numpy(), finite_difference_np(lambda y: reference(y, x2), x1), **tol)
    np.testing.assert_allclose(b.grad.numpy(), finite_difference_np(lambda y: reference(x1, y), x2), **tol)


def test_queue_loss_and_gradient_equal_numpy_with_sample_ids() -> None:
    q, key, queue = _randn(5, 6, seed=40), _randn(5, 6, seed=41), _randn(30, 6, seed=42)
    query_ids = torch.arange(5)
    queue_ids = torch.randint(-1, 8, (30,), generator=torch.Generator().manual_seed(43))
    a = q.clone().requires_grad_(True)
    loss_fn = ContrastiveLoss(0.2, {"name": "hard_copies", **SPEC})
    out = loss_fn.queue(a, key, queue, query_ids, queue_ids, generator=torch.Generator().manual_seed(9))
    out.loss.backward()
    valid = queue_valid_np(query_ids.numpy(), queue_ids.numpy(), 5, 30)
    assert not valid.all()
    hk, n = normalize(key.numpy()), normalize(queue.numpy())
    frozen = _copies_np(normalize(q.numpy()), n, valid, _draws(5, torch.Generator().manual_seed(9)))
    for row, ok in zip(frozen, valid):  # no copy of an excluded entry
        assert all(any(np.array_equal(p, n[j]) for j in np.flatnonzero(ok)) for p in row)

    def reference(x):
        return _with_copies(normalize(x), hk, n, 0.2, valid, frozen)

    assert float(out.loss.detach()) == pytest.approx(reference(q.numpy()), rel=REL)
    np.testing.assert_allclose(a.grad.numpy(), finite_difference_np(reference, q.numpy()), rtol=1e-6,
                               atol=1e-8)


def test_with_a_filter_the_copies_come_from_the_kept_negatives() -> None:
    """Composed with ``false_negative_filter``: the hardest are chosen among the kept negatives, so no
    dropped negative is ever copied; the loss is NumPy's over the filtered denominator and pool."""
    q, key, queue = _randn(5, 6, seed=44), _randn(5, 6, seed=45), _randn(30, 6, seed=46)
    spec = [{"name": "false_negative_filter", "top_k": 2}, {"name": "hard_copies", **SPEC}]
    out = ContrastiveLoss(0.2, spec).queue(q, key, queue, generator=torch.Generator().manual_seed(3))
    h, hk, n = normalize(q.numpy()), normalize(key.numpy()), normalize(queue.numpy())
    valid = np.ones((5, 30), dtype=bool)
    dropped = false_negatives_np(h @ n.T, valid, 2, None)
    frozen = _copies_np(h, n, valid & ~dropped, _draws(5, torch.Generator().manual_seed(3)))
    extra = [[a @ p / 0.2 for p in row] for a, row in zip(h, frozen)]
    for i, row in enumerate(frozen):
        assert not any(np.array_equal(p, n[j]) for p in row for j in np.flatnonzero(dropped[i]))
    want = composed_direction_np(h, hk, n, 0.2, valid, dropped, extra=extra)
    assert float(out.loss) == pytest.approx(want, rel=REL)


def test_the_gradient_reaches_the_anchors_only() -> None:
    a = _unit(4, 6, seed=50).requires_grad_(True)
    c = _unit(20, 6, seed=51).requires_grad_(True)
    ctx = _context(a, c, torch.ones(4, 20, dtype=torch.bool))
    HardCopies(**SPEC).extra_cosines(ctx)[0].sum().backward()
    assert c.grad is None and a.grad.abs().sum() > 0


# ---- warm-up, validation, negatives -------------------------------------------------------------------


def test_no_copies_give_no_columns() -> None:
    a, c = _unit(4, 6, seed=60), _unit(20, 6, seed=61)
    valid = torch.ones(4, 20, dtype=torch.bool)
    assert HardCopies(n_hard=4, n_pair=0, n_query=0).extra_cosines(_context(a, c, valid)) is None


def test_diagnostics_are_the_copies_mean_cosine_and_how_many_beat_the_positive() -> None:
    a, c = _unit(4, 6, seed=62), _unit(20, 6, seed=63)
    ctx = _context(a, c, torch.ones(4, 20, dtype=torch.bool), seed=1)
    s = HardCopies(**SPEC)
    cosines, stats = s.extra_cosines(ctx)
    assert stats["copy_sim"] == pytest.approx(float(cosines.mean()), rel=1e-12)
    harder = (cosines > ctx.positive_cosines.unsqueeze(1)).double().mean()
    assert stats["copy_harder_than_positive"] == pytest.approx(float(harder))
    assert stats["copy_sim"] > float((a @ c.T).mean())  # the hardest negatives are closer than the average


@pytest.mark.parametrize("kwargs, argument", [
    ({"n_hard": 0}, "n_hard"),
    ({"n_hard": 4.0}, "n_hard"),
    ({"n_hard": 4, "n_pair": 7}, "n_pair"),
    ({"n_pair": -1}, "n_pair"),
    ({"n_query": -2}, "n_query"),
    ({"n_query": True}, "n_query"),
    ({"beta_max": 0.6}, "beta_max"),
    ({"beta_max": 0.0}, "beta_max"),
    ({"beta_max": "half"}, "beta_max"),
])
def test_bad_arguments_raise_naming_them_as_mochi_does(kwargs, argument) -> None:
    for cls in (HardCopies, MoCHi):
        with pytest.raises(StrategyArgumentError) as e:
            cls(**kwargs)
        assert e.value.argument == argument
    with pytest.raises(ConfigError) as e:
        build_text_config({"loss": {"strategies": [{"name": "hard_copies", **kwargs}]}})
    assert str(e.value).startswith(f"loss.strategies[0].{argument}: "), str(e.value)


def test_negatives_are_checked_before_training_and_at_call_time() -> None:
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[0\]\.n_hard: 16 negatives needed per anchor"):
        build_text_config({"train": {"batch_size": 16}, "loss": {"strategies": [
            {"name": "hard_copies", "n_hard": 16, "n_pair": 4, "n_query": 2}]}})
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[0\]\.n_hard"):
        build_config(VisionConfig, {"loss": {"queue_size": 64, "strategies": [
            {"name": "hard_copies", "n_hard": 65, "n_pair": 4, "n_query": 2}]}})
    a, c = _unit(3, 6, seed=70), _unit(8, 6, seed=71)
    valid = torch.ones(3, 8, dtype=torch.bool)
    valid[1, :4] = False  # row 1 has 4 valid negatives, fewer than n_hard = 6
    with pytest.raises(StrategyArgumentError, match="n_hard: 6 hardest negatives requested but only 4") as e:
        HardCopies(**SPEC).extra_cosines(_context(a, c, valid))[0]
    assert e.value.argument == "n_hard"


def test_hardmix_strategies_lists_it(capsys) -> None:
    assert cli(["strategies"]) == 0
    text = capsys.readouterr().out
    assert "hard_copies: Control for MoCHi" in text and "n_hard = 1024" in text


# ---- training, both modalities ------------------------------------------------------------------------


def _metric_lines(run) -> list[dict]:
    lines = [r for r in read_metrics(run) if "loss" in r]
    assert lines and all(math.isfinite(r["loss"]) for r in lines)
    assert read_results(run)["finished"]
    return lines


def test_text_trains_with_it(tmp_path, tiny_text_config, one_torch_thread) -> None:
    cfg = dict(tiny_text_config, loss={"temperature": 0.05, "strategies": [
        {"name": "hard_copies", "n_hard": 8, "n_pair": 8, "n_query": 4}]})
    cfg["train"] = dict(cfg["train"], max_steps=6)
    run_training(TextTask, build_text_config(cfg), tmp_path / "run")
    assert all("hard_copies/copy_sim" in r for r in _metric_lines(tmp_path / "run"))


def test_vision_trains_with_it_after_a_warmup_in_epochs(tmp_path, tiny_vision_config, vision_one_thread):
    """MoCHi's vision keys, ``warmup_epochs`` included: 0.2 of the 10 steps an epoch has here."""
    data = tiny_vision_config(train={"epochs": 1}, loss={"strategies": [
        {"name": "hard_copies", "n_hard": 16, "n_pair": 16, "n_query": 8, "warmup_epochs": 0.2}]})
    cfg = build_config(VisionConfig, data)
    assert cfg.loss.strategies[0].in_steps(10).warmup_steps == 2
    run_training(VisionTask, cfg, tmp_path / "run")
    lines = _metric_lines(tmp_path / "run")
    assert len(lines) == 10
    assert "hard_copies/copy_sim" not in lines[0] and all("hard_copies/copy_sim" in r for r in lines[2:])


def build_one(spec):  # noqa: ANN001, ANN201
    """The one strategy of a spec, as a config builds it."""
    [strategy] = build_strategies(spec)
    return strategy
