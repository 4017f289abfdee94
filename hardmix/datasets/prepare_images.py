"""Preparing the image data sets into the ImageFolder layout the vision trainer reads.

- ``cifar10``: the python release is extracted, every member checked against torchvision's MD5s, read
  with ``torchvision.datasets.CIFAR10`` and written as lossless PNG: ``train/<class>/<index>.png``
  (50,000) and ``test/<class>/<index>.png`` (10,000), plus ``classes.txt``.
- ``imagenette``: the official 160 px release (shorter side 160) keeps its ``train/`` and ``val/``
  folders (WordNet ids as class folders), plus ``classes.tsv`` (id and name) and the release's
  ``noisy_imagenette.csv``.
- ``imagenette-64``: every Imagenette image resized so its shorter side is 64, center-cropped to 64x64
  (bicubic, PIL) and saved as JPEG quality 90, under the same relative path.

Each function builds its result at ``out`` (a temporary folder that the caller renames into place).
torchvision and PIL are imported only here (the core imports neither at import time).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hardmix.datasets.archives import find_dir_with
from hardmix.utils.confine import copy_file, extract_archive, makedirs, replace, save_image, write_text

#: Imagenette's classes: WordNet id and name (the release's class folders, in sorted order).
IMAGENETTE_CLASSES = {
    "n01440764": "tench", "n02102040": "English springer", "n02979186": "cassette player",
    "n03000684": "chain saw", "n03028079": "church", "n03394916": "French horn",
    "n03417042": "garbage truck", "n03425413": "gas pump", "n03445777": "golf ball",
    "n03888257": "parachute",
}


def _check_members(base: Path, members: dict[str, str]) -> None:
    from torchvision.datasets.utils import check_integrity

    for rel, md5 in members.items():
        if not check_integrity(str(base / rel), md5):
            raise ValueError(f"{base / rel}: missing or its md5 is not {md5} (damaged archive: delete it and "
                             "download again)")


def prepare_cifar10(
    archive: Path, out: Path, work: Path, members: dict[str, str], root: Path, progress: bool = True
) -> int:
    """Extract CIFAR-10's python release and write it as PNG images under ``out``. Returns the image count.

    Args:
        archive: ``cifar-10-python.tar.gz``.
        out: the folder to create (``train/``, ``test/``, ``classes.txt``).
        work: an empty scratch folder.
        members: ``{path in the archive: md5}`` (the registry's, torchvision's own).
        progress: show a tqdm bar.
    """
    from PIL import Image
    from torchvision.datasets import CIFAR10
    from tqdm.auto import tqdm

    extract_archive(archive, work, root)
    _check_members(work, members)
    names = {Path(k).name: v for k, v in members.items()}
    folder = Path(next(iter(members))).parent.as_posix()
    batches = [[n, m] for n, m in names.items() if n != "batches.meta"]

    class _Release(CIFAR10):  # torchvision's reader, checking the registry's member checksums
        base_folder = folder
        train_list = [b for b in batches if b[0] != "test_batch"]
        test_list = [b for b in batches if b[0] == "test_batch"]
        meta = {"filename": "batches.meta", "key": "label_names", "md5": names["batches.meta"]}

    makedirs(out, root)
    count = 0
    classes: list[str] = []
    for split, train in (("train", True), ("test", False)):
        ds = _Release(str(work), train=train, download=False)
        classes = list(ds.classes)
        for c in classes:
            makedirs(out / split / c, root)
        for i in tqdm(range(len(ds.data)), desc=f"cifar10 {split}", disable=not progress, leave=False):
            save_image(Image.fromarray(ds.data[i]), out / split / classes[ds.targets[i]] / f"{i:05d}.png",
                       root)
        count += len(ds.data)
    write_text("".join(f"{c}\n" for c in classes), out / "classes.txt", root)
    return count


def prepare_imagenette(archive: Path, out: Path, work: Path, root: Path) -> None:
    """Extract the 160 px release into ``out`` (``train/``, ``val/``, ``classes.tsv``), inside the data root
    ``root``."""
    extract_archive(archive, work, root)
    release = find_dir_with(work, "val")
    if not (release / "train").is_dir():
        raise ValueError(f"{archive}: no train/ beside val/ in the archive")
    makedirs(out, root)
    for split in ("train", "val"):
        replace(release / split, out / split, root)
    if (release / "noisy_imagenette.csv").is_file():
        copy_file(release / "noisy_imagenette.csv", out / "noisy_imagenette.csv", root)
    write_imagenette_classes(out, root)


def write_imagenette_classes(out: Path, root: Path) -> None:
    """``classes.tsv`` of the release at ``out`` (inside the data root ``root``): each class folder and
    its name."""
    present = sorted(p.name for p in (out / "train").iterdir() if p.is_dir())
    lines = [f"{w}\t{IMAGENETTE_CLASSES.get(w, w)}\n" for w in present]
    write_text("".join(lines), out / "classes.tsv", root)


def _resize_one(src: Path, dst: Path, size: int, root: Path) -> None:
    from PIL import Image, ImageOps

    with Image.open(src) as im:
        small = ImageOps.fit(im.convert("RGB"), (size, size), method=Image.Resampling.BICUBIC)
    save_image(small, dst, root, format="JPEG", quality=90)


def derive_resized(source: Path, out: Path, root: Path, size: int = 64, progress: bool = True,
                   workers: int = 4) -> int:
    """Resize every image of the ImageFolder tree ``source`` (shorter side ``size``, center crop) into
    ``out`` (inside the data root ``root``), keeping relative paths and the class files. Returns the image
    count."""
    from tqdm.auto import tqdm

    jobs = []
    for split in ("train", "val", "test"):
        if not (source / split).is_dir():
            continue
        for cls in sorted(p for p in (source / split).iterdir() if p.is_dir()):
            makedirs(out / split / cls.name, root)
            jobs += [(f, out / split / cls.name / f.name) for f in sorted(cls.iterdir()) if f.is_file()]
    for extra in ("classes.tsv", "classes.txt"):
        if (source / extra).is_file():
            copy_file(source / extra, out / extra, root)
    with ThreadPoolExecutor(max(1, workers)) as pool, tqdm(total=len(jobs), desc=f"resize to {size}",
                                                           disable=not progress, leave=False) as bar:
        for _ in pool.map(lambda job: _resize_one(job[0], job[1], size, root), jobs):
            bar.update(1)
    return len(jobs)
