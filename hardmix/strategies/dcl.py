"""The ``dcl`` strategy: the debiased contrastive loss (Chuang, Robinson, Lin, Torralba, Jegelka,
Debiased Contrastive Learning, NeurIPS 2020).

An estimator: for anchor i with positive logit p_i and the logits l_ij of its N_i valid negatives,

    Ng_i = max((sum_j exp(l_ij) - tau_plus N_i exp(p_i)) / (1 - tau_plus),  N_i exp(-1 / tau))
    L_i  = -log(exp(p_i) / (exp(p_i) + Ng_i))

the negatives' sum corrected for the expected share tau_plus of same-class (false) negatives. It is the
beta = 0 case of HCL (uniform importance weights); :func:`hardmix.strategies.hcl.debiased_negative_term`
computes both, in log space. N_i counts every valid negative column, the extra columns of a composed
strategy (MoCHi's synthetic negatives) included; in-batch it is B - 1 (the DCL code's SimCLR layout has
2B - 2).
"""

from __future__ import annotations

from hardmix.strategies.base import ParamInfo, register_strategy
from hardmix.strategies.hcl import HCL


@register_strategy
class DCL(HCL):
    """Debiased negatives: the sum of exp(l) less the expected false negatives tau_plus N exp(p).

    Args:
        tau_plus: class prior, in [0, 1). Default 0.1: the released code's default
            (chingyaoc/DCL, ``main.py``; STL10).

    Example:
        >>> DCL(tau_plus=1.0)
        Traceback (most recent call last):
        ...
        hardmix.errors.StrategyArgumentError: tau_plus: must be in [0, 1) (a class prior), got 1.0
    """

    name = "dcl"
    paper = (
        "Chuang, Robinson, Lin, Torralba, Jegelka, Debiased Contrastive Learning, NeurIPS 2020 "
        "(arXiv:2007.00224; code: github.com/chingyaoc/DCL)"
    )
    params = (ParamInfo("tau_plus", 0.1, "class prior, in [0, 1) (DCL code default: 0.1)"),)

    def __init__(self, tau_plus: float = 0.1) -> None:
        super().__init__(beta=0.0, tau_plus=tau_plus)

    def diagnostics(self) -> dict[str, float]:
        """From the last call (both directions when symmetric), over the anchors with negatives:
        ``clamped``, the fraction where the floor N exp(-1/tau) is active; ``negative_scale``, the mean
        of Ng / sum_j exp(l_j), the factor by which the debiasing (and the floor) scaled the negatives'
        term (1: unchanged)."""
        stats = self._stats()
        if stats is None:
            return {}
        return {"clamped": float(stats["clamped"]), "negative_scale": float(stats["negative_scale"])}
