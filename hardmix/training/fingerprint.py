"""Fingerprints of what a result is made from: kept in a run's checkpoint, so that ``--resume`` refuses other
data or inputs, and in its ``results.json``, so that ``hardmix compare`` never pools cells made from other
data (and refuses, before any new cell trains, to add cells to ones made from other data).

Files are fingerprinted by their content (SHA-256 of their bytes), never by their names and sizes alone: an
image rewritten at the same size changes the fingerprint. Each file is read once per machine: its digest is
cached by its resolved path, size, modification time, inode and status-change time (``ctime``, which no
user call can set back, so a file rewritten in place with its old mtime restored is read again), in this
process and in ``digests.json`` in the machine's cache folder (:func:`cache_folder`: ``$HARDMIX_CACHE``,
else ``~/.cache/hardmix``, the folder of vision's decode cache too). A cache file that is damaged or
unreadable is ignored and written again; an entry is used only when all five fields match the file now.

Example:
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "corpus.txt"
    >>> _ = f.write_text("a sentence .\\n")
    >>> file_digest(f)[:12]
    '8fee31b54dc7'
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hardmix.version import __version__

#: Config keys that do not change a result: where and how it ran, its checkpoints and logs, and the seed
#: (a result's fingerprint is compared across seeds; a comparison's cells must agree on the rest), and how
#: much of the starting encoder is scored (``eval.start``: a control beside the result, not the result).
FREE_OF_RESULT = ("output", "train.threads", "train.device", "train.save_steps", "log.", "train.seed",
                  "eval.start")

#: The content digests' cache file in :func:`cache_folder`: ``{"version": 1, "files": {resolved path:
#: [size, mtime_ns, inode, ctime_ns, sha256]}}``.
DIGESTS = "digests.json"
_CACHE_VERSION = 1
_HEX = re.compile(r"[0-9a-f]{64}")


def cache_folder() -> Path:
    """The machine's own cache folder: ``$HARDMIX_CACHE``, else ``~/.cache/hardmix``. What it holds (the
    content digests, vision's decoded images) only saves work: it is never part of a result."""
    return Path(os.environ.get("HARDMIX_CACHE") or Path.home() / ".cache" / "hardmix")


def file_digest(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes (hex), read now (:func:`content_digest` reads a file once)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


Key = tuple[int, int, int, int]  # size, mtime_ns, inode, ctime_ns

_memory: dict[str, tuple[Key, str]] = {}  # resolved path -> (its key, its digest): this process's cache
_loaded: set[Path] = set()  # the cache files read into _memory


def _key(st: os.stat_result) -> Key:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def _read_cache(path: Path) -> dict[str, tuple[Key, str]]:
    """The entries of a digests file that are well formed; nothing from a damaged or unreadable one (or a
    link: the cache is trusted only as the file hardmix wrote)."""
    try:
        if path.is_symlink():
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
        files = data["files"] if isinstance(data, dict) and data.get("version") == _CACHE_VERSION else {}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return {}
    out: dict[str, tuple[Key, str]] = {}
    for name, entry in files.items() if isinstance(files, dict) else ():
        if isinstance(entry, list) and len(entry) == 5 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in entry[:4]) \
                and isinstance(entry[4], str) and _HEX.fullmatch(entry[4]):
            out[name] = ((entry[0], entry[1], entry[2], entry[3]), entry[4])
    return out


def _write_cache(folder: Path, new: dict[str, tuple[Key, str]]) -> None:
    """Merge ``new`` into the digests file (another process may have added entries since it was read) and
    write it atomically through the write gate; entries whose file is gone or changed are dropped. A cache
    that cannot be written (a read-only home) only costs the next process its reading."""
    from hardmix.utils.confine import write_text

    path = folder / DIGESTS
    entries = {**_read_cache(path), **new}
    kept = {}
    for name, (key, digest) in entries.items():
        try:
            if _key(os.stat(name)) == key:
                kept[name] = [*key, digest]
        except OSError:
            continue
    try:
        write_text(json.dumps({"version": _CACHE_VERSION, "files": kept}, separators=(",", ":")) + "\n",
                   path, folder)
    except (OSError, ValueError):  # ValueError: the gate's OutsideError (a link where the file goes)
        pass


def _resolved(path: str | os.PathLike[str], folders: dict[str, str]) -> str:
    """``os.path.realpath(path)``, its folder resolved once per folder in ``folders`` (the images of a data
    set share a few folders) and the file itself only when it is a link."""
    head, name = os.path.split(os.path.abspath(path))
    real_head = folders.get(head)
    if real_head is None:
        real_head = folders[head] = os.path.realpath(head)
    real = os.path.join(real_head, name)
    return os.path.realpath(real) if os.path.islink(real) else real


def content_digests(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The SHA-256 (hex) of each file's bytes, each file read only when its cached digest does not match
    it now (resolved path, size, mtime, inode, ctime); the new digests are added to the cache file once,
    at the end."""
    folder = cache_folder()
    cache_file = folder / DIGESTS
    out: list[str] = []
    new: dict[str, tuple[Key, str]] = {}
    folders: dict[str, str] = {}
    for p in paths:
        real = _resolved(p, folders)
        before = _key(os.stat(real))
        hit = _memory.get(real)
        if (hit is None or hit[0] != before) and cache_file not in _loaded:
            _loaded.add(cache_file)
            _memory.update({k: v for k, v in _read_cache(cache_file).items() if k not in _memory})
            hit = _memory.get(real)
        if hit is not None and hit[0] == before:
            out.append(hit[1])
            continue
        digest = file_digest(real)
        if _key(os.stat(real)) == before:  # a file that changed while it was read is not cached
            _memory[real] = new[real] = (before, digest)
        out.append(digest)
    if new:
        _write_cache(folder, new)
    return out


def content_digest(path: str | os.PathLike[str]) -> str:
    """The SHA-256 (hex) of a file's bytes, read once per machine while the file stays the same
    (:func:`content_digests`)."""
    return content_digests([path])[0]


def _named_digest(names: Sequence[str], paths: Sequence[str | os.PathLike[str]]) -> str:
    """The SHA-256 (hex) of files in order, each by its name in ``names`` and its content's SHA-256."""
    h = hashlib.sha256()
    for name, digest in zip(names, content_digests(paths), strict=True):
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()


def files_digest(paths: Sequence[str | os.PathLike[str]]) -> str:
    """The SHA-256 (hex) of files' contents in order, each by its name and its own SHA-256 (a file changed,
    added, removed or renamed changes it; where the files lie does not)."""
    return _named_digest([os.path.basename(p) for p in paths], paths)


def tree_digest(paths: Sequence[str | os.PathLike[str]], root: str | os.PathLike[str]) -> str:
    """The SHA-256 (hex) of files in order, each by its path relative to ``root`` and its content's SHA-256
    (a file rewritten, even at the same size, added, removed or renamed changes it; the folder may move)."""
    return _named_digest([os.path.relpath(p, root) for p in paths], paths)


def config_digest(config: dict, ignore: Sequence[str] = ()) -> str:
    """The SHA-256 (hex) of a plain config (canonical JSON), without the dotted keys or prefixes (``log.``)
    in ``ignore``, nor the keys added since records were first made while they hold their defaults
    (:data:`hardmix.config.old_keys.ADDED_KEYS`).

    >>> config_digest({"eval": {"selection": "auto"}}) == config_digest({"eval": {}})  # added since
    True
    """
    from hardmix.config.old_keys import ADDED_KEYS
    from hardmix.training.config import key_in

    kept: dict[str, Any] = {}
    left = [(config, kept, "")]  # (a mapping, its copy, its dotted prefix), walked here
    no_default = object()  # no config value equals it
    while left:
        mapping, copy, prefix = left.pop()
        for k, v in mapping.items():
            key = f"{prefix}{k}"
            if key_in(key, ignore) or ADDED_KEYS.get(key, no_default) == v:  # added since: at its default
                continue
            if isinstance(v, dict):
                copy[k] = {}
                left.append((v, copy[k], key + "."))
            else:
                copy[k] = v
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


class DataMismatch(NamedTuple):
    """How a recorded training-data fingerprint fails to establish the data of now (:func:`data_mismatch`).

    Attributes:
        recorded: the entries the record identifies its data by, sorted; None: it records no fingerprint.
        other_form: the record identifies its data by other entries (an older hardmix's fingerprint), so
            whether the data are the same cannot be established.
        missing: the entries of now that the record lacks (in now's order).
        differ: the entries recorded with another value than now's (in now's order).
    """

    recorded: list[str] | None
    other_form: bool
    missing: list[str]
    differ: list[str]


def data_mismatch(recorded: Any, now: dict[str, Any] | None, exact: bool = False) -> DataMismatch | None:
    """The one rule of "the same training data", for ``--resume`` (a checkpoint's fingerprint) and ``hardmix
    compare`` (a finished cell's record, a cell's checkpoint): every entry of ``now`` is recorded, with the
    same value; with ``exact`` the record holds no other entry either (a resume compares the whole
    fingerprint the build makes; a comparison, what is known before building, which a record may exceed).
    None when the data are established as the same, or ``now`` is None (nothing to compare).

    >>> data_mismatch({"images": 16, "sha256": "a"}, {"images": 17}).differ
    ['images']
    >>> data_mismatch({"images": 16, "sha256": "a"}, {"images": 16}) is None
    True
    >>> data_mismatch({"images": 16, "sha256": "a"}, {"images": 16}, exact=True).other_form
    True
    """
    if now is None or recorded == now:
        return None
    if not isinstance(recorded, dict):
        return DataMismatch(None, True, list(now), [])
    missing = [k for k in now if k not in recorded]
    if missing or (exact and set(recorded) != set(now)):
        return DataMismatch(sorted(recorded), True, missing, [])
    differ = [k for k in now if recorded[k] != now[k]]
    return DataMismatch(sorted(recorded), False, [], differ) if differ else None


def inputs_mismatch(recorded: Any, now: str | None) -> str | None:
    """The one rule of "the same inputs" (model files, evaluation sets: a task's ``input_digest``), for
    ``--resume`` and ``hardmix compare``: ``recorded`` (a checkpoint, or a record's fingerprint) holds an
    ``inputs`` entry equal to ``now`` (None too: a run that reads none). Returns ``"unrecorded"`` (an older
    hardmix's, by which they cannot be established), ``"differ"``, or None when they are the same.

    >>> inputs_mismatch({"inputs": None}, None), inputs_mismatch({}, None)
    (None, 'unrecorded')
    >>> inputs_mismatch({"inputs": "a" * 64}, "b" * 64)
    'differ'
    """
    if not isinstance(recorded, dict) or "inputs" not in recorded:
        return "unrecorded"
    return "differ" if recorded["inputs"] != now else None


def result_fingerprint(config: dict[str, Any], data: dict[str, Any] | None,
                       inputs: str | None) -> dict[str, Any]:
    """What determines a run's result (``results.json``'s ``fingerprint``): its plain ``config`` but where and
    how it ran (:data:`FREE_OF_RESULT`), its training ``data`` (a task's ``data_fingerprint``), its other
    ``inputs`` (model files, evaluation sets, as the run started with them) and hardmix's version. Two cells
    of a comparison pair only when theirs agree but for the seed."""
    return {"config": config_digest(config, FREE_OF_RESULT), "data": data, "inputs": inputs,
            "hardmix": __version__}


__all__ = [
    "DIGESTS", "FREE_OF_RESULT", "DataMismatch", "cache_folder", "config_digest", "content_digest",
    "content_digests", "data_mismatch", "file_digest", "files_digest", "inputs_mismatch",
    "result_fingerprint", "tree_digest",
]
