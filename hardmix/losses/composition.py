"""How the strategies of one loss compose: exclusions, then weights, then extra columns, then the estimator.

For one direction with anchors (B, D), the existing negatives' logits l (B, N) (``-inf`` where not a
valid negative) and the positive logits p (B,):

1. every strategy's exclusions are united: ``valid <- valid & ~(E_1 | E_2 | ...)``, and the excluded
   entries of l become ``-inf``; the extra-column strategies of step 3 see this ``valid`` and these l
   (MoCHi then never mixes an excluded negative, MixCSE never mixes with one);
2. the log-weights are summed and added to the valid entries of l: ``l <- l + sum_s log w_s``;
3. every strategy's extra columns X_s (B, M_s) are appended: ``C = [l | X_1 | X_2 | ...]``;
4. the per-anchor loss is the estimator's ``negative_term(p, C)`` if a strategy defines one, else
   InfoNCE's ``logsumexp([p | C]) - p``; the loss is its mean over the anchors.

The order of the strategies in ``loss.strategies`` does not change the result (exclusions unite, weights
add, columns concatenate). Refused, with an error naming the strategy: two estimators (each replaces the
same term), and an estimator together with a reweighting strategy (the debiased estimators weight the
negatives themselves; a second weighting of their terms is not defined by either paper).

Every step here is the plain computation; a loss with an exclusion, a weight or an estimator computes
each direction this way whichever ``impl`` it was given (those steps are elementwise over the (B, N)
logits the loss already has: there is no product to save).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.strategies.base import ContrastContext, Strategy, check_composition

NEG_INF = float("-inf")

__all__ = [
    "apply_exclusions",
    "check_composition",
    "composed_direction",
    "info_nce_term",
    "needs_composition",
]


def needs_composition(strategies: Sequence[Strategy]) -> bool:
    """Whether a strategy excludes, reweights or estimates (the loss then composes each direction here)."""
    return any(set(s.kinds()) & {"exclude", "reweight", "estimator"} for s in strategies)


def apply_exclusions(ctx: ContrastContext, strategies: Sequence[Strategy]) -> ContrastContext:
    """Step 1: the context with every strategy's excluded negatives removed (mask False, logits -inf)."""
    dropped = None
    for strategy in strategies:
        drop = strategy.excluded_negatives(ctx)
        if drop is not None:
            dropped = drop if dropped is None else dropped | drop
    if dropped is None:
        return ctx
    dropped = dropped & ctx.negative_mask
    return replace(
        ctx,
        negative_mask=ctx.negative_mask & ~dropped,
        logits=ctx.logits.masked_fill(dropped, NEG_INF),
        shortcuts=None,
    )


def info_nce_term(positive_logits: Tensor, negative_logits: Tensor) -> Tensor:
    """InfoNCE's per-anchor loss ``logsumexp([p | C]) - p``: (B,) from (B,) and (B, C)."""
    return torch.logsumexp(torch.cat([positive_logits.unsqueeze(1), negative_logits], dim=1), dim=1) - (
        positive_logits
    )


def composed_direction(ctx: ContrastContext, strategies: Sequence[Strategy]) -> Tensor:
    """One direction's mean loss, composed in the order of this module's docstring.

    Args:
        ctx: the direction; ``ctx.logits`` (B, N) over the candidates (in-batch: the positive's column
            ``ctx.positive_index[i]`` included; queue: -inf at the excluded entries),
            ``ctx.negative_mask`` (B, N) which of them are negatives, ``ctx.positive_logits`` (B,).
        strategies: the loss's strategies.

    Returns:
        The scalar mean over the B anchors, reduced in float32 at least (float64 stays float64). Without an
        estimator it is the cross-entropy of ``[logits | extra columns]`` (in-batch, target the positive's
        column) or ``[p | logits | extra columns]`` (queue, target 0), the papers' own formulation.
    """
    ctx = apply_exclusions(ctx, strategies)
    logits = ctx.logits  # (B, N), the excluded negatives -inf
    for strategy in strategies:
        log_weights = strategy.negative_log_weights(ctx)
        if log_weights is not None:  # on the negatives only (never the in-batch positive's column)
            logits = logits + log_weights.masked_fill(~ctx.negative_mask, 0.0)
    extras = [e for e in (s.extra_logits(ctx) for s in strategies) if e is not None]
    dtype = torch.promote_types(logits.dtype, torch.float32)
    estimators = [s for s in strategies if "estimator" in s.kinds()]
    if estimators:
        negatives = logits.masked_fill(~ctx.negative_mask, NEG_INF)  # (B, N)
        all_negatives = torch.cat([c.to(dtype) for c in [negatives, *extras]], dim=1)  # (B, N + sum M_s)
        positives = ctx.positive_logits.to(dtype)
        per_anchor = estimators[0].negative_term(ctx, positives, all_negatives)
        if per_anchor is None:
            per_anchor = info_nce_term(positives, all_negatives)
        return per_anchor.mean()
    if ctx.mode == "in_batch":
        blocks, targets = [logits, *extras], ctx.positive_index
    else:
        b = logits.shape[0]
        blocks = [ctx.positive_logits.unsqueeze(1), logits, *extras]
        targets = torch.zeros(b, dtype=torch.long, device=logits.device)
    return F.cross_entropy(torch.cat([c.to(dtype) for c in blocks], dim=1), targets)
