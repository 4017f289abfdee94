"""Contrastive losses: InfoNCE in both layouts, the strategy-extended ContrastiveLoss, MixCSE."""

from hardmix.losses.contrastive import ContrastiveLoss, LossOutput
from hardmix.losses.derived_logits import DerivedLogits
from hardmix.losses.gathered_logits import GatheredLogits
from hardmix.losses.info_nce import in_batch_logits, info_nce, info_nce_from_blocks, queue_logits
from hardmix.losses.mixcse import mixcse_loss
from hardmix.losses.pairwise import pairwise_logits
from hardmix.losses.scaled_logits import ScaledLogits

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
