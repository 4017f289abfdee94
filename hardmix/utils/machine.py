"""What a measurement ran on, for the records of benchmarks and comparisons."""

from __future__ import annotations

import platform
from pathlib import Path


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


__all__ = ["cpu_model"]
