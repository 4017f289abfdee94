"""Contrastive losses: InfoNCE in both layouts, the strategy-extended ContrastiveLoss, MixCSE."""

from hardmix.losses.contrastive import ContrastiveLoss, LossOutput
from hardmix.losses.info_nce import in_batch_logits, info_nce, queue_logits
from hardmix.losses.mixcse import mixcse_loss

__all__ = ["ContrastiveLoss", "LossOutput", "in_batch_logits", "info_nce", "mixcse_loss", "queue_logits"]
