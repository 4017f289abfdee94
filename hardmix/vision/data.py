"""Image folders: finding them, class-balanced subsets, and the decoded uint8 tensor cache.

Labelled datasets are ImageFolder trees (``<split>/<class>/<image>``). ``cifar10``, ``imagenette-64`` and
``imagenette`` (the 160 px release) name folders under the data root (``hardmix data download NAME``
fetches them); anything else is a path (relative paths also resolve under the data
root). ImageNet-100 is a class-list file over an ImageNet folder.

An unlabeled dataset is any folder of images without class folders, flat or nested: a folder that holds
images at its top level (or any folder with ``data.labels: false``) is unlabeled, and every image below it
counts; a folder of sub-folders alone is a labelled one, its sub-folders the classes (:func:`is_labelled`).
Images at the top beside sub-folders of images, ``data.labels`` unset, are refused (class folders or nested
photos?), saying how to choose.
Its :class:`ImageList` has no classes and every label 0, so the class-balanced draws below are plain
random draws, and the same scan, cache, corrupt-file rules and validation carve-out apply.

The tensor cache decodes every selected image once (PIL, in threads) into a (N, 3, H, W) uint8 tensor
and keeps it on disk, keyed by the files' paths, sizes and modification times, so later runs (and the
k-NN monitor) skip decoding. A file that cannot be decoded stops the run with an error naming it, or,
with ``skip_corrupt``, is left out and counted.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from hardmix.datasets.paths import data_root_path, missing_hint, resolve_data_path
from hardmix.vision.folders import (
    IMG_EXTENSIONS,
    FolderScanError,
    class_folders,
    has_top_level_images,
    image_subfolders,
    list_all_images,
    list_images,
)
from hardmix.vision.images import ImageModeError, open_rgb

KNOWN_DATASETS = {
    "cifar10": "images/cifar10", "imagenette-64": "images/imagenette-64", "imagenette": "images/imagenette",
}
EVAL_SPLITS = ("test", "val")


class ImageDataError(ValueError):
    """An image folder is unusable (an empty class, an undecodable image, mixed image sizes)."""


@dataclass
class ImageList:
    """The images of one split: paths, integer labels and class names (sorted, or the class list's order);
    an unlabeled split has no classes and every label 0."""

    folder: Path
    paths: list[str]
    labels: Tensor
    classes: list[str]

    @property
    def labelled(self) -> bool:
        """Whether the images carry classes (class folders)."""
        return bool(self.classes)


@dataclass
class ImageTensors:
    """Decoded images of a split.

    Attributes:
        images: (N, 3, H, W) uint8.
        labels: (N,) int64 class indices.
        classes: class names.
        skipped: paths left out because they could not be decoded.
    """

    images: Tensor
    labels: Tensor
    classes: list[str]
    skipped: list[str] = field(default_factory=list)


def dataset_root(name: str, key: str = "data.dataset") -> Path:
    """The root folder of a dataset name (``cifar10``, ``imagenette-64``) or path; FileNotFoundError naming
    ``key`` when it does not exist."""
    if name in KNOWN_DATASETS:
        path = data_root_path() / KNOWN_DATASETS[name]
    else:
        path = resolve_data_path(name)
    if not path.is_dir():
        raise FileNotFoundError(f"{key}: image folder {path} does not exist{missing_hint(path)}")
    return path


def split_folder(root: Path, split: str | Sequence[str], key: str = "data.dataset") -> Path:
    """``root/split`` (the first that exists when several are given); a root that directly holds class
    folders, or images at its top level, serves as its own training split."""
    names = [split] if isinstance(split, str) else list(split)
    for name in names:
        if (root / name).is_dir():
            return root / name
    if isinstance(split, str) and (not any((root / n).is_dir() for n in ("train", *EVAL_SPLITS))
                                   or has_top_level_images(root)):
        return root
    raise FileNotFoundError(f"{key}: {root} has no {' or '.join(repr(n) for n in names)} folder")


def read_class_list(path: str | os.PathLike[str], key: str = "data.class_list") -> list[str]:
    """Class folder names, one per line (blank lines and ``#`` comments ignored)."""
    p = resolve_data_path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{key}: class list {p} does not exist{missing_hint(p)}")
    names = [ln.split("#", 1)[0].strip() for ln in p.read_text(encoding="utf-8").splitlines()]
    names = [n for n in names if n]
    if not names:
        raise ImageDataError(f"{key}: class list {p} is empty")
    return names


def scan_image_folder(
    folder: Path, classes: list[str] | None = None, key: str = "data.dataset", labels: bool | None = None
) -> ImageList:
    """List the images of a split: an ImageFolder split (every class must have an image), or an unlabeled
    folder (every image below it, no classes).

    Args:
        folder: the split folder (one sub-folder per class, or images at any depth).
        classes: restrict to these class folders, in this order (ImageNet-100); None: all, sorted.
        key: the config key named in errors.
        labels: ``data.labels``: True, class folders; False, unlabeled; None, unlabeled when ``folder``
            holds images at its top level (:func:`hardmix.vision.folders.has_top_level_images`).

    Example:
        >>> import tempfile
        >>> from PIL import Image
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "trip").mkdir()
        >>> for name in ("a.png", "trip/b.png"):
        ...     Image.new("RGB", (4, 4)).save(root / name)
        >>> scan_image_folder(root)
        Traceback (most recent call last):
        ...
        hardmix.vision.data.ImageDataError: data.dataset: ... holds both images at its top level and ...
        >>> flat = scan_image_folder(root, labels=False)
        >>> flat.labelled, len(flat.paths), flat.labels.tolist()
        (False, 2, [0, 0])
        >>> scan_image_folder(root, labels=True)
        Traceback (most recent call last):
        ...
        hardmix.vision.data.ImageDataError: data.labels: true, but ... holds images at its top level, ...
    """
    if not folder.is_dir():
        raise FileNotFoundError(f"{key}: image folder {folder} does not exist")
    top_images = has_top_level_images(folder)
    if labels is None and classes is None and top_images:
        _refuse_mixed(folder, key)
    if labels is False or (labels is None and classes is None and top_images):
        if classes is not None:
            raise ImageDataError("data.class_list: selects class folders, but data.labels is false (the "
                                 "images are unlabeled); drop one of them")
        return _scan_unlabeled(folder, key)
    if top_images:
        raise _top_level_images(folder, "data.labels: true" if labels else "data.class_list selects class "
                                "folders")
    if classes is None:
        classes = class_folders(folder)
        if not classes:
            raise FileNotFoundError(f"{key}: {folder} has no class folders (Couldn't find any class folder "
                                    f"in {folder}.)")
    else:
        missing = [c for c in classes if not (folder / c).is_dir()]
        if missing:
            raise FileNotFoundError(
                f"{key}: {len(missing)} class folder(s) of the class list are missing in {folder}: "
                f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
            )
    try:
        samples = list_images(folder, classes, key)
    except FolderScanError as e:
        raise ImageDataError(str(e)) from None
    counts = np.bincount([t for _, t in samples], minlength=len(classes))
    empty = [classes[i] for i in np.flatnonzero(counts == 0)]
    if empty:
        raise ImageDataError(
            f"{key}: class folder(s) with no images in {folder}: {', '.join(empty[:5])}"
            f" (extensions: {', '.join(IMG_EXTENSIONS)})"
        )
    paths = [p for p, _ in samples]
    targets = torch.tensor([t for _, t in samples], dtype=torch.long)
    return ImageList(folder, paths, targets, list(classes))


def _top_level_images(folder: Path, why: str) -> ImageDataError:
    return ImageDataError(f"{why}, but {folder} holds images at its top level, outside any class folder; "
                          "move them into class folders, or set data.labels: false to use every image "
                          "unlabeled")


def _refuse_mixed(folder: Path, key: str) -> None:
    """A folder holding images at its top level and sub-folders of images, ``data.labels`` unset: are the
    sub-folders classes, or nested unlabeled images? Refused, saying how to choose (never guessed)."""
    subs = image_subfolders(folder)
    if subs:
        raise ImageDataError(
            f"{key}: {folder} holds both images at its top level and sub-folders of images "
            f"({', '.join(subs[:3])}{' ...' if len(subs) > 3 else ''}): class folders or nested unlabeled "
            "images? Set data.labels: false to use every image below it unlabeled, or move the top-level "
            "images into class folders (data.labels: true)")


def check_labels(dataset: str, split: str, labels: bool | None, class_list: bool = False) -> None:
    """Before any work: ``data.labels: true`` over a folder holding images at its top level is refused
    (those images would belong to no class), and so is a folder holding both images at its top level and
    sub-folders of images with ``data.labels`` unset (:func:`_refuse_mixed`); nothing else is read."""
    if labels is not False and dataset not in KNOWN_DATASETS:
        folder = split_folder(dataset_root(dataset), split)
        if has_top_level_images(folder):
            if labels:
                raise _top_level_images(folder, "data.labels: true")
            if not class_list:  # a class list is refused by the scan, naming it
                _refuse_mixed(folder, "data.dataset")


def _scan_unlabeled(folder: Path, key: str) -> ImageList:
    try:
        paths = list_all_images(folder, key)
    except FolderScanError as e:
        raise ImageDataError(str(e)) from None
    if not paths:
        raise ImageDataError(f"{key}: {folder} holds no images (extensions: {', '.join(IMG_EXTENSIONS)})")
    return ImageList(folder, paths, torch.zeros(len(paths), dtype=torch.long), [])


def is_labelled(dataset: str, split: str = "train", labels: bool | None = None) -> bool:
    """Whether ``dataset``'s training split has class folders: ``labels`` when given (``data.labels``),
    True for the named datasets, else False when the split holds images at its top level. A folder that
    does not exist (yet) counts as labelled: the run's checks name it before any work.

    Example:
        >>> is_labelled("cifar10"), is_labelled("some/folder", labels=False)
        (True, False)
    """
    if labels is not None:
        return labels
    if dataset in KNOWN_DATASETS:
        return True
    try:
        folder = split_folder(dataset_root(dataset), split)
    except FileNotFoundError:
        return True
    return not has_top_level_images(folder)


def balanced_subset(labels: Tensor, n: int, seed: int = 0) -> Tensor:
    """Indices of a class-balanced subset of ``n`` items (sorted): n // C per class, the remainder spread
    one each over the first classes, chosen at random with ``seed``; a class with too few items gives all
    it has and the others make up the difference.

    Example:
        >>> balanced_subset(torch.tensor([0, 0, 0, 1, 1, 1]), 4).tolist()
        [0, 2, 4, 5]
    """
    classes = torch.unique(labels)
    if n >= labels.numel():
        return torch.arange(labels.numel())
    g = torch.Generator().manual_seed(seed)
    pools = [torch.nonzero(labels == c).squeeze(1) for c in classes]
    pools = [p[torch.randperm(p.numel(), generator=g)] for p in pools]
    quota = [0] * len(pools)
    left = n
    while left > 0:
        open_ = [i for i, p in enumerate(pools) if quota[i] < p.numel()]
        share, extra = divmod(left, len(open_))
        for j, i in enumerate(open_):
            take = min(share + (1 if j < extra else 0), pools[i].numel() - quota[i])
            quota[i] += take
            left -= take
    return torch.sort(torch.cat([p[:q] for p, q in zip(pools, quota)])).values


def validation_split(
    labels: Tensor, n: int, seed: int, max_samples: int | None = None, where: str = "the training split"
) -> tuple[Tensor, Tensor]:
    """Carve a class-balanced validation set of ``n`` images out of the training images.

    The validation images are drawn first, with :func:`balanced_subset` (its seed derived from ``seed``, so
    the draw does not repeat the ``max_samples`` subset's), and every class keeps at least one training
    image; the training images (and ``data.max_samples``' subset of them) come from the rest, so no
    validation image is ever trained on.

    Args:
        labels: (N,) class index of each usable training image.
        n: validation images (``data.val_samples``).
        seed: ``data.subset_seed`` (the split is the same for every training seed).
        max_samples: ``data.max_samples``: the rest must hold that many images.
        where: the folder, for errors.

    Returns:
        (validation positions (n,), remaining positions (N - n,)), both sorted, into ``labels``.

    Raises:
        ImageDataError: naming ``data.val_samples`` (and ``data.max_samples``) when the split cannot be
            carved.

    Example:
        >>> val, rest = validation_split(torch.tensor([0, 0, 0, 1, 1, 1]), 2, seed=0)
        >>> len(val), len(rest), sorted(torch.tensor([0, 0, 0, 1, 1, 1])[val].tolist())
        (2, 4, [0, 1])
    """
    total = labels.numel()
    counts = torch.bincount(labels)
    smallest = int(counts[counts > 0].min()) if total else 0
    classes = int((counts > 0).sum())
    # balanced_subset gives each class n // C or one more; every class must keep one training image
    if n >= total or -(-n // max(1, classes)) >= smallest:
        raise ImageDataError(
            f"data.val_samples: {n} validation images leave a class of {where} without a training image "
            f"({total} images, {classes} classes, the smallest has {smallest}); lower data.val_samples"
            + (f" or data.max_samples ({max_samples})" if max_samples is not None else "")
        )
    if max_samples is not None and total - n < max_samples:
        raise ImageDataError(
            f"data.val_samples: {n} validation images and data.max_samples: {max_samples} training images "
            f"need {n + max_samples} images; {where} has {total}: lower one of them"
        )
    val = balanced_subset(labels, n, derive_seed(seed, 0x5A1))
    keep = torch.ones(total, dtype=torch.bool)
    keep[val] = False
    return val, torch.nonzero(keep).squeeze(1)


def _decode(path: str, resolution: int | None) -> np.ndarray:
    im = open_rgb(path)
    if resolution is not None:
        from torchvision.transforms import functional as TF

        im = TF.center_crop(TF.resize(im, resolution), [resolution, resolution])
    return np.asarray(im)


def decode_images(
    paths: Sequence[str],
    resolution: int | None = None,
    skip_corrupt: bool = False,
    workers: int = 4,
    key: str = "data",
    skip_hint: str | None = None,
) -> tuple[Tensor, list[int], list[str]]:
    """Decode images into one uint8 tensor.

    Args:
        paths: image files.
        resolution: resize the shorter side and center-crop to this square; None keeps the stored size
            (all images must then share it).
        skip_corrupt: leave undecodable files out (else raise ImageDataError naming the file).
        workers: decoding threads (PIL releases the GIL while decoding).
        key: the config section or option named in errors.
        skip_hint: how to ask for ``skip_corrupt`` where this is called (default ``set {key}.skip_corrupt:
            true``; the command line says ``pass --skip-corrupt``).

    Returns:
        (images (N, 3, H, W) uint8, indices of ``paths`` kept, skipped paths).
    """
    from hardmix.vision.images import decode_errors

    def one(path: str) -> np.ndarray | Exception:
        try:
            return _decode(path, resolution)
        except decode_errors() as e:
            return e

    from tqdm.auto import tqdm

    with ThreadPoolExecutor(max(1, workers)) as pool:
        arrays = list(tqdm(pool.map(one, paths, chunksize=256), total=len(paths), desc=f"decode {key}",
                           unit="img", file=sys.stderr, leave=False, dynamic_ncols=True,
                           disable=len(paths) < 2000))
    kept, skipped, out = [], [], []
    shape = None
    for i, (path, arr) in enumerate(zip(paths, arrays)):
        if isinstance(arr, Exception):
            if isinstance(arr, ImageModeError) and not skip_corrupt:
                raise ImageDataError(f"{arr} ({skip_hint or f'set {key}.skip_corrupt: true'} to skip such "
                                     "files)")
            if not skip_corrupt:
                raise ImageDataError(
                    f"cannot decode image {path}: {arr} ({skip_hint or f'set {key}.skip_corrupt: true'} to "
                    "skip such files)"
                )
            skipped.append(path)
            continue
        if shape is None:
            shape = arr.shape
        elif arr.shape != shape:
            raise ImageDataError(
                f"{key}.cache_resolution: images differ in size ({shape[1]}x{shape[0]} and {arr.shape[1]}x"
                f"{arr.shape[0]} in {path}); set a cache_resolution or use pipeline: pil"
            )
        kept.append(i)
        out.append(arr)
    if not out:
        raise ImageDataError(f"{key}: no image could be decoded ({len(skipped)} skipped)")
    images = torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).contiguous()
    return images, kept, skipped


def default_cache_dir() -> Path:
    """``vision/`` in the machine's cache folder (:func:`hardmix.training.fingerprint.cache_folder`)."""
    from hardmix.training.fingerprint import cache_folder

    return cache_folder() / "vision"


def _cache_key(paths: Sequence[str], resolution: int | None, skip_corrupt: bool) -> str:
    """The decoded tensors' cache name: the images' contents in order (each file's SHA-256, read once per
    machine while it stays the same: :func:`hardmix.training.fingerprint.content_digests`), the resolution
    and the corrupt-file rule. An image rewritten in place, even at its size and mtime, is another key."""
    from hardmix.training.fingerprint import content_digests

    h = hashlib.sha1()
    h.update(json.dumps([3, resolution, skip_corrupt]).encode())  # 3: keyed by content
    for digest in content_digests(paths):
        h.update(f"{digest}\n".encode())
    return h.hexdigest()[:24]


def load_tensors(
    images: ImageList,
    indices: Tensor | None = None,
    resolution: int | None = None,
    cache_dir: str | None = None,
    skip_corrupt: bool = False,
    workers: int = 4,
    key: str = "data",
    skip_hint: str | None = None,
) -> ImageTensors:
    """Decode the selected images of a split (through the on-disk cache).

    Args:
        images: the split.
        indices: which of its images (None: all).
        resolution: see :func:`decode_images`.
        cache_dir: cache folder; None: :func:`default_cache_dir`; "" disables the cache.
        skip_corrupt, workers, key, skip_hint: see :func:`decode_images`.
    """
    from hardmix.utils.confine import save_torch

    idx = torch.arange(len(images.paths)) if indices is None else indices
    paths = [images.paths[i] for i in idx.tolist()]
    labels = images.labels[idx]
    cache_file = None
    if cache_dir != "":
        folder = Path(cache_dir) if cache_dir else default_cache_dir()
        try:
            cache_file = folder / f"{_cache_key(paths, resolution, skip_corrupt)}.pt"
        except OSError:  # an unreadable image: decoding names it (or skips it)
            cache_file = None
        if cache_file is not None and cache_file.is_file():
            try:
                blob = torch.load(cache_file, map_location="cpu", weights_only=True)
                return ImageTensors(
                    blob["images"], labels[blob["kept"]], images.classes, list(blob["skipped"])
                )
            except Exception:  # noqa: BLE001 (a damaged cache is rebuilt)
                pass
    data, kept, skipped = decode_images(paths, resolution, skip_corrupt, workers, key, skip_hint)
    kept_t = torch.tensor(kept, dtype=torch.long)
    if cache_file is not None:
        try:
            save_torch({"images": data, "kept": kept_t, "skipped": skipped}, cache_file, folder)
        except OSError:
            pass  # a read-only cache folder only costs the next run its decoding
    return ImageTensors(data, labels[kept_t], images.classes, skipped)


def eval_splits(
    dataset: str, key: str = "--dataset", classes: list[str] | None = None
) -> tuple[ImageList, ImageList]:
    """The (train, test-or-val) splits of a labelled dataset, with the same classes (``classes``: only
    these class folders, as ImageNet-100 over an ImageNet folder)."""
    root = dataset_root(dataset, key)
    train = scan_image_folder(split_folder(root, ["train"], key), classes=classes, key=key)
    test_folder = split_folder(root, list(EVAL_SPLITS), key)
    if classes is None:  # every class of the test split is evaluated: none may be left out silently
        unseen = [c for c in class_folders(test_folder) if c not in train.classes]
        if unseen:
            raise ImageDataError(
                f"{key}: {test_folder} has {len(unseen)} class folder(s) the training split lacks "
                f"({', '.join(unseen[:5])}{' ...' if len(unseen) > 5 else ''}): their images could not be "
                "scored against training images; remove them or give both splits the same classes"
            )
    test = scan_image_folder(test_folder, classes=train.classes, key=key)
    return train, test


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers (NumPy's SeedSequence), for independent per-step generators."""
    state = np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def step_generator(*parts: int) -> torch.Generator:
    """A CPU generator seeded from ``parts`` (seed, step, rank, purpose)."""
    return torch.Generator().manual_seed(derive_seed(*parts))
