"""Contrastive losses: InfoNCE in both layouts, the strategy-extended ContrastiveLoss, MixCSE.

The derived logit blocks and the block reduction live in :mod:`hardmix.kernels`; they are re-exported
here under their earlier names.
"""

from hardmix.kernels.block_logsumexp import info_nce_from_blocks
from hardmix.kernels.derived_logits import DerivedLogits
from hardmix.kernels.gathered_logits import GatheredLogits
from hardmix.kernels.pairwise import pairwise_logits
from hardmix.kernels.scaled_logits import ScaledLogits
from hardmix.losses.contrastive import ContrastiveLoss, LossOutput
from hardmix.losses.info_nce import in_batch_logits, info_nce, queue_logits
from hardmix.losses.mixcse import mixcse_loss

__all__ = [
    "ContrastiveLoss",
    "DerivedLogits",
    "GatheredLogits",
    "LossOutput",
    "in_batch_logits",
    "info_nce",
    "info_nce_from_blocks",
    "mixcse_loss",
    "pairwise_logits",
    "queue_logits",
    "ScaledLogits",
]
