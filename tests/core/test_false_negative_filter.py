"""``false_negative_filter``: which negatives it drops (against a NumPy full sort), its validation, its
diagnostics, the check of the negatives a setup gives, and a short training run in each modality.

The loss it gives (InfoNCE without the dropped entries, values and gradients, in-batch and queue) and how
it composes with the other strategies are tested in ``test_composition.py``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from hardmix.cli import main as cli
from hardmix.config.loader import ConfigError, build_config
from hardmix.losses import ContrastiveLoss
from hardmix.strategies import ContrastContext, FalseNegativeFilter, build_strategies
from hardmix.strategies.false_negative_filter import threshold_false_negatives, top_k_false_negatives
from hardmix.text.config import build_text_config
from hardmix.text.task import TextTask
from hardmix.training import read_results, run_training
from hardmix.training.metrics import read_metrics
from hardmix.utils.errors import StrategyArgumentError
from hardmix.vision.config import VisionConfig
from hardmix.vision.task import VisionTask

from ._reference import composed_direction_np, false_negatives_np, normalize


def _unit(*shape: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.nn.functional.normalize(x, dim=-1).to(dtype)


def _context(anchors, candidates, valid, mode: str = "queue", **kwargs) -> ContrastContext:
    cosines = (anchors @ candidates.T).masked_fill(~valid, float("-inf"))
    return ContrastContext(
        anchors=anchors, positives=anchors, candidates=candidates, cosines=cosines,
        positive_cosines=torch.zeros(len(anchors), dtype=anchors.dtype), negative_mask=valid, mode=mode,
        **kwargs,
    )


# ---- selection ----------------------------------------------------------------------------------------


def _masks(b: int, n: int, seed: int) -> torch.Tensor:
    """Random validity with a few sparse rows: one with 2 valid negatives, one with 1, one with none."""
    valid = torch.rand(b, n, generator=torch.Generator().manual_seed(seed)) > 0.3
    valid[0] = False
    valid[0, [3, 7]] = True
    valid[1] = False
    valid[1, 5] = True
    valid[2] = False
    return valid


@pytest.mark.parametrize("top_k", [1, 3, 8, 40])
def test_top_k_drops_the_k_most_similar_valid_negatives_keeping_one(top_k: int) -> None:
    a, c = _unit(9, 6, seed=1), _unit(20, 6, seed=2)
    valid = _masks(9, 20, seed=3)
    got = FalseNegativeFilter(top_k=top_k).exclude(_context(a, c, valid))[0]
    want = false_negatives_np(a.numpy() @ c.numpy().T, valid.numpy(), top_k, None)
    np.testing.assert_array_equal(got.numpy(), want)
    counts = valid.sum(1).numpy()
    np.testing.assert_array_equal(got.sum(1).numpy(), np.clip(np.minimum(top_k, counts - 1), 0, None))
    assert not (got & ~valid).any()
    kept = valid & ~got
    assert bool((kept.sum(1) >= 1)[valid.any(1)].all())  # no row that had a negative loses them all


@pytest.mark.parametrize("threshold", [-0.999, 0.0, 0.3, 0.9, 1.0])
def test_threshold_drops_the_negatives_above_it_keeping_the_least_similar(threshold: float) -> None:
    a, c = _unit(9, 6, seed=4), _unit(20, 6, seed=5)
    valid = _masks(9, 20, seed=6)
    got = FalseNegativeFilter(top_k=0, threshold=threshold).exclude(_context(a, c, valid))[0]
    cos = a.numpy() @ c.numpy().T
    np.testing.assert_array_equal(got.numpy(), false_negatives_np(cos, valid.numpy(), 0, threshold))
    if threshold == -0.999:  # everything is above: each row keeps exactly its least similar
        rows = valid.any(1).numpy()
        kept = (valid & ~got).numpy()
        assert np.all(kept[rows].sum(1) == 1)
        least = np.where(valid.numpy(), cos, np.inf).argmin(1)
        assert np.all(kept[rows, least[rows]])


def test_the_selection_functions_on_a_hand_made_case() -> None:
    cos = torch.tensor([[0.9, 0.1, 0.5, 0.7], [0.2, 0.8, 0.3, 0.0], [0.95, 0.9, 0.85, 0.1]])
    valid = torch.tensor([[True] * 4, [True, False, True, False], [True, True, True, False]])
    assert top_k_false_negatives(cos, valid, 2).int().tolist() == [[1, 0, 0, 1], [0, 0, 1, 0], [1, 1, 0, 0]]
    # row 2: all three valid ones exceed 0.6, the least similar (0.85) stays; the invalid 0.1 is no help
    assert threshold_false_negatives(cos, valid, 0.6).int().tolist() == [[1, 0, 0, 1], [0, 0, 0, 0],
                                                                       [1, 1, 0, 0]]


def test_selection_is_float32_when_the_logits_are_bfloat16() -> None:
    """Under autocast the logits may be bf16, where near-equal negatives tie; the ranking is recomputed
    in float32 from the vectors."""
    a = _unit(4, 16, seed=7, dtype=torch.float32)
    base = _unit(1, 16, seed=8, dtype=torch.float32)
    # 12 candidates whose cosines to the anchors differ by less than bf16 resolves
    c = torch.nn.functional.normalize(base + 1e-3 * _unit(12, 16, seed=9, dtype=torch.float32), dim=-1)
    valid = torch.ones(4, 12, dtype=torch.bool)
    ctx = _context(a, c, valid)
    ctx = dataclasses.replace(ctx, cosines=ctx.cosines.bfloat16())
    got = FalseNegativeFilter(top_k=3).exclude(ctx)[0]
    want = false_negatives_np(a.double().numpy() @ c.double().numpy().T, valid.numpy(), 3, None)
    np.testing.assert_array_equal(got.numpy(), want)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # and the loss runs under autocast
        out = ContrastiveLoss(0.1, {"name": "false_negative_filter", "top_k": 3}).queue(
            a.clone().requires_grad_(True), a, c)
    assert torch.isfinite(out.loss)


def test_rows_short_of_negatives_keep_one_at_call_time() -> None:
    """A queue row left with fewer than k + 1 valid entries (its own ids) keeps its least similar one."""
    a, key, c = _unit(3, 6, seed=10), _unit(3, 6, seed=14), _unit(8, 6, seed=11)
    query_ids = torch.tensor([0, 1, 2])
    queue_ids = torch.tensor([0, 0, 0, 0, 0, 0, 1, 2])  # query 0 has 2 valid negatives (entries 6 and 7)
    q = a.clone().requires_grad_(True)
    out = ContrastiveLoss(0.1, {"name": "false_negative_filter", "top_k": 4}).queue(q, key, c, query_ids,
                                                                                  queue_ids)
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(q.grad).all() and q.grad[0].abs().sum() > 0
    h, hk, n = a.numpy(), key.numpy(), c.numpy()
    valid = queue_ids.numpy()[None, :] != query_ids.numpy()[:, None]
    dropped = false_negatives_np(h @ n.T, valid, 4, None)
    least = 6 if h[0] @ n[6] < h[0] @ n[7] else 7
    assert np.flatnonzero(valid[0] & ~dropped[0]).tolist() == [least]
    assert float(out.loss.detach()) == pytest.approx(composed_direction_np(h, hk, n, 0.1, valid, dropped),
                                                    rel=1e-10)


# ---- validation, required negatives -------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, argument, message", [
    ({"top_k": -1}, "top_k", "non-negative integer"),
    ({"top_k": 2.5}, "top_k", "non-negative integer"),
    ({"top_k": True}, "top_k", "non-negative integer"),
    ({"top_k": 0}, "top_k", "drop nothing"),
    ({"top_k": 0, "threshold": 1.5}, "threshold", r"\(-1, 1\]"),
    ({"top_k": 0, "threshold": -1.0}, "threshold", r"\(-1, 1\]"),
    ({"top_k": 0, "threshold": "high"}, "threshold", "number"),
    ({"top_k": 5, "threshold": 0.7}, "threshold", "exactly one of top_k and threshold"),
    ({"threshold": 0.7}, "threshold", "set top_k: 0"),
])
def test_bad_arguments_raise_naming_them(kwargs, argument, message) -> None:
    with pytest.raises(StrategyArgumentError, match=message) as e:
        FalseNegativeFilter(**kwargs)
    assert e.value.argument == argument
    with pytest.raises(ConfigError) as e:
        build_text_config({"loss": {"strategies": [{"name": "false_negative_filter", **kwargs}]}})
    assert str(e.value).startswith(f"loss.strategies[0].{argument}: "), str(e.value)


def test_defaults_and_accepted_forms() -> None:
    s = build_one("false_negative_filter")
    assert (s.top_k, s.threshold, s.required_negatives) == (10, None, 11)
    s = build_one({"name": "false_negative_filter", "top_k": 0, "threshold": 1})
    assert s.threshold == 1.0 and s.required_negatives == 0
    assert repr(build_one(s.config())) == repr(s)
    assert s.kinds() == ("exclude",)


def test_the_trainers_refuse_a_top_k_their_negatives_cannot_leave_one_of() -> None:
    spec = {"loss": {"strategies": [{"name": "false_negative_filter", "top_k": 15}]},
            "train": {"batch_size": 16}}
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[0\]\.top_k: 16 negatives needed per anchor"):
        build_text_config(spec)
    build_text_config({**spec, "loss": {"strategies": [{"name": "false_negative_filter", "top_k": 14}]}})
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[0\]\.top_k: 65 negatives needed"):
        build_config(VisionConfig, {"loss": {"queue_size": 64, "strategies": [
            {"name": "false_negative_filter", "top_k": 64}]}})


def test_the_negatives_a_filter_excludes_count_against_what_mochi_draws_from() -> None:
    # Exclusions come first, so MoCHi's n_hard must exist among the negatives the top-k filter leaves: the
    # config check refuses exactly the sizes the loss itself would refuse at its first call.
    mochi = {"name": "mochi", "n_hard": 8, "n_pair": 4, "n_query": 2}
    for top_k in (7, 8):
        strategies = [{"name": "false_negative_filter", "top_k": top_k}, mochi]
        loss_fn = ContrastiveLoss(0.05, [build_one(s) for s in strategies])
        h1, h2 = (torch.nn.functional.normalize(torch.randn(16, 8), dim=1) for _ in range(2))
        spec = {"loss": {"strategies": strategies}, "train": {"batch_size": 16}}
        if top_k == 7:  # 15 in-batch negatives: 7 excluded, 8 left for n_hard=8
            build_text_config(spec)
            assert torch.isfinite(loss_fn.in_batch(h1, h2).loss)
        else:
            with pytest.raises(ConfigError, match=r"^loss\.strategies\[1\]\.n_hard: 16 negatives needed per "
                               r"anchor \(8 plus the 8 the other strategies exclude first\); the setup gives "
                               r"only the 15 in-batch"):
                build_text_config(spec)
            with pytest.raises(StrategyArgumentError, match="only 7 are available"):
                loss_fn.in_batch(h1, h2)
    queue = {"queue_size": 64, "strategies": [{"name": "false_negative_filter", "top_k": 32},
                                              {**mochi, "n_hard": 40}]}
    with pytest.raises(ConfigError, match=r"^loss\.strategies\[1\]\.n_hard: 72 negatives needed"):
        build_config(VisionConfig, {"loss": queue})
    queue["strategies"][1]["n_hard"] = 32
    build_config(VisionConfig, {"loss": queue})
    # a threshold's count is known only per batch: the config check cannot add it
    by_threshold = {"name": "false_negative_filter", "top_k": 0, "threshold": 0.5}
    build_text_config({"loss": {"strategies": [by_threshold, mochi]}, "train": {"batch_size": 16}})


def test_hardmix_strategies_lists_it(capsys) -> None:
    assert cli(["strategies"]) == 0
    text = capsys.readouterr().out
    assert "false_negative_filter: False-negative elimination" in text
    assert "top_k = 10" in text and "threshold = None" in text and "Huynh et al." in text


# ---- diagnostics --------------------------------------------------------------------------------------


def test_diagnostics_are_the_fraction_dropped_and_their_mean_cosine() -> None:
    a, c = _unit(6, 5, seed=12), _unit(6, 5, seed=13)
    loss_fn = ContrastiveLoss(0.1, {"name": "false_negative_filter", "top_k": 2}, both_directions=True)
    stats = loss_fn.in_batch(a, c).stats()
    cos = normalize(a.numpy()) @ normalize(c.numpy()).T
    valid = ~np.eye(6, dtype=bool)
    dropped = false_negatives_np(cos, valid, 2, None)  # the first direction's anchors
    assert stats["false_negative_filter/excluded_fraction"] == pytest.approx(12 / 30)
    assert stats["false_negative_filter/excluded_sim"] == pytest.approx(cos[dropped].mean(), rel=1e-12)
    # a threshold above every cosine drops nothing: the fraction is 0 and there is no mean to give
    stats = ContrastiveLoss(0.1, {"name": "false_negative_filter", "top_k": 0, "threshold": 1.0}).in_batch(
        a, c).stats()
    assert stats["false_negative_filter/excluded_fraction"] == 0.0
    assert "false_negative_filter/excluded_sim" not in stats


# ---- training, both modalities ------------------------------------------------------------------------


def _check_run(run, key: str) -> None:
    lines = [r for r in read_metrics(run) if "loss" in r]
    assert lines and all(math.isfinite(r["loss"]) for r in lines)
    assert all(key in r for r in lines), key
    assert read_results(run)["finished"]


def test_text_trains_with_it(tmp_path, tiny_text_config, one_torch_thread) -> None:
    cfg = dict(tiny_text_config, loss={"temperature": 0.05, "strategies": [
        {"name": "false_negative_filter", "top_k": 3}]})
    cfg["train"] = dict(cfg["train"], max_steps=6)
    run_training(TextTask, build_text_config(cfg), tmp_path / "run")
    _check_run(tmp_path / "run", "false_negative_filter/excluded_fraction")
    lines = [r for r in read_metrics(tmp_path / "run") if "loss" in r]
    fractions = [r["false_negative_filter/excluded_fraction"] for r in lines]
    assert all(f == pytest.approx(3 / 15) for f in fractions)  # 3 of the 15 in-batch negatives


def test_vision_trains_with_it(tmp_path, tiny_vision_config, vision_one_thread) -> None:
    data = tiny_vision_config(train={"epochs": 1}, loss={"strategies": [
        {"name": "false_negative_filter", "top_k": 0, "threshold": 0.5}]})
    run_training(VisionTask, build_config(VisionConfig, data), tmp_path / "run")
    _check_run(tmp_path / "run", "false_negative_filter/excluded_fraction")


def build_one(spec):  # noqa: ANN001, ANN201
    """The one strategy of a spec, as a config builds it."""
    [strategy] = build_strategies(spec)
    return strategy
