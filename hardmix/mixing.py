"""Feature-space mixing primitives: MixCSE's positive-negative mixtures in closed form and MoCHi's
synthetic hard negatives.

All functions take unit vectors and never build a (B, N, D) tensor of MixCSE mixtures: for unit a, b,

    ||lam a + (1 - lam) b||^2 = lam^2 + (1 - lam)^2 + 2 lam (1 - lam) a.b,

so ``h . normalize(lam a + (1 - lam) b) = (lam h.a + (1 - lam) h.b) / ||lam a + (1 - lam) b||`` follows
from similarity matrices that the loss already has (plus the a.b matrix).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.errors import StrategyArgumentError
from hardmix.utils.counting import count_true
from hardmix.utils.faiss_backend import indexed_inner_products
from hardmix.utils.row_topk import row_topk_indices

if TYPE_CHECKING:
    from hardmix.losses.gathered_logits import GatheredLogits


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


def scaled_inverse_mixture_norms(positives: Tensor, negatives: Tensor, lam: float) -> Tensor:
    """(B, N) ``(1 - lam) / ||lam p_i + (1 - lam) n_j||`` for unit rows p_i (B, D) and n_j (N, D).

    One ``addmm``: ``||.||^2 / (1 - lam)^2 = c0 + c1 p_i.n_j`` with the constants applied by the product
    itself, then a clamp and an inverse square root in place. No gradient (call under no_grad or with
    detached inputs). ``mixed_logits`` equals ``(anchor_neg + lam / (1 - lam) anchor_pos) * this``.
    """
    positives, negatives = positives.detach(), negatives.detach() if negatives is not positives else None
    k = 1.0 / (1.0 - lam) ** 2
    c0 = positives.new_full((), (lam * lam + (1.0 - lam) ** 2) * k)
    alpha = 2.0 * lam * (1.0 - lam) * k
    if negatives is None:  # in-batch, one process: a Gram matrix, symmetric
        sq = _symmetric_addmm(c0, positives, alpha)
    else:
        sq = torch.addmm(c0, positives, negatives.T, alpha=alpha)
    if (2.0 * lam - 1.0) ** 2 < 1e-3:
        # ||.||^2 >= (2 lam - 1)^2 (at a = -b): only near lam = 0.5 can rounding reach 0.
        sq.clamp_min_(1e-12 * k)
    return sq.rsqrt_()


def _autocast_free(x: Tensor) -> bool:
    from hardmix.losses.pairwise import _autocast_dtype  # here: hardmix.losses imports this module

    return _autocast_dtype(x.device.type) is None


def _symmetric_addmm(c: Tensor, x: Tensor, alpha: float, min_rows: int = 128, max_blocks: int = 16) -> Tensor:
    """``c + alpha * x @ x.T`` computing only the upper block triangle and mirroring it.

    With k row blocks the products cover (k + 1) / 2k of the matrix (0.53 for k = 16); the mirrored
    blocks are copied. Falls back to one addmm for small matrices, on GPUs (where the product is cheap
    and the copies are not), under autocast (which does not take ``out=``) and for other dtypes.
    """
    n = x.shape[0]
    blocks = min(max_blocks, n // min_rows)
    plain = x.dtype not in (torch.float32, torch.float64) or not _autocast_free(x)
    if plain or blocks < 2 or x.device.type != "cpu":
        return torch.addmm(c, x, x.T, alpha=alpha)
    out = torch.empty(n, n, dtype=x.dtype, device=x.device)
    bounds = [round(i * n / blocks) for i in range(blocks + 1)]
    for r0, r1 in zip(bounds[:-1], bounds[1:]):
        torch.addmm(c, x[r0:r1], x[r0:].T, alpha=alpha, out=out[r0:r1, r0:])
    # The mirror: each block row's right part, transposed, into the block column below its diagonal
    # block. Copied through two contiguous scratch matrices, so that the transposition itself is
    # torch's blocked transpose copy (its case of a contiguous destination and a fully transposed
    # source): one thread, medians, 0.80 against 1.65 ms for copying into the strided column block
    # directly at B = 1024 (8 blocks), 18.7 against 33.4 ms at B = 4096 (16 blocks).
    rows_max = max(r1 - r0 for r0, r1 in zip(bounds[:-1], bounds[1:]))
    scratch = out.new_empty(2, rows_max * (n - bounds[1]))
    for r0, r1 in zip(bounds[:-1], bounds[1:]):
        if r1 == n:
            break
        rows, cols = r1 - r0, n - r1
        right = scratch[0, : rows * cols].view(rows, cols).copy_(out[r0:r1, r1:])
        below = scratch[1, : rows * cols].view(cols, rows).copy_(right.T)
        out[r1:, r0:r1].copy_(below)
    return out


def mix_normalize(a: Tensor, b: Tensor, weight_a: Tensor | float) -> Tensor:
    """Explicit ``normalize(w a + (1 - w) b)`` along the last dimension (broadcasting)."""
    mixed = weight_a * a + (1.0 - weight_a) * b
    return torch.nn.functional.normalize(mixed, dim=-1)


def hardest_negatives(similarities: Tensor, n_hard: int, valid: Tensor | None = None) -> Tensor:
    """Indices (B, n_hard) of the ``n_hard`` most similar valid negatives of each row, chosen in fp32.

    Exact: the same set as ``topk`` (ties at the N-th value broken arbitrarily; no particular order
    within a row), through :func:`hardmix.utils.row_topk.row_topk_indices` (NumPy's partition on CPU,
    ``topk`` elsewhere).

    Args:
        similarities: (B, K) anchor-negative similarities (any positive scale; under autocast pass the
            fp32 values: bf16 ties change the selection).
        n_hard: N, how many to keep per row.
        valid: optional (B, K) bool mask of the allowed negatives.

    Example:
        >>> sims = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.8, 0.2, 0.6, 0.4]])
        >>> hardest_negatives(sims, 2).sort(dim=1).values
        tensor([[1, 3],
                [0, 2]])
    """
    sims = similarities.detach().float()
    if valid is not None:
        sims = sims.masked_fill(~valid, float("-inf"))
    return row_topk_indices(sims, n_hard)


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
    first, second = _draw_distinct_pairs(batch, n, n_pairs, generator, device)
    return first.long(), second.long()


def _draw_distinct_pairs(
    batch: int, n: int, n_pairs: int, generator: torch.Generator | None, device: torch.device | None
) -> tuple[Tensor, Tensor]:
    """:func:`sample_distinct_pairs`, in int32 where row * n^2 + code fits (else int64)."""
    total = n * (n - 1) // 2
    if n_pairs > total:
        raise StrategyArgumentError(
            "n_pair", f"{n_pairs} distinct pairs requested from {n} items ({total} exist)"
        )
    if n_pairs == 0:
        empty = torch.empty(batch, 0, dtype=torch.long, device=device)
        return empty, empty.clone()
    if total <= 4 * n_pairs or batch * total <= 1 << 20:
        rows, cols = torch.triu_indices(n, n, offset=1, device=device)
        keys = torch.rand(batch, total, generator=generator, device=device)
        pick = keys.topk(n_pairs, dim=1, sorted=False).indices
        return rows[pick], cols[pick]
    # Integers in int32 where the keys below fit (row * n^2 + code < 2^31): int64 arithmetic is slower
    # on CPU (adding the bool mask to int64 draws: 2.9 against 0.1 ms at MoCHi's 256 x 1024 pairs).
    stride = n * n  # codes first * n + second are < n^2: rows never overlap
    key_dtype = torch.int32 if batch * stride < 2**31 else torch.long
    a = torch.randint(n, (batch, n_pairs), generator=generator, device=device, dtype=key_dtype)
    b = torch.randint(n - 1, (batch, n_pairs), generator=generator, device=device, dtype=key_dtype)
    b.add_(b >= a)  # uniform over the others
    first, second = torch.minimum(a, b), torch.maximum(a, b)
    # The repeated pairs (all but the first occurrence of each) are re-drawn, each new pair checked
    # against its row's pairs (binary search in the sorted keys row * n^2 + code, all rows as one sorted
    # array) and against the pairs accepted so far; rejected ones are drawn again. Like drawing
    # sequentially until a new pair comes, the result is a uniform s-subset.
    rows_offset = torch.arange(batch, device=device, dtype=key_dtype).unsqueeze(1) * stride
    keys = torch.add(second, first, alpha=n).add_(rows_offset)
    taken, rows, cols = _repeated_keys(keys)
    accepted = torch.empty(0, dtype=key_dtype, device=device)  # row * n^2 + code of accepted re-draws
    for _ in range(100):
        k = rows.numel()
        if k == 0:
            return first, second
        a = torch.randint(n, (k,), generator=generator, device=device, dtype=key_dtype)
        b = torch.randint(n - 1, (k,), generator=generator, device=device, dtype=key_dtype)
        b.add_(b >= a)
        new_first, new_second = torch.minimum(a, b), torch.maximum(a, b)
        key = (rows * stride + new_first.long() * n + new_second).to(key_dtype)
        at = torch.searchsorted(taken, key).clamp_max(taken.numel() - 1)
        clash = taken[at] == key
        # Against the accepted re-draws and the earlier candidates of this round (first one wins).
        both = torch.cat([accepted, key])
        order2 = torch.sort(both, stable=True).indices
        sorted_both = both[order2]
        repeat = torch.zeros_like(sorted_both, dtype=torch.bool)
        repeat[1:] = sorted_both[1:] == sorted_both[:-1]
        clash |= torch.zeros_like(repeat).scatter_(0, order2, repeat)[accepted.numel() :]
        ok = ~clash
        first[rows[ok], cols[ok]] = new_first[ok]
        second[rows[ok], cols[ok]] = new_second[ok]
        accepted = torch.cat([accepted, key[ok]])
        rows, cols = rows[clash], cols[clash]
    raise RuntimeError("sample_distinct_pairs: could not draw distinct pairs")  # pragma: no cover


def _repeated_keys(keys: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The sorted keys (flat) and the (row, col) positions of every repeat in ``keys`` (B, s): all but
    the first (lowest col) occurrence of each value in a row (the values of different rows differ).

    On CPU NumPy sorts the values alone (``np.sort``; 1.5 against 2.9 ms for torch's stable sort with its
    indices at MoCHi's 256 x 1024 int32 keys) and, when they are few, the repeated values are found in
    their rows by a comparison; otherwise one stable sort of the flat keys gives their positions.
    """
    batch, s = keys.shape
    if keys.device.type == "cpu":
        array = keys.numpy()
        taken = np.sort(array, axis=None)
        values = np.unique(taken[1:][taken[1:] == taken[:-1]])  # the repeated values, each once
        if values.size <= 8 * batch:  # few (MoCHi: about one per row): search each in its row
            rows_v = np.searchsorted(taken, values) // s  # a value's row: the rows are sorted blocks of s
            where = np.flatnonzero(array[rows_v] == values[:, None])  # every occurrence, value-major
            which, cols = np.divmod(where, s)
            later = np.zeros(where.size, dtype=bool)  # the first occurrence of each value stays
            later[1:] = which[1:] == which[:-1]
            which, cols = which[later], cols[later]
            rows = rows_v[which]
            order = np.lexsort((cols, rows))  # row-major, as the sort path's nonzero gives them
            rows, cols = torch.from_numpy(rows[order].astype(np.int64)), torch.from_numpy(cols[order])
            return torch.from_numpy(taken), rows, cols.long()
    return _repeated_keys_by_sort(keys)


def _repeated_keys_by_sort(keys: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_repeated_keys` through one stable sort of the flat keys (any device)."""
    batch, s = keys.shape
    taken, order = keys.view(-1).sort(stable=True)
    repeated = torch.zeros_like(taken, dtype=torch.bool)
    repeated[1:] = taken[1:] == taken[:-1]
    position = torch.zeros_like(repeated).scatter_(0, order, repeated).view(batch, s)
    rows, cols = position.nonzero(as_tuple=True)
    return taken, rows, cols


def _check_mochi_args(n_hard: int, n_pair: int, n_query: int, beta_max: float, available: int) -> None:
    if not isinstance(n_hard, int) or n_hard < 1:
        raise StrategyArgumentError("n_hard", f"must be a positive integer, got {n_hard!r}")
    if n_hard > available:
        raise StrategyArgumentError(
            "n_hard", f"{n_hard} hardest negatives requested but only {available} are available"
        )
    if not isinstance(n_pair, int) or n_pair < 0:
        raise StrategyArgumentError("n_pair", f"must be a non-negative integer, got {n_pair!r}")
    if n_pair > n_hard * (n_hard - 1) // 2:
        raise StrategyArgumentError(
            "n_pair",
            f"{n_pair} mixtures of distinct pairs need as many pairs among n_hard={n_hard} "
            f"({n_hard * (n_hard - 1) // 2} exist)",
        )
    if not isinstance(n_query, int) or n_query < 0:
        raise StrategyArgumentError("n_query", f"must be a non-negative integer, got {n_query!r}")
    if not 0.0 < beta_max <= 0.5:
        raise StrategyArgumentError(
            "beta_max", f"must be in (0, 0.5] (the query weighs less than the negative), got {beta_max}"
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
        available = int(count_true(valid, dim=1).min()) if valid.numel() else 0
    _check_mochi_args(n_hard, n_pair, n_query, beta_max, available)
    query = query.detach()
    negatives = negatives.detach()
    if similarities is None:
        # fp32 even under autocast (which would run this product in bf16/fp16 and tie near-equal negatives).
        with torch.autocast(query.device.type, enabled=False):
            similarities = query.float() @ negatives.float().T
    hard = hardest_negatives(similarities, n_hard, valid)  # (B, N) indices into negatives
    return _synthesize_from_hard(query, negatives, hard, n_pair, n_query, beta_max, generator)


def _mochi_draws(
    batch: int,
    n_hard: int,
    n_pair: int,
    n_query: int,
    beta_max: float,
    generator: torch.Generator | None,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """MoCHi's random draws, in a fixed order: pairs (B, s) x 2, alpha (B, s), picks (B, s'), beta (B, s').

    Positions index a query's N hardest negatives (int32 or int64). Shared by the explicit synthesis and
    the closed-form logits, so that both use the same numbers for the same generator state.
    """
    if n_pair > 0:
        first, second = _draw_distinct_pairs(batch, n_hard, n_pair, generator, device)
        alpha = torch.rand(batch, n_pair, generator=generator, device=device, dtype=dtype)
    else:
        first = second = torch.empty(batch, 0, dtype=torch.long, device=device)
        alpha = torch.empty(batch, 0, device=device, dtype=dtype)
    if n_query > 0:
        pick = torch.randint(n_hard, (batch, n_query), generator=generator, device=device)
        beta = beta_max * torch.rand(batch, n_query, generator=generator, device=device, dtype=dtype)
    else:
        pick = torch.empty(batch, 0, dtype=torch.long, device=device)
        beta = torch.empty(batch, 0, device=device, dtype=dtype)
    return first, second, alpha, pick, beta


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
    first, second, alpha, pick, beta = _mochi_draws(
        batch, n_hard, n_pair, n_query, beta_max, generator, query.device, query.dtype
    )
    parts = []
    if n_pair > 0:
        n_a = negatives[hard.gather(1, first.long())]  # (B, s, D)
        n_b = negatives[hard.gather(1, second.long())]
        parts.append(mix_normalize(n_a, n_b, alpha.unsqueeze(2)))
    if n_query > 0:
        n_c = negatives[hard.gather(1, pick.long())]  # (B, s', D)
        parts.append(mix_normalize(query.unsqueeze(1), n_c, beta.unsqueeze(2)))
    if not parts:
        return query.new_zeros(batch, 0, query.shape[1])
    return torch.cat(parts, dim=1)


def _inverse_mixture_norm(cos_ab: Tensor, weight: Tensor) -> Tensor:
    """``1 / ||w a + (1 - w) b||`` for unit a, b from their cosine (elementwise weights w), in place on a
    new tensor; clamped as :func:`mixture_norm`."""
    w = weight
    sq = (w * w).add_((1.0 - w).square_()).addcmul_(w * (1.0 - w), cos_ab, value=2.0)
    return sq.clamp_min_(1e-12).rsqrt_()


def _pair_inverse_norms(
    negatives: Tensor, first: Tensor, second: Tensor, alpha: Tensor, chunk_elements: int | None = None
) -> Tensor:
    """(B, s) ``1 / ||alpha n_a + (1 - alpha) n_b||`` for unit rows ``a = first``, ``b = second`` of
    ``negatives`` (K, D), in fp32 (at least).

    With faiss installed (fp32 on CPU), from the inner products n_a . n_b in one pass
    (:func:`hardmix.utils.faiss_backend.indexed_inner_products`) and ||w a + (1 - w) b||^2 =
    w^2 + (1 - w)^2 + 2 w (1 - w) a.b: at MoCHi's shape (B = 256, s = 1024, D = 128, K = 16384; one
    thread of a 2-core EPYC, medians of 21) 12.4 against 36.5 ms for the torch path. The torch path makes
    each mixture one weighted bag of two rows (``embedding_bag`` with per-sample weights: the rows are read
    once and only the (chunk, D) mixtures are written), then takes its norm; in chunks of about
    ``chunk_elements`` values (default: 2^18 on CPU, so that each chunk stays in cache; 2^24 elsewhere), so
    the (B, s, D) mixtures never exist at once.
    """
    batch, s = first.shape
    dim = negatives.shape[1]
    dtype = torch.promote_types(negatives.dtype, torch.float32)
    dots = indexed_inner_products(negatives, first, second)
    if dots is not None:
        return _inverse_mixture_norm(dots.view(batch, s), alpha.to(dtype))
    if chunk_elements is None:
        chunk_elements = 1 << 18 if negatives.device.type == "cpu" else 1 << 24
    negatives = negatives.to(dtype)
    index = torch.stack([first.reshape(-1), second.reshape(-1)], dim=1)  # (B s, 2)
    weight = alpha.reshape(-1, 1).to(dtype)
    weight = torch.cat([weight, 1.0 - weight], dim=1)  # (B s, 2)
    step = max(1, chunk_elements // max(1, dim))
    parts = []
    for r0 in range(0, batch * s, step):
        bag_weights = weight[r0 : r0 + step]
        mixed = F.embedding_bag(index[r0 : r0 + step], negatives, mode="sum", per_sample_weights=bag_weights)
        parts.append(torch.linalg.vector_norm(mixed, dim=1))
    if not parts:
        return torch.empty(batch, s, dtype=dtype, device=negatives.device)
    return torch.cat(parts).view(batch, s).clamp_min_(1e-6).reciprocal_()


def mochi_logits(
    anchor_logits: Tensor,
    anchors: Tensor,
    negatives: Tensor,
    hard: Tensor,
    draws: tuple[Tensor, Tensor, Tensor, Tensor, Tensor],
    anchor_similarities: Tensor,
    temperature: float,
    to_cosine: float = 1.0,
) -> GatheredLogits:
    """MoCHi's synthetic logits ``q . SG(h) / tau`` in closed form, without building the points.

    For unit q and unit negatives, with h = normalize(alpha n_a + (1 - alpha) n_b) and
    h' = normalize(beta SG(q) + (1 - beta) n_c):

        q . h  = (alpha q.n_a + (1 - alpha) q.n_b) / ||alpha n_a + (1 - alpha) n_b||
        q . h' = (beta q.SG(q) + (1 - beta) q.n_c) / ||beta q + (1 - beta) n_c||,
        ||w a + (1 - w) b||^2 = w^2 + (1 - w)^2 + 2 w (1 - w) a.b.

    The norms are constants, so each logit is a weighted sum of entries of ``anchor_logits`` (their
    gradient reaches q only, as through SG(h)) plus, for h', the direct term beta q.SG(q) / tau / norm:
    a :class:`hardmix.losses.GatheredLogits` on the support ``hard`` (pair columns gather [n_a, n_b],
    query columns [n_c, n_c] with weights [(1 - beta) / norm, 0]). Only ||alpha n_a + (1 - alpha) n_b||
    needs the vectors (one inner product per pair, :func:`_pair_inverse_norms`). Equal to
    ``bmm(synthesize(...), q) / tau`` up to rounding, with the same draws.

    Args:
        anchor_logits: (B, K) q . n / tau with gradient to the anchors only.
        anchors: (B, D) unit queries (with gradient).
        negatives: (K, D) unit negatives.
        hard: (B, N) indices of each query's hardest negatives.
        draws: from :func:`_mochi_draws`.
        anchor_similarities: (B, K) fp32 similarities q . n (no gradient), for the query mixtures' norms.
        temperature: tau.
        to_cosine: factor turning ``anchor_similarities`` into cosines (tau when they are logits).

    Returns:
        (B, s + s') gathered logits of ``anchor_logits``, pair mixtures first.
    """
    from hardmix.losses.gathered_logits import GatheredLogits  # here: hardmix.losses imports this module

    first, second, alpha, pick, beta = draws
    batch, s, s_q = hard.shape[0], first.shape[1], pick.shape[1]
    with torch.no_grad():
        # Term j of every synthetic point, as positions among the hard negatives: j = 0 [a | c],
        # j = 1 [b | c] (weight 0); the logits gather them through ``support=hard``.
        positions = torch.empty(batch, 2, s + s_q, dtype=torch.long, device=hard.device)
        positions[:, 0, :s], positions[:, 1, :s] = first, second
        positions[:, :, s:] = pick.unsqueeze(1)
        dtype = torch.promote_types(negatives.dtype, anchor_similarities.dtype)
        dtype = torch.promote_types(dtype, torch.float32)
        weight = torch.empty(batch, 2, s + s_q, dtype=dtype, device=hard.device)
        if s > 0:  # rows of the negatives n_a, n_b: (B, s) each
            rows_a, rows_b = hard.gather(1, positions[:, 0, :s]), hard.gather(1, positions[:, 1, :s])
            inv = _pair_inverse_norms(negatives.detach(), rows_a, rows_b, alpha)
            a = alpha.to(inv.dtype)
            torch.mul(a, inv, out=weight[:, 0, :s])
            torch.mul(1.0 - a, inv, out=weight[:, 1, :s])
        if s_q > 0:
            cos_qc = anchor_similarities.gather(1, hard.gather(1, positions[:, 0, s:]))
            cos_qc = cos_qc.to(torch.promote_types(cos_qc.dtype, torch.float32)).mul_(to_cosine)
            b = beta.to(cos_qc.dtype)
            inv_q = _inverse_mixture_norm(cos_qc, b)
            torch.mul(1.0 - b, inv_q, out=weight[:, 0, s:])
            weight[:, 1, s:] = 0.0
    direct = None
    if s_q > 0:
        self_logit = (anchors * anchors.detach()).sum(dim=1, keepdim=True) / temperature  # q . SG(q) / tau
        query_part = self_logit.to(anchor_logits.dtype) * (b * inv_q).to(anchor_logits.dtype)
        direct = torch.cat([query_part.new_zeros(batch, s), query_part], dim=1) if s > 0 else query_part
    return GatheredLogits(anchor_logits, positions, weight, direct, support=hard)
