"""What a strategy is: a frozen dataclass of its arguments whose methods change one direction's InfoNCE
denominator, each returning its result and its statistics.

A strategy never sees an encoder, nor the temperature. It receives a :class:`ContrastContext` (unit-norm
anchors, their positives, the candidate set with the cosine similarities already computed, and which
candidates are valid negatives) and acts on the denominator in up to four ways, which the loss composes in
this order (:mod:`hardmix.losses.composition`):

1. **exclude** (:meth:`Strategy.exclude`): (B, N) bool, existing negatives to drop (suspected false
   negatives); they leave the denominator and the pool every later step draws from;
2. **reweight** (:meth:`Strategy.reweight`): (B, N) log-weights added to the existing negatives' logits;
3. **extra cosines** (:meth:`Strategy.extra_cosines`): the cosine similarities (B, M) of each anchor to its
   synthetic negatives, ``-inf`` where an entry is excluded (MixCSE, MoCHi); the loss divides them by the
   temperature with every other column;
4. **estimator** (:meth:`Strategy.estimator`): the per-anchor loss from the positive and all the negative
   logits and the temperature, replacing InfoNCE's log-sum-exp (the debiased family: DCL, HCL).

Each method returns ``None`` (it does not act on this call) or ``(result, stats)``: ``stats`` maps names to
detached scalars (0-dim tensors or floats) describing this call. Nothing is kept between calls.

Adding a strategy is one file in this package (or any module a package names under the entry-point group
``hardmix.strategies``): a frozen dataclass decorated with :func:`register_strategy`, a class attribute
``name``, its arguments as fields (``field(metadata={"help": ...})`` for ``hardmix strategies``), validated
in ``__post_init__`` with :class:`~hardmix.utils.errors.StrategyArgumentError`, and one of the four methods.

A config's spec becomes the loss's list of strategies in :mod:`hardmix.strategies.build`.

Example:
    >>> registry()["mixcse"](lam=0.3).lam
    0.3
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

Mode = Literal["in_batch", "queue"]
Stats = dict[str, Any]
KINDS = ("exclude", "reweight", "extra", "estimator")  # the ways a strategy acts, in composition order
METHODS = {"exclude": "exclude", "reweight": "reweight", "extra": "extra_cosines", "estimator": "estimator"}
ENTRY_POINT_GROUP = "hardmix.strategies"


@dataclass(frozen=True)
class UnnormalizedViews:
    """The encoder outputs before normalization, in-batch (MixCSE's ``reference`` mode mixes un-normalized
    features, as the official code does).

    Attributes:
        anchors: (B, D) the anchors' view, local rows.
        all_anchors: (N, D) the anchors' view of the whole (possibly gathered) batch.
        candidates: (N, D) the other view of the whole batch.
    """

    anchors: Tensor
    all_anchors: Tensor
    candidates: Tensor


@dataclass(frozen=True)
class ContrastContext:
    """One direction of a contrastive loss, as the strategies see it.

    Attributes:
        anchors: (B, D) unit-norm anchors (carry the gradient).
        positives: (B, D) unit-norm positive of each anchor (in-batch: the other view, with gradient;
            queue: the momentum key, detached).
        candidates: (N, D) unit-norm columns of ``cosines``. In-batch: the positives of the whole (possibly
            gathered) batch, column ``positive_index[i]`` being anchor i's positive. Queue: the queue keys
            (detached).
        cosines: (B, N) ``anchors @ candidates.T``, -inf at the entries that are not valid negatives in
            queue mode and at every excluded one.
        positive_cosines: (B,) ``anchor . positive``.
        negative_mask: (B, N) bool, True where candidate j is a valid negative of anchor i.
        mode: ``"in_batch"`` or ``"queue"``.
        step: the optimizer step.
        positive_index: (B,) column of each anchor's positive (in-batch only).
        direction: 0 for the first view as anchor, 1 for the second.
        generator: optional torch.Generator for the strategies' random draws.
        unnormalized: the un-normalized views (in-batch only).
    """

    anchors: Tensor
    positives: Tensor
    candidates: Tensor
    cosines: Tensor
    positive_cosines: Tensor
    negative_mask: Tensor
    mode: Mode
    step: int = 0
    positive_index: Tensor | None = None
    direction: int = 0
    generator: torch.Generator | None = None
    unnormalized: UnnormalizedViews | None = None

    def anchor_cosines(self) -> Tensor:
        """(B, N) ``anchors @ SG(candidates).T``: the cosines with their gradient to the anchors only (the
        cosines themselves when the candidates carry no gradient, as a queue; else one more product).
        Invalid entries are arbitrary."""
        if not self.candidates.requires_grad:
            return self.cosines
        return self.anchors @ self.candidates.detach().T

    def mixing_products(self, stop_grad: bool) -> tuple[Tensor, Tensor, Tensor]:
        """The inner products a mixture of each anchor's positive with its candidates is computed from
        (:func:`hardmix.ops.mixing.mixed_negative_cosines`): (B, 1) ``h_i . p_i``, (B, N) ``h_i . n_j`` and
        (B, N) ``p_i . n_j``. With ``stop_grad`` their gradient reaches the anchors only (as through SG on
        the mixtures); without, the loss's own cosines (invalid entries arbitrary)."""
        if stop_grad:
            with torch.no_grad():
                pos_neg = self.positives @ self.candidates.T  # (B, N) p_i . n_j
            anchor_neg = self.anchor_cosines()  # (B, N) h_i . SG(n_j)
            anchor_pos = (self.anchors * self.positives.detach()).sum(1, keepdim=True)
        else:
            pos_neg = self.positives @ self.candidates.T
            anchor_neg, anchor_pos = self.cosines, self.positive_cosines.unsqueeze(1)
        return anchor_pos, anchor_neg, pos_neg

    def selection_similarities(self) -> Tensor:
        """(B, N) cosines that rank each anchor's negatives, without gradient: the cosines when they are
        fp32 or fp64, else ``anchors . candidates`` recomputed in fp32 (bf16 ties would change a choice)."""
        with torch.no_grad():
            if self.cosines.dtype in (torch.float32, torch.float64):
                return self.cosines.detach()
            with torch.autocast(self.anchors.device.type, enabled=False):
                return self.anchors.detach().float() @ self.candidates.detach().float().T

    def fewest_negatives(self) -> int:
        """The fewest valid negatives any anchor has."""
        if self.negative_mask.numel() == 0:
            return 0
        return int(self.negative_mask.sum(dim=1).min())


@dataclass(frozen=True)
class Strategy:
    """Base class of the strategies (see the module docstring); subclasses are frozen dataclasses.

    Class attributes:
        name: the registry name.
        paper: where the method and its defaults come from.
        negatives_argument: the argument that sets :attr:`required_negatives`, for errors.
        small: arguments that fit a batch of 8 or a queue of 16 (the generic tests run every strategy so).
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    negatives_argument: ClassVar[str | None] = None
    small: ClassVar[dict[str, Any]] = {}  # arguments that fit a batch of 8 (tiny runs, the generic tests)

    def exclude(self, ctx: ContrastContext) -> tuple[Tensor, Stats] | None:
        """Existing negatives to drop, (B, N) bool (True: drop), only among ``ctx.negative_mask``."""
        return None

    def reweight(self, ctx: ContrastContext) -> tuple[Tensor, Stats] | None:
        """(B, N) log-weights added to the logits of the existing negatives (0 leaves an entry as is)."""
        return None

    def extra_cosines(self, ctx: ContrastContext) -> tuple[Tensor, Stats] | None:
        """The cosines (B, M) of each anchor to its extra negatives, -inf where excluded (the loss divides
        them by tau, as every other column)."""
        return None

    def estimator(
        self, ctx: ContrastContext, positive_logits: Tensor, negative_logits: Tensor, temperature: float
    ) -> tuple[Tensor, Stats] | None:
        """The (B,) per-anchor loss from the (B,) positive logits and the (B, C) negative logits (the
        existing negatives, then every extra column, all divided by ``temperature``; -inf where excluded).
        At most one per loss."""
        return None

    @property
    def both_directions(self) -> bool | None:
        """Whether this strategy asks for a two-direction loss (None: no preference)."""
        return None

    @property
    def direction_argument(self) -> str | None:
        """The argument, when given, that sets the in-batch loss's directions (MixCSE's ``second_direction``),
        else None: a trainer whose loss has no second direction (MoCo's queue) refuses it, naming it."""
        return None

    @property
    def required_negatives(self) -> int:
        """Valid negatives each anchor must have while the strategy acts (MoCHi: ``n_hard``); trainers
        check their batch and queue sizes against it before training."""
        return 0

    @property
    def in_batch_only(self) -> str | None:
        """The argument that makes this strategy need in-batch negatives (no queue), or None."""
        return None

    @property
    def excludes_at_most(self) -> int:
        """The most negatives per anchor :meth:`exclude` can drop, when known before training, else 0."""
        return 0

    @classmethod
    def kinds(cls) -> tuple[str, ...]:
        """Which of :data:`KINDS` this strategy acts by: the methods it overrides."""
        return tuple(k for k in KINDS if getattr(cls, METHODS[k]) is not getattr(Strategy, METHODS[k]))

    @classmethod
    def builtin(cls) -> bool:
        """Whether this class is one of hardmix's own strategies: by identity, among the classes captured
        when hardmix registered them (:data:`_BUILTINS`), never by the names a class reports. The loss
        checks the outputs of every other (:func:`~hardmix.losses.composition.composed_direction`).

        >>> lookup("mochi").builtin(), type("Mine", (lookup("mochi"),), {}).builtin()
        (True, False)
        """
        return _BUILTINS.get(cls.name) is cls

    @classmethod
    def params(cls) -> list[dataclasses.Field]:
        """The strategy's arguments (dataclass fields; ``field.metadata["help"]`` describes each)."""
        return list(dataclasses.fields(cls))

    def config(self) -> dict[str, Any]:
        """The arguments this strategy was built with (its registry name under ``name``)."""
        return {"name": self.name, **{f.name: getattr(self, f.name) for f in self.params()}}

    def at(self, step: int) -> Strategy | None:
        """The strategy of optimizer step ``step``: itself (a schedule varies it,
        :class:`hardmix.strategies.schedule.Scheduled`)."""
        return self

    def in_steps(self, steps_per_epoch: int) -> Strategy:
        """Itself: nothing is given in epochs (see :meth:`Scheduled.in_steps`)."""
        return self

    def scheduled_values(self, step: int) -> dict[str, float]:
        return {}


def arg(default: Any, help: str) -> Any:
    """A strategy argument: its default and the one line ``hardmix strategies`` shows."""
    return dataclasses.field(default=default, metadata={"help": help})


def set_field(obj: Any, name: str, value: Any) -> None:
    """Set a field of a frozen dataclass in its ``__post_init__`` (the validated, normalized value)."""
    object.__setattr__(obj, name, value)


_REGISTRY: dict[str, type[Strategy]] = {}
# hardmix's own strategies, by name: the classes themselves, captured once when the package has registered
# them (:func:`_seal_builtins`, from ``hardmix/strategies/__init__.py``). A built-in is known by identity,
# never by the names a class reports (``__module__``, ``__qualname__`` can be copied onto any class), and a
# built-in name is looked up here, never in ``_REGISTRY`` (which a plug-in could write into).
_BUILTINS: MappingProxyType[str, type[Strategy]] = MappingProxyType({})
_ENTRY_POINTS_LOADED = False
# Plug-ins that are not registered, by entry-point name: why (their distribution named). Each affects only
# its own name: one warning, and `hardmix strategies` lists it as broken.
_BROKEN: dict[str, str] = {}


class BuiltinNameError(ValueError):
    """A class other than hardmix's own claims the name of a built-in strategy."""


def register_strategy(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make ``cls`` buildable by its ``name``. A built-in's name is refused to any other
    class (by identity: whatever module and class names it reports); another name taken by another module's
    class is refused."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    check_hook_shapes(cls)
    if not cls.kinds() and cls.name != "none":
        raise ValueError(f"{cls.__name__} overrides none of exclude, reweight, extra_cosines, estimator")
    builtin = _BUILTINS.get(cls.name)
    if builtin is not None and cls is not builtin:
        raise BuiltinNameError(f"{cls.name!r} is a built-in strategy of hardmix ({builtin.__module__}); "
                               "another class cannot take its name (rename it)")
    held = _REGISTRY.get(cls.name)
    if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"a strategy named {cls.name!r} is already registered ({held.__module__})")
    _REGISTRY[cls.name] = cls
    return cls


def check_hook_shapes(cls: type[Strategy]) -> None:
    """Refuse, with one line naming the class and the hook, a strategy written for the hooks of an older
    hardmix, whose numbers the loss would take wrongly: ``extra_logits`` (logits divided by tau; the loss
    now takes cosines from ``extra_cosines`` and divides every column itself) and an ``estimator`` without
    the ``temperature`` argument.

    >>> check_hook_shapes(type("Old", (Strategy,), {"name": "old", "extra_logits": lambda s, ctx: None}))
    Traceback (most recent call last):
    ...
    ValueError: Old defines extra_logits, a hook hardmix no longer calls: return the extra negatives' ...
    """
    if callable(getattr(cls, "extra_logits", None)):
        raise ValueError(f"{cls.__name__} defines extra_logits, a hook hardmix no longer calls: return the "
                         "extra negatives' cosines (not divided by the temperature) from extra_cosines(self, "
                         "ctx); the loss divides every column by tau itself")
    estimator = cls.estimator
    if estimator is not Strategy.estimator:
        try:
            params = list(inspect.signature(estimator).parameters.values())
        except (TypeError, ValueError):  # a callable without a signature: left to the call's own error
            return
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) == 4 and not any(p.kind == p.VAR_POSITIONAL for p in params):
            raise ValueError(f"{cls.__name__}.estimator takes (ctx, positive_logits, negative_logits): "
                             "hardmix calls estimator(ctx, positive_logits, negative_logits, temperature); "
                             "add the temperature argument (ctx no longer holds it)")


def _seal_builtins() -> None:
    """Capture hardmix's own strategies (every class registered so far) as the built-ins, once: called by
    ``hardmix/strategies/__init__.py`` after it has imported them, before any plug-in can be imported (a
    plug-in imports ``hardmix.strategies.base``, which runs that package's ``__init__`` first)."""
    global _BUILTINS
    if not _BUILTINS:
        _BUILTINS = MappingProxyType(dict(_REGISTRY))


class _Classes(dict):
    """The strategy classes by name, as :func:`strategy_classes` gives them: the built-ins and what is
    registered already; a name missing (``classes[name]``) loads the plug-ins first (once), then raises
    KeyError if still unknown."""

    def __missing__(self, name: str) -> type[Strategy]:
        _load_entry_points()
        self.update({**_REGISTRY, **_BUILTINS})
        if name not in self:
            raise KeyError(name)
        return dict.__getitem__(self, name)


def strategy_classes() -> dict[str, type[Strategy]]:
    """The strategies by name for looking them up (``classes[name]``, KeyError if unknown): a built-in comes
    from the classes captured at registration (:data:`_BUILTINS`) and imports no plug-in; any other name
    loads the plug-ins first (once), so a plug-in is imported only when a name that is not built in is
    looked up."""
    return _Classes({**_REGISTRY, **_BUILTINS})


def lookup(name: str) -> type[Strategy] | None:
    """The class registered under ``name``, else None (a built-in imports no plug-in:
    :func:`strategy_classes`).

    >>> lookup("mixcse").__name__, lookup("no_such_strategy")
    ('MixCSE', None)
    """
    try:
        return strategy_classes()[name]
    except KeyError:
        return None


def _builtins_held() -> list[str]:
    """The built-in names whose registry entry is no longer the built-in (a plug-in wrote into the
    registry); restored here."""
    changed = [n for n, cls in _BUILTINS.items() if _REGISTRY.get(n) is not cls]
    _REGISTRY.update({n: _BUILTINS[n] for n in changed})
    return changed


def _load_entry_points() -> None:
    """Register the strategies that installed packages name under :data:`ENTRY_POINT_GROUP` (once). A
    plug-in is contained: one that fails to import, is not a Strategy, claims a built-in's name (by
    registering itself, by writing into the registry or through its entry point, whatever module and class
    names it reports) or names a strategy already registered is left out with one warning naming its
    entry point and distribution, and listed as broken by :func:`broken_plugins`; nothing else changes
    (the built-ins are restored if it wrote over one)."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "an unnamed distribution"
        why: str | None
        try:
            loaded = ep.load()
        except BuiltinNameError as e:
            why = f"{dist}: {ep.value}: {e}"
        except (Exception, SystemExit) as e:  # noqa: BLE001 - any error of a plug-in's import is contained,
            why = f"{dist}: {ep.value} failed to import ({type(e).__name__}: {e})"  # its exit() too
        else:
            why = _why_left_out(loaded, dist, ep.value)
        taken = _builtins_held()
        if taken and why is None:
            why = (f"{dist}: {ep.value} wrote over the built-in strategy {taken[0]!r} in the registry; a "
                   "plug-in cannot replace a built-in")
        if why is None:
            continue
        _BROKEN[ep.name] = why
        warnings.warn(f"hardmix: strategy plug-in {ep.name!r} left out: {why}", stacklevel=2)


def _why_left_out(loaded: Any, dist: str, value: str) -> str | None:
    """None once ``loaded`` (an entry point's object) is registered, else why it is left out."""
    if not (isinstance(loaded, type) and issubclass(loaded, Strategy)):
        return f"{dist}: {value} is not a hardmix Strategy"
    builtin = _BUILTINS.get(loaded.name)
    if builtin is not None:
        if loaded is builtin:  # an entry point naming hardmix's own class: nothing to add
            return None
        return (f"{dist}: {value} names the strategy {loaded.name!r}, a built-in of hardmix "
                f"({builtin.__module__}); a plug-in cannot replace a built-in (rename it)")
    if loaded.name in _REGISTRY and _REGISTRY[loaded.name] is not loaded:
        held = _REGISTRY[loaded.name]
        return (f"{dist}: {value} names the strategy {loaded.name!r}, which {held.__module__} registers "
                "already; a plug-in cannot replace a registered strategy (rename it)")
    try:
        register_strategy(loaded)
    except (ValueError, TypeError) as e:
        return f"{dist}: {value}: {e}"
    return None


def broken_plugins() -> dict[str, str]:
    """The strategy plug-ins left out (entry-point name -> why, naming the distribution)."""
    _load_entry_points()
    return dict(_BROKEN)


def available_strategies() -> list[str]:
    """Names of the registered strategies (this package's and the entry points': listing them imports the
    plug-ins), sorted."""
    _load_entry_points()
    return sorted(set(_REGISTRY) | set(_BUILTINS))


def registry() -> dict[str, type[Strategy]]:
    """The registered strategies by name (this package's and the entry points'; a copy; the built-ins as
    captured, whatever the registry holds)."""
    _load_entry_points()
    return {**_REGISTRY, **_BUILTINS}


def describe_strategies() -> str:
    """A human-readable listing of each registered strategy, its arguments, defaults and paper, then the
    plug-ins left out and why."""
    lines = []
    classes = registry()
    for name in available_strategies():
        cls = classes[name]
        lines.append(f"{name}: {(inspect.getdoc(cls) or '').splitlines()[0]}")
        lines.append(f"  paper: {cls.paper}")
        for f in cls.params():
            lines.append(f"  {f.name} = {f.default!r}  ({f.metadata.get('help', '')})")
        if not cls.params():
            lines.append("  (no parameters)")
        lines.append("")
    for name, why in broken_plugins().items():
        lines += [f"{name}: broken plug-in, not usable", f"  {why}", ""]
    return "\n".join(lines).rstrip()


__all__ = [
    "ContrastContext",
    "ENTRY_POINT_GROUP",
    "KINDS",
    "Strategy",
    "UnnormalizedViews",
    "arg",
    "available_strategies",
    "check_hook_shapes",
    "describe_strategies",
    "lookup",
    "strategy_classes",
    "register_strategy",
    "registry",
]
