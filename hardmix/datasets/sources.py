"""What ``hardmix data download`` can fetch: every real source (URL and checksum) and every data set.

This is the ONE module that holds the official URLs and their checksums. A :class:`Source` is one file
on a server; a :class:`DataSet` is a folder or file under the data root built from sources (or from
another data set: ``enwiki-100k`` from ``wiki1m``, ``imagenette-64`` from ``imagenette``).

Checksums: CIFAR-10 and Imagenette are verified by the MD5s that torchvision publishes for them
(``torchvision.datasets.CIFAR10`` and ``torchvision.datasets.Imagenette``, copied here; a test checks that
they still agree). SimCSE's files are fetched at a fixed revision of their Hub repository
(:data:`SIMCSE_REVISION`, not ``main``); ``wiki1m_for_simcse.txt`` and BERT-mini's ``pytorch_model.bin``
are verified by the SHA-256 the Hub publishes for them (their LFS pointers). The other files publish no
checksum (``senteval.tar``, BERT-mini's ``config.json`` and ``vocab.txt``, CMC's class list), so they are
verified by their length (the size below where it is known, else the length the server announces), fetched
whole in one transfer (a partial file of theirs is never resumed: kept bytes could be damaged unseen), and
their SHA-256 is recorded at that first download (``<root>/.hardmix/checksums.json``) and checked at every
later one. Pinning their SHA-256 here is still to do.

Every URL is ``base/key`` when a mirror is given (``--base-url`` or ``HARDMIX_DATA_BASE_URL``): a mirror
holds each source's file under its :attr:`Source.key`.

Example:
    >>> DATASETS["cifar10"].target, DATASETS["enwiki-100k"].requires
    ('images/cifar10', ('wiki1m',))
    >>> download_command_for("images/imagenette-64/train")
    'hardmix data download imagenette-64'
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

#: The environment variable that replaces every source's server with a mirror (``base/key``).
BASE_URL_ENV = "HARDMIX_DATA_BASE_URL"

_HF = "https://huggingface.co"
#: The revision of ``princeton-nlp/datasets-for-simcse`` whose files are fetched (a commit: what a URL
#: under ``resolve/main`` serves can change).
SIMCSE_REVISION = "e145e8bb659b2aa2669f32ef79cb4cdef6c58fef"
_SIMCSE = f"{_HF}/datasets/princeton-nlp/datasets-for-simcse/resolve/{SIMCSE_REVISION}"
_BERT_MINI = f"{_HF}/google/bert_uncased_L-4_H-256_A-4/resolve/main"

#: The Hub name of the public stand-in for ``models/bert-mini-wiki-mlm`` (4 layers, hidden 256, 4 heads).
BERT_MINI_HUB = "google/bert_uncased_L-4_H-256_A-4"


@dataclass(frozen=True)
class Source:
    """One file on a server.

    Attributes:
        key: a unique relative name (the file's name in the downloads folder and on a mirror).
        url: the official URL.
        md5, sha256: the published checksum, if any (hex).
        size: the length in bytes, if known.
    """

    key: str
    url: str
    md5: str | None = None
    sha256: str | None = None
    size: int | None = None

    def url_for(self, base_url: str | None = None) -> str:
        """The URL to fetch: the official one, or ``base_url/key`` on a mirror."""
        return f"{base_url.rstrip('/')}/{self.key}" if base_url else self.url


@dataclass(frozen=True)
class DataSet:
    """A data set under the data root.

    Attributes:
        name: what ``hardmix data download`` takes.
        target: its path relative to the data root (a folder, or one file).
        description: one line for ``hardmix data list``.
        sources: the keys of :data:`SOURCES` it is built from.
        requires: data sets it is derived from (fetched first).
        members: MD5s of files inside an archive, checked after extraction (``{relative path: md5}``).
    """

    name: str
    target: str
    description: str
    sources: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    members: dict[str, str] = field(default_factory=dict)


SOURCES: dict[str, Source] = {s.key: s for s in (
    # SentEval's data/downstream, as produced by SentEval's get_transfer_data.bash (Moses tokenization and
    # lowercasing of STS, Moses tokenization of SICK, PTB tokenization of MR/CR/SUBJ/MPQA), distributed by
    # the SimCSE authors; MixCSE evaluates on the same files.
    Source("senteval.tar", f"{_SIMCSE}/senteval.tar"),
    # SimCSE's (and MixCSE's) unsupervised training corpus: 10^6 English Wikipedia sentences.
    # SHA-256 as the Hub publishes it for this file.
    Source("wiki1m_for_simcse.txt", f"{_SIMCSE}/wiki1m_for_simcse.txt",
           sha256="7b1825863a99aa76479b0456f7c210539dfaeeb69598b41fb4de4f524dd5a706"),
    # CIFAR-10, python version; MD5 and size as published by torchvision, SHA-256 as Keras's
    # keras/datasets/cifar10.py pins it.
    Source("cifar-10-python.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
           md5="c58f30108f718f92721af3b95e74349a",
           sha256="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce", size=170498071),
    # Imagenette v2, the official 160 px release (fast.ai); MD5 as published by torchvision, SHA-256 and
    # size as TensorFlow Datasets records them (tensorflow_datasets/url_checksums/imagenette.txt).
    Source("imagenette2-160.tgz", "https://s3.amazonaws.com/fast-ai-imageclas/imagenette2-160.tgz",
           md5="e793b78cc4c9e9a4ccc0c1155377a412",
           sha256="88daccb09b6fce93f45e6c09ddeb269cce705549e6bff322092a2a5a11489863", size=98948031),
    # The ImageNet-100 subset of CMC (Tian et al. 2019), on which MoCHi reports: 100 WordNet ids, at the
    # commit read for this pin (its SHA-256 is that of the list in the shared data, byte for byte).
    Source("imagenet100.txt", "https://raw.githubusercontent.com/HobbitLong/CMC/"
           "bc687a26de7ae350d98f671d25d164b65336b8c2/imagenet100.txt",
           sha256="79f3f1552ccc478ce24bd934b4573625db584ddc1f4643ae23c994a94cb11397", size=1000),
    # Google's BERT-mini (Turc et al. 2019, "Well-Read Students Learn Better"), uncased.
    Source("bert-mini/config.json", f"{_BERT_MINI}/config.json"),
    # The uncased WordPiece vocabulary of Google's BERT releases (30,522 entries), one file for every size;
    # SHA-256 and length as other projects pin the same file (MediaPipe's mobilebert_vocab.txt in its
    # Bazel workspace, sentence-transformers' all-MiniLM-L6-v2 vocab.txt) and as the shared data's copy.
    Source("bert-mini/vocab.txt", f"{_BERT_MINI}/vocab.txt",
           sha256="07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3", size=231508),
    # SHA-256 as the Hub publishes it for this file (a pickle: loading it needs torch >= 2.6 with current
    # transformers, the floor in pyproject.toml).
    Source("bert-mini/pytorch_model.bin", f"{_BERT_MINI}/pytorch_model.bin",
           sha256="01671831dfec6818302153919efbfd6ee4ad91dd9fba7f3649bdd6cb7b0f16e4"),
)}

#: The MD5s of the CIFAR-10 archive's members (torchvision's ``CIFAR10.train_list``/``test_list``/``meta``).
CIFAR10_MEMBERS = {
    "cifar-10-batches-py/data_batch_1": "c99cafc152244af753f735de768cd75f",
    "cifar-10-batches-py/data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "cifar-10-batches-py/data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "cifar-10-batches-py/data_batch_4": "634d18415352ddfa80567beed471001a",
    "cifar-10-batches-py/data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "cifar-10-batches-py/test_batch": "40351d587109b95175f43aff81a1287e",
    "cifar-10-batches-py/batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
}

#: Lines of ``wiki1m-head``, the quickstart comparison's short corpus (30 steps of 64 draw 1,920 sentences).
WIKI1M_HEAD_LINES = 11_914

DATASETS: dict[str, DataSet] = {d.name: d for d in (
    DataSet("senteval", "senteval", "SentEval STS12-16, STS-B, SICK-R and transfer sets (what `hardmix eval "
            "text` reads)", sources=("senteval.tar",)),
    DataSet("wiki1m", "wiki/wiki1m_for_simcse.txt", "SimCSE's training corpus, 10^6 Wikipedia sentences",
            sources=("wiki1m_for_simcse.txt",)),
    DataSet("enwiki-100k", "wiki/enwiki-100k.txt.gz", "the CPU configs' corpus: wiki1m's first 100,000 "
            "sentences, gzipped", requires=("wiki1m",)),
    DataSet("wiki1m-head", f"wiki/wiki1m-head-{WIKI1M_HEAD_LINES}.txt", "the quickstart's corpus: wiki1m's "
            f"first {WIKI1M_HEAD_LINES:,} sentences", requires=("wiki1m",)),
    DataSet("cifar10", "images/cifar10", "CIFAR-10 as PNG images, train/ 50,000 and test/ 10,000",
            sources=("cifar-10-python.tar.gz",), members=CIFAR10_MEMBERS),
    DataSet("imagenette", "images/imagenette", "Imagenette v2, the official 160 px release, train/ and val/",
            sources=("imagenette2-160.tgz",)),
    DataSet("imagenette-64", "images/imagenette-64", "Imagenette resized to 64x64 (the CPU configs' set)",
            requires=("imagenette",)),
    DataSet("imagenet100-classes", "images/imagenet100-classes.txt", "the 100 WordNet ids of ImageNet-100 "
            "(CMC's list; selects classes of your own ImageNet folder)", sources=("imagenet100.txt",)),
    DataSet("bert-mini", "models/bert-mini", f"Google's BERT-mini ({BERT_MINI_HUB}), the public stand-in "
            "for models/bert-mini-wiki-mlm", sources=("bert-mini/config.json", "bert-mini/vocab.txt",
                                                      "bert-mini/pytorch_model.bin")),
)}

#: Folders that configs name which no download provides, and the data set that stands in for each where
#: it is absent: the CPU text configs' BERT (on the project's own machines only) and its public stand-in.
STAND_INS: dict[str, str] = {"models/bert-mini-wiki-mlm": "bert-mini"}

#: Paths that configs name and the data set that provides them.
PROVIDES: dict[str, str] = {
    **{d.target: d.name for d in DATASETS.values()},
    **STAND_INS,
}


def dataset(name: str) -> DataSet:
    """The registered data set ``name``; ValueError listing the names otherwise."""
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASETS)} (`hardmix data list`)")
    return DATASETS[name]


def provider_of(path: str | os.PathLike[str], anywhere: bool = True) -> str | None:
    """The data set that provides ``path`` (a registered target, or a path inside one), or None.

    Args:
        path: relative to the data root, or (with ``anywhere``) any path holding a registered target.
        anywhere: also match a target that starts after the first part of ``path``.

    Example:
        >>> provider_of("images/cifar10/train"), provider_of("/data/wiki/wiki1m-head-11914.txt", False)
        ('cifar10', None)
    """
    parts = Path(path).as_posix().strip("/").split("/")
    for i in range(len(parts) if anywhere else 1):
        for j in range(len(parts), i, -1):
            name = PROVIDES.get("/".join(parts[i:j]))
            if name is not None:
                return name
    return None


def download_command_for(path: str | os.PathLike[str]) -> str | None:
    """The ``hardmix data download NAME`` that fetches ``path`` (relative to the data root, or a path
    that ends with a registered target), or None."""
    name = provider_of(path)
    return f"hardmix data download {name}" if name is not None else None

