"""The core's error types, in a module that imports nothing else of hardmix (every part may raise them).

Example:
    >>> err = StrategyArgumentError("lam", "must be in (0, 1), got 1.5")
    >>> str(err), err.argument
    ('lam: must be in (0, 1), got 1.5', 'lam')
"""

from __future__ import annotations


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


__all__ = ["ConfigError", "RunError", "RunInterrupted", "StrategyArgumentError", "StrategyOutputError"]
