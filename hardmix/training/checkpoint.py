"""``checkpoint.pt``: every state a resumed run needs, versioned, written atomically, loaded without code.

The file is a ``torch.save`` of plain containers and tensors only, so :func:`load_checkpoint` reads it with
``torch.load(weights_only=True)``: a crafted pickle cannot run code. NumPy's RNG state (an array) is stored
as a tensor for that reason (:func:`hardmix.utils.rng.rng_state`). Writing goes to a temporary file in the
same folder, is fsynced and renamed into place (:func:`hardmix.utils.confine.save_torch`), so a
crash during the write leaves the previous checkpoint intact.

Example:
    >>> import tempfile, torch
    >>> path = f"{tempfile.mkdtemp()}/checkpoint.pt"
    >>> _ = save_checkpoint({"step": 3, "model": {"w": torch.ones(2)}}, path, task="text")
    >>> load_checkpoint(path, task="text")["step"]
    3
    >>> try:
    ...     load_checkpoint(path, task="vision")
    ... except CheckpointError as e:
    ...     print(str(e).split(": ", 1)[1])
    holds a text run's checkpoint, not a vision run's
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from hardmix.training.run_folder import CHECKPOINT
from hardmix.utils.confine import save_torch

#: What a hardmix checkpoint says it is, and the layout version this hardmix reads and writes.
FORMAT = "hardmix-checkpoint"
VERSION = 2
NAME = CHECKPOINT  # its name in a run folder (hardmix.training.run_folder), for code that imports it here


class CheckpointError(ValueError):
    """A file is not a checkpoint this hardmix can read (foreign, truncated, older, another task's)."""


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike[str], task: str,
                    root: str | os.PathLike[str] | None = None) -> Path:
    """Write ``state`` (plain containers and tensors) with the format header, atomically, inside ``root``
    (the run folder; by default the folder of ``path``)."""
    return save_torch({"format": FORMAT, "version": VERSION, "task": task, **state}, path,
                      Path(path).parent if root is None else root)


def _check_crc(p: Path) -> None:
    """Refuse a checkpoint whose bytes changed after it was written: torch's zip format stores a CRC-32 of
    each record, which ``torch.load`` does not check (damaged weights would load as other numbers)."""
    try:
        with zipfile.ZipFile(p) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        return  # not a whole zip: torch.load names the problem
    if bad is not None:
        raise CheckpointError(f"{p}: damaged ({bad} fails its CRC-32 check: the file changed after it was "
                              "written); restore it from a copy, or start a new run")


def read_checkpoint_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load any hardmix checkpoint file safely (``weights_only``), checking only that it is one."""
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"{p}: no such checkpoint file")
    _check_crc(p)
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, RuntimeError, OSError, ValueError,
            AttributeError, TypeError, ImportError, IndexError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{p}: not a readable hardmix checkpoint (it is truncated, of an older hardmix, or another "
            f"kind of file): pass a checkpoint.pt that hardmix wrote, or start a new run (loading it "
            f"safely failed: {first[:120]})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{p}: not a hardmix checkpoint (no '{FORMAT}' header)")
    if state.get("version") != VERSION:
        raise CheckpointError(
            f"{p}: checkpoint format version {state.get('version')}, this hardmix reads version {VERSION}; "
            "train with the hardmix that wrote it, or start a new run")
    return state


def load_checkpoint(path: str | os.PathLike[str], task: str | None = None) -> dict[str, Any]:
    """Load a checkpoint safely; with ``task``, refuse another task's with a one-line error."""
    state = read_checkpoint_file(path)
    if task is not None and state.get("task") != task:
        raise CheckpointError(f"{path}: holds a {state.get('task')} run's checkpoint, not a {task} run's")
    return state


__all__ = [
    "FORMAT",
    "NAME",
    "VERSION",
    "CheckpointError",
    "load_checkpoint",
    "read_checkpoint_file",
    "save_checkpoint",
]
