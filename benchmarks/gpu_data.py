"""Copy a class-balanced subset of the CIFAR-10 JPEG tree into a folder that travels with the checkout.

The GPU machine receives only the checkout and the git-ignored folders named to be carried (64 MiB in
all); the shared data does not travel. This copies ``train/`` and ``test/`` images of
``$HARDMIX_DATA/images/cifar10`` (``--source``) into ``DEST/images/cifar10`` in the ImageFolder layout that
the vision trainer reads (``<split>/<class>/<file>.jpg`` and ``classes.txt``), so that with
``HARDMIX_DATA=DEST`` the dataset name ``cifar10`` resolves to the copy.

The subset takes the first ``--train-per-class`` and ``--test-per-class`` files of each class in sorted
name order (deterministic, the same on every machine). Files are copied, not linked: a link would point
into a folder that does not travel.

For the text trainer's case of the check (``gpu_paths.py``'s ``text_train``), it also copies into
``DEST/text/``: the tokenizer and model config (no weights) of ``$HARDMIX_DATA/models/bert-mini-wiki-mlm``
(else of its public stand-in ``models/bert-mini``)
(``config.json``, ``tokenizer.json``, ``tokenizer_config.json``, ``vocab.txt``; 0.90 MiB) and the first
``--sentences`` lines of ``$HARDMIX_DATA/wiki/wiki1m-head-11914.txt`` (``sentences.txt``; 400 lines, 41
KiB). The model is random-initialized from the config on the GPU machine.

Usage:
    python benchmarks/gpu_data.py .gpu_data                      # 2,000 train + 500 test per class
    python benchmarks/gpu_data.py DIR --train-per-class 32 --test-per-class 8   # the dry mode's tree
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

#: Where the tree lives under a data root (the vision trainer's name ``cifar10``).
CIFAR_SUBDIR = Path("images") / "cifar10"
SPLITS = ("train", "test")
#: The text case's files: a tokenizer and config (under ``text/tokenizer``) and sentences, from these
TEXT_SUBDIR = Path("text")
TOKENIZER_SOURCE = Path("models") / "bert-mini-wiki-mlm"
#: where the shared model is absent: its public stand-in (``hardmix data download bert-mini``)
TOKENIZER_STAND_IN = Path("models") / "bert-mini"
TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
#: the files without which no tokenizer loads
TOKENIZER_REQUIRED = ("config.json", "vocab.txt")
SENTENCES_SOURCE = Path("wiki") / "wiki1m-head-11914.txt"


def prepare_text(data_root: Path, dest: Path, sentences: int) -> dict[str, object]:
    """Copy the tokenizer files and the first ``sentences`` lines of the training sentences to
    ``dest/text`` (replacing what is there). Returns ``{"files": [...], "sentences": n, "bytes": b}``."""
    out = dest / TEXT_SUBDIR
    if out.exists():
        shutil.rmtree(out)
    (out / "tokenizer").mkdir(parents=True)
    source = data_root / TOKENIZER_SOURCE
    if not source.is_dir():
        source = data_root / TOKENIZER_STAND_IN
    for name in TOKENIZER_REQUIRED:
        if not (source / name).is_file():
            raise FileNotFoundError(f"{source / name}: the text case's tokenizer file is missing "
                                    "(hardmix data download bert-mini)")
    total = 0
    copied = []
    for name in TOKENIZER_FILES:
        src = source / name
        if src.is_file():
            shutil.copyfile(src, out / "tokenizer" / name)
            total += src.stat().st_size
            copied.append(name)
    lines: list[str] = []
    with open(data_root / SENTENCES_SOURCE, encoding="utf-8") as f:
        for line in f:
            if len(lines) == sentences:
                break
            if line.strip():
                lines.append(line.rstrip("\n"))
    if len(lines) < sentences:
        raise ValueError(f"{data_root / SENTENCES_SOURCE} has {len(lines)} sentences, fewer than {sentences}")
    text = "\n".join(lines) + "\n"
    (out / "sentences.txt").write_text(text, encoding="utf-8")
    total += len(text.encode("utf-8"))
    return {"source": str(source), "files": [*copied, "sentences.txt"], "sentences": len(lines),
            "bytes": total}


def source_tree() -> Path:
    """``$HARDMIX_DATA/images/cifar10``; FileNotFoundError when it is not there."""
    root = os.environ.get("HARDMIX_DATA")
    if not root:
        raise FileNotFoundError("HARDMIX_DATA is not set: it names the shared data folder to copy from")
    src = Path(root) / CIFAR_SUBDIR
    if not (src / "train").is_dir():
        raise FileNotFoundError(f"{src} has no train/ folder")
    return src


def prepare(src: Path, dest: Path, per_class: dict[str, int]) -> dict[str, object]:
    """Copy ``per_class[split]`` images of every class of each split from ``src`` to ``dest/images/cifar10``.

    An existing copy is replaced, so the folder always holds exactly the requested subset.

    Returns:
        ``{"root": dest, "images": {split: count}, "bytes": total file bytes, "classes": [...]}``.
    """
    out = dest / CIFAR_SUBDIR
    if out.exists():
        shutil.rmtree(out)
    classes_file = src / "classes.txt"
    classes = (
        classes_file.read_text().split()
        if classes_file.is_file()
        else sorted(p.name for p in (src / "train").iterdir() if p.is_dir())
    )
    counts: dict[str, int] = {}
    total = 0
    for split in SPLITS:
        n = per_class[split]
        counts[split] = 0
        for c in classes:
            files = sorted(p for p in (src / split / c).iterdir() if p.is_file())
            if len(files) < n:
                raise ValueError(f"{src / split / c} holds {len(files)} images, fewer than the {n} asked for")
            (out / split / c).mkdir(parents=True, exist_ok=True)
            for f in files[:n]:
                shutil.copyfile(f, out / split / c / f.name)
                total += f.stat().st_size
            counts[split] += n
    (out / "classes.txt").write_text("\n".join(classes) + "\n")
    return {"root": str(dest), "images": counts, "bytes": total, "classes": classes}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dest", type=Path, help="the data root to create (e.g. .gpu_data, git-ignored)")
    p.add_argument("--train-per-class", type=int, default=2000)
    p.add_argument("--test-per-class", type=int, default=500)
    p.add_argument("--source", type=Path, default=None, help="default: $HARDMIX_DATA/images/cifar10")
    p.add_argument("--sentences", type=int, default=400, help="text case: sentences to copy (0: no text)")
    args = p.parse_args(argv)
    src = args.source or source_tree()
    info = prepare(src, args.dest, {"train": args.train_per_class, "test": args.test_per_class})
    if args.sentences:
        text = prepare_text(src.parents[1], args.dest, args.sentences)
        print(json.dumps({"text": text, "text_kib": round(text["bytes"] / 1024, 1)}))
    mib = info["bytes"] / 2**20
    print(json.dumps({**info, "mib": round(mib, 1)}))
    print(f"copied {info['images']} images ({mib:.1f} MiB of files) to {args.dest / CIFAR_SUBDIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
