"""``hardmix train text``: unsupervised SimCSE / MixCSE (or any core strategy) on a transformers encoder.

One optimizer step (SimCSE, Gao et al. 2021; MixCSE, Zhang et al. 2022):

1. the next global batch of the resumable order (:mod:`hardmix.text.data`), this process's slice of it;
2. one forward pass over the batch duplicated, in train mode: two dropout views z1, z2 (B, D);
3. under ``torchrun``: z1, z2 gathered from every process with gradient, so the negatives are the
   global batch; with ``loss.queue_size`` the queued second views of earlier steps join the candidates;
4. the core's :class:`~hardmix.losses.contrastive.ContrastiveLoss` (InfoNCE plus the strategies' extra
   negatives), backward, gradient clipping, AdamW, linear schedule.

Every ``eval.eval_steps`` the model is scored on STS-B dev (:func:`hardmix.text.evaluation.stsb_dev_score`)
in eval mode under ``inference_mode``, with every RNG state saved and restored around it, so evaluating
never changes the training run; the best model is exported to ``DIR/best/``. ``DIR/last.pt`` holds
everything a resumed run needs to continue exactly (model, optimizer, scheduler, gradient scaler, the
RNG states of every process, the strategies' generator, the queue, the step, the best score and the
partial logging window).

Run folder: ``config.yaml``, ``metrics.jsonl``, ``last.pt``, ``best/`` (see :func:`export_model`),
``results.json``, and ``tensorboard/`` when asked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml
from torch import Tensor, nn

from hardmix.config import ConfigError
from hardmix.diagnostics import anchor_gradient_norm, embedding_diagnostics
from hardmix.distributed import gather_no_grad, gather_with_grad, rank, rank_offset, world_size
from hardmix.losses.contrastive import ContrastiveLoss, LossOutput
from hardmix.paths import resolve_data_path
from hardmix.queue import KeyQueue
from hardmix.text.config import TextTrainConfig, build_loss, load_text_config, text_config_to_dict
from hardmix.text.data import BatchOrder, TokenizedCorpus, collate, read_corpus, shard
from hardmix.text.model import (
    ContrastiveSentenceModel,
    export_model,
    forward_views,
    load_backbone,
    quiet_transformers,
)
from hardmix.text.model_source import ModelNotFoundError, resolve_model  # noqa: F401 (re-exported)
from hardmix.utils.checkpoint import atomic_torch_save, atomic_write_text
from hardmix.utils.progress import ProgressBar
from hardmix.utils.rng import rng_state, seed_everything, set_rng_state

CHECKPOINT_VERSION = 1

#: Config keys that may change between a run and its ``--resume`` (they do not alter the training).
RESUMABLE_CHANGES = (
    "train.stop_after_steps", "train.save_steps", "train.device", "train.cpu_threads", "output", "log.",
    "eval.",
)


class RunFolderError(ValueError):
    """The run folder holds a run that was not asked to be resumed, or none to resume."""


# ------------------------------------------------------------------------------------------ setup
def _select_device(cfg: TextTrainConfig) -> torch.device:
    want = cfg.train.device
    if want == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda was asked for but CUDA is not available")
    use_cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
    if cfg.train.precision != "fp32" and not use_cuda:
        raise ConfigError(f"train.precision: {cfg.train.precision} mixed precision needs CUDA; "
                          "use fp32 on CPU")
    if use_cuda:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _init_distributed(device: torch.device) -> bool:
    """Initialise the process group under torchrun (``WORLD_SIZE`` > 1); True if this call created it."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return True


def _check_eval_data(cfg: TextTrainConfig) -> None:
    if cfg.eval.eval_steps == 0 and not cfg.eval.at_end:
        return
    try:
        from hardmix.text.evaluation import stsb_dev_score  # noqa: F401
        from hardmix.text.senteval_data import senteval_dir
    except ImportError as e:
        raise ConfigError(f"eval: the STS-B evaluation is not available ({e}); set eval.eval_steps: 0 and "
                          "eval.at_end: false to train without model selection") from None
    try:
        dev = senteval_dir() / "STS" / "STSBenchmark" / "sts-dev.csv"
    except FileNotFoundError as e:
        raise ConfigError(f"eval: {e}; set eval.eval_steps: 0 and eval.at_end: false to train without "
                          "model selection") from None
    if not dev.is_file():
        raise ConfigError(f"eval: {dev} not found (STS-B dev, for model selection); set eval.eval_steps: 0 "
                          "and eval.at_end: false to train without model selection")


def _config_diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for k in sorted(set(a) | set(b)):
        key = f"{prefix}{k}"
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            keys += _config_diff(va, vb, key + ".")
        elif va != vb:
            keys.append(key)
    return keys


# ----------------------------------------------------------------------------------- the step
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


def linear_schedule(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Linear warm-up to 1 over ``warmup_steps``, then linear decay to 0 at ``total_steps`` (the HF
    Trainer's default schedule that SimCSE uses)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: no weight decay on biases and LayerNorm weights (HF Trainer's rule)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Restore every global RNG (Python, NumPy, torch CPU and CUDA) on exit."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


# ------------------------------------------------------------------------------------------ train
class _MetricsLog:
    """``metrics.jsonl`` (one JSON object per line), plus TensorBoard when asked and installed."""

    def __init__(self, path: Path, tensorboard_dir: Path | None, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled
        self.writer = None
        if enabled and tensorboard_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(tensorboard_dir))
            except ImportError:
                print("hardmix: log.tensorboard is set but tensorboard is not installed "
                      "(pip install tensorboard); logging to metrics.jsonl only", file=sys.stderr)

    def truncate_after(self, step: int) -> None:
        """Drop the lines logged after ``step`` (a resumed run rewrites them)."""
        if not self.enabled or not self.path.is_file():
            return
        keep = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        atomic_write_text("".join(line + "\n" for line in keep), self.path)

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.writer.add_scalar(k, v, record["step"])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def train(
    cfg: TextTrainConfig,
    output_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train a sentence encoder; returns the content of ``results.json``.

    Args:
        cfg: a validated config (:func:`hardmix.text.config.load_text_config`).
        output_dir: the run folder (default ``cfg.output``).
        resume: continue the run in ``output_dir`` from its ``last.pt``.

    Raises:
        ConfigError, FileNotFoundError, ValueError: before any training, for a bad setup (the message says
            what to change).
    """
    device = _select_device(cfg)
    created = _init_distributed(device)
    try:
        return _Trainer(cfg, Path(output_dir or cfg.output), resume, device).run()
    finally:
        if created and dist.is_initialized():
            dist.destroy_process_group()


class _Trainer:
    def __init__(self, cfg: TextTrainConfig, out: Path, resume: bool, device: torch.device) -> None:
        self.cfg, self.out, self.resume, self.device = cfg, out, resume, device
        self.rank, self.world = rank(), world_size()
        self.main = self.rank == 0
        if cfg.train.batch_size % self.world:
            raise ConfigError(f"train.batch_size: {cfg.train.batch_size} is not divisible by the "
                              f"{self.world} processes (it is the global batch)")
        ckpt = out / "last.pt"
        if resume and not ckpt.is_file():
            raise RunFolderError(f"--resume: {ckpt} not found; nothing to resume (drop --resume to start)")
        if not resume and ckpt.is_file():
            raise RunFolderError(f"{out} already holds a run ({ckpt}); pass --resume to continue it or "
                                  "choose another --output")
        # Everything that can fail cheaply fails here, before the model and the corpus are loaded.
        self.model_source, self.local_only = resolve_model(cfg.model.name_or_path)
        self.corpus_path = resolve_data_path(cfg.data.train_file, must_exist=True)
        _check_eval_data(cfg)
        self.loss_fn = build_loss(cfg.loss)

    # -------------------------------------------------------------------------------- building
    def _build(self) -> None:
        cfg = self.cfg
        if cfg.train.cpu_threads is not None:
            torch.set_num_threads(cfg.train.cpu_threads)
        seed_everything(cfg.train.seed + self.rank)
        backbone, tokenizer = load_backbone(self.model_source, cfg.model.dropout, self.local_only)
        self.tokenizer = tokenizer
        self.model = ContrastiveSentenceModel(backbone, cfg.model.pooling, tokenizer).to(self.device)
        self.with_tt = "token_type_ids" in getattr(tokenizer, "model_input_names", ())
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        t0 = time.perf_counter()
        self.corpus: TokenizedCorpus = read_corpus(self.corpus_path, tokenizer, cfg.data.max_length,
                                                   cfg.data.chunk_lines)
        self._say(f"corpus {self.corpus.path}: {len(self.corpus):,} sentences, {self.corpus.num_tokens:,} "
                  f"tokens ({self.corpus.nbytes / 2**20:.1f} MiB), read in {time.perf_counter() - t0:.1f}s")
        keys = self.corpus.keys() if cfg.data.dedup_batches else None
        self.order = BatchOrder(len(self.corpus), cfg.train.batch_size, cfg.train.seed, keys)
        schedule = self.order.schedule(cfg.train.epochs)
        self.epoch_starts = [sum(schedule[:e]) for e in range(len(schedule) + 1)]
        total = self.epoch_starts[-1]
        self.total_steps = min(total, cfg.train.max_steps) if cfg.train.max_steps else total
        self.stop_at = min(self.total_steps, cfg.train.stop_after_steps or self.total_steps)
        warmup = max(cfg.train.warmup_steps, math.ceil(cfg.train.warmup_ratio * self.total_steps))
        self.optimizer = torch.optim.AdamW(
            _param_groups(self.model, cfg.train.weight_decay), lr=cfg.train.lr,
            betas=(cfg.train.adam_beta1, cfg.train.adam_beta2), eps=cfg.train.adam_eps,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, linear_schedule(self.total_steps, warmup))
        fp16 = cfg.train.precision == "fp16"
        self.scaler = torch.amp.GradScaler("cuda") if fp16 else None
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.train.precision)
        self.queue = (KeyQueue(cfg.loss.queue_size, self.model.dim, random_init=False).to(self.device)
                      if cfg.loss.queue_size > 0 else None)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(cfg.train.seed * 1000 + 17 + self.rank)
        self.step = 0
        self.best_score: float | None = None
        self.best_step: int | None = None
        self.last_score: float | None = None
        self.eval_step: int | None = None
        self.eval_seconds = 0.0
        self.window_loss = 0.0
        self.window_steps = 0

    def _say(self, msg: str) -> None:
        if self.main:
            print(f"hardmix: {msg}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------ checkpoints
    def _state(self) -> dict[str, Any]:
        """This process's RNG streams (gathered from every process by :meth:`_save`)."""
        return {"rng": rng_state(), "generator": self.generator.get_state()}

    def _save(self) -> None:
        states = [None] * self.world
        if self.world > 1:
            dist.all_gather_object(states, self._state())
        else:
            states = [self._state()]
        if not self.main:
            return
        atomic_torch_save({
            "version": CHECKPOINT_VERSION,
            "step": self.step,
            "total_steps": self.total_steps,
            "world_size": self.world,
            "config": text_config_to_dict(self.cfg),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "queue": self.queue.state_dict() if self.queue is not None else None,
            "processes": states,
            "best": {"score": self.best_score, "step": self.best_step, "last_score": self.last_score,
                     "eval_step": self.eval_step},
            "window": {"loss": self.window_loss, "steps": self.window_steps},
        }, self.out / "last.pt")

    def _load(self) -> None:
        ckpt = torch.load(self.out / "last.pt", map_location="cpu", weights_only=False)
        if ckpt.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"{self.out / 'last.pt'}: checkpoint version {ckpt.get('version')} is not "
                             f"{CHECKPOINT_VERSION}")
        changed = [k for k in _config_diff(ckpt["config"], text_config_to_dict(self.cfg))
                   if not k.startswith(RESUMABLE_CHANGES)]
        if changed:
            raise ConfigError(f"--resume: the config differs from the run's in {', '.join(changed)}; only "
                              "train.stop_after_steps, train.save_steps, train.device, train.cpu_threads, "
                              "eval.* and log.* may change")
        if ckpt["world_size"] != self.world:
            raise ValueError(f"--resume: the run used {ckpt['world_size']} processes, this one {self.world}; "
                             "resume with the same number to continue exactly")
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        if self.scaler is not None and ckpt["scaler"] is not None:
            self.scaler.load_state_dict(ckpt["scaler"])
        if self.queue is not None:
            self.queue.load_state_dict(ckpt["queue"])
        mine = ckpt["processes"][self.rank]
        set_rng_state(mine["rng"])
        self.generator.set_state(mine["generator"])
        self.step = int(ckpt["step"])
        best = ckpt["best"]
        self.best_score, self.best_step, self.last_score = best["score"], best["step"], best["last_score"]
        self.eval_step = best["eval_step"]
        self.window_loss, self.window_steps = float(ckpt["window"]["loss"]), int(ckpt["window"]["steps"])

    # ---------------------------------------------------------------------------------- evaluation
    def _evaluate(self) -> float | None:
        """STS-B dev of the current model (main process), never touching a training RNG."""
        if not self.main:
            return None
        from hardmix.text.evaluation import stsb_dev_score

        cfg = self.cfg
        t0 = time.perf_counter()
        with preserved_rng():
            score = float(stsb_dev_score(lambda s: self.model.encode(
                s, batch_size=cfg.eval.batch_size, max_length=cfg.eval.max_length)))
        self.last_score, self.eval_step = score, self.step
        if self.best_score is None or score > self.best_score:
            self.best_score, self.best_step = score, self.step
            self._export_best()
        self.metrics.write({"step": self.step, "stsb_dev": score, "best_stsb_dev": self.best_score,
                            "best_step": self.best_step})
        self.eval_seconds += time.perf_counter() - t0
        return score

    def _export_best(self) -> None:
        with preserved_rng(), quiet_transformers():
            export_model(self.model, self.out / "best", {
                "step": self.step, "stsb_dev": self.best_score, "model": self.cfg.model.name_or_path,
                "strategies": self.cfg.loss.strategies,
            })

    # -------------------------------------------------------------------------------------- loop
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self._build()
        if self.main:
            self.out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(yaml.safe_dump(text_config_to_dict(cfg), sort_keys=False),
                              self.out / "config.yaml")
        self.metrics = _MetricsLog(self.out / "metrics.jsonl",
                                   self.out / "tensorboard" if cfg.log.tensorboard else None, self.main)
        if self.resume:
            self._load()
            self.metrics.truncate_after(self.step)
            self._say(f"resumed {self.out} at step {self.step}/{self.total_steps}")
        self._say(f"training {cfg.model.name_or_path} ({cfg.model.pooling}) with "
                  f"{self.loss_fn.extra_repr()}; "
                  f"{self.total_steps} steps of batch {cfg.train.batch_size} on {self.device}"
                  + (f" x {self.world} processes" if self.world > 1 else ""))
        model: nn.Module = self.model
        if self.world > 1:
            model = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        bar = ProgressBar(self.total_steps, desc="train", unit="step", initial=self.step,
                          disable=not (self.main and cfg.log.progress))
        t_start = time.perf_counter()
        start_step = self.step
        while self.step < self.stop_at:
            log_now = (self.step + 1) % cfg.log.log_steps == 0 or self.step + 1 == self.stop_at
            out, z1, z2, lr, queue_keys = self._train_step(model, keep_queue=log_now)
            self.step += 1
            if log_now:
                self._log(out, z1, z2, lr, queue_keys)
            if cfg.eval.eval_steps and self.step % cfg.eval.eval_steps == 0:
                self._evaluate()
            if cfg.train.save_steps and self.step % cfg.train.save_steps == 0 and self.step < self.stop_at:
                self._save()
            bar.update(1, loss=self._last_step_loss, lr=lr,
                       **({"dev": self.best_score} if self.best_score is not None else {}))
        bar.close()
        seconds = time.perf_counter() - t_start - self.eval_seconds
        finished = self.step >= self.total_steps
        if finished and cfg.eval.at_end and self.eval_step != self.step:
            self._evaluate()
        if finished and self.best_step is None and self.main:
            self._export_best()  # no model selection: the last model is the export
        self._save()
        self.metrics.close()
        return self._results(finished, seconds, self.step - start_step)

    _last_step_loss = float("nan")

    def _train_step(
        self, model: nn.Module, keep_queue: bool = False
    ) -> tuple[LossOutput, Tensor, Tensor, float, Tensor | None]:
        cfg = self.cfg
        epoch = max(e for e, s in enumerate(self.epoch_starts[:-1]) if s <= self.step)
        position = self.step - self.epoch_starts[epoch]
        global_idx = self.order.batch(epoch, position)
        local_idx = shard(global_idx, self.rank, self.world)
        batch = collate(self.corpus, local_idx, self.pad_id, self.with_tt)
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        model.train()
        amp = (torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype is not None
               else nullcontext())
        with amp:
            z1, z2 = forward_views(model, batch)
        queue_keys = self.queue.keys[: self.queue.filled] if self.queue is not None else None
        out = loss_from_views(self.loss_fn, z1, z2, self.step, self.generator, queue_keys)
        kept = queue_keys.clone() if keep_queue and queue_keys is not None else None
        lr = float(self.scheduler.get_last_lr()[0])
        if self.scaler is not None:
            self.scaler.scale(out.loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            out.loss.backward()
        if cfg.train.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.train.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.queue is not None:
            ids = torch.as_tensor(global_idx, device=self.device)
            self.queue.enqueue(gather_no_grad(z2.detach().float()), ids)
        loss = out.loss.detach()
        if self.world > 1:
            loss = loss.clone()
            dist.all_reduce(loss)
            loss /= self.world
        self._last_step_loss = float(loss)
        self.window_loss += self._last_step_loss
        self.window_steps += 1
        return out, z1, z2, lr, kept

    def _log(self, out: LossOutput, z1: Tensor, z2: Tensor, lr: float, queue_keys: Tensor | None) -> None:
        """A line of metrics.jsonl: the mean loss of the window, the lr, and the diagnostics of the last
        batch (global batch when distributed: the views are gathered, without gradient)."""
        cfg = self.cfg
        if cfg.log.diagnostics:
            z1 = gather_no_grad(z1.detach().float())
            z2 = gather_no_grad(z2.detach().float())
        mean = self.window_loss / max(1, self.window_steps)
        record: dict[str, Any] = {"step": self.step, "loss": mean, "lr": lr,
                                  "epoch": round(self.step / max(1, self.epoch_starts[1]), 4)}
        if cfg.log.diagnostics and self.main:
            stats = out.stats()
            stats.pop("loss", None)
            record.update(stats)
            diag = embedding_diagnostics(z1.detach(), z2.detach())
            record.update({k: v for k, v in diag.items() if k not in ("pos_sim", "neg_sim")})
            scratch = torch.Generator(device=self.device)
            scratch.manual_seed(0)
            with preserved_rng():
                record["anchor_grad_norm"] = anchor_gradient_norm(
                    lambda a, p: loss_from_views(self.loss_fn, a, p, self.step - 1, scratch, queue_keys,
                                                 gather=False).loss, z1, z2)
        self.window_loss, self.window_steps = 0.0, 0
        self.metrics.write(record)

    def _results(self, finished: bool, seconds: float, steps: int) -> dict[str, Any]:
        results = {
            "best_dev_stsb": self.best_score,
            "best_step": self.best_step,
            "last_dev_stsb": self.last_score,
            "step": self.step,
            "total_steps": self.total_steps,
            "finished": finished,
            "best_dir": str(self.out / "best") if (self.out / "best").is_dir() else None,
            "eval_pooling": self.model.eval_pooling,
            "model": self.cfg.model.name_or_path,
            "strategies": self.cfg.loss.strategies,
            "symmetric": self.loss_fn.symmetric,
            "seed": self.cfg.train.seed,
            "world_size": self.world,
            "train_seconds_this_session": round(seconds, 2),  # without the evaluations
            "sentences_per_second": (round(steps * self.cfg.train.batch_size / seconds, 2)
                                     if seconds > 0 else None),
        }
        if self.main:
            atomic_write_text(json.dumps(results, indent=2) + "\n", self.out / "results.json")
        return results


def cli_main(args: argparse.Namespace) -> int:
    """``hardmix train text CONFIG [--set k=v ...] [--output DIR] [--resume]``."""
    cfg = load_text_config(args.config, list(getattr(args, "overrides", None) or []))
    results = train(cfg, args.output, resume=bool(getattr(args, "resume", False)))
    if int(os.environ.get("RANK", "0")) == 0:  # the process group is gone by now: torchrun's variable
        out = Path(args.output or cfg.output)
        dev = results["best_dev_stsb"]
        print(f"model: {results['best_dir'] or '(not exported: the run stopped early)'}")
        print(f"best STS-B dev: {dev:.2f} at step {results['best_step']}" if dev is not None
              else "best STS-B dev: (not evaluated)")
        print(f"run folder: {out} (metrics.jsonl, results.json, last.pt)")
    return 0
