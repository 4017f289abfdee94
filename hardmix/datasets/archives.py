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

from pathlib import Path

from hardmix.utils.confine import extract_archive as gate_extract


def extract_archive(archive: Path, dest: Path, root: Path | None = None) -> None:
    """Extract ``archive`` (tar of any compression, or zip) into ``dest``, inside ``root`` (the data root; by
    default ``dest`` itself), through :func:`hardmix.utils.confine.extract_archive`; ValueError naming the
    file when it is neither or is damaged."""
    gate_extract(archive, dest, dest if root is None else root)


def find_dir_with(base: Path, child: str, depth: int = 3) -> Path:
    """The shallowest folder under ``base`` (``base`` included) that holds ``child``; ValueError if none."""
    level = [base]
    for _ in range(depth + 1):
        for d in level:
            if (d / child).exists():
                return d
        level = sorted(p for d in level for p in d.iterdir() if p.is_dir())
    raise ValueError(f"{base}: no folder holding {child!r} in the archive")
