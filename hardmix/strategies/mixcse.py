"""The ``mixcse`` strategy: mixtures of each anchor's positive with its negatives (Zhang et al., AAAI 2022).

Clean mode, the paper's Eq. 4 and 5. Anchor h_i, its positive h'_i, negatives h'_j (j != i), all unit:

    m'_ij = (lam h'_i + (1 - lam) h'_j) / ||lam h'_i + (1 - lam) h'_j||
    L_i = -log exp(h_i.h'_i / tau) / (sum_j exp(h_i.h'_j / tau) + sum_{j != i} exp(h_i.SG(m'_ij) / tau))

The strategy returns the second sum's cosines h_i.SG(m'_ij); the loss holds the first and divides every
column by tau. With the
loss's second direction (``second_direction``, the paper's loss) h'_i is also an anchor against h_j: the same
function with the views swapped. Against a queue (MoCo layout) the positive is the key k_i and the
negatives are the queue entries n_j.

The (B, N, D) mixtures are not built: for unit vectors ||lam p + (1 - lam) n||^2 = lam^2 + (1 - lam)^2
+ 2 lam (1 - lam) p.n, so

    h . normalize(lam p + (1 - lam) n)
        = (lam h.p + (1 - lam) h.n) / sqrt(lam^2 + (1 - lam)^2 + 2 lam (1 - lam) p.n)

needs only h.p, h.n (the cosines the loss has) and p.n (:func:`hardmix.ops.mixing.mixture_cosines`); SG(m'_ij)
is the same expression with p and n detached. Its gradient is the mixtures', since p and n are unit (the
normalization upstream removes the radial part).

Reference mode: the columns of the official MixCSE code (BDBC-KG-NLP/MixCSE_AAAI2022, ``cl_forward``),
described in ``docs/mixcse_modes.md``: un-normalized pooled features mixed with their roll-by-one neighbour,
two shared B x B blocks, the false-negative entry zeroed (not masked), one direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.ops.mixing import mixed_negative_cosines, synthetic_stats
from hardmix.strategies.base import ContrastContext, Stats, Strategy, arg, register_strategy, set_field
from hardmix.utils.errors import StrategyArgumentError, check_bool, check_number


@register_strategy
@dataclass(frozen=True)
class MixCSE(Strategy):
    """Positive-negative mixing: one stop-gradient mixture of the positive with each negative.

    Args:
        lam: weight of the positive in each mixture, in (0, 1). Paper: 0.2 (Zhang et al. 2022, Sec. 5.2).
        stop_grad: apply SG to the mixtures (paper default); False is the "wo sg" ablation (Table 4).
        second_direction: add the second direction (h' as anchor) and average the two; None means the mode's
            own (True for clean; the reference mode is one-directional). False is the "single" ablation.
        mode: ``"clean"`` (the paper's equation) or ``"reference"`` (the official code's logits).

    Example:
        >>> MixCSE(lam=1.5)
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.StrategyArgumentError: lam: must be in (0, 1), got 1.5
    """

    name = "mixcse"
    paper = (
        "Zhang et al., Unsupervised Sentence Representation via Contrastive Learning with Mixing Negatives, "
        "AAAI 2022"
    )
    lam: float = arg(0.2, "weight of the positive in each mixture, in (0, 1); paper: 0.2")
    stop_grad: bool = arg(True, "stop-gradient on the mixtures; false is the paper's 'wo sg' ablation")
    second_direction: bool | None = arg(
        None, "two directions averaged (None: true for clean mode); false is 'single'"
    )
    mode: Literal["clean", "reference"] = arg(
        "clean", "'clean' (paper's equation) or 'reference' (official code's logits)"
    )

    def __post_init__(self) -> None:
        set_field(self, "lam", check_number("lam", self.lam, 0.0, 1.0))
        check_bool("stop_grad", self.stop_grad)
        check_bool("second_direction", self.second_direction, allow_none=True)
        if self.mode not in ("clean", "reference"):
            raise StrategyArgumentError("mode", f"must be 'clean' or 'reference', got {self.mode!r}")
        if self.mode == "reference" and self.second_direction:
            raise StrategyArgumentError(
                "second_direction", "the reference mode reproduces the official code's single direction"
            )
        if self.mode == "reference" and not self.stop_grad:
            raise StrategyArgumentError(
                "stop_grad", "the reference mode always detaches its mixtures, as the official code"
            )

    @property
    def direction_argument(self) -> str | None:
        return None if self.second_direction is None else "second_direction"

    @property
    def both_directions(self) -> bool | None:
        if self.mode == "reference":
            return False
        return True if self.second_direction is None else self.second_direction

    @property
    def in_batch_only(self) -> str | None:
        return "mode" if self.mode == "reference" else None

    def extra_cosines(self, ctx: ContrastContext) -> tuple[Tensor, Stats]:
        """(B, N) h_i . SG(m'_ij) (clean), or the official code's two blocks (reference)."""
        if self.mode == "reference":
            return self.reference_cosines(ctx), {}
        mixed = mixed_negative_cosines(*ctx.mixing_products(self.stop_grad), ctx.negative_mask, self.lam)
        return mixed, synthetic_stats(mixed, ctx.positive_cosines, ctx.negative_mask)

    def reference_cosines(self, ctx: ContrastContext) -> Tensor:
        """(B, 2N) the official code's blocks S2 and S3 (``docs/mixcse_modes.md``)."""
        if ctx.mode != "in_batch" or ctx.unnormalized is None:
            raise StrategyArgumentError(
                "mode", "the reference mode needs in-batch negatives (the official code has no queue)"
            )
        if ctx.direction != 0:
            raise StrategyArgumentError("second_direction", "the reference mode is one-directional")
        lam = self.lam
        z1_all, z2_all, z1 = (
            ctx.unnormalized.all_anchors,
            ctx.unnormalized.candidates,
            ctx.unnormalized.anchors,
        )
        n_all = z2_all.shape[0]
        rows = torch.arange(z1.shape[0], device=z1.device)
        global_rows = ctx.positive_index if ctx.positive_index is not None else rows
        # Block 2: z3_j = SG(lam z2_j + (1 - lam) z2_{j+1}); S2[i, j] = cos(z1_i, z3_j); S2[i, i-1] = 0.
        z3 = (lam * z2_all + (1 - lam) * torch.roll(z2_all, shifts=-1, dims=0)).detach()
        s2 = _cosine_matrix(z1, z3)
        keep2 = torch.ones_like(s2)
        keep2[rows, (global_rows - 1) % n_all] = 0.0
        # Block 3: z4_i = SG(lam z1_i + (1 - lam) z1_{i+1}); S3[i, j] = cos(z4_i, z2_j); S3[i, i+1] = 0.
        z4 = (lam * z1_all + (1 - lam) * torch.roll(z1_all, shifts=-1, dims=0)).detach()[global_rows]
        s3 = _cosine_matrix(z4, z2_all)
        keep3 = torch.ones_like(s3)
        keep3[rows, (global_rows + 1) % n_all] = 0.0
        return torch.cat([s2 * keep2, s3 * keep3], dim=1)


def _cosine_matrix(x: Tensor, y: Tensor) -> Tensor:
    """(B, N) cosine similarities of the rows of x (B, D) and y (N, D)."""
    return F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T
