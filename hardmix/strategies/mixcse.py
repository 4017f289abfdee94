"""The ``mixcse`` strategy: mixtures of each anchor's positive with its negatives (Zhang et al., AAAI 2022).

Clean mode, the paper's Eq. 4 and 5. Anchor h_i, its positive h'_i, negatives h'_j (j != i), all unit:

    m'_ij = (lam h'_i + (1 - lam) h'_j) / ||lam h'_i + (1 - lam) h'_j||
    L_i = -log exp(h_i.h'_i / tau) / (sum_j exp(h_i.h'_j / tau) + sum_{j != i} exp(h_i.SG(m'_ij) / tau))

The strategy returns the second sum's logits h_i.SG(m'_ij) / tau; the loss holds the first. With the
loss's second direction (``bidirectional``, the paper's loss) h'_i is also an anchor against h_j, mixed
as m_ij = normalize(lam h_i + (1 - lam) h_j): the same function with the views swapped. Against a queue
(MoCo layout) the positive is the key k_i and the negatives are the queue entries n_j.

:meth:`MixCSE.extra_logits` below is that equation, written plainly: it builds the (B, N, D) mixtures,
stops their gradient, and takes their logits with a matrix product. :meth:`MixCSE.fast_logits` and
:meth:`MixCSE.fused_in_batch` compute the same numbers in closed form from the similarity matrices
(:mod:`hardmix.kernels`); the tests check them against this file.

A lambda schedule (hardmix's option, not the paper's: the paper keeps lam constant): with ``lam_end`` set,
the mixtures of optimizer step t use

    lam(t) = lam + (lam_end - lam) r(min(t, T) / T),   r(s) = s ("linear") or (1 - cos(pi s)) / 2 ("cosine")

with T = ``schedule_steps``: lam at step 0, lam_end from step T on. Both paths read the step's lam from
``ctx.step``; the fused in-batch loss, which is given no step, declines while a schedule is set (the loss
then composes the same numbers from :meth:`MixCSE.fast_logits`). With ``lam_end`` None (the default) lam
is the constant ``lam``, exactly as before.

Reference mode: the logits of the official MixCSE code (BDBC-KG-NLP/MixCSE_AAAI2022, ``cl_forward``),
described in ``docs/mixcse_modes.md``: un-normalized pooled features mixed with their roll-by-one neighbour,
two shared B x B blocks, the false-negative entry zeroed (not masked), one direction.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.errors import StrategyArgumentError
from hardmix.kernels.derived_logits import DerivedLogits
from hardmix.kernels.fused_in_batch import fused_in_batch_loss, fused_in_batch_supported
from hardmix.kernels.mixcse_logits import mixcse_fast_logits
from hardmix.kernels.mixture_norms import mixed_logits
from hardmix.strategies.base import ContrastContext, ParamInfo, Strategy, register_strategy
from hardmix.utils.counting import count_true

NEG_INF = float("-inf")
SCHEDULES = ("linear", "cosine")


def mixtures(positives: Tensor, candidates: Tensor, lam: float | Tensor) -> Tensor:
    """MixCSE's mixed negatives m_ij = normalize(lam p_i + (1 - lam) n_j) (Eq. 4), every pair (i, j).

    Args:
        positives: (B, D) unit positives p_i (the paper's h'_i).
        candidates: (N, D) unit negatives n_j (the paper's h'_j).
        lam: the positive's weight, in (0, 1); or a (B, 1, 1) tensor, one weight per row i (the
            ``mixcse_adaptive`` strategy's lam_i).

    Returns:
        (B, N, D) unit mixtures, with the gradient of their inputs (apply SG yourself).

    Example:
        >>> p, n = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
        >>> mixtures(p, n, lam=0.5)
        tensor([[[0.7071, 0.7071]]])
    """
    return F.normalize(lam * positives.unsqueeze(1) + (1.0 - lam) * candidates.unsqueeze(0), dim=-1)


def scheduled_lam(step: int, lam: float, lam_end: float, schedule_steps: int, schedule: str) -> float:
    """The lambda of optimizer step ``step``: from ``lam`` at step 0 to ``lam_end`` at ``schedule_steps``
    (linearly or along a half cosine), then ``lam_end``.

    Example:
        >>> [scheduled_lam(t, 0.2, 0.4, 4, "linear") for t in (0, 2, 4, 9)]
        [0.2, 0.30000000000000004, 0.4, 0.4]
        >>> round(scheduled_lam(1, 0.2, 0.4, 4, "cosine"), 6)  # 0.2 + 0.2 (1 - cos(pi / 4)) / 2
        0.229289
    """
    if step <= 0:
        return lam
    if step >= schedule_steps:
        return lam_end
    s = step / schedule_steps
    ramp = s if schedule == "linear" else 0.5 * (1.0 - math.cos(math.pi * s))
    return lam + (lam_end - lam) * ramp


def _check_lam(argument: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
        raise StrategyArgumentError(argument, f"must be in (0, 1), got {value}")
    return float(value)


@register_strategy
class MixCSE(Strategy):
    """Positive-negative mixing: one stop-gradient mixture of the positive with each negative.

    Args:
        lam: weight of the positive in each mixture, in (0, 1). Paper: 0.2 (Zhang et al. 2022, Sec. 5.2).
        stop_grad: apply SG to the mixtures (paper default); False is the "wo sg" ablation (Table 4).
        bidirectional: add the second direction (h' as anchor) and average the two; None means the mode's
            own (True for clean; the reference mode is one-directional). False is the "single" ablation.
        mode: ``"clean"`` (the paper's equation) or ``"reference"`` (the official code's logits).
        lam_end: None (the default: lam is constant, as in the paper), or the lam a schedule reaches, in
            (0, 1) (hardmix's option).
        schedule_steps: the schedule's length in optimizer steps (a positive integer; only with lam_end).
        lam_schedule: the ramp from lam to lam_end, ``"linear"`` or ``"cosine"`` (a half cosine).

    Example:
        >>> MixCSE(lam=1.5)
        Traceback (most recent call last):
        ...
        hardmix.errors.StrategyArgumentError: lam: must be in (0, 1), got 1.5
    """

    name = "mixcse"
    paper = (
        "Zhang et al., Unsupervised Sentence Representation via Contrastive Learning with Mixing Negatives, "
        "AAAI 2022"
    )
    params = (
        ParamInfo("lam", 0.2, "weight of the positive in each mixture, in (0, 1); paper: 0.2"),
        ParamInfo("stop_grad", True, "stop-gradient on the mixtures; false is the paper's 'wo sg' ablation"),
        ParamInfo(
            "bidirectional", None, "two directions averaged (None: true for clean mode); false is 'single'"
        ),
        ParamInfo("mode", "clean", "'clean' (paper's equation) or 'reference' (official code's logits)"),
        ParamInfo(
            "lam_end", None,
            "lam reached after schedule_steps, in (0, 1); None: constant lam (the paper); hardmix's option",
        ),
        ParamInfo("schedule_steps", None, "schedule length in optimizer steps (with lam_end); hardmix's"),
        ParamInfo("lam_schedule", "linear", "'linear' or 'cosine' ramp from lam to lam_end; hardmix's"),
    )
    needs_anchor_logits = True  # the fast path's stop-gradient logits

    def __init__(
        self,
        lam: float = 0.2,
        stop_grad: bool = True,
        bidirectional: bool | None = None,
        mode: Literal["clean", "reference"] = "clean",
        lam_end: float | None = None,
        schedule_steps: int | None = None,
        lam_schedule: str = "linear",
    ) -> None:
        lam = _check_lam("lam", lam)
        if lam_end is not None:
            lam_end = _check_lam("lam_end", lam_end)
        if schedule_steps is not None and (
            isinstance(schedule_steps, bool) or not isinstance(schedule_steps, int) or schedule_steps < 1
        ):
            raise StrategyArgumentError(
                "schedule_steps", f"must be a positive integer, got {schedule_steps!r}"
            )
        if lam_end is not None and schedule_steps is None:
            raise StrategyArgumentError("schedule_steps", "a schedule (lam_end) needs its length in steps")
        if lam_end is None and schedule_steps is not None:
            raise StrategyArgumentError("lam_end", "schedule_steps is set but no lam_end to ramp to")
        if lam_schedule not in SCHEDULES:
            raise StrategyArgumentError("lam_schedule", f"must be 'linear' or 'cosine', got {lam_schedule!r}")
        if not isinstance(stop_grad, bool):
            raise StrategyArgumentError("stop_grad", f"must be true or false, got {stop_grad!r}")
        if bidirectional is not None and not isinstance(bidirectional, bool):
            raise StrategyArgumentError(
                "bidirectional", f"must be true, false or null, got {bidirectional!r}"
            )
        if mode not in ("clean", "reference"):
            raise StrategyArgumentError("mode", f"must be 'clean' or 'reference', got {mode!r}")
        if mode == "reference" and bidirectional:
            raise StrategyArgumentError(
                "bidirectional", "the reference mode reproduces the official code's single direction"
            )
        if mode == "reference" and not stop_grad:
            raise StrategyArgumentError(
                "stop_grad", "the reference mode always detaches its mixtures, as the official code"
            )
        self.lam = lam
        self.stop_grad = stop_grad
        self.bidirectional = bidirectional
        self.mode = mode
        self.lam_end = lam_end
        self.schedule_steps = schedule_steps
        self.lam_schedule = lam_schedule
        self._last: tuple | None = None
        self._last_lam = lam

    def lam_at(self, step: int) -> float:
        """The lam of optimizer step ``step``: ``lam`` itself without a schedule, else
        :func:`scheduled_lam`."""
        if self.lam_end is None:
            return self.lam
        return scheduled_lam(step, self.lam, self.lam_end, self.schedule_steps, self.lam_schedule)

    @property
    def symmetric(self) -> bool | None:
        if self.mode == "reference":
            return False
        return True if self.bidirectional is None else self.bidirectional

    def extra_logits(self, ctx: ContrastContext) -> Tensor:
        """The plain implementation: h_i . SG(m'_ij) / tau for every candidate j, -inf where j is not a
        valid negative of anchor i (its own positive, an excluded queue entry). (B, N)."""
        if self.mode == "reference":
            return self._reference_logits(ctx)
        m = mixtures(ctx.positives, ctx.candidates, self.lam_at(ctx.step))  # (B, N, D) m'_ij
        if self.stop_grad:
            m = m.detach()  # SG(m'_ij): the gradient reaches the anchor h_i only
        logits = (m @ ctx.anchors.unsqueeze(2)).squeeze(2) / ctx.temperature  # (B, N) h_i . m'_ij / tau
        logits = logits.masked_fill(~ctx.negative_mask, NEG_INF)
        self._remember(ctx, logits.detach())
        return logits

    def fast_logits(self, ctx: ContrastContext) -> Tensor | DerivedLogits:
        """:meth:`extra_logits` in closed form from the logits the loss has (no (B, N, D) mixtures)."""
        if self.mode == "reference" or ctx.shortcuts is None:
            return self.extra_logits(ctx)
        block, values = mixcse_fast_logits(
            ctx.positives,
            ctx.candidates,
            ctx.logits,
            ctx.positive_logits,
            ctx.negative_mask,
            ctx.positive_index,
            ctx.shortcuts,
            self.lam_at(ctx.step),
            self.stop_grad,
            queue_mode=ctx.mode == "queue",
        )
        self._remember(ctx, values)
        return block

    def fused_in_batch(
        self, h1: Tensor, h2: Tensor, temperature: float, symmetric: bool
    ) -> tuple[Tensor, Tensor] | None:
        """The clean, stop-gradient loss in one autograd Function (:mod:`hardmix.kernels.fused_in_batch`).

        None with a lambda schedule: this call is given no step, so it cannot know the step's lam."""
        if self.lam_end is not None:
            return None
        if self.mode != "clean" or not self.stop_grad or not fused_in_batch_supported(h1, temperature):
            return None
        loss, positive_logits = fused_in_batch_loss(h1, h2, temperature, symmetric, lam=self.lam)
        # Diagnostics are computed when asked, from the two views (no (B, B) matrix is kept for them).
        self._last = (h1.detach(), h2.detach(), temperature)
        return loss, positive_logits

    def _remember(self, ctx: ContrastContext, mixed: Tensor) -> None:
        """Keep the (B, N) mixed logits for :meth:`diagnostics`; they describe the first view's anchors
        (the paper's h_i)."""
        if ctx.direction == 0:
            self._last = (mixed, ctx.positive_logits.detach(), ctx.negative_mask, ctx.temperature)
            self._last_lam = self.lam_at(ctx.step)

    def diagnostics(self) -> dict[str, float]:
        """Mean cosine of the anchors to their mixed negatives, and the fraction of mixed negatives more
        similar to the anchor than its positive (the paper's bound on lam, Sec. 4.3), from the last call;
        with a schedule, also the lam of that call."""
        if getattr(self, "_last", None) is None:
            return {}
        schedule = {} if self.lam_end is None else {"lam": self._last_lam}
        if len(self._last) == 3:  # from the fused path: the views (h1, h2) and tau
            h1, h2, tau = self._last
            with torch.no_grad():
                logits = h1 @ h2.T / tau
                positive = logits.diagonal().clone()
                mixed = mixed_logits(positive, logits, h2 @ h2.T, self.lam)
                valid = ~torch.eye(h1.shape[0], dtype=torch.bool, device=h1.device)
            self._last = (mixed, positive, valid, tau)
        mixed, positive, valid, tau = self._last
        n = count_true(valid).clamp_min(1)
        return {
            "synthetic_sim": float(torch.where(valid, mixed, 0.0).sum() / n) * tau,
            "synthetic_harder_than_positive": float(((mixed > positive.unsqueeze(1)) & valid).sum() / n),
            **schedule,
        }

    def _reference_logits(self, ctx: ContrastContext) -> Tensor:
        if ctx.mode != "in_batch" or ctx.unnormalized is None:
            raise StrategyArgumentError(
                "mode", "the reference mode needs in-batch negatives (the official code has no queue)"
            )
        if ctx.direction != 0:
            raise StrategyArgumentError("bidirectional", "the reference mode is one-directional")
        lam, tau = self.lam_at(ctx.step), ctx.temperature
        z1_all = ctx.unnormalized.all_anchors  # (N, D) un-normalized first view of the whole batch
        z2_all = ctx.unnormalized.candidates  # (N, D) second view
        z1 = ctx.unnormalized.anchors  # (B, D) local rows
        n_all = z2_all.shape[0]
        rows = torch.arange(z1.shape[0], device=z1.device)
        global_rows = ctx.positive_index if ctx.positive_index is not None else rows
        # Block 2: z3_j = SG(lam z2_j + (1 - lam) z2_{j+1}); S2[i, j] = cos(z1_i, z3_j) / tau; S2[i, i-1] = 0.
        z3 = (lam * z2_all + (1 - lam) * torch.roll(z2_all, shifts=-1, dims=0)).detach()
        s2 = _cosine_matrix(z1, z3) / tau
        keep2 = torch.ones_like(s2)
        keep2[rows, (global_rows - 1) % n_all] = 0.0
        # Block 3: z4_i = SG(lam z1_i + (1 - lam) z1_{i+1}); S3[i, j] = cos(z4_i, z2_j) / tau; S3[i, i+1] = 0.
        z4_all = (lam * z1_all + (1 - lam) * torch.roll(z1_all, shifts=-1, dims=0)).detach()
        z4 = z4_all[global_rows]
        s3 = _cosine_matrix(z4, z2_all) / tau
        keep3 = torch.ones_like(s3)
        keep3[rows, (global_rows + 1) % n_all] = 0.0
        self._last = None
        return torch.cat([s2 * keep2, s3 * keep3], dim=1)


def _cosine_matrix(x: Tensor, y: Tensor) -> Tensor:
    """(B, N) cosine similarities of the rows of x (B, D) and y (N, D)."""
    return F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T
