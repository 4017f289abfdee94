"""Feature-space mixing primitives: MixCSE's positive-negative mixtures in closed form and MoCHi's
synthetic hard negatives.

All functions take unit vectors and never build a (B, N, D) tensor of MixCSE mixtures: for unit a, b,

    ||lam a + (1 - lam) b||^2 = lam^2 + (1 - lam)^2 + 2 lam (1 - lam) a.b,

so ``h . normalize(lam a + (1 - lam) b) = (lam h.a + (1 - lam) h.b) / ||lam a + (1 - lam) b||`` follows
from similarity matrices that the loss already has (plus the a.b matrix).
"""

from __future__ import annotations

import torch
from torch import Tensor


def mixture_norm(cos_ab: Tensor, lam: float) -> Tensor:
    """``||lam a + (1 - lam) b||`` for unit a, b from their cosine ``a.b`` (any shape).

    The value is clamped away from 0 (a = -b with lam = 0.5 is the only zero).
    """
    sq = lam * lam + (1.0 - lam) ** 2 + 2.0 * lam * (1.0 - lam) * cos_ab
    return sq.clamp_min(1e-12).sqrt()


def mixed_logits(
    anchor_pos_logits: Tensor, anchor_neg_logits: Tensor, pos_neg_cos: Tensor, lam: float
) -> Tensor:
    """Logits of anchor i against m_ij = normalize(lam p_i + (1 - lam) n_j), in closed form.

    MixCSE (Zhang et al. 2022), Eq. 4: h_i . m_ij / tau with m_ij = (lam h'_i + (1 - lam) h'_j) /
    ||lam h'_i + (1 - lam) h'_j||.

    Args:
        anchor_pos_logits: (B,) h_i . p_i / tau.
        anchor_neg_logits: (B, N) h_i . n_j / tau.
        pos_neg_cos: (B, N) p_i . n_j (cosines, no temperature).
        lam: weight of the positive, in (0, 1).

    Returns:
        (B, N) logits h_i . m_ij / tau. Gradients follow the inputs: pass stop-gradient views of the
        logits and a detached ``pos_neg_cos`` for SG(m_ij).
    """
    numerator = torch.add(anchor_neg_logits, anchor_pos_logits.unsqueeze(1), alpha=lam / (1.0 - lam))
    return numerator.mul_(1.0 - lam).div_(mixture_norm(pos_neg_cos, lam))


def mix_normalize(a: Tensor, b: Tensor, weight_a: Tensor | float) -> Tensor:
    """Explicit ``normalize(w a + (1 - w) b)`` along the last dimension (broadcasting)."""
    mixed = weight_a * a + (1.0 - weight_a) * b
    return torch.nn.functional.normalize(mixed, dim=-1)


def hardest_negatives(similarities: Tensor, n_hard: int, valid: Tensor | None = None) -> Tensor:
    """Indices (B, n_hard) of the ``n_hard`` most similar valid negatives of each row, chosen in fp32.

    Args:
        similarities: (B, K) anchor-negative similarities (any positive scale; under autocast pass the
            fp32 values: bf16 ties change the selection).
        n_hard: N, how many to keep per row.
        valid: optional (B, K) bool mask of the allowed negatives.
    """
    sims = similarities.detach().float()
    if valid is not None:
        sims = sims.masked_fill(~valid, float("-inf"))
    return sims.topk(n_hard, dim=1, sorted=False).indices


def sample_distinct_pairs(
    batch: int,
    n: int,
    n_pairs: int,
    generator: torch.Generator | None = None,
    device: torch.device | None = None,
) -> tuple[Tensor, Tensor]:
    """For each of ``batch`` rows, ``n_pairs`` distinct unordered pairs (a, b), a != b, of range(n).

    Uniform over the n(n-1)/2 pairs, without replacement within a row. Small pair sets are drawn exactly
    by ranking random keys; large ones by drawing with replacement and re-drawing duplicates (rounds
    over the whole batch at once, no loop over rows).

    Returns:
        Two (batch, n_pairs) int64 tensors ``first < second``.
    """
    total = n * (n - 1) // 2
    if n_pairs > total:
        raise ValueError(f"n_pair: {n_pairs} distinct pairs requested from {n} items ({total} exist)")
    if n_pairs == 0:
        empty = torch.empty(batch, 0, dtype=torch.long, device=device)
        return empty, empty.clone()
    if total <= 4 * n_pairs or batch * total <= 1 << 20:
        rows, cols = torch.triu_indices(n, n, offset=1, device=device)
        keys = torch.rand(batch, total, generator=generator, device=device)
        pick = keys.topk(n_pairs, dim=1, sorted=False).indices
        return rows[pick], cols[pick]
    a = torch.randint(n, (batch, n_pairs), generator=generator, device=device)
    b = torch.randint(n - 1, (batch, n_pairs), generator=generator, device=device)
    b = b + (b >= a).long()
    first, second = torch.minimum(a, b), torch.maximum(a, b)
    for _ in range(100):
        code = first * n + second
        sorted_code, order = code.sort(dim=1)
        dup_sorted = torch.zeros_like(sorted_code, dtype=torch.bool)
        dup_sorted[:, 1:] = sorted_code[:, 1:] == sorted_code[:, :-1]
        if not bool(dup_sorted.any()):
            return first, second
        dup = torch.zeros_like(dup_sorted).scatter_(1, order, dup_sorted)
        k = int(dup.sum())
        a = torch.randint(n, (k,), generator=generator, device=device)
        b = torch.randint(n - 1, (k,), generator=generator, device=device)
        b = b + (b >= a).long()
        first[dup], second[dup] = torch.minimum(a, b), torch.maximum(a, b)
    raise RuntimeError("sample_distinct_pairs: could not draw distinct pairs")  # pragma: no cover


def _check_mochi_args(n_hard: int, n_pair: int, n_query: int, beta_max: float, available: int) -> None:
    if not isinstance(n_hard, int) or n_hard < 1:
        raise ValueError(f"n_hard: must be a positive integer, got {n_hard!r}")
    if n_hard > available:
        raise ValueError(f"n_hard: {n_hard} hardest negatives requested but only {available} are available")
    if not isinstance(n_pair, int) or n_pair < 0:
        raise ValueError(f"n_pair: must be a non-negative integer, got {n_pair!r}")
    if n_pair > n_hard * (n_hard - 1) // 2:
        raise ValueError(
            f"n_pair: {n_pair} mixtures of distinct pairs need as many pairs among n_hard={n_hard} "
            f"({n_hard * (n_hard - 1) // 2} exist)"
        )
    if not isinstance(n_query, int) or n_query < 0:
        raise ValueError(f"n_query: must be a non-negative integer, got {n_query!r}")
    if not 0.0 < beta_max <= 0.5:
        raise ValueError(
            f"beta_max: must be in (0, 0.5] (the query weighs less than the negative), got {beta_max}"
        )


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
    """MoCHi's synthetic hard negatives (Kalantidis et al., NeurIPS 2020, Sec. 4.1 and 4.2).

    For each query q_b: take its N = ``n_hard`` most similar negatives (fp32 selection); s = ``n_pair``
    points h = normalize(alpha n_a + (1 - alpha) n_b) over distinct pairs a != b of them, alpha ~ U(0, 1)
    (Eq. 3); s' = ``n_query`` points h' = normalize(beta q + (1 - beta) n_c), c uniform among the N,
    beta ~ U(0, beta_max) with beta_max <= 0.5 (Eq. 4). All points are L2-normalized and detached.

    Args:
        query: (B, D) unit-norm queries.
        negatives: (K, D) unit-norm negatives (the queue).
        n_hard: N.
        n_pair: s.
        n_query: s'.
        beta_max: upper bound of the query weight, in (0, 0.5].
        generator: optional torch.Generator (same seed, same output).
        valid: optional (B, K) bool mask of the negatives each query may use (e.g. not its own sample).
        similarities: optional (B, K) precomputed query-negative similarities (any positive scale).

    Returns:
        (B, n_pair + n_query, D) unit-norm synthetic negatives, pair mixtures first.

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
    available = negatives.shape[0]
    if valid is not None:
        available = int(valid.sum(dim=1).min()) if valid.numel() else 0
    _check_mochi_args(n_hard, n_pair, n_query, beta_max, available)
    query = query.detach()
    negatives = negatives.detach()
    if similarities is None:
        # fp32 even under autocast (which would run this product in bf16/fp16 and tie near-equal negatives).
        with torch.autocast(query.device.type, enabled=False):
            similarities = query.float() @ negatives.float().T
    hard = hardest_negatives(similarities, n_hard, valid)  # (B, N) indices into negatives
    return _synthesize_from_hard(query, negatives, hard, n_pair, n_query, beta_max, generator)


def _synthesize_from_hard(
    query: Tensor,
    negatives: Tensor,
    hard: Tensor,
    n_pair: int,
    n_query: int,
    beta_max: float,
    generator: torch.Generator | None,
) -> Tensor:
    """Build the synthetic points from the hard-negative indices ``hard`` (B, N); see mochi_synthesize."""
    batch, n_hard = hard.shape
    device = query.device
    parts = []
    if n_pair > 0:
        first, second = sample_distinct_pairs(batch, n_hard, n_pair, generator, device)
        alpha = torch.rand(batch, n_pair, 1, generator=generator, device=device, dtype=query.dtype)
        n_a = negatives[hard.gather(1, first)]  # (B, s, D)
        n_b = negatives[hard.gather(1, second)]
        parts.append(mix_normalize(n_a, n_b, alpha))
    if n_query > 0:
        pick = torch.randint(n_hard, (batch, n_query), generator=generator, device=device)
        beta = beta_max * torch.rand(batch, n_query, 1, generator=generator, device=device, dtype=query.dtype)
        n_c = negatives[hard.gather(1, pick)]  # (B, s', D)
        parts.append(mix_normalize(query.unsqueeze(1), n_c, beta))
    if not parts:
        return query.new_zeros(batch, 0, query.shape[1])
    return torch.cat(parts, dim=1)
