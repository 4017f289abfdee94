"""Logit blocks computed from another logit block by a fixed linear map, with a fused backward.

A strategy's extra negatives are often such a block: MoCHi's synthetic logits are weighted sums of entries
of the queue logits (:class:`~hardmix.kernels.gathered_logits.GatheredLogits`), MixCSE's stop-gradient
logits against a queue are the queue logits shifted and rescaled
(:class:`~hardmix.kernels.scaled_logits.ScaledLogits`). Passed to
:func:`~hardmix.kernels.block_logsumexp.info_nce_from_blocks` next to their source block, such a block's
gradient is added into the source's gradient in place by its :meth:`DerivedLogits.gradient_rule`, instead of
through autograd's chain of fresh (B, K) buffers. Anywhere else, :meth:`DerivedLogits.materialize` gives an
ordinary tensor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor

# rule(p, source_grad, need_direct): given this block's (B, M) softmax gradient ``p`` (the backward's own
# buffer, free to overwrite), add its share into ``source_grad`` (B, K) in place when that is not None, and
# return the gradient of the block's direct input when ``need_direct`` (else None).
GradientRule = Callable[[Tensor, "Tensor | None", bool], "Tensor | None"]


class DerivedLogits(ABC):
    """A (B, M) logit block that is a fixed linear function of a (B, K) ``source`` block and, optionally,
    of one more input of its own (:attr:`direct_input`).

    Subclasses set ``source`` and ``values`` ((B, M), detached, computed once at construction).
    """

    source: Tensor
    values: Tensor

    @property
    def shape(self) -> torch.Size:
        return self.values.shape

    @property
    @abstractmethod
    def direct_input(self) -> Tensor | None:
        """The block's differentiable input besides ``source`` (None if it has none)."""

    @abstractmethod
    def materialize(self) -> Tensor:
        """The (B, M) block as an ordinary tensor with autograd's gradient."""

    @abstractmethod
    def gradient_rule(self) -> GradientRule:
        """The fused backward (see :data:`GradientRule`). It holds the map's constants only, not the
        source, so that the loss can keep it until its backward without keeping the source alive."""
