"""``mixcse_loss``: the MixCSE objective on two views, as a function of embeddings alone."""

from __future__ import annotations

from torch import Tensor

from hardmix.losses.contrastive import ContrastiveLoss


def mixcse_loss(
    h1: Tensor,
    h2: Tensor,
    lam: float | None = 0.2,
    temperature: float = 0.05,
    stop_grad: bool = True,
    second_direction: bool = True,
) -> Tensor:
    """MixCSE loss (Zhang et al., AAAI 2022) with in-batch negatives, mean over the batch.

    Anchor i (row of h1) against positives h2; each negative h2_j (j != i) also enters the denominator
    mixed with the positive (Eq. 4, 5):

        m'_ij = normalize(lam h2_i + (1 - lam) h2_j),
        L_i = -log e^{s_ii} / (sum_j e^{s_ij} + sum_{j != i} e^{h1_i . SG(m'_ij) / tau}),  s = cos / tau.

    With ``second_direction`` the h2-anchored term (mixing h1_i with h1_j) is added and the two averaged.

    Args:
        h1: (B, D) first view, any norm (cosine similarity is used).
        h2: (B, D) second view.
        lam: the positive's weight in (0, 1) (paper: 0.2); None gives plain in-batch InfoNCE (SimCSE).
        temperature: tau (paper: 0.05).
        stop_grad: SG on the mixtures (paper); False is the "wo sg" ablation.
        second_direction: both directions averaged (paper); False is the "single" ablation.

    Returns:
        Scalar loss.

    References:
        Zhang, Zhang, Mensah, Liu, Mao. Unsupervised Sentence Representation via Contrastive Learning with
        Mixing Negatives. AAAI 2022.

    Example:
        >>> import torch
        >>> h1, h2 = torch.randn(4, 8), torch.randn(4, 8)
        >>> bool(mixcse_loss(h1, h2) > mixcse_loss(h1, h2, lam=None))
        True
    """
    if lam is None:
        strategies = None
    else:
        strategies = {"name": "mixcse", "lam": lam, "stop_grad": stop_grad,
                      "second_direction": second_direction}
    loss_fn = ContrastiveLoss(temperature, strategies, both_directions=second_direction)
    return loss_fn.in_batch(h1, h2).loss
