"""Preparing the text data sets: SentEval's evaluation files and the training corpora.

- ``senteval``: SimCSE's ``senteval.tar`` is the output of SentEval's own ``get_transfer_data.bash``
  (its Moses and PTB tokenization already applied), so it is extracted as it is: the folder holding
  ``STS/`` becomes ``senteval/``. No tokenizer runs here, and the files are byte for byte what SimCSE's
  and MixCSE's evaluation read.
- ``wiki1m`` (and ImageNet-100's class list): the downloaded file itself.
- ``enwiki-100k``: the first 100,000 lines of wiki1m, gzipped (the CPU configs' corpus).
- ``wiki1m-head``: the first 11,914 lines of wiki1m, plain text (the quickstart comparison's corpus).

Each function builds its result at ``out`` (a temporary path that the caller renames into place).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from hardmix.datasets.archives import find_dir_with
from hardmix.utils.confine import atomic_text_stream, extract_archive, replace

ENWIKI_LINES = 100_000


def prepare_senteval(archive: Path, out: Path, work: Path, root: Path) -> None:
    """Extract SentEval's data (``senteval.tar``) into ``out`` (``STS/``, ``SICK/``, ``MR/``, ...).

    Args:
        archive: the downloaded tar.
        out: the folder to create.
        work: an empty scratch folder (removed by the caller).
        root: the data root, which all three lie in.
    """
    extract_archive(archive, work, root)
    replace(find_dir_with(work, "STS"), out, root)


def place_file(downloaded: Path, out: Path, root: Path) -> None:
    """The data set is the downloaded file itself (the corpus; ImageNet-100's class list): moved to
    ``out`` (same file system), both inside the data root ``root``."""
    replace(downloaded, out, root)


def derive_head(corpus: Path, out: Path, lines: int = ENWIKI_LINES, compress: bool = True,
                root: Path | None = None) -> int:
    """Write the first ``lines`` lines of ``corpus`` to ``out`` (gzip with ``compress``), inside ``root``
    (the data root; by default the folder of ``out``). Returns the number written.

    Example:
        >>> import tempfile, pathlib, gzip
        >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "c.txt").write_text("a\\nb\\nc\\n")
        >>> derive_head(d / "c.txt", d / "h.txt.gz", lines=2), gzip.open(d / "h.txt.gz", "rt").read()
        (2, 'a\\nb\\n')
    """
    folder = out.parent if root is None else root
    n = 0

    def write(dst: IO[str]) -> None:
        nonlocal n
        with open(corpus, encoding="utf-8", newline="") as src:
            for line in src:
                if n == lines:
                    break
                dst.write(line if line.endswith("\n") else line + "\n")
                n += 1
        if n < lines:  # nothing written: the derived corpus is whole or absent
            raise ValueError(f"{corpus}: has {n} lines, fewer than the {lines} of the derived corpus")

    atomic_text_stream(out, folder, write, compress=compress, newline="")
    return n

