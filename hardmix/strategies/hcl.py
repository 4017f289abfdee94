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

The loss is computed in log space, with the floor's gradient kept finite, by
:func:`hardmix.ops.debiased.debiased_negative_term` (which the ``dcl`` strategy shares).

N_i is the number of valid entries of the anchor's row of negative logits (those that are not -inf):
in-batch, the other B - 1 rows of the other view (hardmix's SimCSE layout; the HCL code's SimCLR layout
has 2B - 2); against a queue, the queue entries not excluded; and every extra column of a composed
strategy (MoCHi's synthetic negatives join the N_i negatives). A row without any negative has loss 0, as
InfoNCE.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from hardmix.ops.debiased import debiased_negative_term, debiased_stats
from hardmix.strategies.base import ContrastContext, Stats, Strategy, arg, register_strategy, set_field
from hardmix.utils.errors import check_number


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
    SimCLR layout has 2B - 2); the loss's ``both_directions`` adds the second direction (not asked for by
    default). Extra columns of a composed strategy (MoCHi) count among the N negatives.

    Example:
        >>> HCL(beta=-1.0)
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.StrategyArgumentError: beta: must be in [0, inf), got -1.0
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
        self, ctx: ContrastContext, positive_logits: Tensor, negative_logits: Tensor, temperature: float
    ) -> tuple[Tensor, Stats]:
        """The per-anchor loss (B,) of :func:`debiased_negative_term` over every negative column."""
        term = debiased_negative_term(positive_logits, negative_logits, temperature, self.beta,
                                      self.tau_plus)
        stats = debiased_stats(term)
        stats.pop("negative_scale", None)
        return term.loss, stats
