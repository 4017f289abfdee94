"""Feature-space mixing, the public functions in one place.

- :func:`mix_normalize`: ``normalize(w a + (1 - w) b)``, the mixture both papers use.
- :func:`mochi_synthesize`: MoCHi's synthetic points themselves (B, s + s', D) (Kalantidis et al. 2020),
  from :mod:`hardmix.strategies.mochi`, which defines them.
- :func:`hardest_negatives`, :func:`sample_distinct_pairs`: MoCHi's selection and pair draws.
- :func:`mixture_norm`, :func:`mixed_logits`, :func:`scaled_inverse_mixture_norms`, :func:`mochi_logits`:
  the closed forms of the mixtures' norms and logits that the fast path uses (:mod:`hardmix.kernels`).

Example:
    >>> a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    >>> mix_normalize(a, b, 0.5)
    tensor([0.7071, 0.7071])
    >>> mixture_norm(torch.tensor(0.0), 0.5)
    tensor(0.7071)
"""

from __future__ import annotations

import torch
from torch import Tensor

from hardmix.kernels.mixture_norms import mixed_logits, mixture_norm, scaled_inverse_mixture_norms
from hardmix.kernels.mochi_logits import mochi_logits
from hardmix.kernels.pair_sampling import sample_distinct_pairs
from hardmix.kernels.row_topk import hardest_negatives
from hardmix.strategies.mochi import mochi_synthesize


def mix_normalize(a: Tensor, b: Tensor, weight_a: Tensor | float) -> Tensor:
    """Explicit ``normalize(w a + (1 - w) b)`` along the last dimension (broadcasting).

    Args:
        a: (..., D); b: (..., D); weight_a: w, a number or a tensor that broadcasts against them.

    Returns:
        (..., D) unit mixtures.
    """
    mixed = weight_a * a + (1.0 - weight_a) * b
    return torch.nn.functional.normalize(mixed, dim=-1)


__all__ = [
    "hardest_negatives",
    "mix_normalize",
    "mixed_logits",
    "mixture_norm",
    "mochi_logits",
    "mochi_synthesize",
    "sample_distinct_pairs",
    "scaled_inverse_mixture_norms",
]
