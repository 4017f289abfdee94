"""What a strategy is: a function of one contrastive direction that changes the InfoNCE denominator.

A strategy never sees an encoder. It receives a :class:`ContrastContext` (unit-norm anchors, their
positives, the candidate set with the logits already computed, and which candidates are valid negatives)
and acts on the denominator in up to four ways, which the loss composes in this order:

1. **exclude** (:meth:`Strategy.excluded_negatives`): (B, N) bool, existing negatives to drop (suspected
   false negatives); they leave the denominator and the pool every later step draws from;
2. **reweight** (:meth:`Strategy.negative_log_weights`): (B, N) log-weights added to the existing
   negatives' logits;
3. **extra columns** (:meth:`Strategy.extra_logits`): synthetic negative logits (B, M), already divided by
   the temperature, ``-inf`` where an entry is excluded (MixCSE, MoCHi);
4. **estimator** (:meth:`Strategy.negative_term`): the per-anchor loss from the positive and all the
   negative logits, replacing InfoNCE's log-sum-exp (the debiased family: DCL, HCL).

:meth:`Strategy.extra_logits` is the strategy's definition: a plain implementation that builds the
objects its paper names and returns their logits. ``ContrastiveLoss(impl="plain")`` uses it, end to end.
A strategy may add a fast path, :meth:`Strategy.fast_logits` (and :meth:`Strategy.fused_in_batch`), built
from :mod:`hardmix.kernels`; the default ``impl="fast"`` uses it, and the tests check it against the plain
path, value and gradient.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import Tensor

from hardmix.errors import StrategyArgumentError

if TYPE_CHECKING:
    from hardmix.kernels.derived_logits import DerivedLogits
    from hardmix.kernels.shortcuts import LogitShortcuts

Mode = Literal["in_batch", "queue"]
KINDS = ("exclude", "reweight", "extra", "estimator")  # the ways a strategy acts, in composition order


@dataclass(frozen=True)
class UnnormalizedViews:
    """The encoder outputs before normalization, in-batch (for MixCSE's ``reference`` mode, which mixes
    un-normalized features as the official code does).

    Attributes:
        anchors: (B, D) the anchors' view, local rows.
        all_anchors: (N, D) the anchors' view of the whole (possibly gathered) batch.
        candidates: (N, D) the other view of the whole batch.
    """

    anchors: Tensor
    all_anchors: Tensor
    candidates: Tensor


@dataclass
class ContrastContext:
    """One direction of a contrastive loss, as the strategies see it.

    Attributes:
        anchors: (B, D) unit-norm anchors (carry the gradient).
        positives: (B, D) unit-norm positive of each anchor (in-batch: the other view, with gradient;
            queue: the momentum key, detached).
        candidates: (N, D) unit-norm columns of ``logits``. In-batch: the positives of the whole (possibly
            gathered) batch, so column ``positive_index[i]`` is anchor i's positive. Queue: the queue keys.
        logits: (B, N) ``anchors @ candidates.T / temperature``; in queue mode the excluded entries
            (``~negative_mask``) are -inf (they are the loss's own queue block).
        positive_logits: (B,) ``anchor . positive / temperature``.
        negative_mask: (B, N) bool, True where candidate j is a valid negative of anchor i.
        temperature: the InfoNCE temperature tau.
        mode: ``"in_batch"`` or ``"queue"``.
        step: the optimizer step (for warm-ups).
        positive_index: (B,) column of each anchor's positive in ``candidates`` (in-batch only).
        direction: 0 for the first view as anchor, 1 for the second.
        generator: optional torch.Generator for the strategies' random draws.
        unnormalized: the un-normalized views (in-batch only), see :class:`UnnormalizedViews`.
        shortcuts: what the fast kernels read besides this (stop-gradient views of the logits, what the
            mask is); None on the plain path. A plain implementation never needs it.
    """

    anchors: Tensor
    positives: Tensor
    candidates: Tensor
    logits: Tensor
    positive_logits: Tensor
    negative_mask: Tensor
    temperature: float
    mode: Mode
    step: int = 0
    positive_index: Tensor | None = None
    direction: int = 0
    generator: torch.Generator | None = None
    unnormalized: UnnormalizedViews | None = None
    shortcuts: LogitShortcuts | None = None


@dataclass(frozen=True)
class ParamInfo:
    """A strategy parameter as ``hardmix strategies`` lists it."""

    name: str
    default: Any
    help: str


class Strategy:
    """Base class of the mixing strategies. Subclasses validate their arguments in ``__init__`` and raise
    :class:`hardmix.errors.StrategyArgumentError` naming the argument.

    Class attributes:
        name: the registry name.
        paper: where the method and its defaults come from.
        params: the documented parameters.
        needs_anchor_logits: whether :meth:`fast_logits` reads ``ctx.shortcuts.anchor_logits`` (the loss
            then computes the stop-gradient view of the logits, at no extra matrix product).
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    params: ClassVar[tuple[ParamInfo, ...]] = ()
    needs_anchor_logits: ClassVar[bool] = False

    @property
    def symmetric(self) -> bool | None:
        """Whether this strategy asks for a two-direction loss (None: no preference)."""
        return None

    def extra_logits(self, ctx: ContrastContext) -> Tensor | None:
        """The definition of an extra-column strategy: extra negative logits (B, M) for this direction
        (divided by tau, -inf where excluded), or None. Written plainly, from the paper's equation;
        ``impl="plain"`` runs it."""
        return None

    def excluded_negatives(self, ctx: ContrastContext) -> Tensor | None:
        """Existing negatives to drop, (B, N) bool (True: drop), or None. Only valid negatives
        (``ctx.negative_mask``) may be dropped; the loss removes them from the denominator and from what
        the extra-column strategies see (their ``negative_mask`` and ``logits``)."""
        return None

    def negative_log_weights(self, ctx: ContrastContext) -> Tensor | None:
        """(B, N) log-weights added to the logits of the existing negatives in the denominator (0 leaves
        an entry as it is; the gradient flows through them unless detached), or None."""
        return None

    def negative_term(
        self, ctx: ContrastContext, positive_logits: Tensor, negative_logits: Tensor
    ) -> Tensor | None:
        """An estimator: the (B,) per-anchor loss from the (B,) positive logits and the (B, C) negative
        logits (the existing negatives, then every extra column; -inf where excluded), or None for
        InfoNCE's ``logsumexp([p | negatives]) - p``. At most one strategy of a loss defines it."""
        return None

    @classmethod
    def kinds(cls) -> tuple[str, ...]:
        """Which of :data:`KINDS` this strategy acts by: the methods it overrides."""
        methods = {
            "exclude": "excluded_negatives",
            "reweight": "negative_log_weights",
            "extra": "extra_logits",
            "estimator": "negative_term",
        }
        return tuple(k for k in KINDS if getattr(cls, methods[k]) is not getattr(Strategy, methods[k]))

    def fast_logits(self, ctx: ContrastContext) -> Tensor | DerivedLogits | None:
        """The same logits as :meth:`extra_logits`, faster; ``impl="fast"`` (the default) runs it.

        The default is :meth:`extra_logits` itself. Columns that are a fixed linear function of
        ``ctx.shortcuts.anchor_logits`` may be returned as a :class:`hardmix.kernels.DerivedLogits` of
        it (MoCHi's :class:`~hardmix.kernels.GatheredLogits`, MixCSE's
        :class:`~hardmix.kernels.ScaledLogits` against a queue); the loss then adds their gradient into
        the logits' gradient in place.
        """
        return self.extra_logits(ctx)

    def fused_in_batch(
        self, h1: Tensor, h2: Tensor, temperature: float, symmetric: bool
    ) -> tuple[Tensor, Tensor] | None:
        """Optional fast path: the whole one-process in-batch loss, when this is the only strategy.

        Args:
            h1: (B, D) unit-norm anchors (first view); h2: (B, D) unit-norm positives (second view).
            temperature: tau. symmetric: whether the loss averages the second direction in.

        Returns:
            ``(loss, positive_logits)`` (a scalar and the (B,) ``h1_i . h2_i / tau``, detached), equal to
            the composed path's, or None (the default) to compose the loss from :meth:`fast_logits`.
        """
        return None

    @property
    def required_negatives(self) -> int:
        """How many valid negatives each anchor must have once this strategy is active (MoCHi: its
        ``n_hard``); a trainer checks its batch and queue sizes against it before training.
        ``negatives_argument`` names the argument that sets it, for the error."""
        return 0

    negatives_argument: ClassVar[str | None] = None

    @property
    def excludes_at_most(self) -> int:
        """The most negatives per anchor :meth:`excluded_negatives` can exclude, when it is known before
        training (a top-k filter's k), else 0; a strategy that draws from the negatives left needs this
        many more (:func:`hardmix.strategies.specs.check_negatives_available`)."""
        return 0

    def diagnostics(self) -> dict[str, float]:
        """Scalars about the last call (e.g. mean similarity of synthetic negatives), for logging."""
        return {}

    def config(self) -> dict[str, Any]:
        """The arguments this strategy was built with (its registry name under ``name``)."""
        return {"name": self.name, **{p.name: getattr(self, p.name) for p in self.params}}

    def __repr__(self) -> str:
        args = ", ".join(f"{p.name}={getattr(self, p.name)!r}" for p in self.params)
        return f"{type(self).__name__}({args})"


_REGISTRY: dict[str, type[Strategy]] = {}


def register_strategy(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make ``cls`` buildable by its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if not cls.kinds() and cls.name != "none":
        raise ValueError(f"{cls.__name__} overrides none of extra_logits, excluded_negatives, "
                         "negative_log_weights, negative_term")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"a strategy named {cls.name!r} is already registered")
    _REGISTRY[cls.name] = cls
    return cls


def available_strategies() -> list[str]:
    """Names of the registered strategies, sorted."""
    return sorted(_REGISTRY)


def strategy_class(name: str) -> type[Strategy]:
    if name not in _REGISTRY:
        registered = ", ".join(available_strategies())
        raise StrategyArgumentError("name", f"unknown strategy {name!r}; registered: {registered}")
    return _REGISTRY[name]


def build_strategy(spec: str | dict[str, Any] | Strategy) -> Strategy:
    """Build a strategy from a name, a mapping ``{"name": ..., **params}`` or pass one through.

    Example:
        >>> build_strategy({"name": "mixcse", "lam": 0.2})  # doctest: +NORMALIZE_WHITESPACE
        MixCSE(lam=0.2, stop_grad=True, bidirectional=None, mode='clean', lam_end=None,
               schedule_steps=None, lam_schedule='linear')
    """
    if isinstance(spec, Strategy):
        return spec
    if isinstance(spec, str):
        return strategy_class(spec)()
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError(f"strategy: expected a name or a mapping with a 'name' key, got {spec!r}")
    params = {k: v for k, v in spec.items() if k != "name"}
    cls = strategy_class(spec["name"])
    allowed = {p.name for p in cls.params}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise StrategyArgumentError(
            unknown[0],
            f"unknown argument of strategy {spec['name']} (arguments: {', '.join(sorted(allowed))})",
        )
    return cls(**params)


def build_strategies(specs: Any) -> list[Strategy]:
    """Build a list of strategies from a name, a mapping or a list of them; ``none`` entries are dropped."""
    if specs is None:
        return []
    if isinstance(specs, (str, dict, Strategy)):
        specs = [specs]
    built = [build_strategy(s) for s in specs]
    return [s for s in built if s.name != "none"]


def describe_strategies() -> str:
    """A human-readable listing of each registered strategy, its parameters, defaults and paper."""
    lines = []
    for name in available_strategies():
        cls = _REGISTRY[name]
        lines.append(f"{name}: {(inspect.getdoc(cls) or '').splitlines()[0]}")
        lines.append(f"  paper: {cls.paper}")
        for p in cls.params:
            lines.append(f"  {p.name} = {p.default!r}  ({p.help})")
        if not cls.params:
            lines.append("  (no parameters)")
        lines.append("")
    return "\n".join(lines).rstrip()


def check_composition(strategies: Sequence[Strategy]) -> None:
    """Refuse the combinations that are not defined: two estimators; an estimator with a reweighting.

    Example:
        >>> check_composition(build_strategies([{"name": "mochi", "n_hard": 4, "n_pair": 2, "n_query": 2}]))
    """
    estimators = [s.name for s in strategies if "estimator" in s.kinds()]
    if len(estimators) > 1:
        raise StrategyArgumentError(
            "name", f"{' and '.join(estimators)} both replace the negative term of the loss; keep one"
        )
    weighting = [s.name for s in strategies if "reweight" in s.kinds()]
    if estimators and weighting:
        raise StrategyArgumentError(
            "name",
            f"{estimators[0]} is an estimator that weights the negatives itself; it does not compose with "
            f"the reweighting of {', '.join(weighting)}",
        )


def param_defaults(cls: type[Strategy]) -> dict[str, Any]:
    return {p.name: p.default for p in cls.params}


__all__ = [
    "ContrastContext",
    "KINDS",
    "UnnormalizedViews",
    "ParamInfo",
    "Strategy",
    "available_strategies",
    "build_strategies",
    "build_strategy",
    "check_composition",
    "describe_strategies",
    "register_strategy",
    "strategy_class",
]
