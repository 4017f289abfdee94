"""A logit block that is a fixed rescaling of another: ``(source + w shift) * scale``, scale constant.

MixCSE's stop-gradient logits against a queue are of this kind (Zhang et al. 2022, Eq. 4; see
:class:`hardmix.strategies.MixCSE`): with query q, key k, m_ij = normalize(lam k_i + (1 - lam) n_j), SG(m_ij),

    q_i . SG(m_ij) / tau = (q_i.n_j / tau + lam / (1 - lam) q_i.k_i / tau) * s_ij,
    s_ij = (1 - lam) / ||lam k_i + (1 - lam) n_j||,

the (B, K) queue logits plus a per-row shift, times constant inverse norms. Passed to
:func:`~hardmix.kernels.block_logsumexp.info_nce_from_blocks` next to its source block, its gradient is
added into the source's gradient in place (one ``mul_`` and one ``add_`` of the (B, K) softmax gradient, and
a row sum for the shift) instead of autograd's chain (a product with the scale, a product with w for the
shift, and the sum of two (B, K) gradients, each into a fresh (B, K) buffer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch
from torch import Tensor

from hardmix.kernels.derived_logits import DerivedLogits, GradientRule


@dataclass
class ScaledLogits(DerivedLogits):
    """(B, K) logits ``out[b, k] = (source[b, k] + shift_weight * shift[b]) * scale[b, k]``.

    Args:
        source: (B, K) logits (with gradient); -inf entries stay -inf (the scale must be positive there).
        scale: (B, K) constant factors (no gradient), finite and positive.
        shift: (B,) per-row term (with its own gradient).
        shift_weight: the constant w.

    Attributes:
        values: (B, K) the logits, detached, computed once at construction.

    Example:
        >>> source = torch.tensor([[1.0, 2.0]], requires_grad=True)
        >>> shift = torch.tensor([4.0], requires_grad=True)
        >>> cols = ScaledLogits(source, torch.tensor([[0.5, 0.25]]), shift, shift_weight=0.5)
        >>> cols.values
        tensor([[1.5000, 1.0000]])
        >>> cols.materialize().sum().backward(); source.grad, shift.grad
        (tensor([[0.5000, 0.2500]]), tensor([0.3750]))
    """

    source: Tensor
    scale: Tensor
    shift: Tensor
    shift_weight: float
    values: Tensor = field(init=False)

    def __post_init__(self) -> None:
        if self.source.dim() != 2 or self.scale.shape != self.source.shape:
            raise ValueError(
                f"source and scale (B, K) expected, got {tuple(self.source.shape)}, {tuple(self.scale.shape)}"
            )
        if self.shift.shape != (self.source.shape[0],):
            raise ValueError(f"shift: ({self.source.shape[0]},) expected, got {tuple(self.shift.shape)}")
        if self.scale.requires_grad:
            raise ValueError("scale: must be constant (no gradient)")
        with torch.no_grad():
            self.values = self._combine(self.source.detach(), self.shift.detach())

    @property
    def direct_input(self) -> Tensor:
        return self.shift

    def _combine(self, source: Tensor, shift: Tensor) -> Tensor:
        return torch.add(source, shift.unsqueeze(1), alpha=self.shift_weight).mul_(self.scale)

    def materialize(self) -> Tensor:
        """The (B, K) logits as an ordinary tensor with autograd's gradient."""
        return self._combine(self.source, self.shift)

    def gradient_rule(self) -> GradientRule:
        return partial(_scaled_gradient, self.scale, self.shift_weight)


def _scaled_gradient(
    scale: Tensor, shift_weight: float, p: Tensor, source_grad: Tensor | None, need_direct: bool
) -> Tensor | None:
    """The block's gradient ``p`` (B, K) into the source's: d/d source = p * scale (added in place);
    d/d shift = w * rowsum(p * scale)."""
    p.mul_(scale)
    if source_grad is not None:
        source_grad.add_(p)
    return p.sum(dim=1).mul_(shift_weight) if need_direct else None
