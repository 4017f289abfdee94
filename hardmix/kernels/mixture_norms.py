"""The norms of two-point mixtures in closed form, from inner products the loss already has.

For unit a, b, ``||w a + (1 - w) b||^2 = w^2 + (1 - w)^2 + 2 w (1 - w) a.b``, so

    h . normalize(w a + (1 - w) b) = (w h.a + (1 - w) h.b) / ||w a + (1 - w) b||

follows from similarity matrices, without building a (B, N, D) tensor of mixtures. MixCSE's mixed logits
(Zhang et al. 2022, Eq. 4) and MoCHi's synthetic logits (Kalantidis et al. 2020, Eq. 3 and 4) are of this
kind; the strategies' plain implementations build the mixtures instead, and the tests check that both
agree.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.kernels.autocast import autocast_free
from hardmix.kernels.faiss_inner_products import indexed_inner_products


def mixture_norm(cos_ab: Tensor, lam: float) -> Tensor:
    """``||lam a + (1 - lam) b||`` for unit a, b from their cosine ``a.b`` (any shape).

    The value is clamped away from 0 (a = -b with lam = 0.5 is the only zero).

    Example:
        >>> mixture_norm(torch.tensor([1.0, 0.0]), 0.5)  # a = b: norm 1; a orthogonal to b: sqrt(1/2)
        tensor([1.0000, 0.7071])
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

    Example:
        >>> h, p, n = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
        >>> mixed_logits((h * p).sum(1), h @ n.T, p @ n.T, lam=0.5)  # h . normalize(p + n) = sqrt(1/2)
        tensor([[0.7071]])
    """
    numerator = torch.add(anchor_neg_logits, anchor_pos_logits.unsqueeze(1), alpha=lam / (1.0 - lam))
    return numerator.mul_(1.0 - lam).div_(mixture_norm(pos_neg_cos, lam))


def scaled_inverse_mixture_norms(positives: Tensor, negatives: Tensor, lam: float) -> Tensor:
    """(B, N) ``(1 - lam) / ||lam p_i + (1 - lam) n_j||`` for unit rows p_i (B, D) and n_j (N, D).

    One ``addmm``: ``||.||^2 / (1 - lam)^2 = c0 + c1 p_i.n_j`` with the constants applied by the product
    itself, then a clamp and an inverse square root in place. No gradient (call under no_grad or with
    detached inputs). ``mixed_logits`` equals ``(anchor_neg + lam / (1 - lam) anchor_pos) * this``.

    Example:
        >>> p, n = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0], [1.0, 0.0]])
        >>> scaled_inverse_mixture_norms(p, n, lam=0.5)  # 0.5 / sqrt(1/2), 0.5 / 1
        tensor([[0.7071, 0.5000]])
    """
    positives, negatives = positives.detach(), negatives.detach() if negatives is not positives else None
    k = 1.0 / (1.0 - lam) ** 2
    c0 = positives.new_full((), (lam * lam + (1.0 - lam) ** 2) * k)
    alpha = 2.0 * lam * (1.0 - lam) * k
    if negatives is None:  # in-batch, one process: a Gram matrix, symmetric
        sq = symmetric_addmm(c0, positives, alpha)
    else:
        sq = torch.addmm(c0, positives, negatives.T, alpha=alpha)
    if (2.0 * lam - 1.0) ** 2 < 1e-3:
        # ||.||^2 >= (2 lam - 1)^2 (at a = -b): only near lam = 0.5 can rounding reach 0.
        sq.clamp_min_(1e-12 * k)
    return sq.rsqrt_()


def symmetric_addmm(c: Tensor, x: Tensor, alpha: float, min_rows: int = 128, max_blocks: int = 16) -> Tensor:
    """``c + alpha * x @ x.T`` computing only the upper block triangle and mirroring it.

    With k row blocks the products cover (k + 1) / 2k of the matrix (0.53 for k = 16); the mirrored
    blocks are copied. Falls back to one addmm for small matrices, on GPUs (where the product is cheap
    and the copies are not), under autocast (which does not take ``out=``) and for other dtypes.

    Example:
        >>> x = torch.randn(600, 8, dtype=torch.float64)
        >>> c = torch.tensor(1.0, dtype=torch.float64)
        >>> bool(torch.allclose(symmetric_addmm(c, x, 2.0), torch.addmm(c, x, x.T, alpha=2.0)))
        True
    """
    n = x.shape[0]
    blocks = min(max_blocks, n // min_rows)
    plain = x.dtype not in (torch.float32, torch.float64) or not autocast_free(x)
    if plain or blocks < 2 or x.device.type != "cpu":
        return torch.addmm(c, x, x.T, alpha=alpha)
    out = torch.empty(n, n, dtype=x.dtype, device=x.device)
    bounds = [round(i * n / blocks) for i in range(blocks + 1)]
    for r0, r1 in zip(bounds[:-1], bounds[1:]):
        torch.addmm(c, x[r0:r1], x[r0:].T, alpha=alpha, out=out[r0:r1, r0:])
    # The mirror: each block row's right part, transposed, into the block column below its diagonal
    # block. Copied through two contiguous scratch matrices, so that the transposition itself is
    # torch's blocked transpose copy (its case of a contiguous destination and a fully transposed
    # source), faster than copying into the strided column block directly (docs/performance.md).
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


def inverse_mixture_norm(cos_ab: Tensor, weight: Tensor) -> Tensor:
    """``1 / ||w a + (1 - w) b||`` for unit a, b from their cosine (elementwise weights w), in place on a
    new tensor; clamped as :func:`mixture_norm`."""
    w = weight
    sq = (w * w).add_((1.0 - w).square_()).addcmul_(w * (1.0 - w), cos_ab, value=2.0)
    return sq.clamp_min_(1e-12).rsqrt_()


def pair_inverse_norms(
    negatives: Tensor, first: Tensor, second: Tensor, alpha: Tensor, chunk_elements: int | None = None
) -> Tensor:
    """(B, s) ``1 / ||alpha n_a + (1 - alpha) n_b||`` for unit rows ``a = first``, ``b = second`` of
    ``negatives`` (K, D), in fp32 (at least).

    With faiss installed (fp32 on CPU), from the inner products n_a . n_b in one pass
    (:func:`hardmix.kernels.faiss_inner_products.indexed_inner_products`) and ||w a + (1 - w) b||^2 =
    w^2 + (1 - w)^2 + 2 w (1 - w) a.b, which is faster than the torch path (docs/performance.md). The
    torch path makes
    each mixture one weighted bag of two rows (``embedding_bag`` with per-sample weights: the rows are read
    once and only the (chunk, D) mixtures are written), then takes its norm; in chunks of about
    ``chunk_elements`` values (default: 2^18 on CPU, so that each chunk stays in cache; 2^24 elsewhere), so
    the (B, s, D) mixtures never exist at once.

    Example:
        >>> inverse_mixture_norm(torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.3]))
        tensor([1.4142, 1.0000])

    Example:
        >>> negatives = torch.eye(3)
        >>> pair_inverse_norms(negatives, torch.tensor([[0, 1]]), torch.tensor([[1, 2]]),
        ...                    torch.tensor([[0.5, 0.5]]))
        tensor([[1.4142, 1.4142]])
    """
    batch, s = first.shape
    dim = negatives.shape[1]
    dtype = torch.promote_types(negatives.dtype, torch.float32)
    dots = indexed_inner_products(negatives, first, second)
    if dots is not None:
        return inverse_mixture_norm(dots.view(batch, s), alpha.to(dtype))
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

