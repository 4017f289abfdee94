"""The contrastive loss of hardmix: InfoNCE whose denominator the strategies extend.

In-batch layout (SimCSE): two views z1, z2 (B, D) of a batch; anchor i = z1_i, candidates = all of z2
(gathered over ranks when distributed), positive in column ``offset + i``. With ``symmetric`` the second
direction (z2 as anchor against z1) is added and the two are averaged.

Queue layout (MoCo): query q (B, D), key k (B, D) and a queue (K, D); logits [q.k | q.queue] / tau.

Each direction gets the plain logits plus the extra negative columns of every strategy; strategies that
exclude or reweight negatives or replace the estimator compose as :mod:`hardmix.losses.composition` says.

Two implementations of the same numbers: ``impl="plain"`` computes each direction as the papers write it
(the logits by a matrix product, each strategy's :meth:`~hardmix.strategies.Strategy.extra_logits`, one
cross-entropy over the concatenated columns); ``impl="fast"`` (the default) uses :mod:`hardmix.kernels`
(stop-gradient views of one product, derived logit blocks with fused backwards, the fused in-batch loss,
sparse queue exclusions). The tests check that both give the same losses and gradients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hardmix.errors import StrategyArgumentError
from hardmix.kernels.block_logsumexp import info_nce_from_blocks
from hardmix.kernels.derived_logits import DerivedLogits
from hardmix.kernels.fused_in_batch import fused_in_batch_loss, fused_in_batch_supported
from hardmix.kernels.pairwise import pairwise_logits
from hardmix.kernels.queue_exclusions import excluded_queue_entries
from hardmix.kernels.shortcuts import LogitShortcuts
from hardmix.losses.composition import check_composition, composed_direction, needs_composition
from hardmix.losses.info_nce import check_temperature
from hardmix.strategies.base import ContrastContext, Strategy, UnnormalizedViews, build_strategies

IMPLS = ("fast", "plain")


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
            loss), see :mod:`hardmix.kernels.fused_in_batch`. Same values and gradients, fewer passes over
            the (B, B) matrices; False forces the composed path. (Fast path only.)
        impl: ``"fast"`` (default: the kernels) or ``"plain"`` (every strategy's plain implementation,
            the definition, end to end; slower, for checking the fast path).

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
        self,
        temperature: float,
        strategies: Any = None,
        symmetric: bool | None = None,
        fused: bool = True,
        impl: str = "fast",
    ) -> None:
        super().__init__()
        if impl not in IMPLS:
            raise StrategyArgumentError("impl", f"must be 'fast' or 'plain', got {impl!r}")
        self.impl = impl
        self.fused = bool(fused)
        check_temperature(temperature)
        self.temperature = float(temperature)
        self.strategies: list[Strategy] = build_strategies(strategies)
        check_composition(self.strategies)
        # An exclusion, a weight or an estimator: every direction is composed plainly (composition.py).
        self._composed = needs_composition(self.strategies)
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
        impl = "" if self.impl == "fast" else f", impl={self.impl!r}"
        return (
            f"temperature={self.temperature}, symmetric={self.symmetric}, strategies={self.strategies}{impl}"
        )

    @property
    def _needs_anchor_logits(self) -> bool:
        return any(s.needs_anchor_logits for s in self.strategies)

    def _direction(self, ctx: ContrastContext, base_blocks: list[Tensor], positive_logits: Tensor) -> Tensor:
        """One direction's loss on the fast path: the base blocks (which hold the positive) plus each
        strategy's :meth:`~hardmix.strategies.Strategy.fast_logits` columns."""
        blocks: list[Tensor | DerivedLogits] = list(base_blocks)
        for strategy in self.strategies:
            extra = strategy.fast_logits(ctx)
            if isinstance(extra, DerivedLogits):
                blocks.append(extra)  # of ctx.shortcuts.anchor_logits: in its dtype
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
        if self.impl == "plain" or self._composed:
            return self._in_batch_plain(z1, z2, z1_all, z2_all, offset, step, generator)
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
            anchors=h1, positives=h2, candidates=h2_all, logits=logits1, positive_logits=pos1,
            negative_mask=valid, temperature=tau, mode="in_batch", step=step, positive_index=pos_index,
            direction=0, generator=generator, unnormalized=UnnormalizedViews(z1, raw1_all, raw2_all),
            shortcuts=LogitShortcuts(anchor1, pos1_anchor, mask_kind="positive"),
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
                anchors=h2, positives=h1, candidates=h1_all, logits=logits2, positive_logits=pos2,
                negative_mask=valid, temperature=tau, mode="in_batch", step=step, positive_index=pos_index,
                direction=1, generator=generator, unnormalized=UnnormalizedViews(z2, raw2_all, raw1_all),
                shortcuts=LogitShortcuts(anchor2, pos2_anchor, mask_kind="positive"),
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
        if self.impl == "plain" or self._composed:
            return self._queue_plain(q, k, queue, query_ids, queue_ids, step, generator)
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
        excluded = None if queue_ids is None else excluded_queue_entries(query_ids, queue_ids, h.shape[0])
        shortcuts = LogitShortcuts(
            logits, pos, mask_kind="general" if queue_ids is not None else "all",
            negative_counts=None if excluded is None else excluded.counts,
        )
        ctx = ContrastContext(
            anchors=h, positives=key, candidates=negatives, logits=logits, positive_logits=pos,
            negative_mask=valid, temperature=tau, mode="queue", step=step, generator=generator,
            shortcuts=shortcuts,
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


    def _in_batch_plain(
        self,
        z1: Tensor,
        z2: Tensor,
        z1_all: Tensor | None,
        z2_all: Tensor | None,
        offset: int,
        step: int,
        generator: torch.Generator | None,
    ) -> LossOutput:
        """:meth:`in_batch` with ``impl="plain"``: the SimCSE logits h_i . h'_j / tau of every anchor i
        against the whole batch, composed with the strategies (:func:`composed_direction`: exclusions,
        weights, plain extra columns, the estimator); averaged with the second direction when symmetric."""
        tau = self.temperature
        z1_all = z1 if z1_all is None else z1_all
        z2_all = z2 if z2_all is None else z2_all
        h1, h2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
        h1_all, h2_all = F.normalize(z1_all, dim=-1), F.normalize(z2_all, dim=-1)
        b, n = h1.shape[0], h2_all.shape[0]
        rows = torch.arange(b, device=z1.device)
        pos_index = rows + offset  # column of each anchor's positive in the whole batch
        valid = torch.ones(b, n, dtype=torch.bool, device=z1.device)
        valid[rows, pos_index] = False

        def direction(
            anchors: Tensor, positives: Tensor, candidates: Tensor, views: UnnormalizedViews, index: int
        ) -> tuple[Tensor, Tensor]:
            logits = anchors @ candidates.T / tau  # (B, N)
            ctx = ContrastContext(
                anchors=anchors, positives=positives, candidates=candidates, logits=logits,
                positive_logits=logits[rows, pos_index], negative_mask=valid, temperature=tau,
                mode="in_batch", step=step, positive_index=pos_index, direction=index,
                generator=generator, unnormalized=views,
            )
            return composed_direction(ctx, self.strategies), logits

        loss, logits1 = direction(h1, h2, h2_all, UnnormalizedViews(z1, z1_all, z2_all), 0)
        if self.symmetric:
            loss2, _ = direction(h2, h1, h1_all, UnnormalizedViews(z2, z2_all, z1_all), 1)
            loss = 0.5 * (loss + loss2)
        with torch.no_grad():
            cosines = logits1.detach() * tau
            pos_sim = cosines[rows, pos_index]
            neg_sim = cosines[valid].mean() if n > 1 else cosines.new_zeros(())
        return LossOutput(loss, pos_sim, neg_sim, {s.name: s.diagnostics for s in self.strategies})

    def _queue_plain(
        self,
        q: Tensor,
        k: Tensor,
        queue: Tensor,
        query_ids: Tensor | None,
        queue_ids: Tensor | None,
        step: int,
        generator: torch.Generator | None,
    ) -> LossOutput:
        """:meth:`queue` with ``impl="plain"``: ``[q.k | q.queue] / tau``, the excluded queue entries -inf
        by a (B, K) mask, composed with the strategies (:func:`composed_direction`)."""
        tau = self.temperature
        h = F.normalize(q, dim=-1)
        key = F.normalize(k.detach(), dim=-1)
        negatives = F.normalize(queue.detach(), dim=-1)
        b, n_queue = h.shape[0], negatives.shape[0]
        valid = torch.ones(b, n_queue, dtype=torch.bool, device=q.device)
        if queue_ids is not None:
            valid &= queue_ids.view(1, -1) != -1  # empty slots
            if query_ids is not None:  # the query's own earlier keys
                valid &= query_ids.to(queue_ids.device).view(-1, 1) != queue_ids.view(1, -1)
        logits = (h @ negatives.T / tau).masked_fill(~valid, float("-inf"))  # (B, K)
        pos = (h * key).sum(dim=1) / tau  # (B,)
        ctx = ContrastContext(
            anchors=h, positives=key, candidates=negatives, logits=logits, positive_logits=pos,
            negative_mask=valid, temperature=tau, mode="queue", step=step, generator=generator,
        )
        loss = composed_direction(ctx, self.strategies)
        with torch.no_grad():
            cosines = (h.detach() @ negatives.T)[valid]
            neg_sim = cosines.mean() if cosines.numel() else cosines.new_zeros(())
        return LossOutput(loss, pos.detach() * tau, neg_sim, {s.name: s.diagnostics for s in self.strategies})


def _mean_negative_cosine(anchors: Tensor, candidates: Tensor, positive_cos: Tensor) -> Tensor:
    """Mean cosine of the (B, D) anchors to their in-batch negatives: all (N, D) candidates but each
    row's positive. The sum over all pairs is ``(sum_i a_i) . (sum_j c_j)``: O((B + N) D), no (B, N) pass."""
    b, n = anchors.shape[0], candidates.shape[0]
    total = anchors.sum(0) @ candidates.sum(0)
    return (total - positive_cos.sum()) / max(b * n - b, 1)
