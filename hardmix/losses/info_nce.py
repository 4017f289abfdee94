"""InfoNCE over logits, with an explicit temperature (van den Oord et al. 2018; SimCSE Eq. 1; MoCo Eq. 1).

    L_i = -log exp(s_i+ / tau) / sum_j exp(s_ij / tau)

Two layouts: in-batch (B x N logits, the positive of row i in column ``targets[i]``, SimCSE) and queue
([positive | queue], target 0, MoCo). Extra negative logits are appended as columns; excluded entries
are ``-inf``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.losses.gathered_logits import GatheredLogits
from hardmix.losses.scaled_logits import ScaledLogits

_Derived = (GatheredLogits, ScaledLogits)  # blocks computed from another block, with a fused backward


def _check_temperature(temperature: float) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature: must be a positive number, got {temperature!r}")


def info_nce(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean InfoNCE (cross-entropy) of logits that are already divided by the temperature.

    Args:
        logits: (B, C) logits, ``-inf`` where excluded.
        targets: (B,) column of each row's positive.

    Example:
        >>> logits = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
        >>> round(float(info_nce(logits, torch.tensor([0, 1]))), 4)
        0.1269
    """
    return F.cross_entropy(logits, targets)


def info_nce_from_blocks(
    positive_logits: Tensor, blocks: list[Tensor | GatheredLogits | ScaledLogits]
) -> Tensor:
    """Mean InfoNCE whose denominator is spread over column blocks, without concatenating them.

    Equal to ``info_nce(cat(blocks, 1), targets)`` when the positive logit is one of the block entries:
    ``L_i = logsumexp_k(logsumexp_j blocks[k][i, j]) - positive_logits[i]``.

    Args:
        positive_logits: (B,) the positive's logit of each row (it must appear in one block).
        blocks: list of (B, n_k) logit blocks, ``-inf`` where excluded. A block may be a
            :class:`GatheredLogits` or a :class:`ScaledLogits` of another block in the list (its
            ``source``, the same tensor): its gradient is then added into that block's gradient in
            place. Otherwise it is materialized (autograd's path).
    """
    # Reduce in at least fp32 (as cross_entropy does under autocast): with bf16 logits near 1/tau = 20 the
    # difference below would otherwise be rounded to multiples of 0.125.
    dense = [b for b in blocks if not isinstance(b, _Derived)]
    derived: list[GatheredLogits | ScaledLogits] = []
    for b in blocks:
        if isinstance(b, _Derived):
            if any(b.source is d for d in dense):
                derived.append(b)
            else:
                dense.append(b.materialize())
    dense = [d for d in dense if d.shape[1] > 0 or any(g.source is d for g in derived)]
    derived = [g for g in derived if g.shape[1] > 0]
    position = [next(i for i, d in enumerate(dense) if g.source is d) for g in derived]
    specs = tuple(
        (g.index, g.weight, g.support, p) if isinstance(g, GatheredLogits) else (g.scale, g.shift_weight, p)
        for g, p in zip(derived, position)
    )
    values = tuple(_at_least_fp32(g.values) for g in derived)
    direct_inputs = [g.direct if isinstance(g, GatheredLogits) else g.shift for g in derived]
    directs = [None if d is None else _at_least_fp32(d) for d in direct_inputs]
    total = _BlockLogSumExp.apply(specs, values, *[_at_least_fp32(d) for d in dense], *directs)
    return (total - _at_least_fp32(positive_logits)).mean()


def _at_least_fp32(x: Tensor) -> Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class _BlockLogSumExp(torch.autograd.Function):
    """Row-wise logsumexp over the columns of several (B, n_k) blocks, as if concatenated.

    The gradient is ``grad * softmax`` of the concatenated row, computed against the row's total, so an
    excluded (-inf) entry gets 0, as in cross_entropy, even where a whole row of one block is -inf
    (autograd's per-block logsumexp would give 0 * exp(-inf - (-inf)) = NaN there).

    The forward keeps each block's ``exp(b - rowmax)`` (logsumexp computes it anyway, as a temporary), so
    the backward is one multiply per block, ``exp(b - max) * (exp(max - total) * grad)``, instead of
    recomputing the exponentials; it saves that instead of the block: the same memory.

    Derived blocks come after the dense ones (``values``: their detached values; ``specs``: index,
    weight, support and position of their source among the dense blocks for a gathered block; scale,
    shift weight and position for a scaled one). Each one's gradient goes to its ``direct`` (or
    ``shift``) input and, through its weights or scale, into its source's gradient (in place: the
    source's gradient is a fresh tensor of this backward).
    """

    @staticmethod
    def forward(ctx, specs, values, *inputs: Tensor | None) -> Tensor:  # type: ignore[override]
        n_dense = len(inputs) - len(specs)
        lse, saved = [], []
        for b in (*inputs[:n_dense], *values):
            # An all -inf row gets a finite shift, so that its exponentials are exp(-inf) = 0, not NaN.
            m = b.amax(dim=1, keepdim=True).clamp_min_(torch.finfo(b.dtype).min)
            e = torch.sub(b, m).exp_()
            lse.append(e.sum(dim=1).log_().add_(m.squeeze(1)))
            saved += [e, m]
        total = lse[0] if len(lse) == 1 else torch.logsumexp(torch.stack(lse, dim=1), dim=1)
        ctx.specs, ctx.n_dense = specs, n_dense
        ctx.save_for_backward(total, *saved)
        return total

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        total, *saved = ctx.saved_tensors
        t, g = total.unsqueeze(1), grad.unsqueeze(1)
        n_dense, specs = ctx.n_dense, ctx.specs
        needs = ctx.needs_input_grad[2:]

        def softmax_grad(i: int) -> Tensor:
            e, m = saved[2 * i], saved[2 * i + 1]
            return e * torch.sub(m, t).exp_().mul_(g)

        dense = [softmax_grad(i) if needs[i] else None for i in range(n_dense)]
        directs: list[Tensor | None] = []
        for k, spec in enumerate(specs):
            source = spec[-1]
            to_source, to_direct = dense[source] is not None, needs[n_dense + k]
            p = softmax_grad(n_dense + k) if to_source or to_direct else None
            if len(spec) == 3:  # scaled: d/d source = p * scale, d/d shift = w * rowsum(p * scale)
                if p is not None:
                    scale, shift_weight = spec[0], spec[1]
                    p.mul_(scale)  # p is this backward's own buffer
                    if to_source:
                        dense[source].add_(p)
                    p = p.sum(dim=1).mul_(shift_weight) if to_direct else None
                directs.append(p)
                continue
            index, weight, support = spec[0], spec[1], spec[2]
            if to_source:  # (B, J, M) weights times the columns' softmax gradient, into the source's
                contrib = weight.to(p.dtype) * p.unsqueeze(1)
                if support is None:
                    dense[source].scatter_add_(1, index.flatten(1), contrib.flatten(1))
                else:  # through a (B, C) buffer: one scatter into the large block
                    per_support = p.new_zeros(support.shape)
                    per_support.scatter_add_(1, index.flatten(1), contrib.flatten(1))
                    dense[source].scatter_add_(1, support, per_support)
            directs.append(p if to_direct else None)
        return (None, None, *dense, *directs)


def in_batch_logits(anchors: Tensor, candidates: Tensor, temperature: float) -> Tensor:
    """(B, N) cosine-similarity logits ``normalize(anchors) @ normalize(candidates).T / tau``."""
    _check_temperature(temperature)
    return F.normalize(anchors, dim=-1) @ F.normalize(candidates, dim=-1).T / temperature


def queue_logits(query: Tensor, key: Tensor, queue: Tensor, temperature: float) -> Tensor:
    """(B, 1 + K) MoCo logits ``[q.k | q.queue] / tau`` of unit vectors; the target is column 0.

    Args:
        query: (B, D) unit-norm queries.
        key: (B, D) unit-norm keys (the positives).
        queue: (K, D) unit-norm negatives.
    """
    _check_temperature(temperature)
    positive = (query * key).sum(dim=1, keepdim=True)
    return torch.cat([positive, query @ queue.T], dim=1) / temperature
