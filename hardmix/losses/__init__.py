"""Contrastive losses: the strategy-extended ContrastiveLoss (in-batch and queue), InfoNCE's logits and
cross-entropy as it computes them, MixCSE."""

from hardmix.losses.contrastive import ContrastiveLoss, LossOutput
from hardmix.losses.info_nce import cosine_logits, info_nce, paired_logits
from hardmix.losses.mixcse import mixcse_loss

__all__ = ["ContrastiveLoss", "LossOutput", "cosine_logits", "info_nce", "mixcse_loss", "paired_logits"]
