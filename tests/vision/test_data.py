"""Image folders, class-balanced subsets, the uint8 cache and the per-step batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hardmix.vision.augment import TensorAugment
from hardmix.vision.config import AugmentSection
from hardmix.vision.data import (
    ImageDataError,
    balanced_subset,
    dataset_root,
    decode_images,
    eval_splits,
    load_tensors,
    read_class_list,
    scan_image_folder,
)
from hardmix.vision.pipeline import TensorBatches


def test_balanced_subset_is_balanced_and_seeded():
    labels = torch.arange(10).repeat_interleave(50)
    idx = balanced_subset(labels, 105, seed=0)
    counts = torch.bincount(labels[idx], minlength=10)
    assert idx.numel() == 105 and counts.max() - counts.min() <= 1 and idx.unique().numel() == 105
    assert torch.equal(idx, balanced_subset(labels, 105, seed=0))
    assert not torch.equal(idx, balanced_subset(labels, 105, seed=1))
    # A short class gives all it has; the others make up the difference.
    labels = torch.tensor([0] * 2 + [1] * 20)
    assert torch.bincount(labels[balanced_subset(labels, 10)]).tolist() == [2, 8]


def test_shared_datasets_resolve_under_the_data_root(data_root):
    assert dataset_root("cifar10") == data_root / "images" / "cifar10"
    train, test = eval_splits("imagenette-64")
    assert len(train.paths) == 9469 and len(test.paths) == 3925 and train.classes == test.classes


def test_imagenet100_class_list_selects_and_orders_classes(data_root, tmp_path):
    classes = read_class_list("images/imagenet100-classes.txt")
    assert len(classes) == 100
    for c in classes[:3]:
        (tmp_path / c).mkdir()
        (tmp_path / c / "x.jpg").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="97 class folder"):
        scan_image_folder(tmp_path, classes)
    listing = scan_image_folder(tmp_path, classes[:3])
    assert listing.classes == classes[:3]
    assert all(
        classes.index(Path(p).parent.name) == y for p, y in zip(listing.paths, listing.labels.tolist())
    )


def test_missing_folder_and_empty_class(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        scan_image_folder(tmp_path / "none")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "1.png").write_bytes(b"")
    with pytest.raises(ImageDataError, match="no images in .*: b"):
        scan_image_folder(tmp_path)


def test_decode_cache_and_corrupt_files(cifar_tree, tmp_path):
    listing = scan_image_folder(cifar_tree / "test")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg")
    paths = listing.paths[:5] + [str(bad)]
    with pytest.raises(ImageDataError, match=r"cannot decode image .*bad\.jpg"):
        decode_images(paths)
    images, kept, skipped = decode_images(paths, skip_corrupt=True)
    assert images.shape == (5, 3, 32, 32) and images.dtype == torch.uint8 and kept == [0, 1, 2, 3, 4]
    assert skipped == [str(bad)]
    assert decode_images(paths[:2], resolution=16)[0].shape == (2, 3, 16, 16)
    first = load_tensors(listing, torch.arange(20), cache_dir=str(tmp_path / "cache"))
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 1
    again = load_tensors(listing, torch.arange(20), cache_dir=str(tmp_path / "cache"))
    assert torch.equal(first.images, again.images) and torch.equal(first.labels, listing.labels[:20])


def test_the_decode_cache_follows_the_images_content(tmp_path):
    """An image rewritten in place at its byte size with its mtime put back (an uncompressed BMP: every
    32x32 one has the same size) was once decoded from the cache as it had been: the cache was keyed by
    path, size and mtime. It is keyed by content: the new pixels are decoded, equal to PIL's own."""
    import os

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (tmp_path / "tree" / c).mkdir(parents=True)
        for i in range(2):
            pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "tree" / c / f"{i}.bmp")
    listing = scan_image_folder(tmp_path / "tree")
    cache = str(tmp_path / "cache")
    before = load_tensors(listing, cache_dir=cache)
    target = Path(listing.paths[1])
    st = target.stat()
    pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(target)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_size == st.st_size and target.stat().st_mtime_ns == st.st_mtime_ns
    after = load_tensors(listing, cache_dir=cache)
    assert torch.equal(after.images[1], torch.from_numpy(pixels).permute(2, 0, 1))
    assert not torch.equal(after.images[1], before.images[1])
    assert torch.equal(after.images[[0, 2, 3]], before.images[[0, 2, 3]])
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2


def test_batches_depend_only_on_seed_and_step():
    images = torch.randint(0, 256, (40, 3, 16, 16), dtype=torch.uint8)
    aug = TensorAugment(AugmentSection(crop_size=16))
    a = TensorBatches(images, aug, global_batch=8, seed=3)
    b = TensorBatches(images, aug, global_batch=8, seed=3)
    assert a.steps_per_epoch == 5
    epoch = torch.cat([a.indices(s) for s in range(5)])
    assert sorted(epoch.tolist()) == list(range(40))  # each image once per epoch
    assert not torch.equal(epoch, torch.cat([a.indices(s) for s in range(5, 10)]))
    for x, y in zip(a.batch(7), b.batch(7)):  # b never saw steps 0-6
        assert torch.equal(x, y)
    ranks = [TensorBatches(images, aug, 8, 3, rank=r, world=2) for r in range(2)]
    assert torch.equal(torch.cat([r.indices(7) for r in ranks]), a.indices(7))


def test_pil_batches_do_not_depend_on_workers_or_start(cifar_tree):
    from hardmix.vision.augment import pil_transform
    from hardmix.vision.pipeline import PilBatches

    listing = scan_image_folder(cifar_tree / "test")
    transform = pil_transform(AugmentSection(crop_size=24))
    inline = PilBatches(listing.paths, transform, global_batch=10, seed=1, workers=0)
    workers = PilBatches(listing.paths, transform, global_batch=10, seed=1, workers=1)
    a = list(inline.iterate(0, 3))
    b = list(workers.iterate(2, 3))  # starts at step 2, as a resumed run does
    assert a[2][0].shape == (10, 3, 24, 24) and not torch.equal(a[2][0], a[2][1])
    for x, y in zip(a[2], b[0]):
        assert torch.equal(x, y)
    assert torch.equal(a[2][2], inline.indices(2))


def test_eval_splits_follow_a_class_list(cifar_tree, tmp_path):
    from hardmix.config.loader import build_config
    from hardmix.vision.config import VisionConfig
    from hardmix.vision.evaluation import training_classes

    listing = tmp_path / "classes.txt"
    listing.write_text("ship\n# a comment\ncat\n")
    cfg = build_config(VisionConfig, {"data": {"dataset": str(cifar_tree), "class_list": str(listing)}})
    classes = training_classes(cfg, str(cifar_tree))
    assert classes == ["ship", "cat"] and training_classes(cfg, "cifar10") is None
    train, test = eval_splits(str(cifar_tree), classes=classes)
    assert train.classes == test.classes == ["ship", "cat"]
    assert len(train.paths) == 64 and len(test.paths) == 20 and set(train.labels.tolist()) == {0, 1}
