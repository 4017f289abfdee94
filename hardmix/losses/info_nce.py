"""InfoNCE over logits, with an explicit temperature (van den Oord et al. 2018; SimCSE Eq. 1; MoCo Eq. 1).

    L_i = -log exp(s_i+ / tau) / sum_j exp(s_ij / tau)

Two layouts: in-batch (B x N logits, the positive of row i in column ``targets[i]``, SimCSE) and queue
([positive | queue], target 0, MoCo). Extra negative logits are appended as columns; excluded entries
are ``-inf``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def check_temperature(temperature: float) -> None:
    """Raise a one-line ValueError naming ``temperature`` unless it is a positive number.

    Example:
        >>> check_temperature(0.0)
        Traceback (most recent call last):
        ...
        ValueError: temperature: must be a positive number, got 0.0
    """
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature: must be a positive number, got {temperature!r}")


def info_nce(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean InfoNCE (cross-entropy) of logits that are already divided by the temperature.

    Args:
        logits: (B, C) logits, ``-inf`` where excluded.
        targets: (B,) column of each row's positive.

    Example:
        >>> logits = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
        >>> round(float(info_nce(logits, torch.tensor([0, 1]))), 4)
        0.1269
    """
    return F.cross_entropy(logits, targets)


def in_batch_logits(anchors: Tensor, candidates: Tensor, temperature: float) -> Tensor:
    """(B, N) cosine-similarity logits ``normalize(anchors) @ normalize(candidates).T / tau``."""
    check_temperature(temperature)
    return F.normalize(anchors, dim=-1) @ F.normalize(candidates, dim=-1).T / temperature


def queue_logits(query: Tensor, key: Tensor, queue: Tensor, temperature: float) -> Tensor:
    """(B, 1 + K) MoCo logits ``[q.k | q.queue] / tau`` of unit vectors; the target is column 0.

    Args:
        query: (B, D) unit-norm queries.
        key: (B, D) unit-norm keys (the positives).
        queue: (K, D) unit-norm negatives.
    """
    check_temperature(temperature)
    positive = (query * key).sum(dim=1, keepdim=True)
    return torch.cat([positive, query @ queue.T], dim=1) / temperature
