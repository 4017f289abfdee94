"""Fingerprints of training data, kept in a run's checkpoint so that ``--resume`` refuses other data.

Example:
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "corpus.txt"
    >>> _ = f.write_text("a sentence .\\n")
    >>> file_digest(f)[:12]
    '8fee31b54dc7'
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence


def file_digest(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def listing_digest(paths: Sequence[str], root: str | os.PathLike[str]) -> str:
    """The SHA-256 (hex) of a file list: each path relative to ``root`` and its size, in order (a file
    added, removed, renamed or rewritten at another size changes it; the folder may move)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(f"{os.path.relpath(p, root)}\0{os.path.getsize(p)}\n".encode())
    return h.hexdigest()


__all__ = ["file_digest", "listing_digest"]
