"""The ``mochi`` strategy: synthetic hard negatives mixed from each query's hardest negatives
(Kalantidis et al., Hard Negative Mixing for Contrastive Learning, NeurIPS 2020).

For query q with hardest negatives n_1..n_N (Sec. 4.1, Eq. 3 and Sec. 4.2, Eq. 4):

    h_k  = normalize(alpha_k n_a + (1 - alpha_k) n_b),   a != b,  alpha_k ~ U(0, 1),      k = 1..s
    h'_k = normalize(beta_k q~ + (1 - beta_k) n_c),                beta_k ~ U(0, beta_max), k = 1..s'

with q~ the detached query; the logits q.h / tau and q.h' / tau join the denominator.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hardmix.errors import StrategyArgumentError
from hardmix.losses.gathered_logits import GatheredLogits
from hardmix.mixing import _check_mochi_args, _mochi_draws, hardest_negatives, mochi_logits
from hardmix.strategies.base import ContrastContext, ParamInfo, Strategy, register_strategy
from hardmix.utils.counting import count_true


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

    Example:
        >>> try:
        ...     MoCHi(n_hard=4, n_pair=7)
        ... except ValueError as e:
        ...     print(e)
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
    )
    needs_anchor_logits = True

    def __init__(
        self,
        n_hard: int = 1024,
        n_pair: int = 1024,
        n_query: int = 128,
        beta_max: float = 0.5,
        warmup_steps: int = 0,
    ) -> None:
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
        self._last: tuple[Tensor, Tensor, float] | None = None

    negatives_argument = "n_hard"

    @property
    def required_negatives(self) -> int:
        return self.n_hard

    def extra_logits(self, ctx: ContrastContext) -> GatheredLogits | None:
        if ctx.step < self.warmup_steps or self.n_pair + self.n_query == 0:
            self._last = None
            return None
        if ctx.mask_kind == "all":
            available = ctx.negative_mask.shape[1]
        elif ctx.negative_counts is not None:
            available = int(ctx.negative_counts.min())
        else:
            available = int(count_true(ctx.negative_mask, dim=1).min())
        if self.n_hard > available:
            raise StrategyArgumentError(
                "n_hard",
                f"{self.n_hard} hardest negatives requested but only {available} are available "
                f"({ctx.mode} negatives)",
            )
        # Select in fp32 even under autocast: reuse the logits when they are fp32 (or fp64) already.
        # Queue mode: the logits are -inf at the excluded entries already, which the selection then never
        # picks (at least n_hard valid ones exist): no (B, K) masking pass.
        valid = None if ctx.mask_kind == "all" else ctx.negative_mask
        if ctx.logits.dtype in (torch.float32, torch.float64):
            similarities, to_cosine = ctx.logits.detach(), ctx.temperature
            if ctx.mode == "queue":
                valid = None
        else:
            with torch.autocast(ctx.anchors.device.type, enabled=False), torch.no_grad():
                similarities = ctx.anchors.detach().float() @ ctx.candidates.detach().float().T
            to_cosine = 1.0
        with torch.no_grad():
            hard = hardest_negatives(similarities, self.n_hard, valid)
            draws = _mochi_draws(
                hard.shape[0],
                self.n_hard,
                self.n_pair,
                self.n_query,
                self.beta_max,
                ctx.generator,
                ctx.anchors.device,
                ctx.anchors.dtype,
            )
        # q . SG(h) / tau in closed form (see hardmix.mixing.mochi_logits): equal to building the s + s'
        # points (B, s + s', D) and a batched product, without the gathers, mixing and normalizing of
        # every point; the gradient reaches q only, through the anchor-only logits.
        logits = mochi_logits(
            ctx.anchor_logits,
            ctx.anchors,
            ctx.candidates,
            hard,
            draws,
            similarities,
            ctx.temperature,
            to_cosine=to_cosine,
        )
        self._last = (logits.values, ctx.positive_logits.detach(), ctx.temperature)
        return logits

    def diagnostics(self) -> dict[str, float]:
        """Mean cosine of the queries to their synthetic negatives, and the fraction of synthetic
        negatives more similar to the query than its positive (from the last call)."""
        if getattr(self, "_last", None) is None:
            return {}
        logits, positive, tau = self._last
        return {
            "synthetic_sim": float(logits.float().mean()) * tau,
            "synthetic_harder_than_positive": float((logits > positive.unsqueeze(1)).float().mean()),
        }
