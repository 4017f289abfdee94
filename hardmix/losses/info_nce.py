"""InfoNCE, its logits and its cross-entropy, as :class:`~hardmix.losses.ContrastiveLoss` computes them
(van den Oord et al. 2018; SimCSE Eq. 1; MoCo Eq. 1):

    L_i = -log exp(s_i+ / tau) / sum_j exp(s_ij / tau)

Two layouts: in-batch (B x N logits :func:`cosine_logits`, the positive of row i in column ``targets[i]``,
SimCSE) and queue ([:func:`paired_logits` | :func:`cosine_logits` of the queue], target 0, MoCo). The
strategies' extra negative logits are appended as columns; excluded entries are ``-inf``
(:mod:`hardmix.losses.composition`); :func:`info_nce` is the mean cross-entropy of the result.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

#: The smallest temperature a loss accepts. The logits are cosines divided by tau, so 1 / tau bounds them
#: and their gradients: at 1e-4 that is 1e4, inside float16's largest value (65504) with room for the sum of
#: a softmax; a smaller tau overflows the half precisions first, then float32 (tau below about 3e-39 makes
#: 1 / tau infinite), and trains on NaN. Published temperatures are far above it (SimCSE 0.05, MoCo-v2 0.2).
MIN_TEMPERATURE = 1e-4


def check_temperature(temperature: float) -> None:
    """Raise a one-line ValueError naming ``temperature`` unless it is a number of at least
    :data:`MIN_TEMPERATURE`.

    Example:
        >>> check_temperature(0.0)
        Traceback (most recent call last):
        ...
        ValueError: temperature: must be a number of at least 0.0001, got 0.0
    """
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not temperature >= MIN_TEMPERATURE:
        raise ValueError(f"temperature: must be a number of at least {MIN_TEMPERATURE}, got {temperature!r}")


def cosine_logits(anchors: Tensor, candidates: Tensor, temperature: float) -> Tensor:
    """(B, N) logits ``anchors @ candidates.T / tau`` of unit anchors (B, D) and candidates (N, D): the
    in-batch logits (candidates: the other view) and the queue's (candidates: the queue).

    Example:
        >>> import torch
        >>> cosine_logits(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]]), 0.5)
        tensor([[2., 0.]])
    """
    return anchors @ candidates.T / temperature


def paired_logits(anchors: Tensor, positives: Tensor, temperature: float) -> Tensor:
    """(B,) logits ``anchor_i . positive_i / tau`` of unit anchors and positives (B, D) (MoCo's q.k).

    Example:
        >>> import torch
        >>> a, p = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0]])
        >>> paired_logits(a, p, 0.5)
        tensor([2., 0.])
    """
    return (anchors * positives).sum(dim=1) / temperature


def info_nce(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean InfoNCE (cross-entropy) of logits that are already divided by the temperature.

    Args:
        logits: (B, C) logits, ``-inf`` where excluded.
        targets: (B,) column of each row's positive.

    Example:
        >>> import torch
        >>> logits = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
        >>> round(float(info_nce(logits, torch.tensor([0, 1]))), 4)
        0.1269
    """
    return F.cross_entropy(logits, targets)


__all__ = ["MIN_TEMPERATURE", "check_temperature", "cosine_logits", "info_nce", "paired_logits"]
