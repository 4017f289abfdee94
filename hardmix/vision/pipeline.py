"""Training batches of two augmented views: the tensor fast path and torchvision's PIL path.

Both are pure functions of (seed, step): the epoch's order is a permutation drawn from
``(seed, epoch)``, and each step's augmentations from ``(seed, step, rank)``. A run resumed at step s
therefore sees exactly the batches an uninterrupted run sees, with no generator state to restore.
Under DDP the global batch of each step is cut into equal slices, one per rank.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from hardmix.vision.augment import TensorAugment, pil_transform
from hardmix.vision.config import VisionConfig
from hardmix.vision.data import (
    ImageDataError,
    ImageList,
    balanced_subset,
    dataset_root,
    decode_images,
    load_tensors,
    read_class_list,
    scan_image_folder,
    split_folder,
    step_generator,
    validation_split,
)

Batch = tuple[Tensor, Tensor, Tensor]  # view 1 (b, 3, S, S), view 2, sample ids (b,)


def epoch_order(n: int, seed: int, epoch: int) -> Tensor:
    """The permutation of the n training images in ``epoch``."""
    return torch.randperm(n, generator=step_generator(seed, epoch, 0, 0))


class Batches:
    """The order of the training set: which sample ids this rank trains on at each step.

    Args:
        n: N training images.
        global_batch: B over all ranks (the last incomplete batch of an epoch is dropped).
        seed: the training seed.
        rank, world: this process's slice of each global batch.
    """

    def __init__(self, n: int, global_batch: int, seed: int, rank: int = 0, world: int = 1) -> None:
        self.n = n
        self.global_batch = global_batch
        self.local_batch = global_batch // world
        self.seed, self.rank = seed, rank
        self.steps_per_epoch = n // global_batch
        self._order: tuple[int, Tensor] | None = None

    def indices(self, step: int) -> Tensor:
        """Sample ids (positions in the training set) of this rank's slice of ``step``'s batch."""
        epoch, i = divmod(step, self.steps_per_epoch)
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, epoch_order(self.n, self.seed, epoch))
        rows = self._order[1][i * self.global_batch : (i + 1) * self.global_batch]
        return rows[self.rank * self.local_batch : (self.rank + 1) * self.local_batch]

    def batch(self, step: int) -> Batch:
        return next(iter(self.iterate(step, step + 1)))

    def iterate(self, start: int, end: int) -> Iterator[Batch]:
        raise NotImplementedError


class TensorBatches(Batches):
    """Batches from the uint8 cache, augmented batched on its device (see :mod:`hardmix.vision.augment`).

    Args:
        images: (N, 3, H, W) uint8 (moved to ``device`` once).
        augment: the batched augmentation.
        device: where the cache lives and the views are made.
        Others as :class:`Batches`.
    """

    def __init__(
        self,
        images: Tensor,
        augment: TensorAugment,
        global_batch: int,
        seed: int,
        rank: int = 0,
        world: int = 1,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(images.shape[0], global_batch, seed, rank, world)
        self.images = images.to(device)
        self.augment = augment

    def batch(self, step: int) -> Batch:
        ids = self.indices(step)
        x = self.images[ids.to(self.images.device, non_blocking=True)]  # staged at once: no wait
        g = step_generator(self.seed, step, self.rank, 1)
        return self.augment(x, g), self.augment(x, g), ids

    def iterate(self, start: int, end: int) -> Iterator[Batch]:
        for step in range(start, end):
            yield self.batch(step)


def undecodable(path: str, error: BaseException) -> ImageDataError:
    """The one-line error of an image file the PIL pipeline cannot open or decode."""
    return ImageDataError(f"cannot decode image {path}: {error} (set data.skip_corrupt: true)")


class _TwoViews(torch.utils.data.Dataset):
    """Two views of one image, seeded per (sample, step) so that workers do not change the result."""

    def __init__(self, paths: list[str], transform) -> None:  # noqa: ANN001 (a torchvision Compose)
        self.paths = paths
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, item: tuple[int, int]) -> Batch:
        from hardmix.vision.images import decode_errors, open_rgb

        index, seed = item
        path = self.paths[index]
        try:
            img = open_rgb(path)
        except decode_errors() as e:
            raise undecodable(path, e) from e
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.transform(img), self.transform(img), torch.tensor(index)


class _StepSampler(torch.utils.data.Sampler):
    def __init__(self, owner: PilBatches, start: int, end: int) -> None:
        self.owner, self.start, self.end = owner, start, end

    def __len__(self) -> int:
        return self.end - self.start

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        o = self.owner
        for step in range(self.start, self.end):
            ids = o.indices(step)
            g = step_generator(o.seed, step, o.rank, 2)
            seeds = torch.randint(0, 2**62, (ids.numel(),), generator=g)
            yield list(zip(ids.tolist(), seeds.tolist()))


class PilBatches(Batches):
    """Batches decoded and augmented per image by torchvision's PIL transforms in DataLoader workers.

    Args:
        paths: the training images.
        transform: the per-image transform (:func:`hardmix.vision.augment.pil_transform`).
        workers: DataLoader worker processes.
        pin_memory: pin batches for a CUDA copy.
        Others as :class:`Batches`.
    """

    def __init__(
        self,
        paths: list[str],
        transform,
        global_batch: int,
        seed: int,  # noqa: ANN001
        rank: int = 0,
        world: int = 1,
        workers: int = 4,
        pin_memory: bool = False,
    ) -> None:
        super().__init__(len(paths), global_batch, seed, rank, world)
        self.dataset = _TwoViews(paths, transform)
        self.workers = workers
        self.pin_memory = pin_memory

    def iterate(self, start: int, end: int) -> Iterator[Batch]:
        loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_sampler=_StepSampler(self, start, end),
            num_workers=self.workers,
            pin_memory=self.pin_memory,
            persistent_workers=False,
        )
        yield from loader


@dataclass
class TrainData:
    """The training set as the trainer sees it.

    Attributes:
        batches: :class:`TensorBatches` or :class:`PilBatches`.
        num_samples: N (after the subset and skipped files).
        classes: class names (unused by training; kept for the record).
        pipeline: ``tensor`` or ``pil``.
        skipped: undecodable files left out.
        split: the scanned training split.
        val_indices: the sorted indices into ``split`` of the validation images (``data.val_samples``),
            never trained on.
    """

    batches: Batches
    num_samples: int
    classes: list[str]
    pipeline: str
    skipped: list[str] = field(default_factory=list)
    split: ImageList | None = None
    val_indices: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))


def train_image_list(cfg: VisionConfig, exclude: frozenset[int] = frozenset()) -> tuple[ImageList, Tensor]:
    """The training split and the indices of the (subset of) images used.

    Args:
        cfg: the run's config (``data.dataset``, ``train_split``, ``class_list``, ``val_samples``,
            ``max_samples``, ``subset_seed``).
        exclude: indices of the split left out before the subset is drawn (undecodable files).

    Returns:
        (the whole split, the sorted indices (N,) of the images to train on; ``data.val_samples``'
        validation images are never among them).
    """
    images, train, _ = train_val_image_list(cfg, exclude)
    return images, train


def train_val_image_list(
    cfg: VisionConfig, exclude: frozenset[int] = frozenset()
) -> tuple[ImageList, Tensor, Tensor]:
    """The training split, the sorted indices of its images to train on and of its validation images
    (empty without ``data.val_samples``; see :func:`hardmix.vision.data.validation_split`)."""
    d = cfg.data
    root = dataset_root(d.dataset)
    folder = split_folder(root, d.train_split)
    classes = read_class_list(d.class_list) if d.class_list else None
    images = scan_image_folder(folder, classes, labels=d.labels)
    train, val = _draw_subset(cfg, images, exclude)
    return images, train, val


def _draw_subset(cfg: VisionConfig, images: ImageList, exclude: frozenset[int]) -> tuple[Tensor, Tensor]:
    """(training indices, validation indices) of the split, ``exclude`` left out of both."""
    usable = torch.tensor([i for i in range(len(images.paths)) if i not in exclude], dtype=torch.long)
    d = cfg.data
    val = torch.zeros(0, dtype=torch.long)
    if d.val_samples and not images.labelled and d.val_samples >= usable.numel():
        raise ImageDataError(f"data.val_samples: {d.val_samples} validation images of the {usable.numel()} "
                             f"usable images in {images.folder} leave none to train on; lower "
                             "data.val_samples")
    if d.val_samples:
        val_pos, rest = validation_split(images.labels[usable], d.val_samples, d.subset_seed, d.max_samples,
                                         str(images.folder))
        usable, val = usable[rest], usable[val_pos]
    if d.max_samples is None:
        return usable, val
    return usable[balanced_subset(images.labels[usable], d.max_samples, d.subset_seed)], val


def _choose_pipeline(cfg: VisionConfig, images: ImageList, idx: Tensor) -> str:
    if cfg.data.pipeline != "auto":
        return cfg.data.pipeline
    res = cfg.data.cache_resolution
    if res is None:
        from PIL import Image

        from hardmix.vision.images import decode_errors

        first = images.paths[int(idx[0])]
        try:
            with Image.open(first) as im:
                w, h = im.size
        except decode_errors() as e:
            raise undecodable(first, e) from None
    else:
        w = h = res
    return "tensor" if idx.numel() * 3 * w * h <= cfg.data.cache_max_gb * 2**30 else "pil"


def _check_headers(paths: list[str]) -> None:
    """Every image the PIL pipeline will decode during training opens and has a mode it converts: read
    from the headers before the first step (the tensor pipeline decodes every image before it)."""
    from hardmix.vision.images import ImageModeError, check_header, decode_errors

    for path in paths:
        try:
            check_header(path)
        except ImageModeError as e:
            raise ImageDataError(f"{e} (set data.skip_corrupt: true to skip such files)") from None
        except decode_errors() as e:
            raise undecodable(path, e) from None


def build_train_data(cfg: VisionConfig, device: torch.device, rank: int = 0, world: int = 1) -> TrainData:
    """Scan, subset and (tensor path) decode the training images; every data error is raised here,
    before training starts.

    With ``data.skip_corrupt`` undecodable images are dropped before the subset and the batches are
    drawn: with ``data.max_samples`` every image of the split is decoded once (at 16 pixels) to find them,
    and the subset is drawn from the others, so it holds ``max_samples`` images whenever the split has
    that many good ones.
    """
    d = cfg.data
    b = cfg.train.batch_size
    if b % world:
        raise ImageDataError(f"train.batch_size: {b} is not divisible by the {world} processes")
    images, idx, val = train_val_image_list(cfg)
    bad: list[str] = []
    if d.skip_corrupt and d.max_samples is not None:
        _, _, bad = decode_images(images.paths, 16, True, d.num_workers)
        position = {path: i for i, path in enumerate(images.paths)}
        idx, val = _draw_subset(cfg, images, frozenset(position[path] for path in bad))
    pipeline = _choose_pipeline(cfg, images, idx)
    paths = [images.paths[i] for i in idx.tolist()]
    if pipeline == "tensor":
        tensors = load_tensors(images, idx, d.cache_resolution, d.cache_dir, d.skip_corrupt, d.num_workers)
        batches: Batches = TensorBatches(
            tensors.images, TensorAugment(cfg.augment), b, cfg.train.seed, rank, world, device
        )
        bad += tensors.skipped
    else:
        if d.skip_corrupt and d.max_samples is None:
            _, kept, bad = decode_images(paths, 16, True, d.num_workers)
            paths = [paths[i] for i in kept]
        elif not d.skip_corrupt:
            _check_headers(paths)
        batches = PilBatches(
            paths,
            pil_transform(cfg.augment),
            b,
            cfg.train.seed,
            rank,
            world,
            d.num_workers,
            pin_memory=device.type == "cuda",
        )
    if batches.steps_per_epoch < 1:
        raise ImageDataError(
            f"train.batch_size: {batches.n} training images do not fill one batch of {b} (data.max_samples?)"
        )
    return TrainData(batches, batches.n, images.classes, pipeline, bad, images, val)
