"""The ``false_negative_filter`` strategy: drop each anchor's suspected false negatives from the denominator,
the "elimination" variant of false-negative cancellation (Huynh et al., Boosting Contrastive
Self-Supervised Learning with False Negative Cancellation, WACV 2022, Sec. 3.2).

For anchor h_i with valid negatives n_j (j in V_i) and cosines s_ij = h_i . n_j, a set F_i of suspected
false negatives is chosen and left out of InfoNCE's denominator:

    L_i = -log exp(h_i.p_i / tau) / (exp(h_i.p_i / tau) + sum_{j in V_i \\ F_i} exp(s_ij / tau))

    top-k:     F_i = the min(k, |V_i| - 1) negatives of V_i with the largest s_ij
    threshold: F_i = {j in V_i : s_ij > t}, less the least similar one if that would empty V_i

Either way every anchor keeps at least one negative (a row whose every negative were dropped would have a
loss of 0 and no gradient, silently). The trainers check before training that every anchor has at least
k + 1 valid negatives (:attr:`FalseNegativeFilter.required_negatives`), so the ``|V_i| - 1`` cap only acts
on rows a setup could not foresee (a queue that is not full yet).

**How this differs from the paper.** Huynh et al. find false negatives with a *support set*: extra
augmented views of the anchor's image; each negative is scored by its similarity to every support view,
the scores are aggregated (max, or mean), and the top-k of the aggregate (with a score threshold, in
their code ``fn_topk=10``, ``fn_threshold=0.7``, applied together) are the false negatives. hardmix has no
support views: this strategy ranks the negatives by their similarity to the **anchor itself**, which is
the paper's scoring with a support set of one view (the anchor), and it uses either the top-k or the
threshold, not both. It is therefore a cheap proxy of their detector, not a reproduction of it.

Selection is done without gradient (the dropped set is a constant of the step), in float32 at least, and
only among valid negatives (an excluded queue entry or the in-batch positive is never "dropped"). The
loss removes the dropped entries from the denominator and from the pool of every extra-column strategy
of the same loss (:mod:`hardmix.losses.composition`): MoCHi never mixes a dropped negative, MixCSE never
mixes the positive with one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from hardmix.ops.mixing import NEG_INF
from hardmix.strategies.base import ContrastContext, Stats, Strategy, arg, register_strategy, set_field
from hardmix.utils.counting import count_true
from hardmix.utils.errors import StrategyArgumentError, check_int, check_number


def top_k_false_negatives(cosines: Tensor, valid: Tensor, k: int) -> Tensor:
    """(B, N) bool: each row's min(k, n_valid - 1) most similar valid negatives.

    Example:
        >>> cos = torch.tensor([[0.9, 0.1, 0.5, 0.7], [0.2, 0.8, 0.3, 0.0]])
        >>> valid = torch.tensor([[True, True, True, True], [True, False, True, False]])
        >>> top_k_false_negatives(cos, valid, 2).int().tolist()
        [[1, 0, 0, 1], [0, 0, 1, 0]]
    """
    n = cosines.shape[1]
    k = min(k, n)
    if k == 0:
        return torch.zeros_like(valid, dtype=torch.bool)
    ranked = cosines.masked_fill(~valid, NEG_INF)
    order = ranked.topk(k, dim=1).indices  # (B, k), most similar first
    dropped_per_row = (count_true(valid, dim=1) - 1).clamp(min=0, max=k)  # keep at least one negative
    take = torch.arange(k, device=cosines.device).unsqueeze(0) < dropped_per_row.unsqueeze(1)  # (B, k)
    return torch.zeros_like(valid, dtype=torch.bool).scatter_(1, order, take)


def threshold_false_negatives(cosines: Tensor, valid: Tensor, threshold: float) -> Tensor:
    """(B, N) bool: the valid negatives with cosine above ``threshold``; in a row where that is all of
    them, the least similar one is kept.

    Example:
        >>> cos = torch.tensor([[0.9, 0.1, 0.8], [0.95, 0.85, 0.9]])
        >>> valid = torch.ones(2, 3, dtype=torch.bool)
        >>> threshold_false_negatives(cos, valid, 0.75).int().tolist()
        [[1, 0, 1], [1, 0, 1]]
    """
    dropped = valid & (cosines > threshold)
    emptied = (count_true(dropped, dim=1) == count_true(valid, dim=1)) & valid.any(dim=1)
    if bool(emptied.any()):
        least = cosines.masked_fill(~valid, float("inf")).argmin(dim=1)  # (B,)
        rows = torch.nonzero(emptied).squeeze(1)
        dropped = dropped.clone()
        dropped[rows, least[rows]] = False
    return dropped


@register_strategy
@dataclass(frozen=True)
class FalseNegativeFilter(Strategy):
    """False-negative elimination: drop each anchor's most similar negatives (top-k or above a cosine).

    Args:
        top_k: drop each anchor's k most similar valid negatives (0: off). Default 10, the top-k of the
            official FNC code (google-research/fnc, ``fn_topk``).
        threshold: drop the valid negatives whose cosine to the anchor exceeds it, in (-1, 1]; None: off.
            The official code's score threshold is 0.7 (``fn_threshold``), applied there together with the
            top-k; here exactly one of ``top_k`` and ``threshold`` is active (set ``top_k: 0`` to use it).

    Example:
        >>> FalseNegativeFilter(top_k=0)
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.StrategyArgumentError: top_k: 0 and no threshold drop nothing; set one of them
    """

    name = "false_negative_filter"
    paper = (
        "Huynh et al., Boosting Contrastive Self-Supervised Learning with False Negative Cancellation, "
        "WACV 2022 (arXiv:2011.11765); elimination variant, ranked by similarity to the anchor itself"
    )
    negatives_argument = "top_k"
    small = {"top_k": 1}
    top_k: int = arg(10, "drop each anchor's k most similar negatives, 0: off (FNC code's fn_topk)")
    threshold: float | None = arg(
        None, "drop negatives with cosine above it, in (-1, 1], null: off (FNC code's fn_threshold: 0.7; "
              "needs top_k: 0)")

    def __post_init__(self) -> None:
        check_int("top_k", self.top_k)
        if self.threshold is not None:
            set_field(self, "threshold", check_number("threshold", self.threshold, -1.0, 1.0, "(]"))
        if self.top_k > 0 and self.threshold is not None:
            raise StrategyArgumentError(
                "threshold",
                f"exactly one of top_k and threshold selects the false negatives; got top_k={self.top_k} and "
                f"threshold={self.threshold} (set top_k: 0 to filter by threshold)",
            )
        if self.top_k == 0 and self.threshold is None:
            raise StrategyArgumentError("top_k", "0 and no threshold drop nothing; set one of them")

    @property
    def required_negatives(self) -> int:
        """k + 1 with top-k (the k dropped and one left), else 0."""
        return self.top_k + 1 if self.top_k else 0

    @property
    def excludes_at_most(self) -> int:
        """k with top-k; a threshold's count is known only per batch (0)."""
        return self.top_k

    def exclude(self, ctx: ContrastContext) -> tuple[Tensor, Stats]:
        """(B, N) bool, the suspected false negatives of each anchor among its valid negatives; stats: the
        fraction of the valid negatives dropped and, when any were, their mean cosine to the anchor."""
        with torch.no_grad():
            cosines = ctx.selection_similarities()
            valid = ctx.negative_mask
            if self.top_k or self.threshold is None:  # one of them is given (__post_init__)
                dropped = top_k_false_negatives(cosines, valid, self.top_k)
            else:
                dropped = threshold_false_negatives(cosines, valid, self.threshold)
            dropped = dropped & valid
            n_dropped = count_true(dropped)
            stats: Stats = {"excluded_fraction": n_dropped / count_true(valid).clamp_min(1)}
            if int(n_dropped):
                stats["excluded_sim"] = cosines[dropped].double().mean()
        return dropped, stats
