"""MoCo (He et al. 2020; MoCo-v2, Chen et al. 2020, arXiv:2003.04297) around the core's queue and loss.

- Query encoder: backbone + MLP head (2048 hidden, 128 out, ReLU, no BN: MoCo-v2's ``--mlp``).
- Key encoder: a momentum copy, ``theta_k <- m theta_k + (1 - m) theta_q`` before each key pass.
- Keys enter the core's :class:`hardmix.ops.queue.KeyQueue` with their sample ids, gathered over ranks.
- Shuffle-BN (MoCo Sec. 3.3): under DDP the key batch is shuffled across ranks
  (:func:`hardmix.ops.distributed.batch_shuffle`); on one device both encoders normalize ``bn_splits``
  sub-batches separately (:class:`hardmix.ops.distributed.SplitBatchNorm`) and the key batch is shuffled
  first, so a query and its key never share BatchNorm statistics computed from the same group of images.
- The loss is the core's :meth:`hardmix.losses.ContrastiveLoss.queue` with any strategies (MoCHi, MixCSE).
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hardmix.losses import ContrastiveLoss
from hardmix.losses.contrastive import LossOutput
from hardmix.ops.distributed import SplitBatchNorm, batch_shuffle, batch_unshuffle, gather_no_grad
from hardmix.ops.queue import KeyQueue


class Projector(nn.Sequential):
    """MoCo-v2's MLP head: Linear(D, hidden), ReLU, Linear(hidden, out)."""

    def __init__(self, in_dim: int, hidden: int = 2048, out_dim: int = 128) -> None:
        super().__init__(nn.Linear(in_dim, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, out_dim))


@dataclass
class MoCoOutput:
    """One training step's outputs.

    Attributes:
        loss: the scalar loss (the mean of the two queries' losses with two_queries).
        outputs: the core's LossOutput of each direction.
        queries: (b, d) the first direction's queries (detached).
        keys: (b, d) their positive keys.
        enqueued: (n, d) the keys that entered the queue this step (gathered over ranks), and
        enqueued_ids: (n,) their sample ids.
        queue, queue_ids: (K, d) and (K,): the queue the loss saw (before this step's keys entered).
    """

    loss: Tensor
    outputs: list[LossOutput]
    queries: Tensor
    keys: Tensor
    enqueued: Tensor
    enqueued_ids: Tensor
    queue: Tensor
    queue_ids: Tensor


class MoCo(nn.Module):
    """Query and momentum key encoders with a queue of keys.

    Args:
        backbone: maps images (B, 3, H, W) to features (B, feature_dim).
        feature_dim: D of the backbone.
        proj_hidden, proj_dim: the MLP head.
        queue_size: K.
        bn_splits: BatchNorm sub-batches of both encoders (1 under DDP).
        queue_generator: seeds the queue's random initial keys.

    Example:
        >>> from hardmix.vision.backbones import build_backbone
        >>> net, dim = build_backbone("resnet10", width=4, small_stem=True)
        >>> moco = MoCo(net, dim, proj_hidden=16, proj_dim=8, queue_size=32, bn_splits=2)
        >>> x = torch.randn(4, 3, 16, 16)
        >>> out = moco(x, x, torch.arange(4), ContrastiveLoss(0.2), momentum=0.99)
        >>> out.loss.backward(); moco.queue.ids[:4].tolist()
        [0, 1, 2, 3]
    """

    def __init__(
        self,
        backbone: nn.Module,
        feature_dim: int,
        proj_hidden: int = 2048,
        proj_dim: int = 128,
        queue_size: int = 65536,
        bn_splits: int = 1,
        queue_generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.encoder_q = nn.Sequential(
            OrderedDict(
                backbone=backbone,
                projector=Projector(feature_dim, proj_hidden, proj_dim),
            )
        )
        if bn_splits > 1:
            SplitBatchNorm.convert(self.encoder_q, bn_splits)
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for p in self.encoder_k.parameters():
            p.requires_grad_(False)
        self.queue = KeyQueue(queue_size, proj_dim, random_init=True, generator=queue_generator)
        self.bn_splits = bn_splits
        self._query_forward: nn.Module | None = None

    @property
    def backbone(self) -> nn.Module:
        """The query backbone: the network kept for downstream use."""
        return self.encoder_q.backbone

    def set_query_wrapper(self, wrapper: nn.Module | None) -> None:
        """Run the query encoder through ``wrapper`` (a DistributedDataParallel of ``encoder_q``); it is not
        registered as a submodule, so the state dict keeps its plain names."""
        object.__setattr__(self, "_query_forward", wrapper)

    @torch.no_grad()
    def momentum_update(self, m: float) -> None:
        """theta_k <- m theta_k + (1 - m) theta_q (MoCo Eq. 2); BN running statistics stay the key's own."""
        q_params = [p.detach() for p in self.encoder_q.parameters()]
        k_params = list(self.encoder_k.parameters())
        torch._foreach_mul_(k_params, m)
        torch._foreach_add_(k_params, q_params, alpha=1.0 - m)

    @torch.no_grad()
    def encode_keys(self, images: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Keys (B, d) of ``images`` with shuffle-BN: shuffle (across ranks under DDP), encode, unshuffle."""
        shuffled, inverse = batch_shuffle(images, generator)
        return batch_unshuffle(self.encoder_k(shuffled), inverse)

    def forward(
        self,
        view1: Tensor,
        view2: Tensor,
        ids: Tensor,
        loss_fn: ContrastiveLoss,
        momentum: float,
        step: int = 0,
        two_queries: bool = False,
        mask_same_sample: bool = True,
        generator: torch.Generator | None = None,
    ) -> MoCoOutput:
        """One MoCo step up to the loss: queries, momentum update, keys, loss, enqueue.

        Args:
            view1, view2: (b, 3, S, S) two augmented views of the same b images.
            ids: (b,) their sample ids (positions in the training set).
            loss_fn: the core's ContrastiveLoss (queue mode).
            momentum: m for this step.
            step: the optimizer step (strategy warm-ups).
            two_queries: view 2 is also a query, against view 1's key; both keys are enqueued.
            mask_same_sample: pass sample ids so that queue entries of the query's own image are excluded.
            generator: for the key shuffle (drawn on the CPU) and the strategies' random draws (on the
                loss's device: see :func:`generator_on`).
        """
        query_net = self._query_forward or self.encoder_q
        ids = ids.to(view1.device, non_blocking=True)  # staged at once: no wait for the device
        if two_queries:
            q1, q2 = query_net(torch.cat([view1, view2])).chunk(2)
        else:
            q1, q2 = query_net(view1), None
        self.momentum_update(momentum)
        if two_queries:
            k1, k2 = self.encode_keys(torch.cat([view1, view2]), generator).chunk(2)
        else:
            k1, k2 = None, self.encode_keys(view2, generator)
        queue = self.queue.keys.clone()
        all_ids = self.queue.ids.clone()
        queue_ids = all_ids if mask_same_sample else None
        query_ids = ids if mask_same_sample else None
        loss_gen = generator_on(generator, q1.device)
        # the loss computes in float32 with autocast off (ContrastiveLoss); the queue takes float32 keys
        outputs = [loss_fn.queue(q1, k2, queue, query_ids, queue_ids, step=step, generator=loss_gen)]
        if two_queries:
            outputs.append(loss_fn.queue(q2, k1, queue, query_ids, queue_ids, step=step, generator=loss_gen))
        loss = sum(o.loss for o in outputs) / len(outputs)
        new_keys = torch.cat([k2, k1]) if two_queries else k2
        new_ids = torch.cat([ids, ids]) if two_queries else ids
        enqueued = gather_no_grad(new_keys.float().contiguous())
        enqueued_ids = gather_no_grad(new_ids.contiguous())
        self.queue.enqueue(enqueued, enqueued_ids)
        return MoCoOutput(loss, outputs, q1.detach(), k2.detach(), enqueued, enqueued_ids, queue, all_ids)


def generator_on(generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
    """A generator for random draws on ``device``: ``generator`` itself where it lives there (the CPU),
    else a generator on ``device`` seeded from it (the trainer's per-step generators are CPU ones, and
    torch draws on CUDA only from a CUDA generator: MoCHi's pair draws need one)."""
    if generator is None or generator.device.type == device.type:
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)


def momentum_at(
    step: int, total_steps: int, base: float, final: float = 1.0, schedule: str = "constant"
) -> float:
    """The key encoder's m at ``step``: constant, or BYOL's cosine increase from ``base`` to ``final``
    (Grill et al. 2020, Sec. 3.2; solo-learn's ``base_tau``/``final_tau``)."""
    if schedule == "constant" or total_steps <= 1:
        return base
    return final - (final - base) * (math.cos(math.pi * step / total_steps) + 1.0) / 2.0


def lr_at(
    step: int, total_steps: int, base_lr: float, warmup_steps: int = 0, schedule: str = "cosine"
) -> float:
    """Learning rate at ``step``: linear warm-up, then cosine decay to 0 (MoCo-v2's ``--cos``) or constant."""
    if warmup_steps and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return base_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def queue_diagnostics(
    queries: Tensor, keys: Tensor, queue: Tensor, queue_ids: Tensor | None = None, ids: Tensor | None = None
) -> dict[str, float]:
    """What the queue looks like from the queries (MoCHi Sec. 3's analysis).

    Returns:
        ``proxy_acc``: fraction of queries whose key beats every valid queue negative (MoCHi's proxy task
        performance); ``hardest_neg_sim``: mean cosine of each query to its hardest negative;
        ``same_sample_in_queue``: fraction of queries whose own image has a key in the queue.
    """
    q = F.normalize(queries.float(), dim=1)
    k = F.normalize(keys.float(), dim=1)
    sims = q @ F.normalize(queue.float(), dim=1).T
    valid = torch.ones_like(sims, dtype=torch.bool)
    same = torch.zeros(q.shape[0], dtype=torch.bool, device=q.device)
    if queue_ids is not None:
        valid = valid & (queue_ids.view(1, -1) != -1)
        if ids is not None:
            match = ids.view(-1, 1).to(queue_ids.device) == queue_ids.view(1, -1)
            same = match.any(dim=1)
            valid = valid & ~match
    hardest = sims.masked_fill(~valid, -2.0).amax(dim=1)
    pos = (q * k).sum(dim=1)
    return {
        "proxy_acc": float((pos > hardest).float().mean()),
        "hardest_neg_sim": float(hardest.mean()),
        "same_sample_in_queue": float(same.float().mean()),
    }
