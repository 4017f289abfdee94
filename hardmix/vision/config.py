"""The vision training config: YAML sections validated into dataclasses (see ``configs/vision/``).

Defaults are MoCo-v2's ImageNet recipe (Chen et al. 2020, arXiv:2003.04297): ResNet-50, MLP head
2048-128, K = 65536, m = 0.999, tau = 0.2, SGD lr 0.03 x B / 256 with momentum 0.9, weight decay 1e-4 and
a cosine schedule over 200 epochs, and its augmentations. Every error names its key
(``loss.strategies[0].n_hard``), before any data is read.

Example:
    >>> from hardmix.config.loader import build_config
    >>> cfg = build_config(VisionConfig, {"loss": {"strategies": "mochi"}},
    ...                    overrides=["train.epochs=2", "loss.queue_size=4096"])
    >>> cfg.train.epochs, cfg.loss.strategies[0].n_hard
    (2, 1024)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from hardmix.losses.info_nce import MIN_TEMPERATURE
from hardmix.strategies.spec_type import Strategies
from hardmix.training.config import EvalSection as BaseEvalSection
from hardmix.training.config import LossSection as BaseLossSection
from hardmix.training.config import TaskConfig
from hardmix.training.config import TrainSection as BaseTrainSection
from hardmix.utils.errors import ConfigError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class DataSection:
    """Where the training images come from and how they are loaded.

    Attributes:
        dataset: ``cifar10``, ``imagenette-64`` (under the data root), an ImageFolder root (its
            ``train_split`` sub-folder is used; a folder of class folders is used as it is) or a folder of
            unlabeled images, flat or nested (see ``labels``).
        labels: True: the training split's sub-folders are classes; False: every image below it is used,
            unlabeled (no k-NN; selection on ``val_proxy_top1``, no labelled test scores unless
            ``eval.dataset`` names a labelled dataset); None (auto): unlabeled when the split holds images
            at its top level, else labelled; images at the top beside sub-folders of images are refused
            (which is it?) until ``labels`` says.
        train_split: the training sub-folder.
        class_list: optional file of class folder names, one per line (ImageNet-100: the shared
            ``images/imagenet100-classes.txt`` over an ImageNet ``train`` folder).
        val_samples: a class-balanced validation set of this many images carved out of the training split
            before ``max_samples``' subset is drawn, never trained on: every model selection and tuning
            scores on it (``val_knn_top1``), so the test split stays held out. Needed whenever the run
            evaluates (``eval.at_end`` or ``eval.eval_steps``); every class keeps a training image.
        max_samples: a class-balanced subset of this many training images (from the images left after
            ``val_samples``).
        subset_seed: the seed of that subset and of the validation set (fixed across training seeds, so
            seeds vary only training).
        pipeline: ``tensor`` decodes every image once into a uint8 tensor cache and augments batches as
            tensors (on the GPU when training there); ``pil`` is torchvision's per-image PIL path with
            DataLoader workers; ``auto`` picks ``tensor`` when the cache fits in ``cache_max_gb``.
        cache_resolution: resize the shorter side to this and center-crop a square before caching
            (needed when the images differ in size); None keeps the stored size.
        cache_dir: where decoded caches persist between runs (default ``$HARDMIX_CACHE`` or
            ``~/.cache/hardmix``); an empty string disables the on-disk cache.
        cache_max_gb: the largest cache ``auto`` chooses the tensor path for.
        skip_corrupt: skip images that cannot be decoded (counted and reported) instead of stopping; they
            are dropped before ``max_samples``'s subset is drawn (which then decodes the whole split once).
        num_workers: decoding threads (tensor path) or DataLoader workers (PIL path).
    """

    dataset: str = "cifar10"
    labels: bool | None = None
    train_split: str = "train"
    class_list: str | None = None
    val_samples: int | None = field(default=None, metadata={"min": 1})
    max_samples: int | None = field(default=None, metadata={"min": 1})
    subset_seed: int = 0
    pipeline: Literal["auto", "tensor", "pil"] = "auto"
    cache_resolution: int | None = field(default=None, metadata={"min": 8})
    cache_dir: str | None = None
    cache_max_gb: float = field(default=16.0, metadata={"gt": 0.0})
    skip_corrupt: bool = False
    num_workers: int = field(default=4, metadata={"min": 0})


@dataclass
class AugmentSection:
    """MoCo-v2's augmentations (Chen et al. 2020, Sec. 3 "augmentation"; ``moco/main_moco.py --aug-plus``).

    Attributes:
        crop_size: output side of RandomResizedCrop (224 on ImageNet, 32 on CIFAR).
        crop_scale: area range of the crop; MoCo-v2: (0.2, 1); solo-learn CIFAR: (0.08, 1).
        crop_ratio: aspect-ratio range of the crop.
        jitter: ColorJitter (brightness, contrast, saturation, hue); MoCo-v2: (0.4, 0.4, 0.4, 0.1).
        jitter_prob: probability of applying the jitter (0.8).
        grayscale_prob: probability of grayscale (0.2).
        blur_prob: probability of Gaussian blur (0.5).
        blur_sigma: blur sigma range (0.1, 2.0).
        blur_kernel: blur kernel side (odd); 0 picks about 10% of ``crop_size`` (23 at 224, 3 at 32).
        flip_prob: probability of a horizontal flip (0.5).
        mean, std: per-channel normalization.
    """

    crop_size: int = field(default=224, metadata={"min": 8})
    crop_scale: tuple[float, float] = (0.2, 1.0)
    crop_ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)
    jitter_prob: float = field(default=0.8, metadata={"min": 0.0, "max": 1.0})
    grayscale_prob: float = field(default=0.2, metadata={"min": 0.0, "max": 1.0})
    blur_prob: float = field(default=0.5, metadata={"min": 0.0, "max": 1.0})
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    blur_kernel: int = field(default=0, metadata={"min": 0})
    flip_prob: float = field(default=0.5, metadata={"min": 0.0, "max": 1.0})
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def validate(self) -> None:
        lo, hi = self.crop_scale
        if not 0.0 < lo <= hi <= 1.0:
            raise ConfigError(
                f"augment.crop_scale: expected 0 < min <= max <= 1, got {list(self.crop_scale)}"
            )
        if not 0.0 < self.crop_ratio[0] <= self.crop_ratio[1]:
            raise ConfigError(f"augment.crop_ratio: expected 0 < min <= max, got {list(self.crop_ratio)}")
        for name, value in zip(("brightness", "contrast", "saturation"), self.jitter[:3]):
            if value < 0:
                raise ConfigError(f"augment.jitter: {name} must be non-negative, got {value}")
        if not 0.0 <= self.jitter[3] <= 0.5:
            raise ConfigError(f"augment.jitter: hue must be in [0, 0.5], got {self.jitter[3]}")
        if not 0.0 < self.blur_sigma[0] <= self.blur_sigma[1]:
            raise ConfigError(f"augment.blur_sigma: expected 0 < min <= max, got {list(self.blur_sigma)}")
        if self.blur_kernel and self.blur_kernel % 2 == 0:
            raise ConfigError(f"augment.blur_kernel: must be odd (or 0 for auto), got {self.blur_kernel}")
        if any(s <= 0 for s in self.std):
            raise ConfigError(f"augment.std: must be positive, got {list(self.std)}")

    @property
    def kernel_size(self) -> int:
        """The blur kernel side: ``blur_kernel``, or about 10% of the crop and odd (23 at 224)."""
        return self.blur_kernel or max(3, int(0.1 * self.crop_size) // 2 * 2 + 1)


@dataclass
class ModelSection:
    """Encoder, head and MoCo's momentum encoder and queue.

    Attributes:
        backbone: ``resnet18`` or ``resnet50`` (torchvision), ``resnet10``/``resnet34`` (timm's ResNet with
            torchvision's layout), or any timm model name (optionally ``timm:NAME``).
        width: base width of the ResNets (64 is the standard network; smaller values give narrower
            networks for CPU runs, built with timm's ResNet and the same block layout).
        small_stem: 3x3 stride-1 first convolution and no max-pool, for 32 to 64 pixel images (the
            CIFAR variant of ResNet used by solo-learn and SimCLR).
        proj_hidden, proj_dim: the MLP head (MoCo-v2: 2048 and 128).
        momentum: m of the key encoder (MoCo: 0.999).
        momentum_schedule: ``constant`` or ``cosine`` (m rises to ``final_momentum``, BYOL's schedule).
        final_momentum: the end of the cosine schedule.
        bn_splits: BatchNorm sub-batches on a single device (shuffle-BN's effect without several GPUs,
            as MoCo's single-GPU demo; 8 mimics MoCo's 8 GPUs). Ignored under DDP, where BN is per rank
            and keys are shuffled across ranks.
    """

    backbone: str = "resnet50"
    width: int = field(default=64, metadata={"min": 1})
    small_stem: bool = False
    proj_hidden: int = field(default=2048, metadata={"min": 1})
    proj_dim: int = field(default=128, metadata={"min": 1})
    momentum: float = field(default=0.999, metadata={"min": 0.0, "max": 1.0})
    momentum_schedule: Literal["constant", "cosine"] = "constant"
    final_momentum: float = field(default=1.0, metadata={"min": 0.0, "max": 1.0})
    bn_splits: int = field(default=8, metadata={"min": 1})


@dataclass
class LossSection(BaseLossSection):
    """The core's ContrastiveLoss in queue mode (the engine's keys, :class:`hardmix.training.LossSection`).

    Attributes:
        temperature: tau (MoCo-v2: 0.2).
        queue_size: K (MoCo-v2: 65536 on ImageNet-1K; MoCHi: 16384 on ImageNet-100).
        two_queries: each view is also a query: view 2's query against view 1's key, the two losses
            averaged (solo-learn's MoCo V2+ "symmetric" loss); both views' keys enter the queue.
        strategies: a strategy name, a mapping ``{name: ..., **params}`` or a list of them (``none``,
            ``mochi``, ``mixcse``, ``synco``, ...; see ``hardmix strategies``), with a warm-up or ramps
            in steps or epochs (:mod:`hardmix.strategies.schedule`).
        mask_same_sample: give the loss the sample ids, so a queue entry of the query's own image (a
            queue larger than the dataset keeps earlier keys of it) is never a negative.
    """

    temperature: float = field(default=0.2, metadata={"min": MIN_TEMPERATURE})
    strategies: Strategies = "none"
    queue_size: int = field(default=65536, metadata={"min": 1})
    two_queries: bool = False
    mask_same_sample: bool = True

    def validate(self) -> None:
        for i, strategy in enumerate(self.strategies):
            if strategy.in_batch_only:
                raise ConfigError(f"loss.strategies[{i}].{strategy.in_batch_only}: this setting needs "
                                  "in-batch negatives; the vision trainer contrasts against a queue")
            if strategy.direction_argument:  # read by the in-batch loss only: here it would do nothing
                raise ConfigError(f"loss.strategies[{i}].{strategy.direction_argument}: sets the in-batch "
                                  "loss's second direction; the vision trainer's queue loss has none (drop "
                                  "it; loss.two_queries is MoCo v2+'s two-query loss)")


@dataclass
class TrainSection(BaseTrainSection):
    """Optimization, besides the engine's keys (:class:`hardmix.training.TrainSection`).

    Attributes:
        epochs: training epochs (MoCo-v2: 200); ``train.max_steps`` caps them.
        batch_size: the global batch B (split over ranks under DDP); MoCo: 256.
        lr: base learning rate for a batch of 256; the run uses ``lr * B / 256`` (MoCo: 0.03).
        sgd_momentum: SGD momentum (0.9).
        weight_decay: 1e-4 (MoCo).
        schedule: ``cosine`` (MoCo-v2) or ``constant``.
        warmup_epochs: linear learning-rate warm-up (solo-learn: 10).
        seed: the seed of initialization, data order and augmentations.
        channels_last: channels-last tensors on CUDA (ignored on the CPU, where it measured slower for the
            CPU configs' network in fp32 and bf16: ``docs/performance.md``, "bf16 against fp32").
    """

    epochs: int = field(default=200, metadata={"min": 1})
    batch_size: int = field(default=256, metadata={"min": 2})
    lr: float = field(default=0.03, metadata={"gt": 0.0})
    sgd_momentum: float = field(default=0.9, metadata={"min": 0.0, "lt": 1.0})
    weight_decay: float = field(default=1e-4, metadata={"min": 0.0})
    schedule: Literal["cosine", "constant"] = "cosine"
    warmup_epochs: float = field(default=0.0, metadata={"min": 0.0})
    channels_last: bool = True


#: The test scores of the final model ``eval.final_scores`` may ask for.
TEST_SCORES = ("knn_top1", "knn_top5", "linear_top1")


def selection_score(selection: str, labelled: bool) -> str:
    """The score ``eval.selection`` names once ``auto`` is resolved: the k-NN with labels, the label-free
    proxy task without; the k-NN asked for on unlabeled images is refused.

    Example:
        >>> selection_score("auto", True), selection_score("auto", False)
        ('val_knn_top1', 'val_proxy_top1')
    """
    if selection == "auto":
        return "val_knn_top1" if labelled else "val_proxy_top1"
    if selection == "val_knn_top1" and not labelled:
        raise ConfigError("eval.selection: val_knn_top1 needs labelled images (class folders), and "
                          "data.dataset is unlabeled; select on val_proxy_top1 (or auto)")
    return selection


@dataclass
class EvalSection(BaseEvalSection):
    """Model selection on the validation split and the final model's test scores (InstDisc's weighted
    k-NN, Wu et al. 2018, k 200, tau 0.1 as the lightly benchmarks; a linear probe,
    :mod:`hardmix.vision.linear_probe`).

    Attributes:
        eval_steps: score the selection metric on ``data.val_samples``' validation images every this many
            steps (0: at the end only).
        selection: the score that selects the step and tunes: ``val_knn_top1`` (the k-NN top-1 of the
            validation images against the bank of training images; needs labels) or ``val_proxy_top1``
            (label-free: :mod:`hardmix.vision.label_free`); ``auto``: the k-NN with labels, the proxy
            task without.
        label_free_scores: score ``val_proxy_top1``, ``val_alignment`` and ``val_uniformity`` at every
            evaluation even when they do not select (always when they do, or without labels).
        at_end: score it once training ends, then the final model's test scores ``final_scores``.
        final_scores: the test scores of the final model (``results.json`` ``final_scores``, each with
            ``<score>_se``, its binomial standard error in points): ``knn_top1``, ``knn_top5`` (the test
            split against the bank) and ``linear_top1`` (a linear probe trained on the bank's features).
        dataset: the labelled dataset of the test scores (train split as the bank, test/val as queries);
            None: ``data.dataset``. The validation images always come from ``data.dataset``'s training
            split, and are left out of the bank there.
        knn_k, knn_temperature: k and tau.
        knn_train_samples, knn_test_samples: class-balanced subsets of the bank and the test queries.
        linear_epochs: the probe's epochs (None: its recipe's, 100; the milestones scale with it).
        linear_train_samples, linear_test_samples: the probe's own class-balanced subsets (None: the
            k-NN's).
        batch_size: feature extraction batch.
        backend: ``auto`` (faiss when installed), ``faiss`` or ``torch``.
    """

    selection: Literal["auto", "val_knn_top1", "val_proxy_top1"] = "auto"
    label_free_scores: bool = False
    final_scores: list[Literal["knn_top1", "knn_top5", "linear_top1"]] = field(
        default_factory=lambda: list(TEST_SCORES))
    dataset: str | None = None
    knn_k: int = field(default=200, metadata={"min": 1})
    knn_temperature: float = field(default=0.1, metadata={"gt": 0.0})
    knn_train_samples: int | None = field(default=None, metadata={"min": 1})
    knn_test_samples: int | None = field(default=None, metadata={"min": 1})
    linear_epochs: int | None = field(default=None, metadata={"min": 1})
    linear_train_samples: int | None = field(default=None, metadata={"min": 1})
    linear_test_samples: int | None = field(default=None, metadata={"min": 1})
    batch_size: int = field(default=256, metadata={"min": 1})
    backend: Literal["auto", "faiss", "torch"] = "auto"


def check_negatives(cfg: VisionConfig, images: int | None) -> None:
    """The strategies' negatives (MoCHi's N hardest) must exist in the queue once each query's own keys are
    excluded from it (``images``: how many images the run draws from; None: not known, the queue itself)."""
    k = cfg.loss.queue_size
    if images is None:
        cfg.loss.strategies.check_setup(k, f"loss.queue_size={k}")
        return
    views = 2 if cfg.loss.two_queries else 1
    own = views * (math.ceil(k / (views * images)) + 1) if cfg.loss.mask_same_sample else 0
    available = k - min(own, k)
    cfg.loss.strategies.check_setup(available, f"the {available} negatives left when a queue of {k} over "
                                    f"{images} images excludes each query's own keys (up to {own})")


@dataclass
class VisionConfig(TaskConfig):
    """The whole config of ``hardmix train vision`` (sections as attributes; ``log`` and ``output`` are the
    engine's, :class:`hardmix.training.config.TaskConfig`)."""

    output: str = "runs/vision/run"
    data: DataSection = field(default_factory=DataSection)
    augment: AugmentSection = field(default_factory=AugmentSection)
    model: ModelSection = field(default_factory=ModelSection)
    loss: LossSection = field(default_factory=LossSection)
    train: TrainSection = field(default_factory=TrainSection)
    eval: EvalSection = field(default_factory=EvalSection)

    def validate(self) -> None:
        # the strategies' negatives, before any image is read: the queue less the own keys of at most
        # data.max_samples images (the task checks again on the images it has, when they are fewer)
        check_negatives(self, self.data.max_samples)
        if self.model.bn_splits > 1 and self.train.batch_size % self.model.bn_splits:
            raise ConfigError(
                f"model.bn_splits: train.batch_size={self.train.batch_size} is not divisible by "
                f"bn_splits={self.model.bn_splits}"
            )
        e = self.eval
        if e.knn_train_samples is not None and e.knn_train_samples < e.knn_k:
            raise ConfigError(f"eval.knn_k: {e.knn_k} neighbours from a bank of eval.knn_train_samples="
                              f"{e.knn_train_samples} images; lower knn_k or raise knn_train_samples")
        if self.model.momentum_schedule == "cosine" and self.model.final_momentum < self.model.momentum:
            raise ConfigError(
                f"model.final_momentum: {self.model.final_momentum} is below "
                f"model.momentum={self.model.momentum}"
            )
