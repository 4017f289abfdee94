"""The ``mixcse_adaptive`` strategy: MixCSE with one lambda per anchor, chosen by the paper's bound.

MixCSE (Zhang et al., AAAI 2022) mixes each anchor's positive with each negative, m'_ij(lam) =
normalize(lam h'_i + (1 - lam) h'_j), and asks (Sec. 4.3) that the mixture stay farther from the anchor h_i
than the positive: angle(h_i, m'_ij) >= gamma = angle(h_i, h'_i), an upper bound on lam. Since gamma is
unobserved it then fixes lam = 0.2. This strategy (hardmix's variant, not the paper's method) observes the
bound on each batch instead, with a margin, and picks each anchor's lam from it:

    t_i      = h_i . h'_i - margin                                       (anchor i's threshold)
    J_i      = {j valid negative of i : h_i . h'_j <= t_i}                 (the negatives that constrain lam)
    lam*_ij  = max {lam in [0, lam_max] : h_i . m'_ij(lam) <= t_i}          (j in J_i)
    lam_i    = max(lam_min, min_{j in J_i} lam*_ij)                         (lam_max if J_i is empty)
    L_i      = -log exp(h_i.h'_i / tau)
                    / (sum_j exp(h_i.h'_j / tau) + sum_{j != i} exp(h_i . SG(m'_ij(lam_i)) / tau))

that is, MixCSE's clean loss (:mod:`hardmix.strategies.mixcse`) with row i's mixtures at lam_i; lam_i is a
constant of the step (computed without gradient), and SG applies to the mixtures as in MixCSE.

Why lam*_ij is well defined, and found by bisection. As lam goes from 0 to 1, m'_ij(lam) moves
monotonically along the great-circle arc from h'_j to h'_i (shorter than pi), on which h_i . m is a
sinusoid of the arc angle, so it has at most one extremum there (a sinusoid's extrema are pi apart). It
starts at h_i . h'_j <= t_i (j in J_i) and ends at h_i . h'_i = t_i + margin >= t_i: a function with at most
one extremum that starts below the threshold and ends above it crosses it once, so the feasible set is an
interval [0, r_ij] and lam*_ij = min(r_ij, lam_max). :func:`adaptive_lam` checks lam_max first (lam*_ij =
lam_max when it is feasible) and otherwise bisects [0, lam_max] keeping the feasible end, so every mixture
of a constrained pair satisfies the bound at lam_i <= lam*_ij (unless ``lam_min`` floors lam_i above it).
A negative with h_i . h'_j > t_i is already more similar to the anchor than the bound allows at lam = 0
(the negative itself): no interval [0, r] exists, and it is left out of the minimum (its mixture still
joins the denominator, at lam_i). Each direction of the loss computes its own lam_i (with the views swapped,
as MixCSE's second direction); against a queue the positive is the key and the negatives the queue entries.

With ``lam_max`` = 0.2, the paper's constant, lam_i is 0.2 wherever the bound does not bite, and lower only
where the paper's constant would make a mixture harder than the anchor's positive (less the margin).

:meth:`MixCSEAdaptive.extra_cosines` takes MixCSE's mixed cosines at the per-row lam_i
(:func:`~hardmix.ops.mixing.mixed_negative_cosines`, from the inner products), lam_i from
:func:`adaptive_lam`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from hardmix.ops.mixing import mixed_negative_cosines, mixture_cosines
from hardmix.strategies.base import ContrastContext, Stats, Strategy, arg, register_strategy, set_field
from hardmix.utils.errors import StrategyArgumentError, check_bool, check_number


class AdaptiveLam(NamedTuple):
    """One direction's per-anchor lambdas (all detached)."""

    lam: Tensor  # (B,) lam_i, floored at lam_min
    bites: Tensor  # (B,) bool: some constrained negative has lam*_ij < lam_max (before the floor)


@torch.no_grad()
def adaptive_lam(
    anchors: Tensor,
    positives: Tensor,
    candidates: Tensor,
    negative_mask: Tensor,
    margin: float,
    lam_max: float,
    lam_min: float = 0.0,
) -> AdaptiveLam:
    """The per-anchor lam_i of the module's docstring, for one direction (no gradient).

    Computed in float32 at least, with autocast off: a bf16 similarity would move the bound by ~1e-2.

    Args:
        anchors: (B, D) unit anchors h_i; positives: (B, D) unit positives h'_i; candidates: (N, D) unit
            negatives h'_j (in-batch: the whole batch's positives; queue: the queue).
        negative_mask: (B, N) bool, the valid negatives.
        margin: t_i = h_i . h'_i - margin. lam_max, lam_min: lam_i's range.

    Returns:
        :class:`AdaptiveLam`: lam_i and whether the bound bites in row i.

    Example:
        >>> h = torch.tensor([[1.0, 0.0, 0.0]])
        >>> p = torch.tensor([[0.8, 0.6, 0.0]])  # h . p = 0.8, t = 0.7
        >>> n = torch.tensor([[0.6, 0.0, 0.8], [0.0, 0.0, 1.0]])  # h . n = 0.6 (binds) and 0 (does not)
        >>> out = adaptive_lam(h, p, n, torch.ones(1, 2, dtype=torch.bool), margin=0.1, lam_max=0.5)
        >>> out.lam, out.bites
        (tensor([0.1980]), tensor([True]))
        >>> cos = mixture_cosines(torch.tensor(0.8), torch.tensor(0.6), torch.tensor(0.48), out.lam)
        >>> round(float(cos), 6)  # the binding mixture sits on the threshold
        0.7
    """
    dtype = torch.promote_types(anchors.dtype, torch.float32)
    with torch.autocast(anchors.device.type, enabled=False):
        h, p, n = (x.detach().to(dtype) for x in (anchors, positives, candidates))
        a = (h * p).sum(dim=1)  # (B,) h_i . h'_i
        b = h @ n.T  # (B, N) h_i . h'_j
        c = p @ n.T  # (B, N) h'_i . h'_j
    t = (a - margin).unsqueeze(1)  # (B, 1)
    constrained = negative_mask & (b <= t)  # j in J_i
    # lam*_ij < lam_max exactly where lam_max itself is infeasible; bisect only those pairs.
    binding = constrained & (mixture_cosines(a.unsqueeze(1), b, c, lam_max) > t)
    lam = torch.full_like(a, lam_max)
    rows, cols = binding.nonzero(as_tuple=True)
    if rows.numel():
        a_r, b_r, c_r, t_r = a[rows], b[rows, cols], c[rows, cols], t[rows, 0]
        lo = torch.zeros_like(b_r)  # feasible: h_i . m'_ij(0) = h_i . h'_j <= t_i
        hi = torch.full_like(b_r, lam_max)  # infeasible
        for _ in range(64 if dtype == torch.float64 else 32):  # to the dtype's resolution
            mid = 0.5 * (lo + hi)
            ok = mixture_cosines(a_r, b_r, c_r, mid) <= t_r
            lo = torch.where(ok, mid, lo)
            hi = torch.where(ok, hi, mid)
        lam.scatter_reduce_(0, rows, lo, reduce="amin")  # lam_i = min_j lam*_ij
    bites = lam < lam_max
    return AdaptiveLam(lam.clamp_min(lam_min), bites)


@register_strategy
@dataclass(frozen=True)
class MixCSEAdaptive(Strategy):
    """MixCSE with a per-anchor lambda: the largest up to lam_max whose mixtures stay below the positive.

    Args:
        margin: t_i = h_i . h'_i - margin, in [0, 2]; hardmix's choice, 0.1 (the paper states the bound
            with margin 0 and no value, since it fixes lam).
        lam_max: the largest lam, in (0, 1). Default 0.2, the paper's constant (Zhang et al. 2022, Sec. 5.2):
            the adaptive lam only lowers lam where the bound bites.
        lam_min: a floor on lam_i, in [0, lam_max]; 0.0 (no floor) is hardmix's choice. A floor above
            lam*_ij lets that mixture break the bound.
        stop_grad: SG on the mixtures (MixCSE's default); false is its "wo sg" ablation (lam_i stays
            detached either way).
        second_direction: MixCSE's second direction (None: true, the paper's loss).

    Example:
        >>> MixCSEAdaptive(lam_min=0.3)
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.StrategyArgumentError: lam_min: must be in [0, lam_max=0.2], got 0.3
    """

    name = "mixcse_adaptive"
    paper = (
        "hardmix's per-anchor lambda from the bound of Zhang et al., Unsupervised Sentence Representation "
        "via Contrastive Learning with Mixing Negatives, AAAI 2022 (Sec. 4.3)"
    )
    margin: float = arg(
        0.1, "mixtures' cosine to the anchor <= h_i.h'_i - margin, in [0, 2]; 0.1 is hardmix's choice")
    lam_max: float = arg(0.2, "largest lam, in (0, 1); the paper's constant 0.2 (only lowered)")
    lam_min: float = arg(0.0, "floor on lam_i, in [0, lam_max]; 0.0 (no floor) is hardmix's choice")
    stop_grad: bool = arg(True, "stop-gradient on the mixtures (paper); false is the 'wo sg' ablation")
    second_direction: bool | None = arg(None, "two directions (None: true, the paper's); false: 'single'")

    def __post_init__(self) -> None:
        set_field(self, "margin", check_number("margin", self.margin, 0.0, 2.0, "[]"))
        set_field(self, "lam_max", check_number("lam_max", self.lam_max, 0.0, 1.0))
        try:
            set_field(self, "lam_min", check_number("lam_min", self.lam_min, 0.0, self.lam_max, "[]"))
        except StrategyArgumentError:
            raise StrategyArgumentError(
                "lam_min", f"must be in [0, lam_max={self.lam_max:g}], got {self.lam_min!r}") from None
        check_bool("stop_grad", self.stop_grad)
        check_bool("second_direction", self.second_direction, allow_none=True)

    @property
    def direction_argument(self) -> str | None:
        return None if self.second_direction is None else "second_direction"

    @property
    def both_directions(self) -> bool | None:
        return True if self.second_direction is None else self.second_direction

    def extra_cosines(self, ctx: ContrastContext) -> tuple[Tensor, Stats]:
        """(B, N) h_i . SG(m'_ij(lam_i)) for every candidate j, -inf where j is not a valid negative of
        i; stats: the mean and smallest lam_i and the fraction of anchors where the bound bites."""
        out = adaptive_lam(ctx.anchors, ctx.positives, ctx.candidates, ctx.negative_mask, self.margin,
                           self.lam_max, self.lam_min)
        lam = out.lam.to(ctx.cosines.dtype).unsqueeze(1)  # (B, 1) lam_i, detached
        stats = {"lam_mean": out.lam.mean(), "lam_smallest": out.lam.min(),
                 "bound_bites": out.bites.float().mean()}
        return mixed_negative_cosines(*ctx.mixing_products(self.stop_grad), ctx.negative_mask, lam), stats
