"""Capture and restore every RNG that a training step touches, so a resumed run continues exactly."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and all CUDA devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's global generators (CUDA too when available), as plain
    containers and tensors, so a checkpoint holding them loads with ``torch.load(weights_only=True)``."""
    version, mt, gauss = random.getstate()
    legacy = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())  # its legacy tuple
    kind, keys, pos, has_gauss, cached = legacy
    state: dict[str, Any] = {
        "python": [version, torch.tensor(mt, dtype=torch.int64), gauss],
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the states captured by :func:`rng_state`."""
    version, mt, gauss = state["python"]
    random.setstate((int(version), tuple(int(x) for x in mt.tolist()), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Restore every global RNG (Python, NumPy, torch CPU and CUDA) on exit."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
