"""Preemption: SIGTERM and SIGUSR1 (what SLURM and Kubernetes send before they stop a job) and SIGINT
(Ctrl-C) ask the run to checkpoint at the end of the current step and exit; the engine polls
:attr:`PreemptionSignals.received`. A second Ctrl-C interrupts at once."""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

#: The signals that ask a run to checkpoint and stop.
PREEMPTION_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGUSR1", None),
                                       signal.SIGINT) if s is not None)


class PreemptionSignals:
    """While active, record the first preemption signal instead of dying at once.

    Only the main thread can install handlers; elsewhere (a run started from a thread) this does nothing
    and the process keeps the default behaviour.

    Example:
        >>> import os, signal
        >>> with PreemptionSignals() as signals:
        ...     os.kill(os.getpid(), signal.SIGUSR1)
        ...     signals.received
        'SIGUSR1'
    """

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name
        if signum == signal.SIGINT:  # a second Ctrl-C stops at once
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def __enter__(self) -> PreemptionSignals:
        if threading.current_thread() is threading.main_thread():
            for s in PREEMPTION_SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)  # type: ignore[arg-type]
        self._previous.clear()


def exit_status(name: str) -> int:
    """The conventional exit status of a process stopped by signal ``name`` (128 + its number)."""
    return 128 + int(signal.Signals[name])


__all__ = ["PREEMPTION_SIGNALS", "PreemptionSignals", "exit_status"]
