"""Feature-space mixing, the public functions in one place.

- :func:`mix_normalize`: ``normalize(w a + (1 - w) b)``, the mixture both papers use;
  :func:`mixture_logits`: ``h . normalize(w a + (1 - w) b)`` from the inner products alone (unit vectors).
- :func:`mochi_synthesize`: MoCHi's synthetic points themselves (B, s + s', D) (Kalantidis et al. 2020);
  :func:`hardest`, :func:`sample_distinct_pairs`: its selection and pair draws.

Example:
    >>> a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    >>> mix_normalize(a, b, 0.5)
    tensor([0.7071, 0.7071])
    >>> mixture_logits(a @ a, a @ b, a @ b, 0.5)  # a . normalize(a / 2 + b / 2)
    tensor(0.7071)
"""

from __future__ import annotations

import torch
from torch import Tensor

from hardmix.strategies.mixcse import mixture_logits
from hardmix.strategies.mochi import hardest, mochi_synthesize, sample_distinct_pairs


def mix_normalize(a: Tensor, b: Tensor, weight_a: Tensor | float) -> Tensor:
    """``normalize(w a + (1 - w) b)`` along the last dimension (broadcasting): (..., D) unit mixtures."""
    return torch.nn.functional.normalize(weight_a * a + (1.0 - weight_a) * b, dim=-1)


__all__ = ["hardest", "mix_normalize", "mixture_logits", "mochi_synthesize", "sample_distinct_pairs"]
