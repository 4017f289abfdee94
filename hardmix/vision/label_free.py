"""Selecting a step without labels: the contrastive proxy task on held-out images, and alignment and
uniformity (Wang and Isola, "Understanding Contrastive Representation Learning through Alignment and
Uniformity on the Hypersphere", ICML 2020).

Each held-out image x_i (the validation images carved from the training split, never trained on) is seen
in two augmented views, drawn with the training augmentations from a generator fixed by the data's
``subset_seed``, so every evaluation of every run sees the same views. With f the backbone's features,
normalized, z_i = f(v1_i) and z'_i = f(v2_i) over the n images:

    val_proxy_top1 = 100 / n * #{i : argmax_j z_i . z'_j = i}     (instance discrimination among the n)
    val_alignment  = 1 / n * sum_i ||z_i - z'_i||^2                (Wang and Isola's L_align, alpha 2)
    val_uniformity = (U(z) + U(z')) / 2, U(z) = log( 2 / (n (n - 1)) sum_{i<j} exp(-2 ||z_i - z_j||^2) )
                                                                   (L_uniform, t 2)

The proxy task is what the contrastive loss trains for, scored on images it never saw and on the backbone
(the features every downstream use reads), not on the projection head: higher is better. Lower alignment
and uniformity are better; they are recorded, not selected on. When the proxy task is a good stand-in for
a labelled score is measured, not assumed: ``docs/results.md``, "Selecting without labels".
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hardmix.ops.diagnostics import alignment, uniformity
from hardmix.vision.augment import TensorAugment
from hardmix.vision.augmented_features import frozen_forward

#: The label-free scores, as ``metrics.jsonl`` and ``final_scores`` name them.
LABEL_FREE_SCORES = ("val_proxy_top1", "val_alignment", "val_uniformity")


def proxy_top1(z1: Tensor, z2: Tensor) -> float:
    """Percent of rows i of ``z1`` (N, D) whose most similar row of ``z2`` (N, D) is row i.

    Example:
        >>> z = torch.eye(3)
        >>> proxy_top1(z, z), proxy_top1(z, z[[1, 0, 2]])
        (100.0, 33.33333333333333)
    """
    hits = (z1 @ z2.T).argmax(dim=1) == torch.arange(z1.shape[0], device=z1.device)
    return 100.0 * hits.double().mean().item()


@torch.no_grad()
def view_features(
    backbone: nn.Module,
    images: Tensor,
    augment: TensorAugment,
    seed: int,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> tuple[Tensor, Tensor]:
    """Unit backbone features (N, D) of two augmented views of each uint8 image (N, 3, H, W), in eval mode.

    Batch b's views are drawn from a generator seeded with (``seed``, b), so the views depend on the images,
    the augmentation, the seed and ``batch_size`` only: every evaluation repeats them.
    """
    from tqdm.auto import tqdm

    from hardmix.vision.data import step_generator

    was = backbone.training
    backbone.eval()
    device = torch.device(device)
    out1, out2 = [], []
    for b, start in enumerate(tqdm(range(0, images.shape[0], batch_size), desc="features (views)",
                                   disable=not progress, file=sys.stderr, leave=False, dynamic_ncols=True)):
        x = images[start:start + batch_size].to(device)
        g = step_generator(seed, b, 0, 7)
        v1, v2 = augment(x, g), augment(x, g)
        out1.append(F.normalize(frozen_forward(backbone, v1), dim=1))
        out2.append(F.normalize(frozen_forward(backbone, v2), dim=1))
    backbone.train(was)
    return torch.cat(out1), torch.cat(out2)


def label_free_scores(z1: Tensor, z2: Tensor) -> dict[str, float]:
    """``val_proxy_top1`` (percent), ``val_alignment`` and ``val_uniformity`` of two views' unit features
    (N, D), N >= 2 (see the module docstring)."""
    return {
        "val_proxy_top1": proxy_top1(z1, z2),
        "val_alignment": float(alignment(z1, z2)),  # Wang and Isola's, alpha 2
        "val_uniformity": (float(uniformity(z1.double())) + float(uniformity(z2.double()))) / 2,
    }


__all__ = ["LABEL_FREE_SCORES", "label_free_scores", "proxy_top1", "view_features"]
