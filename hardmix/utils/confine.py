"""Writes stay where the user said: the one guard every writer and every cleanup of hardmix goes through.

A path hardmix creates, replaces or deletes must lie inside the folder the user named for it (a
comparison's ``--output``, a run's ``--output``, the data root, the downloads folder). :func:`confined`
checks that after resolving ``..`` and every link on the way, and :func:`remove_written` deletes one
file or folder hardmix wrote, after the same check, never following a link out (a link is removed as a
link). Names taken from a spec are plain identifiers already (``hardmix.compare.spec.check_names``); this
guard is what makes a mistake there, or a link planted in an output folder, unable to reach further.

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> confined(root / "runs" / "text", root) == (root / "runs" / "text").resolve()
    True
    >>> confined(root / ".." / "elsewhere", root)
    Traceback (most recent call last):
    ...
    hardmix.utils.confine.OutsideError: ... is outside ... (the folder hardmix writes in): not written
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


class OutsideError(ValueError):
    """A path hardmix was about to write or delete resolves outside the folder it writes in."""


def confined(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> Path:
    """``path`` resolved (``..`` and links followed), if it is ``root`` or inside it (``root`` resolved
    too); else an :class:`OutsideError` naming both. ``path`` need not exist yet."""
    real_root = Path(root).resolve()
    real = Path(path).resolve()
    if real != real_root and real_root not in real.parents:
        raise OutsideError(f"{path} is outside {root} (the folder hardmix writes in): not written")
    return real


def remove_written(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> None:
    """Delete ``path`` (a file, a folder with what is in it, or a link: the link itself), which hardmix
    wrote inside ``root``; nothing when it does not exist. The folder that holds ``path`` must resolve
    inside ``root`` (:class:`OutsideError` otherwise, nothing deleted), and a folder's links are removed,
    never followed: nothing outside ``root`` is touched."""
    path = Path(path)
    confined(path.parent, root)
    if path.is_dir() and not path.is_symlink():
        confined(path, root)
        shutil.rmtree(path)  # the links inside go as links: rmtree never follows one
    elif path.is_symlink() or path.exists():
        path.unlink()


__all__ = ["OutsideError", "confined", "remove_written"]
