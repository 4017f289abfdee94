"""What hardmix remembers about the data it fetched, under ``<root>/.hardmix/``.

- ``checksums.json``: the SHA-256 and length of each source file at its first download (for sources that
  publish no checksum), checked at every later download of the same source.
- ``datasets/<name>.json``: the manifest of a prepared data set: the length and SHA-256 of every file it
  holds, checked by ``hardmix data check``.

Both are written atomically (a temporary file renamed into place).

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "d").mkdir(); _ = (root / "d" / "x").write_text("a")
    >>> files = hash_tree(root / "d")
    >>> files["x"][0], verify_files(root / "d", files)
    (1, [])
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from hardmix.utils.confine import write_text

RECORDS_DIR = ".hardmix"


def records_dir(root: Path) -> Path:
    return root / RECORDS_DIR


def downloads_dir(root: Path) -> Path:
    """Where archives and their ``.part`` files wait while they are fetched."""
    return records_dir(root) / "downloads"


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(
            f"{path}: unreadable record ({e}); delete it and run `hardmix data download` again") from e


def recorded_checksum(root: Path, key: str) -> dict[str, Any] | None:
    """``{"sha256", "size", "url"}`` recorded at the first download of source ``key``, or None."""
    return _read_json(records_dir(root) / "checksums.json").get(key)


def record_checksum(root: Path, key: str, url: str, sha256: str, size: int) -> None:
    path = records_dir(root) / "checksums.json"
    data = _read_json(path)
    data[key] = {"sha256": sha256, "size": size, "url": url}
    write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", path, root)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def hash_tree(path: Path) -> dict[str, list[Any]]:
    """``{relative path: [length, sha256]}`` of every file under ``path`` (or of ``path`` itself, under its
    own name, when it is a file)."""
    if path.is_file():
        return {path.name: [path.stat().st_size, _sha256(path)]}
    out: dict[str, list[Any]] = {}
    for dirpath, _, names in sorted(os.walk(path)):
        for name in sorted(names):
            f = Path(dirpath) / name
            out[f.relative_to(path).as_posix()] = [f.stat().st_size, _sha256(f)]
    return out


def verify_files(path: Path, files: dict[str, list[Any]]) -> list[str]:
    """Problems (one line each) of ``path`` against a :func:`hash_tree` record; empty when it matches."""
    problems: list[str] = []
    base = path.parent if path.is_file() else path
    for rel, (size, sha) in files.items():
        f = base / rel
        if not f.is_file():
            problems.append(f"{f}: missing")
        elif f.stat().st_size != size:
            problems.append(f"{f}: {f.stat().st_size} bytes, recorded {size}")
        elif _sha256(f) != sha:
            problems.append(f"{f}: sha256 differs from the one recorded at download")
    return problems


def manifest_path(root: Path, name: str) -> Path:
    return records_dir(root) / "datasets" / f"{name}.json"


def read_manifest(root: Path, name: str) -> dict[str, Any] | None:
    """The manifest written when data set ``name`` was prepared, or None (e.g. data laid out by hand)."""
    return _read_json(manifest_path(root, name)) or None


def write_manifest(root: Path, name: str, manifest: dict[str, Any]) -> None:
    write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", manifest_path(root, name), root)
