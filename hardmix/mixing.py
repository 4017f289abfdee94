"""Feature-space mixing: the tensor primitives the strategies share, and MoCHi's synthetic points.

A strategy file imports these and :mod:`hardmix.strategies.base`, never another strategy; this module
imports no strategy (nothing of hardmix but its errors).

- mixtures of unit vectors: :func:`mix_normalize` (``normalize(w a + (1 - w) b)``, the mixture both papers
  use), :func:`mixture_logits` (``h . normalize(w a + (1 - w) b)`` from the inner products alone),
  :func:`mixed_negative_logits` (MixCSE's positive-negative mixtures, masked), :func:`synthetic_stats`
  (what the diagnostics report of synthetic negatives);
- each anchor's hardest negatives: :func:`hardest`, :func:`check_enough_negatives`;
- MoCHi's draws (Kalantidis et al. 2020): :func:`sample_distinct_pairs`, :func:`mochi_draws`
  (:class:`MochiDraws`), :func:`mochi_selection` (the hardest negatives and the draws over them),
  :func:`check_mochi_arguments`; its points: :func:`mochi_points`, :func:`mochi_synthesize`.

For unit a, b: ``||w a + (1 - w) b||^2 = w^2 + (1 - w)^2 + 2 w (1 - w) a.b``, so
``h . normalize(w a + (1 - w) b) = (w h.a + (1 - w) h.b) / sqrt(w^2 + (1 - w)^2 + 2 w (1 - w) a.b)``:
the logits of a mixture need h.a, h.b (logits the loss has) and a.b, never the (B, N, D) mixtures.

Example:
    >>> a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    >>> mix_normalize(a, b, 0.5)
    tensor([0.7071, 0.7071])
    >>> mixture_logits(a @ a, a @ b, a @ b, 0.5)  # a . normalize(a / 2 + b / 2)
    tensor(0.7071)
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.errors import StrategyArgumentError, check_int, check_number

#: The logit of an excluded column (a masked negative, a queue slot not filled): the one spelling of it
#: that the shared math, the strategies and the loss use.
NEG_INF = float("-inf")


def mix_normalize(a: Tensor, b: Tensor, weight_a: Tensor | float) -> Tensor:
    """``normalize(w a + (1 - w) b)`` along the last dimension (broadcasting): (..., D) unit mixtures."""
    return F.normalize(weight_a * a + (1.0 - weight_a) * b, dim=-1)


def mixture_logits(anchor_pos: Tensor, anchor_neg: Tensor, pos_neg: Tensor, lam: Tensor | float) -> Tensor:
    """``h . normalize(lam p + (1 - lam) n)`` for unit h, p, n from ``h.p``, ``h.n`` and ``p.n`` (they
    broadcast; h.p and h.n may be scaled alike, e.g. divided by tau, and the result is scaled so).

    Example:
        >>> one, zero = torch.tensor(1.0), torch.tensor(0.0)
        >>> mixture_logits(one, zero, zero, 0.5)  # h = p orthogonal to n: cos 45 degrees
        tensor(0.7071)
    """
    squared_norm = lam * lam + (1.0 - lam) ** 2 + 2.0 * lam * (1.0 - lam) * pos_neg
    return (lam * anchor_pos + (1.0 - lam) * anchor_neg) * squared_norm.clamp_min(1e-12).rsqrt()


def mixed_negative_logits(
    anchor_pos: Tensor, anchor_neg: Tensor, pos_neg: Tensor, valid: Tensor, lam: Tensor | float
) -> Tensor:
    """(B, N) ``h_i . normalize(lam p_i + (1 - lam) n_j) / tau``, -inf where j is not a valid negative of i
    (MixCSE's mixtures of each anchor's positive with its negatives).

    Args:
        anchor_pos: (B, 1) h_i . p_i / tau.
        anchor_neg: (B, N) h_i . n_j / tau (any value where not valid, -inf included).
        pos_neg: (B, N) p_i . n_j.
        valid: (B, N) bool, the valid negatives.
        lam: the positive's weight, a number or a (B, 1) tensor (one per anchor).

    Example:
        >>> valid = torch.tensor([[True, False]])
        >>> mixed_negative_logits(torch.ones(1, 1), torch.zeros(1, 2), torch.zeros(1, 2), valid, 0.5)
        tensor([[0.7071,   -inf]])
    """
    anchor_neg = anchor_neg.masked_fill(~valid, 0.0)  # finite everywhere: no inf reaches a product
    return mixture_logits(anchor_pos, anchor_neg, pos_neg.to(anchor_neg.dtype), lam).masked_fill(
        ~valid, NEG_INF
    )


def synthetic_stats(
    logits: Tensor, positive_logits: Tensor, temperature: float, valid: Tensor | None = None
) -> dict[str, Tensor]:
    """Mean cosine of the anchors to their synthetic negatives and the fraction of those more similar to
    the anchor than its positive (MixCSE's bound on lam, Sec. 4.3), detached.

    Args:
        logits: (B, M) the synthetic negatives' logits h . s / tau.
        positive_logits: (B,) h . p / tau.
        temperature: tau.
        valid: optional (B, M) bool, the entries to count (None: all).

    Example:
        >>> stats = synthetic_stats(torch.tensor([[1.0, 3.0]]), torch.tensor([2.0]), 0.5)
        >>> float(stats["synthetic_sim"]), float(stats["synthetic_harder_than_positive"])
        (1.0, 0.5)
    """
    with torch.no_grad():
        logits = logits.detach().float()
        positive = positive_logits.detach().float().unsqueeze(1)
        if valid is None:
            return {
                "synthetic_sim": logits.mean() * temperature,
                "synthetic_harder_than_positive": (logits > positive).float().mean(),
            }
        n = valid.sum().clamp_min(1)
        return {
            "synthetic_sim": torch.where(valid, logits, 0.0).sum() / n * temperature,
            "synthetic_harder_than_positive": ((logits > positive) & valid).sum() / n,
        }


def hardest(similarities: Tensor, n_hard: int, valid: Tensor | None = None) -> Tensor:
    """(B, N) indices of each query's ``n_hard`` most similar valid negatives, ascending, chosen in fp32
    (similarities: (B, K); valid: optional (B, K) bool).

    Example:
        >>> hardest(torch.tensor([[0.1, 0.9, 0.5, 0.7]]), 2)
        tensor([[1, 3]])
    """
    sims = similarities.detach().float()
    if valid is not None:
        sims = sims.masked_fill(~valid, NEG_INF)
    return sims.topk(n_hard, dim=1, sorted=False).indices.sort(dim=1).values


def check_enough_negatives(n_hard: int, available: int, mode: str | None = None) -> None:
    """Refuse ``n_hard`` hardest negatives where some anchor has only ``available`` valid ones, naming
    ``n_hard`` (``mode``: the kind of negatives, for the message).

    Example:
        >>> try:
        ...     check_enough_negatives(6, 4, "queue")
        ... except StrategyArgumentError as error:
        ...     print(error)
        n_hard: 6 hardest negatives requested but only 4 are available (queue negatives)
    """
    if n_hard > available:
        where = f" ({mode} negatives)" if mode else ""
        raise StrategyArgumentError(
            "n_hard", f"{n_hard} hardest negatives requested but only {available} are available{where}"
        )


class MochiDraws(NamedTuple):
    """MoCHi's random numbers for a batch; positions index each query's N hardest negatives, as listed by
    :func:`hardest` (ascending negative index)."""

    first: Tensor  # (B, s) int64 position of n_a
    second: Tensor  # (B, s) int64 position of n_b, first < second
    alpha: Tensor  # (B, s) weight of n_a, ~ U(0, 1)
    pick: Tensor  # (B, s') int64 position of n_c, uniform
    beta: Tensor  # (B, s') weight of the query, ~ U(0, beta_max)


def check_mochi_arguments(n_hard: object, n_pair: object, n_query: object, beta_max: object) -> float:
    """Validate MoCHi's N, s, s' and beta_max (a StrategyArgumentError naming the argument); beta_max as a
    float.

    Example:
        >>> try:
        ...     check_mochi_arguments(4, 7, 1, 0.5)
        ... except StrategyArgumentError as error:
        ...     print(error)
        n_pair: 7 mixtures of distinct pairs need as many pairs among n_hard=4 (6 exist)
    """
    check_int("n_hard", n_hard, 1)
    check_int("n_pair", n_pair)
    check_int("n_query", n_query)
    if n_pair > n_hard * (n_hard - 1) // 2:  # type: ignore[operator]
        raise StrategyArgumentError(
            "n_pair",
            f"{n_pair} mixtures of distinct pairs need as many pairs among "
            f"n_hard={n_hard} ({n_hard * (n_hard - 1) // 2} exist)",  # type: ignore[operator]
        )
    return check_number("beta_max", beta_max, 0.0, 0.5, "(]")


def sample_distinct_pairs(
    batch: int,
    n: int,
    n_pairs: int,
    generator: torch.Generator | None = None,
    device: torch.device | None = None,
) -> tuple[Tensor, Tensor]:
    """For each of ``batch`` rows, ``n_pairs`` distinct unordered pairs (a, b), a < b, of range(n): a
    uniform n_pairs-subset of the n(n-1)/2 pairs (the first distinct ones of uniform draws with
    replacement; ranked random keys when most pairs are taken). Returns two (batch, n_pairs) int64.

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


def mochi_selection(
    similarities: Tensor,
    valid: Tensor | None,
    n_hard: int,
    n_pair: int,
    n_query: int,
    beta_max: float,
    generator: torch.Generator | None,
    dtype: torch.dtype,
) -> tuple[Tensor, MochiDraws]:
    """Each query's N hardest valid negatives (B, N) (:func:`hardest` of the (B, K) ``similarities``) and
    MoCHi's draws over them (:func:`mochi_draws`, on the similarities' device, alpha and beta in ``dtype``).

    Example:
        >>> hard, draws = mochi_selection(torch.tensor([[0.1, 0.9, 0.5, 0.7]]), None, 3, 2, 1, 0.5,
        ...                               torch.Generator().manual_seed(0), torch.float32)
        >>> hard, draws.first.shape, draws.beta.shape
        (tensor([[1, 2, 3]]), torch.Size([1, 2]), torch.Size([1, 1]))
    """
    hard = hardest(similarities, n_hard, valid)
    draws = mochi_draws(
        hard.shape[0], n_hard, n_pair, n_query, beta_max, generator, similarities.device, dtype
    )
    return hard, draws


def mochi_points(query: Tensor, negatives: Tensor, hard: Tensor, draws: MochiDraws) -> Tensor:
    """MoCHi's synthetic points (its Eq. 3 and 4) as vectors: (B, s + s', D), unit norm, detached, pair
    mixtures first (query: (B, D) unit, used detached; negatives: (K, D) unit; hard: (B, N) from
    :func:`hardest`)."""
    query, negatives = query.detach(), negatives.detach()
    n_a, n_b = negatives[hard.gather(1, draws.first)], negatives[hard.gather(1, draws.second)]  # (B, s, D)
    n_c = negatives[hard.gather(1, draws.pick)]  # (B, s', D)
    alpha, beta = draws.alpha.unsqueeze(2), draws.beta.unsqueeze(2)
    pair_mixtures = mix_normalize(n_a, n_b, alpha)  # h_k, Eq. 3
    query_mixtures = mix_normalize(query.unsqueeze(1), n_c, beta)  # h'_k, Eq. 4
    return torch.cat([pair_mixtures, query_mixtures.to(pair_mixtures.dtype)], dim=1)


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
        generator: optional torch.Generator (the same points the ``mochi`` strategy takes the logits of).
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
    check_mochi_arguments(n_hard, n_pair, n_query, beta_max)
    available = negatives.shape[0] if valid is None else int(valid.sum(dim=1).min()) if valid.numel() else 0
    check_enough_negatives(n_hard, available)
    if similarities is None:
        with torch.autocast(query.device.type, enabled=False):  # fp32: bf16 ties change the selection
            similarities = query.float() @ negatives.float().T
    hard, draws = mochi_selection(
        similarities, valid, n_hard, n_pair, n_query, beta_max, generator, query.dtype
    )
    return mochi_points(query, negatives, hard, draws)


__all__ = [
    "NEG_INF",
    "MochiDraws",
    "check_enough_negatives",
    "check_mochi_arguments",
    "hardest",
    "mix_normalize",
    "mixed_negative_logits",
    "mixture_logits",
    "mochi_draws",
    "mochi_points",
    "mochi_selection",
    "mochi_synthesize",
    "sample_distinct_pairs",
    "synthetic_stats",
]
