"""Safe archive extraction (tar, tar.gz, zip) with the standard library.

Tar members are extracted with the ``"data"`` filter (no absolute paths, no links out of the folder, no
device files); zip members that would land outside the folder are refused.

Example:
    >>> import tarfile, tempfile, pathlib, io
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with tarfile.open(d / "a.tar", "w") as t:
    ...     info = tarfile.TarInfo("top/STS/x.txt"); info.size = 2; t.addfile(info, io.BytesIO(b"hi"))
    >>> extract_archive(d / "a.tar", d / "out"); find_dir_with(d / "out", "STS").name
    'top'
"""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path


def extract_archive(archive: Path, dest: Path) -> None:
    """Extract ``archive`` (tar of any compression, or zip) into ``dest``; ValueError naming the file
    when it is neither or is damaged."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tar:
                tar.extractall(dest, filter="data")
            return
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                root = dest.resolve()
                for name in zf.namelist():
                    if not (dest / name).resolve().is_relative_to(root):
                        raise ValueError(f"{archive}: member {name!r} would land outside {dest}")
                zf.extractall(dest)
            return
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise ValueError(f"{archive}: damaged archive ({e}); delete it and download again") from e
    raise ValueError(f"{archive}: neither a tar nor a zip archive")


def find_dir_with(base: Path, child: str, depth: int = 3) -> Path:
    """The shallowest folder under ``base`` (``base`` included) that holds ``child``; ValueError if none."""
    level = [base]
    for _ in range(depth + 1):
        for d in level:
            if (d / child).exists():
                return d
        level = sorted(p for d in level for p in d.iterdir() if p.is_dir())
    raise ValueError(f"{base}: no folder holding {child!r} in the archive")
