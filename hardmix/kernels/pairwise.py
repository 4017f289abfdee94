"""One matrix product, three gradient routings: the logits of a contrastive loss and their stop-gradient
views, for the price of the plain logits.

MixCSE's mixed logits h_i . SG(m_ij) are linear in h_i.h'_j with the gradient stopped at h'. Rather than
a second product ``h @ h'.detach().T``, :func:`pairwise_logits` returns the same values three times,
each passing gradient to (a and b), (a only) or (b only); the backward pass sums the incoming gradients
and still costs two products. The three outputs are views of one buffer (no copies): never modify them
in place.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from hardmix.kernels.autocast import autocast_dtype


class _PairwiseLogits(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor, scale: float, a_only: bool, b_only: bool):  # type: ignore[override]
        logits = torch.mm(a, b.T).mul_(scale)
        ctx.save_for_backward(a, b)
        ctx.scale = scale
        ctx.set_materialize_grads(False)
        outs = [logits]
        if a_only:
            outs.append(logits.view_as(logits))
        if b_only:
            outs.append(logits.view_as(logits))
        ctx.flags = (a_only, b_only)
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None):  # type: ignore[override]
        a, b = ctx.saved_tensors
        a_only, b_only = ctx.flags
        g_full = grads[0]
        g_a = grads[1] if a_only else None
        g_b = grads[1 + int(a_only)] if b_only else None

        def total(x: Tensor | None, y: Tensor | None) -> Tensor | None:
            if x is None:
                return y
            return x if y is None else x + y

        ga_in = total(g_full, g_a)
        gb_in = total(g_full, g_b)
        grad_a = grad_b = None
        if ga_in is not None and ctx.needs_input_grad[0]:
            grad_a = torch.mm(ga_in, b).mul_(ctx.scale)
        if gb_in is not None and ctx.needs_input_grad[1]:
            grad_b = torch.mm(gb_in.T, a).mul_(ctx.scale)
        return grad_a, grad_b, None, None, None


def pairwise_logits(
    a: Tensor, b: Tensor, temperature: float, a_only: bool = False, b_only: bool = False
) -> tuple[Tensor, ...]:
    """``a @ b.T / temperature`` and optionally the same values with gradient to a only / b only.

    Args:
        a: (B, D).
        b: (N, D).
        temperature: tau > 0.
        a_only: also return the view whose gradient reaches ``a`` only (``a @ SG(b).T / tau``).
        b_only: also return the view whose gradient reaches ``b`` only (``SG(a) @ b.T / tau``).

    Returns:
        ``(logits,)``, plus the requested views in the order (a_only, b_only); each (B, N).

    Example:
        >>> a = torch.randn(3, 4, requires_grad=True); b = torch.randn(5, 4, requires_grad=True)
        >>> full, left = pairwise_logits(a, b, 0.5, a_only=True)
        >>> left.sum().backward()
        >>> b.grad is None
        True
    """
    # Under autocast, cast fp32 inputs outside the Function (as autocast does for mm): the product and its
    # backward then both run in the autocast dtype, and autograd casts the gradients back to fp32.
    # (Inside the Function only the forward would be autocast, and the backward would multiply a
    # low-precision gradient by fp32 inputs.)
    dtype = autocast_dtype(a.device.type)
    if dtype is not None:
        a = a.to(dtype) if a.dtype == torch.float32 else a
        b = b.to(dtype) if b.dtype == torch.float32 else b
    return _PairwiseLogits.apply(a, b, 1.0 / temperature, a_only, b_only)
