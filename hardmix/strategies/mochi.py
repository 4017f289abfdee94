"""The ``mochi`` strategy: synthetic hard negatives mixed from each query's hardest negatives
(Kalantidis et al., Hard Negative Mixing for Contrastive Learning, NeurIPS 2020).

For query q with its N hardest negatives n_1..n_N (the N highest q.n among its valid negatives), the
paper's Sec. 4.1, Eq. 3 (s pair mixtures) and Sec. 4.2, Eq. 4 (s' query mixtures):

    h_k  = normalize(alpha_k n_a + (1 - alpha_k) n_b),   a != b,  alpha_k ~ U(0, 1),        k = 1..s
    h'_k = normalize(beta_k q~ + (1 - beta_k) n_c),                beta_k ~ U(0, beta_max),  k = 1..s'

with q~ the detached query; every synthetic point is detached, and its logit q.h / tau joins the
denominator of q's InfoNCE term. The pairs (a, b) of a query are distinct (a uniform s-subset of the
N(N-1)/2 pairs), c is uniform among the N.

Below: the selection (:func:`hardest`), the random draws (:func:`mochi_draws`), the points
(:func:`synthesize`, what :func:`mochi_synthesize` returns), and :meth:`MoCHi.extra_logits`, which takes
the points' logits without building the (B, s + s', D) points: for unit vectors (MixCSE's
:func:`~hardmix.strategies.mixcse.mixture_logits`)

    q . h_k  = (alpha q.n_a + (1 - alpha) q.n_b) / sqrt(alpha^2 + (1 - alpha)^2 + 2 alpha (1 - alpha) n_a.n_b)
    q . h'_k = (beta q.q~ + (1 - beta) q.n_c) / sqrt(beta^2 + (1 - beta)^2 + 2 beta (1 - beta) q.n_c)

from the logits the loss has (q.n / tau, gradient to q only) and one inner product n_a.n_b per pair
(without gradient, in blocks of rows: (B, s, D) at the paper's shapes is too large to hold at once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.errors import StrategyArgumentError
from hardmix.strategies.base import (
    ContrastContext,
    Stats,
    Strategy,
    arg,
    check_int,
    check_number,
    register_strategy,
    set_field,
)
from hardmix.strategies.mixcse import mixture_logits, synthetic_stats

PAIR_BLOCK = 1 << 22  # elements of one (rows, s, D) block of gathered negatives (16 MiB in fp32)


class MochiDraws(NamedTuple):
    """MoCHi's random numbers for a batch; positions index each query's N hardest negatives, as listed by
    :func:`hardest` (ascending negative index)."""

    first: Tensor  # (B, s) int64 position of n_a
    second: Tensor  # (B, s) int64 position of n_b, first < second
    alpha: Tensor  # (B, s) weight of n_a, ~ U(0, 1)
    pick: Tensor  # (B, s') int64 position of n_c, uniform
    beta: Tensor  # (B, s') weight of the query, ~ U(0, beta_max)


def sample_distinct_pairs(
    batch: int,
    n: int,
    n_pairs: int,
    generator: torch.Generator | None = None,
    device: torch.device | None = None,
) -> tuple[Tensor, Tensor]:
    """For each of ``batch`` rows, ``n_pairs`` distinct unordered pairs (a, b), a < b, of range(n): a
    uniform n_pairs-subset of the n(n-1)/2 pairs (the first distinct ones of uniform draws with
    replacement; ranked random keys when most pairs are taken).

    Example:
        >>> first, second = sample_distinct_pairs(2, 3, 3, torch.Generator().manual_seed(0))
        >>> sorted(zip(first[0].tolist(), second[0].tolist()))  # all 3 pairs of range(3)
        [(0, 1), (0, 2), (1, 2)]
    """
    total = n * (n - 1) // 2
    if n_pairs > total:
        raise StrategyArgumentError(
            "n_pair", f"{n_pairs} distinct pairs requested from {n} items ({total} exist)"
        )
    if total <= 4 * n_pairs:
        rows, cols = torch.triu_indices(n, n, offset=1, device=device)
        pick = torch.rand(batch, total, generator=generator, device=device).topk(n_pairs, dim=1).indices
        return rows[pick], cols[pick]
    draws = n_pairs + 16 + n_pairs // 4
    while True:
        a = torch.randint(n, (batch, draws), generator=generator, device=device)
        b = torch.randint(n - 1, (batch, draws), generator=generator, device=device)
        b += b >= a  # uniform over the others
        first, second = torch.minimum(a, b), torch.maximum(a, b)
        codes, order = (first * n + second).sort(dim=1, stable=True)
        repeat = torch.zeros_like(codes, dtype=torch.bool)
        repeat[:, 1:] = codes[:, 1:] == codes[:, :-1]
        new = ~torch.zeros_like(repeat).scatter_(1, order, repeat)  # first occurrence, in draw order
        keep = new & (new.cumsum(dim=1) <= n_pairs)
        if bool((keep.sum(dim=1) == n_pairs).all()):
            return first[keep].view(batch, n_pairs), second[keep].view(batch, n_pairs)
        draws *= 2


def mochi_draws(
    batch: int,
    n_hard: int,
    n_pair: int,
    n_query: int,
    beta_max: float,
    generator: torch.Generator | None,
    device: torch.device,
    dtype: torch.dtype,
) -> MochiDraws:
    """MoCHi's random draws, in a fixed order from ``generator``: the pairs, alpha, the picks, beta.

    Example:
        >>> draws = mochi_draws(2, 4, 3, 1, 0.5, torch.Generator().manual_seed(0), torch.device("cpu"),
        ...                     torch.float32)
        >>> draws.first.shape, draws.pick.shape, bool((draws.first < draws.second).all())
        (torch.Size([2, 3]), torch.Size([2, 1]), True)
    """
    empty = torch.empty(batch, 0, dtype=torch.long, device=device)
    first, second = (
        sample_distinct_pairs(batch, n_hard, n_pair, generator, device) if n_pair else (empty, empty)
    )
    alpha = torch.rand(batch, n_pair, generator=generator, device=device, dtype=dtype)
    pick = torch.randint(n_hard, (batch, n_query), generator=generator, device=device) if n_query else empty
    beta = beta_max * torch.rand(batch, n_query, generator=generator, device=device, dtype=dtype)
    return MochiDraws(first, second, alpha, pick, beta)


def hardest(similarities: Tensor, n_hard: int, valid: Tensor | None = None) -> Tensor:
    """(B, N) indices of each query's ``n_hard`` most similar valid negatives, ascending, chosen in fp32.

    Example:
        >>> hardest(torch.tensor([[0.1, 0.9, 0.5, 0.7]]), 2)
        tensor([[1, 3]])
    """
    sims = similarities.detach().float()
    if valid is not None:
        sims = sims.masked_fill(~valid, float("-inf"))
    return sims.topk(n_hard, dim=1, sorted=False).indices.sort(dim=1).values


def synthesize(query: Tensor, negatives: Tensor, hard: Tensor, draws: MochiDraws) -> Tensor:
    """The synthetic points of Eq. 3 and 4 as vectors: (B, s + s', D), unit norm, detached, pair mixtures
    first (query: (B, D) unit, used detached; negatives: (K, D) unit; hard: (B, N) from :func:`hardest`)."""
    query, negatives = query.detach(), negatives.detach()
    n_a, n_b = negatives[hard.gather(1, draws.first)], negatives[hard.gather(1, draws.second)]  # (B, s, D)
    n_c = negatives[hard.gather(1, draws.pick)]  # (B, s', D)
    alpha, beta = draws.alpha.unsqueeze(2), draws.beta.unsqueeze(2)
    pair_mixtures = F.normalize(alpha * n_a + (1.0 - alpha) * n_b, dim=-1)  # h_k, Eq. 3
    query_mixtures = F.normalize(beta * query.unsqueeze(1) + (1.0 - beta) * n_c, dim=-1)  # h'_k, Eq. 4
    return torch.cat([pair_mixtures, query_mixtures.to(pair_mixtures.dtype)], dim=1)


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
    """(B, s + s') ``q . SG(h) / tau`` of the points :func:`synthesize` builds, from the identity of the
    module docstring (gradient to the queries only)."""
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
        ... except StrategyArgumentError as error:
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
        check_int("n_hard", self.n_hard, 1)
        check_int("n_pair", self.n_pair)
        check_int("n_query", self.n_query)
        if self.n_pair > self.n_hard * (self.n_hard - 1) // 2:
            raise StrategyArgumentError(
                "n_pair",
                f"{self.n_pair} mixtures of distinct pairs need as many pairs among "
                f"n_hard={self.n_hard} ({self.n_hard * (self.n_hard - 1) // 2} exist)",
            )
        set_field(self, "beta_max", check_number("beta_max", self.beta_max, 0.0, 0.5, "(]"))

    @property
    def required_negatives(self) -> int:
        return self.n_hard

    def check_available(self, ctx: ContrastContext) -> None:
        available = ctx.fewest_negatives()
        if self.n_hard > available:
            raise StrategyArgumentError(
                self.negatives_argument,
                f"{self.n_hard} hardest negatives requested but only {available} are available "
                f"({ctx.mode} negatives)",
            )

    def select_and_draw(self, ctx: ContrastContext) -> tuple[Tensor, MochiDraws]:
        """Each anchor's N hardest valid negatives (B, N) and the draws over them."""
        self.check_available(ctx)
        hard = hardest(ctx.selection_similarities(), self.n_hard, ctx.negative_mask)
        draws = mochi_draws(
            hard.shape[0],
            self.n_hard,
            self.n_pair,
            self.n_query,
            self.beta_max,
            ctx.generator,
            ctx.anchors.device,
            ctx.anchors.dtype,
        )
        return hard, draws

    def extra_logits(self, ctx: ContrastContext) -> tuple[Tensor, Stats] | None:
        """(B, s + s') q . SG(h) / tau of the synthetic points, pair mixtures first."""
        if self.n_pair + self.n_query == 0:
            return None
        logits = mochi_logits(ctx, *self.select_and_draw(ctx))
        return logits, synthetic_stats(ctx, logits)


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
    """MoCHi's synthetic hard negatives themselves (Kalantidis et al., NeurIPS 2020, Sec. 4.1 and 4.2).

    Args:
        query: (B, D) unit-norm queries; negatives: (K, D) unit-norm negatives (the queue).
        n_hard: N; n_pair: s; n_query: s'; beta_max: upper bound of the query weight, in (0, 0.5].
        generator: optional torch.Generator (the same points :meth:`MoCHi.extra_logits` takes the logits of).
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
    MoCHi(n_hard, n_pair, n_query, beta_max)  # validates the arguments
    available = negatives.shape[0] if valid is None else int(valid.sum(dim=1).min()) if valid.numel() else 0
    if n_hard > available:
        raise StrategyArgumentError(
            "n_hard", f"{n_hard} hardest negatives requested but only {available} are available"
        )
    if similarities is None:
        with torch.autocast(query.device.type, enabled=False):  # fp32: bf16 ties change the selection
            similarities = query.float() @ negatives.float().T
    hard = hardest(similarities, n_hard, valid)
    draws = mochi_draws(
        query.shape[0], n_hard, n_pair, n_query, beta_max, generator, query.device, query.dtype
    )
    return synthesize(query, negatives, hard, draws)
