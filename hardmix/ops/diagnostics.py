"""Diagnostics of a contrastive embedding space, cheap enough to log every few steps.

- :func:`alignment` and :func:`uniformity` (Wang and Isola, ICML 2020, Eq. 4 and 5);
- :func:`similarity_stats`: mean similarity of anchor to positive and to random negatives (MixCSE Fig. 3);
  the mean similarity to synthetic negatives comes from each strategy's statistics (``LossOutput.stats()``);
- :func:`anchor_gradient_norm`: the norm of the loss gradient with respect to the anchors (the
  vanishing-gradient argument of MixCSE, Sec. 4.1);
- :func:`max_pairwise_angle`: the largest angle in a set of embeddings (the spread of the cap, Sec. 4.2).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def alignment(x: Tensor, y: Tensor, alpha: float = 2) -> Tensor:
    """Alignment E ||x - y||^alpha over row-aligned positive pairs of unit vectors (Wang and Isola, Eq. 4).

    Args:
        x: (B, D) unit vectors.
        y: (B, D) their positives.

    Example:
        >>> x = torch.eye(2)
        >>> float(alignment(x, x))
        0.0
    """
    return (x - y).norm(dim=1).pow(alpha).mean()


def uniformity(x: Tensor, t: float = 2) -> Tensor:
    """Uniformity log E exp(-t ||x_i - x_j||^2) over distinct pairs of unit vectors (Wang and Isola, Eq. 5).

    Args:
        x: (B, D) unit vectors, B >= 2.
    """
    return torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log()


@torch.no_grad()
def similarity_stats(anchors: Tensor, positives: Tensor) -> dict[str, float]:
    """Mean cosine of each anchor to its positive and to the other rows' positives (random negatives).

    Args:
        anchors: (B, D), any norm.
        positives: (B, D), row-aligned.
    """
    a, p = F.normalize(anchors.float(), dim=1), F.normalize(positives.float(), dim=1)
    sims = a @ p.T
    b = sims.shape[0]
    pos = sims.diagonal().mean()
    neg = (sims.sum() - sims.diagonal().sum()) / max(b * (b - 1), 1)
    return {"pos_sim": float(pos), "neg_sim": float(neg)}


def anchor_gradient_norm(
    loss_fn: Callable[[Tensor, Tensor], Tensor], anchors: Tensor, positives: Tensor
) -> float:
    """Mean over anchors of B * ||dL/dh_i|| for a mean loss ``loss_fn(anchors, positives)``, computed on
    detached copies so the training graph is untouched (multiplying by B undoes the batch mean: the value
    is the gradient norm of one anchor's own term plus its share of the others').
    """
    a = anchors.detach().float().requires_grad_(True)
    p = positives.detach().float()
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(loss_fn(a, p), a)
    return float(grad.norm(dim=1).mean() * a.shape[0])


@torch.no_grad()
def max_pairwise_angle(x: Tensor) -> float:
    """The largest angle (radians) between two rows of ``x`` (N, D).

    The pair is found from the cosine matrix (in fp32 at least); its angle is then computed in float64 as
    ``2 atan2(||u - v||, ||u + v||)``, which stays accurate near 0 and pi, where arccos of a rounded
    cosine is off by up to sqrt(eps) (3e-4 in fp32).
    """
    if x.shape[0] < 2:
        return 0.0
    u = F.normalize(x.to(torch.promote_types(x.dtype, torch.float32)), dim=1)
    cos = u @ u.T
    flat = int(cos.argmin())
    i, j = divmod(flat, cos.shape[1])
    a, b = F.normalize(x[i].double(), dim=0), F.normalize(x[j].double(), dim=0)
    return float(2.0 * torch.atan2(torch.linalg.vector_norm(a - b), torch.linalg.vector_norm(a + b)))


@torch.no_grad()
def embedding_diagnostics(anchors: Tensor, positives: Tensor) -> dict[str, float]:
    """Alignment, uniformity, positive and negative similarity and the largest angle of a batch."""
    a, p = F.normalize(anchors.float(), dim=1), F.normalize(positives.float(), dim=1)
    out = similarity_stats(a, p)
    out["alignment"] = float(alignment(a, p))
    out["uniformity"] = float(uniformity(a)) if a.shape[0] > 1 else float("nan")
    out["max_angle"] = max_pairwise_angle(a)
    return out
