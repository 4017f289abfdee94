"""Distributed helpers on ``torch.distributed`` (any backend; gloo on CPU, NCCL on GPUs).

- :func:`gather_with_grad`: all-gather whose backward hands each rank the gradient of its own slice,
  summed over ranks (lightly's PR 1531 fixed a version that returned only the local rank's gradient).
- :func:`gather_no_grad`: all-gather of tensors that need no gradient (keys entering a queue).
- :func:`rank_offset`: the global index of this rank's first row (in-batch targets).
- :func:`batch_shuffle` / :func:`batch_unshuffle`: MoCo's shuffle-BN across ranks.
- :class:`SplitBatchNorm`: shuffle-BN's effect on a single device (BatchNorm over separate sub-batches).

Without an initialised process group every helper is the single-process identity.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> tuple[Tensor, ...]:
        out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(out, x.contiguous())
        return tuple(out)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> Tensor:
        # d(sum over ranks of their losses) / d(my slice): every rank's gradient for my slice, summed.
        stacked = torch.stack([g if g is not None else torch.zeros(()) for g in grads])
        dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
        return stacked[dist.get_rank()]


def gather_with_grad(x: Tensor) -> Tensor:
    """Concatenate ``x`` (B, ...) from all ranks along dim 0, differentiably.

    The backward pass all-reduces the incoming gradients and returns this rank's slice: with each rank's
    loss computed over its local anchors against the gathered candidates, and DDP averaging parameter
    gradients over ranks, the step equals one process over the global batch with the mean loss.
    Local batches must have equal sizes.
    """
    if not is_distributed() or world_size() == 1:
        return x
    return torch.cat(_GatherWithGrad.apply(x), dim=0)


@torch.no_grad()
def gather_no_grad(x: Tensor) -> Tensor:
    """Concatenate ``x`` (B, ...) from all ranks along dim 0 without gradient (e.g. keys for a queue)."""
    if not is_distributed() or world_size() == 1:
        return x
    out = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(out, x.contiguous())
    return torch.cat(out, dim=0)


def rank_offset(local_batch: int) -> int:
    """Global index of this rank's first row: ``rank * local_batch`` (equal local batches)."""
    return rank() * local_batch


@torch.no_grad()
def batch_shuffle(x: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """MoCo's shuffle-BN (He et al. 2020, Sec. 3.3): gather ``x`` over ranks, permute the global batch
    with one permutation shared by all ranks (drawn on rank 0 and broadcast), and return this rank's
    slice of the shuffled batch with the inverse permutation for :func:`batch_unshuffle`.

    Single process: a random permutation of the local batch (BN statistics are unchanged by it; use
    :class:`SplitBatchNorm` to separate them).

    Returns:
        (shuffled local slice (B, ...), inverse permutation (world * B,)).
    """
    b = x.shape[0]
    gathered = gather_no_grad(x)
    n = gathered.shape[0]
    perm = torch.randperm(n, generator=generator, device="cpu").to(x.device)
    if is_distributed() and world_size() > 1:
        dist.broadcast(perm, src=0)
    inverse = torch.argsort(perm)
    return gathered[perm[rank() * b : (rank() + 1) * b]], inverse


@torch.no_grad()
def batch_unshuffle(x: Tensor, inverse: Tensor) -> Tensor:
    """Undo :func:`batch_shuffle` on this rank's outputs: gather, apply the inverse permutation, slice."""
    b = x.shape[0]
    gathered = gather_no_grad(x)
    return gathered[inverse[rank() * b : (rank() + 1) * b]]


@torch.no_grad()
def average_running_statistics(module: nn.Module) -> None:
    """Set the running mean and variance of every BatchNorm in ``module`` to their mean over the ranks
    (one all-reduce of them all). Called after each step of a run whose DDP does not broadcast buffers,
    it makes N processes hold what one process with :class:`SplitBatchNorm` of N splits holds (each rank's
    slice updates its own copy, then they are averaged); a no-op in a single process. timm's
    ``distribute_bn`` does the same per buffer, once an epoch.
    """
    if not is_distributed() or world_size() == 1:
        return
    stats = [b for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
             for b in (m.running_mean, m.running_var) if b is not None]
    if not stats:
        return
    flat = torch.cat([b.reshape(-1) for b in stats])
    dist.all_reduce(flat)
    flat /= world_size()
    offset = 0
    for b in stats:
        b.copy_(flat[offset : offset + b.numel()].view_as(b))
        offset += b.numel()


class SplitBatchNorm(nn.BatchNorm2d):
    """BatchNorm2d that normalizes ``num_splits`` contiguous sub-batches separately in training, simulating
    on one device the per-GPU statistics of ``num_splits`` processes (MoCo's single-GPU variant of
    shuffle-BN; the running statistics are the mean over the splits). In evaluation it is a plain
    BatchNorm2d.

    Split k holds rows ``k * n / s`` to ``(k + 1) * n / s - 1``: the slice that rank k trains on under
    DDP, so one process with ``num_splits = N`` normalizes as N processes do (MoCo's own code groups every
    s-th row instead; for a shuffled batch the two are the same in distribution).

    Args:
        num_features: C.
        num_splits: sub-batches the batch is cut into (the batch size must be divisible by it).

    Example:
        >>> bn = SplitBatchNorm(3, num_splits=2)
        >>> bn(torch.randn(4, 3, 2, 2)).shape
        torch.Size([4, 3, 2, 2])
    """

    def __init__(self, num_features: int, num_splits: int, **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        if num_splits < 1:
            raise ValueError(f"num_splits: must be positive, got {num_splits}")
        self.num_splits = num_splits

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.num_splits == 1:
            return super().forward(x)
        n, c, h, w = x.shape
        if n % self.num_splits:
            raise ValueError(f"SplitBatchNorm: batch {n} is not divisible by num_splits={self.num_splits}")
        s = self.num_splits
        running_mean = self.running_mean.repeat(s) if self.running_mean is not None else None
        running_var = self.running_var.repeat(s) if self.running_var is not None else None
        weight = self.weight.repeat(s) if self.weight is not None else None
        bias = self.bias.repeat(s) if self.bias is not None else None
        # (n, c, h, w) -> (n / s, s * c, h, w) with channel block k holding split k: one batch_norm call
        # normalizes every split on its own. reshape copies (a channels-last input included); the output
        # goes back in the input's layout.
        channels_last = not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
        grouped = x.reshape(s, n // s, c, h, w).transpose(0, 1).reshape(n // s, s * c, h, w)
        out = nn.functional.batch_norm(
            grouped, running_mean, running_var, weight, bias,
            True, self.momentum if self.momentum is not None else 0.1, self.eps,
        ).reshape(n // s, s, c, h, w).transpose(0, 1).reshape(n, c, h, w)
        if channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        mean, var, count = self.running_mean, self.running_var, self.num_batches_tracked
        if mean is not None and var is not None and count is not None and running_mean is not None \
                and running_var is not None:
            mean.copy_(running_mean.view(s, c).mean(0))
            var.copy_(running_var.view(s, c).mean(0))
            count.add_(1)
        return out

    @classmethod
    def convert(cls, module: nn.Module, num_splits: int) -> nn.Module:
        """Replace every BatchNorm2d in ``module`` with a SplitBatchNorm holding the same parameters."""
        if isinstance(module, nn.BatchNorm2d) and not isinstance(module, SplitBatchNorm):
            new = cls(module.num_features, num_splits, eps=module.eps, momentum=module.momentum,
                      affine=module.affine, track_running_stats=module.track_running_stats)
            new.load_state_dict(module.state_dict())
            return new
        for name, child in module.named_children():
            setattr(module, name, cls.convert(child, num_splits))
        return module
