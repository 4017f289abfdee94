"""A linear classifier on frozen backbone features, top-1 and top-5.

Recipes:
- ``moco`` (He et al. 2020, ``main_lincls.py``; used by MoCo-v2 and MoCHi for ImageNet): SGD, lr 30,
  momentum 0.9, no weight decay, batch 256, 100 epochs, lr x 0.1 at epochs 60 and 80.
- ``cifar`` (solo-learn's MoCo V2+ on CIFAR: ``classifier_lr`` 0.3, no weight decay, batch 256; its
  linear evaluation schedule, 100 epochs with steps at 60 and 80).

By default the features are computed once, from the un-augmented (center) images, and the classifier is
trained on them (the usual "frozen features" protocol; its accuracy is a little below the augmented one):
cheap on a CPU. With ``augment`` (``hardmix eval linear --augment``) the training features are those of
the recipes' own augmentation, drawn anew each epoch (RandomResizedCrop(scale (0.08, 1)) and a horizontal
flip through the frozen backbone in eval mode, see :mod:`hardmix.vision.augmented_features`): one backbone
forward per training image per epoch. :func:`linear_probe` takes either a feature tensor or such a
per-batch feature source; the test features are un-augmented either way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from hardmix.vision.knn import topk_accuracy

BatchFeatures = Callable[[Tensor, int], Tensor]
"""Training features made per batch: ``(indices (B,) long, global step) -> (B, D) float32`` (e.g.
:class:`~hardmix.vision.augmented_features.AugmentedFeatures`)."""


@dataclass(frozen=True)
class LinearRecipe:
    lr: float
    momentum: float
    weight_decay: float
    batch_size: int
    epochs: int
    milestones: tuple[int, ...]


RECIPES = {
    "moco": LinearRecipe(
        lr=30.0, momentum=0.9, weight_decay=0.0, batch_size=256, epochs=100, milestones=(60, 80)
    ),
    "cifar": LinearRecipe(
        lr=0.3, momentum=0.9, weight_decay=0.0, batch_size=256, epochs=100, milestones=(60, 80)
    ),
}


def recipe_for(dataset: str) -> str:
    """solo-learn's recipe for CIFAR, MoCo's for everything else."""
    return "cifar" if "cifar" in dataset.lower() else "moco"


def linear_probe(
    train_x: Tensor | BatchFeatures,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    num_classes: int,
    recipe: LinearRecipe,
    epochs: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, float]:
    """Train ``nn.Linear`` on frozen features and score it.

    Args:
        train_x: (N, D) features, or a :data:`BatchFeatures` source called with each batch's indices and
            the global step (epoch * steps per epoch + batch), e.g. augmented views per epoch.
        train_y: (N,) labels.
        test_x: (M, D); test_y: (M,).
        num_classes: C.
        recipe: optimizer and schedule.
        epochs: override the recipe's epochs (milestones scale with it).
        seed: the seed of the initialization and batch order (the same for both kinds of ``train_x``).
        progress: show a progress bar over the steps (stderr).

    Returns:
        ``{"top1": .., "top5": ..}`` in percent on the test features.
    """
    g = torch.Generator().manual_seed(seed)
    n_epochs = epochs if epochs is not None else recipe.epochs
    milestones = [round(m * n_epochs / recipe.epochs) for m in recipe.milestones]
    head = nn.Linear(test_x.shape[1], num_classes)
    with torch.no_grad():
        head.weight.normal_(0.0, 0.01, generator=g)  # main_lincls.py's initialization
        head.bias.zero_()
    opt = torch.optim.SGD(
        head.parameters(), lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay
    )
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    y = train_y.long()
    if isinstance(train_x, Tensor):
        x = train_x.float()
        features: BatchFeatures = lambda idx, _step: x[idx]  # noqa: E731
    else:
        features = train_x
    n = y.shape[0]
    steps = -(-n // recipe.batch_size)
    bar = tqdm(total=n_epochs * steps, desc="linear probe", unit="step", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    for epoch in range(n_epochs):
        order = torch.randperm(n, generator=g)
        for i, start in enumerate(range(0, n, recipe.batch_size)):
            idx = order[start : start + recipe.batch_size]
            loss = nn.functional.cross_entropy(head(features(idx, epoch * steps + i)), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            bar.set_postfix(epoch=epoch + 1, loss=round(loss.item(), 4), refresh=False)
            bar.update(1)
        sched.step()
    bar.close()
    with torch.no_grad():
        ranked = head(test_x.float()).argsort(dim=1, descending=True)
    return topk_accuracy(ranked, test_y)
