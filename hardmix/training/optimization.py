"""The optimizer, its learning-rate schedule and the fp16 loss scaler of a run, and the update of one step:
backward (scaled in fp16), the task's pre-update hook (clipping), the optimizer and the schedule."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from hardmix.training.checkpoint import read_checkpoint_file
from hardmix.utils.errors import RunError


class Optimization:
    """What updates the model: ``optimizer``, ``scheduler`` and ``scaler`` (None but in fp16), over ``world``
    processes. Its checkpointed part is :meth:`state_dict` (the checkpoint's ``optimizer``, ``scheduler``
    and ``scaler`` entries)."""

    def __init__(self, optimizer: torch.optim.Optimizer, scheduler: Any, scaler: Any, world: int) -> None:
        self.optimizer, self.scheduler, self.scaler, self.world = optimizer, scheduler, scaler, world

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def mean_loss(self, loss: Tensor) -> float:
        """The step's loss, averaged over the processes."""
        loss = loss.detach().float()
        if self.world > 1:
            loss = loss.clone()
            dist.all_reduce(loss)
            loss /= self.world
        return float(loss)

    def update(self, loss: Tensor, before_step: Any) -> None:
        """Backward ``loss``, call ``before_step`` (the task's clipping, on unscaled gradients), step."""
        scaler = self.scaler
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        before_step()
        if scaler is not None:
            scaler.step(self.optimizer)
            scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def skip(self, value: float, step: int, count: int, most: int, checkpoint: Path,
             say: Callable[[str], None]) -> None:
        """Skip step ``step`` of the non-finite loss ``value``, the ``count``-th: no update, the schedule
        moves on; past ``most`` (``train.max_nonfinite_steps``) the run stops, naming its last good
        checkpoint."""
        self.optimizer.zero_grad(set_to_none=True)
        if count > most:
            if checkpoint.is_file():
                saved = read_checkpoint_file(checkpoint)["step"]
                last = f"the last good checkpoint is {checkpoint} (step {saved})"
            else:
                last = "no checkpoint was written before it"
            raise RunError(f"the loss is {value} at step {step} ({count} non-finite, "
                           f"train.max_nonfinite_steps={most}); stopped, and {last}; lower "
                           "train.lr, or raise train.max_nonfinite_steps to skip such steps")
        say(f"the loss is {value} at step {step}: step skipped ({count} of at most {most})")
        self.scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        if self.scaler is not None and saved["scaler"] is not None:
            self.scaler.load_state_dict(saved["scaler"])


__all__ = ["Optimization"]
