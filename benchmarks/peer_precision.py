"""hardmix's training step against its peers' at equal precision, fp32 and bf16 autocast, on the CPU.

So that bf16's speed-up is not mistaken for an advantage over the peers, each peer runs in the same
precision as hardmix, in the same process, the four variants of a modality alternated step by step
(hardmix fp32, peer fp32, hardmix bf16, peer bf16, then the next round):

- text: hardmix's ``TextTask`` step (``configs/text/cpu_simcse.yaml``: bert-mini, SimCSE's [CLS] MLP,
  batch 64, max length 32, AdamW, clipping) against sentence-transformers' ``SentenceTransformerTrainer``
  with ``MultipleNegativesRankingLoss`` on the same model, sentences, batch and length (unsupervised SimCSE
  as its docs train it: each sentence its own positive; ``bf16=True`` for its bf16 arm); a step is the time
  between two ``on_step_end`` callbacks.
- vision: hardmix's ``VisionTask`` step (``benchmarks/configs/vision_step_cifar10.yaml``, a step-timing
  workload: CIFAR ResNet-18 of width 16, head 512-128, K 4096, batch 64, split-BN) against lightly's MoCo
  built from its blocks (``MoCoProjectionHead``, ``NTXentLoss(memory_bank_size=4096)``, ``update_momentum``)
  on the same backbone and the same augmented views (hardmix's batches feed both), under the same
  ``torch.autocast("cpu", torch.bfloat16)`` for its bf16 arm.

lightly is not a dependency of hardmix: install it beside it (``pip install lightly``) to run this.

    python benchmarks/peer_precision.py --threads 2 --steps 6 --rounds 4 \
        --out results/precision_2026-12-03/peers.json

Needs ``HARDMIX_DATA``; each row is the median of ``rounds x steps`` step times after one warm-up round.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16")


class HardmixSteps:
    """``steps(n)``: n optimizer steps of a hardmix task, as the engine makes them."""

    def __init__(self, task_cls, cfg, precision: str) -> None:
        from hardmix.training.runtime import Runtime

        cfg = copy.deepcopy(cfg)
        cfg.train.precision = precision
        self.task = task_cls(cfg, Runtime(torch.device("cpu"), precision=precision))
        self.task.check()
        self.task.build()
        total = self.task.steps_for(cfg.train.epochs)
        self.optimizer, self.scheduler = self.task.configure_optimizers(total)
        self.step = 0
        self.batches = self.task.batches(0, total)

    def steps(self, n: int) -> list[float]:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            result = self.task.train_step(next(self.batches), self.step)
            result.loss.backward()
            self.task.before_optimizer_step()
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.task.after_optimizer_step(result, self.step)
            self.step += 1
            times.append(time.perf_counter() - t0)
        return times


class SentenceTransformersSteps:
    """sentence-transformers' trainer, MultipleNegativesRankingLoss, each sentence its own positive."""

    def __init__(
        self, model_path: str, sentences: list[str], precision: str, batch: int, max_length: int
    ) -> None:
        from datasets import Dataset
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, models
        from sentence_transformers.losses import MultipleNegativesRankingLoss
        from sentence_transformers.training_args import SentenceTransformerTrainingArguments
        from transformers import TrainerCallback

        word = models.Transformer(model_path, max_seq_length=max_length)
        pool = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="cls")
        self.model = SentenceTransformer(modules=[word, pool], device="cpu")
        data = Dataset.from_dict({"anchor": sentences, "positive": sentences})
        self.marks: list[float] = []
        marks = self.marks

        class Clock(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                marks.append(time.perf_counter())

        self.args = dict(
            output_dir=str(Path(os.environ.get("TMPDIR", "/tmp")) / "hardmix-peer-st"),
            per_device_train_batch_size=batch,
            learning_rate=3e-5,
            warmup_ratio=0.0,
            bf16=precision == "bf16",
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            dataloader_num_workers=0,
            seed=1,
            disable_tqdm=True,
        )
        self.make = lambda n: SentenceTransformerTrainer(
            model=self.model,
            args=SentenceTransformerTrainingArguments(max_steps=n, **self.args),
            train_dataset=data,
            loss=MultipleNegativesRankingLoss(self.model, scale=20.0),
            callbacks=[Clock()],
        )

    def steps(self, n: int) -> list[float]:
        self.marks.clear()
        start = time.perf_counter()
        self.make(n).train()
        marks = [start, *self.marks]
        # the first interval includes the trainer's set-up: use the steps after it
        return [b - a for a, b in zip(marks[1:], marks[2:])]


class LightlyMoCoSteps:
    """lightly's MoCo from its blocks, fed hardmix's augmented views."""

    def __init__(self, hardmix: HardmixSteps, precision: str) -> None:
        from lightly.loss import NTXentLoss
        from lightly.models.modules import MoCoProjectionHead
        from lightly.models.utils import deactivate_requires_grad, update_momentum

        from hardmix.vision.backbones import build_backbone

        cfg = hardmix.task.cfg
        backbone, dim = build_backbone(cfg.model.backbone, cfg.model.width, cfg.model.small_stem)
        self.query = torch.nn.Sequential(
            backbone, MoCoProjectionHead(dim, cfg.model.proj_hidden, cfg.model.proj_dim)
        )
        self.key = copy.deepcopy(self.query)
        deactivate_requires_grad(self.key)
        self.update = update_momentum
        self.loss = NTXentLoss(
            temperature=cfg.loss.temperature, memory_bank_size=(cfg.loss.queue_size, cfg.model.proj_dim)
        )
        lr = cfg.train.lr * cfg.train.batch_size / 256
        self.optimizer = torch.optim.SGD(self.query.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
        self.precision = precision
        self.batches = hardmix.task.batches(0, hardmix.task.steps_for(cfg.train.epochs))

    def steps(self, n: int) -> list[float]:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            v1, v2, _ = next(self.batches)
            self.query.train()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
                self.update(self.query, self.key, 0.999)
                q = self.query(v1)
                with torch.no_grad():
                    k = self.key(v2)
                loss = self.loss(q, k)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
        return times


def _measure(variants: dict[str, object], steps: int, rounds: int) -> dict[str, dict[str, object]]:
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds + 1):  # round 0 warms up
        for name, v in variants.items():
            t = v.steps(steps)
            if r:
                times[name] += t
    return {
        name: {"median_step_seconds": round(statistics.median(t), 4), "steps": [round(x, 4) for x in t]}
        for name, t in times.items()
    }


def text(steps: int, rounds: int) -> dict[str, object]:
    from hardmix.datasets.paths import resolve_data_path
    from hardmix.text.task import TextTask
    from hardmix.training.api import load_config_for

    cfg = load_config_for(TextTask, REPO / "configs/text/cpu_simcse.yaml", ["train.threads=null"])
    model = str(resolve_data_path(cfg.model.name_or_path, must_exist=True))
    import gzip

    with gzip.open(resolve_data_path(cfg.data.train_file, must_exist=True), "rt", encoding="utf-8") as f:
        sentences = [next(f).strip() for _ in range(4096)]
    variants: dict[str, object] = {}
    for precision in PRECISIONS:
        variants[f"hardmix {precision}"] = HardmixSteps(TextTask, cfg, precision)
        variants[f"sentence-transformers {precision}"] = SentenceTransformersSteps(
            model, sentences, precision, cfg.train.batch_size, cfg.data.max_length
        )
    out = _measure(variants, steps, rounds)
    return _ratios(out, "sentence-transformers", cfg.train.batch_size)


def vision(steps: int, rounds: int) -> dict[str, object]:
    from hardmix.training.api import load_config_for
    from hardmix.vision.task import VisionTask

    cfg = load_config_for(
        VisionTask,
        REPO / "benchmarks/configs/vision_step_cifar10.yaml",
        ["train.threads=null", "data.max_samples=4000", "data.val_samples=500", "eval.at_end=false"],
    )
    variants: dict[str, object] = {}
    for precision in PRECISIONS:
        ours = HardmixSteps(VisionTask, cfg, precision)
        variants[f"hardmix {precision}"] = ours
        variants[f"lightly {precision}"] = LightlyMoCoSteps(ours, precision)
    out = _measure(variants, steps, rounds)
    return _ratios(out, "lightly", cfg.train.batch_size)


def _ratios(out: dict[str, dict[str, object]], peer: str, batch: int) -> dict[str, object]:
    for v in out.values():
        v["samples_per_second"] = round(batch / v["median_step_seconds"], 2)
    for p in PRECISIONS:
        out[f"hardmix / {peer} ({p}, samples per second)"] = round(
            out[f"hardmix {p}"]["samples_per_second"] / out[f"{peer} {p}"]["samples_per_second"], 3
        )
    for name in ("hardmix", peer):
        out[f"{name} bf16 speed-up"] = round(
            out[f"{name} fp32"]["median_step_seconds"] / out[f"{name} bf16"]["median_step_seconds"], 3
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["text", "vision"], choices=["text", "vision"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=6, help="steps of a variant in a row")
    p.add_argument("--rounds", type=int, default=4, help="measured rounds (after one warm-up round)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if not os.environ.get("HARDMIX_DATA"):
        sys.exit("set HARDMIX_DATA to the data root")
    torch.set_num_threads(args.threads)
    from hardmix.training.runtime import cpu_bf16_flags
    from hardmix.utils.machine import cpu_model

    record: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": cpu_model(),
        "bf16_flags": list(cpu_bf16_flags()),
        "threads": args.threads,
        "torch": torch.__version__,
        "load_before": os.getloadavg(),
    }
    for task in args.tasks:
        torch.manual_seed(0)
        record[task] = text(args.steps, args.rounds) if task == "text" else vision(args.steps, args.rounds)
        print(
            task, json.dumps({k: v for k, v in record[task].items() if not isinstance(v, dict)}), flush=True
        )
    record["load_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
