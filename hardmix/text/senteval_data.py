"""Loaders for the SentEval evaluation sets (STS12-16, STS-B, SICK-R and the transfer tasks).

Every loader reads the files of SentEval's ``data/downstream`` layout under ``<root>/senteval/`` (``root``
defaults to the data root: ``HARDMIX_DATA``, else ``~/.cache/hardmix/data``, where
``hardmix data download senteval`` puts them) and reproduces what SentEval's own loaders (and the SimCSE
fork of SentEval, for STS-B and SICK-R) feed the encoder:

- text is split on whitespace and re-joined with single spaces (SentEval passes token lists, and the
  SimCSE batcher joins them with ``" "``);
- files are split into lines with :meth:`str.splitlines`, as SentEval does;
- MR, CR, SUBJ, MPQA and TREC are read as latin-1, the others as UTF-8; blank lines of MR, CR, SUBJ and
  MPQA are kept as empty sentences (CR reaches 3775 and MPQA 10606 only this way);
- STS12-16: the input files are tab-separated sentence pairs; a pair whose gold line is empty has no score
  and is dropped (STS15, STS16); STS13 has no SMT subset (not distributed);
- STS-B: tab-separated, score in field 5 and the sentences in fields 6 and 7 (1-based), extra trailing
  fields ignored; SICK: a header line, CRLF line endings in the test file; MRPC: a header line and a
  byte-order mark.

A missing file raises :class:`FileNotFoundError` naming it; a malformed line raises :class:`ValueError`
whose message starts with ``path:lineno:``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hardmix.datasets.paths import data_root_path

#: STS12-16 subsets, in SentEval's order.
STS_SUBSETS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}

#: Files of the binary sentence-classification tasks: (label-1 file, label-0 file), as in SentEval.
BINARY_FILES: dict[str, tuple[str, str]] = {
    "MR": ("MR/rt-polarity.pos", "MR/rt-polarity.neg"),
    "CR": ("CR/custrev.pos", "CR/custrev.neg"),
    "SUBJ": ("SUBJ/subj.objective", "SUBJ/subj.subjective"),
    "MPQA": ("MPQA/mpqa.pos", "MPQA/mpqa.neg"),
}

#: TREC coarse classes and their label ids (SentEval's mapping).
TREC_CLASSES: dict[str, int] = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}


@dataclass
class SentencePairs:
    """Sentence pairs with a score or label per pair.

    Attributes:
        sent1: first sentences, length n.
        sent2: second sentences, length n.
        labels: (n,) gold similarity (float64) or class ids (int64).
        source: the file they were read from (for an error to name; empty when built in code).
    """

    sent1: list[str]
    sent2: list[str]
    labels: np.ndarray
    source: str = ""

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class LabeledSentences:
    """Sentences with a class id each.

    Attributes:
        sentences: length n.
        labels: (n,) int64 class ids.
    """

    sentences: list[str]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


def senteval_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """Return the SentEval data folder: ``root`` itself when given, else ``senteval/`` under the data root
    (``HARDMIX_DATA``, else the per-user default root, see :mod:`hardmix.datasets.paths`).

    Raises:
        FileNotFoundError: the folder does not exist; the message names it and, for the data root's
            folder, the ``hardmix data download senteval`` that fetches it.
    """
    if root is not None:
        path = Path(root)
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: SentEval data folder not found (expected SentEval's "
                                    "data/downstream layout: STS/, SICK/, MR/, CR/, ...)")
        return path
    path = data_root_path() / "senteval"
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: SentEval data folder not found; fetch it with "
                                "`hardmix data download senteval`")
    return path


def _norm(text: str) -> str:
    """Whitespace-tokenize and re-join (what SentEval's loaders plus SimCSE's batcher produce)."""
    return " ".join(text.split())


def _sides(path: Path, lineno: int, first: str, second: str) -> tuple[str, str]:
    """A scored pair's two sentences, normalized; a pair with an empty side is refused naming its line
    (its cosine score would be that of an empty input, not a sentence's)."""
    a, b = _norm(first), _norm(second)
    if not a or not b:
        raise ValueError(f"{path}:{lineno}: a scored pair whose {'first' if not a else 'second'} sentence is "
                         "empty; is this the right file?")
    return a, b


def _read_lines(path: Path, encoding: str = "utf-8") -> list[str]:
    """Read ``path`` and split it into lines with :meth:`str.splitlines` (SentEval's splitting)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    with open(path, encoding=encoding, newline="") as f:
        return f.read().splitlines()


def _float(path: Path, lineno: int, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{path}:{lineno}: {what} {text!r} is not a number") from None
    if not np.isfinite(value):
        raise ValueError(f"{path}:{lineno}: {what} {text!r} is not finite")
    return value


def _int_label(path: Path, lineno: int, text: str, allowed: tuple[int, ...]) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{path}:{lineno}: label {text!r} is not an integer") from None
    if value not in allowed:
        raise ValueError(f"{path}:{lineno}: label {value} is not one of {allowed}")
    return value


# --------------------------------------------------------------------------------------------- STS
def scorable(pairs: SentencePairs, path: Path) -> SentencePairs:
    """``pairs`` if a Spearman correlation can be computed on them (at least 2 pairs, gold scores that
    vary, no pair with an empty side), else a ValueError naming the file: a degenerate evaluation set is
    refused when read (the loaders, ``hardmix data check``) and by every scorer
    (:func:`hardmix.text.sts.system_scores`), never turned into a NaN score at the end of a run. Sets
    ``pairs.source`` to ``path`` where it is empty.

    >>> scorable(SentencePairs(["a", "b"], ["c", "d"], np.array([1.0, 1.0])), Path("sts-dev.csv"))
    Traceback (most recent call last):
    ...
    ValueError: sts-dev.csv: 2 scored pairs whose gold scores are all 1.0: no correlation can be computed ...
    """
    n = len(pairs)
    if len(pairs.sent1) != n or len(pairs.sent2) != n:
        raise ValueError(f"{path}: {len(pairs.sent1)} first and {len(pairs.sent2)} second sentences for {n} "
                         "gold scores")
    empty = next((i for i in range(n) if not pairs.sent1[i].strip() or not pairs.sent2[i].strip()), None)
    if empty is not None:
        raise ValueError(f"{path}: scored pair {empty + 1} of {n} has an empty sentence; is this the right "
                         "file?")
    if n < 2:
        raise ValueError(f"{path}: {n} scored pair{'s' if n != 1 else ''}: a correlation needs at least 2; "
                         "is this the right file?")
    if np.ptp(pairs.labels) == 0:
        raise ValueError(f"{path}: {n} scored pairs whose gold scores are all {pairs.labels[0]}: no "
                         "correlation can be computed on them; is this the right file?")
    if not np.all(np.isfinite(pairs.labels)):
        raise ValueError(f"{path}: a gold score that is not a finite number; is this the right file?")
    if not pairs.source:
        pairs.source = str(path)
    return pairs


def load_sts_subset(folder: str | os.PathLike[str], subset: str) -> SentencePairs:
    """Load one STS12-16 subset: ``STS.input.<subset>.txt`` and ``STS.gs.<subset>.txt``.

    Pairs whose gold line is empty are dropped.

    Args:
        folder: the year's folder, e.g. ``.../STS/STS15-en-test``.
        subset: the subset name, e.g. ``"answers-forums"``.

    Returns:
        The scored pairs (labels: float64 gold scores in [0, 5]).
    """
    folder = Path(folder)
    inp = folder / f"STS.input.{subset}.txt"
    gs = folder / f"STS.gs.{subset}.txt"
    in_lines = _read_lines(inp)
    gs_lines = _read_lines(gs)
    if len(in_lines) != len(gs_lines):
        raise ValueError(f"{gs}:{len(gs_lines)}: {len(gs_lines)} gold lines for {len(in_lines)} "
                         f"sentence pairs in {inp}")
    sent1: list[str] = []
    sent2: list[str] = []
    scores: list[float] = []
    for lineno, (pair, gold) in enumerate(zip(in_lines, gs_lines), start=1):
        fields = pair.split("\t")
        if len(fields) != 2:
            raise ValueError(f"{inp}:{lineno}: expected 2 tab-separated sentences, "
                             f"found {len(fields)} fields")
        if gold == "":
            continue  # no gold score for this pair (STS15, STS16)
        a, b = _sides(inp, lineno, fields[0], fields[1])
        scores.append(_float(gs, lineno, gold, "gold score"))
        sent1.append(a)
        sent2.append(b)
    return scorable(SentencePairs(sent1, sent2, np.asarray(scores, dtype=np.float64)), gs)


def load_sts_year(task: str, root: str | os.PathLike[str] | None = None) -> dict[str, SentencePairs]:
    """Load STS12, STS13, STS14, STS15 or STS16: one :class:`SentencePairs` per subset, in SentEval's order.

    Args:
        task: ``"STS12"`` ... ``"STS16"``.
        root: the SentEval data folder (default ``senteval/`` under the data root).
    """
    if task not in STS_SUBSETS:
        raise ValueError(f"unknown STS task {task!r}; expected one of {sorted(STS_SUBSETS)}")
    folder = senteval_dir(root) / "STS" / f"{task}-en-test"
    return {subset: load_sts_subset(folder, subset) for subset in STS_SUBSETS[task]}


def load_stsb(split: str = "test", root: str | os.PathLike[str] | None = None) -> SentencePairs:
    """Load an STS Benchmark split (``train``, ``dev`` or ``test``) from ``STS/STSBenchmark/sts-<split>.csv``.

    Args:
        split: ``"train"``, ``"dev"`` or ``"test"``.
        root: the SentEval data folder (default ``senteval/`` under the data root).
    """
    if split not in ("train", "dev", "test"):
        raise ValueError(f"unknown STS-B split {split!r}")
    path = senteval_dir(root) / "STS" / "STSBenchmark" / f"sts-{split}.csv"
    sent1: list[str] = []
    sent2: list[str] = []
    scores: list[float] = []
    for lineno, line in enumerate(_read_lines(path), start=1):
        fields = line.strip().split("\t")
        if len(fields) < 7:
            raise ValueError(f"{path}:{lineno}: expected at least 7 tab-separated fields, "
                             f"found {len(fields)}")
        a, b = _sides(path, lineno, fields[5], fields[6])
        scores.append(_float(path, lineno, fields[4], "score"))
        sent1.append(a)
        sent2.append(b)
    return scorable(SentencePairs(sent1, sent2, np.asarray(scores, dtype=np.float64)), path)


def load_sickr(split: str = "test", root: str | os.PathLike[str] | None = None) -> SentencePairs:
    """Load a SICK relatedness split: ``train`` (SICK_train), ``dev`` (SICK_trial) or ``test``
    (SICK_test_annotated). The first line is a header.

    Args:
        split: ``"train"``, ``"dev"`` or ``"test"``.
        root: the SentEval data folder (default ``senteval/`` under the data root).
    """
    names = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
    if split not in names:
        raise ValueError(f"unknown SICK split {split!r}")
    path = senteval_dir(root) / "SICK" / names[split]
    lines = _read_lines(path)
    if not lines or not lines[0].startswith("pair_ID"):
        raise ValueError(f"{path}:1: expected the header line 'pair_ID<TAB>sentence_A<TAB>...'")
    sent1: list[str] = []
    sent2: list[str] = []
    scores: list[float] = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.strip().split("\t")
        if len(fields) < 4:
            raise ValueError(f"{path}:{lineno}: expected at least 4 tab-separated fields, "
                             f"found {len(fields)}")
        a, b = _sides(path, lineno, fields[1], fields[2])
        scores.append(_float(path, lineno, fields[3], "relatedness score"))
        sent1.append(a)
        sent2.append(b)
    return scorable(SentencePairs(sent1, sent2, np.asarray(scores, dtype=np.float64)), path)


# ---------------------------------------------------------------------------------------- transfer
def load_binary(task: str, root: str | os.PathLike[str] | None = None) -> LabeledSentences:
    """Load MR, CR, SUBJ or MPQA: the label-1 file then the label-0 file, one sentence a line (latin-1).

    Blank lines are kept as empty sentences, as SentEval does. Labels: MR, CR, MPQA 1 = positive; SUBJ
    1 = objective (SentEval's convention).

    Args:
        task: ``"MR"``, ``"CR"``, ``"SUBJ"`` or ``"MPQA"``.
        root: the SentEval data folder (default ``senteval/`` under the data root).
    """
    if task not in BINARY_FILES:
        raise ValueError(f"unknown binary task {task!r}; expected one of {sorted(BINARY_FILES)}")
    base = senteval_dir(root)
    pos, neg = (_read_lines(base / f, encoding="latin-1") for f in BINARY_FILES[task])
    sentences = [_norm(s) for s in pos + neg]
    labels = np.asarray([1] * len(pos) + [0] * len(neg), dtype=np.int64)
    return LabeledSentences(sentences, labels)


def load_sst2(root: str | os.PathLike[str] | None = None) -> dict[str, LabeledSentences]:
    """Load SST-2 (``SST/binary/sentiment-{train,dev,test}``: ``sentence<TAB>label``).

    Returns:
        ``{"train": ..., "dev": ..., "test": ...}``.
    """
    base = senteval_dir(root) / "SST" / "binary"
    out: dict[str, LabeledSentences] = {}
    for split in ("train", "dev", "test"):
        path = base / f"sentiment-{split}"
        sentences: list[str] = []
        labels: list[int] = []
        for lineno, line in enumerate(_read_lines(path), start=1):
            fields = line.strip().split("\t")
            if len(fields) != 2:
                raise ValueError(f"{path}:{lineno}: expected 'sentence<TAB>label', "
                                 f"found {len(fields)} fields")
            labels.append(_int_label(path, lineno, fields[1], (0, 1)))
            sentences.append(_norm(fields[0]))
        out[split] = LabeledSentences(sentences, np.asarray(labels, dtype=np.int64))
    return out


def load_trec(root: str | os.PathLike[str] | None = None) -> dict[str, LabeledSentences]:
    """Load TREC (``TREC/train_5500.label`` and ``TREC/TREC_10.label``; ``COARSE:fine question``, latin-1).

    Labels are the 6 coarse classes (:data:`TREC_CLASSES`).

    Returns:
        ``{"train": ..., "test": ...}``.
    """
    base = senteval_dir(root) / "TREC"
    out: dict[str, LabeledSentences] = {}
    for split, name in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        path = base / name
        sentences: list[str] = []
        labels: list[int] = []
        for lineno, line in enumerate(_read_lines(path, encoding="latin-1"), start=1):
            head, sep, rest = line.strip().partition(":")
            if not sep or " " not in rest:
                raise ValueError(f"{path}:{lineno}: expected 'COARSE:fine question'")
            if head not in TREC_CLASSES:
                raise ValueError(f"{path}:{lineno}: unknown TREC class {head!r}")
            labels.append(TREC_CLASSES[head])
            sentences.append(_norm(rest.split(" ", 1)[1]))
        out[split] = LabeledSentences(sentences, np.asarray(labels, dtype=np.int64))
    return out


def load_mrpc(root: str | os.PathLike[str] | None = None) -> dict[str, SentencePairs]:
    """Load MRPC (``MRPC/msr_paraphrase_{train,test}.txt``: a header line, then
    ``Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String``; a UTF-8 byte-order mark is skipped).

    Returns:
        ``{"train": ..., "test": ...}`` with int64 labels (1 = paraphrase).
    """
    base = senteval_dir(root) / "MRPC"
    out: dict[str, SentencePairs] = {}
    for split in ("train", "test"):
        path = base / f"msr_paraphrase_{split}.txt"
        lines = _read_lines(path, encoding="utf-8-sig")
        if not lines or not lines[0].startswith("Quality"):
            raise ValueError(f"{path}:1: expected the header line 'Quality<TAB>#1 ID<TAB>...'")
        sent1: list[str] = []
        sent2: list[str] = []
        labels: list[int] = []
        for lineno, line in enumerate(lines[1:], start=2):
            fields = line.strip().split("\t")
            if len(fields) != 5:
                raise ValueError(f"{path}:{lineno}: expected 5 tab-separated fields, found {len(fields)}")
            labels.append(_int_label(path, lineno, fields[0], (0, 1)))
            sent1.append(_norm(fields[3]))
            sent2.append(_norm(fields[4]))
        out[split] = SentencePairs(sent1, sent2, np.asarray(labels, dtype=np.int64))
    return out
