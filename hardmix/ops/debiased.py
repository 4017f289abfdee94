"""The debiased negative term of DCL and HCL (Chuang et al., NeurIPS 2020; Robinson et al., ICLR 2021),
shared by the ``dcl`` and ``hcl`` strategies (their equations: :mod:`hardmix.strategies.hcl`).

For anchor i with positive logit p_i, the logits l_ij of its N_i valid negatives, the concentration beta
(0: DCL's uniform weights) and the class prior tau_plus, in log space:

    log S_i  = logsumexp_j((1 + beta) l_ij) - logsumexp_j(beta l_ij) + log N_i
    log Ng_i = log S_i + log(1 - exp(a_i)) - log(1 - tau_plus),  a_i = log(tau_plus N_i) + p_i - log S_i
    log Ng_i <- log N_i - 1 / tau   where that floor is larger (or a_i >= 0)
    L_i      = logaddexp(p_i, log Ng_i) - p_i

Where the floor is active the loss is ``log(exp(p_i) + N_i exp(-1/tau)) - p_i``: its gradient reaches
p_i only. The unclamped branch is evaluated at a safe point there, so neither branch of the selection
produces a NaN gradient.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from hardmix.ops.mixing import NEG_INF


class DebiasedTerm(NamedTuple):
    """The per-anchor loss of :func:`debiased_negative_term` and what the diagnostics read (detached)."""

    loss: Tensor  # (B,) L_i, with gradient
    clamped: Tensor  # (B,) bool, the floor N_i exp(-1/tau) is active
    log_scale: Tensor  # (B,) log(Ng_i / S_i): how much the debiasing (and the floor) changed the term
    log_hardest_weight: Tensor  # (B,) log w_ij of the anchor's hardest negative (0: uniform weights)
    has_negatives: Tensor  # (B,) bool, N_i > 0


def debiased_negative_term(
    positive_logits: Tensor, negative_logits: Tensor, temperature: float, beta: float, tau_plus: float
) -> DebiasedTerm:
    """HCL's (beta > 0) or DCL's (beta = 0) per-anchor loss, in log space (this module's docstring).

    Args:
        positive_logits: (B,) p_i = s_ii / tau.
        negative_logits: (B, C) l_ij = s_ij / tau; -inf marks an entry that is not a negative. N_i is the
            count of the other entries of row i.
        temperature: tau (for the floor N_i exp(-1/tau)).
        beta: concentration, >= 0.
        tau_plus: class prior, in [0, 1).

    Returns:
        A :class:`DebiasedTerm`; computed in the inputs' dtype, float32 at least (float64 stays float64).

    Example:
        >>> p, l = torch.tensor([2.0]), torch.tensor([[0.5, 1.0, float("-inf")]])
        >>> out = debiased_negative_term(p, l, temperature=0.1, beta=0.0, tau_plus=0.0)
        >>> bool(torch.isclose(out.loss, torch.logsumexp(torch.tensor([2.0, 0.5, 1.0]), 0) - 2.0))
        True
    """
    dtype = torch.promote_types(torch.promote_types(positive_logits.dtype, negative_logits.dtype),
                                torch.float32)
    p = positive_logits.to(dtype)
    logits = negative_logits.to(dtype)
    valid = ~torch.isneginf(logits)  # (B, C); a NaN stays in and propagates
    counts = valid.sum(dim=1)
    has_negatives = counts > 0
    # Excluded entries become 0 (no -inf reaches an operation whose gradient could be NaN); a row without
    # negatives is computed over its zeros (finite everywhere) and its loss set to 0 at the end.
    logits = torch.where(valid, logits, torch.zeros((), dtype=dtype, device=logits.device))
    valid = valid | ~has_negatives.unsqueeze(1)
    log_n = counts.clamp_min(1).to(dtype).log()  # (B,)

    if beta == 0.0:  # uniform weights: S_i = sum_j exp(l_ij)
        log_s = torch.logsumexp(logits.masked_fill(~valid, NEG_INF), dim=1)
        log_hardest_weight = torch.zeros_like(log_n)
    else:
        # log sum_j exp(beta l_ij): the weights' normalizer (N_i times their mean)
        log_weight_norm = torch.logsumexp((beta * logits).masked_fill(~valid, NEG_INF), dim=1)
        log_s = torch.logsumexp(((1.0 + beta) * logits).masked_fill(~valid, NEG_INF), dim=1) - log_weight_norm
        log_s = log_s + log_n
        with torch.no_grad():
            hardest = logits.masked_fill(~valid, NEG_INF).max(dim=1).values
            log_hardest_weight = beta * hardest - log_weight_norm + log_n

    log_floor = log_n - 1.0 / temperature  # log(N_i exp(-1/tau))
    if tau_plus == 0.0:
        log_unclamped = log_s
        clamped = ~(log_s > log_floor).detach()
    else:
        log_one_minus = math.log1p(-tau_plus)
        a = math.log(tau_plus) + log_n + p - log_s  # log(tau_plus N_i e^{p_i} / S_i)
        with torch.no_grad():
            # The floor is active where S_i - tau_plus N_i e^{p_i} <= (1 - tau_plus) N_i e^{-1/tau}
            # (a_i >= 0 included: the difference is not positive).
            positive = a < 0
            a0 = torch.where(positive, a, torch.full_like(a, -1.0))
            unclamped0 = log_s + torch.log(-torch.expm1(a0)) - log_one_minus
            clamped = ~(positive & (unclamped0 > log_floor))
        # The unclamped branch at a safe point (a = -1) where the floor is taken: no inf/NaN gradient there.
        a_safe = torch.where(clamped, torch.full_like(a, -1.0), a)
        log_unclamped = log_s + torch.log(-torch.expm1(a_safe)) - log_one_minus
    log_ng = torch.where(clamped, log_floor, log_unclamped)
    loss = torch.logaddexp(p, log_ng) - p
    loss = torch.where(has_negatives, loss, torch.zeros((), dtype=dtype, device=loss.device))
    return DebiasedTerm(
        loss=loss,
        clamped=clamped & has_negatives,
        log_scale=(log_ng - log_s).detach(),
        log_hardest_weight=log_hardest_weight.detach(),
        has_negatives=has_negatives,
    )


def debiased_stats(term: DebiasedTerm) -> dict[str, Tensor]:
    """Over the anchors with negatives: ``clamped``, the fraction where the floor N exp(-1/tau) is active;
    ``hardest_weight``, the mean importance weight of each anchor's hardest negative (1: uniform);
    ``negative_scale``, the mean of Ng / S, the factor by which the debiasing scaled the negatives' term."""
    has = term.has_negatives
    if not bool(has.any()):
        return {}
    return {"clamped": term.clamped[has].float().mean(),
            "hardest_weight": term.log_hardest_weight[has].exp().mean(),
            "negative_scale": term.log_scale[has].exp().mean()}


__all__ = ["DebiasedTerm", "debiased_negative_term", "debiased_stats"]
