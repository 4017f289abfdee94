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

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from hardmix.errors import StrategyOutputError
from hardmix.losses.info_nce import info_nce
from hardmix.mixing import NEG_INF
from hardmix.strategies.base import ContrastContext, Stats, Strategy


def composed_direction(
    ctx: ContrastContext, strategies: Sequence[Strategy], labels: Sequence[str] | None = None
) -> tuple[Tensor, dict[str, Stats]]:
    """One direction's mean loss, composed in the order of this module's docstring, and each strategy's
    statistics of this call.

    Every output a strategy hands the loss is checked where it enters, naming the strategy and the hook
    (:class:`~hardmix.errors.StrategyOutputError`): its type, shape, dtype and device (an exclusion (B, N)
    bool, a reweighting (B, N) and extra columns (B, M) floating, an estimate (B,) floating, statistics
    scalars), its values (no NaN or +inf in logits, a finite estimate and finite statistics: one flag for all
    of them, read with the loss's own finiteness, so no more synchronizations than before), and that it
    changed nothing the core or another strategy computed (the context's tensors' version counters, unchanged
    by the call: a write in place is refused). A loss made non-finite by the encoder itself (NaN or +inf
    similarities) is left to the trainer, whose message is about the learning rate.

    Args:
        ctx: the direction; ``ctx.logits`` (B, N) over the candidates (in-batch: the positive's column
            ``ctx.positive_index[i]`` included; queue: -inf at the excluded entries),
            ``ctx.negative_mask`` (B, N) which of them are negatives, ``ctx.positive_logits`` (B,).
        strategies: the strategies acting on this step.
        labels: each strategy's name in the statistics and the errors (default: its name; two entries of
            one name are told apart by :class:`~hardmix.losses.ContrastiveLoss`: ``mixcse[0]``,
            ``mixcse[1]``).

    Returns:
        The scalar mean over the B anchors, reduced in float32 at least (float64 stays float64), and the
        statistics by label.
    """
    labels = [s.name for s in strategies] if labels is None else list(labels)
    b, n = ctx.logits.shape
    stats: dict[str, Stats] = {}
    flags: list[tuple[str, Tensor]] = []  # (what, a 0-dim bool: its values are as they must be)
    versions = _versions(ctx)
    dropped = None
    for label, strategy in zip(labels, strategies, strict=True):
        out = _called(strategy.exclude, (ctx,), f"strategy {label!r}: exclude", ctx, versions)
        if out is not None:
            mask = _checked(out, f"strategy {label!r}: exclude", ctx, (b, n), stats.setdefault(label, {}),
                            flags)
            dropped = mask if dropped is None else dropped | mask
    if dropped is not None:
        dropped = dropped & ctx.negative_mask
        ctx = replace(
            ctx, negative_mask=ctx.negative_mask & ~dropped, logits=ctx.logits.masked_fill(dropped, NEG_INF)
        )
        versions = _versions(ctx)
    logits = ctx.logits  # (B, N), the excluded negatives -inf
    for label, strategy in zip(labels, strategies, strict=True):
        out = _called(strategy.reweight, (ctx,), f"strategy {label!r}: reweight", ctx, versions)
        if out is not None:  # on the negatives only, never the positive's column
            weights = _checked(out, f"strategy {label!r}: reweight", ctx, (b, n), stats.setdefault(label, {}),
                               flags)
            logits = logits + weights.masked_fill(~ctx.negative_mask, 0.0)
    extras = []
    for label, strategy in zip(labels, strategies, strict=True):
        out = _called(strategy.extra_logits, (ctx,), f"strategy {label!r}: extra_logits", ctx, versions)
        if out is not None:
            extras.append(_checked(out, f"strategy {label!r}: extra_logits", ctx, (b, None),
                                   stats.setdefault(label, {}), flags))
    dtype = torch.promote_types(logits.dtype, torch.float32)
    estimators = [(lb, s) for lb, s in zip(labels, strategies, strict=True) if "estimator" in s.kinds()]
    if estimators:
        label, estimator = estimators[0]
        negatives = logits.masked_fill(~ctx.negative_mask, NEG_INF)  # (B, N)
        all_negatives = torch.cat([c.to(dtype) for c in [negatives, *extras]], dim=1)  # (B, N + sum M_s)
        hook = f"strategy {label!r}: estimator"
        out = _called(estimator.estimator, (ctx, ctx.positive_logits.to(dtype), all_negatives), hook, ctx,
                      versions)
        per_anchor = _checked(out, hook, ctx, (b,), stats.setdefault(label, {}), flags)
        return _check_finite(per_anchor.mean(), ctx, flags), stats
    if ctx.mode == "in_batch":
        blocks, targets = [logits, *extras], ctx.positive_index
    else:
        blocks = [ctx.positive_logits.unsqueeze(1), logits, *extras]
        targets = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    loss = info_nce(torch.cat([c.to(dtype) for c in blocks], dim=1), targets)
    return _check_finite(loss, ctx, flags), stats


# The context's tensors a strategy reads and must leave as they are, by field.
_FIELDS = ("anchors", "positives", "candidates", "logits", "positive_logits", "negative_mask",
           "positive_index")
_VIEWS = ("anchors", "all_anchors", "candidates")


def _versions(ctx: ContrastContext) -> tuple[int, ...]:
    """The version counter of each of the context's tensors (:data:`_FIELDS`, then the un-normalized
    views): a write in place, into the tensor or any view of it, increments it. Free to read; empty under
    ``torch.inference_mode`` (whose tensors keep no counter, and have no gradient to corrupt)."""
    views = ctx.unnormalized
    tensors = [getattr(ctx, f) for f in _FIELDS] + [getattr(views, f) if views else None for f in _VIEWS]
    try:
        return tuple(-1 if t is None else t._version for t in tensors)
    except RuntimeError:  # inference tensors track no version
        return ()


def _called(hook: Callable[..., Any], args: tuple[Any, ...], name: str, ctx: ContrastContext,
            versions: tuple[int, ...]) -> Any:
    """``hook(*args)``, refused (naming it) if it wrote into one of the context's tensors: what the core or
    an earlier strategy computed, which the loss and the other strategies read after it."""
    out = hook(*args)
    if versions and (now := _versions(ctx)) != versions:
        fields = (*_FIELDS, *(f"unnormalized.{v}" for v in _VIEWS))
        changed = [f for f, old, new in zip(fields, versions, now, strict=True) if old != new]
        raise StrategyOutputError(f"{name} wrote into the context's {changed[0]} in place: a strategy "
                                  "returns new tensors and never changes what the core or another strategy "
                                  "computed")
    return out


def _checked(out: Any, hook: str, ctx: ContrastContext, expected: tuple[int | None, ...], own: Stats,
             flags: list[tuple[str, Tensor]]) -> Tensor:
    """A hook's result, once it is ``(tensor, statistics)`` as the loss needs it, else a StrategyOutputError
    naming the hook (never a bare torch error from inside the loss): the tensor of shape ``expected``
    (None: any size), bool for an exclusion and floating otherwise, on the logits' device; the statistics
    a mapping of names to scalars (numbers or one-element real tensors). Its statistics are added to
    ``own`` (its strategy's); what its values must be (no NaN or +inf in logits, finite estimates and
    statistics) is appended to ``flags``, read once with the loss (:func:`_check_finite`)."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Tensor)
            and isinstance(out[1], dict)):
        raise StrategyOutputError(f"{hook} returned {type(out).__name__}, expected None or (tensor, "
                                  "statistics mapping)")
    block, block_stats = out
    _check_shape(hook, block, expected)
    exclusion, estimate = hook.endswith(": exclude"), hook.endswith(": estimator")
    if exclusion != (block.dtype == torch.bool) or not (exclusion or block.dtype.is_floating_point):
        raise StrategyOutputError(f"{hook} returned a block of dtype {block.dtype}, expected "
                                  + ("torch.bool" if exclusion else "a floating dtype"))
    if block.device != ctx.logits.device:
        raise StrategyOutputError(f"{hook} returned a block on {block.device}, expected {ctx.logits.device}")
    if not exclusion:  # logits: -inf is an excluded entry; an estimate is finite
        flags.append((f"{hook} returned NaN or +inf values", torch.isfinite(block).all() if estimate
                      else (block < math.inf).all()))
    for key, value in block_stats.items():
        what = f"{hook}: statistic {key!r}"
        if not isinstance(key, str):
            raise StrategyOutputError(f"{what}: its name is a {type(key).__name__}, not a string")
        if isinstance(value, Tensor):
            if value.numel() != 1 or value.is_complex() or value.dtype == torch.bool:
                raise StrategyOutputError(f"{what} is a tensor of shape {tuple(value.shape)} and dtype "
                                          f"{value.dtype}, expected a real scalar")
            flags.append((f"{what} is NaN or infinite", torch.isfinite(value.detach()).all()))
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise StrategyOutputError(f"{what} is a {type(value).__name__}, expected a real scalar")
        elif not math.isfinite(value):
            flags.append((f"{what} is NaN or infinite", torch.tensor(False)))
        own[key] = value
    return block


def _check_shape(hook: str, block: Tensor, expected: tuple[int | None, ...]) -> None:
    """A hook's block has the shape the loss needs (None: any size), else a StrategyOutputError naming
    the hook (``strategy 'mochi': extra_logits``): never a bare torch error from inside the loss."""
    shape = tuple(getattr(block, "shape", ()))
    if len(shape) != len(expected) or any(e is not None and s != e for s, e in zip(shape, expected)):
        want = ", ".join("M" if e is None else str(e) for e in expected)
        raise StrategyOutputError(f"{hook} returned a block of shape {shape}, expected ({want}"
                                  f"{',' if len(expected) == 1 else ''}): one row per anchor")


def _check_finite(loss: Tensor, ctx: ContrastContext, flags: list[tuple[str, Tensor]]) -> Tensor:
    """``loss``, once it and every flag of :func:`_checked` hold (one read, the one the loss's finiteness
    needed before). Else, while the similarities the strategies were given are finite (no NaN, no +inf), the
    first flag that fails names its strategy, its hook and what it returned: a StrategyOutputError, a defect
    of the strategy; a loss made non-finite by the encoder itself is left to the trainer, whose message is
    about the learning rate."""
    ok = torch.isfinite(loss)
    if flags:
        ok = torch.stack([ok, *(f.to(ok.device) for _, f in flags)]).all()
    if bool(ok):
        return loss
    if torch.isnan(ctx.logits).any() or torch.isposinf(ctx.logits).any():
        return loss
    for what, flag in flags:
        if not bool(flag):
            raise StrategyOutputError(f"{what} from finite similarities: a defect of the strategy, not of "
                                      "the learning rate")
    return loss


__all__ = ["composed_direction"]
