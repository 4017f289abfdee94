"""Where and how a run computes: the device, the processes under ``torchrun``, precision, threads, seeds.

One implementation for every task: CPU threads, CUDA, bf16/fp16 autocast (fp16 with a gradient scaler),
``torchrun`` DDP (gloo on CPU, NCCL on GPU), the seeds of every process, rank-0 logging.
"""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from hardmix.errors import ConfigError
from hardmix.utils.rng import seed_everything


@dataclass
class Runtime:
    """The machine a run uses.

    Attributes:
        device: this process's device.
        rank, world: this process's rank and the number of processes.
        precision: ``fp32``, ``bf16`` or ``fp16``.
        owns_process_group: whether :func:`start_runtime` created the process group (and must end it).
    """

    device: torch.device
    rank: int = 0
    world: int = 1
    precision: str = "fp32"
    owns_process_group: bool = False

    @property
    def main(self) -> bool:
        """Whether this is the process that writes files and logs (rank 0)."""
        return self.rank == 0

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    def autocast(self) -> AbstractContextManager:
        """The forward pass's autocast (a no-op in fp32)."""
        dtype = self.amp_dtype
        return torch.autocast(self.device.type, dtype=dtype) if dtype is not None else nullcontext()

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A gradient scaler for fp16, else None."""
        return torch.amp.GradScaler("cuda") if self.precision == "fp16" else None

    def ddp(self, module: nn.Module, broadcast_buffers: bool = True) -> nn.Module:
        """``module`` wrapped in DistributedDataParallel when there are several processes, else itself
        (``broadcast_buffers=False``: each rank keeps its buffers, e.g. to average them itself)."""
        if self.world == 1:
            return module
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(module, device_ids=ids,
                                                   broadcast_buffers=broadcast_buffers)

    def say(self, msg: str) -> None:
        """A line on stderr from rank 0."""
        if self.main:
            print(f"hardmix: {msg}", file=sys.stderr, flush=True)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any process (all processes take the same decision)."""
        if self.world == 1:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)


def select_device(want: str, precision: str, local_rank: int = 0) -> torch.device:
    """The device for ``train.device`` (``auto``, ``cpu``, ``cuda``), checking ``train.precision`` fits."""
    if want == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda was asked for but CUDA is not available")
    use_cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
    if precision != "fp32" and not use_cuda:
        raise ConfigError(f"train.precision: {precision} mixed precision needs CUDA; use fp32 on the CPU")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def start_runtime(device: str, precision: str, threads: int | None, seed: int) -> Runtime:
    """Select the device, join ``torchrun``'s process group when ``WORLD_SIZE`` > 1, set the threads and
    seed this process with ``seed + rank``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = select_device(device, precision, local_rank)
    owns = False
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
        owns = True
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    if threads is not None:
        torch.set_num_threads(threads)
    seed_everything(seed + rank)
    return Runtime(dev, rank, world, precision, owns)


def end_runtime(runtime: Runtime) -> None:
    """End the process group if :func:`start_runtime` created it."""
    if runtime.owns_process_group and dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["Runtime", "end_runtime", "select_device", "start_runtime"]
