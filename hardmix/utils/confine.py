"""Writes stay where the user said: the one gate every file hardmix creates, appends to, replaces or
deletes goes through.

Every function here takes the path it writes and ``root``, the folder the user named for it (a
comparison's ``--output``, a run's ``--output``, the data root, the downloads folder, the folder of an
output file given on the command line). :func:`confined` is the check they all make first: the path must lie
inside ``root`` once ``..`` is resolved, and no link may stand anywhere between ``root`` and the file, nor
at the file itself (``root`` itself, the folder the user named, may be a link). A path that fails it is an
:class:`OutsideError`, one line naming the path, and nothing is written. Files are opened with
``O_NOFOLLOW`` (a link planted after the check is not followed either), whole files are written atomically
(a temporary file in the same folder, fsync, ``os.replace``), and a folder's links are removed as links,
never followed.

``tests/core/test_write_gate.py`` reads hardmix's code and fails on any call that writes a file outside this
module (``open`` in a write mode, ``Path.write_text``, ``torch.save``, ``np.save``, ``savefig``,
``shutil``, ``os.replace``, archive extraction, ...): a new writer goes through a function of this module.

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> confined(root / "runs" / "text", root) == (root / "runs" / "text").resolve()
    True
    >>> confined(root / ".." / "elsewhere", root)
    Traceback (most recent call last):
    ...
    hardmix.utils.confine.OutsideError: ... is outside ... (the folder hardmix writes in): not written
    >>> _ = makedirs(root / "logs", root); (root / "plots").symlink_to(root / "logs")
    >>> write_text("x", root / "plots" / "a.png", root)
    Traceback (most recent call last):
    ...
    hardmix.utils.confine.OutsideError: ...plots is a link: hardmix writes through no link inside ...
"""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

PathLike = str | os.PathLike[str]


class OutsideError(ValueError):
    """A path hardmix was about to write or delete resolves outside the folder it writes in, or reaches it
    through a link."""


# -------------------------------------------------------------------------------------------- the check
def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def confined(path: PathLike, root: PathLike) -> Path:
    """``path`` resolved, if it lies inside ``root`` (or is it) with no link between ``root`` and it, nor at
    ``path`` itself; else an :class:`OutsideError` naming the path. ``path`` need not exist yet; ``root``
    (the folder the user named) may itself be a link, or lie below one."""
    given = os.path.abspath(path)
    top, real_top = os.path.abspath(root), os.path.realpath(root)
    if _inside(given, top):
        rel = os.path.relpath(given, top)
    elif _inside(given, real_top):
        rel = os.path.relpath(given, real_top)
    else:
        raise OutsideError(f"{path} is outside {root} (the folder hardmix writes in): not written")
    current = real_top
    for part in ([] if rel == "." else rel.split(os.sep)):
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise OutsideError(f"{path}: {current} is a link: hardmix writes through no link inside {root} "
                               "(not written)")
    return Path(current)


def check_folder(folder: PathLike, root: PathLike) -> Path:
    """:func:`confined` for ``folder``, and no link anywhere inside it (what a library writes into a folder
    by its own names: ``save_pretrained``, a tensorboard writer)."""
    real = confined(folder, root)
    if real.is_dir():
        for dirpath, dirnames, filenames in os.walk(real):
            for name in dirnames + filenames:
                if os.path.islink(os.path.join(dirpath, name)):
                    raise OutsideError(f"{folder}: {os.path.join(dirpath, name)} is a link: hardmix writes "
                                       f"through no link inside {root} (not written)")
    return real


# ------------------------------------------------------------------------------------------- folders
def makedirs(path: PathLike, root: PathLike) -> Path:
    """Create the folder ``path`` inside ``root`` (and ``root`` and the folders between, where missing);
    an existing folder is fine. Returns it resolved."""
    real = confined(path, root)
    top = Path(os.path.realpath(root))
    if not top.is_dir():
        os.makedirs(top, exist_ok=True)
    current = top
    for part in real.relative_to(top).parts:
        current = current / part
        try:
            os.mkdir(current)
        except FileExistsError:
            if current.is_symlink() or not current.is_dir():
                raise
    return real


def remove_folder_if_empty(path: PathLike, root: PathLike) -> bool:
    """Remove the folder ``path`` inside ``root`` if it is empty; whether it was removed."""
    real = confined(path, root)
    if real.is_dir() and not any(real.iterdir()):
        os.rmdir(real)
        return True
    return False


# ------------------------------------------------------------------------------------------- files
_FLAGS = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


def open_for_write(path: PathLike, root: PathLike, mode: str = "w", encoding: str | None = None,
                   newline: str | None = None) -> IO[Any]:
    """Open ``path`` inside ``root`` to write (``w``), append (``a``) or create (``x``, failing when it
    exists), in text or binary (``b``); the file itself is opened without following a link."""
    kind = mode.replace("b", "").replace("t", "")
    if kind not in _FLAGS:
        raise ValueError(f"open_for_write: mode {mode!r} is not w, a or x (with b or t)")
    real = confined(path, root)
    try:
        fd = os.open(real, _FLAGS[kind] | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:
        raise type(e)(e.errno, e.strerror, str(path)) from e
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding=encoding or "utf-8", newline=newline)


def open_gzip_for_write(path: PathLike, root: PathLike, encoding: str = "utf-8",
                        newline: str | None = None) -> IO[str]:
    """``gzip.open(path, "wt")`` through :func:`open_for_write` (the same bytes: the header names the file
    as gzip's own would)."""
    import gzip

    raw = open_for_write(path, root, "wb")
    compressed = gzip.GzipFile(filename=os.fspath(path), mode="wb", compresslevel=9, fileobj=raw)
    compressed.myfileobj = raw  # type: ignore[assignment]  # closed with it, as gzip.open's own (any binary file)
    return io.TextIOWrapper(compressed, encoding=encoding, newline=newline)


def current_umask() -> int:
    """The process's file-creation mask (read without changing it, from /proc where there is one)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it, then put it back
    os.umask(mask)
    return mask


#: A temporary file of :func:`atomic_write`: ``.<name>.<pid>-<8 random>.tmp`` beside the file it becomes
#: (the pid of the process writing it); an older hardmix's had no pid: ``.<name>.<8 random>.tmp``.
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?:(?P<pid>\d+)-)?[a-z0-9_]{8}\.tmp$")


def _temporary(real: Path) -> tuple[int, str]:
    """A new, empty temporary file beside ``real`` (:data:`_TEMP`): its descriptor and path."""
    return tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.{os.getpid()}-", suffix=".tmp")


class _Writes:
    """A binary file's ``write`` that remembers the first operating-system error it raised: a library that
    turns it into its own error (torch's ``RuntimeError: ... unexpected pos``, NumPy's "15360 requested and
    9184 written") is then reported as that error (a full disk, naming the file). Not a real file object,
    so NumPy writes through ``write`` too."""

    def __init__(self, f: IO[Any]) -> None:
        self._f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self._f.flush()

    def __getattr__(self, name: str) -> Any:  # tell, seek, ... of the file
        return getattr(self._f, name)


def _write_temporary(real: Path, write: Callable[[IO[Any]], object], mode: str) -> str:
    """Write ``write``'s bytes to a new temporary file beside ``real``, fsynced; its path. On any failure
    it is removed, and an operating-system error (a full disk, a quota) names ``real``, never the
    temporary file (nor no file)."""
    fd, tmp = _temporary(real)
    recorded = None
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide the file from the user's group
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            target = recorded = _Writes(f) if "b" in mode else None
            write(target if target is not None else f)  # type: ignore[arg-type]
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        cause = recorded.error if recorded is not None and recorded.error is not None else e
        if isinstance(cause, OSError) and cause.errno and cause.filename in (None, tmp):
            # a full disk or a quota: name the file being written, not the temporary one (or none)
            raise OSError(cause.errno, cause.strerror or os.strerror(cause.errno), str(real)) from e
        raise
    return tmp


def atomic_write(path: PathLike, root: PathLike, write: Callable[[IO[Any]], object], mode: str) -> Path:
    """Call ``write`` on a temporary file in the target folder (created where missing), fsync, then
    ``os.replace`` it into place; on any failure the temporary file is removed and the previous file stays
    intact, and an operating-system error (a full disk: ``ENOSPC``, however the library writing reports it)
    names ``path``. Returns ``path``."""
    path = Path(path)
    real = confined(path, root)
    makedirs(real.parent, root)
    try:
        tmp = _write_temporary(real, write, mode)
    except OSError as e:
        if e.filename == str(real) and e.errno:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    try:
        confined(path, root)  # a link planted while it was written
        os.replace(tmp, real)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    return path


def replace_together(files: Sequence[tuple[PathLike, Callable[[IO[Any]], None], str]], marker: PathLike,
                     root: PathLike, remove: Sequence[PathLike] = ()) -> list[Path]:
    """Replace files that belong together (an array and the listing of its rows) together or not at all.

    Each of ``files`` (path, ``write``, mode) is first written whole to a temporary file beside it and
    fsynced: a failure there (a full disk) removes every temporary file, and no file is replaced (the
    error names the file). Then, with nothing left to allocate: ``marker`` (an empty file made with the
    rest) is renamed into place, the files of ``remove`` (a previous set's members that this one does not
    have) are deleted, each temporary file is renamed over its file, and ``marker`` is deleted. A reader
    that finds ``marker`` refuses the set (:func:`hardmix.commands.neighbours.read_set`): it is only there
    while a replacement is under way, or after one was killed. Returns the paths written.
    """
    reals = [confined(p, root) for p, _, _ in files]
    real_marker = confined(marker, root)
    gone = [confined(p, root) for p in remove]
    for real in reals:
        makedirs(real.parent, root)
    temps: list[tuple[str, Path]] = []
    try:
        for (path, write, mode), real in zip(files, reals, strict=True):
            try:
                temps.append((_write_temporary(real, write, mode), real))
            except OSError as e:
                if e.filename == str(real) and e.errno:
                    raise OSError(e.errno, e.strerror, str(path)) from e
                raise
        temps.append((_write_temporary(real_marker, lambda f: None, "wb"), real_marker))
        for path in [*(p for p, _, _ in files), marker, *remove]:
            confined(path, root)  # a link planted while they were written
    except BaseException:
        for tmp, _ in temps:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        raise
    marker_tmp = temps.pop()[0]
    os.replace(marker_tmp, real_marker)
    try:
        for real in gone:
            if real.is_file():
                real.unlink()
        while temps:
            tmp, real = temps[0]
            os.replace(tmp, real)
            temps.pop(0)
    finally:  # stopped midway (an interrupt): the marker stays, the temporary files go
        for tmp, _ in temps:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    _fsync_folder(real_marker.parent)
    real_marker.unlink()
    return [Path(p) for p, _, _ in files]


def _fsync_folder(folder: Path) -> None:
    """Make the renames in ``folder`` durable (where a folder can be fsynced)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale_temporaries(
    folder: PathLike, root: PathLike, alive: Callable[[int], bool], names: Sequence[str] | None = None,
    held: bool = False,
) -> list[tuple[Path, int]]:
    """Delete the temporary files of :func:`atomic_write` that a killed process left in ``folder`` (a
    SIGKILL during a checkpoint's write leaves the whole checkpoint's bytes in a hidden file): those whose
    writing process is gone; with ``held`` (the caller holds the folder's lock: no one else writes there)
    those of an older hardmix too, which name no process. ``alive(pid)``: whether a process lives
    (:func:`hardmix.training.run_folder.process_alive`, the lock's own check). ``names``: only the
    temporary files of these files (those the caller writes). Links and folders are never touched. Returns
    each file removed and its size, for the caller to say.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / ".checkpoint.pt.999999999-abcd1234.tmp").write_bytes(b"x" * 5)
    >>> [(p.name, n) for p, n in remove_stale_temporaries(d, d, alive=lambda pid: False)]
    [('.checkpoint.pt.999999999-abcd1234.tmp', 5)]
    """
    real = confined(folder, root)
    removed: list[tuple[Path, int]] = []
    try:
        entries = sorted(os.scandir(real), key=lambda e: e.name)
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m is None or (names is not None and m["name"] not in names) or \
                not entry.is_file(follow_symlinks=False):
            continue
        pid = m["pid"]
        if (pid is None and not held) or (pid is not None and (int(pid) == os.getpid() or
                                                               alive(int(pid)))):
            continue
        size = entry.stat(follow_symlinks=False).st_size
        remove_written(Path(folder) / entry.name, root)
        removed.append((Path(folder) / entry.name, size))
    return removed


def say_removed(removed: Sequence[tuple[Path, int]], where: str) -> str:
    """The note a command prints for :func:`remove_stale_temporaries`' files (empty when none).

    >>> say_removed([(Path("run/.checkpoint.pt.7-abcd1234.tmp"), 56_000_000)], "run")
    'removed 1 temporary file a killed run left in run (56.0 MB): .checkpoint.pt.7-abcd1234.tmp'
    """
    if not removed:
        return ""
    total = sum(n for _, n in removed)
    names = ", ".join(p.name for p, _ in removed[:5]) + (", ..." if len(removed) > 5 else "")
    s = "" if len(removed) == 1 else "s"
    return (f"removed {len(removed)} temporary file{s} a killed run left in {where} ({total / 1e6:.1f} MB): "
            f"{names}")


def write_text(text: str, path: PathLike, root: PathLike) -> Path:
    """Write a text file (UTF-8) atomically inside ``root``."""
    return atomic_write(path, root, lambda f: f.write(text), "w")


def write_bytes(data: bytes, path: PathLike, root: PathLike) -> Path:
    """Write a binary file atomically inside ``root``."""
    return atomic_write(path, root, lambda f: f.write(data), "wb")


def save_torch(obj: Any, path: PathLike, root: PathLike) -> Path:
    """``torch.save`` atomically inside ``root``.

    Example:
        >>> import tempfile, torch
        >>> d = tempfile.mkdtemp()
        >>> p = save_torch({"step": 3}, f"{d}/ckpt.pt", d)
        >>> torch.load(p)["step"]
        3
    """
    import torch

    return atomic_write(path, root, lambda f: torch.save(obj, f), "wb")


def save_numpy(array: Any, path: PathLike, root: PathLike) -> Path:
    """``np.save`` of one array to ``path`` inside ``root`` (written as named: no ``.npy`` is added)."""
    import numpy as np

    return atomic_write(path, root, lambda f: np.save(f, array), "wb")


def save_numpy_to(array: Any, stream: IO[bytes]) -> None:
    """``np.save`` of one array to an open binary stream (standard output, a file of this module)."""
    import numpy as np

    np.save(stream, array)


def save_figure(fig: Any, path: PathLike, root: PathLike, **kwargs: Any) -> Path:
    """``fig.savefig(path, **kwargs)`` atomically inside ``root`` (its format from the file's suffix)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".").lower() or None, **kwargs)
    return write_bytes(buf.getvalue(), path, root)


def save_image(image: Any, path: PathLike, root: PathLike, **kwargs: Any) -> Path:
    """A PIL image's ``save`` to ``path`` inside ``root`` (its format from the suffix, or ``format=``)."""
    from PIL import Image

    fmt = kwargs.pop("format", None) or Image.registered_extensions()[Path(path).suffix.lower()]
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kwargs)
    return write_bytes(buf.getvalue(), path, root)


def copy_file(src: PathLike, dst: PathLike, root: PathLike) -> Path:
    """Copy the bytes of ``src`` to ``dst`` inside ``root`` (as ``shutil.copyfile``: no metadata),
    atomically (:func:`atomic_write`)."""
    with open(src, "rb") as fin:
        return atomic_write(dst, root, lambda fout: shutil.copyfileobj(fin, fout), "wb")


def atomic_text_stream(path: PathLike, root: PathLike, write: Callable[[IO[str]], None],
                       compress: bool = False, newline: str | None = None) -> Path:
    """:func:`atomic_write` of UTF-8 text written to a stream by ``write``, gzip-compressed with
    ``compress`` (the header names ``path``, as ``gzip.open``'s would): a failure, or an exception of
    ``write``, leaves no file and keeps a previous one.

    >>> import gzip, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = atomic_text_stream(f"{d}/a.txt.gz", d, lambda f: f.write("a\\n"), compress=True)
    >>> gzip.open(f"{d}/a.txt.gz", "rt").read()
    'a\\n'
    """
    import gzip

    def to(raw: IO[bytes]) -> None:
        gz = gzip.GzipFile(filename=os.fspath(path), mode="wb", compresslevel=9, fileobj=raw) \
            if compress else None
        text = io.TextIOWrapper(gz if gz is not None else raw, encoding="utf-8", newline=newline)
        write(text)
        text.flush()
        text.detach()
        if gz is not None:
            gz.close()  # writes the trailer; the file itself stays open

    return atomic_write(path, root, to, "wb")


def replace(src: PathLike, dst: PathLike, root: PathLike, src_root: PathLike | None = None) -> Path:
    """Move ``src`` (inside ``src_root``, by default ``root``) to ``dst`` inside ``root``, replacing a file
    there (``os.replace``: same file system)."""
    real_src = confined(src, root if src_root is None else src_root)
    real_dst = confined(dst, root)
    os.replace(real_src, real_dst)
    return Path(dst)


def remove_written(path: PathLike, root: PathLike) -> None:
    """Delete ``path`` (a file, or a folder with what is in it), which hardmix wrote inside ``root``;
    nothing when it does not exist. ``path`` must pass :func:`confined` (:class:`OutsideError` otherwise,
    nothing deleted), and a folder's links are removed as links, never followed: nothing outside ``root``
    is touched."""
    real = confined(path, root)
    if real.is_dir():
        shutil.rmtree(real)  # the links inside go as links: rmtree never follows one
    elif real.exists():
        real.unlink()


# ------------------------------------------------------------------------ what a library writes into a folder
@contextmanager
def temporary_folder(root: PathLike, prefix: str = ".tmp") -> Iterator[Path]:
    """A fresh folder inside ``root`` (created), removed with what is in it on leaving."""
    top = makedirs(root, root)
    work = Path(tempfile.mkdtemp(dir=top, prefix=prefix))
    try:
        yield work
    finally:
        remove_written(work, root)


def save_pretrained(obj: Any, folder: PathLike, root: PathLike, **kwargs: Any) -> Path:
    """``obj.save_pretrained(folder, **kwargs)`` (transformers' model or tokenizer) into a folder inside
    ``root`` holding no link: every file it writes by its own names stays inside."""
    real = makedirs(folder, root)
    check_folder(real, root)
    try:
        obj.save_pretrained(real, **kwargs)
    except Exception as e:  # safetensors' SafetensorError "... No space left on device (os error 28)"
        if is_full_disk(e):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder)) from e
        raise
    return Path(folder)


def is_full_disk(e: BaseException) -> bool:
    """Whether ``e`` is a full disk, as the OS says it (``ENOSPC``) or a library that wraps it says it
    (safetensors' Rust ``os error 28``).

    >>> is_full_disk(OSError(errno.ENOSPC, "x")), is_full_disk(RuntimeError("I/O error: (os error 28)"))
    (True, True)
    """
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return True
    text = str(e)
    return f"os error {errno.ENOSPC})" in text or os.strerror(errno.ENOSPC) in text


def summary_writer(log_dir: PathLike, root: PathLike) -> Any:
    """A tensorboard ``SummaryWriter`` whose log folder, inside ``root`` and holding no link, is created
    first."""
    from torch.utils.tensorboard import SummaryWriter

    real = makedirs(log_dir, root)
    check_folder(real, root)
    return SummaryWriter(log_dir=str(real))


def extract_archive(archive: PathLike, dest: PathLike, root: PathLike) -> None:
    """Extract ``archive`` (a tar of any compression, or a zip) into ``dest`` inside ``root``. Every member
    must land inside ``dest``; tar members go through the ``"data"`` filter (no absolute paths, no links
    out of the folder, no device files) and a zip member that would land outside is refused; ``ValueError``
    naming the file when it is neither or is damaged."""
    import tarfile
    import zipfile

    real = makedirs(dest, root)
    check_folder(real, root)
    try:
        if tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tar:
                tar.extractall(real, filter="data")
            return
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    if not _inside(os.path.abspath(real / name), str(real)):
                        raise ValueError(f"{archive}: member {name!r} would land outside {dest}")
                zf.extractall(real)
            return
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise ValueError(f"{archive}: damaged archive ({e}); delete it and download again") from e
    raise ValueError(f"{archive}: neither a tar nor a zip archive")


__all__ = [
    "OutsideError", "atomic_text_stream", "atomic_write", "check_folder", "confined", "copy_file",
    "current_umask", "extract_archive", "is_full_disk", "makedirs", "open_for_write", "open_gzip_for_write",
    "remove_folder_if_empty", "remove_stale_temporaries", "remove_written", "replace",
    "replace_together", "save_figure", "save_image", "save_numpy", "save_numpy_to", "save_pretrained",
    "save_torch", "say_removed", "summary_writer", "temporary_folder", "write_bytes", "write_text",
]
