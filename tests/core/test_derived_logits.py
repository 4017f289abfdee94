"""DerivedLogits: the protocol through which info_nce_from_blocks adds a derived block's gradient into its
source block's. A block defined here, outside the library, must get the same loss and gradients as
cross-entropy over the concatenated, materialized blocks (autograd)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F

from hardmix.kernels.derived_logits import GradientRule
from hardmix.losses import DerivedLogits, GatheredLogits, ScaledLogits, info_nce_from_blocks

from ._reference import cross_entropy


def _reversed_gradient(p: torch.Tensor, source_grad: torch.Tensor | None, need_direct: bool) -> None:
    if source_grad is not None:
        source_grad.add_(p.flip(1))


@dataclass
class ReversedColumns(DerivedLogits):
    """(B, K) the source's columns in reverse order: a derived block with no direct input."""

    source: torch.Tensor
    values: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.values = self.source.detach().flip(1)

    @property
    def direct_input(self) -> None:
        return None

    def materialize(self) -> torch.Tensor:
        return self.source.flip(1)

    def gradient_rule(self) -> GradientRule:
        return _reversed_gradient


def test_library_blocks_are_derived_logits() -> None:
    assert issubclass(GatheredLogits, DerivedLogits) and issubclass(ScaledLogits, DerivedLogits)
    with pytest.raises(TypeError):
        DerivedLogits()  # abstract


def test_a_user_defined_block_takes_the_fused_backward() -> None:
    g = torch.Generator().manual_seed(0)
    source = (torch.randn(4, 7, generator=g, dtype=torch.float64) * 3).requires_grad_(True)
    pos = torch.randn(4, 1, generator=g, dtype=torch.float64).requires_grad_(True)
    block = ReversedColumns(source)
    assert block.shape == (4, 7)

    loss = info_nce_from_blocks(pos[:, 0], [pos, source, block])
    loss.backward()
    fused = source.grad.clone(), pos.grad.clone()

    source.grad = pos.grad = None
    concatenated = torch.cat([pos, source, source.flip(1)], dim=1)
    assert abs(float(loss.detach()) - cross_entropy(concatenated.detach().numpy(), [0] * 4)) < 1e-12  # NumPy
    F.cross_entropy(concatenated, torch.zeros(4, dtype=torch.long)).backward()  # autograd
    torch.testing.assert_close(fused[0], source.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(fused[1], pos.grad, rtol=0, atol=1e-12)


def test_a_derived_block_without_its_source_is_materialized() -> None:
    """Its source is not among the blocks: the loss takes autograd's path through ``materialize``."""
    g = torch.Generator().manual_seed(1)
    source = torch.randn(3, 5, generator=g, dtype=torch.float64).requires_grad_(True)
    pos = torch.randn(3, 1, generator=g, dtype=torch.float64)
    loss = info_nce_from_blocks(pos[:, 0], [pos, ReversedColumns(source)])
    loss.backward()
    got = source.grad.clone()
    source.grad = None
    F.cross_entropy(torch.cat([pos, source.flip(1)], dim=1), torch.zeros(3, dtype=torch.long)).backward()
    torch.testing.assert_close(got, source.grad, rtol=0, atol=1e-12)
