"""Contrastive losses: the strategy-extended ContrastiveLoss (in-batch and queue), InfoNCE's cross-entropy
as it computes it, MixCSE."""

from hardmix.losses.contrastive import ContrastiveLoss, LossOutput
from hardmix.losses.info_nce import info_nce
from hardmix.losses.mixcse import mixcse_loss

__all__ = ["ContrastiveLoss", "LossOutput", "info_nce", "mixcse_loss"]
