"""The ``synco`` strategy: SynCo's synthetic hard negatives beyond MoCHi's two kinds (Giakoumoglou and
Stathaki, SynCo: Synthetic Hard Negatives for Contrastive Visual Representation Learning, 2024,
arXiv:2410.02401).

SynCo builds six kinds of synthetic negatives from each query's N hardest negatives (its "types" 1-6).
Types 1 (the query mixed into a hard negative, alpha ~ U(0, 0.5)) and 3 (two hard negatives mixed) are
MoCHi's query and pair mixtures (:mod:`hardmix.strategies.mochi`, whose ``beta_max`` and ``n_pair`` give
them; SynCo's type 3 draws its two negatives with replacement where MoCHi draws distinct pairs). This
strategy adds the other four. For a query q (detached: q~) and a hard negative n chosen uniformly, with
replacement, among its N hardest valid negatives (MoCHi's selection, :func:`~hardmix.ops.mixing.hardest`),
in this fixed order of columns:

    extrapolated  s = normalize(n + b (n - q~)),           b ~ U(0, extrapolation_max)
    noise         s = normalize(n + sigma e),               e ~ N(0, I_D)
    perturbed     s = normalize(n + delta grad_n(q~ . n)) = normalize(n + delta q~)
    adversarial   s = normalize(n + eta sign(grad_n(q~ . n))) = normalize(n + eta sign(q~))

Every point is L2-normalized and detached; its cosine q . s joins q's negatives and, divided by tau by the
loss, the denominator of q's InfoNCE term, like MoCHi's. The extrapolated point lies on the line from q
through n, past n, away from q (the "extrapolation past a hard negative away from the query"). The perturbed
point moves n along the gradient of its similarity to the query, the direction of q; the adversarial point
takes a signed (FGSM) step of size eta per coordinate that increases that similarity, and so the anchor's
loss: the gradient of the anchor's InfoNCE loss with respect to a negative n is p_n q / tau (p_n its softmax
weight), of the same direction and the same signs as q.

Where the equations and defaults come from (read, not copied):

- The paper (arXiv:2410.02401) describes the six strategies in its method section; the stored text I
  could read stopped before the equations, so each equation above was read from the official code,
  ``giakoumoglou/synco``, file ``synco/builder.py`` (its last version, commit c2146371), whose
  docstrings state them:
  ``hard_negatives_extrapolation`` ("s = n + b * (n - q)"; the code writes it q + beta (n - q) with
  beta ~ U(1, 1.5), i.e. b = beta - 1 ~ U(0, 0.5)), ``hard_negatives_noise_inject`` ("s = n + N(0, var)",
  noise ``randn * sigma``), ``hard_negatives_autograd_1`` ("s = n + d * grad(q, n)", the gradient of
  q . n with respect to n by autograd: exactly q) and ``hard_negatives_autograd_2``
  ("s = n + e * sgn(grad(q, n))"). Earlier versions of that file estimated the same gradient with a
  random central difference of step 1e-5 (``hard_negatives_grad``); hardmix uses the closed form q.
- Defaults, from ``main_synco.py`` and the README's ImageNet command of the same repository: N = 1024
  (``--n-hard``), 256 extrapolated (``--n2``), 64 each of noise, perturbed and adversarial (``--n4``,
  ``--n5``, ``--n6``), sigma = 0.01 (``--sigma``; the builder's docstring says 0.1, an older default),
  delta = 0.01 (``--delta``), eta = 0.01 (``--eta``), b up to 0.5 (``hard_beta = 1.5`` in the builder),
  10 warm-up epochs without synthetic negatives (``--warmup-epochs``; here ``warmup_steps``, 0 by
  default like ``mochi``'s, hardmix's choice).
- hardmix's choices: the hard negatives are each query's valid ones only (``ctx.negative_mask``: never
  its positive, an excluded queue entry or a negative another strategy excluded), chosen in fp32 and
  listed in ascending index (MoCHi's :func:`~hardmix.ops.mixing.hardest`); the counts need not be at most N
  (the picks are with replacement; the official code asserts N >= every count); the random numbers come from
  ``ctx.generator`` in the order of :func:`synco_draws`; the same definition serves in-batch anchors
  (the candidates are the batch's positives) and queues.

Composable with ``mochi``: ``strategies: [mochi, synco]`` appends both strategies' columns (MoCHi's
types 1 and 3, then these four), which is SynCo's full set of six kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.ops.mixing import check_enough_negatives, hardest, synthetic_stats
from hardmix.strategies.base import ContrastContext, Stats, Strategy, arg, register_strategy, set_field
from hardmix.utils.errors import check_int, check_number

SYNTHETIC_KINDS = ("extrapolated", "noise", "perturbed", "adversarial")  # the order of the columns


class SyncoDraws(NamedTuple):
    """SynCo's random numbers for a batch; positions index each query's N hardest negatives, as listed by
    :func:`~hardmix.ops.mixing.hardest` (ascending negative index)."""

    extrapolated: Tensor  # (B, n_extrapolated) int64 position of the extrapolated negative
    extrapolation: Tensor  # (B, n_extrapolated) b ~ U(0, extrapolation_max)
    noised: Tensor  # (B, n_noise) int64 position of the noised negative
    noise: Tensor  # (B, n_noise, D) e ~ N(0, I), unscaled (sigma multiplies it)
    perturbed: Tensor  # (B, n_perturbed) int64 position of the perturbed negative
    adversarial: Tensor  # (B, n_adversarial) int64 position of the adversarial negative


def synco_draws(
    batch: int,
    dim: int,
    n_hard: int,
    counts: tuple[int, int, int, int],
    extrapolation_max: float,
    generator: torch.Generator | None,
    device: torch.device,
    dtype: torch.dtype,
) -> SyncoDraws:
    """SynCo's random draws, in a fixed order from ``generator``: for each kind of :data:`SYNTHETIC_KINDS` in
    turn, its positions (uniform among the N, with replacement) and then its own numbers (b for extrapolated,
    e for noise). A kind with count 0 draws nothing.

    Args:
        batch: B. dim: D. n_hard: N.
        counts: (n_extrapolated, n_noise, n_perturbed, n_adversarial).
        extrapolation_max: the upper bound of b.

    Example:
        >>> d = synco_draws(2, 4, 5, (3, 1, 0, 2), 0.5, torch.Generator().manual_seed(0),
        ...                 torch.device("cpu"), torch.float32)
        >>> d.extrapolated.shape, d.noise.shape, d.perturbed.shape, int(d.adversarial.max()) < 5
        (torch.Size([2, 3]), torch.Size([2, 1, 4]), torch.Size([2, 0]), True)
    """
    n_ext, n_noise, n_pert, n_adv = counts

    def positions(n: int) -> Tensor:
        if n == 0:
            return torch.empty(batch, 0, dtype=torch.long, device=device)
        return torch.randint(n_hard, (batch, n), generator=generator, device=device)

    extrapolated = positions(n_ext)
    if n_ext > 0:
        extrapolation = extrapolation_max * torch.rand(batch, n_ext, generator=generator, device=device,
                                                       dtype=dtype)
    else:
        extrapolation = torch.empty(batch, 0, device=device, dtype=dtype)
    noised = positions(n_noise)
    if n_noise > 0:
        noise = torch.randn(batch, n_noise, dim, generator=generator, device=device, dtype=dtype)
    else:
        noise = torch.empty(batch, 0, dim, device=device, dtype=dtype)
    perturbed = positions(n_pert)
    adversarial = positions(n_adv)
    return SyncoDraws(extrapolated, extrapolation, noised, noise, perturbed, adversarial)


def synco_synthesize(
    query: Tensor, negatives: Tensor, hard: Tensor, draws: SyncoDraws, sigma: float, delta: float, eta: float
) -> Tensor:
    """The synthetic points of the module docstring, built as vectors: (B, M, D), unit norm, detached.

    Args:
        query: (B, D) unit queries q (used detached: q~).
        negatives: (K, D) unit negatives (the queue, or the in-batch candidates).
        hard: (B, N) each query's hardest negatives (indices into ``negatives``), see
            :func:`~hardmix.ops.mixing.hardest`.
        draws: the positions among ``hard`` and the numbers, see :func:`synco_draws`.
        sigma, delta, eta: the scales of the noise, perturbed and adversarial kinds.

    Returns:
        (B, M, D), M the sum of the counts: extrapolated, noise, perturbed, adversarial points in turn.

    Example:
        >>> q, queue = F.normalize(torch.randn(2, 4), dim=1), F.normalize(torch.randn(9, 4), dim=1)
        >>> draws = synco_draws(2, 4, 3, (2, 1, 1, 1), 0.5, None, q.device, q.dtype)
        >>> points = synco_synthesize(q, queue, hardest(q @ queue.T, 3), draws, 0.01, 0.01, 0.01)
        >>> points.shape, bool(torch.allclose(points.norm(dim=-1), torch.ones(2, 5)))
        (torch.Size([2, 5, 4]), True)
    """
    q, negatives = query.detach(), negatives.detach()

    def chosen(positions: Tensor) -> Tensor:
        return negatives[hard.gather(1, positions)]  # (B, n, D)

    q3 = q.unsqueeze(1)  # (B, 1, D)
    n_e = chosen(draws.extrapolated)
    extrapolated = n_e + draws.extrapolation.unsqueeze(2) * (n_e - q3)  # past n, away from q
    noised = chosen(draws.noised) + sigma * draws.noise
    perturbed = chosen(draws.perturbed) + delta * q3  # grad_n (q . n) = q
    adversarial = chosen(draws.adversarial) + eta * torch.sign(q3)  # sign(grad_n (q . n)) = sign(q)
    points = torch.cat([extrapolated, noised.to(extrapolated.dtype), perturbed, adversarial], dim=1)
    return F.normalize(points, dim=-1).detach()


@register_strategy
@dataclass(frozen=True)
class SynCo(Strategy):
    """SynCo's extra synthetic hard negatives: extrapolated, noise-injected, perturbed, adversarial.

    Args:
        n_hard: N, the hardest negatives per query the points are built from. Official code: 1024.
        n_extrapolated: extrapolated points per query (0: none). Official code (``--n2``): 256.
        extrapolation_max: upper bound of b in n + b (n - q), b ~ U(0, extrapolation_max). Official code:
            0.5 (its beta = 1 + b ~ U(1, 1.5)).
        n_noise: noise-injected points per query. Official code (``--n4``): 64.
        sigma: standard deviation of the Gaussian noise. Official code (``--sigma``): 0.01.
        n_perturbed: perturbed points per query. Official code (``--n5``): 64.
        delta: step along the gradient of the similarity (q). Official code (``--delta``): 0.01.
        n_adversarial: adversarial points per query. Official code (``--n6``): 64.
        eta: size of the signed step. Official code (``--eta``): 0.01.

    The official code waits 10 epochs before adding the points: ``warmup_epochs`` in the spec
    (:mod:`hardmix.strategies.schedule`).

    Example:
        >>> SynCo(n_hard=8, n_extrapolated=4, n_noise=2, n_perturbed=2, n_adversarial=0).counts
        (4, 2, 2, 0)
        >>> SynCo(sigma=-1.0)
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.StrategyArgumentError: sigma: must be in (0, inf), got -1.0
    """

    name = "synco"
    paper = (
        "Giakoumoglou and Stathaki, SynCo: Synthetic Hard Negatives for Contrastive Visual Representation "
        "Learning, 2024 (arXiv:2410.02401; official code giakoumoglou/synco)"
    )
    negatives_argument = "n_hard"
    small = {"n_hard": 4, "n_extrapolated": 2, "n_noise": 1, "n_perturbed": 1, "n_adversarial": 1}
    n_hard: int = arg(1024, "N: hardest negatives per query (official code --n-hard: 1024)")
    n_extrapolated: int = arg(256, "points n + b (n - q) per query (official code --n2: 256)")
    extrapolation_max: float = arg(0.5, "b ~ U(0, extrapolation_max) (official code: beta in (1, 1.5))")
    n_noise: int = arg(64, "points n + sigma e per query (official code --n4: 64)")
    sigma: float = arg(0.01, "noise standard deviation (official code --sigma: 0.01)")
    n_perturbed: int = arg(64, "points n + delta q per query (official code --n5: 64)")
    delta: float = arg(0.01, "perturbation step along grad_n(q.n) = q (official code --delta: 0.01)")
    n_adversarial: int = arg(64, "points n + eta sign(q) per query (official code --n6: 64)")
    eta: float = arg(0.01, "signed step size (official code --eta: 0.01)")

    def __post_init__(self) -> None:
        check_int("n_hard", self.n_hard, 1)
        for name in ("n_extrapolated", "n_noise", "n_perturbed", "n_adversarial"):
            check_int(name, getattr(self, name))
        for name in ("extrapolation_max", "sigma", "delta", "eta"):
            set_field(self, name, check_number(name, getattr(self, name), 0.0, float("inf")))

    @property
    def required_negatives(self) -> int:
        return self.n_hard

    @property
    def counts(self) -> tuple[int, int, int, int]:
        """The points per query of each kind, in the order of :data:`SYNTHETIC_KINDS`."""
        return (self.n_extrapolated, self.n_noise, self.n_perturbed, self.n_adversarial)

    def extra_cosines(self, ctx: ContrastContext) -> tuple[Tensor, Stats] | None:
        """Select, draw, build the (B, M, D) points, take their cosines q . SG(s): (B, M), the kinds
        in the order of :data:`SYNTHETIC_KINDS`."""
        if sum(self.counts) == 0:
            return None
        check_enough_negatives(self.n_hard, ctx.fewest_negatives(), ctx.mode)
        hard = hardest(ctx.selection_similarities(), self.n_hard, ctx.negative_mask)  # (B, N)
        batch, dim = ctx.anchors.shape
        draws = synco_draws(batch, dim, self.n_hard, self.counts, self.extrapolation_max, ctx.generator,
                            ctx.anchors.device, ctx.anchors.dtype)
        points = synco_synthesize(ctx.anchors, ctx.candidates, hard, draws, self.sigma, self.delta, self.eta)
        cosines = (points @ ctx.anchors.unsqueeze(2)).squeeze(2)  # (B, M)
        return cosines, synthetic_stats(cosines, ctx.positive_cosines)
