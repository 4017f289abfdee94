"""The core's error types and the argument checks that raise them, in a module that imports nothing else of
hardmix (every part may raise them).

Example:
    >>> err = StrategyArgumentError("lam", "must be in (0, 1), got 1.5")
    >>> str(err), err.argument
    ('lam: must be in (0, 1), got 1.5', 'lam')
"""

from __future__ import annotations

import math


class ConfigError(ValueError):
    """A config value is unknown, of the wrong type or out of range. The message names the key."""


class StrategyArgumentError(ValueError):
    """A strategy argument is invalid; ``argument`` names it (``None``: the combination of arguments).

    Its text is ``"<argument>: <message>"``, so that a config loader prefixes the key path
    (``loss.strategies[0].lam``) from the attribute, never by parsing the text.
    """

    def __init__(self, argument: str | None, message: str) -> None:
        self.argument = argument
        self.message = message
        super().__init__(f"{argument}: {message}" if argument else message)


class StrategyOutputError(ValueError):
    """A strategy's hook returned what the loss cannot use (a block of the wrong shape, NaN logits from
    finite similarities); the message names the strategy and the hook."""


class RunError(RuntimeError):
    """A training run cannot go on: its loss diverged, its folder is in use, or it was asked to stop.
    The message says what happened and what to do (resume, lower the learning rate, ...)."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped at once by a signal (a second Ctrl-C): still a KeyboardInterrupt to Python code, with
    ``signal`` naming it (``SIGINT``) and a message saying how to resume."""

    def __init__(self, signal: str, message: str) -> None:
        super().__init__(message)
        self.signal = signal


def check_int(argument: str, value: object, low: int = 0) -> int:
    """``value`` as an int >= ``low``, or a StrategyArgumentError naming ``argument``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a positive" if low == 1 else "a non-negative" if low == 0 else f"an (>= {low})"
        raise StrategyArgumentError(argument, f"must be {kind} integer, got {value!r}")
    return value


def check_number(argument: str, value: object, low: float, high: float, closed: str = "()") -> float:
    """``value`` as a float in the interval ``closed`` (e.g. ``"[)"``) from low to high, or an error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise StrategyArgumentError(
            argument, f"must be a number in {closed[0]}{low:g}, {high:g}{closed[1]}, got {value!r}"
        )
    ok_low = value >= low if closed[0] == "[" else value > low
    ok_high = value <= high if closed[1] == "]" else value < high
    if not (ok_low and ok_high):
        raise StrategyArgumentError(
            argument, f"must be in {closed[0]}{low:g}, {high:g}{closed[1]}, got {value}"
        )
    return float(value)


def check_bool(argument: str, value: object, allow_none: bool = False) -> None:
    """Raise a StrategyArgumentError naming ``argument`` unless ``value`` is a bool (or None if allowed)."""
    if not (isinstance(value, bool) or (allow_none and value is None)):
        raise StrategyArgumentError(
            argument, f"must be true or false{' or null' if allow_none else ''}, got {value!r}"
        )


__all__ = [
    "ConfigError",
    "RunError",
    "RunInterrupted",
    "StrategyArgumentError",
    "StrategyOutputError",
    "check_bool",
    "check_int",
    "check_number",
]
