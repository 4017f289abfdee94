"""Frozen-backbone features of freshly augmented training images, for the linear probe's ``--augment``.

MoCo's ``main_lincls.py`` (ImageNet) and solo-learn's linear evaluation (CIFAR) train the classifier on
augmented training images, drawn anew each epoch: RandomResizedCrop(scale (0.08, 1), ratio (3/4, 4/3)) to
the crop size (224; 32 on CIFAR) and a horizontal flip with probability 0.5, through the backbone kept in
eval mode (BatchNorm uses its running statistics, nothing is updated). :class:`AugmentedFeatures` produces
those features one batch at a time: the crops and flips run batched on the uint8 cache with
:class:`~hardmix.vision.augment.TensorAugment` (no color jitter, grayscale or blur), on the evaluation
device, then one no-grad backbone pass. Cost: one backbone forward per training image per epoch.

The images are the evaluation cache (see :func:`hardmix.vision.evaluation.eval_geometry`): the whole
image for crops up to 64 pixels (CIFAR exactly as the recipe), else the 256 x 256 center square of the
shorter side resized to 256 for a 224 crop, so on ImageNet the random crops are drawn from that square
rather than from the full image.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from hardmix.vision.augment import TensorAugment
from hardmix.vision.config import AugmentSection
from hardmix.vision.data import step_generator

LINEAR_CROP_SCALE = (0.08, 1.0)  # torchvision's RandomResizedCrop default (main_lincls.py, solo-learn)
_PURPOSE = 4  # step_generator's purpose slot: 0-3 are the trainer's


def linear_augment_config(cfg: AugmentSection) -> AugmentSection:
    """The linear-evaluation recipe's training augmentation at the run's crop size and normalization:
    RandomResizedCrop(scale (0.08, 1), ratio (3/4, 4/3)) and a horizontal flip (p 0.5), nothing else."""
    return replace(
        cfg,
        crop_scale=LINEAR_CROP_SCALE,
        crop_ratio=(3.0 / 4.0, 4.0 / 3.0),
        jitter_prob=0.0,
        grayscale_prob=0.0,
        blur_prob=0.0,
        flip_prob=0.5,
    )


def frozen_forward(backbone: nn.Module, x: Tensor) -> Tensor:
    """Backbone features (B, D) float32 on the CPU of a normalized float batch (B, 3, S, S) on the
    backbone's device; bfloat16 autocast and channels-last on CUDA. The caller sets eval mode and no-grad."""
    if x.device.type == "cuda":
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return backbone(x).float().cpu()
    return backbone(x).float().cpu()


class AugmentedFeatures:
    """Features of augmented training images through a frozen backbone, batch by batch.

    Args:
        backbone: the trained backbone (its mode is restored after each call; BatchNorm statistics are
            never updated).
        images: (N, 3, H, W) uint8 training images (the evaluation cache, on the CPU).
        augment: the augmentation (normally :func:`linear_augment_config` of the run's ``augment``).
        seed: the seed of the draws.
        device: where the crops and the backbone run.

    Call:
        indices: (B,) long, which training images; step: the global step (epoch * steps + batch), which
        seeds the batch's draws. Returns (B, D) float32 CPU features; the same (indices, step) give the
        same features, another step other crops and flips.

    Example:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 5))
        >>> images = torch.randint(0, 256, (10, 3, 8, 8), dtype=torch.uint8)
        >>> feats = AugmentedFeatures(net, images, linear_augment_config(AugmentSection(crop_size=8)))
        >>> feats(torch.tensor([0, 3, 4]), step=0).shape
        torch.Size([3, 5])
    """

    def __init__(
        self,
        backbone: nn.Module,
        images: Tensor,
        augment: AugmentSection,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        self.backbone = backbone
        self.images = images
        self.augment = TensorAugment(augment)
        self.seed = seed
        self.device = torch.device(device)

    def __len__(self) -> int:
        return self.images.shape[0]

    @torch.no_grad()
    def __call__(self, indices: Tensor, step: int) -> Tensor:
        was = self.backbone.training
        self.backbone.eval()
        x = self.images[indices].to(self.device, non_blocking=True)
        views = self.augment(x, step_generator(self.seed, step, 0, _PURPOSE))
        out = frozen_forward(self.backbone, views)
        self.backbone.train(was)
        return out
