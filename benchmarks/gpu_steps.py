"""Training-step throughput on the GPU, per strategy, against the bare network's floor (gpu_check stages 3-4).

``text``: a BERT-base-shaped encoder (``transformers.BertConfig()``'s defaults: 12 layers, hidden 768,
vocabulary 30,522), random init, so nothing is downloaded; SimCSE's step as ``hardmix train text`` takes
it: one forward pass over the batch duplicated (two dropout views, SimCSE's MLP on [CLS]) under bf16
autocast, the core's in-batch loss in fp32, backward, gradient clipping at 1.0, AdamW. The floor: the bare
encoder's forward over the same duplicated batch, backward of a trivial loss and AdamW. Groups:

- ``b64``: batch 64, max length 32 (the papers' recipe);
- ``b512``: batch 512 in one process (the negatives of 8 GPUs x 64 in one batch), if it fits;
- ``b64x8-gathered``: what one of 8 ranks computes: the encoder on its 64 sentences, the loss over 512
  (its own 64 with gradient, 448 fixed unit rows standing for the other ranks' gathered views), through
  the core's gathered-logits path (``ContrastiveLoss.in_batch(z1, z2, z1_all, z2_all, offset)``); the
  all-gather itself is not timed (one GPU).

Token ids are random (sentence lengths uniform in [max_length / 3, max_length], every batch padded to
max_length as wiki1m's sentences pad to 32): the cost of a step does not depend on which tokens they are.

``vision``: MoCo-v2 and MoCHi steps as ``hardmix train vision`` takes them on a GPU: views augmented on the
device from a uint8 cache (:class:`hardmix.vision.pipeline.TensorBatches`), channels-last, bf16 autocast,
the loss and the mixing in fp32, SGD. The floor: the bare backbone's forward and backward and SGD step on
the 2B pre-augmented views. Groups: ``resnet50-224`` (ImageNet-100's MoCHi recipe: batch 256, K 16384,
(N, s, s') = (1024, 1024, 128); cache images 256 px, random content) and ``resnet18-32`` (the network,
batch, queue and mixing of gpu_check's short CIFAR-10 training, ``benchmarks/gpu_training.py``). Then
the PIL path's data rate with pinned memory (``PilBatches(pin_memory=True)`` on CUDA) on the real images
under ``$HARDMIX_DATA/images/cifar10``.

Timing: variants run interleaved (rounds of steps each, after warm-up steps: ``TEXT_TIMING``, ``TIMING``),
each step synchronized; the JSON gives median step times and, on CUDA, each variant's peak allocated
memory during its steps above the allocation before them. The JSON is rewritten after every group, so a
group that fails or is stopped keeps the ones before it. ``--dry`` runs the same code at tiny sizes (on
the CPU in CI).

Usage:
    python benchmarks/gpu_steps.py text --out text_steps.json              # on a GPU
    python benchmarks/gpu_steps.py vision --out vision_steps.json
    python benchmarks/gpu_steps.py vision --dry --device cpu --out /tmp/v.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from hardmix.losses import ContrastiveLoss

# ---------------------------------------------------------------------------------- sizes, in one place
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512)
BERT_TINY = dict(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=64)

TEXT_STRATEGIES: dict[str, list[dict[str, Any]] | None] = {
    "floor": None,
    "none": [],
    "mixcse": [{"name": "mixcse", "lam": 0.2}],
    "mochi": [{"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 8}],
}
#: group -> (batch, max_length, gathered rows standing for other ranks)
TEXT_GROUPS = {
    "full": {"b64": (64, 32, 0), "b512": (512, 32, 0), "b64x8-gathered": (64, 32, 448)},
    "dry": {"b64": (20, 16, 0), "b512": (24, 16, 0), "b64x8-gathered": (12, 16, 12)},
}

#: group -> the MoCo step's network, data and loss
VISION_GROUPS: dict[str, dict[str, dict[str, Any]]] = {
    "full": {
        "resnet50-224": dict(backbone="resnet50", width=64, small_stem=False, crop=224, cache_px=256,
                             cache_images=512, batch=256, queue=16384, proj_hidden=2048, proj_dim=128,
                             bn_splits=8, temperature=0.2, mochi=dict(n_hard=1024, n_pair=1024, n_query=128)),
        # The same network, batch, queue and mixing as gpu_training.py's short CIFAR-10 training.
        "resnet18-32": dict(backbone="resnet18", width=64, small_stem=True, crop=32, cache_px=32,
                            cache_images=4096, batch=256, queue=4096, proj_hidden=2048, proj_dim=128,
                            bn_splits=8, temperature=0.2, mochi=dict(n_hard=512, n_pair=512, n_query=128)),
    },
    "dry": {
        "resnet50-224": dict(backbone="resnet50", width=4, small_stem=False, crop=32, cache_px=40,
                             cache_images=32, batch=8, queue=64, proj_hidden=16, proj_dim=8,
                             bn_splits=2, temperature=0.2, mochi=dict(n_hard=16, n_pair=16, n_query=4)),
        "resnet18-32": dict(backbone="resnet18", width=4, small_stem=True, crop=16, cache_px=16,
                            cache_images=32, batch=8, queue=64, proj_hidden=16, proj_dim=8,
                            bn_splits=2, temperature=0.2, mochi=dict(n_hard=16, n_pair=16, n_query=4)),
    },
}
#: the PIL data-rate check: (batch, batches, workers)
PIL_CHECK = {"full": (256, 12, 8), "dry": (8, 2, 0)}
#: (warmup, rounds, steps per round)
TIMING = {"full": (3, 5, 4), "dry": (0, 1, 2)}
#: the text groups' timing: fewer rounds than the vision ones, so that the three groups fit the stage's
#: cap (2026-12-06, H100: at (3, 5, 4) the groups took 19.5 s (b64, with the process's first CUDA work)
#: and 8.3 s (b512), and the stage reached its 35 s cap before the third; benchmarks/gpu_budget.py)
TEXT_TIMING = {"full": (2, 3, 4), "dry": (0, 1, 2)}


# ------------------------------------------------------------------------------------------ timing
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    variants: dict[str, Callable[[int], None]], device: torch.device, warmup: int, rounds: int, steps: int
) -> tuple[dict[str, list[float]], dict[str, float | None]]:
    """Seconds per step of each variant, interleaved round by round, and (CUDA) the peak extra MiB.

    Every variant runs ``warmup`` untimed steps first; then each round times ``steps`` steps of every
    variant in turn. ``fn(step)`` gets a global step counter (distinct batches and random draws).
    """
    step = 0
    for fn in variants.values():
        for _ in range(warmup):
            fn(step)
            step += 1
    _sync(device)
    times: dict[str, list[float]] = {n: [] for n in variants}
    peaks: dict[str, float | None] = {n: None for n in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                base = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            for _ in range(steps):
                _sync(device)
                t0 = time.perf_counter()
                fn(step)
                _sync(device)
                times[name].append(time.perf_counter() - t0)
                step += 1
            if device.type == "cuda":
                extra = (torch.cuda.max_memory_allocated(device) - base) / 2**20
                peaks[name] = max(peaks[name] or 0.0, extra)
    return times, peaks


def rows_of(
    times: dict[str, list[float]], peaks: dict[str, float | None], batch: int
) -> list[dict[str, Any]]:
    """One row per variant: median step, steps/s, items/s (sentences or images), ratio to the floor."""
    floor = statistics.median(times["floor"]) if "floor" in times else None
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append({
            "variant": name,
            "median_step_s": med,
            "steps_per_s": 1.0 / med,
            "items_per_s": batch / med,
            "vs_floor": med / floor if floor else None,
            "peak_extra_mib": peaks[name],
            "step_times_s": ts,
        })
    return rows


def machine(device: torch.device) -> dict[str, Any]:
    """Where the figures were measured."""
    return {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "bf16_supported": bool(device.type == "cuda" and torch.cuda.is_bf16_supported()),
    }


def _autocast(device: torch.device, precision: str):  # noqa: ANN202 (a context manager)
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


# ------------------------------------------------------------------------------------------ text
def token_batches(
    n: int, batch: int, max_length: int, vocab: int, seed: int, device: torch.device
) -> list[dict]:
    """``n`` batches of random token ids (B, max_length): [CLS] w ... w [SEP] then padding (id 0), lengths
    uniform in [max_length // 3, max_length] with one full-length row per batch (padded to the longest)."""
    g = torch.Generator().manual_seed(seed)
    cls_id, sep_id = (101, 102) if vocab > 1000 else (1, 2)
    out = []
    for _ in range(n):
        lengths = torch.randint(max(3, max_length // 3), max_length + 1, (batch,), generator=g)
        lengths[0] = max_length
        ids = torch.randint(5, vocab, (batch, max_length), generator=g)
        pos = torch.arange(max_length).view(1, -1)
        mask = pos < lengths.view(-1, 1)
        ids[:, 0] = cls_id
        ids[torch.arange(batch), lengths - 1] = sep_id
        ids = ids.masked_fill(~mask, 0)
        out.append({
            "input_ids": ids.to(device),
            "attention_mask": mask.long().to(device),
            "token_type_ids": torch.zeros_like(ids).to(device),
        })
    return out


class TextStep:
    """One model + AdamW + loss (or the floor's trivial loss), stepping as the text trainer does."""

    def __init__(self, name: str, bert: dict[str, int], device: torch.device, precision: str,
                 gathered: int = 0) -> None:
        from transformers import BertConfig, BertModel

        from hardmix.text.model import ContrastiveSentenceModel

        torch.manual_seed(0)
        with torch.device(device):  # initialized on the device (BERT-base on the CPU takes seconds)
            backbone = BertModel(BertConfig(**bert), add_pooling_layer=False)
            self.model = ContrastiveSentenceModel(backbone, "cls").to(device).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-5)
        strategies = TEXT_STRATEGIES[name]
        self.loss_fn = None if strategies is None else ContrastiveLoss(0.05, strategies or None)
        self.gen = torch.Generator(device=device).manual_seed(0)
        self.device, self.precision = device, precision
        self.others = None
        if gathered and self.loss_fn is not None:  # the other ranks' two views, detached unit rows
            g = torch.Generator().manual_seed(1)
            others = torch.randn(2, gathered, bert["hidden_size"], generator=g)
            self.others = F.normalize(others, dim=-1).to(device)

    def step(self, batch: dict[str, torch.Tensor], step: int) -> float:
        from hardmix.text.model import forward_views

        if self.loss_fn is None:
            dup = {k: v.repeat_interleave(2, dim=0) for k, v in batch.items()}
            with _autocast(self.device, self.precision):
                z = self.model(dup["input_ids"], dup["attention_mask"], dup["token_type_ids"], head=False)
            loss = z.float().pow(2).mean()
            loss.backward()
        else:
            with _autocast(self.device, self.precision):
                z1, z2 = forward_views(self.model, batch)
            z1, z2 = z1.float(), z2.float()
            if self.others is not None:
                z1_all, z2_all = torch.cat([z1, self.others[0]]), torch.cat([z2, self.others[1]])
                out = self.loss_fn.in_batch(z1, z2, z1_all, z2_all, offset=0, step=step, generator=self.gen)
            else:
                out = self.loss_fn.in_batch(z1, z2, step=step, generator=self.gen)
            loss = out.loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        value = float(loss.detach())
        if not value == value:  # NaN
            raise FloatingPointError(f"the loss is NaN at step {step}")
        return value


def run_text(mode: str, device: torch.device, precision: str, write: Callable[[dict], None]) -> dict:
    """Every text group in turn; ``write`` gets the result after each."""
    bert = BERT_BASE if mode == "full" else BERT_TINY
    warmup, rounds, steps = TEXT_TIMING[mode]
    result: dict[str, Any] = {"mode": mode, "precision": precision, "machine": machine(device),
                              "encoder": bert, "strategies": TEXT_STRATEGIES, "timing": TEXT_TIMING[mode],
                              "groups": {}}
    for group, (batch, max_length, gathered) in TEXT_GROUPS[mode].items():
        t0 = time.perf_counter()
        entry: dict[str, Any] = {"batch": batch, "max_length": max_length, "gathered_rows": gathered}
        try:
            variants = {n: TextStep(n, bert, device, precision, gathered) for n in TEXT_STRATEGIES}
            batches = token_batches(4, batch, max_length, bert["vocab_size"], 0, device)
            fns = {n: (lambda s, v=v, b=batches: v.step(b[s % len(b)], s)) for n, v in variants.items()}
            times, peaks = measure(fns, device, warmup, rounds, steps)
            entry["rows"] = rows_of(times, peaks, batch)
            entry["status"] = "ok"
        except torch.cuda.OutOfMemoryError as e:
            entry.update(status="did not fit", error=str(e).splitlines()[0])
        except Exception as e:  # noqa: BLE001 - recorded, and the next group still runs
            entry.update(status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        variants = fns = None  # free the models before the next group
        if device.type == "cuda":
            torch.cuda.empty_cache()
        result["groups"][group] = entry
        _say_group(group, entry, "sentences/s")
        write(result)
    return result


# ------------------------------------------------------------------------------------------ vision
class VisionFloor:
    """The bare backbone's forward + backward + SGD on 2B pre-augmented views."""

    def __init__(self, s: dict[str, Any], views: torch.Tensor, device: torch.device, precision: str) -> None:
        from hardmix.vision.backbones import build_backbone

        torch.manual_seed(0)
        net, _ = build_backbone(s["backbone"], s["width"], s["small_stem"])
        self.net = net.to(device).to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        self.views = views.contiguous(memory_format=torch.channels_last)
        self.device, self.precision = device, precision

    def step(self, step: int) -> None:
        with _autocast(self.device, self.precision):
            loss = self.net(self.views).float().pow(2).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


class VisionStep:
    """The vision trainer's step on a GPU: augment from the device cache, channels-last, autocast, MoCo
    forward (loss in fp32), backward, SGD."""

    def __init__(self, s: dict[str, Any], strategies: Any, batches: Any, device: torch.device,
                 precision: str) -> None:
        from hardmix.vision.backbones import build_backbone
        from hardmix.vision.moco import MoCo

        torch.manual_seed(0)
        net, dim = build_backbone(s["backbone"], s["width"], s["small_stem"])
        self.model = MoCo(net, dim, s["proj_hidden"], s["proj_dim"], s["queue"], s["bn_splits"],
                          torch.Generator().manual_seed(0)).to(device)
        self.model = self.model.to(memory_format=torch.channels_last)
        self.loss_fn = ContrastiveLoss(s["temperature"], strategies)
        params = self.model.encoder_q.parameters()
        self.opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
        self.batches, self.device, self.precision = batches, device, precision

    def step(self, step: int) -> float:
        from hardmix.vision.data import step_generator

        v1, v2, ids = self.batches.batch(step)
        v1 = v1.to(self.device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        v2 = v2.to(self.device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        with _autocast(self.device, self.precision):
            gen = step_generator(0, step, 0, 3)  # a CPU generator, as the trainer passes
            out = self.model(v1, v2, ids, self.loss_fn, 0.99, step, False, True, gen)
        self.opt.zero_grad(set_to_none=True)
        out.loss.backward()
        self.opt.step()
        value = float(out.loss.detach())
        if not value == value:
            raise FloatingPointError(f"the loss is NaN at step {step}")
        return value


def run_vision_group(s: dict[str, Any], mode: str, device: torch.device, precision: str) -> dict[str, Any]:
    """Floor, ``none`` and ``mochi`` of one vision group."""
    from hardmix.vision.augment import TensorAugment
    from hardmix.vision.config import AugmentSection
    from hardmix.vision.pipeline import TensorBatches

    g = torch.Generator().manual_seed(0)
    cache = torch.randint(0, 256, (s["cache_images"], 3, s["cache_px"], s["cache_px"]), generator=g,
                          dtype=torch.uint8)
    aug = TensorAugment(AugmentSection(crop_size=s["crop"]))
    batches = TensorBatches(cache, aug, s["batch"], 0, device=device)
    v1, v2, _ = batches.batch(0)
    assert v1.device.type == device.type, "the views are made on the device"
    mochi = [{"name": "mochi", **s["mochi"], "warmup_steps": 0}]
    variants = {
        "floor": VisionFloor(s, torch.cat([v1, v2]), device, precision),
        "none": VisionStep(s, None, batches, device, precision),
        "mochi": VisionStep(s, mochi, batches, device, precision),
    }
    del v1, v2
    warmup, rounds, steps = TIMING[mode]
    times, peaks = measure({n: v.step for n, v in variants.items()}, device, warmup, rounds, steps)
    # Augmentation alone: both views of a batch from the device cache.
    _sync(device)
    t0 = time.perf_counter()
    for i in range(steps):
        batches.batch(i)
    _sync(device)
    aug_rate = steps * s["batch"] / (time.perf_counter() - t0)
    return {"settings": s, "rows": rows_of(times, peaks, s["batch"]), "augment_only_images_per_s": aug_rate}


def pil_pinned_rate(mode: str, device: torch.device) -> dict[str, Any]:
    """Images/s of the PIL path (DataLoader workers, pinned memory on CUDA) on the real CIFAR-10 tree."""
    from hardmix.vision.augment import pil_transform
    from hardmix.vision.config import AugmentSection
    from hardmix.vision.data import dataset_root, scan_image_folder, split_folder
    from hardmix.vision.pipeline import PilBatches

    batch, n_batches, workers = PIL_CHECK[mode]
    try:
        root = dataset_root("cifar10")
    except FileNotFoundError as e:
        return {"status": "skipped", "reason": str(e)}
    images = scan_image_folder(split_folder(root, "train"))
    paths = images.paths[: batch * (n_batches + 1)]
    pin = device.type == "cuda"
    transform = pil_transform(AugmentSection(crop_size=32))
    pil = PilBatches(paths, transform, batch, 0, workers=workers, pin_memory=pin)
    it = iter(pil.iterate(0, n_batches + 1))
    v1, _, _ = next(it)
    pinned = bool(v1.is_pinned()) if pin else None
    t0 = time.perf_counter()
    n = 0
    for v1, v2, _ in it:
        v1.to(device, non_blocking=True), v2.to(device, non_blocking=True)
        n += 1
    _sync(device)
    rate = n * batch / (time.perf_counter() - t0)
    return {"status": "ok", "images_per_s": rate, "batch": batch, "batches": n, "workers": workers,
            "pin_memory": pin, "batches_pinned": pinned}


def run_vision(mode: str, device: torch.device, precision: str, write: Callable[[dict], None]) -> dict:
    """Every vision group, then the PIL path's data rate; ``write`` gets the result after each."""
    result: dict[str, Any] = {"mode": mode, "precision": precision, "machine": machine(device),
                              "timing": TIMING[mode], "groups": {}}
    for group, s in VISION_GROUPS[mode].items():
        t0 = time.perf_counter()
        try:
            entry = {"status": "ok", **run_vision_group(s, mode, device, precision)}
        except torch.cuda.OutOfMemoryError as e:
            entry = {"status": "did not fit", "settings": s, "error": str(e).splitlines()[0]}
        except Exception as e:  # noqa: BLE001 - recorded, and the next group still runs
            entry = {"status": "failed", "settings": s, "error": f"{type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()}
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        result["groups"][group] = entry
        _say_group(group, entry, "images/s")
        write(result)
    t0 = time.perf_counter()
    try:
        result["pil_pinned"] = pil_pinned_rate(mode, device)
    except Exception as e:  # noqa: BLE001
        result["pil_pinned"] = {"status": "failed", "error": f"{type(e).__name__}: {e}",
                                "traceback": traceback.format_exc()}
    result["pil_pinned"]["seconds"] = round(time.perf_counter() - t0, 2)
    shown = {k: v for k, v in result["pil_pinned"].items() if k != "traceback"}
    print(f"PIL path, pinned memory: {json.dumps(shown)}", flush=True)
    write(result)
    return result


def _say_group(group: str, entry: dict[str, Any], unit: str) -> None:
    """Print a group's table (or why it has none)."""
    if entry.get("status") != "ok":
        print(f"{group}: {entry.get('status')}: {entry.get('error')}", flush=True)
        if entry.get("traceback"):
            print(entry["traceback"], flush=True)
        return
    print(f"{group} ({entry['seconds']} s)")
    print(f"  {'variant':<8} {'step ms':>9} {unit:>12} {'x floor':>8} {'peak MiB':>9}")
    for r in entry["rows"]:
        peak = f"{r['peak_extra_mib']:.0f}" if r["peak_extra_mib"] is not None else "-"
        print(f"  {r['variant']:<8} {1000 * r['median_step_s']:>9.2f} {r['items_per_s']:>12.1f} "
              f"{r['vs_floor']:>8.3f} {peak:>9}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["text", "vision"])
    p.add_argument("--dry", action="store_true", help="tiny sizes, a few steps (CI, CPU)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no GPU is available")
    mode = "dry" if args.dry else "full"

    def write(result: dict) -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    run = run_text if args.what == "text" else run_vision
    result = run(mode, device, args.precision, write)
    failed = [g for g, e in result["groups"].items() if e.get("status") == "failed"]
    if result.get("pil_pinned", {}).get("status") == "failed":
        failed.append("pil_pinned")
    print(f"wrote {args.out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
