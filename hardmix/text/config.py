"""The config of ``hardmix train text``: YAML sections model, data, loss, train, eval, log (the engine's
vocabulary, :mod:`hardmix.training.config`, plus the text task's own keys).

Defaults are the recipe of unsupervised SimCSE (Gao et al., EMNLP 2021, Sec. 3 and Appendix A) that MixCSE
(Zhang et al., AAAI 2022, Sec. 5.1) trains with: batch 64, lr 3e-5, max length 32, one epoch, tau 0.05,
[CLS] with an MLP during training only, STS-B dev every 125 steps. Every value is checked when the config is
loaded, before any work starts; errors are :class:`hardmix.utils.errors.ConfigError` naming the key
(``train.lr``, ``loss.strategies[0].lam``).

Example:
    >>> cfg = build_text_config({"loss": {"strategies": [{"name": "mixcse", "lam": 0.2}]}})
    >>> cfg.loss.strategies, cfg.train.batch_size
    ([MixCSE(lam=0.2, stop_grad=True, second_direction=None, mode='clean')], 64)
    >>> build_text_config({"loss": {"strategies": [{"name": "mixcse", "lam": 1.5}]}})
    Traceback (most recent call last):
    ...
    hardmix.utils.errors.ConfigError: loss.strategies[0].lam: must be in (0, 1), got 1.5
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hardmix.config.loader import build_config, load_config
from hardmix.losses.info_nce import MIN_TEMPERATURE
from hardmix.text.pooling import POOLINGS
from hardmix.training.config import EvalSection as BaseEvalSection
from hardmix.training.config import LossSection as BaseLossSection
from hardmix.training.config import TaskConfig
from hardmix.training.config import TrainSection as BaseTrainSection
from hardmix.utils.errors import ConfigError


@dataclass
class ModelSection:
    """The backbone and its pooling.

    Attributes:
        name_or_path: a local Hugging Face folder (relative paths resolve against ``HARDMIX_DATA`` when
            they do not exist from the working directory) or a Hub name (needs the network or the cache).
        pooling: ``cls`` (SimCSE's MLP over [CLS] in training; the bare [CLS] at evaluation and export),
            ``cls_before_pooler``, ``avg`` or ``avg_first_last``.
        dropout: override the backbone's hidden and attention dropout (null: the backbone's own, 0.1 for
            BERT, which is SimCSE's setting). Dropout is what makes the two views differ.
    """

    name_or_path: str = "bert-base-uncased"
    pooling: str = field(default="cls", metadata={"choices": POOLINGS})
    dropout: float | None = field(default=None, metadata={"min": 0.0, "lt": 1.0})


@dataclass
class DataSection:
    """The training corpus, in the format its name says (:func:`hardmix.text.data.corpus_format`).

    Formats: plain text, one sentence a line (any other name: ``.txt``, ``.gz``; gzip is detected);
    JSON lines (``.jsonl``, ``.json``, also ``.gz``), one object a line; CSV (``.csv``) and TSV (``.tsv``,
    also ``.gz``) with a header row; parquet (``.parquet``); a folder written by ``datasets``'
    ``Dataset.save_to_disk`` (a ``DatasetDict`` folder only with one split, else name the split's folder).
    Parquet and folders need ``pip install 'hardmix[corpora]'`` (pyarrow, datasets). Blank sentences and
    nulls are skipped; any other bad record is refused naming the file and its line (or row).

    Attributes:
        train_file: the corpus file or folder (relative paths resolve against ``HARDMIX_DATA``).
            SimCSE/MixCSE: ``wiki1m_for_simcse.txt`` (1M English Wikipedia sentences).
        text_field: the key (JSON lines) or column (CSV, TSV, parquet, datasets) holding the sentence;
            plain text has none, and refuses any other value than the default ``text``.
        max_length: tokens per sentence after truncation, special tokens included (SimCSE: 32).
        dedup_batches: keep identical sentences out of one batch (they would be false negatives).
        chunk_lines: sentences tokenized at a time while reading (bounds the memory of the raw text).
    """

    train_file: str = "wiki/wiki1m_for_simcse.txt"
    text_field: str = "text"
    max_length: int = field(default=32, metadata={"min": 3})
    dedup_batches: bool = False
    chunk_lines: int = field(default=1_000, metadata={"min": 1})


@dataclass
class LossSection(BaseLossSection):
    """The core's InfoNCE and its strategies (see ``hardmix strategies``).

    Attributes:
        temperature: tau (SimCSE, MixCSE: 0.05).
        strategies: a list of mappings ``{name: ..., **params}`` (a single name or mapping is accepted);
            ``none`` is SimCSE.
        both_directions: average the two in-batch directions (z1 as anchors against z2, and z2 against
            z1); null lets the strategies decide (MixCSE's ``second_direction``: two).
        queue_size: K > 0 adds a FIFO queue of the last K detached second-view embeddings as extra
            negatives (one direction only); MoCHi then also mixes its hard negatives from the queue.
    """

    temperature: float = field(default=0.05, metadata={"min": MIN_TEMPERATURE})
    both_directions: bool | None = None


@dataclass
class TrainSection(BaseTrainSection):
    """Optimization (SimCSE's defaults through the Hugging Face Trainer: AdamW, linear decay, clip 1.0),
    besides the engine's keys (:class:`hardmix.training.TrainSection`).

    Attributes:
        batch_size: the global batch (sentences per optimizer step over all processes); SimCSE: 64.
        lr: peak learning rate; SimCSE/MixCSE BERT-base: 3e-5, BERT-large: 1e-5.
        epochs: passes over the corpus (SimCSE: 1).
        seed: seeds the model head, dropout, the data order and the strategies' draws (SimCSE: 42).
        warmup_steps: linear warm-up steps (SimCSE: 0).
        warmup_ratio: the warm-up as a fraction of the total steps (the larger of the two is used).
        weight_decay: AdamW weight decay (HF Trainer default: 0), never on biases and LayerNorm.
        adam_beta1, adam_beta2, adam_eps: AdamW's (HF Trainer defaults).
        max_grad_norm: gradient-norm clipping (HF Trainer default 1.0); 0 disables it.
    """

    batch_size: int = field(default=64, metadata={"min": 2})
    lr: float = field(default=3e-5, metadata={"gt": 0.0})
    seed: int = field(default=42, metadata={"min": 0, "max": 2**32 - 1})
    warmup_steps: int = field(default=0, metadata={"min": 0})
    warmup_ratio: float = field(default=0.0, metadata={"min": 0.0, "max": 1.0})
    weight_decay: float = field(default=0.0, metadata={"min": 0.0})
    adam_beta1: float = field(default=0.9, metadata={"min": 0.0, "lt": 1.0})
    adam_beta2: float = field(default=0.999, metadata={"min": 0.0, "lt": 1.0})
    adam_eps: float = field(default=1e-8, metadata={"gt": 0.0})
    max_grad_norm: float = field(default=1.0, metadata={"min": 0.0})


@dataclass
class EvalSection(BaseEvalSection):
    """Model selection on STS-B dev (Spearman x 100 of cosine similarity), as SimCSE's training script.

    Attributes:
        eval_steps: evaluate every this many steps (SimCSE: 125); 0: at the end only (with ``at_end``),
            or never (the last model is then exported as ``best``).
        at_end: also evaluate after the last step.
        batch_size: sentences per evaluation forward pass.
        max_length: truncation at evaluation (null: the model's limit, as SimCSE's evaluation).
        final_sts: at the end, run the STS suite (STS12-16, STS-B and SICK-R test) on the selected model:
            the held-out scores, never used for selection; they join ``results.json`` ``final_scores``
            (``sts_avg``, ``STS12``, ..., each with ``<score>_se``).
        sts_bootstrap: resamples of the test pairs behind each ``<score>_se`` of the STS suite (the
            bootstrap's standard error, :func:`hardmix.text.sts.bootstrap_se`, seed 0: the same resamples
            for every model); 0 leaves the errors out.
        sts_tasks: the tasks of that suite (null: all seven, and their average ``sts_avg``, the papers'
            headline); a subset, e.g. ``[STS-B]`` for a short run, gives those tasks' scores and no
            ``sts_avg``.
    """

    eval_steps: int = field(default=125, metadata={"min": 0})
    batch_size: int = field(default=128, metadata={"min": 1})
    max_length: int | None = field(default=None, metadata={"min": 3})
    final_sts: bool = False
    sts_bootstrap: int = field(default=1000, metadata={"min": 0})
    sts_tasks: list[str] | None = None


@dataclass
class TextConfig(TaskConfig):
    """The whole config of ``hardmix train text`` (``log`` and ``output`` are the engine's,
    :class:`hardmix.training.config.TaskConfig`).

    Attributes:
        output: the run folder (``--output`` overrides it).
    """

    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    loss: LossSection = field(default_factory=LossSection)
    train: TrainSection = field(default_factory=TrainSection)
    eval: EvalSection = field(default_factory=EvalSection)
    output: str = "runs/text"

    def validate(self) -> None:
        if not self.data.text_field.strip():
            raise ConfigError("data.text_field: must name the key or column holding the sentence, got "
                              f"{self.data.text_field!r}")
        if self.eval.sts_bootstrap == 1:
            raise ConfigError("eval.sts_bootstrap: a standard error needs at least 2 resamples (0: none)")
        if self.eval.sts_tasks is not None:
            from hardmix.text.evaluation import STS_TASKS

            chosen = self.eval.sts_tasks
            if not chosen or not set(chosen) <= set(STS_TASKS) or len(set(chosen)) < len(chosen):
                raise ConfigError(f"eval.sts_tasks: expected distinct tasks of {list(STS_TASKS)} "
                                  f"(null: all), got {chosen}")
        both_directions = _both_directions(self.loss)
        if self.loss.queue_size > 0 and both_directions:
            raise ConfigError("loss.queue_size: a queue of negatives needs a one-direction loss; set "
                              "loss.both_directions: false (and second_direction: false for mixcse)")
        for i, s in enumerate(self.loss.strategies):
            if self.loss.queue_size > 0 and s.in_batch_only:
                raise ConfigError(f"loss.strategies[{i}].{s.in_batch_only}: this setting has no queue "
                                  "(set loss.queue_size: 0)")
        # The needed negatives exist when a strategy starts: the batch's B - 1, plus what the queue holds by
        # then (a warm-up in steps).
        in_batch = self.train.batch_size - 1
        self.loss.strategies.check_setup(
            in_batch, f"the {in_batch} in-batch negatives of train.batch_size={self.train.batch_size}",
            queue_size=self.loss.queue_size, keys_per_step=self.train.batch_size)


def _both_directions(loss: LossSection) -> bool:
    """Whether the loss of this section averages both directions (the core's rule, without building the
    loss), else a ConfigError naming ``loss.both_directions``."""
    from hardmix.losses.contrastive import loss_directions

    try:
        return loss_directions({s.both_directions for s in loss.strategies}, loss.both_directions)
    except ValueError as e:
        raise ConfigError(f"loss.both_directions: {str(e).removeprefix('both_directions: ')}") from None


def build_loss(loss: LossSection) -> Any:
    """The core's :class:`~hardmix.losses.contrastive.ContrastiveLoss` of the loss section, with the
    strategies built and checked when the section was validated (handed on as they are)."""
    from hardmix.losses.contrastive import ContrastiveLoss

    return ContrastiveLoss(loss.temperature, loss.strategies, both_directions=_both_directions(loss))


def build_text_config(
    data: dict[str, Any] | None = None, overrides: list[str] | None = None
) -> TextConfig:
    """Validate a nested dict (plus ``key=value`` overrides) into a :class:`TextConfig`."""
    return build_config(TextConfig, data, overrides)


def load_text_config(path: str | os.PathLike[str], overrides: list[str] | None = None) -> TextConfig:
    """Load a YAML config (plus ``--set`` overrides); errors name the file and the key."""
    return load_config(TextConfig, path, overrides)


__all__ = [
    "DataSection",
    "EvalSection",
    "LossSection",
    "ModelSection",
    "TextConfig",
    "TrainSection",
    "build_loss",
    "build_text_config",
    "load_text_config",
]
