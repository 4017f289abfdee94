"""The ``mochi`` strategy: synthetic hard negatives mixed from each query's hardest negatives
(Kalantidis et al., Hard Negative Mixing for Contrastive Learning, NeurIPS 2020).

For query q with its N hardest negatives n_1..n_N (the N highest q.n among its valid negatives), the
paper's Sec. 4.1, Eq. 3 (s pair mixtures) and Sec. 4.2, Eq. 4 (s' query mixtures):

    h_k  = normalize(alpha_k n_a + (1 - alpha_k) n_b),   a != b,  alpha_k ~ U(0, 1),        k = 1..s
    h'_k = normalize(beta_k q~ + (1 - beta_k) n_c),                beta_k ~ U(0, beta_max),  k = 1..s'

with q~ the detached query; every synthetic point is detached, and its logit q.h / tau joins the
denominator of q's InfoNCE term. The pairs (a, b) of a query are distinct (a uniform s-subset of the
N(N-1)/2 pairs), c is uniform among the N.

The selection (:func:`~hardmix.mixing.hardest`), the random draws (:func:`~hardmix.mixing.mochi_draws`)
and the points themselves (:func:`~hardmix.mixing.mochi_points`, what :func:`~hardmix.mixing.mochi_synthesize`
returns) are primitives of :mod:`hardmix.mixing` (the ``hard_copies`` control draws the same). Below,
:meth:`MoCHi.extra_logits` takes the points' logits without building the (B, s + s', D) points: for unit
vectors (:func:`~hardmix.mixing.mixture_logits`)

    q . h_k  = (alpha q.n_a + (1 - alpha) q.n_b) / sqrt(alpha^2 + (1 - alpha)^2 + 2 alpha (1 - alpha) n_a.n_b)
    q . h'_k = (beta q.q~ + (1 - beta) q.n_c) / sqrt(beta^2 + (1 - beta)^2 + 2 beta (1 - beta) q.n_c)

from the logits the loss has (q.n / tau, gradient to q only) and one inner product n_a.n_b per pair
(without gradient, in blocks of rows: (B, s, D) at the paper's shapes is too large to hold at once).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from hardmix.mixing import (
    MochiDraws,
    check_enough_negatives,
    check_mochi_arguments,
    mixture_logits,
    mochi_selection,
    synthetic_stats,
)
from hardmix.strategies.base import ContrastContext, Stats, Strategy, arg, register_strategy, set_field

PAIR_BLOCK = 1 << 22  # elements of one (rows, s, D) block of gathered negatives (16 MiB in fp32)


@torch.no_grad()
def pair_cosines(negatives: Tensor, rows_a: Tensor, rows_b: Tensor) -> Tensor:
    """(B, s) n_a . n_b of the (B, s) negative indices, in blocks of rows of at most :data:`PAIR_BLOCK`
    gathered elements."""
    out = torch.empty(rows_a.shape, dtype=negatives.dtype, device=negatives.device)
    step = max(1, PAIR_BLOCK // max(1, rows_a.shape[1] * negatives.shape[1]))
    for start in range(0, rows_a.shape[0], step):
        block = slice(start, start + step)
        out[block] = (negatives[rows_a[block]] * negatives[rows_b[block]]).sum(dim=-1)
    return out


def mochi_logits(ctx: ContrastContext, hard: Tensor, draws: MochiDraws) -> Tensor:
    """(B, s + s') ``q . SG(h) / tau`` of the points :func:`~hardmix.mixing.mochi_points` builds, from the
    identity of the module docstring (gradient to the queries only)."""
    anchor_logits = ctx.anchor_logits()  # (B, K) q . SG(n) / tau
    rows_a, rows_b, rows_c = (hard.gather(1, p) for p in (draws.first, draws.second, draws.pick))
    negatives = ctx.candidates.detach()
    dtype = anchor_logits.dtype
    pair = mixture_logits(
        anchor_logits.gather(1, rows_a),
        anchor_logits.gather(1, rows_b),
        pair_cosines(negatives, rows_a, rows_b).to(dtype),
        draws.alpha.to(dtype),
    )
    query_self = (ctx.anchors * ctx.anchors.detach()).sum(dim=1, keepdim=True) / ctx.temperature  # q . q~
    with torch.no_grad():
        query_neg = (ctx.anchors.detach().unsqueeze(1) * negatives[rows_c]).sum(dim=-1)  # (B, s') q . n_c
    query = mixture_logits(
        query_self.to(dtype), anchor_logits.gather(1, rows_c), query_neg.to(dtype), draws.beta.to(dtype)
    )
    return torch.cat([pair, query], dim=1)


@register_strategy
@dataclass(frozen=True)
class MoCHi(Strategy):
    """Hard negative mixing: s pair mixtures and s' query mixtures of each query's N hardest negatives.

    Args:
        n_hard: N, the hardest negatives per query. Paper (ImageNet-100, K = 16384): 1024.
        n_pair: s, mixtures of two distinct hard negatives. Paper: 1024 (ImageNet-100).
        n_query: s', mixtures of the query with one hard negative. Paper: 128 (ImageNet-100), 256 (IN-1K).
        beta_max: upper bound of the query's weight, <= 0.5 (Sec. 4.2). Paper: 0.5.

    The paper starts mixing after a warm-up (10 epochs on ImageNet-100, Sec. 5): ``warmup_epochs`` in the
    spec (:mod:`hardmix.strategies.schedule`).

    Example:
        >>> try:
        ...     MoCHi(n_hard=4, n_pair=7)
        ... except ValueError as error:
        ...     print(error)
        n_pair: 7 mixtures of distinct pairs need as many pairs among n_hard=4 (6 exist)
    """

    name = "mochi"
    paper = (
        "Kalantidis et al., Hard Negative Mixing for Contrastive Learning, NeurIPS 2020 (arXiv:2010.01028)"
    )
    negatives_argument = "n_hard"
    small = {"n_hard": 4, "n_pair": 4, "n_query": 2}
    n_hard: int = arg(1024, "N: hardest negatives per query (paper: 1024)")
    n_pair: int = arg(1024, "s: mixtures of two distinct hard negatives (paper: 1024 on ImageNet-100)")
    n_query: int = arg(128, "s': mixtures of the query with a hard negative (paper: 128 on ImageNet-100)")
    beta_max: float = arg(0.5, "query weight beta ~ U(0, beta_max), beta_max <= 0.5 (paper: 0.5)")

    def __post_init__(self) -> None:
        beta_max = check_mochi_arguments(self.n_hard, self.n_pair, self.n_query, self.beta_max)
        set_field(self, "beta_max", beta_max)

    @property
    def required_negatives(self) -> int:
        return self.n_hard

    def extra_logits(self, ctx: ContrastContext) -> tuple[Tensor, Stats] | None:
        """(B, s + s') q . SG(h) / tau of the synthetic points, pair mixtures first."""
        if self.n_pair + self.n_query == 0:
            return None
        check_enough_negatives(self.n_hard, ctx.fewest_negatives(), ctx.mode)
        hard, draws = mochi_selection(
            ctx.selection_similarities(), ctx.negative_mask, self.n_hard, self.n_pair, self.n_query,
            self.beta_max, ctx.generator, ctx.anchors.dtype,
        )
        logits = mochi_logits(ctx, hard, draws)
        return logits, synthetic_stats(logits, ctx.positive_logits, ctx.temperature)
