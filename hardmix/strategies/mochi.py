"""The ``mochi`` strategy: synthetic hard negatives mixed from each query's hardest negatives
(Kalantidis et al., Hard Negative Mixing for Contrastive Learning, NeurIPS 2020, Sec. 4).

For query q and its negatives n_j (the queue, or the batch's other rows), in the order of the paper:

1. **Selection** (Sec. 4.1): the N hardest negatives, the N highest q.n_j among q's valid ones (ranked in
   fp32, listed in ascending negative index).
2. **Pair mixtures** (Sec. 4.1, Eq. 3): s distinct pairs (a, b), a != b, of the N (a uniform s-subset of the
   N(N-1)/2 pairs) and for each a weight alpha_k ~ U(0, 1):

       h_k  = normalize(alpha_k n_a + (1 - alpha_k) n_b),                                 k = 1..s

3. **Query mixtures** (Sec. 4.2, Eq. 4): s' negatives c, uniform among the N, each mixed with the detached
   query q~ with a weight beta_k ~ U(0, beta_max), beta_max <= 0.5 (the negative weighs at least as much):

       h'_k = normalize(beta_k q~ + (1 - beta_k) n_c),                                    k = 1..s'

4. **Cosines**: every synthetic point is detached, and its cosine q.h joins q's negatives (the loss divides
   it by tau with every other column, so that q.h / tau enters the denominator of q's InfoNCE term).

:meth:`MoCHi.select` does steps 1 to 3: the selection, then the random numbers, from the context's generator
in one fixed order (the pairs, alpha, the picks c, beta), so a seeded generator repeats them.
:func:`mochi_points` builds the points as vectors (what :func:`mochi_synthesize` returns); the loss never
does: (B, s + s', D) at the paper's shapes is too large to hold. :func:`mochi_cosines` takes their cosines
from inner products instead, for unit vectors (:func:`~hardmix.ops.mixing.mixture_cosines`):

    q . h_k  = (alpha q.n_a + (1 - alpha) q.n_b) / sqrt(alpha^2 + (1 - alpha)^2 + 2 alpha (1 - alpha) n_a.n_b)
    q . h'_k = (beta q.q~ + (1 - beta) q.n_c) / sqrt(beta^2 + (1 - beta)^2 + 2 beta (1 - beta) q.n_c)

from the cosines the loss has (q.n, gradient to q only) and one inner product n_a.n_b per pair (without
gradient, in blocks of rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from hardmix.ops.mixing import NEG_INF, mix_normalize, mixture_cosines, sample_distinct_pairs, synthetic_stats
from hardmix.strategies.base import ContrastContext, Stats, Strategy, arg, register_strategy
from hardmix.utils.errors import StrategyArgumentError

PAIR_BLOCK = 1 << 22  # elements of one (rows, s, D) block of gathered negatives (16 MiB in fp32)


# ---- 1-3. the selection and the draws (:meth:`MoCHi.select`) ------------------------------------------


class MochiDraws(NamedTuple):
    """MoCHi's random numbers for a batch; positions index each query's N hardest negatives, as listed by
    :meth:`MoCHi.select` (ascending negative index)."""

    first: Tensor  # (B, s) int64 position of n_a
    second: Tensor  # (B, s) int64 position of n_b, first < second
    alpha: Tensor  # (B, s) weight of n_a, ~ U(0, 1)
    pick: Tensor  # (B, s') int64 position of n_c, uniform
    beta: Tensor  # (B, s') weight of the query, ~ U(0, beta_max)


# ---- 2-3. the points (as vectors: what mochi_synthesize returns) -----------------------------------------


def mochi_points(query: Tensor, negatives: Tensor, hard: Tensor, draws: MochiDraws) -> Tensor:
    """The synthetic points of Eq. 3 and 4 as vectors: (B, s + s', D), unit norm, detached, pair mixtures
    first (query: (B, D) unit, used detached; negatives: (K, D) unit; hard: (B, N) from the selection)."""
    query, negatives = query.detach(), negatives.detach()
    n_a, n_b = negatives[hard.gather(1, draws.first)], negatives[hard.gather(1, draws.second)]  # (B, s, D)
    n_c = negatives[hard.gather(1, draws.pick)]  # (B, s', D)
    alpha, beta = draws.alpha.unsqueeze(2), draws.beta.unsqueeze(2)
    pair_mixtures = mix_normalize(n_a, n_b, alpha)  # h_k, Eq. 3
    query_mixtures = mix_normalize(query.unsqueeze(1), n_c, beta)  # h'_k, Eq. 4
    return torch.cat([pair_mixtures, query_mixtures.to(pair_mixtures.dtype)], dim=1)


# ---- 4. the cosines, from inner products ------------------------------------------------------------------


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


def mochi_cosines(ctx: ContrastContext, hard: Tensor, draws: MochiDraws) -> Tensor:
    """(B, s + s') ``q . SG(h)`` of the points :func:`mochi_points` builds, from the identity of the
    module docstring (gradient to the queries only)."""
    anchor_cosines = ctx.anchor_cosines()  # (B, K) q . SG(n)
    rows_a, rows_b, rows_c = (hard.gather(1, p) for p in (draws.first, draws.second, draws.pick))
    negatives = ctx.candidates.detach()
    dtype = anchor_cosines.dtype
    pair = mixture_cosines(
        anchor_cosines.gather(1, rows_a),
        anchor_cosines.gather(1, rows_b),
        pair_cosines(negatives, rows_a, rows_b).to(dtype),
        draws.alpha.to(dtype),
    )
    query_self = (ctx.anchors * ctx.anchors.detach()).sum(dim=1, keepdim=True)  # q . q~
    with torch.no_grad():
        query_neg = (ctx.anchors.detach().unsqueeze(1) * negatives[rows_c]).sum(dim=-1)  # (B, s') q . n_c
    query = mixture_cosines(
        query_self.to(dtype), anchor_cosines.gather(1, rows_c), query_neg.to(dtype), draws.beta.to(dtype)
    )
    return torch.cat([pair, query], dim=1)


# ---- the strategy ----------------------------------------------------------------------------------------


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
        """The arguments checked, here only: N >= 1, s and s' >= 0, s distinct pairs among N, and the
        query's weight bound in (0, 0.5] (kept as a float), else a StrategyArgumentError naming one."""
        for name, low in (("n_hard", 1), ("n_pair", 0), ("n_query", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                kind = "a positive" if low else "a non-negative"
                raise StrategyArgumentError(name, f"must be {kind} integer, got {value!r}")
        pairs = self.n_hard * (self.n_hard - 1) // 2
        if self.n_pair > pairs:
            raise StrategyArgumentError("n_pair", f"{self.n_pair} mixtures of distinct pairs need as many "
                                                  f"pairs among n_hard={self.n_hard} ({pairs} exist)")
        beta_max = self.beta_max
        if isinstance(beta_max, bool) or not isinstance(beta_max, (int, float)) \
                or not math.isfinite(beta_max):
            raise StrategyArgumentError("beta_max", f"must be a number in (0, 0.5], got {beta_max!r}")
        if not 0.0 < beta_max <= 0.5:
            raise StrategyArgumentError("beta_max", f"must be in (0, 0.5], got {beta_max}")
        object.__setattr__(self, "beta_max", float(beta_max))

    @property
    def required_negatives(self) -> int:
        return self.n_hard

    def select(self, similarities: Tensor, valid: Tensor | None, generator: torch.Generator | None,
               dtype: torch.dtype) -> tuple[Tensor, MochiDraws]:
        """Steps 1 to 3: each query's N hardest valid negatives (B, N), ascending, of the (B, K)
        ``similarities`` (ranked in fp32; ``valid``: (B, K) bool or None), and the draws over them
        (:meth:`draws`, on the similarities' device, alpha and beta in ``dtype``), else a
        StrategyArgumentError naming ``n_hard`` where some query has fewer than N valid negatives.

        Example:
            >>> hard, draws = MoCHi(3, 2, 1).select(torch.tensor([[0.1, 0.9, 0.5, 0.7]]), None,
            ...                                     torch.Generator().manual_seed(0), torch.float32)
            >>> hard, draws.first.shape, draws.beta.shape
            (tensor([[1, 2, 3]]), torch.Size([1, 2]), torch.Size([1, 1]))
        """
        with torch.no_grad():
            sims = similarities.detach().float()
            if valid is not None:
                sims = sims.masked_fill(~valid, NEG_INF)
                available = int(valid.sum(dim=1).min()) if valid.numel() else 0
            else:
                available = sims.shape[1]
            if self.n_hard > available:
                raise StrategyArgumentError("n_hard", f"{self.n_hard} hardest negatives requested but only "
                                                      f"{available} are available")
            hard = sims.topk(self.n_hard, dim=1, sorted=False).indices.sort(dim=1).values  # (B, N)
        return hard, self.draws(hard.shape[0], generator, similarities.device, dtype)

    def draws(self, batch: int, generator: torch.Generator | None, device: torch.device,
              dtype: torch.dtype) -> MochiDraws:
        """Steps 2 and 3's random numbers, in a fixed order from ``generator``: the pairs (a, b) and alpha of
        Eq. 3, then the picks c and beta of Eq. 4.

        Example:
            >>> draws = MoCHi(4, 3, 1).draws(2, torch.Generator().manual_seed(0), torch.device("cpu"),
            ...                              torch.float32)
            >>> draws.first.shape, draws.pick.shape, bool((draws.first < draws.second).all())
            (torch.Size([2, 3]), torch.Size([2, 1]), True)
        """
        n, s, s_query = self.n_hard, self.n_pair, self.n_query
        empty = torch.empty(batch, 0, dtype=torch.long, device=device)
        first, second = sample_distinct_pairs(batch, n, s, generator, device) if s else (empty, empty)
        alpha = torch.rand(batch, s, generator=generator, device=device, dtype=dtype)
        pick = torch.randint(n, (batch, s_query), generator=generator, device=device) if s_query else empty
        beta = self.beta_max * torch.rand(batch, s_query, generator=generator, device=device, dtype=dtype)
        return MochiDraws(first, second, alpha, pick, beta)

    def extra_cosines(self, ctx: ContrastContext) -> tuple[Tensor, Stats] | None:
        """(B, s + s') q . SG(h) of the synthetic points, pair mixtures first (step 4)."""
        if self.n_pair + self.n_query == 0:
            return None
        try:
            hard, draws = self.select(ctx.selection_similarities(), ctx.negative_mask, ctx.generator,
                                      ctx.anchors.dtype)
        except StrategyArgumentError as e:
            raise StrategyArgumentError(e.argument, f"{e.message} ({ctx.mode} negatives)") from None
        cosines = mochi_cosines(ctx, hard, draws)
        return cosines, synthetic_stats(cosines, ctx.positive_cosines)


@torch.no_grad()
def mochi_synthesize(
    query: Tensor,
    negatives: Tensor,
    n_hard: int,
    n_pair: int,
    n_query: int,
    beta_max: float = 0.5,
    generator: torch.Generator | None = None,
    valid: Tensor | None = None,
    similarities: Tensor | None = None,
) -> Tensor:
    """MoCHi's synthetic hard negatives themselves (the points whose cosines :class:`MoCHi` takes).

    Args:
        query: (B, D) unit-norm queries; negatives: (K, D) unit-norm negatives (the queue).
        n_hard: N; n_pair: s; n_query: s'; beta_max: upper bound of the query weight, in (0, 0.5]
            (checked as :class:`MoCHi` checks them).
        generator: optional torch.Generator (the same points the ``mochi`` strategy takes the cosines of).
        valid: optional (B, K) bool mask of the negatives each query may use.
        similarities: optional (B, K) precomputed query-negative similarities (any positive scale).

    Returns:
        (B, n_pair + n_query, D) unit-norm synthetic negatives, pair mixtures first, without gradient.

    Example:
        >>> q = torch.nn.functional.normalize(torch.randn(4, 8), dim=1)
        >>> queue = torch.nn.functional.normalize(torch.randn(32, 8), dim=1)
        >>> mochi_synthesize(q, queue, n_hard=8, n_pair=6, n_query=2).shape
        torch.Size([4, 8, 8])
    """
    if query.dim() != 2 or negatives.dim() != 2 or query.shape[1] != negatives.shape[1]:
        raise ValueError(
            f"query (B, D) and negatives (K, D) expected, got {tuple(query.shape)}, {tuple(negatives.shape)}"
        )
    mochi = MoCHi(n_hard, n_pair, n_query, beta_max)
    if similarities is None:
        with torch.autocast(query.device.type, enabled=False):  # fp32: bf16 ties change the selection
            similarities = query.float() @ negatives.float().T
    hard, draws = mochi.select(similarities, valid, generator, query.dtype)
    return mochi_points(query, negatives, hard, draws)


__all__ = [
    "MoCHi",
    "MochiDraws",
    "mochi_cosines",
    "mochi_points",
    "mochi_synthesize",
    "pair_cosines",
]
