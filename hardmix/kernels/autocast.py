"""Which autocast dtype is active: the kernels take their fast paths only outside autocast, or cast
their inputs themselves where autocast would not see inside an autograd Function."""

from __future__ import annotations

import torch
from torch import Tensor


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The autocast dtype active for ``device_type``, or None when autocast is off there.

    Example:
        >>> autocast_dtype("cpu") is None
        True
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     autocast_dtype("cpu")
        torch.bfloat16
    """
    try:
        enabled = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type) if enabled else None
    except (TypeError, AttributeError):  # torch < 2.4: per-device functions
        if device_type == "cpu":
            enabled, get = torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype
        else:
            enabled, get = torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype
        dtype = get() if enabled else None
    return dtype


def autocast_free(x: Tensor) -> bool:
    """Whether autocast is off for the device of ``x`` (B, ...).

    Example:
        >>> autocast_free(torch.zeros(2))
        True
    """
    return autocast_dtype(x.device.type) is None
