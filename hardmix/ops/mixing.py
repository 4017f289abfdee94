"""Feature-space mixing: the generic tensor primitives the strategies share.

A strategy file imports these and :mod:`hardmix.strategies.base`, never another strategy; this module
imports no strategy (nothing of hardmix but its errors).

- mixtures of unit vectors: :func:`mix_normalize` (``normalize(w a + (1 - w) b)``, the mixture both papers
  use), :func:`mixture_cosines` (``h . normalize(w a + (1 - w) b)`` from the inner products alone),
  :func:`mixed_negative_cosines` (MixCSE's positive-negative mixtures, masked), :func:`synthetic_stats`
  (what the diagnostics report of synthetic negatives);
- each anchor's hardest negatives: :func:`hardest`, :func:`check_enough_negatives`;
- distinct random pairs of n items: :func:`sample_distinct_pairs`.

A method's own selection, draws and points live in its strategy's file (MoCHi's in
:mod:`hardmix.strategies.mochi`), not here.

For unit a, b: ``||w a + (1 - w) b||^2 = w^2 + (1 - w)^2 + 2 w (1 - w) a.b``, so
``h . normalize(w a + (1 - w) b) = (w h.a + (1 - w) h.b) / sqrt(w^2 + (1 - w)^2 + 2 w (1 - w) a.b)``:
the cosine of a mixture needs h.a, h.b (cosines the loss has) and a.b, never the (B, N, D) mixtures.

Example:
    >>> a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    >>> mix_normalize(a, b, 0.5)
    tensor([0.7071, 0.7071])
    >>> mixture_cosines(a @ a, a @ b, a @ b, 0.5)  # a . normalize(a / 2 + b / 2)
    tensor(0.7071)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.utils.errors import StrategyArgumentError, check_int, check_number

#: The logit of an excluded column (a masked negative, a queue slot not filled): the one spelling of it
#: that the shared math, the strategies and the loss use.
NEG_INF = float("-inf")


def mix_normalize(a: Tensor, b: Tensor, weight_a: Tensor | float) -> Tensor:
    """``normalize(w a + (1 - w) b)`` along the last dimension (broadcasting): (..., D) unit mixtures."""
    return F.normalize(weight_a * a + (1.0 - weight_a) * b, dim=-1)


def mixture_cosines(anchor_pos: Tensor, anchor_neg: Tensor, pos_neg: Tensor, lam: Tensor | float) -> Tensor:
    """``h . normalize(lam p + (1 - lam) n)`` for unit h, p, n from ``h.p``, ``h.n`` and ``p.n`` (they
    broadcast; h.p and h.n may be scaled alike, and the result is scaled so).

    Example:
        >>> one, zero = torch.tensor(1.0), torch.tensor(0.0)
        >>> mixture_cosines(one, zero, zero, 0.5)  # h = p orthogonal to n: cos 45 degrees
        tensor(0.7071)
    """
    squared_norm = lam * lam + (1.0 - lam) ** 2 + 2.0 * lam * (1.0 - lam) * pos_neg
    return (lam * anchor_pos + (1.0 - lam) * anchor_neg) * squared_norm.clamp_min(1e-12).rsqrt()


def mixed_negative_cosines(
    anchor_pos: Tensor, anchor_neg: Tensor, pos_neg: Tensor, valid: Tensor, lam: Tensor | float
) -> Tensor:
    """(B, N) ``h_i . normalize(lam p_i + (1 - lam) n_j)``, -inf where j is not a valid negative of i
    (MixCSE's mixtures of each anchor's positive with its negatives).

    Args:
        anchor_pos: (B, 1) h_i . p_i.
        anchor_neg: (B, N) h_i . n_j (any value where not valid, -inf included).
        pos_neg: (B, N) p_i . n_j.
        valid: (B, N) bool, the valid negatives.
        lam: the positive's weight, a number or a (B, 1) tensor (one per anchor).

    Example:
        >>> valid = torch.tensor([[True, False]])
        >>> mixed_negative_cosines(torch.ones(1, 1), torch.zeros(1, 2), torch.zeros(1, 2), valid, 0.5)
        tensor([[0.7071,   -inf]])
    """
    anchor_neg = anchor_neg.masked_fill(~valid, 0.0)  # finite everywhere: no inf reaches a product
    return mixture_cosines(anchor_pos, anchor_neg, pos_neg.to(anchor_neg.dtype), lam).masked_fill(
        ~valid, NEG_INF
    )


def synthetic_stats(
    cosines: Tensor, positive_cosines: Tensor, valid: Tensor | None = None
) -> dict[str, Tensor]:
    """Mean cosine of the anchors to their synthetic negatives and the fraction of those more similar to
    the anchor than its positive (MixCSE's bound on lam, Sec. 4.3), detached.

    Args:
        cosines: (B, M) the anchors' cosines h . s to their synthetic negatives.
        positive_cosines: (B,) h . p.
        valid: optional (B, M) bool, the entries to count (None: all).

    Example:
        >>> stats = synthetic_stats(torch.tensor([[0.2, 0.6]]), torch.tensor([0.4]))
        >>> round(float(stats["synthetic_sim"]), 4), float(stats["synthetic_harder_than_positive"])
        (0.4, 0.5)
    """
    with torch.no_grad():
        cosines = cosines.detach().float()
        positive = positive_cosines.detach().float().unsqueeze(1)
        if valid is None:
            return {
                "synthetic_sim": cosines.mean(),
                "synthetic_harder_than_positive": (cosines > positive).float().mean(),
            }
        n = valid.sum().clamp_min(1)
        return {
            "synthetic_sim": torch.where(valid, cosines, 0.0).sum() / n,
            "synthetic_harder_than_positive": ((cosines > positive) & valid).sum() / n,
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


def check_draw_counts(n_hard: int, n_pair: int, n_query: int, beta_max: float) -> float:
    """The counts of draws among each query's N hardest negatives (MoCHi's mixtures, ``hard_copies``'
    copies): N >= 1, s and s' >= 0, s distinct pairs among N, and the query's weight bound in (0, 0.5];
    returns the bound as a float, else a StrategyArgumentError naming the argument.

    >>> check_draw_counts(4, 6, 2, 0.5)
    0.5
    >>> check_draw_counts(4, 7, 2, 0.5)
    Traceback (most recent call last):
    ...
    hardmix.utils.errors.StrategyArgumentError: n_pair: 7 mixtures of distinct pairs need as many pairs ...
    """
    check_int("n_hard", n_hard, 1)
    check_int("n_pair", n_pair)
    check_int("n_query", n_query)
    pairs = n_hard * (n_hard - 1) // 2
    if n_pair > pairs:
        raise StrategyArgumentError("n_pair", f"{n_pair} mixtures of distinct pairs need as many pairs among "
                                              f"n_hard={n_hard} ({pairs} exist)")
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


__all__ = [
    "NEG_INF",
    "check_enough_negatives",
    "hardest",
    "mix_normalize",
    "mixed_negative_cosines",
    "mixture_cosines",
    "sample_distinct_pairs",
    "synthetic_stats",
]
