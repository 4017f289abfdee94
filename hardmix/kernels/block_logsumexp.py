"""InfoNCE's log-denominator over several logit blocks, as if concatenated, with one fused backward.

A direction of the contrastive loss has a few logit blocks: the plain logits and each strategy's extra
columns. :func:`info_nce_from_blocks` reduces them without concatenating them, and takes the gradient of
derived blocks (:class:`~hardmix.kernels.derived_logits.DerivedLogits`) straight into their source's
gradient. It equals ``F.cross_entropy(torch.cat(blocks, 1), targets)``, which is what the plain path
(``ContrastiveLoss(impl="plain")``) computes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from hardmix.kernels.derived_logits import DerivedLogits

# e^x = 2^(x log2 e). The kernels exponentiate their (B, N) logits in base 2: on CPU torch's ``exp2`` is
# faster than ``exp`` (measured in docs/performance.md), and the factor rides on an operation the loss
# does anyway (a product's scale, the max shift).
LOG2_E = math.log2(math.e)


def info_nce_from_blocks(positive_logits: Tensor, blocks: list[Tensor | DerivedLogits]) -> Tensor:
    """Mean InfoNCE whose denominator is spread over column blocks, without concatenating them.

    Equal to ``info_nce(cat(blocks, 1), targets)`` when the positive logit is one of the block entries:
    ``L_i = logsumexp_k(logsumexp_j blocks[k][i, j]) - positive_logits[i]``.

    Args:
        positive_logits: (B,) the positive's logit of each row (it must appear in one block).
        blocks: list of (B, n_k) logit blocks, ``-inf`` where excluded. A block may be a
            :class:`~hardmix.kernels.derived_logits.DerivedLogits` (a :class:`GatheredLogits` or a
            :class:`ScaledLogits`) of another block in the list (its ``source``, the same tensor): its
            gradient is then added into that block's gradient in place. Otherwise it is materialized
            (autograd's path).
    """
    # Reduce in at least fp32 (as cross_entropy does under autocast): with bf16 logits near 1/tau = 20 the
    # difference below would otherwise be rounded to multiples of 0.125.
    dense = [b for b in blocks if not isinstance(b, DerivedLogits)]
    derived: list[DerivedLogits] = []
    for b in blocks:
        if isinstance(b, DerivedLogits):
            if any(b.source is d for d in dense):
                derived.append(b)
            else:
                dense.append(b.materialize())
    dense = [d for d in dense if d.shape[1] > 0 or any(g.source is d for g in derived)]
    derived = [g for g in derived if g.shape[1] > 0]
    rules = tuple(
        (g.gradient_rule(), next(i for i, d in enumerate(dense) if g.source is d)) for g in derived
    )
    values = tuple(_at_least_fp32(g.values) for g in derived)
    directs = [None if g.direct_input is None else _at_least_fp32(g.direct_input) for g in derived]
    total = _BlockLogSumExp.apply(rules, values, *[_at_least_fp32(d) for d in dense], *directs)
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
    recomputing the exponentials; it saves that instead of the block: the same memory. The exponentials
    are ``2^(b log2 e - max log2 e)``, the shift and the base change in one pass (see ``LOG2_E``).

    Derived blocks come after the dense ones (``values``: their detached values; ``rules``: the gradient
    rule of each and the position of its source among the dense blocks). Each rule adds the block's
    softmax gradient into its source's gradient (in place: the source's gradient is a fresh tensor of
    this backward) and gives the gradient of the block's direct input, which follows the dense inputs.
    """

    @staticmethod
    def forward(ctx, rules, values, *inputs: Tensor | None) -> Tensor:  # type: ignore[override]
        n_dense = len(inputs) - len(rules)
        lse, saved = [], []
        for b in (*inputs[:n_dense], *values):
            # An all -inf row gets a finite shift, so that its exponentials are exp(-inf) = 0, not NaN
            # (half the dtype's range: -m log2 e stays finite).
            m = b.amax(dim=1, keepdim=True).clamp_min_(0.5 * torch.finfo(b.dtype).min)
            e = torch.add(m * -LOG2_E, b, alpha=LOG2_E).exp2_()
            lse.append(e.sum(dim=1).log_().add_(m.squeeze(1)))
            saved += [e, m]
        total = lse[0] if len(lse) == 1 else torch.logsumexp(torch.stack(lse, dim=1), dim=1)
        ctx.rules, ctx.n_dense = rules, n_dense
        ctx.save_for_backward(total, *saved)
        return total

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        total, *saved = ctx.saved_tensors
        t, g = total.unsqueeze(1), grad.unsqueeze(1)
        n_dense, rules = ctx.n_dense, ctx.rules
        needs = ctx.needs_input_grad[2:]

        def softmax_grad(i: int) -> Tensor:
            e, m = saved[2 * i], saved[2 * i + 1]
            return e * torch.sub(m, t).exp_().mul_(g)

        dense = [softmax_grad(i) if needs[i] else None for i in range(n_dense)]
        directs: list[Tensor | None] = []
        for k, (rule, source) in enumerate(rules):
            to_direct = needs[n_dense + k]
            if dense[source] is None and not to_direct:
                directs.append(None)
                continue
            directs.append(rule(softmax_grad(n_dense + k), dense[source], to_direct))
        return (None, None, *dense, *directs)
