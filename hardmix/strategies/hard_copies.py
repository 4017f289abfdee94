"""The ``hard_copies`` strategy: a control for MoCHi that appends copies of each anchor's hardest real
negatives instead of mixtures of them (hardmix's own control, after Kalantidis et al., Hard Negative
Mixing for Contrastive Learning, NeurIPS 2020).

MoCHi (:mod:`hardmix.strategies.mochi`) adds s pair mixtures h_k = normalize(alpha_k n_a + (1 - alpha_k) n_b)
and s' query mixtures h'_k = normalize(beta_k q~ + (1 - beta_k) n_c) of each query's N hardest negatives.
This control takes the same random draws (:func:`~hardmix.strategies.mochi.mochi_draws`, the same
generator calls in the same order) over the same pool (:func:`~hardmix.strategies.mochi.hardest`), and
appends, instead of each synthetic point, a copy of one of its sources:

    c_k  = SG(n_a)    (pair k's first negative),   k = 1..s
    c'_k = SG(n_c)    (query mixture k's negative), k = 1..s'

    L_q = -log exp(q.k+ / tau) / (exp(q.k+ / tau) + sum_j exp(q.n_j / tau)
                                  + sum_k exp(q.c_k / tau) + sum_k exp(q.c'_k / tau))

so that the denominator gains as many terms as MoCHi's, on the same hard negatives, with no mixing: a
copy's term equals its negative's, so the copies re-weight the hardest negatives (a negative picked m
times weighs 1 + m). If MoCHi helps only by weighting its hard negatives more, this control does as well.
The copies are detached (as MoCHi's points): their gradient reaches the anchor only.

:meth:`HardCopies.extra_logits` is the plain definition: the copies' logits q . SG(n) / tau as the product
of the anchors with the stop-gradient candidates, at the copied columns. :meth:`HardCopies.fast_logits`
reads the same values from the loss's stop-gradient logits (no second product).
"""

from __future__ import annotations

import torch
from torch import Tensor

from hardmix.strategies.base import ContrastContext, ParamInfo, register_strategy
from hardmix.strategies.mochi import MoCHi, MochiDraws, hardest, selection_similarities
from hardmix.utils.counting import count_true


def copied_negatives(hard: Tensor, draws: MochiDraws) -> Tensor:
    """(B, s + s') candidate index of each copy: n_a of every pair, then n_c of every query mixture.

    Args:
        hard: (B, N) each anchor's hardest negatives (indices into the candidates), see
            :func:`~hardmix.strategies.mochi.hardest`.
        draws: MoCHi's draws (positions among ``hard``).

    Example:
        >>> hard = torch.tensor([[4, 7, 9]])
        >>> draws = MochiDraws(torch.tensor([[0, 1]]), torch.tensor([[2, 2]]), torch.rand(1, 2),
        ...                    torch.tensor([[2]]), torch.rand(1, 1))
        >>> copied_negatives(hard, draws)
        tensor([[4, 7, 9]])
    """
    positions = torch.cat([draws.first.long(), draws.pick.long()], dim=1)  # (B, s + s')
    return hard.gather(1, positions)


@register_strategy
class HardCopies(MoCHi):
    """Control for MoCHi: copies of each query's hardest negatives, as many as MoCHi's mixtures, no mixing.

    Args: MoCHi's, with its names, defaults, validation, warm-up and schedule (a subclass of
    :class:`~hardmix.strategies.mochi.MoCHi`, so that one spec configures both and a ramped MoCHi has a
    ramped control): ``n_hard`` N, ``n_pair`` s (copies of the first negative of each of MoCHi's pairs),
    ``n_query`` s' (copies of the negative of each of MoCHi's query mixtures), ``beta_max`` (drawn as
    MoCHi's, so that the random stream is MoCHi's; it changes no copy), ``warmup_steps``, ``schedule``,
    ``ramp_steps``.

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
    params = tuple(
        ParamInfo(p.name, p.default, f"as mochi's: {p.help}" if p.name != "beta_max" else
                  "as mochi's, in (0, 0.5]: keeps MoCHi's random draws; changes no copy")
        for p in MoCHi.params
    )
    needs_anchor_logits = True  # the fast path reads the copies' logits from the stop-gradient logits

    def extra_logits(self, ctx: ContrastContext) -> Tensor | None:
        """The plain definition: q . SG(n) / tau for each copied negative n, (B, s + s') (pair copies
        first), from the product of the anchors with the detached candidates; None before the warm-up
        ends."""
        copies = self._copies(ctx)
        if copies is None:
            return None
        logits = ctx.anchors @ ctx.candidates.detach().T / ctx.temperature  # (B, N) q . SG(n_j) / tau
        return self._remember(logits.gather(1, copies), ctx)

    def fast_logits(self, ctx: ContrastContext) -> Tensor | None:
        """:meth:`extra_logits` from ``ctx.shortcuts.anchor_logits`` (the loss's logits with the gradient
        to the anchors only): the same entries, no second product."""
        if ctx.shortcuts is None:
            return self.extra_logits(ctx)
        copies = self._copies(ctx)
        if copies is None:
            return None
        return self._remember(ctx.shortcuts.anchor_logits.gather(1, copies), ctx)

    def _copies(self, ctx: ContrastContext) -> Tensor | None:
        """(B, s + s') the copied candidates (MoCHi's gate, selection and draws), or None when not
        copying (warm-up, nothing to copy yet on a ramp)."""
        if not self._mixing(ctx):
            return None
        available = (
            ctx.shortcuts.fewest_negatives(ctx.negative_mask)
            if ctx.shortcuts is not None
            else int(count_true(ctx.negative_mask, dim=1).min())
        )
        self._check_available(available, ctx)
        with torch.no_grad():
            hard = hardest(selection_similarities(ctx), self.n_hard, ctx.negative_mask)  # (B, N)
            return copied_negatives(hard, self._draws(ctx, hard.shape[0]))

    def _remember(self, logits: Tensor, ctx: ContrastContext) -> Tensor:
        self._last = (logits.detach(), ctx.positive_logits.detach(), ctx.temperature)
        return logits

    def diagnostics(self) -> dict[str, float]:
        """Mean cosine of the queries to their copies, and the fraction of copies more similar to the
        query than its positive (from the last call), as MoCHi's ``synthetic_*`` for its mixtures; with a
        schedule, also MoCHi's ``ramp``."""
        ramp = {} if getattr(self, "_ramp", None) is None else {"ramp": self._ramp}
        if getattr(self, "_last", None) is None:
            return ramp
        logits, positive, tau = self._last
        return {
            "copy_sim": float(logits.double().mean()) * tau,
            "copy_harder_than_positive": float((logits > positive.unsqueeze(1)).float().mean()),
            **ramp,
        }
