"""Distributed helpers with two real processes (gloo on CPU), and SplitBatchNorm.

Gradient bookkeeping (what the two-process test compares). Each rank r holds B local rows z_r and
computes L_r, the mean loss over its local anchors against the candidates gathered with
``gather_with_grad``. The single-process loss over the global batch of W * B rows is the mean over all
rows, L = (1 / W) sum_r L_r (equal local batches). ``gather_with_grad``'s backward all-reduces the
incoming gradients, so after every rank has called ``L_r.backward()``, z_r.grad is the derivative of the
SUM over ranks, d(sum_r' L_r') / d z_r: the direct path (z_r as local anchors, in L_r only) plus every
rank's gradient for slice r of the gathered candidates. Hence z_r.grad / W must equal dL/dz_r, the rows
of rank r in the single-process gradient (and DDP's averaging of parameter gradients over ranks then
reproduces the single-process step). Lightly's gather before its PR 1531 returned only the local
rank's gradient for its slice, dropping the other ranks' terms: that version must NOT match.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from hardmix.losses import ContrastiveLoss
from hardmix.ops.distributed import (
    SplitBatchNorm,
    batch_shuffle,
    batch_unshuffle,
    gather_no_grad,
    gather_with_grad,
    rank,
    rank_offset,
    world_size,
)

WORLD = 2
LOCAL = 4
DIM = 6
CONFIGS = {
    "none": None,
    "none_symmetric": "both_directions",
    "mixcse_symmetric": {"name": "mixcse", "lam": 0.2},
    "mixcse_single": {"name": "mixcse", "lam": 0.3, "second_direction": False},
    "mixcse_no_sg": {"name": "mixcse", "lam": 0.2, "stop_grad": False},
    "mixcse_reference": {"name": "mixcse", "lam": 0.2, "mode": "reference"},
}


def _loss_fn(name: str) -> ContrastiveLoss:
    spec = CONFIGS[name]
    if spec == "both_directions":
        return ContrastiveLoss(0.05, None, both_directions=True)
    return ContrastiveLoss(0.05, spec)


def _global_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(WORLD * LOCAL, DIM, generator=g, dtype=torch.float64)
    z1 = (base + 0.7 * torch.randn(base.shape, generator=g, dtype=torch.float64)) * 2
    z2 = base + 0.7 * torch.randn(base.shape, generator=g, dtype=torch.float64)
    return z1, z2


class _GatherLocalGradOnly(torch.autograd.Function):
    """Lightly's all-gather before PR 1531: the backward returns only this rank's own gradient."""

    @staticmethod
    def forward(ctx, x):
        out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(out, x.contiguous())
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        return grads[dist.get_rank()]


def _worker(r: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=WORLD)
    try:
        results: dict[str, object] = {"rank": rank(), "world": world_size(), "offset": rank_offset(LOCAL)}
        z1_global, z2_global = _global_batch()
        rows = slice(r * LOCAL, (r + 1) * LOCAL)
        for name in CONFIGS:
            for gather_name, gather in (
                ("fixed", gather_with_grad),
                ("local_only", lambda x: torch.cat(_GatherLocalGradOnly.apply(x), 0)),
            ):
                if gather_name == "local_only" and name != "mixcse_symmetric":
                    continue
                z1 = z1_global[rows].clone().requires_grad_(True)
                z2 = z2_global[rows].clone().requires_grad_(True)
                out = _loss_fn(name).in_batch(z1, z2, gather(z1), gather(z2), offset=rank_offset(LOCAL))
                out.loss.backward()
                results[f"{name}/{gather_name}"] = (out.loss.detach(), z1.grad, z2.grad)
        # gather without gradient
        y = (torch.arange(LOCAL * 3, dtype=torch.float64).view(LOCAL, 3) + 100 * r).requires_grad_(True)
        gathered = gather_no_grad(y)
        results["gather_no_grad"] = (gathered, gathered.requires_grad)
        # shuffle-BN across ranks: different local generators, so only the broadcast keeps them consistent
        x = torch.arange(LOCAL, dtype=torch.float64).view(-1, 1).repeat(1, 2) + LOCAL * r
        shuffled, inverse = batch_shuffle(x, generator=torch.Generator().manual_seed(1000 + r))
        results["shuffle"] = (x, shuffled, inverse, batch_unshuffle(shuffled, inverse))
        torch.save(results, Path(out_dir) / f"rank{r}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory) -> list[dict]:
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    out = tmp_path_factory.mktemp("dist")
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


def test_rank_world_and_offset(two_rank_results) -> None:
    for r, res in enumerate(two_rank_results):
        assert (res["rank"], res["world"], res["offset"]) == (r, WORLD, r * LOCAL)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_two_ranks_equal_one_process_on_the_global_batch(two_rank_results, name: str) -> None:
    z1_global, z2_global = _global_batch()
    z1 = z1_global.clone().requires_grad_(True)
    z2 = z2_global.clone().requires_grad_(True)
    loss = _loss_fn(name).in_batch(z1, z2).loss
    loss.backward()
    local_losses = [res[f"{name}/fixed"][0] for res in two_rank_results]
    assert abs(float(sum(local_losses) / WORLD) - float(loss.detach())) < 1e-6
    for r, res in enumerate(two_rank_results):
        _, g1, g2 = res[f"{name}/fixed"]
        rows = slice(r * LOCAL, (r + 1) * LOCAL)
        torch.testing.assert_close(g1 / WORLD, z1.grad[rows], rtol=0, atol=1e-6)
        torch.testing.assert_close(g2 / WORLD, z2.grad[rows], rtol=0, atol=1e-6)


def test_local_gradient_only_gather_would_fail(two_rank_results) -> None:
    """The comparison above detects lightly's pre-PR-1531 gather: same losses, wrong gradients."""
    z1_global, z2_global = _global_batch()
    z1 = z1_global.clone().requires_grad_(True)
    z2 = z2_global.clone().requires_grad_(True)
    _loss_fn("mixcse_symmetric").in_batch(z1, z2).loss.backward()
    worst = 0.0
    for r, res in enumerate(two_rank_results):
        loss_bug, g1, _ = res["mixcse_symmetric/local_only"]
        assert abs(float(loss_bug) - float(res["mixcse_symmetric/fixed"][0])) < 1e-12
        worst = max(worst, float((g1 / WORLD - z1.grad[r * LOCAL : (r + 1) * LOCAL]).abs().max()))
    assert worst > 1e-3


def test_gather_no_grad(two_rank_results) -> None:
    want = torch.cat(
        [torch.arange(LOCAL * 3, dtype=torch.float64).view(LOCAL, 3) + 100 * r for r in range(WORLD)]
    )
    for res in two_rank_results:
        gathered, requires_grad = res["gather_no_grad"]
        assert torch.equal(gathered, want) and requires_grad is False


def test_shuffle_unshuffle_round_trip_across_ranks(two_rank_results) -> None:
    slices = [res["shuffle"][1] for res in two_rank_results]
    everything = torch.cat(slices)[:, 0]
    # One permutation of the global batch, shared by the ranks (no sample lost or duplicated) ...
    assert sorted(everything.tolist()) == list(range(WORLD * LOCAL))
    # ... that moves samples across ranks (fixed seeds: this draw does).
    assert any(v >= LOCAL for v in slices[0][:, 0].tolist())
    for res in two_rank_results:
        x, _, inverse, restored = res["shuffle"]
        assert torch.equal(restored, x)
        assert torch.equal(inverse, two_rank_results[0]["shuffle"][2])


def test_single_process_helpers_are_identities() -> None:
    x = torch.randn(5, 3, requires_grad=True)
    assert gather_with_grad(x) is x and torch.equal(gather_no_grad(x), x)
    assert (rank(), world_size(), rank_offset(5)) == (0, 1, 0)
    shuffled, inverse = batch_shuffle(x.detach(), generator=torch.Generator().manual_seed(0))
    assert sorted(shuffled[:, 0].tolist()) == sorted(x[:, 0].tolist())
    assert torch.equal(batch_unshuffle(shuffled, inverse), x.detach())


# ---- SplitBatchNorm ---------------------------------------------------------------------------------


@pytest.mark.parametrize("num_splits", [2, 4])
def test_split_batchnorm_normalizes_contiguous_sub_batches_separately(num_splits: int) -> None:
    """Split k is rows k * n / s .. (k + 1) * n / s - 1 (rank k's slice of a global batch under DDP).
    Training output equals a plain BatchNorm2d run on each such block, and the running statistics are the
    mean over the splits of what each plain BatchNorm would hold."""
    g = torch.Generator().manual_seed(num_splits)
    c = 3
    x = torch.randn(8, c, 5, 4, generator=g, dtype=torch.float64) * torch.arange(
        1, 9, dtype=torch.float64
    ).view(-1, 1, 1, 1)
    split = SplitBatchNorm(c, num_splits).double()
    with torch.no_grad():
        split.weight.copy_(torch.tensor([1.5, -0.5, 2.0]))
        split.bias.copy_(torch.tensor([0.1, 0.2, -0.3]))
    plain = [nn.BatchNorm2d(c).double() for _ in range(num_splits)]
    for bn in plain:
        bn.load_state_dict(split.state_dict())
    xs = x.clone().requires_grad_(True)
    out = split(xs)
    rows = 8 // num_splits
    for k in range(num_splits):
        block = slice(k * rows, (k + 1) * rows)
        torch.testing.assert_close(out[block], plain[k](x[block]), rtol=0, atol=1e-12)
    torch.testing.assert_close(split.running_mean, sum(bn.running_mean for bn in plain) / num_splits)
    torch.testing.assert_close(split.running_var, sum(bn.running_var for bn in plain) / num_splits)
    assert int(split.num_batches_tracked) == 1
    # MoCo's own grouping (every s-th row, view(-1, C * s, H, W)) is another one: the test tells them apart.
    strided = nn.BatchNorm2d(c).double()
    strided.load_state_dict(SplitBatchNorm(c, num_splits).double().state_dict())
    with torch.no_grad():
        strided.weight.copy_(split.weight)
        strided.bias.copy_(split.bias)
    assert not torch.allclose(out[::num_splits], strided(x[::num_splits]))
    # Gradients flow to the input and the shared affine parameters.
    out.square().sum().backward()
    assert xs.grad is not None and split.weight.grad is not None
    # In evaluation it is a plain BatchNorm2d with the (averaged) running statistics.
    split.eval()
    ref = nn.BatchNorm2d(c).double()
    ref.load_state_dict(split.state_dict())
    ref.eval()
    torch.testing.assert_close(split(x), ref(x))


def test_split_batchnorm_on_channels_last_input_equals_contiguous_and_keeps_the_layout() -> None:
    """The vision trainer makes its model and views channels-last on CUDA: SplitBatchNorm must take such
    a tensor (its (n / s, c s) grouping cannot be a view of one) and give the same values, the same
    gradients and the same running statistics as for the contiguous tensor, in channels-last layout."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 6, 5, 4, generator=g, dtype=torch.float64) + torch.arange(6.0).view(1, -1, 1, 1)
    weights = torch.randn(2, 6, generator=g, dtype=torch.float64)
    results = []
    for layout in (torch.contiguous_format, torch.channels_last):
        bn = SplitBatchNorm(6, num_splits=4).double()
        with torch.no_grad():
            bn.weight.copy_(weights[0])
            bn.bias.copy_(weights[1])
        xi = x.clone().contiguous(memory_format=layout).requires_grad_(True)
        out = bn(xi)
        (out * torch.arange(out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        results.append((out, xi.grad, bn.weight.grad, bn.running_mean.clone(), bn.running_var.clone()))
    (out0, *rest0), (out1, *rest1) = results
    assert not x.contiguous(memory_format=torch.channels_last).is_contiguous()  # the test sees the layout
    assert out1.is_contiguous(memory_format=torch.channels_last) and out0.is_contiguous()
    torch.testing.assert_close(out1, out0, rtol=0, atol=1e-12)
    for a, b in zip(rest1, rest0):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_split_batchnorm_convert_and_errors() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.Sequential(nn.BatchNorm2d(4)))
    with torch.no_grad():
        model[1].weight.fill_(2.0)
    converted = SplitBatchNorm.convert(model, num_splits=2)
    assert isinstance(converted[1], SplitBatchNorm) and isinstance(converted[2][0], SplitBatchNorm)
    assert torch.equal(converted[1].weight, torch.full((4,), 2.0))
    with pytest.raises(ValueError, match="num_splits"):
        SplitBatchNorm(4, num_splits=0)
    with pytest.raises(ValueError, match="divisible"):
        SplitBatchNorm(4, num_splits=3)(torch.randn(4, 4, 2, 2))
    x = torch.randn(6, 4, 2, 2)
    assert torch.allclose(SplitBatchNorm(4, 1)(x), F.batch_norm(x, None, None, training=True))
