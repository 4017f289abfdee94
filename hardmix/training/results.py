"""``results.json``: one record schema for every task, written by the engine and read by ``compare``.

Keys (``version`` 1):

===================  ====================================================================================
``task``             the task's name (``text``, ``vision``, ...)
``selection_metric`` the score that selects the model (``stsb_dev`` for text, ``val_knn_top1`` for vision)
``best_score``       the best selection score seen (None: never evaluated), at ``best_step``
``last_score``       the latest selection score, at ``last_score_step``
``final_scores``     a flat mapping of every score measured at the end (text: ``stsb_dev`` of the selected
                     model, plus the held-out ``sts_avg`` and each STS task with ``eval.final_sts``; vision:
                     ``val_knn_top1``, ``val_knn_top5`` and the held-out ``knn_top1``, ``knn_top5``,
                     ``linear_top1``); a held-out score may come with ``<score>_se``, its sampling
                     standard error in the score's units
``steps``            optimizer steps done; ``total_steps`` the run's budget; ``finished`` whether done
``interrupted``      null, or the signal that stopped the run early (``SIGTERM``, ``SIGUSR1``)
``wall_seconds``     training time over every process of the run (resumes included), evaluations excluded
``samples_per_second`` training throughput of the last process
``precision``        the precision the run used (``fp32``, ``bf16``, ``fp16``; ``train.precision: auto``
                     resolved; absent from older records, whose CPU runs were all fp32)
``seed``, ``strategies``, ``world_size``, ``versions`` (hardmix, torch, python)
``machine``          what the floats depend on beyond the config: ``cpu`` (the processor's name),
                     ``cpu_kernels`` (the instruction set PyTorch's CPU kernels dispatch to, ``AVX512``,
                     ``AVX2``, ...) and ``threads`` (torch's intra-op threads); a run repeats bitwise only
                     where all three and the versions agree (``docs/results.md``, "What reproduces
                     where"; absent from older records)
``task_info``        the task's own facts (text: the exported model and its pooling; vision: images used)
``fingerprint``      what determines the result: ``config`` (the SHA-256 of the resolved config but where and
                     how it ran and the seed: :data:`hardmix.training.fingerprint.FREE_OF_RESULT`),
                     ``data`` (the training data's fingerprint: content digests), ``inputs`` (a SHA-256
                     of the contents of the model files and evaluation sets: text; of the evaluation
                     images, by path and content: vision; as the run started with them) and ``hardmix``
                     (the version); ``hardmix compare`` tests cells together only when theirs agree, and
                     adds no cell to cells whose record does not match what it would be made from now
                     (absent from older records, whose data cannot be established)
``start_scores``     the starting encoder's scores, measured before the first step under the protocol of
                     the end (``eval.start``): the keys and units of ``final_scores`` (text: the
                     starting model with the run's pooling; vision: the seed's untrained network on the
                     same k-NN bank and queries, and the linear probe where the run has one); null where
                     not measured (``eval.start: none``, a record or checkpoint of an older hardmix)
``start_scores_other`` other views of the start, by name, with the same keys (text: ``mean pooling``)
``start_seconds``    the seconds scoring the start took (outside ``wall_seconds``)
``start_shared_from`` the file the start was read from where an earlier run of the same start measured it
                     (``--start-cache``: :mod:`hardmix.training.shared_start`); null where this run measured
                     it
``learned``          the end against the start on the selection score: ``score``, ``start``, ``end``,
                     ``difference`` (points), ``interval`` (null: one run's selection score has no
                     standard error), ``verdict`` (true: above the start; false: at or below; null: the
                     start or the end not measured, with ``why``), ``against`` (the difference from each
                     view of ``start_scores_other``); null for a run that did not finish
``chance``           whether the contrastive task stayed at chance over the last tenth of the logged steps
                     (:func:`hardmix.training.learned.chance_check`): ``negatives``, ``loss`` against
                     ``chance_loss`` = ln(negatives + 1), ``proxy_acc`` against ``chance_accuracy``,
                     ``at_chance``; null where not checked
``code``             which code ran: ``commit`` (the 40-character git commit of the hardmix checkout) and
                     ``dirty`` (its tracked files had changes), or ``commit`` null with ``checkout``
                     "not a git checkout" and the installed ``version``
                     (:func:`hardmix.utils.provenance.code_provenance`); absent from older records
===================  ====================================================================================

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> run = Path(tempfile.mkdtemp())
    >>> rec = results_record(task="text", selection_metric="stsb_dev", best_score=50.0, best_step=10,
    ...                      last_score=48.0, last_score_step=20, final_scores={"stsb_dev": 50.0},
    ...                      steps=20, total_steps=20, finished=True, interrupted=None, wall_seconds=1.5,
    ...                      samples_per_second=800.0, seed=1, strategies=[{"name": "none"}], world_size=1,
    ...                      task_info={})
    >>> _ = write_results(rec, run)
    >>> read_results(run)["final_scores"]
    {'stsb_dev': 50.0}
"""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Any

from hardmix.training.run_folder import RESULTS
from hardmix.utils.confine import write_text
from hardmix.utils.machine import machine

SCHEMA_VERSION = 1

REQUIRED_KEYS = (
    "task", "selection_metric", "best_score", "best_step", "final_scores", "steps", "wall_seconds", "seed",
    "strategies", "versions",
)


class ResultsError(ValueError):
    """A ``results.json`` is missing, unreadable, or not of this schema."""


def versions() -> dict[str, str]:
    """The versions that produced a run (hardmix, torch, python)."""
    import torch

    from hardmix.version import __version__

    return {"hardmix": __version__, "torch": str(torch.__version__), "python": platform.python_version()}


def _finite_or_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def results_record(**fields: Any) -> dict[str, Any]:
    """A results record with the schema's version and the versions of this process (non-finite scores are
    recorded as null: JSON has no NaN)."""
    from hardmix.utils.provenance import code_provenance

    record = {"version": SCHEMA_VERSION, **fields, "versions": versions(), "machine": machine(),
              "code": dict(code_provenance())}
    for key in ("best_score", "last_score"):
        record[key] = _finite_or_none(record.get(key))
    record["final_scores"] = {k: _finite_or_none(v) for k, v in (record.get("final_scores") or {}).items()}
    if isinstance(record.get("start_scores"), dict):
        record["start_scores"] = {k: _finite_or_none(v) for k, v in record["start_scores"].items()}
    return record


def write_results(record: dict[str, Any], run_dir: str | os.PathLike[str]) -> Path:
    """Write ``RUN/results.json`` atomically (inside the run folder ``run_dir``)."""
    return write_text(json.dumps(record, indent=2) + "\n", Path(run_dir) / RESULTS, run_dir)


def read_results(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a run's ``results.json`` (a run folder or the file itself)."""
    p = Path(run_dir)
    path = p / RESULTS if p.is_dir() else p
    if not path.is_file():
        raise ResultsError(f"{path}: no results record (the run has not ended yet?)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsError(f"{path}: not a readable results record ({e})") from None
    if not isinstance(record, dict) or record.get("version") != SCHEMA_VERSION:
        raise ResultsError(f"{path}: not a results record of schema version {SCHEMA_VERSION}")
    missing = [k for k in REQUIRED_KEYS if k not in record]
    if missing:
        raise ResultsError(f"{path}: results record without {', '.join(missing)}")
    return record


__all__ = ["SCHEMA_VERSION", "ResultsError", "read_results", "results_record", "versions", "write_results"]
