"""How the strategies of one loss compose: exclusions, then weights, then extra columns, then the estimator.

For one direction with anchors (B, D), the existing negatives' cosines c (B, N) (``-inf`` where not a
valid negative), the positive cosines c+ (B,) and the temperature tau:

1. every strategy's exclusions are united: ``valid <- valid & ~(E_1 | E_2 | ...)``, and the excluded
   entries of c become ``-inf``; the extra-column strategies of step 3 see this ``valid`` and these c
   (MoCHi then never mixes an excluded negative, MixCSE never mixes with one);
2. the log-weights are summed: ``log w = sum_s log w_s``, 0 where not a valid negative;
3. every strategy's extra cosines X_s (B, M_s) are appended, and every column is divided by tau, here and
   nowhere else: ``[p | l] = [c+ | c | X_1 | X_2 | ...] / tau``, then ``l <- l + log w`` on the existing
   negatives;
4. the per-anchor loss is the estimator's ``estimator(p, l, tau)`` if a strategy defines one, else
   InfoNCE's ``logsumexp([p | l]) - p``; the loss is its mean over the anchors
   (:func:`~hardmix.losses.info_nce.info_nce`).

The order of the strategies in ``loss.strategies`` does not change the result (exclusions unite, weights
add, columns concatenate). Refused, with an error naming the strategy: two estimators (each replaces the
same term), and an estimator together with a reweighting strategy (the debiased estimators weight the
negatives themselves; a second weighting of their terms is not defined by either paper).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.losses.info_nce import info_nce
from hardmix.ops.mixing import NEG_INF
from hardmix.strategies.base import METHODS, ContrastContext, Stats, Strategy
from hardmix.utils.errors import ConfigError, StrategyArgumentError, StrategyOutputError


def composed_direction(
    ctx: ContrastContext, strategies: Sequence[Strategy], temperature: float,
    labels: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, Stats]]:
    """One direction's mean loss, composed in the order of this module's docstring (exclude, reweight, add
    columns, one cross-entropy), and each strategy's statistics of this call.

    A strategy that is not built in (a plug-in) is checked where each of its outputs enters the loss, naming
    the strategy and the hook (:class:`~hardmix.utils.errors.StrategyOutputError`): its type, shape, dtype and
    device (an exclusion (B, N) bool, a reweighting (B, N) and extra cosines (B, M) floating, an estimate (B,)
    floating, statistics scalars), its values (no NaN or +inf in its columns, a finite estimate and finite
    statistics: read once, with the loss's own finiteness), and that it changed nothing the core or another
    strategy computed (the context's tensors' version counters, unchanged by the call: a write in place is
    refused). hardmix's own strategies are sealed by identity (:meth:`~hardmix.strategies.Strategy.builtin`)
    and tested: their outputs enter as they are. A hook a strategy does not override is not called (it would
    return None). A loss made non-finite by the encoder itself (NaN or +inf similarities) is left to the
    trainer, whose message is about the learning rate.

    Args:
        ctx: the direction; ``ctx.cosines`` (B, N) over the candidates (in-batch: the positive's column
            ``ctx.positive_index[i]`` included; queue: -inf at the excluded entries),
            ``ctx.negative_mask`` (B, N) which of them are negatives, ``ctx.positive_cosines`` (B,).
        strategies: the strategies acting on this step.
        temperature: tau, which divides every column (step 3), once.
        labels: each strategy's name in the statistics and the errors (default: its name; two entries of
            one name are told apart by :class:`~hardmix.losses.ContrastiveLoss`: ``mixcse[0]``,
            ``mixcse[1]``).

    Returns:
        The scalar mean over the B anchors, reduced in float32 at least (float64 stays float64), and the
        statistics by label.
    """
    acting = [(label, s, s.kinds()) for label, s in
              zip([s.name for s in strategies] if labels is None else labels, strategies, strict=True)]
    b, n = ctx.cosines.shape
    stats: dict[str, Stats] = {}
    checks: list[Check] = []  # what the loss's one finiteness read also covers (_check_finite)
    guarded = not all(type(s).builtin() for s in strategies)
    versions = _versions(ctx) if guarded else ()

    def outputs(kind: str, expected: tuple[int | None, ...], hidden: bool = False,
                more: tuple[Tensor | float, ...] = ()) -> list[Tensor]:
        """The blocks of ``kind`` (:data:`~hardmix.strategies.base.KINDS`) the strategies hand the loss on
        this call (``ctx`` and ``more`` their arguments; None: not acting), their statistics kept; a
        plug-in's checked where it enters (``expected``: the block's shape; ``hidden``: it may not reach the
        loss whole)."""
        blocks = []
        for label, strategy, kinds in acting:
            if kind not in kinds:  # a hook a strategy does not override returns None: not called
                continue
            hook = getattr(strategy, METHODS[kind])
            if type(strategy).builtin():
                if (out := hook(ctx, *more)) is None:
                    continue
                block, own = out
                stats.setdefault(label, {}).update(own)
            else:
                name = f"strategy {label!r}: {METHODS[kind]}"
                out = _called(hook, (ctx, *more), name, ctx, versions, checks)
                if out is None and kind != "estimator":
                    continue
                block = _checked(out, name, ctx, expected, stats.setdefault(label, {}), checks, hidden)
            blocks.append(block)
            if kind == "estimator":  # one estimator at most (check_composition)
                break
        return blocks

    # 1. exclude: the exclusions united, among the negatives only
    if dropped := outputs("exclude", (b, n)):
        gone = functools.reduce(torch.logical_or, dropped) & ctx.negative_mask  # (B, N)
        excluding = [label for label, _, kinds in acting if "exclude" in kinds]
        # an anchor left with no negative has a loss of 0 (only its positive): it would train nothing
        lost = ctx.negative_mask.any(1) & ~(ctx.negative_mask & ~gone).any(1)  # (B,)
        checks.append((f"{_names(excluding)}: exclude left {{n}} of {b} anchors with no negative (anchor "
                       "{first} first): its loss would be 0 and train nothing; an exclusion must keep at "
                       "least one negative per anchor", lost, "kept", True))
        ctx = replace(ctx, negative_mask=ctx.negative_mask & ~gone,
                      cosines=ctx.cosines.masked_fill(gone, NEG_INF))
        versions = _versions(ctx) if guarded else ()
    # 2. reweight: the log-weights, summed (a masked entry never reaches the loss)
    weights = [w.masked_fill(~ctx.negative_mask, 0.0) for w in outputs("reweight", (b, n), hidden=True)]
    # 3. add columns: the extra negatives' cosines (B, M_s); every column divided by tau, here only
    estimated = any("estimator" in kinds for _, _, kinds in acting)
    extras = outputs("extra", (b, None), hidden=estimated)
    dtype = torch.promote_types(ctx.cosines.dtype, torch.float32)
    cosines = ctx.cosines.masked_fill(~ctx.negative_mask, NEG_INF) if estimated else ctx.cosines
    in_batch = ctx.mode == "in_batch" and not estimated  # each anchor's positive is one of the candidates
    positive_index = ctx.positive_index
    if in_batch and positive_index is None:
        raise ValueError("positive_index: an in-batch context names each anchor's positive column")
    first = [] if in_batch else [ctx.positive_cosines.unsqueeze(1)]
    logits = torch.cat([c.to(dtype) for c in [*first, cosines, *extras]], dim=1) / temperature
    if weights:  # added to the existing negatives' columns: [p | l + log w | X / tau]
        logits = logits + F.pad(sum(weights[1:], weights[0]).to(dtype),
                                (len(first), logits.shape[1] - len(first) - n))
    # 4. one cross-entropy over [positive | negatives | extra columns], or the estimator's loss
    if estimated:
        loss = outputs("estimator", (b,), more=(logits[:, 0], logits[:, 1:], temperature))[0].mean()
    elif positive_index is not None and in_batch:
        loss = info_nce(logits, positive_index)
    else:
        loss = info_nce(logits, torch.zeros(b, dtype=torch.long, device=logits.device))
    return (_check_finite(loss, ctx, checks) if checks else loss), stats


# One value a strategy handed the loss, for _check_finite: (what, the tensor, its rule: "logits" (no NaN, no
# +inf; -inf is an excluded entry), "finite" (an estimate, a statistic), whether it may not reach the loss).
Check = tuple[str, Tensor, str, bool]


# The context's tensors a strategy reads and must leave as they are, by field.
_FIELDS = ("anchors", "positives", "candidates", "cosines", "positive_cosines", "negative_mask",
           "positive_index")
_VIEWS = ("anchors", "all_anchors", "candidates")


def _versions(ctx: ContrastContext) -> tuple[int, ...]:
    """The version counter of each of the context's tensors (:data:`_FIELDS`, then the un-normalized
    views): a write in place, into the tensor or any view of it, increments it. Free to read; empty under
    ``torch.inference_mode`` (whose tensors keep no counter, and have no gradient to corrupt)."""
    views, index = ctx.unnormalized, ctx.positive_index
    try:
        return (ctx.anchors._version, ctx.positives._version, ctx.candidates._version, ctx.cosines._version,
                ctx.positive_cosines._version, ctx.negative_mask._version,
                -1 if index is None else index._version,
                *((-1, -1, -1) if views is None else (views.anchors._version, views.all_anchors._version,
                                                      views.candidates._version)))
    except RuntimeError:  # inference tensors track no version
        return ()


def _names(labels: Sequence[str]) -> str:
    return "strateg" + ("y " if len(labels) == 1 else "ies ") + ", ".join(repr(lb) for lb in labels)


def _digest(ctx: ContrastContext) -> Tensor:
    """(2 F,) float64: a sum and a position-weighted sum of each of the context's tensors (:data:`_FIELDS`,
    then the un-normalized views), to see a write in place that no version counter sees (through ``.data``,
    or ``torch.inference_mode``). Compared on the device, read once with the loss (:func:`_check_finite`)."""
    views = ctx.unnormalized
    tensors = [getattr(ctx, f) for f in _FIELDS]
    tensors += [None if views is None else getattr(views, v) for v in _VIEWS]
    parts = []
    for t in tensors:
        if t is None:
            parts.append(torch.zeros(2, dtype=torch.float64, device=ctx.cosines.device))
            continue
        x = t.detach().reshape(-1).to(torch.float64).nan_to_num(nan=3.0e6, posinf=2.0e6, neginf=-2.0e6)
        w = torch.arange(1, x.numel() + 1, dtype=torch.float64, device=x.device)
        parts.append(torch.stack([x.sum(), (x * w).sum()]).to(ctx.cosines.device))
    return torch.cat(parts)


def _called(hook: Callable[..., Any], args: tuple[Any, ...], name: str, ctx: ContrastContext,
            versions: tuple[int, ...], checks: list[Check] | None = None) -> Any:
    """``hook(*args)``, refused (naming it) if it wrote into one of the context's tensors: what the core or
    an earlier strategy computed, which the loss and the other strategies read after it (by their version
    counters at once; by their contents, through ``.data`` or any other route, with the loss's one read
    when ``checks`` is given, for a strategy that is not one of hardmix's built-ins: the contents' digest
    costs two float64 passes over the context per call). An exception the hook raises becomes one
    StrategyOutputError naming it."""
    owner = getattr(hook, "__self__", None)
    trusted = owner is not None and isinstance(owner, Strategy) and type(owner).builtin()
    before = None if checks is None or trusted else _digest(ctx)  # a built-in's code is hardmix's own
    try:
        out = hook(*args)
    except (StrategyOutputError, StrategyArgumentError, ConfigError):
        raise  # hardmix's own errors, already naming what they are about
    except Exception as err:  # a plug-in's own fault: one line naming the strategy and the hook
        raise StrategyOutputError(f"{name} raised {type(err).__name__}: {_one_line(err)}") from err
    if checks is not None and before is not None:
        checks.append((f"{name} wrote into the context's {{field}} in place (not through its version "
                       "counter: .data or another route): a strategy returns new tensors and never changes "
                       "what the core or another strategy computed", _digest(ctx) != before, "wrote", True))
    if versions and (now := _versions(ctx)) != versions:
        fields = (*_FIELDS, *(f"unnormalized.{v}" for v in _VIEWS))
        changed = [f for f, old, new in zip(fields, versions, now, strict=True) if old != new]
        raise StrategyOutputError(f"{name} wrote into the context's {changed[0]} in place: a strategy "
                                  "returns new tensors and never changes what the core or another strategy "
                                  "computed")
    return out


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _checked(out: Any, hook: str, ctx: ContrastContext, expected: tuple[int | None, ...], own: Stats,
             checks: list[Check], hidden: bool = False) -> Tensor:
    """A hook's result, once it is ``(tensor, statistics)`` as the loss needs it, else a StrategyOutputError
    naming the hook (never a bare torch error from inside the loss): the tensor of shape ``expected``
    (None: any size), bool for an exclusion and floating otherwise, on the logits' device; the statistics
    a mapping of names to scalars (numbers or one-element real tensors). Its statistics are added to
    ``own`` (its strategy's); its values (no NaN or +inf in logits, finite estimates and statistics) are
    appended to ``checks``, read once with the loss (:func:`_check_finite`); ``hidden``: the block may not
    reach the loss whole (a reweighting's masked entries, columns an estimator reads)."""
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
    if block.device != ctx.cosines.device:
        raise StrategyOutputError(f"{hook} returned a block on {block.device}, expected {ctx.cosines.device}")
    if not exclusion:
        rule = "finite" if estimate else "logits"
        checks.append((f"{hook} returned NaN or +inf values", block, rule, hidden))
    for key, value in block_stats.items():
        what = f"{hook}: statistic {key!r}"
        if not isinstance(key, str):
            raise StrategyOutputError(f"{what}: its name is a {type(key).__name__}, not a string")
        if isinstance(value, Tensor):
            if value.numel() != 1 or value.is_complex() or value.dtype == torch.bool:
                raise StrategyOutputError(f"{what} is a tensor of shape {tuple(value.shape)} and dtype "
                                          f"{value.dtype}, expected a real scalar")
            checks.append((f"{what} is NaN or infinite", value.detach().reshape(()), "finite", True))
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise StrategyOutputError(f"{what} is a {type(value).__name__}, expected a real scalar")
        elif not math.isfinite(value):
            checks.append((f"{what} is NaN or infinite", torch.tensor(float(value)), "finite", True))
        own[key] = value
    return block


def _check_shape(hook: str, block: Tensor, expected: tuple[int | None, ...]) -> None:
    """A hook's block has the shape the loss needs (None: any size), else a StrategyOutputError naming
    the hook (``strategy 'mochi': extra_cosines``): never a bare torch error from inside the loss."""
    shape = tuple(getattr(block, "shape", ()))
    if len(shape) != len(expected) or any(e is not None and s != e for s, e in zip(shape, expected)):
        want = ", ".join("M" if e is None else str(e) for e in expected)
        raise StrategyOutputError(f"{hook} returned a block of shape {shape}, expected ({want}"
                                  f"{',' if len(expected) == 1 else ''}): one row per anchor")


def _check_finite(loss: Tensor, ctx: ContrastContext, checks: list[Check]) -> Tensor:
    """``loss``, once it is finite and so is every value of ``checks`` that might not reach it (the
    statistics, the hidden blocks): one read, the one the loss's finiteness needed before (NaN or +inf in a
    block that reaches the loss makes the loss non-finite, so it needs no reduction of its own). Else, while
    the similarities the strategies were given are finite (no NaN, no +inf), the first value that fails
    names its strategy, its hook and what it returned: a StrategyOutputError, a defect of the strategy; a
    loss made non-finite by the encoder itself is left to the trainer, whose message is about the learning
    rate."""
    scalars = [t.to(loss.device) for _, t, rule, hidden in checks if hidden and t.dim() == 0]
    ok = torch.isfinite(torch.stack([loss.detach(), *scalars])).all() if scalars else torch.isfinite(loss)
    for _, block, rule, hidden in checks:
        if rule in ("wrote", "kept"):  # flags: a write in place, an anchor left with no negative
            ok = ok & ~block.any()
        elif hidden and block.dim() > 0:  # a block whose entries may not reach the loss
            ok = ok & (torch.isfinite(block).all() if rule == "finite" else (block < math.inf).all())
    if bool(ok):
        return loss
    fields = [*_FIELDS, *(f"unnormalized.{v}" for v in _VIEWS)]
    for what, flags, rule, _ in checks:
        if rule == "wrote" and bool(flags.any()):
            raise StrategyOutputError(what.format(field=fields[int(flags.nonzero()[0]) // 2]))
        if rule == "kept" and bool(flags.any()):
            raise StrategyOutputError(what.format(n=int(flags.sum()), first=int(flags.nonzero()[0])))
    if torch.isnan(ctx.cosines).any() or torch.isposinf(ctx.cosines).any():
        return loss
    for what, value, rule, _ in checks:
        if rule in ("wrote", "kept"):
            continue
        value = value.detach()
        bad = ~torch.isfinite(value) if rule == "finite" else torch.isnan(value) | torch.isposinf(value)
        if bool(bad.any()):
            raise StrategyOutputError(f"{what} from finite similarities: a defect of the strategy, not of "
                                      "the learning rate")
    return loss


__all__ = ["composed_direction"]
