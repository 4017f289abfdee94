"""Where and how a run computes: the device, the processes under ``torchrun``, precision, threads, seeds.

One implementation for every task: CPU threads, CUDA, bf16/fp16 autocast (fp16 with a gradient scaler),
``torchrun`` DDP (gloo on CPU, NCCL on GPU), the seeds of every process, rank-0 logging.

``train.precision: auto`` (the default) is resolved here once, by :func:`choose_precision`: bf16 autocast
where the hardware computes bfloat16 natively (a CUDA device with bf16; a CPU with AVX512-BF16 or AMX-BF16)
and the task's bf16 was shown to give fp32's answers (``Task.auto_bf16``), fp32 elsewhere, and on
``--resume`` the precision the run was started with, whatever this machine is.
"""

from __future__ import annotations

import functools
import os
import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from hardmix.utils.errors import ConfigError
from hardmix.utils.rng import seed_everything


@dataclass
class Runtime:
    """The machine a run uses.

    Attributes:
        device: this process's device.
        rank, world: this process's rank and the number of processes.
        precision: ``fp32``, ``bf16`` or ``fp16`` (resolved: never ``auto``).
        owns_process_group: whether :func:`start_runtime` created the process group (and must end it).
        precision_reason: why this precision (the start line says it).
    """

    device: torch.device
    rank: int = 0
    world: int = 1
    precision: str = "fp32"
    owns_process_group: bool = False
    precision_reason: str = ""

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

    def gather(self, obj: object) -> list[object]:
        """Every process's ``obj``, by rank (picklable objects)."""
        if self.world == 1:
            return [obj]
        out: list[object] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out


#: The CPU flags (``/proc/cpuinfo``) of a native bfloat16 instruction set: AVX512-BF16, AMX-BF16.
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def bf16_flags_in(cpuinfo: str) -> tuple[str, ...]:
    """The native-bfloat16 flags (:data:`CPU_BF16_FLAGS`) that the first ``flags`` line of ``cpuinfo`` (a
    ``/proc/cpuinfo`` file) lists; empty where the file does not exist or lists none."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[-1].split())
                    return tuple(flag for flag in CPU_BF16_FLAGS if flag in flags)
    except OSError:
        pass
    return ()


@functools.cache
def cpu_bf16_flags() -> tuple[str, ...]:
    """This CPU's native-bfloat16 flags, read once (empty off Linux, or where bf16 would be emulated, and
    slower than fp32)."""
    return bf16_flags_in("/proc/cpuinfo")


def choose_precision(asked: str, device: torch.device, saved: str | None = None,
                     task: str | None = None, auto_bf16: bool = True) -> tuple[str, str]:
    """The precision a run uses for ``train.precision: asked`` on ``device``, and why (for the start line).

    Args:
        asked: ``auto``, ``fp32``, ``bf16`` or ``fp16``.
        device: the run's device.
        saved: on ``--resume``, the precision the run was started with (its ``config.yaml``): ``auto``
            keeps it, so a run and its resume agree on any hardware.
        task, auto_bf16: the task and whether ``auto`` may choose bf16 for it
            (:attr:`hardmix.training.Task.auto_bf16`: only where bf16 was shown to give fp32's answers).

    Raises:
        ConfigError: fp16 off CUDA, or bf16 on a CUDA device without it.

    >>> choose_precision("auto", torch.device("cpu"), saved="bf16")
    ('bf16', 'train.precision: auto, resumed: the precision the run started with')
    >>> choose_precision("fp32", torch.device("cpu"))
    ('fp32', 'train.precision: fp32')
    """
    resumed = asked == "auto" and saved in ("fp32", "bf16", "fp16")
    if resumed:
        asked = str(saved)
    if asked == "fp16" and device.type != "cuda":
        used = " (the resumed run used it)" if resumed else ""
        raise ConfigError(f"train.precision: fp16 needs CUDA{used}; on the CPU use bf16 or fp32")
    if device.type == "cuda":
        native = torch.cuda.is_bf16_supported()
        where = f"the CUDA device {torch.cuda.get_device_name(device)}"
    else:
        flags = cpu_bf16_flags()
        native = bool(flags)
        where = f"this CPU ({', '.join(flags)})" if flags else "this CPU (no avx512_bf16 or amx_bf16 flag)"
    if asked == "bf16" and device.type == "cuda" and not native:
        raise ConfigError(f"train.precision: bf16 is not supported by {where}; use fp16 or fp32")
    if asked != "auto":
        why = ("train.precision: auto, resumed: the precision the run started with" if resumed
               else f"train.precision: {asked}")
        slow = asked == "bf16" and not native
        return asked, why + (f"; {where} emulates bfloat16: expect it slower than fp32" if slow else "")
    if native and not auto_bf16:
        return "fp32", (f"train.precision: auto; {where} computes bfloat16 natively, but bf16 is not shown "
                        f"to give {task or 'this task'}'s held-out scores within a point of fp32's with "
                        "these strategies (docs/results.md); train.precision: bf16 asks for it")
    if native:
        return "bf16", f"train.precision: auto; {where} computes bfloat16 natively"
    return "fp32", f"train.precision: auto; {where} does not compute bfloat16 natively"


def select_device(want: str, local_rank: int = 0) -> torch.device:
    """The device for ``train.device`` (``auto``, ``cpu``, ``cuda``)."""
    if want == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda was asked for but CUDA is not available")
    use_cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def start_runtime(device: str, precision: str, threads: int | None, seed: int,
                  saved_precision: str | None = None, task: str | None = None,
                  auto_bf16: bool = True) -> Runtime:
    """Select the device and the precision (:func:`choose_precision`), join ``torchrun``'s process group
    when ``WORLD_SIZE`` > 1, set the threads and seed this process with ``seed + rank``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = select_device(device, local_rank)
    precision, why = choose_precision(precision, dev, saved_precision, task, auto_bf16)
    owns = False
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
        owns = True
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    if threads is not None:
        torch.set_num_threads(threads)
    seed_everything(seed + rank)
    return Runtime(dev, rank, world, precision, owns, why)


def end_runtime(runtime: Runtime) -> None:
    """End the process group if :func:`start_runtime` created it."""
    if runtime.owns_process_group and dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["CPU_BF16_FLAGS", "Runtime", "bf16_flags_in", "choose_precision", "cpu_bf16_flags", "end_runtime",
           "select_device", "start_runtime"]
