"""Listing an ImageFolder split (``<split>/<class>/.../<image>``) safely: every image once, labelled by the
class folder it is listed under.

A scan walks each class folder in sorted order and:

- follows a link to a folder only when the folder it points to lies inside the split and is not one the walk
  is already inside (so a link never leads into a loop, nor out of the data set); any other folder link is
  refused naming it;
- reads a link to a file where it points (a tree of links into a shared copy of the data is a data set),
  the label being the class folder that holds the link;
- refuses two names of one file (links, hard links, a class folder linked under two names), naming both,
  since the image would count twice, possibly under two labels.

Files are images by their extension (``IMG_EXTENSIONS``); hidden files and folders are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class FolderScanError(ValueError):
    """A split whose listing would be wrong: a folder link out of it or into a loop, a file named twice."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _walk(top: str, root: str, ancestors: tuple[str, ...], key: str) -> list[str]:
    """Image files under ``top`` (sorted, depth first); ``ancestors``: the real folders walked into."""
    out: list[str] = []
    with os.scandir(top) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=True):
            real = os.path.realpath(entry.path)
            if entry.is_symlink():
                if not _inside(real, root):
                    raise FolderScanError(f"{key}: {entry.path} links to {real}, outside the data set "
                                          f"{root}; copy the folder in, or link its files one by one")
                if real in ancestors:
                    raise FolderScanError(f"{key}: {entry.path} links to {real}, a folder it is inside "
                                          "(a loop); remove the link")
            out.extend(_walk(entry.path, root, (*ancestors, real), key))
        elif entry.is_file(follow_symlinks=True) and entry.name.lower().endswith(IMG_EXTENSIONS):
            out.append(entry.path)
    return out


def class_folders(folder: str | os.PathLike[str]) -> list[str]:
    """The class folders of a split (sorted names of its sub-folders, hidden ones skipped)."""
    with os.scandir(folder) as it:
        return sorted(e.name for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=True))


def list_images(folder: str | os.PathLike[str], classes: Sequence[str],
                key: str = "data.dataset") -> list[tuple[str, int]]:
    """``(path, label)`` of every image of the split: ``label`` is the index in ``classes`` of the class
    folder the image is listed under; classes in the given order, files sorted within each.

    Raises:
        FolderScanError: a folder link out of the split or into a loop, or one file under two names.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> root = Path(tempfile.mkdtemp())
        >>> for c in ("cat", "dog"):
        ...     (root / c).mkdir()
        ...     _ = (root / c / "1.png").write_bytes(b"")
        >>> (root / "dog" / "again").symlink_to(root / "cat")
        >>> list_images(root, ["cat", "dog"])
        Traceback (most recent call last):
        ...
        hardmix.vision.folders.FolderScanError: data.dataset: .../cat/1.png and .../dog/again/1.png are ...
    """
    root = os.path.realpath(folder)
    seen: dict[tuple[int, int], str] = {}
    out: list[tuple[str, int]] = []
    for label, name in enumerate(classes):
        top = os.path.join(os.fspath(folder), name)
        real = os.path.realpath(top)
        if os.path.islink(top) and not _inside(real, root):
            raise FolderScanError(f"{key}: the class folder {top} links to {real}, outside the data set "
                                  f"{root}; copy the folder in, or link its files one by one")
        for path in _walk(top, root, (root, real), key):
            _once(path, seen, key)
            out.append((path, label))
    return out


def _once(path: str, seen: dict[tuple[int, int], str], key: str) -> None:
    """Refuse a second name (a link, a hard link) of a file already listed."""
    st = os.stat(path)
    first = seen.setdefault((st.st_dev, st.st_ino), path)
    if first != path:
        raise FolderScanError(f"{key}: {first} and {path} are one file (a link); each image must be listed "
                              "once: remove one")


def has_top_level_images(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` itself holds an image file (not only sub-folders): such a folder is unlabeled."""
    with os.scandir(folder) as it:
        return any(not e.name.startswith(".") and e.is_file(follow_symlinks=True)
                   and e.name.lower().endswith(IMG_EXTENSIONS) for e in it)


def image_subfolders(folder: str | os.PathLike[str]) -> list[str]:
    """The sub-folders of ``folder`` (sorted, hidden ones skipped) that hold an image at any depth: beside
    images at the top level, they make the folder ambiguous (class folders, or nested unlabeled images?).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> root = Path(tempfile.mkdtemp())
        >>> for name in ("a.png", "cat/b.png", "notes/readme.txt"):
        ...     (root / name).parent.mkdir(exist_ok=True)
        ...     _ = (root / name).write_bytes(b"")
        >>> image_subfolders(root)
        ['cat']
    """
    out = []
    for name in class_folders(folder):
        for _, dirs, files in os.walk(os.path.join(os.fspath(folder), name)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if any(not f.startswith(".") and f.lower().endswith(IMG_EXTENSIONS) for f in files):
                out.append(name)
                break
    return out


def list_all_images(folder: str | os.PathLike[str], key: str = "data.dataset") -> list[str]:
    """Every image below ``folder`` (an unlabeled folder: flat or nested, sub-folders are not classes),
    sorted depth first, with the same link rules as :func:`list_images`.

    Raises:
        FolderScanError: a folder link out of ``folder`` or into a loop, or one file under two names.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "2024").mkdir()
        >>> for name in ("b.png", "a.jpg", "2024/c.png", ".hidden.png", "notes.txt"):
        ...     _ = (root / name).write_bytes(b"")
        >>> [str(Path(p).relative_to(root)) for p in list_all_images(root)]
        ['2024/c.png', 'a.jpg', 'b.png']
    """
    root = os.path.realpath(folder)
    seen: dict[tuple[int, int], str] = {}
    paths = _walk(os.fspath(folder), root, (root,), key)
    for path in paths:
        _once(path, seen, key)
    return paths


__all__ = [
    "IMG_EXTENSIONS", "FolderScanError", "class_folders", "has_top_level_images", "image_subfolders",
    "list_all_images", "list_images",
]
