"""A FIFO ring buffer of unit keys with their sample ids (MoCo's queue, He et al. 2020, Sec. 3.2)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

EMPTY_ID = -1
RANDOM_ID = -2


class KeyQueue(nn.Module):
    """FIFO queue of K unit-norm keys (K, D) and their int64 sample ids.

    Only real keys enter: synthetic negatives are never enqueued. Buffers move with ``.to(device)`` and
    are saved by ``state_dict`` (so checkpoints hold the queue and its ids).

    Args:
        size: K, the number of keys (MoCo-v2: 65536 on ImageNet-1K, 16384 on ImageNet-100).
        dim: D, the key dimension.
        random_init: fill with random unit vectors (as MoCo does) instead of leaving slots empty.
        generator: optional generator for the random initialisation.

    Example:
        >>> q = KeyQueue(size=4, dim=2, random_init=False)
        >>> q.enqueue(torch.eye(2)[[0, 1, 0]], torch.tensor([7, 8, 9]))
        >>> q.ids.tolist(), q.filled
        ([7, 8, 9, -1], 3)
    """

    keys: Tensor
    ids: Tensor
    ptr: Tensor
    count: Tensor

    def __init__(
        self, size: int, dim: int, random_init: bool = True, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size: must be a positive integer, got {size!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim: must be a positive integer, got {dim!r}")
        if random_init:
            keys = F.normalize(torch.randn(size, dim, generator=generator), dim=1)
        else:
            keys = torch.zeros(size, dim)
        self.register_buffer("keys", keys)
        # Sample ids: -1 marks an empty slot (never a negative), -2 a key without a sample id (a random
        # initial key, or one enqueued without ids: a negative that matches no sample), >= 0 the id of the
        # sample whose key this is.
        initial_id = RANDOM_ID if random_init else EMPTY_ID
        self.register_buffer("ids", torch.full((size,), initial_id, dtype=torch.long))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.random_init = random_init

    @property
    def size(self) -> int:
        return self.keys.shape[0]

    @property
    def filled(self) -> int:
        """How many slots hold real keys (at most K)."""
        return int(self.count.clamp(max=self.size))

    @torch.no_grad()
    def enqueue(self, keys: Tensor, ids: Tensor | None = None) -> None:
        """Write ``keys`` (B, D) (and their ids (B,)) over the oldest entries, wrapping around.

        Keys are L2-normalized and detached. B may exceed K (only the last K are kept). Keys enqueued
        without ids get id -2 (a negative that matches no query), never -1, which marks an empty slot
        that the loss excludes.
        """
        if keys.dim() != 2 or keys.shape[1] != self.keys.shape[1]:
            raise ValueError(f"keys: expected (B, {self.keys.shape[1]}), got {tuple(keys.shape)}")
        keys = F.normalize(keys.detach().to(self.keys.dtype), dim=1)
        if ids is None:
            ids = torch.full((keys.shape[0],), RANDOM_ID, dtype=torch.long, device=keys.device)
        elif ids.shape != (keys.shape[0],):
            raise ValueError(f"ids: expected ({keys.shape[0]},), got {tuple(ids.shape)}")
        b = keys.shape[0]
        if b > self.size:
            keys, ids, b = keys[-self.size :], ids[-self.size :], self.size
        ptr = int(self.ptr)
        idx = (torch.arange(b, device=self.keys.device) + ptr) % self.size
        self.keys[idx] = keys.to(self.keys.device)
        self.ids[idx] = ids.to(self.ids.device, torch.long)
        self.ptr.fill_((ptr + b) % self.size)
        self.count += b

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False):  # type: ignore[override]
        for name in ("keys", "ids"):
            if name in state_dict and state_dict[name].shape != getattr(self, name).shape:
                raise ValueError(
                    f"queue {name}: checkpoint shape {tuple(state_dict[name].shape)} != "
                    f"{tuple(getattr(self, name).shape)}"
                )
        return super().load_state_dict(state_dict, strict=strict, assign=assign)
