"""hardmix's losses as sentence-transformers loss modules: ``MixCSELoss`` and the generic ``HardMixLoss``.

They follow sentence-transformers' loss convention: constructed with the model, called by
``SentenceTransformerTrainer`` (or ``model.fit``) with the tokenized columns of a batch of
(anchor, positive) pairs, returning a scalar. The two columns are embedded by two forward passes (two
dropout masks: with ``anchor == positive`` this is unsupervised SimCSE/MixCSE), and the loss is the core's
:class:`hardmix.losses.ContrastiveLoss` in-batch objective with any mixing strategies, so the values are
exactly hardmix's own on the same embeddings.

``gather_across_devices=True`` gathers both columns over the processes with gradients, as
``MultipleNegativesRankingLoss`` does (with the core's :func:`hardmix.ops.distributed.gather_with_grad`, the
same all-gather whose backward all-reduces the gradients and keeps this process's slice, as
``sentence_transformers.util.all_gather_with_grad``): each process's anchors then meet the whole global
batch's candidates, and with the trainer averaging gradients over processes a step equals one process
over the global batch.

Example (``tests/text/test_st_losses.py`` runs this with bert-mini)::

    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from hardmix.text.losses import MixCSELoss

    model = SentenceTransformer("google/bert_uncased_L-4_H-256_A-4")
    sentences = ["A man plays a guitar.", "A cat sleeps.", "It is raining."]
    data = Dataset.from_dict({"anchor": sentences, "positive": sentences})
    SentenceTransformerTrainer(model=model, train_dataset=data, loss=MixCSELoss(model)).train()
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from hardmix.losses import ContrastiveLoss
from hardmix.losses.contrastive import LossOutput
from hardmix.ops.distributed import gather_with_grad, is_distributed, rank_offset, world_size

_CITATION = """@inproceedings{zhang2022mixcse,
  title={Unsupervised Sentence Representation via Contrastive Learning with Mixing Negatives},
  author={Zhang, Yanzhao and Zhang, Richong and Mensah, Samuel and Liu, Xudong and Mao, Yongyi},
  booktitle={AAAI}, year={2022}
}"""


class HardMixLoss(nn.Module):
    """In-batch InfoNCE with any of hardmix's mixing strategies, as a sentence-transformers loss.

    Args:
        model: the ``SentenceTransformer`` being trained.
        strategies: a strategy name, a mapping ``{"name": ..., **params}`` or a list of them (see
            ``hardmix strategies``); None is plain InfoNCE (SimCSE, ``MultipleNegativesRankingLoss``).
        temperature: tau (SimCSE/MixCSE: 0.05, i.e. sentence-transformers' ``scale`` 20).
        both_directions: average both directions; None follows the strategies (MixCSE: both).
        gather_across_devices: gather both columns over the processes (with gradient) before the loss.

    Inputs (forward): two tokenized columns (anchor, positive) of B rows each; ``labels`` are ignored.
    Returns: the scalar loss. ``last_output`` keeps the core's :class:`LossOutput` of the last call
    (``.stats()``: positive and negative similarity and each strategy's diagnostics).

    Schedules (a strategy's warm-up or ramp) count optimizer steps once the trainer reports them:
    ``trainer.add_callback(loss.callback())`` sets :attr:`steps` to the trainer's ``global_step`` before
    each step, so gradient accumulation does not multiply them and a resumed trainer continues them.
    Without it they count the training forward calls (one per step without accumulation), and a loss
    with a schedule says so once.
    """

    def __init__(
        self,
        model: nn.Module,
        strategies: Any = None,
        temperature: float = 0.05,
        both_directions: bool | None = None,
        gather_across_devices: bool = False,
    ) -> None:
        super().__init__()
        self.model = model
        self.strategies = strategies
        self.temperature = float(temperature)
        self.gather_across_devices = bool(gather_across_devices)
        self.loss_fn = ContrastiveLoss(temperature, strategies, both_directions=both_directions)
        self.steps = 0
        self.last_output: LossOutput | None = None
        self._told_trainer = False  # the callback reports the trainer's steps
        self._warned = False

    def callback(self) -> Any:
        """A ``transformers.TrainerCallback`` that sets :attr:`steps` to the trainer's ``global_step`` at
        the start of every optimizer step (restored on resume); add it with ``trainer.add_callback``."""
        from transformers import TrainerCallback

        loss = self

        class StepsFromTrainer(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                loss.steps, loss._told_trainer = int(state.global_step), True

        return StepsFromTrainer()

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        features = list(sentence_features)
        if len(features) != 2:
            raise ValueError(f"{type(self).__name__}: takes (anchor, positive) pairs, 2 columns; the dataset "
                             f"has {len(features)} (drop the extra columns)")
        embeddings = [self.model(f)["sentence_embedding"] for f in features]
        return self.compute_loss_from_embeddings(embeddings, labels)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss of (anchor, positive) embeddings, each (B, D). A batch of one pair has no in-batch
        negative: it contributes no loss (a zero that keeps the graph), as ``MultipleNegativesRankingLoss``'s
        cross-entropy over one column does, so an epoch whose last batch holds one pair trains on."""
        z1, z2 = embeddings
        gathered = self.gather_across_devices and is_distributed() and world_size() > 1
        if z1.shape[0] * (world_size() if gathered else 1) < 2:
            self.last_output = None
            return 0.0 * (z1.sum() + z2.sum())
        if gathered:
            out = self.loss_fn.in_batch(z1, z2, gather_with_grad(z1), gather_with_grad(z2),
                                        offset=rank_offset(z1.shape[0]), step=self.steps)
        else:
            out = self.loss_fn.in_batch(z1, z2, step=self.steps)
        if torch.is_grad_enabled() and not self._told_trainer:
            self.steps += 1  # a training forward call (the schedules count these without the callback)
            if not self._warned and self.loss_fn.has_schedule():
                self._warned = True
                warnings.warn(f"{type(self).__name__}: the strategies' schedules count forward calls; add "
                              "trainer.add_callback(loss.callback()) to count optimizer steps (gradient "
                              "accumulation, resume)", stacklevel=2)
        self.last_output = out
        return out.loss

    def get_config_dict(self) -> dict[str, Any]:
        """What sentence-transformers writes into the model card."""
        return {"strategies": self.strategies, "temperature": self.temperature,
                "both_directions": self.loss_fn.both_directions,
                "gather_across_devices": self.gather_across_devices}

    @property
    def citation(self) -> str:
        return _CITATION


class MixCSELoss(HardMixLoss):
    """MixCSE (Zhang et al., AAAI 2022) as a sentence-transformers loss: in-batch InfoNCE where each
    negative also enters mixed with the anchor's positive, ``normalize(lam h'_i + (1 - lam) h'_j)``, under
    stop-gradient, in both directions (the values of :func:`hardmix.losses.mixcse_loss`).

    Args:
        model: the ``SentenceTransformer`` being trained.
        lam: the positive's weight in the mixture, in (0, 1) (paper: 0.2).
        temperature: tau (paper: 0.05).
        stop_grad: stop-gradient on the mixtures (paper); False is the "wo sg" ablation.
        second_direction: both directions averaged (paper); False is the "single" ablation.
        gather_across_devices: see :class:`HardMixLoss`.
    """

    def __init__(
        self,
        model: nn.Module,
        lam: float = 0.2,
        temperature: float = 0.05,
        stop_grad: bool = True,
        second_direction: bool = True,
        gather_across_devices: bool = False,
    ) -> None:
        super().__init__(
            model,
            strategies={"name": "mixcse", "lam": lam, "stop_grad": stop_grad,
                        "second_direction": second_direction},
            temperature=temperature,
            gather_across_devices=gather_across_devices,
        )


__all__ = ["HardMixLoss", "MixCSELoss"]
