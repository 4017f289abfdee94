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
from collections.abc import Mapping, Sequence
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


# ---- loading a state key by key: tensors that do not match are refused, naming the file


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


def nonfinite_tensors(state: Mapping[str, Any]) -> list[str]:
    """The names of the floating tensors of ``state`` that hold a NaN or an infinity.

    >>> nonfinite_tensors({"w": torch.ones(2), "b": torch.tensor([float("nan")]), "n": torch.tensor(3)})
    ['b']
    """
    return [k for k, v in state.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
            and not bool(torch.isfinite(v).all())]


def check_finite_weights(state: Mapping[str, Any], source: str) -> None:
    """Refuse weights with a tensor that is not finite (every output they compute would be NaN), in one
    line naming ``source`` and the tensors.

    >>> check_finite_weights({"w": torch.tensor([1.0, float("inf")])}, "MODEL m.pt")
    Traceback (most recent call last):
    ...
    ValueError: MODEL m.pt: 1 of its 1 tensors are not finite (NaN or infinite): w; its outputs would be too
    """
    bad = nonfinite_tensors(state)
    if bad:
        shown = ", ".join(bad[:5]) + (", ..." if len(bad) > 5 else "")
        raise ValueError(f"{source}: {len(bad)} of its {len(state)} tensors are not finite (NaN or "
                         f"infinite): {shown}; its outputs would be too")


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


__all__ = [
    "FORMAT",
    "NAME",
    "VERSION",
    "CheckpointError",
    "check_finite_weights",
    "check_matching",
    "load_checkpoint",
    "load_matching",
    "nonfinite_tensors",
    "read_checkpoint_file",
    "save_checkpoint",
]
