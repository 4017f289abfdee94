"""What the engine keeps of a run across a resume (``checkpoint.pt``'s ``engine`` entry), in one object.

Its fields are written once, here: a checkpoint saves :func:`dataclasses.asdict` of it and a resume builds
it back from that mapping, so no field is named in the save or the restore.

>>> kept = EngineState(best_score=71.5, best_step=40, window_loss=3.0, window_steps=2)
>>> EngineState.from_checkpoint(kept.to_checkpoint()) == kept
True
>>> EngineState.from_checkpoint({"best_score": None, "window_steps": 3}).start is None  # an older one's
True
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class EngineState:
    """The engine's checkpointed state of a run (the model's, the optimizer's and the task's are their own).

    A field added later has a default: a checkpoint of an older hardmix, which lacks it, resumes with it.
    """

    best_score: float | None = None  # the best selection score so far (None: none evaluated)
    best_step: int | None = None
    last_score: float | None = None  # the latest selection score, and the step it was taken at
    last_score_step: int | None = None
    last_eval: dict[str, float] | None = None  # every score of the latest evaluation
    best_eval: dict[str, float] | None = None  # every score of the best one
    window_loss: float = 0.0  # the losses summed since the last metrics line, and how many
    window_steps: int = 0
    wall_seconds: float = 0.0  # training seconds of the processes accounted so far
    nonfinite: int = 0  # the steps skipped for a non-finite loss
    start: dict[str, Any] | None = None  # the starting encoder's scores (None: not measured)

    def __post_init__(self) -> None:
        self.window_loss, self.window_steps = float(self.window_loss), int(self.window_steps)
        self.wall_seconds, self.nonfinite = float(self.wall_seconds), int(self.nonfinite)

    def to_checkpoint(self, **now: Any) -> dict[str, Any]:
        """The mapping a checkpoint keeps (``now`` replaces fields with their current values)."""
        return {**asdict(self), **now}

    def scored(self, scores: dict[str, float], metric: str, step: int) -> bool:
        """Keep an evaluation of ``step`` (its selection score ``scores[metric]``); True where it is the best
        so far (a non-finite score never is).

        >>> kept = EngineState()
        >>> kept.scored({"acc": 50.0}, "acc", 10), kept.scored({"acc": 40.0}, "acc", 20), kept.best_step
        (True, False, 10)
        """
        score = float(scores[metric])
        self.last_eval, self.last_score, self.last_score_step = scores, score, step
        if math.isfinite(score) and (self.best_score is None or score > self.best_score):
            self.best_score, self.best_step, self.best_eval = score, step, scores
            return True
        return False

    def start_entries(self) -> dict[str, Any]:
        """The results record's entries of the starting encoder (``start_scores`` None: not measured)."""
        start = self.start or {}
        return {"start_scores": start.get("scores") if self.start else None,
                "start_scores_other": start.get("other") or {}, "start_seconds": start.get("seconds"),
                "start_shared_from": start.get("shared_from")}

    def late_best(self, metric: str, step: int) -> str | None:
        """The note of a run of ``step`` steps whose best score (``metric``) came in its first half and
        stands more than a point above its last: the model selected is an early one. None otherwise."""
        best, last = self.best_score, self.last_score
        if self.best_step is None or last is None or best is None or not (
                self.best_step < 0.5 * step and last < best - 1.0):
            return None
        return (f"the best {metric} ({best:.2f}) was at step {self.best_step}, long before the last step "
                f"{step} ({last:.2f}); the selected model is the one of step {self.best_step}")

    @classmethod
    def from_checkpoint(cls, kept: dict[str, Any]) -> EngineState:
        """The state a checkpoint kept; a field it lacks (an older hardmix's) takes its default, and an
        entry this hardmix does not know (a newer one's) is left aside."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in kept.items() if k in known})


class TrainingClock:
    """This process's training clock: seconds since :meth:`start` less the evaluations' (``add_eval``), not
    yet folded into :attr:`EngineState.wall_seconds` (:meth:`stop` returns them and stops the clock).

    >>> clock = TrainingClock()
    >>> clock.running(), clock.stop(samples=0), clock.samples_per_second
    (0.0, 0.0, None)
    """

    def __init__(self) -> None:
        self.started: float | None = None  # None: stopped
        self.eval_seconds = 0.0
        self.samples_per_second: float | None = None  # of the last session (None: no training time)

    def start(self) -> None:
        self.started, self.eval_seconds = time.perf_counter(), 0.0

    def add_eval(self, seconds: float) -> None:
        self.eval_seconds += seconds

    def running(self) -> float:
        """Training seconds since the start (0 once stopped)."""
        return 0.0 if self.started is None else time.perf_counter() - self.started - self.eval_seconds

    def stop(self, samples: int) -> float:
        """Stop the clock after ``samples`` training samples; returns the training seconds."""
        seconds, self.started = self.running(), None
        self.samples_per_second = samples / seconds if seconds > 0 else None
        return seconds


__all__ = ["EngineState", "TrainingClock"]
