"""The ``hard_copies`` strategy: a control for MoCHi that appends copies of each anchor's hardest real
negatives instead of mixtures of them (hardmix's own control, after Kalantidis et al., Hard Negative
Mixing for Contrastive Learning, NeurIPS 2020).

MoCHi (:mod:`hardmix.strategies.mochi`) adds s pair mixtures h_k = normalize(alpha_k n_a + (1 - alpha_k) n_b)
and s' query mixtures h'_k = normalize(beta_k q~ + (1 - beta_k) n_c) of each query's N hardest negatives.
This control selects the same pool (:func:`~hardmix.ops.mixing.hardest`) and draws what MoCHi draws, from the
same generator calls in the same order (:func:`copy_positions`: the s distinct pairs, their weights, the s'
picks, the query weights; the weights unused), and appends, instead of each synthetic point, a copy of one
of its sources:

    c_k  = SG(n_a)    (pair k's first negative),   k = 1..s
    c'_k = SG(n_c)    (query mixture k's negative), k = 1..s'

    L_q = -log exp(q.k+ / tau) / (exp(q.k+ / tau) + sum_j exp(q.n_j / tau)
                                  + sum_k exp(q.c_k / tau) + sum_k exp(q.c'_k / tau))

so that the denominator gains as many terms as MoCHi's, on the same hard negatives, with no mixing: a
copy's term equals its negative's, so the copies re-weight the hardest negatives (a negative picked m
times weighs 1 + m). If MoCHi helps only by weighting its hard negatives more, this control does as well.
The copies are detached (as MoCHi's points): their gradient reaches the anchor only.

The copies' cosines q . SG(n) are entries of the cosines with their gradient to the anchors only (the loss
divides them by tau with every other column).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from hardmix.ops.mixing import check_draw_counts, check_enough_negatives, hardest, sample_distinct_pairs
from hardmix.strategies.base import ContrastContext, Stats, Strategy, arg, register_strategy, set_field


def copy_positions(
    batch: int,
    n_hard: int,
    n_pair: int,
    n_query: int,
    generator: torch.Generator | None,
    device: torch.device,
    dtype: torch.dtype,
) -> Tensor:
    """(B, s + s') positions among each query's N hardest negatives of the copies: the first of each of s
    distinct pairs, then s' uniform picks. Drawn as MoCHi draws (:meth:`hardmix.strategies.mochi.MoCHi.draws`,
    the same generator calls in the same order, the weights in ``dtype``), so that for one seed the copies
    are the sources of MoCHi's points and the generator is left where MoCHi leaves it.

    Example:
        >>> copy_positions(2, 4, 3, 1, torch.Generator().manual_seed(0), torch.device("cpu"),
        ...                torch.float32).shape
        torch.Size([2, 4])
    """
    empty = torch.empty(batch, 0, dtype=torch.long, device=device)
    first = sample_distinct_pairs(batch, n_hard, n_pair, generator, device)[0] if n_pair else empty
    torch.rand(batch, n_pair, generator=generator, device=device, dtype=dtype)  # MoCHi's alpha, unused
    pick = torch.randint(n_hard, (batch, n_query), generator=generator, device=device) if n_query else empty
    torch.rand(batch, n_query, generator=generator, device=device, dtype=dtype)  # MoCHi's beta, unused
    return torch.cat([first, pick], dim=1)


@register_strategy
@dataclass(frozen=True)
class HardCopies(Strategy):
    """Control for MoCHi: copies of each query's hardest negatives, as many as MoCHi's mixtures, no mixing.

    Args: MoCHi's (:class:`~hardmix.strategies.mochi.MoCHi`), with its names, defaults and validation
    (a test keeps them alike), so that one spec configures both: ``n_hard`` N,
    ``n_pair`` s (copies of the first negative of each of MoCHi's pairs), ``n_query`` s' (copies of the
    negative of each of MoCHi's query mixtures), ``beta_max`` (drawn as MoCHi's, so that the random stream
    is MoCHi's; it changes no copy).

    Example:
        >>> copies = HardCopies(n_hard=4, n_pair=2, n_query=1)
        >>> copies.n_pair + copies.n_query, copies.kinds()
        (3, ('extra',))
    """

    name = "hard_copies"
    paper = (
        "hardmix's control for Kalantidis et al., Hard Negative Mixing for Contrastive Learning, "
        "NeurIPS 2020 (arXiv:2010.01028): MoCHi's draws, copies instead of mixtures"
    )
    negatives_argument = "n_hard"
    small = {"n_hard": 4, "n_pair": 4, "n_query": 2}
    n_hard: int = arg(1024, "N: hardest negatives per query (MoCHi's, paper: 1024)")
    n_pair: int = arg(1024, "s: copies of the first negative of MoCHi's pairs (paper: 1024 on ImageNet-100)")
    n_query: int = arg(128, "s': copies of the negative of MoCHi's query mixtures (paper: 128, ImageNet-100)")
    beta_max: float = arg(0.5, "MoCHi's query weight bound, drawn so that the draws are MoCHi's (paper: 0.5)")

    def __post_init__(self) -> None:
        set_field(self, "beta_max", check_draw_counts(self.n_hard, self.n_pair, self.n_query, self.beta_max))

    @property
    def required_negatives(self) -> int:
        return self.n_hard

    def extra_cosines(self, ctx: ContrastContext) -> tuple[Tensor, Stats] | None:
        """(B, s + s') q . SG(n) for each copied negative n, pair copies first."""
        if self.n_pair + self.n_query == 0:
            return None
        check_enough_negatives(self.n_hard, ctx.fewest_negatives(), ctx.mode)
        with torch.no_grad():
            similarities = ctx.selection_similarities()
            hard = hardest(similarities, self.n_hard, ctx.negative_mask)  # (B, N)
            positions = copy_positions(hard.shape[0], self.n_hard, self.n_pair, self.n_query, ctx.generator,
                                       similarities.device, ctx.anchors.dtype)
            copies = hard.gather(1, positions)  # (B, s + s') candidate index of each copy
        cosines = ctx.anchor_cosines().gather(1, copies)
        with torch.no_grad():
            values = cosines.detach().double()
            positive = ctx.positive_cosines.detach().double().unsqueeze(1)
            stats = {"copy_sim": values.mean(),
                     "copy_harder_than_positive": (values > positive).float().mean()}
        return cosines, stats
