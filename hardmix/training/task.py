"""What a modality gives the engine: a :class:`Task`.

A task knows its model and its data; the engine (:func:`hardmix.training.engine.run_training`) knows
everything else: the run folder, checkpoints and resume, devices and processes, the loop, non-finite
losses, preemption, logging, evaluation cadence and the results record. A new modality is a new task, found
through the ``hardmix.tasks`` entry points; nothing in the core changes (``docs/architecture.md``).

The engine calls, in order: ``check`` (cheap, before anything is built or written), ``build``,
``steps_for``, ``configure_optimizers``, ``start_scores`` (the starting encoder, before the first step of a
run that starts at step 0), then each step ``train_step`` -> backward ->
``before_optimizer_step`` -> optimizer and scheduler step -> ``after_optimizer_step``; ``diagnostics`` on
logging steps; ``evaluate`` every ``eval.eval_steps`` (``on_new_best`` when the selection score improves);
``final_scores`` at the end.

What a task says about a config without building anything (its scores, the data it reads, what identifies
its data and inputs, ...) is one object, its :class:`ConfigFacts` (``Task.about(cfg)``), which the engine,
``hardmix compare`` and ``hardmix data`` ask; a modality subclasses it once and names it in
:attr:`Task.facts_class`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from hardmix.losses.contrastive import ContrastiveLoss
from hardmix.training.runtime import Runtime
from hardmix.utils.errors import ConfigError


@dataclass
class StepResult:
    """One step's forward pass, as a task returns it.

    Attributes:
        loss: the scalar loss, with its graph (the engine calls backward).
        samples: the samples the step consumed over every process (for throughput).
        stats: the core's loss statistics of the step (``LossOutput.stats()`` of the first direction),
            computed only on logging steps (a callable, so other steps pay nothing).
        extra: anything the task wants back in ``after_optimizer_step`` and ``diagnostics``.
    """

    loss: Tensor
    samples: int
    stats: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


class ConfigFacts:
    """What a task says about one of its configs, from the config and the files alone: nothing is built,
    loaded, tokenized or decoded. The engine, ``hardmix compare``, ``hardmix data`` and ``hardmix train`` ask
    it (``Task.about(cfg)``); a modality subclasses it once and names its subclass in
    :attr:`Task.facts_class`. Every method has a default, and a modality overrides those its config changes.

    Args:
        task: the task class whose config ``cfg`` is (its class attributes: :attr:`Task.selection_metric`,
            :attr:`Task.bf16_shown_for`).
        cfg: the validated config.

    >>> class Points(Task):
    ...     selection_metric = "alignment"
    >>> cfg = type("Cfg", (), {"eval": type("Eval", (), {"at_end": True, "eval_steps": 0})})
    >>> Points.about(cfg).score_names(), Points.about(cfg).held_out_scores()
    (['alignment'], [])
    """

    def __init__(self, task: type[Task], cfg: Any) -> None:
        self.task = task
        self.cfg = cfg

    # ----------------------------------------------------------------------------------- its scores
    def selection_metric(self) -> str:
        """The score that selects the model of a run of this config (:attr:`Task.selection_metric` unless
        the config chooses one, as vision's ``eval.selection``): never a held-out score."""
        return self.task.selection_metric

    def score_names(self) -> list[str]:
        """The keys ``final_scores`` will hold for this config (what ``hardmix compare`` may compare)."""
        cfg = self.cfg
        return [self.selection_metric()] if cfg.eval.at_end or cfg.eval.eval_steps else []

    def held_out_scores(self) -> list[str]:
        """The keys of ``final_scores`` for this config that no selection or tuning ever sees (test
        scores): the scores a comparison may report without labelling them as selection scores."""
        return []

    def overrides_for_scores(self, scores: list[str]) -> list[str]:
        """``key=value`` overrides that make ``final_scores`` hold ``scores`` for this config (e.g. an
        evaluation a held-out score needs); empty when it holds them already."""
        return []

    def same_meaning(self, key: str, saved: Any, now: Any) -> bool:
        """Whether a meaning key's two values (the run's, now's; this config now's) mean the same (an
        ``auto`` and what it resolves to); by default only equal values do."""
        return bool(saved == now)

    def negatives(self) -> int | None:
        """How many negatives each anchor's contrastive task has (chance: a loss of ln(negatives + 1), a
        proxy accuracy of 1 / (negatives + 1)), for the warning of a run that stayed at chance. None: not
        checked."""
        return None

    def auto_bf16(self) -> bool:
        """Whether ``train.precision: auto`` may run this config in bf16: every strategy of its
        ``loss.strategies`` is one of :attr:`Task.bf16_shown_for`, known by its class (a plug-in that
        reports a shown name is not one).

        >>> from hardmix.strategies import MixCSE, NoMixing
        >>> class Shown(Task):
        ...     bf16_shown_for = ("none",)
        >>> cfg = type("Cfg", (), {"loss": type("Loss", (), {"strategies": [NoMixing()]})})
        >>> Shown.about(cfg).auto_bf16()
        True
        >>> cfg.loss.strategies = [MixCSE()]
        >>> Shown.about(cfg).auto_bf16()
        False
        """
        from hardmix.strategies.base import lookup

        shown = {lookup(name) for name in self.task.bf16_shown_for} - {None}  # a built-in name: no plug-in
        strategies = list(self.cfg.loss.strategies)
        return bool(strategies) and all(type(s) in shown for s in strategies)

    # ------------------------------------------------------------------------------- what it reads
    def data_needs(self) -> list[tuple[str, str]]:
        """``(config key, path)`` of the data this config reads (paths as the config names them: relative
        to the data root, or absolute). ``hardmix train`` and ``hardmix compare`` fetch the missing ones
        that ``hardmix data download`` provides before anything runs (:mod:`hardmix.datasets.needs`)."""
        return []

    @classmethod
    def data_problems(cls, name: str, path: Path) -> list[str]:
        """Problems (one line each, naming the file) that this task's own loaders find in the content of
        the registered data set ``name`` at ``path`` (a degenerate evaluation set, ...): what evaluation
        and training refuse, ``hardmix data check`` refuses too. Empty: nothing to say (the default)."""
        return []

    def input_folders(self) -> dict[str, Path]:
        """The folders a run of this config reads, by the config key naming each (asked after
        :meth:`Task.check`): the run's ``--output`` may be none of them (a run written into its own model
        or image folder)."""
        return {}

    def data_fingerprint(self) -> dict[str, Any] | None:
        """What identifies the training data of this config (content digests:
        :func:`hardmix.training.fingerprint.content_digest`, which reads each file once per machine).
        ``hardmix compare`` compares it with every finished cell's record before any new cell trains; a
        run keeps it, with what its build counted (:meth:`Task.data_counts`), in its checkpoint and its
        result's fingerprint, and ``--resume`` refuses other data, naming the entries that differ. None:
        not known before building (not compared then)."""
        return None

    def input_digest(self) -> str | None:
        """A SHA-256 of what a run of this config reads beyond its training data (model files, evaluation
        sets), kept in the checkpoint (``--resume`` refuses other inputs) and the result's fingerprint: a
        result made from other inputs is another result. None: not recorded."""
        return None

    # ---------------------------------------------------------------------------------- its report
    def report(self, results: dict[str, Any]) -> str:
        """What ``hardmix train`` prints (stdout) at the end of a run of this config (``results``: its
        ``results.json``): the lines a user reads first."""
        best = results["best_score"]
        score = f"{best:.2f} at step {results['best_step']}" if best is not None else "(not evaluated)"
        return f"best {results['selection_metric']}: {score}\nrun folder: {results['run_dir']}"


#: The hooks of an older hardmix's Task that hardmix no longer calls, with what each became: most are
#: methods of its :class:`ConfigFacts` now; its state is the objects :meth:`Task.checkpointed` and
#: :meth:`Task.random_streams` name. A task that still defines one is refused when its class is made, since
#: its answer would be ignored without a word.
MOVED_HOOKS: dict[str, str] = {
    **{name: f"ConfigFacts.{name}" for name in (
        "same_meaning", "score_names", "held_out_scores", "overrides_for_scores", "negatives", "data_needs",
        "data_problems", "input_folders", "data_fingerprint", "input_digest", "report")},
    "selection_metric_for": "ConfigFacts.selection_metric", "auto_bf16_for": "ConfigFacts.auto_bf16",
    "data_fingerprint_of": "ConfigFacts.data_fingerprint", "input_digest_of": "ConfigFacts.input_digest",
    "state_dict": "Task.checkpointed", "load_state_dict": "Task.checkpointed",
    "process_state": "Task.random_streams", "load_process_state": "Task.random_streams",
}


class Task(ABC):
    """One modality: its model, data, step and evaluation.

    Class attributes:
        name: the task's name on the command line (``hardmix train NAME``) and in ``results.json``.
        config_class: the task's config dataclass (sections ``model``, ``data``, ``train``, ``loss``,
            ``eval``, ``log``, ``output``; see :mod:`hardmix.training.config`).
        facts_class: the task's :class:`ConfigFacts` subclass: what it says about a config without
            building anything (its scores, the data it reads, its data fingerprint, its report, ...).
        selection_metric: the score that selects the model and tunes it (``stsb_dev``; vision's
            validation score): never a held-out score. A task whose config chooses it says so in its
            facts (:meth:`ConfigFacts.selection_metric`); an instance holds its config's.
        default_score: the held-out score ``hardmix compare`` compares when a spec names none.
        resumable_keys: config keys beyond the engine's that may change on ``--resume``.
        meaning_keys: keys that may otherwise change on ``--resume`` (the ``eval`` section's) but fix what
            the run's recorded numbers mean (the selection score, the evaluation protocol), each with what it
            fixes: refused on ``--resume`` naming the key, beside the engine's
            (:data:`hardmix.training.config.MEANING`); :meth:`ConfigFacts.same_meaning` may accept two
            spellings of one meaning.
        keeps_best: the task keeps the model of the best evaluation (text exports it), so the final
            scores are that model's; otherwise the final model is the result.
        progress_label: the selection metric's short name on the progress bar.
        exports: the names the task writes into its run folder beside the engine's records (text:
            ``best``, the exported model); ``hardmix compare`` deletes only these (and the checkpoint)
            from a finished cell it does not keep, never anything else a folder holds.
        bf16_shown_for: the strategies (registered names) whose held-out scores on this task a committed
            comparison showed in bf16 within a point of fp32's (``configs/compare/precision.yaml``; text:
            ``none``; vision: none yet): ``train.precision: auto`` runs bf16, where the hardware computes it
            natively, only for a list of these (:meth:`ConfigFacts.auto_bf16`).

        start_depends_on_seed: whether the untrained encoder the run starts from depends on the seed (vision:
            the seed initializes the network; text: the pretrained model is loaded as it is, and the
            projection head the seed draws is not part of the evaluated encoder). Runs whose start does not
            depend on it share one measurement of it across seeds (``--start-cache``, ``--measure-start``).

    Attributes:
        facts: what the task says about its config (``Task.about(cfg)``).
        loss_fn: the core's loss, set by :meth:`build` (the engine resolves its schedules in epochs).

    Args:
        cfg: the validated config.
        runtime: the device and processes.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type] = object
    facts_class: ClassVar[type[ConfigFacts]] = ConfigFacts
    selection_metric: ClassVar[str] = ""
    default_score: ClassVar[str] = ""
    resumable_keys: ClassVar[tuple[str, ...]] = ()
    meaning_keys: ClassVar[dict[str, str]] = {}
    keeps_best: ClassVar[bool] = False
    progress_label: ClassVar[str] = "score"
    exports: ClassVar[tuple[str, ...]] = ()
    bf16_shown_for: ClassVar[tuple[str, ...]] = ()
    start_depends_on_seed: ClassVar[bool] = True
    loss_fn: ContrastiveLoss | None = None

    def __init__(self, cfg: Any, runtime: Runtime) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self.facts = type(self).about(cfg)
        self.selection_metric = self.facts.selection_metric()  # type: ignore[misc]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a task that defines a hook hardmix no longer calls on a task (:data:`MOVED_HOOKS`): its
        answer would be ignored without a word."""
        super().__init_subclass__(**kwargs)
        moved = [name for name in MOVED_HOOKS if name in vars(cls)]
        if moved:
            where = ", ".join(f"{name} -> {MOVED_HOOKS[name]}" for name in moved)
            raise ConfigError(f"task {cls.__module__}.{cls.__qualname__}: {', '.join(moved)}: hooks of an "
                              f"older hardmix, which it no longer calls; move each ({where}; a ConfigFacts "
                              "subclass is named by the task's facts_class; docs/architecture.md, 'Add a "
                              "modality')")

    @classmethod
    def about(cls, cfg: Any) -> ConfigFacts:
        """What this task says about ``cfg`` (its :attr:`facts_class`), before anything is built."""
        return cls.facts_class(cls, cfg)

    # --------------------------------------------------------------------------------- before work

    def check(self) -> None:  # noqa: B027 (optional hook)
        """Fail fast (missing files, models, evaluation data), before anything is built or written."""

    @abstractmethod
    def build(self) -> None:
        """Build the model (on ``runtime.device``), the data and the loss; data errors are raised here."""

    @abstractmethod
    def model(self) -> nn.Module:
        """The module whose state dict is the checkpoint's ``model`` (queue buffers included)."""

    def data_counts(self) -> dict[str, Any]:
        """What the build counted of the training data (after :meth:`build`; text: the corpus's sentences),
        put before the entries of :meth:`ConfigFacts.data_fingerprint` in the run's data fingerprint (the
        checkpoint's, which ``--resume`` compares whole, and the result's); empty by default."""
        return {}

    @abstractmethod
    def steps_for(self, epochs: int) -> int:
        """Optimizer steps in ``epochs`` passes over the data."""

    def epoch_at(self, step: int) -> float:
        """The (fractional) epoch after ``step`` steps, for the metrics."""
        return step / max(1, self.steps_for(1))

    @abstractmethod
    def configure_optimizers(
        self, total_steps: int
    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        """The optimizer and a per-step learning-rate scheduler for a run of ``total_steps``."""

    # -------------------------------------------------------------------------------------- a step
    @abstractmethod
    def batches(self, start: int, stop: int) -> Iterator[Any]:
        """The batches of steps ``start`` .. ``stop - 1`` (a function of the seed and the step only, so a
        resumed run sees the batches an uninterrupted one would)."""

    @abstractmethod
    def train_step(self, batch: Any, step: int) -> StepResult:
        """Forward pass and loss of step ``step`` (0-based) on ``batch``, in train mode."""

    def before_optimizer_step(self) -> None:  # noqa: B027 (optional hook)
        """After backward (gradients unscaled): e.g. clip gradients."""

    def after_optimizer_step(self, result: StepResult, step: int) -> None:  # noqa: B027 (optional hook)
        """After the update: e.g. enqueue this step's keys."""

    def diagnostics(self, result: StepResult, step: int) -> dict[str, float]:
        """Scalars about the step for ``metrics.jsonl`` (alignment, uniformity, gradient norms, ...)."""
        return {}

    # ---------------------------------------------------------------------------------- evaluation
    def evaluate(self) -> dict[str, float]:
        """Scores of the current model; must include :attr:`selection_metric`. The engine restores every
        RNG afterwards and calls it on rank 0 only."""
        return {}

    def start_scores(self, selection_only: bool) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """The starting encoder's scores (rank 0, before the first step, RNGs restored afterwards), under the
        protocol of :meth:`final_scores` and with its keys: every score the end will have, or only the
        selection score with ``selection_only`` (``eval.start: selection``). Returns them and, by name, the
        same scores of other views of the start the task holds as controls (text: ``mean pooling``).
        The default: :meth:`evaluate` (the selection scores) and no other view."""
        return self.evaluate(), {}

    def on_new_best(self, run_dir: Path, step: int, scores: dict[str, float]) -> None:  # noqa: B027
        """The selection score improved (text: export the model to ``run_dir/best``)."""

    def final_scores(self, run_dir: Path, evaluated: dict[str, float] | None) -> dict[str, float]:
        """Every score measured at the end (rank 0), given the evaluation of the resulting model (the best
        one's with :attr:`keeps_best`, else the final model's; None when it was not evaluated)."""
        return dict(evaluated or {})

    def finish(self, run_dir: Path, selected: bool) -> None:  # noqa: B027 (optional hook)
        """The run reached its budget; ``selected``: a model was chosen by evaluation (text exports the
        last model when none was)."""

    # ----------------------------------------------------------------------------------- its state
    def checkpointed(self) -> dict[str, Any]:
        """Rank 0's own state beyond the model, optimizer and RNGs, by name (after :meth:`build`): objects
        with ``state_dict()`` and ``load_state_dict()`` (text: its key queue), None for one this run does
        not have. The engine keeps their state dicts in the checkpoint and restores them on ``--resume``."""
        return {}

    def random_streams(self) -> dict[str, torch.Generator]:
        """This process's own random generators by name (after :meth:`build`; text: its strategies'
        draws): the engine gathers their states from every process into the checkpoint and gives each
        process its own back on ``--resume``."""
        return {}

    def describe(self) -> str:
        """One line that says what is trained, for the start of the run."""
        return self.name

    def info(self) -> dict[str, Any]:
        """The task's own facts for ``results.json`` ``task_info``."""
        return {}


__all__ = ["MOVED_HOOKS", "ConfigFacts", "StepResult", "Task"]
