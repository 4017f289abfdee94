"""Finding what an archive held, once extracted through the one gate of writes
(:func:`hardmix.utils.confine.extract_archive`: tar of any compression, or zip, with the standard library).

Tar members are extracted with the ``"data"`` filter (no absolute paths, no links out of the folder, no
device files); zip members that would land outside the folder are refused.

Example:
    >>> import tarfile, tempfile, pathlib, io
    >>> from hardmix.utils.confine import extract_archive
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with tarfile.open(d / "a.tar", "w") as t:
    ...     info = tarfile.TarInfo("top/STS/x.txt"); info.size = 2; t.addfile(info, io.BytesIO(b"hi"))
    >>> extract_archive(d / "a.tar", d / "out", d); find_dir_with(d / "out", "STS").name
    'top'
"""

from __future__ import annotations

from pathlib import Path


def find_dir_with(base: Path, child: str, depth: int = 3) -> Path:
    """The shallowest folder under ``base`` (``base`` included) that holds ``child``; ValueError if none."""
    level = [base]
    for _ in range(depth + 1):
        for d in level:
            if (d / child).exists():
                return d
        level = sorted(p for d in level for p in d.iterdir() if p.is_dir())
    raise ValueError(f"{base}: no folder holding {child!r} in the archive")
