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

#: Config keys that do not change a result: where and how it ran, its checkpoints and logs, and the seed
#: (a result's fingerprint is compared across seeds; a comparison's cells must agree on the rest).
FREE_OF_RESULT = ("output", "train.threads", "train.device", "train.save_steps", "log.", "train.seed")


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


def files_digest(paths: Sequence[str | os.PathLike[str]]) -> str:
    """The SHA-256 (hex) of files' contents in order, each by its name and its own SHA-256 (a file changed,
    added, removed or renamed changes it; where the files lie does not)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(f"{os.path.basename(p)}\0{file_digest(p)}\n".encode())
    return h.hexdigest()


def config_digest(config: dict, ignore: Sequence[str] = ()) -> str:
    """The SHA-256 (hex) of a plain config (canonical JSON), without the dotted keys or prefixes (``log.``)
    in ``ignore``, nor the keys added since records were first made while they hold their defaults
    (:data:`hardmix.old_keys.ADDED_KEYS`).

    >>> config_digest({"eval": {"selection": "auto"}}) == config_digest({"eval": {}})  # added since
    True
    """
    import json

    from hardmix.old_keys import ADDED_KEYS
    from hardmix.training.config import key_in

    def walk(d: dict, prefix: str = "") -> dict:  # a key added since counts only away from its default
        return {k: walk(v, f"{prefix}{k}.") if isinstance(v, dict) else v for k, v in d.items()
                if not key_in(f"{prefix}{k}", ignore) and ADDED_KEYS.get(f"{prefix}{k}", walk) != v}
    # (``walk`` stands for "no default": no config value equals it)

    return hashlib.sha256(json.dumps(walk(config), sort_keys=True, default=str).encode()).hexdigest()


__all__ = ["FREE_OF_RESULT", "config_digest", "file_digest", "files_digest", "listing_digest"]
