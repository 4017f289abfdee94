"""Evaluating a trained backbone: weighted k-NN and a linear probe on frozen features.

A training run scores itself with :class:`RunEvaluation`: the selection score ``val_knn_top1`` (the k-NN of
the validation images carved from the training split, ``data.val_samples``, against a bank of the other
training images) and, once at the end, the final model's held-out test scores (``knn_top1``, ``knn_top5``,
``linear_top1``, each with its binomial standard error ``<score>_se``).

``hardmix eval knn|linear CHECKPOINT --dataset NAME`` take a run directory (its ``checkpoint.pt``) or a
checkpoint file, loaded safely (``weights_only``: a crafted file cannot run code); the checkpoint stores
the config, so the backbone is rebuilt from it. NAME is
``cifar10``, ``imagenette-64`` or an ImageFolder root with ``train`` and ``test`` (or ``val``).

Images are evaluated without augmentation, at the training crop size: for crops up to 64 pixels the
whole image is resized to the crop (a no-op for CIFAR at 32; Imagenette-64 trained on 32 pixel crops is
seen at 32); larger ones are resized to crop / 0.875 on the shorter side and center-cropped (256 -> 224,
the ImageNet protocol of MoCo's ``main_lincls.py``). ``hardmix eval linear --augment`` trains the
classifier on the recipes' random crops and flips of the training images instead, drawn each epoch (see
:mod:`hardmix.vision.augmented_features`); the test images stay un-augmented.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from hardmix.config.loader import build_config
from hardmix.training import checkpoint as ckpt
from hardmix.training.checkpoint import load_matching
from hardmix.training.run_folder import CHECKPOINT
from hardmix.utils.errors import ConfigError
from hardmix.vision.augment import TensorAugment, normalize_uint8
from hardmix.vision.augmented_features import AugmentedFeatures, frozen_forward, linear_augment_config
from hardmix.vision.backbones import build_backbone
from hardmix.vision.config import VisionConfig, selection_score
from hardmix.vision.data import (
    ImageList,
    ImageTensors,
    balanced_subset,
    derive_seed,
    eval_splits,
    load_tensors,
    read_class_list,
)
from hardmix.vision.knn import knn_predict, topk_accuracy
from hardmix.vision.label_free import label_free_scores, view_features
from hardmix.vision.linear_probe import RECIPES, linear_probe, recipe_for


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file from a run directory (its ``checkpoint.pt``) or a file path."""
    p = Path(path)
    if p.is_dir():
        if (p / CHECKPOINT).is_file():
            return p / CHECKPOINT
        raise FileNotFoundError(f"checkpoint: {p} holds no {CHECKPOINT} (is it a run folder?)")
    if p.is_file():
        return p
    raise FileNotFoundError(f"checkpoint: {p} does not exist")


#: Where a vision checkpoint's model holds the query backbone (the encoder that is evaluated and exported).
BACKBONE_PREFIX = "encoder_q.backbone."


def query_weights(state: dict[str, Any], source: str | os.PathLike[str]) -> dict[str, Tensor]:
    """The query backbone's weights of a checkpoint's state (the prefix removed); one line naming
    ``source`` when its model holds none."""
    model = state.get("model")
    if not isinstance(model, dict):
        raise ValueError(f"{source}: holds no model weights")
    n = len(BACKBONE_PREFIX)
    weights = {k[n:]: v for k, v in model.items() if isinstance(k, str) and k.startswith(BACKBONE_PREFIX)}
    if not weights:
        raise ValueError(f"{source}: holds no query backbone ({BACKBONE_PREFIX}* keys)")
    return weights


def checked_backbone(backbone: str, width: int, small_stem: bool, weights: dict[str, Any],
                     source: str | os.PathLike[str]) -> nn.Module:
    """The backbone ``build_backbone(backbone, width, small_stem)`` holding ``weights``, loaded key by key
    (:func:`hardmix.training.checkpoint.load_matching`), in eval mode: the one way a vision checkpoint's or
    exported file's weights reach a module (evaluation, export, encode, :func:`load_backbone`).

    Raises:
        ValueError: one line naming ``source`` and the first key that does not match.
    """
    net, _ = build_backbone(backbone, width, small_stem)
    load_matching(net, weights, str(source))
    return net.eval()


def backbone_from_state(state: dict[str, Any], source: str | os.PathLike[str] = "the checkpoint"
                        ) -> tuple[nn.Module, VisionConfig]:
    """Rebuild the query backbone of a checkpoint (plain BatchNorm; split-BN has the same weights), loaded
    key by key (:func:`checked_backbone`); ``source`` names the file in an error."""
    config = state.get("config")
    if not isinstance(config, dict):
        held = "no 'config' entry" if "config" not in state else f"a {type(config).__name__} as its 'config'"
        raise ValueError(f"{source}: holds no run config ({held}), so the "
                         "backbone it was trained with (model.backbone, width, small_stem) is unknown; not a "
                         "complete hardmix vision checkpoint")
    try:
        cfg = build_config(VisionConfig, config)
    except ValueError as e:  # ConfigError too: the key, in the file's config
        raise ValueError(f"{source}: its run config does not validate ({e})") from None
    net = checked_backbone(cfg.model.backbone, cfg.model.width, cfg.model.small_stem,
                           query_weights(state, source), f"{source} ({BACKBONE_PREFIX[:-1]})")
    return net, cfg


def backbone_and_config(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[nn.Module, VisionConfig]:
    """The trained backbone (in eval mode, on ``device``) and the config of a run directory or checkpoint."""
    found = resolve_checkpoint(path)
    net, cfg = backbone_from_state(ckpt.load_checkpoint(found, task="vision"), found)
    return net.to(device), cfg


def eval_geometry(cfg: VisionConfig) -> tuple[int | None, int | None]:
    """(cache resolution, center crop) of evaluation images: the whole image at the crop size for crops up
    to 64 pixels, else shorter side crop / 0.875 and a center crop (ImageNet's 256 -> 224)."""
    crop = cfg.augment.crop_size
    if crop <= 64:
        return crop, None
    return round(crop / 0.875), crop


@torch.no_grad()
def extract_features(
    backbone: nn.Module,
    images: Tensor,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    crop: int | None = None,
    progress: bool = True,
    desc: str = "features",
) -> Tensor:
    """Backbone features (N, D) float32 on the CPU of uint8 images (N, 3, H, W), in eval mode.

    Args:
        crop: center-crop to this side first (None: as stored).
        progress: a progress bar (images, rate, ETA) on stderr.
    """
    from tqdm.auto import tqdm

    was = backbone.training
    backbone.eval()
    device = torch.device(device)
    out = []
    starts = range(0, images.shape[0], batch_size)
    bar = tqdm(total=images.shape[0], desc=desc, unit="img", disable=not progress, file=sys.stderr,
               leave=False, dynamic_ncols=True)
    for start in starts:
        bar.update(min(batch_size, images.shape[0] - start))
        x = images[start : start + batch_size].to(device, non_blocking=True)
        if crop is not None and crop < x.shape[-1]:
            top, left = (x.shape[-2] - crop) // 2, (x.shape[-1] - crop) // 2
            x = x[..., top : top + crop, left : left + crop]
        out.append(frozen_forward(backbone, normalize_uint8(x, mean, std)))
    bar.close()
    backbone.train(was)
    return torch.cat(out)


class LabelledImages:
    """The train and test splits of a labelled dataset, decoded once (through the on-disk cache).

    Args:
        dataset: ``cifar10``, ``imagenette-64`` or an ImageFolder root.
        resolution: cache resolution (see :func:`eval_geometry`).
        max_train, max_test: class-balanced subsets (seed 0).
        cache_dir, workers: as the data config.
        key: the option named in errors.
        classes: only these class folders (ImageNet-100's class list).
        skip_corrupt: leave undecodable images out (counted in ``skipped``) instead of stopping.
        skip_hint: how the caller asks for ``skip_corrupt`` (for the error), e.g. ``pass --skip-corrupt``.
    """

    def __init__(
        self,
        dataset: str,
        resolution: int | None = None,
        max_train: int | None = None,
        max_test: int | None = None,
        cache_dir: str | None = None,
        workers: int = 4,
        key: str = "--dataset",
        classes: list[str] | None = None,
        skip_corrupt: bool = False,
        skip_hint: str | None = None,
    ) -> None:
        train, test = eval_splits(dataset, key, classes)
        self.classes = train.classes
        load = {"resolution": resolution, "cache_dir": cache_dir, "skip_corrupt": skip_corrupt,
                "workers": workers, "key": key, "skip_hint": skip_hint}
        self.train = self._load(train, max_train, **load)
        self.test = self._load(test, max_test, **load)
        self.skipped = self.train.skipped + self.test.skipped

    @staticmethod
    def _load(images: Any, n: int | None, **load: Any) -> ImageTensors:
        idx = balanced_subset(images.labels, n, 0) if n is not None else None
        return load_tensors(images, idx, **load)

    def features(
        self,
        backbone: nn.Module,
        cfg: VisionConfig,
        batch_size: int = 256,
        device: str | torch.device = "cpu",
    ) -> tuple[Tensor, Tensor]:
        """(train features, test features) of the backbone."""
        _, crop = eval_geometry(cfg)
        a = cfg.augment
        return (
            extract_features(backbone, self.train.images, a.mean, a.std, batch_size, device, crop,
                             desc="features (bank)"),
            extract_features(backbone, self.test.images, a.mean, a.std, batch_size, device, crop,
                             desc="features (test)"),
        )

    def knn(
        self,
        backbone: nn.Module,
        cfg: VisionConfig,
        k: int = 200,
        temperature: float = 0.1,
        batch_size: int = 256,
        device: str | torch.device = "cpu",
        backend: str = "auto",
    ) -> dict[str, float]:
        """Weighted k-NN top-1/top-5 (percent) of the test split against the train split."""
        bank, queries = self.features(backbone, cfg, batch_size, device)
        ranked = knn_predict(bank, self.train.labels, queries, k, temperature, len(self.classes), backend)
        return topk_accuracy(ranked, self.test.labels)

    def linear(
        self,
        backbone: nn.Module,
        cfg: VisionConfig,
        recipe: str,
        epochs: int | None = None,
        batch_size: int = 256,
        device: str | torch.device = "cpu",
        augment: bool = False,
        seed: int = 0,
        progress: bool = False,
    ) -> dict[str, float]:
        """Linear-probe top-1/top-5 (percent) with a recipe of :data:`RECIPES`.

        Args:
            augment: train on the recipe's random crops and flips of the training images, drawn each
                epoch through the frozen backbone (:class:`AugmentedFeatures`); False: on the features of
                the un-augmented images, computed once. The test features are un-augmented either way.
            seed: the seed of the head's initialization, the batch order and the augmentation.
            progress: a progress bar over the classifier's steps.
        """
        a = cfg.augment
        if augment:
            _, crop = eval_geometry(cfg)
            test_x = extract_features(backbone, self.test.images, a.mean, a.std, batch_size, device, crop)
            train_x = AugmentedFeatures(backbone, self.train.images, linear_augment_config(a), seed, device)
        else:
            train_x, test_x = self.features(backbone, cfg, batch_size, device)
        return linear_probe(
            train_x,
            self.train.labels,
            test_x,
            self.test.labels,
            len(self.classes),
            RECIPES[recipe],
            epochs,
            seed,
            progress,
        )


def binomial_se(accuracy: float, n: int) -> float:
    """The sampling standard error, in points, of an accuracy in percent measured on ``n`` items:
    ``100 sqrt(p (1 - p) / n)`` with ``p = accuracy / 100`` (the binomial's).

    Example:
        >>> round(binomial_se(50.0, 100), 6)
        5.0
    """
    p = accuracy / 100.0
    return 100.0 * math.sqrt(max(0.0, p * (1.0 - p)) / max(1, n))


def _subset(labels: Tensor, pool: Tensor, n: int | None) -> Tensor:
    """A class-balanced subset (seed 0) of ``n`` of the positions ``pool`` (all of them when n is None)."""
    return pool if n is None else pool[balanced_subset(labels[pool], n, 0)]


class RunEvaluation:
    """What a training run scores: the selection score on the validation split, the final test scores.

    - ``validation``: ``val_knn_top1`` / ``val_knn_top5``, the weighted k-NN of the validation images
      (``val_indices`` of the training split ``split``) against a bank of ``eval.knn_train_samples``
      (class-balanced, seed 0) of the split's other images, when the images are labelled; and the
      label-free ``val_proxy_top1``, ``val_alignment``, ``val_uniformity`` of the validation images
      (:mod:`hardmix.vision.label_free`) when they select (``eval.selection``), when asked
      (``eval.label_free_scores``) or without labels. ``eval.selection`` picks the model and what tuning
      compares. The test split is never read for it.
    - ``test``: the final model's held-out scores of ``eval.final_scores`` (none when the training images
      are unlabeled and ``eval.dataset`` names no labelled dataset): ``knn_top1`` / ``knn_top5`` of
      ``eval.knn_test_samples`` test images against the bank (the same bank when ``eval.dataset`` is the
      training dataset, else that dataset's train split) and ``linear_top1`` of a linear probe trained on
      the bank's features (or on ``eval.linear_train_samples``, scored on ``eval.linear_test_samples``),
      each with ``<score>_se``, its binomial standard error in points (:func:`binomial_se`).

    Images are decoded once, on first use, through the on-disk cache; features are kept per ``tag`` (the
    caller's step), so the final evaluation and the test scores of the same model share the bank's.

    Args:
        cfg: the run's config.
        split: the training split (:class:`~hardmix.vision.pipeline.TrainData` ``split``).
        val_indices: the validation images' indices into ``split``.
        device: the device of the feature extraction.
    """

    def __init__(
        self, cfg: VisionConfig, split: ImageList, val_indices: Tensor, device: torch.device
    ) -> None:
        self.cfg, self.split, self.device = cfg, split, device
        self.val_indices = val_indices
        self.resolution, self.crop = eval_geometry(cfg)
        self.dataset = cfg.eval.dataset or cfg.data.dataset
        self.same_dataset = self.dataset == cfg.data.dataset
        self._images: dict[str, ImageTensors] = {}
        self._features: dict[str, tuple[int, Tensor]] = {}
        e = cfg.eval
        self.labelled = split.labelled
        self.selection = selection_score(e.selection, self.labelled)
        self.label_free = not self.labelled or self.selection == "val_proxy_top1" or e.label_free_scores
        self.has_test = self.labelled or not self.same_dataset
        if (e.at_end or e.eval_steps) and self.label_free and len(val_indices) < 2:
            raise ConfigError("data.val_samples: the label-free scores need at least 2 validation images")
        if (e.at_end or e.eval_steps) and self.labelled:  # before any step: a k-NN needs k neighbours
            bank = len(split.paths) - len(val_indices)
            bank = bank if e.knn_train_samples is None else min(bank, e.knn_train_samples)
            if bank < e.knn_k:
                raise ConfigError(f"eval.knn_k: {e.knn_k} neighbours from a bank of the {bank} training "
                                  "images left beside the validation split; lower knn_k")

    # ------------------------------------------------------------------------------------- images
    def _load(self, images: ImageList, idx: Tensor, key: str) -> ImageTensors:
        d = self.cfg.data
        return load_tensors(images, idx, self.resolution, d.cache_dir, d.skip_corrupt, d.num_workers, key=key,
                            skip_hint="set data.skip_corrupt: true")

    def _pool(self) -> Tensor:
        """The training split's positions that may enter a bank: all but the validation images."""
        keep = torch.ones(len(self.split.paths), dtype=torch.bool)
        keep[self.val_indices] = False
        return torch.nonzero(keep).squeeze(1)

    def images(self, name: str) -> ImageTensors:
        """The decoded images ``val``, ``bank``, ``test`` (and ``linear_train``, ``linear_test`` when
        the probe has its own subsets)."""
        if name not in self._images:
            e, split = self.cfg.eval, self.split
            if name == "val":
                got = self._load(split, self.val_indices, "data")
            elif name == "bank":
                got = self._load(split, _subset(split.labels, self._pool(), e.knn_train_samples), "data")
            elif name == "test_bank":  # eval.dataset is another dataset: its own train split
                train, _ = eval_splits(self.dataset, "eval.dataset", training_classes(self.cfg, self.dataset))
                pool = torch.arange(len(train.paths))
                got = self._load(train, _subset(train.labels, pool, e.knn_train_samples), "eval")
            elif name in ("test", "linear_test"):
                n = e.knn_test_samples if name == "test" else e.linear_test_samples
                _, test = self._splits()
                got = self._load(test, _subset(test.labels, torch.arange(len(test.paths)), n), "eval")
            elif name == "linear_train":
                if self.same_dataset:
                    idx = _subset(split.labels, self._pool(), e.linear_train_samples)
                    got = self._load(split, idx, "data")
                else:
                    train, _ = self._splits()
                    pool = torch.arange(len(train.paths))
                    got = self._load(train, _subset(train.labels, pool, e.linear_train_samples), "eval")
            else:
                raise KeyError(name)
            self._images[name] = got
        return self._images[name]

    def _splits(self) -> tuple[ImageList, ImageList]:
        if not hasattr(self, "_eval_splits"):
            classes = self.split.classes if self.same_dataset else training_classes(self.cfg, self.dataset)
            self._eval_splits = eval_splits(self.dataset, "eval.dataset", classes)
        return self._eval_splits

    def features(self, name: str, backbone: nn.Module, tag: int) -> Tensor:
        """(N, D) features of :meth:`images` ``name`` by ``backbone``, computed once per ``tag``."""
        cached = self._features.get(name)
        if cached is not None and cached[0] == tag:
            return cached[1]
        a, e = self.cfg.augment, self.cfg.eval
        feats = extract_features(backbone, self.images(name).images, a.mean, a.std, e.batch_size, self.device,
                                 self.crop, progress=self.cfg.log.progress, desc=f"features ({name})")
        self._features[name] = (tag, feats)
        return feats

    def _knn(self, bank: str, queries: str, backbone: nn.Module, tag: int) -> dict[str, float]:
        e = self.cfg.eval
        ranked = knn_predict(self.features(bank, backbone, tag), self.images(bank).labels,
                             self.features(queries, backbone, tag), e.knn_k, e.knn_temperature,
                             len(self.split.classes if queries == "val" or self.same_dataset
                                 else self._splits()[0].classes), e.backend)
        return topk_accuracy(ranked, self.images(queries).labels)

    # ------------------------------------------------------------------------------------- scores
    def validation(self, backbone: nn.Module, tag: int) -> dict[str, float]:
        """``val_knn_top1`` and ``val_knn_top5`` (percent; labelled images) and the label-free scores (see
        the class docstring) of the current backbone."""
        out: dict[str, float] = {}
        if self.labelled:
            scores = self._knn("bank", "val", backbone, tag)
            out.update({"val_knn_top1": scores["top1"], "val_knn_top5": scores["top5"]})
        if self.label_free:
            e = self.cfg.eval
            z1, z2 = view_features(backbone, self.images("val").images, TensorAugment(self.cfg.augment),
                                   derive_seed(self.cfg.data.subset_seed, 0x1ABE1), e.batch_size, self.device,
                                   progress=self.cfg.log.progress)
            out.update(label_free_scores(z1, z2))
        return out

    def test(self, backbone: nn.Module, tag: int) -> dict[str, float]:
        """The held-out test scores of ``eval.final_scores`` (percent), each with ``<score>_se``; none
        without labelled test images (:attr:`has_test`)."""
        e = self.cfg.eval
        out: dict[str, float] = {}
        if not self.has_test:
            return out
        bank = "bank" if self.same_dataset else "test_bank"
        if "knn_top1" in e.final_scores or "knn_top5" in e.final_scores:
            knn = self._knn(bank, "test", backbone, tag)
            n_test = self.images("test").labels.numel()
            for k in ("top1", "top5"):
                if f"knn_{k}" in e.final_scores:
                    out[f"knn_{k}"] = knn[k]
                    out[f"knn_{k}_se"] = binomial_se(knn[k], n_test)
        if "linear_top1" in e.final_scores:
            train = "linear_train" if e.linear_train_samples is not None else bank
            test = "linear_test" if e.linear_test_samples is not None else "test"
            num_classes = len(self.split.classes if self.same_dataset else self._splits()[0].classes)
            probe = linear_probe(self.features(train, backbone, tag), self.images(train).labels,
                                 self.features(test, backbone, tag), self.images(test).labels, num_classes,
                                 RECIPES[recipe_for(self.dataset)], e.linear_epochs)
            out["linear_top1"] = probe["top1"]
            out["linear_top1_se"] = binomial_se(probe["top1"], self.images(test).labels.numel())
        return out


def _device(name: str | None) -> torch.device:
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _write_json(scores: dict[str, float], path: str | None) -> None:
    text = json.dumps({"top1": round(scores["top1"], 4), "top5": round(scores["top5"], 4)})
    print(text)
    if path:
        from hardmix.utils.confine import write_text

        write_text(text + "\n", path, Path(path).parent)  # inside the folder named


def training_classes(cfg: VisionConfig, dataset: str) -> list[str] | None:
    """The run's class list (ImageNet-100) when ``dataset`` is the folder it trained on, else None."""
    if cfg.data.class_list and dataset == cfg.data.dataset:
        return read_class_list(cfg.data.class_list)
    return None


def _images_for(args: argparse.Namespace, cfg: VisionConfig) -> LabelledImages:
    resolution, _ = eval_geometry(cfg)
    return LabelledImages(
        args.dataset,
        resolution,
        getattr(args, "max_train_samples", None),
        getattr(args, "max_test_samples", None),
        cfg.data.cache_dir,
        cfg.data.num_workers,
        classes=training_classes(cfg, args.dataset),
        skip_corrupt=bool(getattr(args, "skip_corrupt", False)),
        skip_hint="pass --skip-corrupt",
    )


def knn_cli_main(args: argparse.Namespace) -> int:
    """``hardmix eval knn CHECKPOINT --dataset NAME [--json OUT] [--k] [--temperature]``."""
    device = _device(args.device)
    backbone, cfg = backbone_and_config(args.checkpoint, device)
    data = _images_for(args, cfg)
    scores = data.knn(backbone, cfg, args.k, args.temperature, args.batch_size, device)
    print(
        f"k-NN (k={min(args.k, data.train.images.shape[0])}"  # the k used: at most the bank's size
        + (f", of --k {args.k}" if args.k > data.train.images.shape[0] else "")
        + f", tau={args.temperature}) on {args.dataset}: top-1 {scores['top1']:.2f}%, "
        f"top-5 {scores['top5']:.2f}% ({data.train.images.shape[0]} bank, {data.test.images.shape[0]} test)",
        file=sys.stderr,
    )
    _write_json(scores, args.json_out)
    return 0


def linear_cli_main(args: argparse.Namespace) -> int:
    """``hardmix eval linear CHECKPOINT --dataset NAME [--json OUT] [--epochs] [--augment]``."""
    device = _device(args.device)
    backbone, cfg = backbone_and_config(args.checkpoint, device)
    data = _images_for(args, cfg)
    recipe = recipe_for(args.dataset)
    augment = bool(getattr(args, "augment", False))
    scores = data.linear(
        backbone, cfg, recipe, args.epochs, args.batch_size, device, augment=augment, progress=True
    )
    kind = "augmented" if augment else "frozen features"
    print(
        f"linear probe ({recipe} recipe, {kind}) on {args.dataset}: top-1 {scores['top1']:.2f}%, "
        f"top-5 {scores['top5']:.2f}%",
        file=sys.stderr,
    )
    _write_json(scores, args.json_out)
    return 0
