"""The debiased estimators ``hcl`` (Robinson et al., ICLR 2021) and ``dcl`` (Chuang et al., NeurIPS 2020)
against the float64 NumPy reference of tests/core/_reference.py: the estimator on its own, in-batch (each
direction, and both), against a queue with exclusions, composed with MoCHi; their special cases (beta = 0
is DCL; beta = 0 and tau_plus = 0 is InfoNCE); the floor's gradients; validation; training runs."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import ContrastiveLoss
from hardmix.ops.debiased import debiased_negative_term
from hardmix.strategies import DCL, HCL, available_strategies, build_strategies, describe_strategies
from hardmix.strategies.mochi import mochi_synthesize
from hardmix.utils.errors import ConfigError

from ._reference import finite_difference_np, hcl_anchor_np, hcl_in_batch_np, hcl_queue_np, hcl_rows_np

# float() of a loss that requires grad: harmless here (read after or instead of its backward)
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")
NEG_INF = float("-inf")
CASES = [(0.0, 0.0), (0.0, 0.1), (0.5, 0.1), (1.0, 0.1), (1.0, 0.3), (3.0, 0.05)]  # (beta, tau_plus)


def _loss(strategy: str, beta: float, tau_plus: float, tau: float, **kwargs) -> ContrastiveLoss:
    spec = {"name": "dcl", "tau_plus": tau_plus} if strategy == "dcl" else {
        "name": "hcl", "beta": beta, "tau_plus": tau_plus}
    return ContrastiveLoss(tau, spec, **kwargs)


def _views(seed: int, b: int = 6, d: int = 5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(b, d, generator=g, dtype=dtype)
    z1 = (base + 0.6 * torch.randn(b, d, generator=g, dtype=dtype)).requires_grad_(True)
    z2 = (base + 0.6 * torch.randn(b, d, generator=g, dtype=dtype)).requires_grad_(True)
    return z1, z2


def _queue_batch(seed: int, b: int = 5, k: int = 12, d: int = 4):
    """Queries with sample ids 0..b-1; the queue holds query 0's and query 2's own earlier keys (excluded
    for them only), an empty slot (-1, excluded for all) and other samples: N_i differs per row."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, d, generator=g, dtype=torch.float64).requires_grad_(True)
    key = torch.randn(b, d, generator=g, dtype=torch.float64)
    queue = torch.randn(k, d, generator=g, dtype=torch.float64)
    query_ids = torch.arange(b)
    queue_ids = 100 + torch.arange(k)
    queue_ids[0], queue_ids[3], queue_ids[5], queue_ids[7] = 0, 2, -1, 0
    valid = (queue_ids.view(1, -1) != -1) & (query_ids.view(-1, 1) != queue_ids.view(1, -1))
    return q, key, queue, query_ids, queue_ids, valid


# ---- the estimator on its own ----------------------------------------------------------------------


@pytest.mark.parametrize(("beta", "tau_plus"), CASES)
def test_estimator_matches_the_reference_values_and_gradients(beta: float, tau_plus: float) -> None:
    """Ragged rows (-inf entries are not negatives, N_i differs per row), float64: the value to 1e-10
    relative and the gradient w.r.t. p and every valid l to finite differences of the NumPy formula. The
    weights w_ij carry gradient (the HCL code does not detach them): the reference's differences see
    them vary."""
    tau = 0.2
    g = torch.Generator().manual_seed(int(10 * beta + 100 * tau_plus))
    cos = torch.rand(7, 9, generator=g, dtype=torch.float64) * 2 - 1
    pos = (0.3 + 0.7 * torch.rand(7, generator=g, dtype=torch.float64)) / tau
    logits = (cos / tau).masked_fill(torch.rand(7, 9, generator=g) < 0.3, NEG_INF)
    logits[0, 0], logits[0, 1:] = cos[0, 0] / tau, NEG_INF  # a row with one negative
    logits[1] = NEG_INF  # a row without negatives: loss 0 (InfoNCE's too), no gradient
    valid = logits != NEG_INF
    p = pos.clone().requires_grad_(True)
    l_ = logits.clone().requires_grad_(True)
    term = debiased_negative_term(p, l_, tau, beta, tau_plus)
    assert term.loss.dtype == torch.float64
    mean = term.loss.mean()
    expected = hcl_rows_np(pos.numpy(), logits.numpy(), tau, beta, tau_plus)
    assert math.isclose(float(mean.detach()), expected, rel_tol=1e-10)
    mean.backward()

    flat = logits.numpy().copy()
    vmask = valid.numpy()

    def of_pos(x):
        return hcl_rows_np(x, flat, tau, beta, tau_plus)

    def of_logits(x):
        full = flat.copy()
        full[vmask] = x
        return hcl_rows_np(pos.numpy(), full, tau, beta, tau_plus)

    np.testing.assert_allclose(
        p.grad.numpy(), finite_difference_np(of_pos, pos.numpy()), rtol=1e-6, atol=1e-9
    )
    np.testing.assert_allclose(
        l_.grad.numpy()[vmask], finite_difference_np(of_logits, flat[vmask]), rtol=1e-6, atol=1e-9
    )
    assert (l_.grad[~valid] == 0).all()
    clamped = [hcl_anchor_np(float(pos[i]), list(logits[i][valid[i]].numpy()), tau, beta, tau_plus)[1]
               for i in range(7)]
    assert term.clamped.tolist() == clamped
    assert tau_plus == 0 or (any(clamped) and not all(clamped))  # both branches' gradients were checked


def test_where_the_floor_is_active_the_gradient_reaches_only_the_positive() -> None:
    """Row 0: the debiased sum is negative (a >= 0); row 1: positive but under the floor; row 2: unclamped.
    The floored rows' loss is log(e^p + N e^{-1/tau}) - p, their logits get no gradient, p gets
    -F / (e^p + F); no gradient is NaN."""
    tau, tau_plus = 0.5, 0.5
    p = torch.tensor([2.0, -1.5, 0.0], dtype=torch.float64, requires_grad=True)
    logits = torch.tensor([[-1.9, -1.5, -1.0], [-1.9, -1.9, -1.9], [1.5, 1.0, NEG_INF]], dtype=torch.float64,
                          requires_grad=True)
    term = debiased_negative_term(p, logits, tau, beta=1.0, tau_plus=tau_plus)
    assert term.clamped.tolist() == [True, True, False]
    term.loss.sum().backward()
    assert 0 < 3 * math.exp(-1.9) - tau_plus * 3 * math.exp(-1.5)  # row 1: the difference is positive
    floor = 3 * math.exp(-1.0 / tau)
    for i in (0, 1):
        p_i = float(p[i].detach())
        e_p = math.exp(p_i)
        assert math.isclose(float(term.loss[i].detach()), math.log(e_p + floor) - p_i, rel_tol=1e-12)
        assert math.isclose(float(p.grad[i]), -floor / (e_p + floor), rel_tol=1e-12)
        assert (logits.grad[i] == 0).all()
    assert (logits.grad[2, :2] != 0).all() and p.grad[2] != 0
    assert torch.isfinite(p.grad).all() and torch.isfinite(logits.grad).all()


def test_no_nan_at_the_edges_of_the_floor_and_without_negatives() -> None:
    """S = tau_plus N e^p exactly (a = 0), a row whose S barely exceeds it, a row with no negative (loss 0,
    as InfoNCE), large beta in float32 (exp((1 + beta) l) would overflow outside log space)."""
    tau, tau_plus = 0.1, 0.25
    p = torch.tensor([1.0, 1.0, 3.0], dtype=torch.float64, requires_grad=True)
    exact = 1.0 + math.log(tau_plus)  # one negative with e^l = tau_plus e^p
    logits = torch.tensor([[exact, NEG_INF], [exact + 1e-15, NEG_INF], [NEG_INF, NEG_INF]],
                          dtype=torch.float64, requires_grad=True)
    term = debiased_negative_term(p, logits, tau, beta=2.0, tau_plus=tau_plus)
    term.loss.sum().backward()
    assert torch.isfinite(term.loss).all() and term.loss[2] == 0
    assert torch.isfinite(p.grad).all() and torch.isfinite(logits.grad).all()
    assert term.clamped.tolist() == [True, True, False] and term.has_negatives.tolist() == [True, True, False]

    g = torch.Generator().manual_seed(0)
    cos = torch.rand(4, 30, generator=g) * 2 - 1
    p32 = (torch.ones(4) / 0.05).requires_grad_(True)
    l32 = (cos / 0.05).requires_grad_(True)
    out = debiased_negative_term(p32, l32, 0.05, beta=8.0, tau_plus=0.1)
    out.loss.sum().backward()
    assert out.loss.dtype == torch.float32
    expected = [hcl_anchor_np(20.0, list(cos[i].double().numpy() / 0.05), 0.05, 8.0, 0.1)[0]
                for i in range(4)]
    np.testing.assert_allclose(out.loss.detach().numpy(), expected, rtol=1e-4)
    assert torch.isfinite(p32.grad).all() and torch.isfinite(l32.grad).all()


# ---- in the loss: in-batch and queue ----------------------------------------------------------------


@pytest.mark.parametrize("both_directions", [False, True])
@pytest.mark.parametrize(("beta", "tau_plus"), [(0.0, 0.1), (1.0, 0.1), (2.0, 0.2)])
def test_in_batch_matches_the_reference(beta: float, tau_plus: float, both_directions: bool) -> None:
    """SimCSE layout, N = B - 1 (not the papers' 2B - 2), float64: value to 1e-10 relative, gradients of
    the raw z1, z2 to finite differences of the NumPy reference; ``dcl`` when beta = 0."""
    tau = 0.1
    z1, z2 = _views(seed=3)
    strategy = "dcl" if beta == 0 else "hcl"
    loss_fn = _loss(strategy, beta, tau_plus, tau, both_directions=both_directions)
    out = loss_fn.in_batch(z1, z2)
    assert out.loss.dtype == torch.float64
    a, b = z1.detach().numpy(), z2.detach().numpy()
    expected = hcl_in_batch_np(a, b, tau, beta, tau_plus, both_directions)
    assert math.isclose(float(out.loss), expected, rel_tol=1e-10)
    out.loss.backward()
    g1 = finite_difference_np(lambda x: hcl_in_batch_np(x, b, tau, beta, tau_plus, both_directions), a)
    g2 = finite_difference_np(lambda x: hcl_in_batch_np(a, x, tau, beta, tau_plus, both_directions), b)
    np.testing.assert_allclose(z1.grad.numpy(), g1, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(z2.grad.numpy(), g2, rtol=1e-6, atol=1e-8)
    # the second direction alone is the first with the views swapped
    if both_directions:
        one = _loss(strategy, beta, tau_plus, tau, both_directions=False)
        both = 0.5 * (one.in_batch(z1, z2).loss + one.in_batch(z2, z1).loss)
        assert math.isclose(float(both), float(out.loss), rel_tol=1e-12)


@pytest.mark.parametrize("strategy", ["hcl", "dcl"])
def test_queue_with_exclusions_matches_the_reference(strategy: str) -> None:
    """Own earlier keys and empty slots excluded: N_i differs per row; the key and the queue get no
    gradient, the query's gradient is the reference's."""
    tau, beta, tau_plus = 0.2, (1.5 if strategy == "hcl" else 0.0), 0.1
    q, key, queue, qids, kids, valid = _queue_batch(seed=4)
    out = _loss(strategy, beta, tau_plus, tau).queue(q, key, queue, qids, kids)
    qa, ka, na, v = q.detach().numpy(), key.numpy(), queue.numpy(), valid.numpy()
    expected = hcl_queue_np(qa, ka, na, tau, beta, tau_plus, valid=v)
    assert math.isclose(float(out.loss), expected, rel_tol=1e-10)
    assert expected != pytest.approx(hcl_queue_np(qa, ka, na, tau, beta, tau_plus), rel=1e-6)  # ids matter
    out.loss.backward()
    grad = finite_difference_np(lambda x: hcl_queue_np(x, ka, na, tau, beta, tau_plus, valid=v), qa)
    np.testing.assert_allclose(q.grad.numpy(), grad, rtol=1e-6, atol=1e-8)
    # without ids every queue entry is a negative
    plain = _loss(strategy, beta, tau_plus, tau).queue(q, key, queue)
    assert math.isclose(float(plain.loss), hcl_queue_np(qa, ka, na, tau, beta, tau_plus), rel_tol=1e-10)


def test_hcl_with_beta_zero_is_dcl() -> None:
    tau = 0.1
    z1, z2 = _views(seed=5)
    q, key, queue, qids, kids, _ = _queue_batch(seed=5)
    for tau_plus in (0.0, 0.1, 0.4):
        grads = []
        for fn in (_loss(name, 0.0, tau_plus, tau, both_directions=True) for name in ("hcl", "dcl")):
            z1.grad = z2.grad = q.grad = None
            loss = fn.in_batch(z1, z2).loss + fn.queue(q, key, queue, qids, kids).loss
            loss.backward()
            grads.append((float(loss), z1.grad.clone(), z2.grad.clone(), q.grad.clone()))
        assert grads[0][0] == grads[1][0]
        for x, y in zip(grads[0][1:], grads[1][1:]):
            assert torch.equal(x, y)
    assert DCL(0.2).config() == {"name": "dcl", "tau_plus": 0.2}


@pytest.mark.parametrize("strategy", ["hcl", "dcl"])
def test_without_debiasing_or_weights_it_is_info_nce(strategy: str) -> None:
    """beta = 0, tau_plus = 0 (the floor N e^{-1/tau} is never above sum_j e^{l_j} for cosine logits):
    -log(e^p / (e^p + sum_j e^{l_j})), InfoNCE with the positive in the denominator, in-batch (each
    direction, both_directions) and against a queue with exclusions: values and gradients."""
    tau = 0.05
    z1, z2 = _views(seed=6, b=8)
    q, key, queue, qids, kids, _ = _queue_batch(seed=6)
    for both_directions in (False, True):
        got = _loss(strategy, 0.0, 0.0, tau, both_directions=both_directions)
        ref = ContrastiveLoss(tau, "none", both_directions=both_directions)
        results = []
        for fn in (got, ref):
            z1.grad = z2.grad = q.grad = None
            a, b = fn.in_batch(z1, z2).loss, fn.queue(q, key, queue, qids, kids).loss
            (a + b).backward()
            results.append((float(a), float(b), z1.grad.clone(), z2.grad.clone(), q.grad.clone()))
        assert math.isclose(results[0][0], results[1][0], rel_tol=1e-12)
        assert math.isclose(results[0][1], results[1][1], rel_tol=1e-12)
        for x, y in zip(results[0][2:], results[1][2:]):
            torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


# ---- composed with MoCHi ----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["hcl", "dcl"])
def test_mochi_columns_join_the_negatives(strategy: str) -> None:
    """Against a queue with exclusions: MoCHi's s + s' synthetic negatives are among each anchor's N
    (the weights, the debiasing's N e^p and the floor count them); value and gradient (the synthetic
    points detached) to the reference. In-batch likewise (value)."""
    tau, beta, tau_plus = 0.2, (1.0 if strategy == "hcl" else 0.0), 0.1
    q, key, queue, qids, kids, valid = _queue_batch(seed=7, b=5, k=16)
    mochi = {"name": "mochi", "n_hard": 6, "n_pair": 5, "n_query": 3}
    own = {"name": "dcl", "tau_plus": tau_plus} if strategy == "dcl" else {
        "name": "hcl", "beta": beta, "tau_plus": tau_plus}
    out = ContrastiveLoss(tau, [mochi, own]).queue(q, key, queue, qids, kids,
                                                   generator=torch.Generator().manual_seed(2))
    h, n = F.normalize(q.detach(), dim=1), F.normalize(queue, dim=1)
    points = mochi_synthesize(h, n, 6, 5, 3, generator=torch.Generator().manual_seed(2), valid=valid,
                              similarities=h @ n.T).numpy()
    qa, ka, na, v = q.detach().numpy(), key.numpy(), queue.numpy(), valid.numpy()
    expected = hcl_queue_np(qa, ka, na, tau, beta, tau_plus, valid=v, extra_points=points)
    assert math.isclose(float(out.loss), expected, rel_tol=1e-10)
    assert expected != pytest.approx(hcl_queue_np(qa, ka, na, tau, beta, tau_plus, valid=v), rel=1e-6)
    out.loss.backward()
    grad = finite_difference_np(
        lambda x: hcl_queue_np(x, ka, na, tau, beta, tau_plus, valid=v, extra_points=points), qa
    )
    np.testing.assert_allclose(q.grad.numpy(), grad, rtol=1e-6, atol=1e-8)
    assert {f"{strategy}/clamped", "mochi/synthetic_sim"} <= set(out.stats())

    z1, z2 = _views(seed=8, b=7)
    got = ContrastiveLoss(tau, [own, mochi]).in_batch(z1, z2, generator=torch.Generator().manual_seed(4)).loss
    h1, h2 = F.normalize(z1.detach(), dim=1), F.normalize(z2.detach(), dim=1)
    not_positive = ~torch.eye(7, dtype=torch.bool)
    points = mochi_synthesize(h1, h2, 6, 5, 3, generator=torch.Generator().manual_seed(4), valid=not_positive,
                              similarities=h1 @ h2.T).numpy()
    a, b = h1.numpy(), h2.numpy()
    pos = np.sum(a * b, 1) / tau
    rows = np.concatenate([np.where(not_positive.numpy(), a @ b.T / tau, -np.inf),
                           np.einsum("bd,bmd->bm", a, points) / tau], 1)
    assert math.isclose(float(got), hcl_rows_np(pos, rows, tau, beta, tau_plus), rel_tol=1e-10)


# ---- diagnostics, composition, validation, registry ------------------------------------------------


def test_statistics_describe_the_first_direction_of_the_call() -> None:
    tau = 0.1
    z1, z2 = _views(seed=9, b=8)
    hcl = ContrastiveLoss(tau, {"name": "hcl", "beta": 2.0, "tau_plus": 0.1}, both_directions=True)
    stats = hcl.in_batch(z1, z2).stats()
    assert 0.0 <= stats["hcl/clamped"] <= 1.0
    h1, h2 = F.normalize(z1.detach(), dim=1), F.normalize(z2.detach(), dim=1)
    weights = []
    for a, c in ((h1, h2),):  # w of the hardest negative: exp(beta l_max) / mean_j exp(beta l_j)
        logits = (a @ c.T / tau).masked_fill(torch.eye(8, dtype=torch.bool), NEG_INF)
        imp = torch.exp(2.0 * logits)
        weights.append(imp.max(1).values / (imp.sum(1) / 7))
    assert stats["hcl/hardest_weight"] == pytest.approx(float(torch.cat(weights).mean()), rel=1e-9)
    assert 1.0 < stats["hcl/hardest_weight"] <= 7.0
    assert "hcl/negative_scale" not in stats

    dcl = ContrastiveLoss(tau, {"name": "dcl", "tau_plus": 0.1})
    stats = dcl.in_batch(z1, z2).stats()
    assert set(stats) >= {"dcl/clamped", "dcl/negative_scale"} and "dcl/hardest_weight" not in stats
    logits = (h1 @ h2.T / tau).masked_fill(torch.eye(8, dtype=torch.bool), NEG_INF)
    s = torch.exp(logits).sum(1)
    debiased = (s - 0.1 * 7 * torch.exp(torch.diagonal(h1 @ h2.T) / tau)) / 0.9
    ng = torch.clamp(debiased, min=7 * math.exp(-1 / tau))
    assert stats["dcl/negative_scale"] == pytest.approx(float((ng / s).mean()), rel=1e-9)
    # A floored batch: tau_plus close to 1.
    stats = ContrastiveLoss(tau, {"name": "dcl", "tau_plus": 0.9}).in_batch(z2, z2).stats()
    assert stats["dcl/clamped"] == 1.0


def test_a_second_estimator_is_refused() -> None:
    with pytest.raises(ConfigError, match="^strategies: hcl and dcl both replace the negative term"):
        ContrastiveLoss(0.1, ["hcl", "dcl"])
    with pytest.raises(ConfigError, match="both replace"):
        ContrastiveLoss(0.1, [{"name": "hcl", "beta": 0.5}, {"name": "hcl"}])


def test_a_second_estimator_in_a_config_is_refused_before_training(tmp_path, capsys) -> None:
    from hardmix.cli import main as cli

    config = tmp_path / "bad.yaml"
    config.write_text("loss:\n  strategies: [{name: hcl}, {name: dcl}]\n")
    assert cli(["train", "text", str(config), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("loss.strategies: hcl and dcl both replace the negative term of the loss; "
                            "keep one")
    assert "Traceback" not in "".join(err) and not (tmp_path / "run").exists()


@pytest.mark.parametrize(("spec", "argument"), [
    ({"name": "hcl", "beta": -0.5}, "beta"),
    ({"name": "hcl", "beta": float("inf")}, "beta"),
    ({"name": "hcl", "beta": float("nan")}, "beta"),
    ({"name": "hcl", "beta": "1"}, "beta"),
    ({"name": "hcl", "beta": True}, "beta"),
    ({"name": "hcl", "tau_plus": 1.0}, "tau_plus"),
    ({"name": "hcl", "tau_plus": -0.1}, "tau_plus"),
    ({"name": "dcl", "tau_plus": float("nan")}, "tau_plus"),
    ({"name": "dcl", "tau_plus": None}, "tau_plus"),
    ({"name": "dcl", "beta": 1.0}, "beta"),  # dcl has no beta
])
def test_bad_arguments_name_themselves(spec: dict, argument: str) -> None:
    from hardmix.text.config import build_text_config

    with pytest.raises(ConfigError, match=rf"^loss\.strategies\[0\]\.{argument}: "):
        build_one(spec)
    with pytest.raises(ConfigError, match=rf"loss\.strategies\[0\]\.{argument}: "):
        build_text_config({"loss": {"strategies": [spec]}})


def test_registry_defaults_and_listing() -> None:
    assert {"hcl", "dcl"} <= set(available_strategies())
    hcl, dcl = build_one("hcl"), build_one("dcl")
    assert isinstance(hcl, HCL) and (hcl.beta, hcl.tau_plus) == (1.0, 0.1)
    assert isinstance(dcl, DCL) and dcl.tau_plus == 0.1
    assert repr(build_one(hcl.config())) == repr(hcl) == "HCL(beta=1.0, tau_plus=0.1)"
    assert hcl.kinds() == ("estimator",) and dcl.kinds() == ("estimator",)
    assert ContrastiveLoss(0.1, "hcl").both_directions is False
    assert ContrastiveLoss(0.1, "dcl").both_directions is False
    assert ContrastiveLoss(0.1, "dcl", both_directions=True).both_directions is True
    text = describe_strategies()
    for needle in ("hcl:", "dcl:", "beta = 1.0", "tau_plus = 0.1", "ICLR 2021", "NeurIPS 2020"):
        assert needle in text, needle

    from hardmix.cli import main

    assert main(["strategies"]) == 0


# ---- training in both modalities --------------------------------------------------------------------


def _check_run(run, names: list[str]) -> None:
    from hardmix.training.metrics import read_metrics

    records = [r for r in read_metrics(run) if "loss" in r]
    assert records and all(math.isfinite(r["loss"]) for r in records)
    for name in names:
        assert all(name in r and math.isfinite(r[name]) for r in records), name
    assert json.loads((run / "results.json").read_text())["finished"]


@pytest.mark.parametrize(("spec", "names"), [
    ({"name": "hcl", "beta": 1.0, "tau_plus": 0.1}, ["hcl/clamped", "hcl/hardest_weight"]),
    ({"name": "dcl", "tau_plus": 0.1}, ["dcl/clamped", "dcl/negative_scale"]),
])
def test_text_trains_from_a_config(tmp_path, tiny_text_config, one_torch_thread, spec, names) -> None:
    from hardmix.text.config import build_text_config
    from hardmix.text.task import TextTask
    from hardmix.training import run_training

    data = copy.deepcopy(tiny_text_config)
    data["train"]["max_steps"] = 4
    data["loss"]["strategies"] = [spec]
    data["loss"]["both_directions"] = spec["name"] == "dcl"  # each direction, and both
    run_training(TextTask, build_text_config(data), tmp_path / "run")
    _check_run(tmp_path / "run", names)


@pytest.mark.parametrize(("strategies", "names"), [
    ([{"name": "hcl"}], ["hcl/clamped", "hcl/hardest_weight"]),
    ([{"name": "dcl", "tau_plus": 0.1}, {"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 8,
                                          "warmup_epochs": 0}],
     ["dcl/clamped", "dcl/negative_scale", "mochi/synthetic_sim"]),
])
def test_vision_trains_from_a_config(tmp_path, tiny_vision_config, one_torch_thread, strategies,
                                     names) -> None:
    from hardmix.config.loader import build_config
    from hardmix.training import run_training
    from hardmix.vision.config import VisionConfig
    from hardmix.vision.task import VisionTask

    data = tiny_vision_config(train={"epochs": 1}, loss={"strategies": strategies})
    run_training(VisionTask, build_config(VisionConfig, data), tmp_path / "run")
    _check_run(tmp_path / "run", names)


def build_one(spec):  # noqa: ANN001, ANN201
    """The one strategy of a spec, as a config builds it."""
    [strategy] = build_strategies(spec)
    return strategy
