"""The ``dcl`` strategy: the debiased contrastive loss (Chuang, Robinson, Lin, Torralba, Jegelka,
Debiased Contrastive Learning, NeurIPS 2020).

An estimator: for anchor i with positive logit p_i and the logits l_ij of its N_i valid negatives,

    Ng_i = max((sum_j exp(l_ij) - tau_plus N_i exp(p_i)) / (1 - tau_plus),  N_i exp(-1 / tau))
    L_i  = -log(exp(p_i) / (exp(p_i) + Ng_i))

the negatives' sum corrected for the expected share tau_plus of same-class (false) negatives. It is the
beta = 0 case of HCL (uniform importance weights); :func:`hardmix.ops.debiased.debiased_negative_term`
computes both, in log space. N_i counts every valid negative column, the extra columns of a composed
strategy (MoCHi's synthetic negatives) included; in-batch it is B - 1 (the DCL code's SimCLR layout has
2B - 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from hardmix.ops.debiased import debiased_negative_term, debiased_stats
from hardmix.strategies.base import ContrastContext, Stats, Strategy, arg, register_strategy, set_field
from hardmix.utils.errors import check_number


@register_strategy
@dataclass(frozen=True)
class DCL(Strategy):
    """Debiased negatives: the sum of exp(l) less the expected false negatives tau_plus N exp(p).

    Args:
        tau_plus: class prior, in [0, 1). Default 0.1: the released code's default
            (chingyaoc/DCL, ``main.py``; STL10).

    Example:
        >>> DCL(tau_plus=1.0)
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.StrategyArgumentError: tau_plus: must be in [0, 1), got 1.0
    """

    name = "dcl"
    paper = (
        "Chuang, Robinson, Lin, Torralba, Jegelka, Debiased Contrastive Learning, NeurIPS 2020 "
        "(arXiv:2007.00224; code: github.com/chingyaoc/DCL)"
    )
    tau_plus: float = arg(0.1, "class prior, in [0, 1) (DCL code default: 0.1)")

    def __post_init__(self) -> None:
        set_field(self, "tau_plus", check_number("tau_plus", self.tau_plus, 0.0, 1.0, "[)"))

    def estimator(
        self, ctx: ContrastContext, positive_logits: Tensor, negative_logits: Tensor, temperature: float
    ) -> tuple[Tensor, Stats]:
        """The per-anchor loss (B,): HCL's debiased term with uniform weights (beta = 0)."""
        term = debiased_negative_term(positive_logits, negative_logits, temperature, 0.0, self.tau_plus)
        stats = debiased_stats(term)
        stats.pop("hardest_weight", None)
        return term.loss, stats
