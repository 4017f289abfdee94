"""Schedules of any strategy: a warm-up (the strategy acts from step w on) and ramps of its numeric
arguments, one wrapper for every strategy.

In a spec, ``warmup_steps: w`` (or ``warmup_epochs``) delays the strategy, and a numeric argument given as
a mapping ramps (hardmix's option; the papers keep their arguments constant after a warm-up):

    n_pair: {start: 0, end: 512, steps: 100, shape: cosine}      # or epochs: 2 instead of steps
    v(t) = start + (end - start) r((t - w) / R),   r(p) = p (linear) or (1 - cos(pi p)) / 2 (cosine)

with p clamped to [0, 1] and R the ramp's length in optimizer steps, counted from the end of the warm-up;
an integer argument takes ``floor(v(t))``. Epochs become steps when the engine knows the steps per epoch
(:meth:`Scheduled.in_steps`). Every value the schedule can reach is validated by the strategy itself
before training (its start and end).

:func:`hardmix.strategies.build.build_strategies` builds a spec's schedule from :func:`check_warmup` and
:func:`parse_ramp`.

Example:
    >>> from hardmix.strategies.mochi import MoCHi
    >>> s = Scheduled(MoCHi(n_hard=8, n_pair=10, n_query=4), {"n_pair": Ramp(0, 10, steps=4)}, 2)
    >>> [s.at(t) is None for t in (0, 1, 2)], s.at(3).n_pair, s.at(9).n_pair
    ([True, True, False], 2, 10)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from hardmix.strategies.base import Strategy
from hardmix.utils.errors import StrategyArgumentError

SHAPES = ("linear", "cosine")
RAMP_KEYS = ("start", "end", "steps", "epochs", "shape")


@dataclass(frozen=True)
class Ramp:
    """One argument's value from ``start`` to ``end`` over ``steps`` (or ``epochs``) after the warm-up."""

    start: float
    end: float
    steps: int | None = None
    epochs: float | None = None
    shape: str = "linear"

    def at(self, t: int, integer: bool) -> float | int:
        """The value ``t`` steps after the warm-up (``steps`` must be resolved)."""
        return self.value(min(max(t / self.steps, 0.0), 1.0) if self.steps else 1.0, integer)

    def value(self, p: float, integer: bool) -> float | int:
        """The value at ramp progress ``p`` in [0, 1]."""
        r = p if self.shape == "linear" else 0.5 * (1.0 - math.cos(math.pi * p))
        value = self.start + (self.end - self.start) * r
        return math.floor(value + 1e-9) if integer else value


def parse_ramp(argument: str, spec: dict[str, Any]) -> Ramp:
    """The ramp an argument is given as (``{start, end, steps | epochs, shape}``), else a
    StrategyArgumentError naming the argument."""
    unknown = sorted(set(spec) - set(RAMP_KEYS))
    if unknown:
        raise StrategyArgumentError(
            argument, f"unknown ramp key {unknown[0]!r} (keys: {', '.join(RAMP_KEYS)})"
        )
    if "start" not in spec or "end" not in spec:
        raise StrategyArgumentError(argument, "a ramp needs start and end")
    if ("steps" in spec) == ("epochs" in spec):
        raise StrategyArgumentError(argument, "a ramp needs its length: steps or epochs (one of them)")
    if spec.get("shape", "linear") not in SHAPES:
        raise StrategyArgumentError(
            argument, f"ramp shape must be 'linear' or 'cosine', got {spec['shape']!r}"
        )
    steps, epochs = spec.get("steps"), spec.get("epochs")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise StrategyArgumentError(argument, f"ramp steps must be a positive integer, got {steps!r}")
    if epochs is not None and (
        isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not math.isfinite(epochs)
        or epochs <= 0
    ):
        raise StrategyArgumentError(argument, f"ramp epochs must be a positive number, got {epochs!r}")
    return Ramp(
        spec["start"],
        spec["end"],
        steps,
        None if epochs is None else float(epochs),
        spec.get("shape", "linear"),
    )


@dataclass(frozen=True)
class Scheduled(Strategy):
    """A strategy whose arguments depend on the optimizer step, itself a strategy: ``at(step)`` is the
    strategy of that step (None during the warm-up); ``final`` is the strategy after the warm-up and every
    ramp, and what the loss asks of the strategy before training (its name, the negatives it needs, how it
    composes) is ``final``'s."""

    final: Strategy
    ramps: dict[str, Ramp] = field(default_factory=dict)
    warmup_steps: int | None = 0
    warmup_epochs: float | None = None
    warmup_key: str = "warmup_steps"  # the key the warm-up was given under (its steps may come from epochs)

    def __post_init__(self) -> None:
        for values in self.corners():  # every corner of the ramps is a strategy the final one accepts
            self._check(values, "")

    def _value(self, argument: str, ramp: Ramp, end: bool) -> float | int:
        """``argument``'s value at the ramp's start or end, as the run takes it (an integer floored)."""
        return ramp.value(1.0 if end else 0.0, isinstance(getattr(self.final, argument), int))

    def corners(self) -> list[dict[str, float | int]]:
        """The ramped arguments' values at every corner of the ramps (each argument at its start or its
        end, as the run takes it): a linear or cosine ramp moves monotonically from start to end, so every
        value the run takes lies between a corner's; what grows with an argument (the negatives it needs,
        what it excludes) is largest at one of them. ``[{}]`` without ramps."""
        ends = [[(k, self._value(k, r, False)), (k, self._value(k, r, True))] for k, r in self.ramps.items()]
        return [dict(c) for c in itertools.product(*ends)]

    def reachable(self) -> list[Strategy]:
        """The strategy at each of :meth:`corners` (``final`` among them)."""
        return [dataclasses.replace(self.final, **v) if v else self.final for v in self.corners()]

    def _check(self, values: dict[str, float | int], when: str) -> None:
        """Refuse arguments ``values`` the strategy does not accept, naming a ramped argument."""
        try:
            dataclasses.replace(self.final, **values)
        except StrategyArgumentError as e:
            name = e.argument if e.argument in self.ramps else next(iter(self.ramps))
            shown = ", ".join(f"{k}={v}" for k, v in values.items())
            also = f" ({shown}{when})" if len(values) > 1 or when else ""
            raise StrategyArgumentError(name, f"ramp {e.message}{also}") from None

    def check_steps(self, total_steps: int) -> None:
        """Every value the ramps take in a run of ``total_steps`` optimizer steps (its epochs resolved by
        :meth:`in_steps`), step by step, is one the strategy accepts (its own checks need not be an interval:
        each distinct set of values is built once); else a StrategyArgumentError naming the argument and the
        step."""
        if not self.ramps or self.warmup_epochs is not None or self.warmup_steps is None:
            return
        last = min(total_steps, self.warmup_steps + max(r.steps or 0 for r in self.ramps.values()) + 1)
        seen = set()
        for step in range(self.warmup_steps, last):
            values = {k: r.at(step - self.warmup_steps, isinstance(getattr(self.final, k), int))
                      for k, r in self.ramps.items()}
            if (key := tuple(values.values())) not in seen:
                seen.add(key)
                self._check(values, f" at step {step}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.final.name

    @property
    def negatives_argument(self) -> str | None:  # type: ignore[override]
        return self.final.negatives_argument

    def kinds(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.final.kinds()

    @property
    def both_directions(self) -> bool | None:
        return self.final.both_directions

    @property
    def direction_argument(self) -> str | None:
        return self.final.direction_argument

    @property
    def required_negatives(self) -> int:
        """The most any value of the run needs (:meth:`reachable`): a ramp from 64 hard negatives down to
        8 needs 64 at its start."""
        return max(s.required_negatives for s in self.reachable())

    @property
    def in_batch_only(self) -> str | None:
        return next((a for a in (s.in_batch_only for s in self.reachable()) if a), None)

    @property
    def excludes_at_most(self) -> int:
        return max(s.excludes_at_most for s in self.reachable())

    def in_steps(self, steps_per_epoch: int) -> Scheduled:
        """Epochs resolved into optimizer steps, each ``round(epochs * steps_per_epoch)`` (a ramp >= 1)."""
        ramps = {
            k: r
            if r.epochs is None
            else dataclasses.replace(r, steps=max(1, round(r.epochs * steps_per_epoch)), epochs=None)
            for k, r in self.ramps.items()
        }
        warmup, key = self.warmup_steps, self.warmup_key
        if self.warmup_epochs is not None:
            warmup, key = round(self.warmup_epochs * steps_per_epoch), "warmup_epochs"
        return Scheduled(self.final, ramps, warmup, None, key)

    def at(self, step: int) -> Strategy | None:
        if self.warmup_epochs is not None or self.warmup_steps is None or \
                any(r.steps is None for r in self.ramps.values()):
            raise ValueError(f"{self.name}: a schedule in epochs needs in_steps(steps_per_epoch) first")
        if step < self.warmup_steps:
            return None
        if not self.ramps:
            return self.final
        values = {
            k: r.at(step - self.warmup_steps, isinstance(getattr(self.final, k), int))
            for k, r in self.ramps.items()
        }
        return dataclasses.replace(self.final, **values)

    def scheduled_values(self, step: int) -> dict[str, float]:
        """The ramped arguments' values at ``step`` and whether the strategy acts (for the logs)."""
        active = self.at(step)
        return {
            "active": float(active is not None),
            **{k: float(getattr(active, k)) if active else float(r.start) for k, r in self.ramps.items()},
        }

    def config(self) -> dict[str, Any]:
        out = self.final.config()
        for k, r in self.ramps.items():
            out[k] = {
                f.name: getattr(r, f.name) for f in dataclasses.fields(r) if getattr(r, f.name) is not None
            }
        if self.warmup_epochs is not None:
            out["warmup_epochs"] = self.warmup_epochs
        elif self.warmup_steps:
            out["warmup_steps"] = self.warmup_steps
        return out


def check_warmup(steps: object, epochs: object) -> tuple[int | None, float | None]:
    """A warm-up given in steps or in epochs as :class:`Scheduled` takes it, ``(warmup_steps,
    warmup_epochs)`` (``(0, None)``: none), else a StrategyArgumentError naming the key."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise StrategyArgumentError("warmup_steps", f"must be a non-negative integer, got {steps!r}")
    if epochs is None:
        return steps, None
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not math.isfinite(epochs) \
            or epochs < 0:
        raise StrategyArgumentError("warmup_epochs", f"must be a non-negative number, got {epochs!r}")
    if steps:
        raise StrategyArgumentError("warmup_epochs", "give warmup_epochs or warmup_steps, not both")
    return None, float(epochs)


__all__ = ["Ramp", "Scheduled", "check_warmup", "parse_ramp"]
