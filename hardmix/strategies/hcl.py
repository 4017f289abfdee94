"""The ``hcl`` strategy: hard negative sampling by importance weights (Robinson, Chuang, Sra, Jegelka,
Contrastive Learning with Hard Negative Samples, ICLR 2021).

An estimator: it replaces InfoNCE's negative term. For anchor i with positive logit p_i = s_ii / tau and
the logits l_ij = s_ij / tau of its N_i valid negatives (the paper's Eq. with M = 1, as its code computes
it):

    w_ij  = exp(beta l_ij) / mean_j exp(beta l_ij)                       (importance weights, mean 1)
    S_i   = sum_j w_ij exp(l_ij)
    Ng_i  = max((S_i - tau_plus N_i exp(p_i)) / (1 - tau_plus),  N_i exp(-1 / tau))
    L_i   = -log(exp(p_i) / (exp(p_i) + Ng_i))

beta is the concentration (beta = 0: uniform weights, the debiased loss of Chuang et al. 2020, the
``dcl`` strategy) and tau_plus the class prior (tau_plus = 0 and beta = 0: InfoNCE). The weights carry the
gradient (the paper's code does not detach them).

In log space, as :func:`debiased_negative_term` computes it:

    log S_i  = logsumexp_j((1 + beta) l_ij) - logsumexp_j(beta l_ij) + log N_i
    log Ng_i = log S_i + log(1 - exp(a_i)) - log(1 - tau_plus),  a_i = log(tau_plus N_i) + p_i - log S_i
    log Ng_i <- log N_i - 1 / tau   where that floor is larger (or a_i >= 0)
    L_i      = logaddexp(p_i, log Ng_i) - p_i

Where the floor is active the loss is ``log(exp(p_i) + N_i exp(-1/tau)) - p_i``: its gradient reaches
p_i only. The unclamped branch is evaluated at a safe point there, so neither branch of the selection
produces a NaN gradient.

N_i is the number of valid entries of the anchor's row of negative logits (those that are not -inf):
in-batch, the other B - 1 rows of the other view (hardmix's SimCSE layout; the HCL code's SimCLR layout
has 2B - 2); against a queue, the queue entries not excluded; and every extra column of a composed
strategy (MoCHi's synthetic negatives join the N_i negatives). A row without any negative has loss 0, as
InfoNCE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from hardmix.strategies.base import (
    ContrastContext,
    Stats,
    Strategy,
    arg,
    check_number,
    register_strategy,
    set_field,
)

NEG_INF = float("-inf")


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


def debiased_stats(term: DebiasedTerm) -> Stats:
    """Over the anchors with negatives: ``clamped``, the fraction where the floor N exp(-1/tau) is active;
    ``hardest_weight``, the mean importance weight of each anchor's hardest negative (1: uniform);
    ``negative_scale``, the mean of Ng / S, the factor by which the debiasing scaled the negatives' term."""
    has = term.has_negatives
    if not bool(has.any()):
        return {}
    return {"clamped": term.clamped[has].float().mean(),
            "hardest_weight": term.log_hardest_weight[has].exp().mean(),
            "negative_scale": term.log_scale[has].exp().mean()}


@register_strategy
@dataclass(frozen=True)
class HCL(Strategy):
    """Hard negatives by importance weights exp(beta l) over a debiased negative term (an estimator).

    Args:
        beta: concentration of the weights on the hard negatives, >= 0 (0: uniform, DCL). Default 1.0:
            the released code's default and README example (joshr17/HCL, ``image/main.py``; STL10).
        tau_plus: class prior, the probability that a negative shares the anchor's class, in [0, 1).
            Default 0.1: the released code's default (``image/main.py``).

    In-batch the N negatives of an anchor are the other B - 1 rows of the other view (the paper's
    SimCLR layout has 2B - 2); the loss's ``symmetric`` adds the second direction (not asked for by
    default). Extra columns of a composed strategy (MoCHi) count among the N negatives.

    Example:
        >>> HCL(beta=-1.0)
        Traceback (most recent call last):
        ...
        hardmix.errors.StrategyArgumentError: beta: must be in [0, inf), got -1.0
    """

    name = "hcl"
    paper = (
        "Robinson, Chuang, Sra, Jegelka, Contrastive Learning with Hard Negative Samples, ICLR 2021 "
        "(arXiv:2010.04592; code: github.com/joshr17/HCL)"
    )
    beta: float = arg(1.0, "concentration on hard negatives, >= 0 (HCL code default and README example: 1.0)")
    tau_plus: float = arg(0.1, "class prior, in [0, 1) (HCL code default: 0.1)")

    def __post_init__(self) -> None:
        set_field(self, "beta", check_number("beta", self.beta, 0.0, float("inf"), "[)"))
        set_field(self, "tau_plus", check_number("tau_plus", self.tau_plus, 0.0, 1.0, "[)"))

    def estimator(
        self, ctx: ContrastContext, positive_logits: Tensor, negative_logits: Tensor
    ) -> tuple[Tensor, Stats]:
        """The per-anchor loss (B,) of :func:`debiased_negative_term` over every negative column."""
        term = debiased_negative_term(positive_logits, negative_logits, ctx.temperature, self.beta,
                                      self.tau_plus)
        stats = debiased_stats(term)
        stats.pop("negative_scale", None)
        return term.loss, stats
