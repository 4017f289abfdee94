"""Did the run learn? Its end against its start, and whether its contrastive task left chance.

A run scores its starting encoder before its first step under the same protocol as its final one
(``results.json`` ``start_scores``, the keys of ``final_scores``). :func:`learned_entry` is the difference on
the selection score and the verdict: ``True`` when the end is above the start, ``False`` at or below it,
``None`` where the start was not measured (a record older than ``start_scores``, or ``eval.start: none``).
Beside it, ``held_out`` is the same difference on the task's first held-out score measured at both ends
(vision's test k-NN, text's STS average): the warnings say when the two disagree.
:func:`chance_check` reads the last tenth of a run's logged steps: the task stayed at chance when the mean
loss is at least :data:`CHANCE_LOSS_FRACTION` of ln(negatives + 1) and, where a proxy accuracy is logged
(vision's ``proxy_acc``), its mean is at most :data:`CHANCE_ACCURACY_TIMES` times 1 / (negatives + 1).

>>> e = learned_entry("stsb_dev", {"stsb_dev": 60.0}, {"stsb_dev": 62.5})
>>> e["difference"], e["verdict"]
(2.5, True)
>>> learned_entry("stsb_dev", None, {"stsb_dev": 62.5})["verdict"] is None
True
>>> c = chance_check([{"step": s, "loss": 8.3, "proxy_acc": 0.0} for s in range(10)], 4096)
>>> c["at_chance"], round(c["chance_loss"], 3)
(True, 8.318)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hardmix.training.metrics import read_metrics
from hardmix.training.run_folder import METRICS
from hardmix.utils.rng import preserved_rng

#: The mean loss of the last tenth at or above this fraction of ln(negatives + 1): near chance.
CHANCE_LOSS_FRACTION = 0.9
#: The mean proxy accuracy of the last tenth at or below this many times 1 / (negatives + 1): near chance.
CHANCE_ACCURACY_TIMES = 10.0

#: What a comparison or a record says where the start was not measured.
NOT_MEASURED = "start not measured"


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def learned_entry(score: str, start: dict[str, Any] | None, end: dict[str, Any] | None,
                  alternatives: dict[str, dict[str, Any]] | None = None,
                  held_out: Sequence[str] = ()) -> dict[str, Any]:
    """``results.json`` ``learned``: the end minus the start on ``score`` (points), its interval (none for
    one run's selection score: it has no standard error) and the verdict; ``against`` adds the difference
    from each other start the task measured (text: the starting model mean-pooled). ``held_out`` names the
    task's held-out scores in order of preference: the first measured at both ends is kept as ``held_out``
    (its start, end and difference), what a selection score on a few images cannot say alone.

    >>> e = learned_entry("val", {"val": 34.0, "test": 25.0}, {"val": 30.0, "test": 36.5}, held_out=["test"])
    >>> e["verdict"], e["held_out"]["difference"]
    (False, 11.5)
    """
    s = _number((start or {}).get(score))
    e = _number((end or {}).get(score))
    diff = None if s is None or e is None else e - s
    entry: dict[str, Any] = {"score": score, "start": s, "end": e, "difference": diff, "interval": None,
                             "verdict": None if diff is None else diff > 0}
    if start is None:
        entry["why"] = NOT_MEASURED
    elif diff is None:
        entry["why"] = f"{score} not measured at the start or the end"
    for name in held_out:
        hs, he = _number((start or {}).get(name)), _number((end or {}).get(name))
        if name != score and hs is not None and he is not None:
            entry["held_out"] = {"score": name, "start": hs, "end": he, "difference": he - hs}
            break
    if alternatives:
        entry["against"] = {}
        for name, scores in alternatives.items():
            a = _number((scores or {}).get(score))
            entry["against"][name] = {"start": a, "difference": None if a is None or e is None else e - a}
    return entry


def chance_check(lines: Sequence[dict[str, Any]], negatives: int | None) -> dict[str, Any] | None:
    """Whether the contrastive task stayed at chance over the last tenth of the logged training steps
    (``metrics.jsonl`` lines holding ``loss``); None without negatives or logged steps."""
    steps = [r for r in lines if _number(r.get("loss")) is not None]
    if not negatives or negatives < 1 or not steps:
        return None
    tail = steps[-max(1, math.ceil(len(steps) / 10)):]
    chance_loss = math.log(negatives + 1)
    loss = sum(float(r["loss"]) for r in tail) / len(tail)
    accs = [float(r["proxy_acc"]) for r in tail if _number(r.get("proxy_acc")) is not None]
    acc = sum(accs) / len(accs) if accs else None
    chance_acc = 1.0 / (negatives + 1)
    at_chance = loss >= CHANCE_LOSS_FRACTION * chance_loss and \
        (acc is None or acc <= CHANCE_ACCURACY_TIMES * chance_acc)
    return {"negatives": int(negatives), "logged_steps": len(tail), "loss": loss, "chance_loss": chance_loss,
            "proxy_acc": acc, "chance_accuracy": chance_acc, "at_chance": at_chance,
            "rule": f"loss >= {CHANCE_LOSS_FRACTION} x ln(negatives + 1)"
                    + (f" and proxy_acc <= {CHANCE_ACCURACY_TIMES:g} / (negatives + 1)" if acc is not None
                       else "")}


def warnings(record: dict[str, Any]) -> list[str]:
    """The one-line warnings of a finished run: it ended at or below its start (on its selection score,
    its held-out score, or both: each said, with the other); its task stayed at chance."""
    out = []
    learned = record.get("learned") or {}
    held = learned.get("held_out") or {}
    rose = held.get("difference") is not None and held["difference"] > 0
    held_says = (f"the held-out {held['score']} went from {held['start']:.2f} to {held['end']:.2f} "
                 f"({held['difference']:+.2f})" if held.get("difference") is not None else "")
    if learned.get("verdict") is False:
        ended = (f"{learned['score']} ended at {learned['end']:.2f}, at or below its start "
                 f"{learned['start']:.2f} ({learned['difference']:+.2f})")
        out.append(f"the selection score {ended}, but {held_says}" if rose else
                   f"the run did not learn: {ended}" + (f"; {held_says}" if held_says else ""))
    elif learned.get("verdict") is True and held_says and not rose:
        out.append(f"the run did not learn on its held-out score: {held_says}, though {learned['score']} "
                   f"rose {learned['difference']:+.2f}")
    chance = record.get("chance") or {}
    if chance.get("at_chance"):
        acc = (f", proxy accuracy {chance['proxy_acc']:.4f} against chance {chance['chance_accuracy']:.4f}"
               if chance.get("proxy_acc") is not None else "")
        out.append(f"the contrastive task stayed at chance: over the last {chance['logged_steps']} logged "
                   f"steps the loss is {chance['loss']:.3f} against ln({chance['negatives']} + 1) = "
                   f"{chance['chance_loss']:.3f}{acc}")
    return out


def start_end_lines(record: dict[str, Any]) -> list[str]:
    """What ``hardmix train`` prints of the start: start, end and gain on the selection score."""
    learned = record.get("learned")
    if not isinstance(learned, dict):
        return []
    score = learned.get("score")
    if learned.get("start") is None:
        return [f"{score}: {NOT_MEASURED}"]
    if learned.get("end") is None:
        return [f"{score}: start {learned['start']:.2f}, end not measured"]
    line = (f"{score}: start {learned['start']:.2f}, end {learned['end']:.2f}, gain "
            f"{learned['difference']:+.2f} ({'learned' if learned['verdict'] else 'did not learn'})")
    for name, other in (learned.get("against") or {}).items():
        if other.get("difference") is not None:
            line += f"; against the start {name} ({other['start']:.2f}): {other['difference']:+.2f}"
    held = learned.get("held_out")
    if isinstance(held, dict) and held.get("difference") is not None:
        return [line, f"{held['score']} (held out): start {held['start']:.2f}, end {held['end']:.2f}, gain "
                      f"{held['difference']:+.2f}"]
    return [line]


def measure_start(task: Any, mode: str, say: Callable[[str], None]) -> dict[str, Any]:
    """Score the starting encoder (``task.start_scores``, every RNG restored after) as ``eval.start``'s
    ``mode`` (``all``, ``selection``) asks, say so, and return the entry the engine keeps (``start``)."""
    t0 = time.perf_counter()
    with preserved_rng():
        scores, other = task.start_scores(selection_only=mode == "selection")
    seconds = round(time.perf_counter() - t0, 3)
    metric, shown = task.selection_metric, scores.get(task.selection_metric)
    say(f"the starting encoder: {metric} {shown:.2f} ({mode}, {seconds:.1f}s)"
        if isinstance(shown, (int, float)) else f"the starting encoder: {metric} not measured ({mode})")
    return {"scores": dict(scores), "other": {k: dict(v) for k, v in other.items()}, "mode": mode,
            "seconds": seconds}


def learned_of_run(out: Path, metric: str, start: dict[str, Any] | None, final: dict[str, float],
                   negatives: int | None, held_out: Sequence[str] = ()) -> tuple[dict[str, Any],
                                                                              dict[str, Any] | None]:
    """``learned`` (end against ``start``, the engine's kept start entry, on the selection score ``metric``,
    and on the first of the ``held_out`` scores measured at both ends) and ``chance`` (did the contrastive
    task leave chance over the last tenth of the logged steps of the run in ``out``) of a finished run."""
    kept = start or {}
    learned = learned_entry(metric, kept.get("scores") if start else None, final or None,
                            kept.get("other") or None, held_out=held_out)
    try:
        lines = read_metrics(out / METRICS) if (out / METRICS).is_file() else []
    except (OSError, ValueError):
        lines = []
    return learned, chance_check(lines, negatives)


__all__ = [
    "CHANCE_ACCURACY_TIMES", "CHANCE_LOSS_FRACTION", "NOT_MEASURED", "chance_check", "learned_entry",
    "learned_of_run", "measure_start", "start_end_lines", "warnings",
]
