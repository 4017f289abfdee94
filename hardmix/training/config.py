"""The config vocabulary every task shares: sections ``train``, ``loss``, ``eval`` and ``log``.

A task's config is a dataclass with these sections (subclassed with the task's own keys) plus its
``model`` and ``data``. The same idea has the same key in every modality: ``train.max_steps``,
``train.save_steps``, ``train.batch_size``, ``train.lr``, ``train.seed``, ``train.threads``,
``train.precision``, ``train.device``, ``eval.eval_steps``, ``log.log_steps``, ``loss.temperature``,
``loss.strategies``, ``loss.queue_size``. A key of an older vocabulary gets an error saying what replaces
it (:data:`hardmix.config.old_keys.OLD_KEYS`, the one table); one rule (:func:`resume_differences`) says which
keys may differ on ``--resume``.

Configs are read by the one loader, :mod:`hardmix.config.loader` (``load_config``, ``build_config``), which
also refuses the older keys (``check_old_keys``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hardmix.config.loader import flatten_keys
from hardmix.losses.info_nce import MIN_TEMPERATURE
from hardmix.strategies.base import Strategy
from hardmix.strategies.build import build_strategies
from hardmix.strategies.spec_type import Strategies
from hardmix.utils.errors import ConfigError

Precision = Literal["auto", "fp32", "bf16", "fp16"]


@dataclass
class TrainSection:
    """The budget, the optimizer's common knobs and the machine.

    Attributes:
        batch_size: the global batch (over every process).
        lr: the learning rate (each task says how it is scaled and scheduled).
        epochs: passes over the training data.
        max_steps: stop after this many optimizer steps (the schedule is shortened to match); the budget is
            the smaller of this and ``epochs``.
        stop_after_steps: stop after this many steps *without* changing any schedule, to split a run into
            parts that ``--resume`` continues.
        seed: seeds initialization, data order and every random draw.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        precision: ``auto`` (bf16 where the hardware computes it natively, a CUDA device with bf16 or a CPU
            with AVX512-BF16 or AMX, and the task's bf16 was shown to give fp32's answers, its ``auto_bf16``;
            fp32 elsewhere; on ``--resume`` the run's own), ``fp32``, or ``bf16`` /
            ``fp16`` autocast of the encoder's forward (fp16 on CUDA only, with a gradient scaler); the loss,
            the strategies, the queue and the optimizer's state stay float32. ``config.yaml`` and
            ``results.json`` record the precision used.
        threads: torch CPU threads (null: torch's default); a resumed run is bit-exact with the same value.
        save_steps: write ``checkpoint.pt`` every this many steps (and always at the end); 0: at the end.
        max_nonfinite_steps: steps with a non-finite loss that are skipped (no update) before the run stops;
            0 stops at the first.
    """

    batch_size: int = field(default=64, metadata={"min": 2})
    lr: float = field(default=3e-5, metadata={"gt": 0.0})
    epochs: int = field(default=1, metadata={"min": 1})
    max_steps: int | None = field(default=None, metadata={"min": 1})
    stop_after_steps: int | None = field(default=None, metadata={"min": 1})
    seed: int = field(default=0, metadata={"min": 0, "max": 2**32 - 1})  # the generators' 32-bit seeds
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Precision = "auto"
    threads: int | None = field(default=None, metadata={"min": 1})
    save_steps: int = field(default=500, metadata={"min": 0})
    max_nonfinite_steps: int = field(default=0, metadata={"min": 0})

    def validate(self) -> None:
        if self.stop_after_steps is not None and self.max_steps is not None \
                and self.stop_after_steps > self.max_steps:
            raise ConfigError(f"train.stop_after_steps: {self.stop_after_steps} is beyond "
                              f"train.max_steps={self.max_steps}")


@dataclass
class LossSection:
    """The core's InfoNCE and its strategies (``hardmix strategies`` lists them).

    Attributes:
        temperature: tau.
        strategies: a list of mappings ``{name: ..., **arguments}`` (a single name or mapping is accepted;
            a warm-up or a ramp of an argument, :mod:`hardmix.strategies.schedule`); ``none`` is plain
            InfoNCE. Built when the config is read (its type, :data:`hardmix.strategies.spec_type.Strategies`;
            a section made in Python, or its default, is built here) into the strategy objects the loss
            uses (errors naming ``loss.strategies[i].<argument>``); schedules in epochs are resolved by the
            engine.
        queue_size: K, the queue of detached keys that join the negatives (0: none).
    """

    temperature: float = field(default=0.05, metadata={"min": MIN_TEMPERATURE})
    strategies: Strategies = field(default_factory=lambda: build_strategies("none"))
    queue_size: int = field(default=0, metadata={"min": 0})

    def __post_init__(self) -> None:  # a default, or a section made in Python (built ones pass through)
        self.strategies = build_strategies(self.strategies)


@dataclass
class EvalSection:
    """Model selection during training.

    Attributes:
        eval_steps: score the selection metric every this many steps (0: at the end only).
        at_end: also score after the last step.
        start: what the run scores of its starting encoder before its first step, under the protocol of
            its end (``results.json`` ``start_scores``, the control of ``learned``): ``all`` (every score
            the end has: held-out ones included), ``selection`` (the selection score only: cheap), or
            ``none`` (its ``learned`` verdict is then null). A resumed run keeps the start it measured.
    """

    eval_steps: int = field(default=0, metadata={"min": 0})
    at_end: bool = True
    start: str = field(default="all", metadata={"choices": ("all", "selection", "none")})


@dataclass
class LogSection:
    """Logging.

    Attributes:
        log_steps: a line of ``metrics.jsonl`` every this many steps (the loss averaged over them; 1: every
            step).
        diagnostics: add the core's diagnostics of the last batch to each line.
        tensorboard: also write TensorBoard events under ``DIR/tensorboard`` (needs the ``tensorboard``
            extra: ``pip install 'hardmix[tensorboard]'``).
        progress: show the progress bar (rate and ETA).
    """

    log_steps: int = field(default=10, metadata={"min": 1})
    diagnostics: bool = True
    tensorboard: bool = False
    progress: bool = True


@dataclass
class TaskConfig:
    """The base of every task's config: what the engine reads that no task specializes (``log``) and the run
    folder (``output``). A task's config subclasses it, adding its ``model`` and ``data`` sections and its
    own ``train``, ``loss`` and ``eval`` (subclasses of the sections above)."""

    log: LogSection = field(default_factory=LogSection)
    output: str = "runs/run"


#: Keys that may differ between a run and its ``--resume``: they change neither the model, the data, the
#: loss nor the seed (the budget split, checkpoint cadence, machine, evaluation and logging). A key ending
#: in "." stands for its whole section. Tasks add their own (:attr:`hardmix.training.Task.resumable_keys`).
RESUMABLE: tuple[str, ...] = (
    "output", "train.stop_after_steps", "train.save_steps", "train.threads", "train.device",
    "train.max_nonfinite_steps", "eval.", "log.",
)


#: Keys that :data:`RESUMABLE` would let change on ``--resume`` but that fix what a run's recorded numbers
#: mean, each with what it fixes: refused on ``--resume``, naming the key. Every other key that changes
#: what a number means (the model, the data and ``data.labels``, the loss, the budget, the seed) is outside
#: :data:`RESUMABLE` already. Tasks add their own (:attr:`hardmix.training.Task.meaning_keys`: the selection
#: score, the evaluation protocol).
MEANING: dict[str, str] = {
    "eval.eval_steps": "the steps the selection chooses among",
    "eval.at_end": "whether the last step is one the selection chooses among",
}


def config_differences(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two plain configs (sorted).

    Example:
        >>> config_differences({"train": {"lr": 1, "seed": 0}}, {"train": {"lr": 2, "seed": 0}})
        ['train.lr']
        >>> config_differences({"eval": {}}, {"eval": {"selection": "auto"}})  # added since, at its default
        []
    """
    from hardmix.config.old_keys import ADDED_KEYS

    out = []
    for k in sorted(set(a) | set(b)):
        key = f"{prefix}{k}"
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out.extend(config_differences(va, vb, key + "."))
        elif va != vb and not (key in ADDED_KEYS and (k not in a or k not in b)
                               and ADDED_KEYS[key] == (vb if k not in a else va)):
            out.append(key)  # a key added since, absent from the other, agrees with its default
    return out


def resume_differences(saved: dict[str, Any], now: dict[str, Any], extra: tuple[str, ...] = ()) -> list[str]:
    """The keys that differ between a run's config and its resume's and may not (see :data:`RESUMABLE`).

    ``train.precision: auto`` in ``now`` agrees with any precision the run recorded: a resume keeps it.

    >>> resume_differences({"train": {"precision": "bf16"}}, {"train": {"precision": "auto"}})
    []
    >>> resume_differences({"train": {"precision": "bf16"}}, {"train": {"precision": "fp32"}})
    ['train.precision']
    """
    allowed = RESUMABLE + tuple(extra)
    if (now.get("train") or {}).get("precision") == "auto":
        allowed += ("train.precision",)

    return [k for k in config_differences(saved, now) if not key_in(k, allowed)]


def meaning_differences(saved: dict[str, Any], now: dict[str, Any], meaning: dict[str, str],
                        same: Any = None) -> list[tuple[str, Any, Any, str]]:
    """The keys of ``meaning`` (:data:`MEANING` and a task's) whose values differ between a run's config and
    its resume's: (key, the run's value, now's, what it fixes). ``same(key, a, b)`` may say that two
    spellings mean the same (``auto`` resolved).

    >>> meaning_differences({"eval": {"eval_steps": 10, "batch_size": 8}},
    ...                     {"eval": {"eval_steps": 20, "batch_size": 16}}, MEANING)
    [('eval.eval_steps', 10, 20, 'the steps the selection chooses among')]
    """
    a, b = flatten_keys(saved), flatten_keys(now)
    out = []
    for key in config_differences(saved, now):
        if key in meaning and not (same is not None and same(key, a.get(key), b.get(key))):
            out.append((key, a.get(key), b.get(key), meaning[key]))
    return out


def key_in(key: str, patterns: Sequence[str]) -> bool:
    """Whether a dotted config key is one of ``patterns``: a key itself, or a section's prefix (``log.``).

    >>> key_in("log.progress", ("output", "log.")), key_in("eval.max_length", ("output", "log."))
    (True, False)
    """
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in patterns)


#: The order of the sections in ``config.yaml`` (others follow in their declared order).
SECTION_ORDER = ("model", "data", "augment", "loss", "train", "eval", "log", "output")


def plain_config(cfg: Any) -> dict[str, Any]:
    """The config as plain data (dicts, lists, numbers, strings), as saved in ``config.yaml``, its sections
    in :data:`SECTION_ORDER`."""
    plain = _plain(cfg)
    rank = {k: i for i, k in enumerate(SECTION_ORDER)}
    return {k: plain[k] for k in sorted(plain, key=lambda k: rank.get(k, len(rank)))}


def _plain(obj: Any) -> Any:
    """``obj`` as plain data: a strategy as its spec, a dataclass as the mapping of its fields, a tuple as a
    list, in their order. Walked here, one container at a time (a stack of what is left to copy, each with
    the container and the key it goes to), so that no section is handed to another function.

    >>> _plain({"a": (1, [2, {"b": 3}])})
    {'a': [1, [2, {'b': 3}]]}
    """
    root: list[Any] = [None]
    left: list[tuple[Any, Any, Any]] = [(obj, root, 0)]
    while left:
        value, into, key = left.pop()
        if isinstance(value, Strategy):  # its spec
            value = value.config()
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, dict):
            into[key] = dict.fromkeys(value)
            left.extend((v, into[key], k) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            into[key] = [None] * len(value)
            left.extend((v, into[key], i) for i, v in enumerate(value))
        else:
            into[key] = value
    return root[0]


__all__ = [
    "MEANING",
    "RESUMABLE",
    "EvalSection",
    "LogSection",
    "LossSection",
    "Precision",
    "TaskConfig",
    "TrainSection",
    "config_differences",
    "meaning_differences",
    "key_in",
    "plain_config",
    "resume_differences",
]
