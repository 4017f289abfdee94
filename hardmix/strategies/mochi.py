"""The ``mochi`` strategy: synthetic hard negatives mixed from each query's hardest negatives
(Kalantidis et al., Hard Negative Mixing for Contrastive Learning, NeurIPS 2020).

For query q with its N hardest negatives n_1..n_N (the N highest q.n among its valid negatives), the
paper's Sec. 4.1, Eq. 3 (s pair mixtures) and Sec. 4.2, Eq. 4 (s' query mixtures):

    h_k  = normalize(alpha_k n_a + (1 - alpha_k) n_b),   a != b,  alpha_k ~ U(0, 1),        k = 1..s
    h'_k = normalize(beta_k q~ + (1 - beta_k) n_c),                beta_k ~ U(0, beta_max),  k = 1..s'

with q~ the detached query; every synthetic point is detached, and its logit q.h / tau joins the
denominator of q's InfoNCE term. The pairs (a, b) of a query are distinct (a uniform s-subset of the
N(N-1)/2 pairs), c is uniform among the N.

Below: the random draws (:func:`mochi_draws`, the one definition that both paths consume, so that for
one generator state they mix the same negatives with the same weights), the selection
(:func:`hardest`), the points (:func:`synthesize`), and :meth:`MoCHi.extra_logits`, which builds the
(B, s + s', D) points and takes their logits with a matrix product. :meth:`MoCHi.fast_logits` computes the
same logits in closed form, as weighted sums of entries of the queue logits (:mod:`hardmix.kernels`);
the tests check it against this file.

**Schedule** (hardmix's, the paper leaves it open: it uses fixed s and s' after a warm-up of 10 epochs).
With ``schedule`` ``"linear"`` or ``"cosine"`` the numbers of synthetic points ramp up after the warm-up:
at optimizer step t, with w = ``warmup_steps`` and R = ``ramp_steps``,

    p(t) = clamp((t - w) / R, 0, 1),   r(t) = p (linear)  or  (1 - cos(pi p)) / 2 (cosine),
    s(t) = floor(r(t) s),   s'(t) = floor(r(t) s'),

so a step t <= w adds no point (0 at t = w), and from t = w + R on every step adds the configured s and s'
(beta_max stays fixed). :meth:`MoCHi.counts_at` gives (s(t), s'(t)). A step whose counts are both 0 adds
no column, like the warm-up. ``"constant"`` (the default) is the paper's: s and s' from step w on, by the
same code path as without a schedule.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.errors import StrategyArgumentError
from hardmix.kernels.gathered_logits import GatheredLogits
from hardmix.kernels.mochi_logits import mochi_logits
from hardmix.kernels.pair_sampling import draw_distinct_pairs
from hardmix.kernels.row_topk import hardest_negatives
from hardmix.strategies.base import ContrastContext, ParamInfo, Strategy, register_strategy
from hardmix.utils.counting import count_true


class MochiDraws(NamedTuple):
    """MoCHi's random numbers for a batch; positions index each query's N hardest negatives, as listed by
    :func:`hardest` (ascending negative index)."""

    first: Tensor  # (B, s) position of n_a (int32 or int64)
    second: Tensor  # (B, s) position of n_b, first < second
    alpha: Tensor  # (B, s) weight of n_a, ~ U(0, 1)
    pick: Tensor  # (B, s') position of n_c, uniform
    beta: Tensor  # (B, s') weight of the query, ~ U(0, beta_max)


def mochi_draws(
    batch: int,
    n_hard: int,
    n_pair: int,
    n_query: int,
    beta_max: float,
    generator: torch.Generator | None,
    device: torch.device,
    dtype: torch.dtype,
) -> MochiDraws:
    """MoCHi's random draws, in a fixed order from ``generator``: the pairs, alpha, the picks, beta.

    The pairs come from :func:`hardmix.kernels.pair_sampling.draw_distinct_pairs` (a uniform s-subset of
    the distinct pairs a < b of range(N), per row).

    Example:
        >>> draws = mochi_draws(2, 4, 3, 1, 0.5, torch.Generator().manual_seed(0), torch.device("cpu"),
        ...                     torch.float32)
        >>> draws.first.shape, draws.pick.shape, bool((draws.first < draws.second).all())
        (torch.Size([2, 3]), torch.Size([2, 1]), True)
    """
    if n_pair > 0:
        first, second = draw_distinct_pairs(batch, n_hard, n_pair, generator, device)
        alpha = torch.rand(batch, n_pair, generator=generator, device=device, dtype=dtype)
    else:
        first = second = torch.empty(batch, 0, dtype=torch.long, device=device)
        alpha = torch.empty(batch, 0, device=device, dtype=dtype)
    if n_query > 0:
        pick = torch.randint(n_hard, (batch, n_query), generator=generator, device=device)
        beta = beta_max * torch.rand(batch, n_query, generator=generator, device=device, dtype=dtype)
    else:
        pick = torch.empty(batch, 0, dtype=torch.long, device=device)
        beta = torch.empty(batch, 0, device=device, dtype=dtype)
    return MochiDraws(first, second, alpha, pick, beta)


def hardest(similarities: Tensor, n_hard: int, valid: Tensor | None = None) -> Tensor:
    """(B, N) indices of each query's ``n_hard`` most similar valid negatives, ascending, chosen in fp32.

    Args:
        similarities: (B, K) query-negative similarities (any positive scale).
        n_hard: N.
        valid: optional (B, K) bool mask of the negatives each query may use.

    Example:
        >>> hardest(torch.tensor([[0.1, 0.9, 0.5, 0.7]]), 2)
        tensor([[1, 3]])
    """
    sims = similarities.detach().float()
    if valid is not None:
        sims = sims.masked_fill(~valid, float("-inf"))
    return sims.topk(n_hard, dim=1).indices.sort(dim=1).values


def synthesize(query: Tensor, negatives: Tensor, hard: Tensor, draws: MochiDraws) -> Tensor:
    """The synthetic points of Eq. 3 and 4, built as vectors: (B, s + s', D), unit norm, detached.

    Args:
        query: (B, D) unit queries q (used detached: q~).
        negatives: (K, D) unit negatives.
        hard: (B, N) each query's hardest negatives (indices into ``negatives``), see :func:`hardest`.
        draws: the positions among ``hard`` and the weights, see :func:`mochi_draws`.

    Returns:
        (B, s + s', D): the s pair mixtures h_k, then the s' query mixtures h'_k.

    Example:
        >>> q, queue = F.normalize(torch.randn(2, 4), dim=1), F.normalize(torch.randn(9, 4), dim=1)
        >>> draws = mochi_draws(2, 3, 3, 2, 0.5, None, q.device, q.dtype)
        >>> points = synthesize(q, queue, hardest(q @ queue.T, 3), draws)
        >>> points.shape, bool(torch.allclose(points.norm(dim=-1), torch.ones(2, 5)))
        (torch.Size([2, 5, 4]), True)
    """
    query, negatives = query.detach(), negatives.detach()
    n_a = negatives[hard.gather(1, draws.first.long())]  # (B, s, D)
    n_b = negatives[hard.gather(1, draws.second.long())]  # (B, s, D)
    n_c = negatives[hard.gather(1, draws.pick.long())]  # (B, s', D)
    alpha, beta = draws.alpha.unsqueeze(2), draws.beta.unsqueeze(2)
    pair_mixtures = F.normalize(alpha * n_a + (1.0 - alpha) * n_b, dim=-1)  # h_k, Eq. 3
    query_mixtures = F.normalize(beta * query.unsqueeze(1) + (1.0 - beta) * n_c, dim=-1)  # h'_k, Eq. 4
    return torch.cat([pair_mixtures, query_mixtures.to(pair_mixtures.dtype)], dim=1)


@torch.no_grad()
def mochi_synthesize(
    query: Tensor,
    negatives: Tensor,
    n_hard: int,
    n_pair: int,
    n_query: int,
    beta_max: float = 0.5,
    generator: torch.Generator | None = None,
    valid: Tensor | None = None,
    similarities: Tensor | None = None,
) -> Tensor:
    """MoCHi's synthetic hard negatives (Kalantidis et al., NeurIPS 2020, Sec. 4.1 and 4.2).

    For each query q_b: take its N = ``n_hard`` most similar negatives (fp32 selection); s = ``n_pair``
    points h = normalize(alpha n_a + (1 - alpha) n_b) over distinct pairs a != b of them, alpha ~ U(0, 1)
    (Eq. 3); s' = ``n_query`` points h' = normalize(beta q + (1 - beta) n_c), c uniform among the N,
    beta ~ U(0, beta_max) with beta_max <= 0.5 (Eq. 4). All points are L2-normalized and detached.

    Args:
        query: (B, D) unit-norm queries.
        negatives: (K, D) unit-norm negatives (the queue).
        n_hard: N.
        n_pair: s.
        n_query: s'.
        beta_max: upper bound of the query weight, in (0, 0.5].
        generator: optional torch.Generator (same seed, same output, the same points as
            :meth:`MoCHi.extra_logits` builds).
        valid: optional (B, K) bool mask of the negatives each query may use (e.g. not its own sample).
        similarities: optional (B, K) precomputed query-negative similarities (any positive scale).

    Returns:
        (B, n_pair + n_query, D) unit-norm synthetic negatives, pair mixtures first.

    Example:
        >>> q = torch.nn.functional.normalize(torch.randn(4, 8), dim=1)
        >>> queue = torch.nn.functional.normalize(torch.randn(32, 8), dim=1)
        >>> mochi_synthesize(q, queue, n_hard=8, n_pair=6, n_query=2).shape
        torch.Size([4, 8, 8])
    """
    if query.dim() != 2 or negatives.dim() != 2 or query.shape[1] != negatives.shape[1]:
        raise ValueError(
            f"query (B, D) and negatives (K, D) expected, got {tuple(query.shape)}, {tuple(negatives.shape)}"
        )
    available = negatives.shape[0]
    if valid is not None:
        available = int(count_true(valid, dim=1).min()) if valid.numel() else 0
    _check_mochi_args(n_hard, n_pair, n_query, beta_max, available)
    if similarities is None:
        # fp32 even under autocast (which would run this product in bf16/fp16 and tie near-equal negatives).
        with torch.autocast(query.device.type, enabled=False):
            similarities = query.float() @ negatives.float().T
    hard = hardest(similarities, n_hard, valid)
    batch = query.shape[0]
    draws = mochi_draws(batch, n_hard, n_pair, n_query, beta_max, generator, query.device, query.dtype)
    return synthesize(query, negatives, hard, draws)


SCHEDULES = ("constant", "linear", "cosine")  # of the synthetic counts, see the module docstring


@register_strategy
class MoCHi(Strategy):
    """Hard negative mixing: s pair mixtures and s' query mixtures of each query's N hardest negatives.

    Args:
        n_hard: N, the hardest negatives per query. Paper (ImageNet-100, K = 16384): 1024.
        n_pair: s, mixtures of two distinct hard negatives. Paper: 1024 (ImageNet-100).
        n_query: s', mixtures of the query with one hard negative. Paper: 128 (ImageNet-100), 256 (IN-1K).
        beta_max: upper bound of the query's weight, <= 0.5 (Sec. 4.2). Paper: 0.5.
        warmup_steps: optimizer steps before mixing starts (the paper starts after 10 epochs for
            ImageNet-100, Sec. 5).
        schedule: ``"constant"`` (the paper's fixed s and s'), ``"linear"`` or ``"cosine"``: s and s'
            ramp from 0 to their values over ``ramp_steps`` steps after the warm-up (module docstring;
            hardmix's, the paper leaves the schedule open).
        ramp_steps: R, the length of the ramp (> 0 with a ramp, 0 with ``"constant"``).

    Example:
        >>> try:
        ...     MoCHi(n_hard=4, n_pair=7)
        ... except StrategyArgumentError as error:
        ...     print(error)
        n_pair: 7 mixtures of distinct pairs need as many pairs among n_hard=4 (6 exist)
    """

    name = "mochi"
    paper = (
        "Kalantidis et al., Hard Negative Mixing for Contrastive Learning, NeurIPS 2020 (arXiv:2010.01028)"
    )
    params = (
        ParamInfo("n_hard", 1024, "N: hardest negatives per query (paper: 1024)"),
        ParamInfo("n_pair", 1024, "s: mixtures of two distinct hard negatives (paper: 1024 on ImageNet-100)"),
        ParamInfo(
            "n_query", 128, "s': mixtures of the query with a hard negative (paper: 128 on ImageNet-100)"
        ),
        ParamInfo("beta_max", 0.5, "query weight beta ~ U(0, beta_max), beta_max <= 0.5 (paper: 0.5)"),
        ParamInfo("warmup_steps", 0, "optimizer steps of plain InfoNCE before mixing starts"),
        ParamInfo("schedule", "constant", "'constant' (paper), 'linear' or 'cosine' ramp of s and s' after "
                                          "the warm-up (hardmix's; the paper leaves it open)"),
        ParamInfo("ramp_steps", 0, "optimizer steps of the ramp from 0 to s and s' (hardmix's)"),
    )
    needs_anchor_logits = True  # the fast path gathers its logits from the anchor-only queue logits

    def __init__(
        self,
        n_hard: int = 1024,
        n_pair: int = 1024,
        n_query: int = 128,
        beta_max: float = 0.5,
        warmup_steps: int = 0,
        schedule: str = "constant",
        ramp_steps: int = 0,
    ) -> None:
        if schedule not in SCHEDULES:
            raise StrategyArgumentError(
                "schedule", f"must be 'constant', 'linear' or 'cosine', got {schedule!r}"
            )
        if isinstance(ramp_steps, bool) or not isinstance(ramp_steps, int) or ramp_steps < 0:
            raise StrategyArgumentError("ramp_steps", f"must be a non-negative integer, got {ramp_steps!r}")
        if schedule == "constant" and ramp_steps > 0:
            raise StrategyArgumentError("ramp_steps", "a ramp needs schedule 'linear' or 'cosine'")
        if schedule != "constant" and ramp_steps == 0:
            raise StrategyArgumentError("ramp_steps", f"schedule {schedule!r} needs ramp_steps > 0")
        if isinstance(beta_max, bool) or not isinstance(beta_max, (int, float)):
            raise StrategyArgumentError("beta_max", f"must be a number in (0, 0.5], got {beta_max!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise StrategyArgumentError(
                "warmup_steps", f"must be a non-negative integer, got {warmup_steps!r}"
            )
        for arg, value in (("n_hard", n_hard), ("n_pair", n_pair), ("n_query", n_query)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise StrategyArgumentError(arg, f"must be an integer, got {value!r}")
        _check_mochi_args(n_hard, n_pair, n_query, float(beta_max), available=n_hard)
        self.n_hard = n_hard
        self.n_pair = n_pair
        self.n_query = n_query
        self.beta_max = float(beta_max)
        self.warmup_steps = warmup_steps
        self.schedule = schedule
        self.ramp_steps = ramp_steps
        self._last: tuple[Tensor, Tensor, float] | None = None
        self._ramp: float | None = None  # r(t) of the last call, scheduled runs only

    negatives_argument = "n_hard"

    def ramp_at(self, step: int) -> float:
        """r(t) of the module docstring: the fraction of s and s' that step ``step`` adds (0 in the
        warm-up; 1 from ``warmup_steps + ramp_steps`` on, and always 1 after the warm-up when constant).

        Example:
            >>> m = MoCHi(n_hard=8, n_pair=10, n_query=4, warmup_steps=2, schedule="linear", ramp_steps=4)
            >>> [m.ramp_at(t) for t in (0, 2, 3, 6, 9)], m.counts_at(3), m.counts_at(5)
            ([0.0, 0.0, 0.25, 1.0, 1.0], (2, 1), (7, 3))
        """
        if step < self.warmup_steps:
            return 0.0
        if self.schedule == "constant":
            return 1.0
        progress = min(max((step - self.warmup_steps) / self.ramp_steps, 0.0), 1.0)
        if self.schedule == "linear":
            return progress
        return 0.5 * (1.0 - math.cos(math.pi * progress))

    def counts_at(self, step: int) -> tuple[int, int]:
        """(s(t), s'(t)): the pair and query mixtures step ``step`` adds (``(0, 0)`` in the warm-up)."""
        if self.schedule == "constant":
            return (0, 0) if step < self.warmup_steps else (self.n_pair, self.n_query)
        r = self.ramp_at(step)
        # floor(r s), robust to r's rounding (the cosine's r(1/2) is 0.49999999999999994).
        return math.floor(r * self.n_pair + 1e-9), math.floor(r * self.n_query + 1e-9)

    @property
    def required_negatives(self) -> int:
        return self.n_hard

    def extra_logits(self, ctx: ContrastContext) -> Tensor | None:
        """The plain implementation: select, draw, build the (B, s + s', D) points, take their logits
        q . SG(h) / tau with a matrix product. (B, s + s'), pair mixtures first; None before the warm-up
        ends."""
        if not self._mixing(ctx):
            return None
        self._check_available(int(count_true(ctx.negative_mask, dim=1).min()), ctx)
        hard = hardest(selection_similarities(ctx), self.n_hard, ctx.negative_mask)  # (B, N)
        draws = self._draws(ctx, hard.shape[0])
        points = synthesize(ctx.anchors, ctx.candidates, hard, draws)  # (B, s + s', D), detached
        logits = (points @ ctx.anchors.unsqueeze(2)).squeeze(2) / ctx.temperature  # (B, s + s')
        self._last = (logits.detach(), ctx.positive_logits.detach(), ctx.temperature)
        return logits

    def fast_logits(self, ctx: ContrastContext) -> Tensor | GatheredLogits | None:
        """:meth:`extra_logits` in closed form (:func:`hardmix.kernels.mochi_logits.mochi_logits`): the
        same selection and draws, no (B, s + s', D) points."""
        if ctx.shortcuts is None:
            return self.extra_logits(ctx)
        if not self._mixing(ctx):
            return None
        self._check_available(ctx.shortcuts.fewest_negatives(ctx.negative_mask), ctx)
        similarities = selection_similarities(ctx)
        # Cosines from the selection values: they are the logits (q.n / tau) unless recomputed in fp32.
        to_cosine = ctx.temperature if similarities is ctx.logits else 1.0
        # Queue mode: the logits are -inf at the excluded entries already, which the selection then never
        # picks (at least n_hard valid ones exist): no (B, K) masking pass.
        valid = None if ctx.shortcuts.mask_kind == "all" else ctx.negative_mask
        if ctx.mode == "queue" and similarities is ctx.logits:
            valid = None
        with torch.no_grad():
            hard = hardest_negatives(similarities, self.n_hard, valid)  # the same set, order as hardest()
            draws = self._draws(ctx, hard.shape[0])
        logits = mochi_logits(
            ctx.shortcuts.anchor_logits,
            ctx.anchors,
            ctx.candidates,
            hard,
            tuple(draws),
            similarities.detach(),
            ctx.temperature,
            to_cosine=to_cosine,
        )
        self._last = (logits.values, ctx.positive_logits.detach(), ctx.temperature)
        return logits

    def _mixing(self, ctx: ContrastContext) -> bool:
        """Whether this call mixes (after the warm-up, with points to build); if not, forget the last
        call's diagnostics."""
        if self.schedule != "constant":
            self._ramp = self.ramp_at(ctx.step)
            if sum(self.counts_at(ctx.step)) == 0:
                self._last = None
                return False
            return True
        if ctx.step < self.warmup_steps or self.n_pair + self.n_query == 0:
            self._last = None
            return False
        return True

    def _check_available(self, available: int, ctx: ContrastContext) -> None:
        if self.n_hard > available:
            raise StrategyArgumentError(
                "n_hard",
                f"{self.n_hard} hardest negatives requested but only {available} are available "
                f"({ctx.mode} negatives)",
            )

    def _draws(self, ctx: ContrastContext, batch: int) -> MochiDraws:
        n_pair, n_query = self.n_pair, self.n_query
        if self.schedule != "constant":
            n_pair, n_query = self.counts_at(ctx.step)
        return mochi_draws(
            batch,
            self.n_hard,
            n_pair,
            n_query,
            self.beta_max,
            ctx.generator,
            ctx.anchors.device,
            ctx.anchors.dtype,
        )

    def diagnostics(self) -> dict[str, float]:
        """Mean cosine of the queries to their synthetic negatives, and the fraction of synthetic
        negatives more similar to the query than its positive (from the last call); with a schedule, also
        the ramp r(t) of the last call (``ramp``, at every step, 0 in the warm-up)."""
        ramp = getattr(self, "_ramp", None)
        if getattr(self, "_last", None) is None:
            return {} if ramp is None else {"ramp": ramp}
        logits, positive, tau = self._last
        out = {
            "synthetic_sim": float(logits.float().mean()) * tau,
            "synthetic_harder_than_positive": float((logits > positive.unsqueeze(1)).float().mean()),
        }
        if ramp is not None:
            out["ramp"] = ramp
        return out


def selection_similarities(ctx: ContrastContext) -> Tensor:
    """The (B, K) values that rank each query's negatives: its logits q.n / tau when they are fp32 or
    fp64, else q.n recomputed in fp32 (under autocast: bf16 ties would change the selection)."""
    if ctx.logits.dtype in (torch.float32, torch.float64):
        return ctx.logits
    with torch.autocast(ctx.anchors.device.type, enabled=False), torch.no_grad():
        return ctx.anchors.detach().float() @ ctx.candidates.detach().float().T


def _check_mochi_args(n_hard: int, n_pair: int, n_query: int, beta_max: float, available: int) -> None:
    if not isinstance(n_hard, int) or n_hard < 1:
        raise StrategyArgumentError("n_hard", f"must be a positive integer, got {n_hard!r}")
    if n_hard > available:
        raise StrategyArgumentError(
            "n_hard", f"{n_hard} hardest negatives requested but only {available} are available"
        )
    if not isinstance(n_pair, int) or n_pair < 0:
        raise StrategyArgumentError("n_pair", f"must be a non-negative integer, got {n_pair!r}")
    if n_pair > n_hard * (n_hard - 1) // 2:
        raise StrategyArgumentError(
            "n_pair",
            f"{n_pair} mixtures of distinct pairs need as many pairs among n_hard={n_hard} "
            f"({n_hard * (n_hard - 1) // 2} exist)",
        )
    if not isinstance(n_query, int) or n_query < 0:
        raise StrategyArgumentError("n_query", f"must be a non-negative integer, got {n_query!r}")
    if not 0.0 < beta_max <= 0.5:
        raise StrategyArgumentError(
            "beta_max", f"must be in (0, 0.5] (the query weighs less than the negative), got {beta_max}"
        )

