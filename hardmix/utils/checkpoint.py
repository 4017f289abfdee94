"""Atomic checkpoint writing: a crash mid-write never leaves a truncated checkpoint behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import torch


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


def _atomic_write(path: str | os.PathLike[str], write: Callable[[IO[Any]], None], mode: str) -> Path:
    """Call ``write`` on a temporary file in the target folder, fsync, then ``os.replace`` it into place;
    on any failure the temporary file is removed and the previous file stays intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide the file from the user's group
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno and e.filename in (None, tmp):
            # a full disk or a quota: name the file being written, not the temporary one (or none)
            raise OSError(e.errno, e.strerror or os.strerror(e.errno), str(path)) from e
        raise
    return path


def atomic_torch_save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """``torch.save`` to a temporary file in the target folder, fsync, then ``os.replace``.

    Example:
        >>> import tempfile, torch
        >>> d = tempfile.mkdtemp()
        >>> p = atomic_torch_save({"step": 3}, f"{d}/ckpt.pt")
        >>> torch.load(p)["step"]
        3
    """
    return _atomic_write(path, lambda f: torch.save(obj, f), "wb")


def atomic_write_text(text: str, path: str | os.PathLike[str]) -> Path:
    """Write a text file atomically (temporary file, fsync, ``os.replace``)."""
    return _atomic_write(path, lambda f: f.write(text), "w")


def atomic_write_bytes(data: bytes, path: str | os.PathLike[str]) -> Path:
    """Write a binary file atomically (temporary file, fsync, ``os.replace``)."""
    return _atomic_write(path, lambda f: f.write(data), "wb")


def _shape(value: Any) -> tuple[int, ...] | None:
    """A tensor's shape as a tuple (None for what has no shape: not a tensor)."""
    shape = getattr(value, "shape", None)
    return tuple(int(n) for n in shape) if shape is not None else None


def check_matching(expected: Mapping[str, Any], given: Mapping[str, Any], source: str) -> None:
    """The one key-by-key check of weights against a model: every key of ``expected`` present in
    ``given``, no other key, every shape equal. The values are tensors or shapes (a sequence of ints).

    Raises:
        ValueError: one line naming ``source`` (the file, or the key and the file) and the first mismatch.

    >>> check_matching({"w": (3, 2), "b": (3,)}, {"w": (3, 2), "b": (4,)}, "m.pt")
    Traceback (most recent call last):
    ...
    ValueError: m.pt: does not match the model: b has shape (4,), the model's (3,)
    """
    def shape(v: Any) -> tuple[int, ...] | None:
        if hasattr(v, "shape"):
            return _shape(v)
        if isinstance(v, Sequence) and not isinstance(v, (str, bytes)) and all(isinstance(n, int) for n in v):
            return tuple(v)
        return None  # not a tensor: matches no shape

    missing = [k for k in expected if k not in given]
    extra = [k for k in given if k not in expected]
    shapes = [k for k in expected if k in given and shape(given[k]) != shape(expected[k])]
    if missing:
        raise ValueError(f"{source}: does not match the model: {len(missing)} of its {len(expected)} tensors "
                         f"missing (first: {missing[0]})")
    if extra:
        raise ValueError(f"{source}: does not match the model: {len(extra)} tensors the model does not have "
                         f"(first: {extra[0]})")
    if shapes:
        k = shapes[0]
        raise ValueError(f"{source}: does not match the model: {k} has shape {shape(given[k])}, the model's "
                         f"{shape(expected[k])}")


def load_matching(module: torch.nn.Module, state: Mapping[str, Any], source: str) -> None:
    """Load ``state`` into ``module`` only if it matches key by key (:func:`check_matching`: every key of the
    module present, no other key, every shape equal), else a ValueError of one line naming ``source`` and
    the first mismatch: a partial or foreign checkpoint is refused, never half-loaded or a torch traceback.
    Every checkpoint, exported backbone and run a command loads goes through here (text's Hugging Face
    folders through :func:`check_matching`, from the loader's own report).

    >>> net = torch.nn.Linear(2, 3)
    >>> load_matching(net, {"weight": torch.zeros(3, 2)}, "ckpt.pt")
    Traceback (most recent call last):
    ...
    ValueError: ckpt.pt: does not match the model: 1 of its 2 tensors missing (first: bias)
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"{source}: holds no weights (a {type(state).__name__}, not a mapping of tensors)")
    check_matching(module.state_dict(), state, source)
    module.load_state_dict(dict(state))
