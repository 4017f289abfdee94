"""Inputs for the loss tests: two correlated float64 views with unequal norms (so normalization matters)."""

from __future__ import annotations

import torch


def correlated_views(b: int, d: int, seed: int = 0, shared: float = 0.6) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, D) views z1, z2 = (base + shared * noise) * a per-row scale in [0.5, 3.5) (flipped for z2)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(b, d, generator=g, dtype=torch.float64)
    z1 = base + shared * torch.randn(b, d, generator=g, dtype=torch.float64)
    z2 = base + shared * torch.randn(b, d, generator=g, dtype=torch.float64)
    scale = torch.rand(b, 1, generator=g, dtype=torch.float64) * 3 + 0.5
    return z1 * scale, z2 * scale.flip(0)
