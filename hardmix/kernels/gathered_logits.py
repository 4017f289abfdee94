"""Extra logit columns that are fixed linear combinations of entries of a logit block.

MoCHi's synthetic logits are of this kind (Kalantidis et al. 2020; see
:func:`hardmix.kernels.mochi_logits.mochi_logits`): with constant mixing weights and constant norms,
q . SG(h) / tau is a weighted sum of two entries of the query's row of q.queue / tau. Passed to
:func:`~hardmix.kernels.block_logsumexp.info_nce_from_blocks` next to the block they are gathered from,
their gradient is scatter-added into that block's gradient in place, instead of autograd's gather backward
(a fresh (B, K) zero matrix, a scatter into it, and a (B, K) sum).

When many terms draw on few columns of each row (MoCHi: 2 (s + s') terms on the N hardest of K
negatives), the columns can be named once as ``support`` (B, C) and the terms index into it: the forward
gathers the (B, C) support from the large block, then the terms from that small, cache-resident matrix;
the backward adds the terms' gradient into a (B, C) buffer, then scatters that once into the block
(faster at MoCHi's shape than gathering from the large block directly: docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch
from torch import Tensor

from hardmix.kernels.derived_logits import DerivedLogits, GradientRule


@dataclass
class GatheredLogits(DerivedLogits):
    """(B, M) columns ``out[b, m] = sum_j weight[b, j, m] * source[b, col(b, j, m)] + direct[b, m]``,
    with ``col = index`` or, given ``support``, ``col(b, j, m) = support[b, index[b, j, m]]``.

    Args:
        source: (B, K) logits the entries are gathered from (with gradient); the gathered entries must be
            finite (a zero weight on a -inf entry would give NaN).
        index: (B, J, M) int64 columns of ``source``, or positions in ``support`` (J-major: each term j is
            a contiguous (B, M) slice).
        weight: (B, J, M) constant weights (no gradient).
        direct: optional (B, M) term added as is (with its own gradient).
        support: optional (B, C) int64 columns of ``source`` that ``index`` points into (repeats allowed).

    Attributes:
        values: (B, M) the columns' values, detached, computed once at construction.

    Example:
        >>> source = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
        >>> cols = GatheredLogits(source, torch.tensor([[[0], [2]]]), torch.tensor([[[0.5], [0.25]]]))
        >>> cols.values
        tensor([[1.2500]])
        >>> cols.materialize().sum().backward(); source.grad
        tensor([[0.5000, 0.0000, 0.2500]])
    """

    source: Tensor
    index: Tensor
    weight: Tensor
    direct: Tensor | None = None
    support: Tensor | None = None
    values: Tensor = field(init=False)

    def __post_init__(self) -> None:
        if self.source.dim() != 2 or self.index.dim() != 3 or self.index.shape != self.weight.shape:
            raise ValueError(
                f"source (B, K), index and weight (B, J, M) expected, got {tuple(self.source.shape)}, "
                f"{tuple(self.index.shape)}, {tuple(self.weight.shape)}"
            )
        b, m = self.index.shape[0], self.index.shape[2]
        if self.index.shape[0] != self.source.shape[0]:
            raise ValueError(f"index: {b} rows for a source of {self.source.shape[0]}")
        if self.direct is not None and self.direct.shape != (b, m):
            raise ValueError(f"direct: ({b}, {m}) expected, got {tuple(self.direct.shape)}")
        if self.weight.requires_grad:
            raise ValueError("weight: must be constant (no gradient)")
        if self.support is not None and (self.support.dim() != 2 or self.support.shape[0] != b):
            raise ValueError(f"support: ({b}, C) expected, got {tuple(self.support.shape)}")
        with torch.no_grad():
            direct = None if self.direct is None else self.direct.detach()
            self.values = self._combine(self.source.detach(), direct)

    @property
    def direct_input(self) -> Tensor | None:
        return self.direct

    def _combine(self, source: Tensor, direct: Tensor | None) -> Tensor:
        b, j, m = self.index.shape
        if self.support is not None:
            source = source.gather(1, self.support)  # (B, C)
        terms = source.gather(1, self.index.view(b, j * m)).view(b, j, m)
        weight = self.weight.to(terms.dtype)
        out = terms[:, 0] * weight[:, 0]
        for k in range(1, j):
            out = out.addcmul(terms[:, k], weight[:, k])
        return out if direct is None else out + direct

    def materialize(self) -> Tensor:
        """The (B, M) columns as an ordinary tensor with autograd's gradient (through a gather)."""
        return self._combine(self.source, self.direct)

    def gradient_rule(self) -> GradientRule:
        return partial(_gathered_gradient, self.index, self.weight, self.support)


def _gathered_gradient(
    index: Tensor,
    weight: Tensor,
    support: Tensor | None,
    p: Tensor,
    source_grad: Tensor | None,
    need_direct: bool,
) -> Tensor | None:
    """The columns' gradient ``p`` (B, M) into the source's (B, K) gradient: entry (b, col(b, j, m)) gets
    weight[b, j, m] * p[b, m], by a scatter-add (through a (B, C) buffer given a support); the direct
    term's gradient is ``p`` itself."""
    if source_grad is not None:
        contrib = weight.to(p.dtype) * p.unsqueeze(1)  # (B, J, M)
        if support is None:
            source_grad.scatter_add_(1, index.flatten(1), contrib.flatten(1))
        else:  # one scatter into the large block
            per_support = p.new_zeros(support.shape)
            per_support.scatter_add_(1, index.flatten(1), contrib.flatten(1))
            source_grad.scatter_add_(1, support, per_support)
    return p if need_direct else None
