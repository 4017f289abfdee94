"""``hardmix train vision CONFIG``: MoCo-v2 with any of the core's strategies (MoCHi, MixCSE, ...).

One process trains on one device (CPU or a GPU, with split-BatchNorm); under ``torchrun`` every rank
trains its slice of each global batch with DistributedDataParallel, keys are gathered before they enter
the queue and shuffled across ranks for BatchNorm.

The run directory holds ``config.yaml``, ``metrics.jsonl`` (one line per step with the loss, learning
rate and momentum; every ``train.log_every`` steps also the core's diagnostics; k-NN lines), the atomic
``checkpoint_last.pt`` (model with the queue and its ids, optimizer, step, config, RNG states) and
``summary.json``. ``--resume`` continues from the checkpoint: every random draw of a step derives from
(seed, step), so on CPU the resumed run's losses equal an uninterrupted run's, step for step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml

from hardmix.config import ConfigError, load_config
from hardmix.diagnostics import embedding_diagnostics
from hardmix.losses import ContrastiveLoss
from hardmix.utils.checkpoint import atomic_torch_save, atomic_write_text
from hardmix.utils.progress import ProgressBar
from hardmix.utils.rng import rng_state, seed_everything, set_rng_state
from hardmix.vision.backbones import build_backbone
from hardmix.vision.config import RESUMABLE_CHANGES, VisionConfig, config_differences, strategy_list, to_plain
from hardmix.vision.data import derive_seed, step_generator
from hardmix.vision.evaluation import CHECKPOINT_NAME, LabelledImages, eval_geometry, training_classes
from hardmix.vision.moco import MoCo, lr_at, momentum_at, queue_diagnostics
from hardmix.vision.pipeline import TrainData, build_train_data


class RunDirError(ValueError):
    """The output directory does not fit the request (a run exists without --resume, or none with it)."""


def setup_distributed() -> tuple[int, int, int]:
    """(rank, world size, local rank); initializes the process group under ``torchrun`` (NCCL with CUDA,
    else gloo) unless the caller already did."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", "0"))
    return 0, 1, 0


def select_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("train.device: cuda was asked for but no CUDA device is available")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


class MetricsLog:
    """``metrics.jsonl``: one JSON object per line, written by rank 0 only.

    Args:
        path: the file.
        enabled: whether this process writes.
        keep_until: on resume, drop the lines of steps after the checkpoint's (a run that stopped after
            its last checkpoint had written them); None starts a new file.
    """

    def __init__(self, path: Path, enabled: bool, keep_until: int | None = None) -> None:
        self.path = path
        self.enabled = enabled
        if not enabled:
            return
        lines: list[str] = []
        if keep_until is not None and path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip() and json.loads(line).get("step", 0) <= keep_until:
                    lines.append(line)
        atomic_write_text("".join(f"{ln}\n" for ln in lines), path)
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the run)

    def write(self, record: dict[str, Any]) -> None:
        if self.enabled:
            self._f.write(json.dumps(record) + "\n")
            self._f.flush()

    def close(self) -> None:
        if self.enabled:
            self._f.close()


def _check_negatives(cfg: VisionConfig, n: int) -> None:
    """MoCHi's N hardest negatives must exist after excluding the query's own keys from the queue."""
    k = cfg.model.queue_size
    views = 2 if cfg.loss.symmetric else 1
    own = views * (math.ceil(k / (views * n)) + 1) if cfg.loss.mask_same_sample else 0
    available = k - min(own, k)
    for i, spec in enumerate(strategy_list(cfg.loss.strategies)):
        if spec["name"] == "mochi" and spec.get("n_hard", 1024) > available:
            raise ConfigError(
                f"loss.strategies[{i}].n_hard: {spec.get('n_hard', 1024)} exceeds the {available} "
                "negatives left "
                f"when a queue of {k} over {n} images excludes each query's own keys (up to {own})"
            )


def _log(rank: int, msg: str) -> None:
    if rank == 0:
        print(msg, file=sys.stderr, flush=True)


def _save(
    path: Path,
    model: MoCo,
    optimizer: torch.optim.Optimizer,
    step: int,
    steps_per_epoch: int,
    cfg: VisionConfig,
    data: TrainData,
) -> None:
    atomic_torch_save(
        {
            "version": 1,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
            "epoch": step / steps_per_epoch,
            "config": to_plain(cfg),
            "rng": rng_state(),
            "data": {
                "num_samples": data.num_samples,
                "pipeline": data.pipeline,
                "skipped": len(data.skipped),
            },
        },
        path,
    )


def train(cfg: VisionConfig, output_dir: str | Path | None = None, resume: bool = False) -> dict[str, Any]:
    """Train (or, with ``resume``, continue) a run and return its summary.

    Args:
        cfg: the validated config.
        output_dir: the run directory (default ``cfg.output``).
        resume: continue from ``output_dir/checkpoint_last.pt``.

    Returns:
        A dict with ``output_dir``, ``steps``, ``epochs``, ``num_samples``, ``pipeline``, ``skipped_images``,
        ``final_loss`` (mean over the last epoch's steps of this process), ``images_per_s`` and, when the
        final k-NN ran, ``knn_top1``/``knn_top5`` (percent).

    Raises:
        ConfigError, RunDirError, FileNotFoundError, ImageDataError: before training starts.
    """
    rank, world, local_rank = setup_distributed()
    device = select_device(cfg.train.device, local_rank)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    out = Path(output_dir or cfg.output)
    ckpt_path = out / CHECKPOINT_NAME
    state = None
    if resume:
        if not ckpt_path.is_file():
            raise RunDirError(f"--resume: {out} holds no {CHECKPOINT_NAME} to continue")
        state = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        changed = [
            k
            for k in config_differences(state["config"], to_plain(cfg))
            if not any(k == p or (p.endswith(".") and k.startswith(p)) for p in RESUMABLE_CHANGES)
        ]
        if changed:
            raise ConfigError(
                f"--resume: the config differs from the run's in {', '.join(changed)}; "
                "a resumed run must keep them (train.stop_after_steps, eval.* may change)"
            )
    elif ckpt_path.is_file():
        raise RunDirError(
            f"--output: {out} already holds a run; pass --resume to continue it or choose another"
        )

    seed = cfg.train.seed
    seed_everything(seed)
    data = build_train_data(cfg, device, rank, world)
    _check_negatives(cfg, data.num_samples)
    spe = data.batches.steps_per_epoch
    total = spe * cfg.train.epochs
    stop_at = min(total, cfg.train.stop_after_steps or total)
    loss_fn = ContrastiveLoss(cfg.loss.temperature, cfg.strategy_specs(spe))
    backbone, dim = build_backbone(cfg.model.backbone, cfg.model.width, cfg.model.small_stem)
    model = MoCo(
        backbone,
        dim,
        cfg.model.proj_hidden,
        cfg.model.proj_dim,
        cfg.model.queue_size,
        bn_splits=cfg.model.bn_splits if world == 1 else 1,
        queue_generator=torch.Generator().manual_seed(derive_seed(seed, 0, 0, 3)),
    ).to(device)
    cuda = device.type == "cuda"
    if cuda and cfg.train.channels_last:
        model = model.to(memory_format=torch.channels_last)
    base_lr = cfg.train.lr * cfg.train.batch_size / 256  # MoCo's linear scaling rule
    optimizer = torch.optim.SGD(
        model.encoder_q.parameters(),
        lr=base_lr,
        momentum=cfg.train.sgd_momentum,
        weight_decay=cfg.train.weight_decay,
    )
    start = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        start = int(state["step"])
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model.encoder_q, device_ids=[local_rank] if cuda else None)  # broadcasts rank 0's weights
        if state is None:
            model.encoder_k.load_state_dict(model.encoder_q.state_dict())
        model.set_query_wrapper(ddp)
    amp = cuda and cfg.train.amp and torch.cuda.is_bf16_supported()
    warmup_steps = round(cfg.train.warmup_epochs * spe)

    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        if state is None:
            atomic_write_text(yaml.safe_dump(to_plain(cfg), sort_keys=False), out / "config.yaml")
    metrics = MetricsLog(out / "metrics.jsonl", rank == 0, keep_until=start if state is not None else None)
    _log(
        rank,
        f"hardmix train vision: {data.num_samples} images ({data.pipeline} pipeline"
        f"{f', {len(data.skipped)} undecodable skipped' if data.skipped else ''}), {spe} steps/epoch, "
        f"{total} steps, batch {cfg.train.batch_size} on {world} x {device}, strategies "
        f"{[s['name'] for s in strategy_list(cfg.loss.strategies)]}, output {out}"
        + (f", resuming at step {start}" if start else ""),
    )

    knn_data: LabelledImages | None = None

    def run_knn() -> dict[str, float]:
        nonlocal knn_data
        e = cfg.eval
        if knn_data is None:
            knn_data = LabelledImages(
                e.dataset or cfg.data.dataset,
                eval_geometry(cfg)[0],
                e.knn_train_samples,
                e.knn_test_samples,
                cfg.data.cache_dir,
                cfg.data.num_workers,
                key="eval.dataset",
                classes=training_classes(cfg, e.dataset or cfg.data.dataset),
            )
        return knn_data.knn(model.backbone, cfg, e.knn_k, e.knn_temperature, e.batch_size, device, e.backend)

    bar = ProgressBar(
        total, desc="train", unit="step", initial=start, disable=not (cfg.train.progress and rank == 0)
    )
    model.train()
    images_per_step = cfg.train.batch_size
    losses: list[float] = []
    t0 = time.perf_counter()
    t_log, n_log = t0, 0
    done = start
    for step, (v1, v2, ids) in enumerate(data.batches.iterate(start, stop_at), start):
        lr = lr_at(step, total, base_lr, warmup_steps, cfg.train.schedule)
        for group in optimizer.param_groups:
            group["lr"] = lr
        m = momentum_at(
            step, total, cfg.model.momentum, cfg.model.final_momentum, cfg.model.momentum_schedule
        )
        v1, v2 = v1.to(device, non_blocking=True), v2.to(device, non_blocking=True)
        if cuda and cfg.train.channels_last:
            v1 = v1.contiguous(memory_format=torch.channels_last)
            v2 = v2.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            res = model(
                v1,
                v2,
                ids,
                loss_fn,
                m,
                step,
                cfg.loss.symmetric,
                cfg.loss.mask_same_sample,
                step_generator(seed, step, rank, 3),
            )
        optimizer.zero_grad(set_to_none=True)
        res.loss.backward()
        optimizer.step()
        done = step + 1
        loss = float(res.loss.detach())
        if not math.isfinite(loss):
            raise FloatingPointError(f"the loss is {loss} at step {done}; lower train.lr or check the data")
        losses = (losses + [loss])[-spe:]
        n_log += 1
        record: dict[str, Any] = {
            "step": done,
            "epoch": round(done / spe, 4),
            "loss": loss,
            "lr": lr,
            "momentum": m,
        }
        if done % cfg.train.log_every == 0 or done == stop_at:
            now = time.perf_counter()
            rate = n_log * images_per_step / max(now - t_log, 1e-9)
            t_log, n_log = now, 0
            stats = res.outputs[0].stats()
            stats.pop("loss", None)
            record.update(stats)
            record.update({f"batch/{k}": v for k, v in embedding_diagnostics(res.queries, res.keys).items()})
            record.update(
                queue_diagnostics(
                    res.queries,
                    res.keys,
                    res.queue,
                    res.queue_ids,
                    ids.to(device) if cfg.loss.mask_same_sample else None,
                )
            )
            record["queue_filled"] = model.queue.filled
            record["images_per_s"] = round(rate, 2)
            bar.set_postfix(img_s=round(rate, 1))
        metrics.write(record)
        bar.update(1, loss=round(loss, 4))
        epoch_end = done % spe == 0
        if epoch_end and done < total:
            epoch = done // spe
            if cfg.eval.knn_every_epochs and epoch % cfg.eval.knn_every_epochs == 0:
                if rank == 0:
                    scores = run_knn()
                    metrics.write(
                        {"step": done, "epoch": epoch, "knn_top1": scores["top1"], "knn_top5": scores["top5"]}
                    )
                    _log(rank, f"\nepoch {epoch}: k-NN top-1 {scores['top1']:.2f}%")
                if world > 1:
                    dist.barrier()
            if cfg.train.save_every_epochs and epoch % cfg.train.save_every_epochs == 0 and done < stop_at:
                if rank == 0:
                    _save(ckpt_path, model, optimizer, done, spe, cfg, data)
                if world > 1:
                    dist.barrier()
    bar.close()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        _save(ckpt_path, model, optimizer, done, spe, cfg, data)
    summary: dict[str, Any] = {
        "output_dir": str(out),
        "steps": done,
        "epochs": round(done / spe, 4),
        "num_samples": data.num_samples,
        "pipeline": data.pipeline,
        "skipped_images": len(data.skipped),
        "final_loss": sum(losses) / len(losses) if losses else None,
        "images_per_s": round((done - start) * images_per_step / max(elapsed, 1e-9), 2),
        "seconds": round(elapsed, 1),
    }
    if done == total and cfg.eval.knn_final and rank == 0:
        scores = run_knn()
        summary.update({"knn_top1": scores["top1"], "knn_top5": scores["top5"]})
        metrics.write(
            {"step": done, "epoch": done // spe, "knn_top1": scores["top1"], "knn_top5": scores["top5"]}
        )
    if rank == 0:
        atomic_write_text(json.dumps(summary, indent=2) + "\n", out / "summary.json")
    metrics.close()
    if world > 1:
        dist.barrier()
    return summary


def cli_main(args: argparse.Namespace) -> int:
    """``hardmix train vision CONFIG [--set key=value ...] [--output DIR] [--resume]``."""
    cfg = load_config(VisionConfig, args.config, args.overrides)
    summary = train(cfg, args.output, args.resume)
    if summary.get("knn_top1") is not None:
        dataset = cfg.eval.dataset or cfg.data.dataset
        print(
            f"k-NN top-1 on {dataset}: {summary['knn_top1']:.2f}% (top-5 {summary['knn_top5']:.2f}%) "
            f"after {summary['epochs']:g} epochs; run in {summary['output_dir']}"
        )
    else:
        print(f"trained {summary['steps']} steps; run in {summary['output_dir']}")
    return 0
