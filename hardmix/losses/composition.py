"""How the strategies of one loss compose: exclusions, then weights, then extra columns, then the estimator.

For one direction with anchors (B, D), the existing negatives' logits l (B, N) (``-inf`` where not a
valid negative) and the positive logits p (B,):

1. every strategy's exclusions are united: ``valid <- valid & ~(E_1 | E_2 | ...)``, and the excluded
   entries of l become ``-inf``; the extra-column strategies of step 3 see this ``valid`` and these l
   (MoCHi then never mixes an excluded negative, MixCSE never mixes with one);
2. the log-weights are summed and added to the valid entries of l: ``l <- l + sum_s log w_s``;
3. every strategy's extra columns X_s (B, M_s) are appended: ``C = [l | X_1 | X_2 | ...]``;
4. the per-anchor loss is the estimator's ``estimator(p, C)`` if a strategy defines one, else InfoNCE's
   ``logsumexp([p | C]) - p``; the loss is its mean over the anchors
   (:func:`~hardmix.losses.info_nce.info_nce`).

The order of the strategies in ``loss.strategies`` does not change the result (exclusions unite, weights
add, columns concatenate). Refused, with an error naming the strategy: two estimators (each replaces the
same term), and an estimator together with a reweighting strategy (the debiased estimators weight the
negatives themselves; a second weighting of their terms is not defined by either paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from hardmix.errors import StrategyOutputError
from hardmix.losses.info_nce import info_nce
from hardmix.mixing import NEG_INF
from hardmix.strategies.base import ContrastContext, Stats, Strategy


def composed_direction(
    ctx: ContrastContext, strategies: Sequence[Strategy]
) -> tuple[Tensor, dict[str, Stats]]:
    """One direction's mean loss, composed in the order of this module's docstring, and each strategy's
    statistics of this call.

    Args:
        ctx: the direction; ``ctx.logits`` (B, N) over the candidates (in-batch: the positive's column
            ``ctx.positive_index[i]`` included; queue: -inf at the excluded entries),
            ``ctx.negative_mask`` (B, N) which of them are negatives, ``ctx.positive_logits`` (B,).
        strategies: the strategies acting on this step.

    Returns:
        The scalar mean over the B anchors, reduced in float32 at least (float64 stays float64), and the
        statistics by strategy name.
    """
    stats: dict[str, Stats] = {}
    outputs: list[tuple[Strategy, str, Tensor]] = []  # every block a strategy gave, for the checks
    dropped = None
    for strategy in strategies:
        if (out := strategy.exclude(ctx)) is not None:
            _check_shape(f"strategy {strategy.name!r}: exclude", out[0], tuple(ctx.logits.shape))
            dropped = out[0] if dropped is None else dropped | out[0]
            stats.setdefault(strategy.name, {}).update(out[1])
    if dropped is not None:
        dropped = dropped & ctx.negative_mask
        ctx = replace(
            ctx, negative_mask=ctx.negative_mask & ~dropped, logits=ctx.logits.masked_fill(dropped, NEG_INF)
        )
    logits = ctx.logits  # (B, N), the excluded negatives -inf
    for strategy in strategies:
        if (out := strategy.reweight(ctx)) is not None:  # on the negatives only, never the positive's column
            _check_shape(f"strategy {strategy.name!r}: reweight", out[0], tuple(ctx.logits.shape))
            outputs.append((strategy, "reweight", out[0]))
            logits = logits + out[0].masked_fill(~ctx.negative_mask, 0.0)
            stats.setdefault(strategy.name, {}).update(out[1])
    extras = []
    for strategy in strategies:
        if (out := strategy.extra_logits(ctx)) is not None:
            _check_shape(f"strategy {strategy.name!r}: extra_logits", out[0], (ctx.logits.shape[0], None))
            outputs.append((strategy, "extra_logits", out[0]))
            extras.append(out[0])
            stats.setdefault(strategy.name, {}).update(out[1])
    dtype = torch.promote_types(logits.dtype, torch.float32)
    estimators = [s for s in strategies if "estimator" in s.kinds()]
    if estimators:
        negatives = logits.masked_fill(~ctx.negative_mask, NEG_INF)  # (B, N)
        all_negatives = torch.cat([c.to(dtype) for c in [negatives, *extras]], dim=1)  # (B, N + sum M_s)
        per_anchor, estimator_stats = estimators[0].estimator(
            ctx, ctx.positive_logits.to(dtype), all_negatives
        )
        stats.setdefault(estimators[0].name, {}).update(estimator_stats)
        outputs.append((estimators[0], "estimator", per_anchor))
        return _check_finite(per_anchor.mean(), ctx, outputs), stats
    if ctx.mode == "in_batch":
        blocks, targets = [logits, *extras], ctx.positive_index
    else:
        blocks = [ctx.positive_logits.unsqueeze(1), logits, *extras]
        targets = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    loss = info_nce(torch.cat([c.to(dtype) for c in blocks], dim=1), targets)
    return _check_finite(loss, ctx, outputs), stats


def _check_shape(hook: str, block: Tensor, expected: tuple[int | None, ...]) -> None:
    """A hook's block has the shape the loss needs (None: any size), else a StrategyOutputError naming
    the hook (``strategy 'mochi': extra_logits``): never a bare torch error from inside the loss."""
    shape = tuple(getattr(block, "shape", ()))
    if len(shape) != len(expected) or any(e is not None and s != e for s, e in zip(shape, expected)):
        want = ", ".join("M" if e is None else str(e) for e in expected)
        raise StrategyOutputError(f"{hook} returned a block of shape {shape}, expected ({want}): one row per "
                                  "anchor")


def _check_finite(loss: Tensor, ctx: ContrastContext, outputs: list[tuple[Strategy, str, Tensor]]) -> Tensor:
    """``loss``, unless it is NaN or infinite while the similarities it was built from are not, and a
    strategy's block holds NaN or +inf: then that strategy made it, and a StrategyOutputError names it
    (a loss made non-finite by the encoder itself is left to the trainer, whose message is about the
    learning rate). -inf in a block is a masked entry, allowed."""
    if bool(torch.isfinite(loss)):
        return loss
    if torch.isnan(ctx.logits).any() or torch.isposinf(ctx.logits).any():
        return loss
    for strategy, hook, block in outputs:
        block = block.detach()
        if torch.isnan(block).any() or torch.isposinf(block).any():
            raise StrategyOutputError(
                f"strategy {strategy.name!r}: {hook} returned NaN or +inf values from finite similarities: "
                "a defect of the strategy, not of the learning rate"
            )
    return loss


__all__ = ["composed_direction"]
