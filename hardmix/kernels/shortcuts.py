"""What the fast kernels read besides a :class:`hardmix.strategies.ContrastContext`: views of the
logits with other gradient routings and facts about the negative mask that the loss knows without a
(B, N) pass. The plain path (``ContrastiveLoss(impl="plain")``) passes none of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from hardmix.utils.counting import count_true

MaskKind = Literal["general", "all", "positive"]


@dataclass
class LogitShortcuts:
    """Kernel-only companions of one contrastive direction.

    Attributes:
        anchor_logits: (B, N) the values of ``ctx.logits`` with the gradient reaching the anchors only
            (``anchors @ SG(candidates).T / tau``, from :func:`hardmix.kernels.pairwise.pairwise_logits`
            at no extra product). In queue mode it is ``ctx.logits`` itself, so that a
            :class:`~hardmix.kernels.derived_logits.DerivedLogits` of it takes the fused backward.
        positive_anchor_logits: (B,) ``ctx.positive_logits`` with the gradient to the anchors only.
        mask_kind: what ``ctx.negative_mask`` is: ``"all"`` (every candidate is a valid negative),
            ``"positive"`` (all but column ``ctx.positive_index[i]`` of row i: the in-batch layout) or
            ``"general"`` (anything).
        negative_counts: optional (B,) valid negatives of each anchor (the row sums of the mask), when
            the loss knows them; None: count the mask.

    Example:
        >>> import torch
        >>> logits = torch.zeros(2, 3)
        >>> LogitShortcuts(logits, logits[:, 0], mask_kind="all").fewest_negatives(torch.ones(2, 3) > 0)
        3
    """

    anchor_logits: Tensor
    positive_anchor_logits: Tensor
    mask_kind: MaskKind = "general"
    negative_counts: Tensor | None = None

    def fewest_negatives(self, negative_mask: Tensor) -> int:
        """The smallest number of valid negatives of any anchor, given the (B, N) bool mask."""
        if self.mask_kind == "all":
            return negative_mask.shape[1]
        if self.negative_counts is not None:
            return int(self.negative_counts.min())
        return int(count_true(negative_mask, dim=1).min())
