"""Vision training throughput: MoCo-v2 (``none``) and MoCHi steps against the floor.

The floor is the bare backbone's forward and backward pass (and SGD step) on the same batch of two views
(2B images, already augmented): no augmentation, no head, no key encoder, no queue, no loss beyond a sum.
A MoCo step does less network work than that (query forward and backward on B views, key forward on B),
but adds the batched augmentation of both views from the uint8 cache, the head, the momentum update, the
loss against the queue and, for MoCHi, the synthesis of hard negatives.

The variants run interleaved, one step each in turn, so that load from other processes on a shared
machine hits all of them alike; the table gives medians over the measured steps. The PIL path is
measured beside it: the images per second its DataLoader workers deliver alone, and a MoCo step fed by
it.

Usage:
    python benchmarks/vision_throughput.py [--config benchmarks/configs/vision_step_cifar10.yaml]
        [--set key=value ...] [--steps 20] [--warmup 3] [--threads N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from hardmix.config.loader import load_config
from hardmix.losses import ContrastiveLoss
from hardmix.utils.machine import cpu_model
from hardmix.vision.augment import TensorAugment, pil_transform
from hardmix.vision.backbones import build_backbone
from hardmix.vision.config import VisionConfig
from hardmix.vision.data import load_tensors, step_generator
from hardmix.vision.moco import MoCo
from hardmix.vision.pipeline import PilBatches, TensorBatches, train_image_list

ROOT = Path(__file__).resolve().parents[1]


class Floor:
    """Backbone forward + backward + SGD on 2B pre-augmented images."""

    def __init__(self, cfg: VisionConfig, views: torch.Tensor) -> None:
        self.net, _ = build_backbone(cfg.model.backbone, cfg.model.width, cfg.model.small_stem)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        self.views = views

    def step(self, step: int) -> None:
        loss = self.net(self.views).float().pow(2).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


class NetworkOnly:
    """The networks of a MoCo step alone: query encoder (backbone + head) forward and backward on B
    pre-augmented views, key encoder forward on B, SGD; no augmentation, queue, loss or mixing."""

    def __init__(self, cfg: VisionConfig, views: torch.Tensor) -> None:
        net, dim = build_backbone(cfg.model.backbone, cfg.model.width, cfg.model.small_stem)
        self.model = MoCo(net, dim, cfg.model.proj_hidden, cfg.model.proj_dim, 16, cfg.model.bn_splits)
        self.opt = torch.optim.SGD(self.model.encoder_q.parameters(), lr=0.01, momentum=0.9)
        self.v1, self.v2 = views.chunk(2)

    def step(self, step: int) -> None:
        q = self.model.encoder_q(self.v1)
        with torch.no_grad():
            k = self.model.encoder_k(self.v2)
        loss = (q * k).sum()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


class MoCoStep:
    """The trainer's step: batched augmentation from the cache, MoCo forward, backward, SGD."""

    def __init__(
        self,
        cfg: VisionConfig,
        strategies: object,
        batches: TensorBatches | PilBatches,
        steps_per_epoch: int,
        total: int,
        two_queries: bool | None = None,
    ) -> None:
        net, dim = build_backbone(cfg.model.backbone, cfg.model.width, cfg.model.small_stem)
        self.cfg = cfg
        self.model = MoCo(
            net,
            dim,
            cfg.model.proj_hidden,
            cfg.model.proj_dim,
            cfg.loss.queue_size,
            cfg.model.bn_splits,
            torch.Generator().manual_seed(0),
        )
        strategies = cfg.loss.strategies if strategies is None else strategies
        self.loss = ContrastiveLoss(cfg.loss.temperature, strategies)
        self.loss.resolve_epochs(steps_per_epoch)
        self.opt = torch.optim.SGD(
            self.model.encoder_q.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4
        )
        self.batches = batches
        self._iter = None
        self.total = total
        self.two_queries = cfg.loss.two_queries if two_queries is None else two_queries

    def step(self, step: int) -> None:
        if isinstance(self.batches, PilBatches):
            if self._iter is None:
                self._iter = iter(self.batches.iterate(0, self.total))
            v1, v2, ids = next(self._iter)
        else:
            v1, v2, ids = self.batches.batch(step)
        out = self.model(
            v1, v2, ids, self.loss, 0.99, step, self.two_queries, True, step_generator(0, step, 0, 3)
        )
        self.opt.zero_grad(set_to_none=True)
        out.loss.backward()
        self.opt.step()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "benchmarks/configs/vision_step_cifar10.yaml"))
    p.add_argument(
        "--mochi-config",
        default=str(ROOT / "benchmarks/configs/vision_step_mochi_cifar10.yaml"),
        help="the config whose loss.strategies the mochi variant uses",
    )
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--steps", type=int, default=20, help="measured steps per variant")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured steps per variant first")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--pil-workers", type=int, default=2)
    p.add_argument("--no-pil", action="store_true")
    p.add_argument("--only", nargs="+", default=None, help="time only the variants whose names contain these")
    p.add_argument("--json", default=str(ROOT / "results/vision_throughput.json"))
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(VisionConfig, args.config, args.overrides)
    mochi_cfg = load_config(VisionConfig, args.mochi_config, args.overrides)
    b = cfg.train.batch_size
    n_images = max(4 * b, 1024)
    images, _ = train_image_list(cfg)
    from hardmix.vision.data import balanced_subset

    idx = balanced_subset(images.labels, n_images, 0)
    cache = load_tensors(
        images, idx, cfg.data.cache_resolution, cfg.data.cache_dir, workers=cfg.data.num_workers
    )
    aug = TensorAugment(cfg.augment)
    spe = n_images // b
    tensor_batches = TensorBatches(cache.images, aug, b, 0)
    v1, v2, _ = tensor_batches.batch(0)
    total = args.warmup + args.steps
    mochi_specs = [getattr(s, "final", s) for s in mochi_cfg.loss.strategies]  # mixing from the first step
    variants = {
        "floor (backbone fwd+bwd, 2 views)": Floor(cfg, torch.cat([v1, v2])),
        "MoCo networks only (no aug/queue/loss)": NetworkOnly(cfg, torch.cat([v1, v2])),
        "none (MoCo-v2), tensor path": MoCoStep(cfg, "none", tensor_batches, spe, total),
        "mochi, tensor path": MoCoStep(cfg, mochi_specs, tensor_batches, spe, total),
        "none, symmetric loss, tensor path": MoCoStep(cfg, "none", tensor_batches, spe, total, True),
        "mochi, symmetric loss, tensor path": MoCoStep(cfg, mochi_specs, tensor_batches, spe, total, True),
    }
    if not args.no_pil:
        paths = [images.paths[i] for i in idx.tolist()]
        pil = PilBatches(paths, pil_transform(cfg.augment), b, 0, workers=args.pil_workers)
        variants["none (MoCo-v2), PIL path"] = MoCoStep(cfg, "none", pil, spe, total)
    if args.only:
        variants = {k: v for k, v in variants.items() if any(w in k for w in args.only)}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for step in range(total):
        for name, v in variants.items():
            t = time.perf_counter()
            v.step(step)
            dt = time.perf_counter() - t
            if step >= args.warmup:
                times[name].append(dt)
    pil_data_rate = None
    if not args.no_pil:
        paths = [images.paths[i] for i in idx.tolist()]
        pil = PilBatches(paths, pil_transform(cfg.augment), b, 0, workers=args.pil_workers)
        it = iter(pil.iterate(0, total))
        next(it)
        t = time.perf_counter()
        n = 0
        for _ in it:
            n += 1
        pil_data_rate = n * b / (time.perf_counter() - t)
    t = time.perf_counter()
    for step in range(args.steps):
        tensor_batches.batch(step)
    tensor_data_rate = args.steps * b / (time.perf_counter() - t)

    floor = statistics.median(times[next(iter(variants))])
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append(
            {
                "variant": name,
                "ms_per_step": round(1000 * med, 1),
                "images_per_s": round(b / med, 1),
                "x_floor": round(med / floor, 3),
            }
        )
    result = {
        "machine": f"{cpu_model()}, {torch.get_num_threads()} torch threads",
        "config": str(args.config),
        "overrides": args.overrides,
        "batch_size": b,
        "model": f"{cfg.model.backbone} width {cfg.model.width} small_stem={cfg.model.small_stem}",
        "crop": cfg.augment.crop_size,
        "queue_size": cfg.loss.queue_size,
        "mochi": [m.config() for m in mochi_specs],
        "times_s": times,
        "load_average": os.getloadavg(),
        "steps": args.steps,
        "warmup": args.warmup,
        "rows": rows,
        "data_only_images_per_s": {
            "tensor (batched aug, 1 thread)": round(tensor_data_rate, 1),
            f"PIL ({args.pil_workers} workers)": round(pil_data_rate, 1) if pil_data_rate else None,
        },
    }
    print(
        f"machine: {result['machine']}; {result['model']}, crop {cfg.augment.crop_size}, batch {b}, "
        f"K {cfg.loss.queue_size}; medians over {args.steps} interleaved steps"
    )
    print(f"{'variant':40s} {'ms/step':>9s} {'img/s':>8s} {'x floor':>8s}")
    for r in rows:
        print(f"{r['variant']:40s} {r['ms_per_step']:9.1f} {r['images_per_s']:8.1f} {r['x_floor']:8.3f}")
    for k, v in result["data_only_images_per_s"].items():
        print(f"data only, {k}: {v} images/s (two views each)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
