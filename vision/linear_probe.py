"""A linear classifier on frozen backbone features, top-1 and top-5.

Recipes:
- ``moco`` (He et al. 2020, ``main_lincls.py``; used by MoCo-v2 and MoCHi for ImageNet): SGD, lr 30,
  momentum 0.9, no weight decay, batch 256, 100 epochs, lr x 0.1 at epochs 60 and 80.
- ``cifar`` (solo-learn's MoCo V2+ on CIFAR: ``classifier_lr`` 0.3, no weight decay, batch 256; its
  linear evaluation schedule, 100 epochs with steps at 60 and 80).

The features are computed once, from the un-augmented (center) images, and the classifier is trained
on them: the recipes' own crop-and-flip augmentation of the training images would need a backbone pass
per epoch, which a CPU cannot afford. This is the usual "frozen features" protocol; its accuracy is a
little below the augmented one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from hardmix.vision.knn import topk_accuracy


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
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    num_classes: int,
    recipe: LinearRecipe,
    epochs: int | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Train ``nn.Linear`` on frozen features and score it.

    Args:
        train_x: (N, D) features; train_y: (N,) labels.
        test_x: (M, D); test_y: (M,).
        num_classes: C.
        recipe: optimizer and schedule.
        epochs: override the recipe's epochs (milestones scale with it).
        seed: the seed of the initialization and batch order.

    Returns:
        ``{"top1": .., "top5": ..}`` in percent on the test features.
    """
    g = torch.Generator().manual_seed(seed)
    n_epochs = epochs if epochs is not None else recipe.epochs
    milestones = [round(m * n_epochs / recipe.epochs) for m in recipe.milestones]
    head = nn.Linear(train_x.shape[1], num_classes)
    with torch.no_grad():
        head.weight.normal_(0.0, 0.01, generator=g)  # main_lincls.py's initialization
        head.bias.zero_()
    opt = torch.optim.SGD(
        head.parameters(), lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay
    )
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    x, y = train_x.float(), train_y.long()
    for _ in range(n_epochs):
        order = torch.randperm(x.shape[0], generator=g)
        for start in range(0, x.shape[0], recipe.batch_size):
            idx = order[start : start + recipe.batch_size]
            loss = nn.functional.cross_entropy(head(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
    with torch.no_grad():
        ranked = head(test_x.float()).argsort(dim=1, descending=True)
    return topk_accuracy(ranked, test_y)
