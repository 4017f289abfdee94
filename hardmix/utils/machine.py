"""What a measurement ran on, for the records of benchmarks and comparisons."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The processor's name: ``/proc/cpuinfo``'s first ``model name`` on Linux, else
    ``platform.processor()`` (or ``platform.machine()`` when that is empty too).

    Example:
        >>> isinstance(cpu_model(), str) and cpu_model() != ""
        True
    """
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> dict[str, Any]:
    """What a run's floats depend on beyond its config and the versions (``results.json``'s ``machine``):
    the processor, the instruction set PyTorch's CPU kernels dispatch to and the intra-op thread count.

    >>> sorted(machine())
    ['cpu', 'cpu_kernels', 'threads']
    """
    import torch

    return {"cpu": cpu_model(), "cpu_kernels": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads()}


def host() -> dict[str, Any]:
    """What ran a comparison (``summary.json``'s ``machine``): the platform, the processor, the CPU count
    and the Python version.

    >>> sorted(host())
    ['cpu_count', 'platform', 'processor', 'python']
    """
    return {
        "platform": platform.platform(),
        "processor": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


__all__ = ["cpu_model", "host", "machine"]
