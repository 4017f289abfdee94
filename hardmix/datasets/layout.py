"""The layout each data set must have, as its readers expect it (checked after preparation and by
``hardmix data check``, also on data laid out by hand).

- ``senteval``: SentEval's ``data/downstream`` files that ``hardmix eval text`` reads.
- image sets: ``train/`` and ``test/`` (or ``val/``), the same class folders in each, none empty.
- corpora: a non-empty text file (gzip: a readable first line).
- models: ``config.json``, a vocabulary and weights.
- class lists: the expected number of WordNet ids.

Example:
    >>> import tempfile, pathlib
    >>> check_layout("wiki1m", pathlib.Path(tempfile.mkdtemp()) / "none.txt")[0].endswith("missing")
    True
"""

from __future__ import annotations

import gzip
from pathlib import Path

_STS = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}

#: Every file of the SentEval layout that hardmix's loaders read (``hardmix/text/senteval_data.py``).
SENTEVAL_FILES: tuple[str, ...] = (
    *(f"STS/{year}-en-test/STS.{kind}.{sub}.txt" for year, subs in _STS.items() for sub in subs
      for kind in ("input", "gs")),
    *(f"STS/STSBenchmark/sts-{split}.csv" for split in ("train", "dev", "test")),
    *(f"SICK/SICK_{split}.txt" for split in ("train", "trial", "test_annotated")),
    "MR/rt-polarity.pos", "MR/rt-polarity.neg", "CR/custrev.pos", "CR/custrev.neg",
    "SUBJ/subj.objective", "SUBJ/subj.subjective", "MPQA/mpqa.pos", "MPQA/mpqa.neg",
    *(f"SST/binary/sentiment-{split}" for split in ("train", "dev", "test")),
    "TREC/train_5500.label", "TREC/TREC_10.label",
    "MRPC/msr_paraphrase_train.txt", "MRPC/msr_paraphrase_test.txt",
)

_IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}


def _image_split(folder: Path) -> tuple[list[str], list[str]]:
    """(class folders, problems) of one ImageFolder split."""
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    problems = [] if classes else [f"{folder}: no class folders"]
    for c in classes:
        if not any(f.suffix.lower() in _IMAGE_SUFFIXES for f in (folder / c).iterdir()):
            problems.append(f"{folder / c}: no images")
    return classes, problems


def check_images(path: Path, eval_splits: tuple[str, ...] = ("test", "val")) -> list[str]:
    """Problems of an ImageFolder tree with ``train/`` and one of ``eval_splits``."""
    if not path.is_dir():
        return [f"{path}: missing"]
    train = path / "train"
    evals = [path / s for s in eval_splits if (path / s).is_dir()]
    if not train.is_dir() or not evals:
        return [f"{path}: expected train/ and {' or '.join(s + '/' for s in eval_splits)}"]
    train_classes, problems = _image_split(train)
    eval_classes, more = _image_split(evals[0])
    problems += more
    if train_classes != eval_classes:
        problems.append(f"{path}: train/ and {evals[0].name}/ hold different class folders")
    return problems


def check_text_file(path: Path) -> list[str]:
    if not path.is_file():
        return [f"{path}: missing"]
    if path.stat().st_size == 0:
        return [f"{path}: empty"]
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                f.readline()
        except (OSError, EOFError, UnicodeDecodeError) as e:
            return [f"{path}: not a readable gzip text file ({e})"]
    return []


def check_class_list(path: Path, n: int) -> list[str]:
    """A file of ``n`` WordNet ids (``n`` + 8 digits), one a line."""
    problems = check_text_file(path)
    if problems:
        return problems
    ids = [ln.split("#", 1)[0].strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    ids = [i for i in ids if i]
    bad = [i for i in ids if not (len(i) == 9 and i[0] == "n" and i[1:].isdigit())]
    if bad or len(ids) != n:
        return [f"{path}: expected {n} WordNet ids (n + 8 digits), found {len(ids)}"
                + (f", e.g. {bad[0]!r} is not one" if bad else "")]
    return []


def check_model(path: Path) -> list[str]:
    if not (path / "config.json").is_file():
        return [f"{path}: missing (no config.json)"]
    problems = []
    if not any((path / n).is_file() for n in ("vocab.txt", "tokenizer.json")):
        problems.append(f"{path}: no vocab.txt or tokenizer.json")
    if not any((path / n).is_file() for n in ("model.safetensors", "pytorch_model.bin")):
        problems.append(f"{path}: no model.safetensors or pytorch_model.bin")
    return problems


def check_layout(name: str, path: Path) -> list[str]:
    """Problems (one line each, naming the path) of data set ``name`` at ``path``; empty when usable."""
    if name == "senteval":
        if not path.is_dir():
            return [f"{path}: missing"]
        missing = [f for f in SENTEVAL_FILES if not (path / f).is_file()]
        return [f"{path}: {len(missing)} SentEval file(s) missing, e.g. {missing[0]}"] if missing else []
    if name in ("wiki1m", "enwiki-100k", "wiki1m-head"):
        return check_text_file(path)
    if name in ("cifar10", "imagenette", "imagenette-64"):
        return check_images(path)
    if name == "bert-mini":
        return check_model(path)
    if name == "imagenet100-classes":
        return check_class_list(path, 100)
    raise ValueError(f"no layout check for data set {name!r}")
