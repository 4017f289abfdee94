"""The contrastive loss of hardmix: InfoNCE whose denominator the strategies extend.

In-batch layout (SimCSE): two views z1, z2 (B, D) of a batch; anchor i = z1_i, candidates = all of z2
(gathered over ranks when distributed), positive in column ``offset + i``. With ``symmetric`` the second
direction (z2 as anchor against z1) is added and the two are averaged.

Queue layout (MoCo): query q (B, D), key k (B, D) and a queue (K, D); logits [q.k | q.queue] / tau.

Each direction gets the plain logits plus the extra negative columns of every strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hardmix.losses.derived_logits import DerivedLogits
from hardmix.losses.fused_in_batch import fused_in_batch_loss, fused_in_batch_supported
from hardmix.losses.info_nce import _check_temperature, info_nce_from_blocks
from hardmix.losses.pairwise import pairwise_logits
from hardmix.strategies.base import ContrastContext, Strategy, build_strategies
from hardmix.utils.counting import count_true


@dataclass
class LossOutput:
    """The loss and what diagnostics need from it (tensors are detached; nothing syncs until asked).

    Attributes:
        loss: scalar mean loss (with gradient).
        positive_sim: (B,) cosine of each anchor (first direction) to its positive.
        negative_sim: scalar mean cosine of the anchors to their valid negatives.
        strategy_stats: per strategy name, a callable returning its scalars for the last call.
    """

    loss: Tensor
    positive_sim: Tensor
    negative_sim: Tensor
    strategy_stats: dict[str, Any] = field(default_factory=dict)

    def stats(self) -> dict[str, float]:
        """Scalars for logging: loss, mean positive and negative similarity, and each strategy's own."""
        out = {
            "loss": float(self.loss.detach()),
            "pos_sim": float(self.positive_sim.mean()),
            "neg_sim": float(self.negative_sim),
        }
        for name, fn in self.strategy_stats.items():
            for k, v in fn().items():
                out[f"{name}/{k}"] = v
        return out


class ContrastiveLoss(nn.Module):
    """InfoNCE with composable mixing strategies, in-batch or against a queue.

    Args:
        temperature: tau, required (SimCSE/MixCSE: 0.05; MoCo-v2: 0.2).
        strategies: a strategy name, a mapping ``{"name": ..., **params}``, a Strategy, or a list of them.
        symmetric: average the two directions (in-batch only). None: true if a strategy asks for it
            (MixCSE's ``bidirectional``), else false. An explicit value that contradicts a strategy raises.
        fused: compute the whole one-process in-batch loss in one step when it can: plain InfoNCE, or a
            lone strategy that offers it (:meth:`Strategy.fused_in_batch`; MixCSE's clean stop-gradient
            loss), see :mod:`hardmix.losses.fused_in_batch`. Same values and gradients, fewer passes over
            the (B, B) matrices; False forces the composed path.

    Inputs (in_batch): z1, z2 of shape (B, D), any norm (cosine similarity is used).
    Inputs (queue): q, k (B, D) and queue (K, D).

    Example:
        >>> loss_fn = ContrastiveLoss(temperature=0.05, strategies={"name": "mixcse", "lam": 0.2})
        >>> z1, z2 = torch.randn(8, 16, requires_grad=True), torch.randn(8, 16)
        >>> out = loss_fn.in_batch(z1, z2)
        >>> out.loss.backward()
        >>> z1.grad.shape
        torch.Size([8, 16])
    """

    def __init__(
        self, temperature: float, strategies: Any = None, symmetric: bool | None = None, fused: bool = True
    ) -> None:
        super().__init__()
        self.fused = bool(fused)
        _check_temperature(temperature)
        self.temperature = float(temperature)
        self.strategies: list[Strategy] = build_strategies(strategies)
        wanted = {s.symmetric for s in self.strategies} - {None}
        if len(wanted) > 1:
            raise ValueError("symmetric: the strategies disagree on bidirectional; set it the same in each")
        if symmetric is None:
            symmetric = wanted.pop() if wanted else False
        elif wanted and symmetric not in wanted:
            raise ValueError(
                f"symmetric: {symmetric} contradicts the strategies' bidirectional={not symmetric}; drop one"
            )
        self.symmetric = bool(symmetric)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, symmetric={self.symmetric}, strategies={self.strategies}"

    @property
    def _needs_anchor_logits(self) -> bool:
        return any(s.needs_anchor_logits for s in self.strategies)

    def _direction(self, ctx: ContrastContext, base_blocks: list[Tensor], positive_logits: Tensor) -> Tensor:
        """One direction's loss: the base blocks (which hold the positive) plus each strategy's columns."""
        blocks: list[Tensor | DerivedLogits] = list(base_blocks)
        for strategy in self.strategies:
            extra = strategy.extra_logits(ctx)
            if isinstance(extra, DerivedLogits):
                blocks.append(extra)  # of ctx.anchor_logits: in its dtype
            elif extra is not None:
                blocks.append(extra.to(blocks[0].dtype))
        return info_nce_from_blocks(positive_logits, blocks)

    def in_batch(
        self,
        z1: Tensor,
        z2: Tensor,
        z1_all: Tensor | None = None,
        z2_all: Tensor | None = None,
        offset: int = 0,
        step: int = 0,
        generator: torch.Generator | None = None,
    ) -> LossOutput:
        """In-batch InfoNCE (SimCSE) with the strategies' extra negatives.

        Args:
            z1: (B, D) first view (anchors), local rows.
            z2: (B, D) second view (positives), local rows.
            z1_all: (N, D) the first view of the whole batch when distributed (gathered with gradient,
                see :func:`hardmix.distributed.gather_with_grad`); None for one process.
            z2_all: (N, D) likewise for the second view.
            offset: global index of local row 0 (rank * B for equal local batches).
            step: optimizer step, for strategy warm-ups.
            generator: optional generator for the strategies' random draws.
        """
        if z1.shape != z2.shape or z1.dim() != 2:
            raise ValueError(f"z1 and z2 must both be (B, D), got {tuple(z1.shape)} and {tuple(z2.shape)}")
        distributed = z1_all is not None or z2_all is not None
        if distributed and (z1_all is None or z2_all is None):
            raise ValueError("z1_all and z2_all: give both or neither")
        tau = self.temperature
        h1, h2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)

        if not distributed and self.fused and len(self.strategies) <= 1:
            if self.strategies:
                fused = self.strategies[0].fused_in_batch(h1, h2, tau, self.symmetric)
            elif fused_in_batch_supported(h1, tau):
                fused = fused_in_batch_loss(h1, h2, tau, self.symmetric)
            else:
                fused = None
            if fused is not None:
                loss, pos1 = fused
                with torch.no_grad():
                    neg_sim = _mean_negative_cosine(h1, h2, pos1 * tau)
                return LossOutput(loss, pos1 * tau, neg_sim, {s.name: s.diagnostics for s in self.strategies})

        h1_all = F.normalize(z1_all, dim=-1) if distributed else h1
        h2_all = F.normalize(z2_all, dim=-1) if distributed else h2
        raw1_all = z1_all if distributed else z1
        raw2_all = z2_all if distributed else z2
        b, n = h1.shape[0], h2_all.shape[0]
        rows = torch.arange(b, device=z1.device)
        pos_index = rows + offset
        valid = torch.ones(b, n, dtype=torch.bool, device=z1.device)
        valid[rows, pos_index] = False
        need_sg = self._needs_anchor_logits

        # Direction 1: anchors h1 (local) against candidates h2_all.
        if not distributed:
            outs = pairwise_logits(h1, h2, tau, a_only=need_sg, b_only=need_sg and self.symmetric)
        else:
            outs = pairwise_logits(h1, h2_all, tau, a_only=need_sg)
        logits1 = outs[0]
        anchor1 = outs[1] if need_sg else logits1
        # The positives' logits as row-wise products (B x D) rather than entries picked out of the (B, N)
        # logits: same values, and their backward needs no (B, N) scatter of zeros. Column offset + i of
        # logits1 holds the same value.
        pos1 = (h1 * h2).sum(dim=1) / tau
        pos1_anchor = (h1 * h2.detach()).sum(dim=1) / tau if need_sg else pos1
        ctx1 = ContrastContext(
            anchors=h1, positives=h2, candidates=h2_all, logits=logits1, anchor_logits=anchor1,
            positive_logits=pos1, positive_anchor_logits=pos1_anchor, negative_mask=valid,
            temperature=tau, mode="in_batch", step=step, positive_index=pos_index,
            raw_anchors=z1, raw_candidates=raw2_all, raw_all_anchors=raw1_all, direction=0,
            generator=generator, mask_kind="positive",
        )
        loss = self._direction(ctx1, [logits1], pos1)

        if self.symmetric:
            # Direction 2: anchors h2 (local) against candidates h1_all.
            if not distributed:
                logits2 = logits1.T
                anchor2 = outs[2].T if need_sg else logits2
            else:
                outs2 = pairwise_logits(h2, h1_all, tau, a_only=need_sg)
                logits2 = outs2[0]
                anchor2 = outs2[1] if need_sg else logits2
            pos2 = pos1  # h2_i . h1_i
            pos2_anchor = (h2 * h1.detach()).sum(dim=1) / tau if need_sg else pos2
            ctx2 = ContrastContext(
                anchors=h2, positives=h1, candidates=h1_all, logits=logits2, anchor_logits=anchor2,
                positive_logits=pos2, positive_anchor_logits=pos2_anchor, negative_mask=valid,
                temperature=tau, mode="in_batch", step=step, positive_index=pos_index,
                raw_anchors=z2, raw_candidates=raw1_all, raw_all_anchors=raw2_all, direction=1,
                generator=generator, mask_kind="positive",
            )
            loss = 0.5 * (loss + self._direction(ctx2, [logits2], pos2))

        with torch.no_grad():
            pos_sim = pos1.detach() * tau
            neg_sim = _mean_negative_cosine(h1.detach(), h2_all.detach(), pos_sim)
        return LossOutput(loss, pos_sim, neg_sim, {s.name: s.diagnostics for s in self.strategies})

    def queue(
        self,
        q: Tensor,
        k: Tensor,
        queue: Tensor,
        query_ids: Tensor | None = None,
        queue_ids: Tensor | None = None,
        step: int = 0,
        generator: torch.Generator | None = None,
    ) -> LossOutput:
        """MoCo InfoNCE ``[q.k | q.queue] / tau`` (target 0) with the strategies' extra negatives.

        Args:
            q: (B, D) queries (with gradient), any norm.
            k: (B, D) keys (positives); detached here, as MoCo's momentum keys.
            queue: (K, D) negatives; detached.
            query_ids: optional (B,) sample ids of the queries.
            queue_ids: optional (K,) sample ids of the queue entries; entries that carry the query's own
                id are excluded (a queue larger than the dataset holds the query's earlier key). Id -1
                marks an empty slot (excluded); other negative ids (-2: a random initial key) match no
                query.
        """
        if q.dim() != 2 or q.shape != k.shape or queue.dim() != 2 or queue.shape[1] != q.shape[1]:
            raise ValueError(
                f"q, k (B, D) and queue (K, D) expected, got {tuple(q.shape)}, {tuple(k.shape)}, "
                f"{tuple(queue.shape)}"
            )
        tau = self.temperature
        h = F.normalize(q, dim=-1)
        key = F.normalize(k.detach(), dim=-1)
        negatives = F.normalize(queue.detach(), dim=-1)
        logits = (h * (1.0 / tau)) @ negatives.T  # (B, K) q.n / tau, gradient to q only; scaled in (B, D)
        pos = (h * key).sum(dim=1) / tau
        if queue_ids is not None:
            valid = queue_ids.view(1, -1) != -1
            if query_ids is not None:
                valid = valid & (query_ids.view(-1, 1) != queue_ids.view(1, -1))
            else:
                valid = valid.expand(h.shape[0], -1)
            # Excluded entries to -inf in place, through a detached alias: no (B, K) copy, and autograd
            # adds no masking pass to the backward, which needs none: every use of these entries (the
            # logsumexp, MixCSE's masked mixtures) gives them a zero gradient. (Allowed: the product
            # saved its inputs, not this output, and nothing has read the logits yet.)
            logits.detach().masked_fill_(~valid, float("-inf"))
        else:
            # Every queue entry is a negative: an expanded view, no (B, K) mask in memory.
            valid = torch.ones((1, 1), dtype=torch.bool, device=q.device)
            valid = valid.expand(h.shape[0], negatives.shape[0])
        excluded = None if queue_ids is None else _excluded_queue_entries(query_ids, queue_ids, h.shape[0])
        ctx = ContrastContext(
            anchors=h, positives=key, candidates=negatives, logits=logits, anchor_logits=logits,
            positive_logits=pos, positive_anchor_logits=pos, negative_mask=valid, temperature=tau,
            mode="queue", step=step, generator=generator,
            mask_kind="general" if queue_ids is not None else "all",
            negative_counts=None if excluded is None else excluded.counts,
        )
        loss = self._direction(ctx, [pos.unsqueeze(1), logits], pos)
        with torch.no_grad():
            # Mean of h_i . n_k over the valid pairs: (sum_i h_i) . (sum_k n_k) less the excluded pairs
            # (the empty slots' columns and the own-id entries): O((B + K) D), no (B, K) pass.
            h_sum = h.detach().sum(0)
            total = h_sum @ negatives.sum(0)
            if excluded is None:
                neg_sim = total / max(logits.numel(), 1)
            else:
                total = total - h_sum @ negatives[excluded.empty].sum(0)
                total = total - (h.detach()[excluded.rows] * negatives[excluded.cols]).sum()
                neg_sim = total / excluded.counts.sum().clamp_min(1)
        return LossOutput(loss, pos.detach() * tau, neg_sim, {s.name: s.diagnostics for s in self.strategies})


@dataclass(frozen=True)
class _QueueExclusions:
    """The queue entries a query may not use, sparsely (see :func:`_excluded_queue_entries`)."""

    empty: Tensor  # (K,) bool: slots with id -1, excluded for every query
    rows: Tensor  # (M,) query of each non-empty entry that carries that query's own id
    cols: Tensor  # (M,) the entry
    counts: Tensor  # (B,) valid negatives per query: K - #empty - #own


def _excluded_queue_entries(query_ids: Tensor | None, queue_ids: Tensor, batch: int) -> _QueueExclusions:
    """The exclusions of ``ContrastiveLoss.queue`` without a (B, K) pass: one sort of the K ids and a
    binary search per query (a queue holds each sample a few times at most)."""
    device = queue_ids.device
    empty = queue_ids == -1
    n_filled = queue_ids.numel() - int(count_true(empty))
    none = torch.empty(0, dtype=torch.long, device=device)
    if query_ids is None:
        return _QueueExclusions(empty, none, none, torch.full((batch,), n_filled, device=device))
    query_ids = query_ids.to(device=device, dtype=queue_ids.dtype)
    sorted_ids, order = queue_ids.sort()
    low = torch.searchsorted(sorted_ids, query_ids)
    own = torch.searchsorted(sorted_ids, query_ids, right=True).sub_(low)
    own.masked_fill_(query_ids == -1, 0)  # an id of -1 matches only empty slots, excluded already
    rows = torch.repeat_interleave(torch.arange(batch, device=device), own)
    first = torch.repeat_interleave(low, own)
    within = torch.arange(rows.numel(), device=device) - torch.repeat_interleave(own.cumsum(0) - own, own)
    return _QueueExclusions(empty, rows, order[first + within], n_filled - own)


def _mean_negative_cosine(anchors: Tensor, candidates: Tensor, positive_cos: Tensor) -> Tensor:
    """Mean cosine of the (B, D) anchors to their in-batch negatives: all (N, D) candidates but each
    row's positive. The sum over all pairs is ``(sum_i a_i) . (sum_j c_j)``: O((B + N) D), no (B, N) pass."""
    b, n = anchors.shape[0], candidates.shape[0]
    total = anchors.sum(0) @ candidates.sum(0)
    return (total - positive_cos.sum()) / max(b * n - b, 1)
