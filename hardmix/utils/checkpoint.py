"""Loading a state key by key: a checkpoint or model whose tensors do not match is refused naming the file.

(Checkpoints are written atomically by :func:`hardmix.utils.confine.save_torch`, the one gate of writes.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch


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
