"""InfoNCE's cross-entropy, as :class:`~hardmix.losses.ContrastiveLoss` computes it (van den Oord et al.
2018; SimCSE Eq. 1; MoCo Eq. 1):

    L_i = -log exp(s_i+ / tau) / sum_j exp(s_ij / tau)

Two layouts: in-batch (the B x N cosines of the anchors to the other view, the positive of row i in column
``targets[i]``, SimCSE) and queue ([q.k | q.queue], target 0, MoCo). The strategies' extra negatives'
cosines are appended as columns, excluded entries are ``-inf``, and every column is divided by tau in one
place (:mod:`hardmix.losses.composition`); :func:`info_nce` is the mean cross-entropy of the result.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

#: The smallest temperature a loss accepts. The logits are cosines divided by tau, so 1 / tau bounds them
#: and their gradients: at 1e-4 that is 1e4, inside float16's largest value (65504) with room for the sum of
#: a softmax; a smaller tau overflows the half precisions first, then float32 (tau below about 3e-39 makes
#: 1 / tau infinite), and trains on NaN. Published temperatures are far above it (SimCSE 0.05, MoCo-v2 0.2).
MIN_TEMPERATURE = 1e-4


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


__all__ = ["MIN_TEMPERATURE", "info_nce"]
