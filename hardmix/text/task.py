"""``hardmix train text``: unsupervised SimCSE / MixCSE (or any core strategy) on a transformers encoder.

The text task of the training engine (:mod:`hardmix.training`). One step (SimCSE, Gao et al. 2021;
MixCSE, Zhang et al. 2022):

1. the next global batch of the resumable order (:mod:`hardmix.text.data`), this process's slice of it;
2. one forward pass over the batch duplicated, in train mode: two dropout views z1, z2 (B, D);
3. under ``torchrun``: z1, z2 gathered from every process with gradient, so the negatives are the global
   batch; with ``loss.queue_size`` the queued second views of earlier steps join the candidates;
4. the core's :class:`~hardmix.losses.contrastive.ContrastiveLoss`; the engine does backward, then this
   task clips the gradients (AdamW with SimCSE's linear schedule, transformers'
   ``get_linear_schedule_with_warmup``).

The selection metric is STS-B dev (:func:`hardmix.text.evaluation.stsb_dev_score`), as in SimCSE's and
MixCSE's training scripts; the best model is exported to ``RUN/best/``
(:func:`hardmix.text.model.export_model`), the last one when nothing was evaluated. Its held-out scores
are the STS suite's (``eval.final_sts``): ``sts_avg`` (STS12-16, STS-B test, SICK-R), the papers'
headline, and each task's, with bootstrap standard errors (``<score>_se``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from hardmix.datasets.paths import resolve_data_path
from hardmix.losses.contrastive import ContrastiveLoss, LossOutput
from hardmix.ops.diagnostics import anchor_gradient_norm, embedding_diagnostics
from hardmix.ops.distributed import gather_no_grad, gather_with_grad, rank_offset, world_size
from hardmix.ops.queue import KeyQueue
from hardmix.text.config import TextConfig, build_loss
from hardmix.text.data import (
    BatchOrder,
    CorpusError,
    TokenizedCorpus,
    collate,
    corpus_format,
    read_corpus,
    shard,
)
from hardmix.text.model import (
    ContrastiveSentenceModel,
    export_model,
    forward_views,
    load_backbone,
    quiet_transformers,
)
from hardmix.text.model_source import model_positions, resolve_model
from hardmix.training import StepResult, Task
from hardmix.training.run_folder import BEST, CHECKPOINT, CONFIG, METRICS, RESULTS
from hardmix.training.task import ConfigFacts
from hardmix.utils.errors import ConfigError


def loss_from_views(
    loss_fn: ContrastiveLoss,
    z1: Tensor,
    z2: Tensor,
    step: int = 0,
    generator: torch.Generator | None = None,
    queue_keys: Tensor | None = None,
    gather: bool = True,
) -> LossOutput:
    """The contrastive loss of two views, over the global batch when distributed.

    Args:
        loss_fn: the core's loss.
        z1, z2: (B, D) this process's views (fp16 / bf16 are upcast: the loss is computed in fp32 or
            better).
        step: the optimizer step (strategy warm-ups).
        generator: the strategies' random draws.
        queue_keys: optional (K, D) detached second views of earlier batches, appended to the candidates
            (one-direction loss only).
        gather: gather the views of every process (False: z1, z2 are the whole batch already).
    """
    if z1.dtype in (torch.float16, torch.bfloat16):
        z1, z2 = z1.float(), z2.float()
    z1_all = z2_all = None
    offset = 0
    if gather and world_size() > 1:
        z1_all, z2_all = gather_with_grad(z1), gather_with_grad(z2)
        offset = rank_offset(z1.shape[0])
    if queue_keys is not None and queue_keys.shape[0] > 0:
        z1_all = z1 if z1_all is None else z1_all
        z2_all = torch.cat([z2 if z2_all is None else z2_all, queue_keys.to(z2.dtype)])
    return loss_fn.in_batch(z1, z2, z1_all, z2_all, offset=offset, step=step, generator=generator)


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: no weight decay on biases and LayerNorm weights (HF Trainer's rule)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _check_eval_data(cfg: TextConfig) -> None:
    if cfg.eval.eval_steps == 0 and not cfg.eval.at_end and not cfg.eval.final_sts:
        return
    from hardmix.text.senteval_data import senteval_dir

    hint = "; set eval.eval_steps: 0 and eval.at_end: false to train without model selection"
    try:
        dev = senteval_dir() / "STS" / "STSBenchmark" / "sts-dev.csv"
    except FileNotFoundError as e:
        raise ConfigError(f"eval: {e}{hint}") from None
    if not dev.is_file():
        raise ConfigError(f"eval: {dev} not found (STS-B dev, for model selection){hint}")
    # every evaluation set the run will score, read now: a degenerate one (empty, one pair, constant gold
    # scores) is refused before training, naming its file (:func:`hardmix.text.senteval_data.scorable`)
    from hardmix.text.evaluation import STS_TASKS, load_sts_suite
    from hardmix.text.senteval_data import load_stsb

    try:
        load_stsb("dev")
        if cfg.eval.final_sts:
            load_sts_suite(cfg.eval.sts_tasks or STS_TASKS)
    except (OSError, ValueError) as e:
        raise ConfigError(f"eval: {e}") from None


class TextFacts(ConfigFacts):
    """What a text config says before anything is built: its scores (``stsb_dev`` selects; the STS suite is
    held out), the model, corpus and SentEval files it reads and their digests, and its report."""

    cfg: TextConfig

    @cached_property
    def resolved_model(self) -> tuple[str, bool]:
        """``model.name_or_path`` resolved from here, as a run started here loads it: ``(path or Hub name,
        local files only)`` (:func:`hardmix.text.model_source.resolve_model`), resolved once."""
        return resolve_model(self.cfg.model.name_or_path)

    def corpus_path(self) -> Path:
        """``data.train_file`` resolved (from here, else under the data root); it must exist."""
        return resolve_data_path(self.cfg.data.train_file, must_exist=True)

    # ----------------------------------------------------------------------------------- its scores
    def score_names(self) -> list[str]:
        """``stsb_dev`` when the run evaluates, and with ``eval.final_sts`` the held-out STS suite (each
        with ``<score>_se`` besides, when ``eval.sts_bootstrap``)."""
        e = self.cfg.eval
        names = ["stsb_dev"] if e.at_end or e.eval_steps else []
        if e.final_sts:
            names += self.held_out_scores()
        return names

    def held_out_scores(self) -> list[str]:
        """``sts_avg`` and each STS task (``STS12`` .. ``STS16``, ``STS-B``, ``SICK-R``: test pairs, never
        selected on), or only the tasks of ``eval.sts_tasks`` when it names a subset (no average then);
        whether this config computes them: :meth:`overrides_for_scores`."""
        from hardmix.text.evaluation import STS_TASKS

        chosen = self.cfg.eval.sts_tasks
        if chosen is not None and set(chosen) != set(STS_TASKS):
            return [t for t in STS_TASKS if t in chosen]
        return ["sts_avg", *STS_TASKS]

    def overrides_for_scores(self, scores: list[str]) -> list[str]:
        """``eval.final_sts=true`` when ``scores`` holds an STS score (or its ``_se``) and the config does
        not run the suite."""
        held = set(self.held_out_scores())
        wanted = {s.removesuffix("_se") for s in scores}
        return ["eval.final_sts=true"] if wanted & held and not self.cfg.eval.final_sts else []

    def negatives(self) -> int:
        """In-batch: the other sentences of the global batch, and the queued keys."""
        return self.cfg.train.batch_size - 1 + self.cfg.loss.queue_size

    # ------------------------------------------------------------------------------- what it reads
    def data_needs(self) -> list[tuple[str, str]]:
        cfg = self.cfg
        needs = [("model.name_or_path", cfg.model.name_or_path), ("data.train_file", cfg.data.train_file)]
        if cfg.eval.eval_steps or cfg.eval.at_end or cfg.eval.final_sts:
            needs.append(("eval", "senteval"))
        return needs

    @classmethod
    def data_problems(cls, name: str, path: Path) -> list[str]:
        """SentEval's STS sets read by the loaders that training's selection and ``hardmix eval text``
        read them with: a degenerate one (no pair or one, constant gold scores, a pair with an empty side,
        a line that does not parse) is one line naming its file."""
        if name != "senteval":
            return []
        from hardmix.text.senteval_data import STS_SUBSETS, load_sickr, load_sts_year, load_stsb

        problems: list[str] = []
        splits = ("train", "dev", "test")
        loads = [lambda t=t: load_sts_year(t, path) for t in STS_SUBSETS]
        loads += [lambda s=s, f=f: f(s, path) for f in (load_stsb, load_sickr) for s in splits]
        for load in loads:
            try:
                load()
            except (OSError, ValueError) as e:
                problems.append(str(e).splitlines()[0] if str(e) else type(e).__name__)
        return problems

    def input_folders(self) -> dict[str, Path]:
        folders = {"model.name_or_path": Path(str(self.resolved_model[0])),
                   "data.train_file": self.corpus_path()}
        return {key: path for key, path in folders.items() if path.is_dir()}

    def data_fingerprint(self) -> dict[str, Any]:
        """The SHA-256 of the corpus file; of a ``save_to_disk`` folder, of its data files' contents
        (``data-*.arrow``: not its JSON files, whose ``datasets`` fingerprints change at each save, nor the
        ``cache-*.arrow`` that ``datasets`` may add beside them). The sentence count needs the tokenizer:
        the run adds it (:meth:`TextTask.data_counts`)."""
        return {"corpus sha256": _corpus_digest(self.corpus_path())}

    def input_digest(self) -> str:
        """The contents of the model's files (the folder :attr:`resolved_model` names) and of the STS files
        the run scores on."""
        return _inputs_digest(self.resolved_model[0], self.cfg)

    # ---------------------------------------------------------------------------------- its report
    def report(self, results: dict[str, Any]) -> str:
        info = results["task_info"]
        dev = results["best_score"]
        best = info["best_dir"]
        if best is None:
            model = "(not exported: the run stopped early)"
        else:
            model = best if Path(best).is_dir() else f"not kept ({best} is not there)"
        lines = [f"model: {model}",
                 f"best STS-B dev: {dev:.2f} at step {results['best_step']}" if dev is not None
                 else "best STS-B dev: (not evaluated)"]
        if "sts_avg" in results["final_scores"]:
            lines.append(f"STS average of the selected model: {results['final_scores']['sts_avg']:.2f}")
        held = [name for name in (CONFIG, METRICS, RESULTS, CHECKPOINT, f"{BEST}/")
                if (Path(results["run_dir"]) / name).exists()]
        lines.append(f"run folder: {results['run_dir']} ({', '.join(held)})")
        return "\n".join(lines)


class TextTask(Task):
    """Sentence encoders: SimCSE's two dropout views, any strategy of the core, STS-B dev selection."""

    name = "text"
    start_depends_on_seed = False  # the pretrained model as it is; the seed draws only the projection head
    config_class = TextConfig
    facts_class = TextFacts
    selection_metric = "stsb_dev"
    default_score = "sts_avg"
    progress_label = "dev"
    keeps_best = True
    exports = (BEST,)
    meaning_keys = {
        "eval.max_length": "the truncation of the STS-B dev sentences the selection score is computed on",
        "eval.sts_tasks": "the tasks of the STS suite and their average sts_avg",
        "eval.sts_bootstrap": "the resamples behind each <score>_se",
    }
    # compare_precision: SimCSE's bf16 - fp32 on the held-out STS average lies inside +-1 point; the other
    # strategies' bf16 is not shown yet (docs/results.md, "bf16 against fp32")
    bf16_shown_for = ("none",)

    cfg: TextConfig
    facts: TextFacts

    def check(self) -> None:
        cfg = self.cfg
        self.model_source, self.local_only = self.facts.resolved_model
        positions = model_positions(self.model_source, self.local_only)
        if positions is not None and cfg.data.max_length > positions:
            raise ConfigError(f"data.max_length: {cfg.data.max_length} is beyond the {positions} token "
                              f"positions of the model {cfg.model.name_or_path} (max_position_embeddings); "
                              "lower it")
        try:
            self.corpus_path = self.facts.corpus_path()
        except FileNotFoundError as e:
            raise FileNotFoundError(f"data.train_file: {e}") from None
        corpus_format(self.corpus_path, cfg.data.text_field)  # a folder, a text_field, a library: refused now
        _check_eval_data(cfg)
        self.loss_fn = build_loss(cfg.loss)

    def build(self) -> None:
        cfg, rt = self.cfg, self.runtime
        backbone, tokenizer = load_backbone(self.model_source, cfg.model.dropout, self.local_only)
        self.net = ContrastiveSentenceModel(backbone, cfg.model.pooling, tokenizer).to(rt.device)
        self.with_tt = "token_type_ids" in getattr(tokenizer, "model_input_names", ())
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        t0 = time.perf_counter()
        self.corpus: TokenizedCorpus = read_corpus(self.corpus_path, tokenizer, cfg.data.max_length,
                                                   cfg.data.chunk_lines, cfg.data.text_field)
        rt.say(f"corpus {self.corpus.path}: {len(self.corpus):,} sentences, {self.corpus.num_tokens:,} "
               f"tokens ({self.corpus.nbytes / 2**20:.1f} MiB), read in {time.perf_counter() - t0:.1f}s")
        keys = self.corpus.keys() if cfg.data.dedup_batches else None
        try:
            self.order = BatchOrder(len(self.corpus), cfg.train.batch_size, cfg.train.seed, keys)
        except CorpusError as e:
            raise CorpusError(f"{self.corpus.path}: {e}") from None
        self.queue = (KeyQueue(cfg.loss.queue_size, self.net.dim, random_init=False).to(rt.device)
                      if cfg.loss.queue_size > 0 else None)
        self.generator = torch.Generator(device=rt.device)
        self.generator.manual_seed(cfg.train.seed * 1000 + 17 + rt.rank)
        self.forward_net = rt.ddp(self.net)

    def model(self) -> nn.Module:
        return self.net

    def data_counts(self) -> dict[str, Any]:
        """The corpus's sentences (the tokenizer's count, beside :meth:`TextFacts.data_fingerprint`)."""
        return {"corpus sentences": len(self.corpus)}

    def steps_for(self, epochs: int) -> int:
        schedule = self.order.schedule(epochs)
        self.epoch_starts = [sum(schedule[:e]) for e in range(len(schedule) + 1)]
        return self.epoch_starts[-1]

    def epoch_at(self, step: int) -> float:
        return step / max(1, self.epoch_starts[1])

    def configure_optimizers(self, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
        t = self.cfg.train
        warmup = max(t.warmup_steps, math.ceil(t.warmup_ratio * total_steps))
        optimizer = torch.optim.AdamW(_param_groups(self.net, t.weight_decay), lr=t.lr,
                                      betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps)
        # Linear warm-up, then linear decay to 0 at the last step: the HF Trainer default SimCSE uses.
        from transformers import get_linear_schedule_with_warmup

        return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total_steps)

    def batches(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        rt = self.runtime
        for step in range(start, stop):
            epoch = max(e for e, s in enumerate(self.epoch_starts[:-1]) if s <= step)
            global_idx = self.order.batch(epoch, step - self.epoch_starts[epoch])
            batch = collate(self.corpus, shard(global_idx, rt.rank, rt.world), self.pad_id, self.with_tt)
            yield {"inputs": {k: v.to(rt.device, non_blocking=True) for k, v in batch.items()},
                   "ids": global_idx}

    def train_step(self, batch: dict[str, Any], step: int) -> StepResult:
        self.forward_net.train()
        with self.runtime.autocast():
            z1, z2 = forward_views(self.forward_net, batch["inputs"])
        queue_keys = self.queue.keys[: self.queue.filled] if self.queue is not None else None
        out = loss_from_views(self.loss_fn, z1, z2, step, self.generator, queue_keys)
        return StepResult(out.loss, self.cfg.train.batch_size, out.stats,
                          {"z1": z1, "z2": z2, "queue_keys": queue_keys, "ids": batch["ids"]})

    def before_optimizer_step(self) -> None:
        if self.cfg.train.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.cfg.train.max_grad_norm)

    def diagnostics(self, result: StepResult, step: int) -> dict[str, float]:
        """The batch's embedding diagnostics and the anchors' gradient norm (global batch when
        distributed: the views are gathered, without gradient)."""
        z1 = gather_no_grad(result.extra["z1"].detach().float())
        z2 = gather_no_grad(result.extra["z2"].detach().float())
        if not self.runtime.main:
            return {}
        diag = {k: v for k, v in embedding_diagnostics(z1, z2).items() if k not in ("pos_sim", "neg_sim")}
        scratch = torch.Generator(device=self.runtime.device)
        scratch.manual_seed(0)
        queue_keys = result.extra["queue_keys"]
        diag["anchor_grad_norm"] = anchor_gradient_norm(
            lambda a, p: loss_from_views(self.loss_fn, a, p, step, scratch, queue_keys, gather=False).loss,
            z1, z2)
        return diag

    def after_optimizer_step(self, result: StepResult, step: int) -> None:
        if self.queue is not None:
            ids = torch.as_tensor(result.extra["ids"], device=self.runtime.device)
            self.queue.enqueue(gather_no_grad(result.extra["z2"].detach().float()), ids)

    # ---------------------------------------------------------------------------------- evaluation
    def evaluate(self, encode: Callable[[list[str]], Any] | None = None) -> dict[str, float]:
        """The selection score (``stsb_dev``) of the live model, or of ``encode`` (sentences -> (n, D))."""
        from hardmix.text.evaluation import stsb_dev_score

        e = self.cfg.eval
        return {"stsb_dev": float(stsb_dev_score(encode or (
            lambda s: self.net.encode(s, batch_size=e.batch_size, max_length=e.max_length))))}

    def _export(self, run_dir: Path, step: int, score: float | None) -> None:
        with quiet_transformers():
            export_model(self.net, run_dir / BEST, {
                "step": step, "stsb_dev": score, "model": self.cfg.model.name_or_path,
                "strategies": [s.config() for s in self.cfg.loss.strategies],
            })

    def on_new_best(self, run_dir: Path, step: int, scores: dict[str, float]) -> None:
        self._export(run_dir, step, scores["stsb_dev"])
        self.best_dir = run_dir / BEST

    def finish(self, run_dir: Path, selected: bool) -> None:
        self.best_dir = run_dir / BEST
        if not selected:  # no model selection: the last model is the export
            self._export(run_dir, -1, None)

    def final_scores(self, run_dir: Path, evaluated: dict[str, float] | None) -> dict[str, float]:
        scores = dict(evaluated or {})
        if self.cfg.eval.final_sts:
            from hardmix.text.encoder import SentenceEncoder

            e = self.cfg.eval
            encoder = SentenceEncoder(run_dir / BEST, batch_size=e.batch_size, max_length=e.max_length,
                                      device=self.runtime.device)
            scores.update(self._held_out(encoder))
        return scores

    def _held_out(self, encoder: Any) -> dict[str, float]:
        """The STS suite's held-out scores of ``encoder`` (a SentenceEncoder or ``list[str] -> (n, D)``),
        with their bootstrap standard errors (``eval.sts_bootstrap``)."""
        from hardmix.text.evaluation import STS_TASKS, evaluate_sts

        e = self.cfg.eval
        details: dict[str, Any] = {}
        names = set(self.facts.held_out_scores())
        sts = evaluate_sts(encoder, tasks=e.sts_tasks or STS_TASKS, show_progress=self.cfg.log.progress,
                           details=details)
        scores = {k: v for k, v in _sts_names(sts).items() if k in names}
        if e.sts_bootstrap:
            from hardmix.text.sts import bootstrap_se

            se = bootstrap_se(details["pairs"], details["aggregation"], e.sts_bootstrap)
            scores.update({f"{k}_se": v for k, v in _sts_names(se).items() if k in names})
        return scores

    def start_scores(self, selection_only: bool) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """The starting model's ``stsb_dev`` (and with ``eval.final_sts`` its STS suite) with the run's
        evaluation pooling, and the same with mean pooling (``mean pooling``: the untrained control a
        trained [CLS] encoder must beat) unless the run's pooling is mean (``avg``) already."""
        e = self.cfg.eval
        run_pooling = self.net.eval_pooling
        poolings = [run_pooling] + ([] if run_pooling == "avg" else ["avg"])
        # Both poolings read the same forward pass: each list of sentences the evaluations ask for is
        # encoded once, pooled both ways (the same batches as two passes: the same numbers, half the cost).
        encoded: dict[tuple[str, ...], dict[str, Any]] = {}

        def encode_as(pooling: str) -> Callable[[list[str]], Any]:
            def encode(sentences: list[str]) -> Any:
                key = tuple(sentences)
                if key not in encoded:
                    encoded[key] = self.net.encode_poolings(sentences, poolings, batch_size=e.batch_size,
                                                            max_length=e.max_length)
                return encoded[key][pooling]
            return encode

        views: dict[str, dict[str, float]] = {}
        for pooling in poolings:
            scores = self.evaluate(encode_as(pooling))
            if e.final_sts and not selection_only:
                scores.update(self._held_out(encode_as(pooling)))
            views[pooling] = scores
        return views[run_pooling], ({"mean pooling": views["avg"]} if run_pooling != "avg" else {})

    # ------------------------------------------------------------------------------------- state
    def checkpointed(self) -> dict[str, Any]:
        return {"queue": self.queue}

    def random_streams(self) -> dict[str, torch.Generator]:
        return {"generator": self.generator}

    def describe(self) -> str:
        cfg = self.cfg
        return f"training {cfg.model.name_or_path} ({cfg.model.pooling}) with {self.loss_fn.extra_repr()}"

    def info(self) -> dict[str, Any]:
        from hardmix.datasets.manager import provenance

        best = getattr(self, "best_dir", None)
        return {"model": self.cfg.model.name_or_path, "model_source": str(self.model_source),
                "corpus": str(self.corpus_path), "corpus_data": provenance(self.corpus_path),
                "eval_pooling": self.net.eval_pooling,
                "best_dir": str(best) if best is not None and best.is_dir() else None,
                "both_directions": self.loss_fn.both_directions}


def _corpus_digest(path: Path) -> str:
    """The content digest of a corpus file, or of the arrow files a ``save_to_disk`` folder is read from
    (:func:`hardmix.text.data.corpus_files`, in their order: the files ``datasets`` maps, whatever their
    names)."""
    from hardmix.text.data import corpus_files
    from hardmix.training.fingerprint import content_digest, files_digest

    return files_digest(corpus_files(path)) if path.is_dir() else content_digest(path)


def model_files(model_source: str) -> list[Path]:
    """The files of the model a run loads: every file of its folder (a Hub name is resolved to the folder
    of the cache's snapshot it loads, :func:`hardmix.text.model_source.hub_snapshot`).

    Raises:
        ModelNotFoundError: a Hub name whose snapshot is not in the cache (its files cannot be named).
    """
    from hardmix.text.model_source import ModelNotFoundError, hub_snapshot

    folder = Path(str(model_source))
    if not folder.is_dir():
        snapshot = hub_snapshot(str(model_source))
        if snapshot is None:
            raise ModelNotFoundError(
                f"model.name_or_path: {model_source!r}: the files it names are not in the Hugging Face "
                "cache, so the run cannot be fingerprinted by them; download the model and point "
                "model.name_or_path at its folder")
        folder = snapshot
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _input_files(model_source: str, cfg: TextConfig) -> list[Path]:
    """The files of a run's inputs, in their order: the model's (:func:`model_files`) and the STS files
    ``cfg`` scores on (the dev set of the selection, the held-out suite's with ``eval.final_sts``; of
    STS12-16, every ``STS.*.txt`` of the year's folder, the files its loader reads among them)."""
    from hardmix.text.evaluation import STS_TASKS
    from hardmix.text.senteval_data import senteval_dir

    files = model_files(model_source)
    e = cfg.eval
    root = senteval_dir() if e.eval_steps or e.at_end or e.final_sts else None
    if root is not None:
        files.append(root / "STS" / "STSBenchmark" / "sts-dev.csv")
        for task in (e.sts_tasks or STS_TASKS) if e.final_sts else []:
            if task == "STS-B":
                files.append(root / "STS" / "STSBenchmark" / "sts-test.csv")
            elif task == "SICK-R":
                files.append(root / "SICK" / "SICK_test_annotated.txt")
            else:
                files += sorted((root / "STS" / f"{task}-en-test").glob("STS.*.txt"))
    return files


def _inputs_digest(model_source: str, cfg: TextConfig) -> str:
    """The contents of the model's files (:func:`model_files`: a Hub name's, those of the cache's snapshot
    it resolves to) and of the STS files ``cfg`` scores on (:func:`_input_files`)."""
    from hardmix.training.fingerprint import files_digest

    return files_digest(_input_files(model_source, cfg))


def _sts_names(scores: dict[str, float]) -> dict[str, float]:
    """The STS suite's keys as scores: its ``avg`` is ``sts_avg``."""
    return {("sts_avg" if k == "avg" else k): v for k, v in scores.items()}


__all__ = ["TextFacts", "TextTask", "loss_from_views"]
