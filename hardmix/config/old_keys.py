"""Every key of an older hardmix and what replaces it: the one table old keys are refused from.

A config key (``train.cpu_threads``) is refused with its entry before any other check of the config
(:func:`hardmix.config.loader.check_old_keys`); a strategy argument (``loss.strategies[].lam_end``: in any
entry of ``loss.strategies``, unless a strategy has an argument of that name) when its strategy is built
(:func:`hardmix.strategies.build.build_strategies`). Each entry says what to write instead.

Example:
    >>> OLD_KEYS["train.cpu_threads"]
    'was renamed to train.threads'
"""

from __future__ import annotations

_GENERIC = "is gone; schedules are generic: "
_LAM = "lam: {start: ..., end: ..., steps: ...}"
_COUNTS = "n_pair: {start: 0, end: ..., %s: ...} (and n_query likewise)"

#: Old key -> what the error says after it.
OLD_KEYS: dict[str, str] = {
    # the vision and text trainers' vocabularies before the shared engine
    "train.cpu_threads": "was renamed to train.threads",
    "train.amp": "was renamed to train.precision",
    "train.log_every": "was renamed to log.log_steps",
    "train.progress": "was renamed to log.progress",
    "train.save_every_epochs": "was renamed to train.save_steps",
    "model.queue_size": "was renamed to loss.queue_size",
    "eval.knn_every_epochs": "was renamed to eval.eval_steps",
    "eval.knn_final": "was renamed to eval.at_end",
    "loss.impl": "is gone: every strategy has one implementation",
    # one word for three ideas, before each had its own name
    "loss.symmetric": ("was renamed: loss.both_directions (text: the two in-batch directions) or "
                       "loss.two_queries (vision: MoCo v2+'s two-query loss)"),
    "loss.strategies[].bidirectional": "was renamed to second_direction (MixCSE's h'-anchored direction)",
    # per-paper schedule arguments, before schedules were generic
    "loss.strategies[].lam_end": _GENERIC + _LAM,
    "loss.strategies[].schedule_steps": _GENERIC + _LAM,
    "loss.strategies[].lam_schedule": _GENERIC + "shape in " + _LAM.replace("...}", "..., shape: cosine}"),
    "loss.strategies[].schedule": _GENERIC + _COUNTS % "steps",
    "loss.strategies[].ramp_steps": _GENERIC + _COUNTS % "steps",
    "loss.strategies[].ramp_epochs": _GENERIC + _COUNTS % "epochs",
}

#: The prefix of a strategy argument's entry.
STRATEGY_ARGUMENT = "loss.strategies[]."

__all__ = ["OLD_KEYS", "STRATEGY_ARGUMENT"]


#: Keys a newer hardmix added, with the default that means what a config written before them meant: a saved
#: config without such a key agrees with one holding its default (``--resume``, a comparison's finished
#: cells: :func:`hardmix.training.config.config_differences`), and a result's fingerprint leaves the key out
#: while it holds its default (:func:`hardmix.training.fingerprint.config_digest`), so records made before
#: and after the key existed pair.
ADDED_KEYS: dict[str, object] = {
    "data.text_field": "text",  # text: the column of a JSON lines, CSV, parquet or datasets corpus
    "data.labels": None,  # vision: class folders or not, detected
    "eval.selection": "auto",  # vision: the selection score, the k-NN with labels
    "eval.label_free_scores": False,  # vision: the label-free scores where they do not select
    "eval.start": "all",  # every task: the starting encoder's scores (results.json start_scores)
}
