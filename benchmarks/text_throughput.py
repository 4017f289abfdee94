"""Throughput and peak memory of a text training step, per strategy, against the bare encoder's floor.

A step is what ``hardmix train text`` does (:mod:`hardmix.text.task` through the engine): one forward
pass over the batch duplicated (two dropout views, SimCSE's MLP on [CLS]), the core's contrastive loss with
the strategy, backward, gradient clipping at 1.0 and AdamW. The floor is the bare encoder on the same
duplicated batch: forward, backward of a trivial loss (mean square of the [CLS] vectors) and AdamW, no
head, no contrastive loss, no clipping. Target: a step costs at most 1.15x the floor.

Timing interleaves the variants round by round (each round times every variant for ``--steps`` steps), so
a load change on a shared machine hits all of them alike; the table gives the median step time. Peak memory:
CUDA's max allocated memory of steps over what is allocated before them; on CPU, the peak of live tensor
memory over steps (the profiler's allocation and free events) above the level before them, after a first
step has created the optimizer state, in a separate process per variant.

Usage:
    python benchmarks/text_throughput.py                      # bert-mini on CPU (HARDMIX_DATA)
    python benchmarks/text_throughput.py --model bert-base    # a random-init BERT-base config (GPU)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from hardmix.datasets.paths import resolve_data_path
from hardmix.text.config import build_loss, build_text_config
from hardmix.text.model import ContrastiveSentenceModel, forward_views, load_backbone, quiet_transformers
from hardmix.text.task import loss_from_views

RESULTS = Path(__file__).resolve().parents[1] / "results"

VARIANTS: dict[str, list[dict] | None] = {
    "floor": None,
    "none": [{"name": "none"}],
    "mixcse": [{"name": "mixcse", "lam": 0.2}],
    "mixcse_reference": [{"name": "mixcse", "lam": 0.2, "mode": "reference"}],
    "mochi": [{"name": "mochi", "n_hard": 16, "n_pair": 16, "n_query": 8}],
}


def _model(spec: str, device: torch.device) -> ContrastiveSentenceModel:
    if spec == "bert-base":  # random init: throughput does not depend on the weights
        from transformers import AutoTokenizer, BertConfig, BertModel

        tok = AutoTokenizer.from_pretrained(resolve_data_path("models/bert-mini-wiki-mlm", must_exist=True))
        backbone = BertModel(BertConfig(vocab_size=tok.vocab_size), add_pooling_layer=False)
    else:
        backbone, tok = load_backbone(str(resolve_data_path(spec, must_exist=True)))
    return ContrastiveSentenceModel(backbone, "cls", tok).to(device).train()


def _batches(tok, n: int, batch: int, max_length: int, device: torch.device) -> list[dict]:  # noqa: ANN001
    path = resolve_data_path("wiki/enwiki-100k.txt.gz", must_exist=True)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(n * batch)]
    out = []
    for i in range(n):
        b = tok(lines[i * batch:(i + 1) * batch], padding=True, truncation=True, max_length=max_length,
                return_tensors="pt")
        out.append({k: v.to(device) for k, v in b.items()})
    return out


class Variant:
    """One model + optimizer + loss, stepping on the shared batches."""

    def __init__(self, name: str, args: argparse.Namespace, device: torch.device) -> None:
        torch.manual_seed(0)
        self.name = name
        self.model = _model(args.model, device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-5)
        strategies = VARIANTS[name]
        self.loss_fn = (build_loss(build_text_config({"loss": {"strategies": strategies}}).loss)
                        if strategies else None)
        self.gen = torch.Generator(device=device).manual_seed(0)
        self.device = device

    def step(self, batch: dict) -> None:
        if self.loss_fn is None:  # the floor: bare encoder, trivial loss
            dup = {k: v.repeat_interleave(2, dim=0) for k, v in batch.items()}
            z = self.model(dup["input_ids"], dup["attention_mask"], dup.get("token_type_ids"), head=False)
            loss = z.pow(2).mean()
            loss.backward()
        else:
            z1, z2 = forward_views(self.model, batch)
            loss = loss_from_views(self.loss_fn, z1, z2, step=10, generator=self.gen).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_times(args: argparse.Namespace, device: torch.device) -> dict[str, list[float]]:
    with quiet_transformers():
        variants = [Variant(n, args, device) for n in args.variants]
    batches = _batches(variants[0].model.tokenizer, args.batches, args.batch_size, args.max_length, device)
    for v in variants:  # warm-up
        for b in batches[:2]:
            v.step(b)
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    k = 0
    for _ in range(args.rounds):
        for v in variants:
            for _ in range(args.steps):
                b = batches[k % len(batches)]
                k += 1
                _sync(device)
                t0 = time.perf_counter()
                v.step(b)
                _sync(device)
                times[v.name].append(time.perf_counter() - t0)
    return times


def measure_memory(name: str, args: argparse.Namespace, device: torch.device) -> float:
    """Peak memory growth (MiB) of training steps over the loaded model and batches."""
    with quiet_transformers():
        v = Variant(name, args, device)
    batches = _batches(v.model.tokenizer, 4, args.batch_size, args.max_length, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        for b in batches:
            v.step(b)  # the first step also allocates Adam's state (counted: it is part of training)
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    from torch.profiler import ProfilerActivity, profile

    v.step(batches[0])  # the first step creates Adam's state: measure the steps after it
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for b in batches[1:]:
            v.step(b)
    return _peak_mib(prof)


def _peak_mib(prof) -> float:  # noqa: ANN001
    """The peak of live CPU tensor memory over a profiled run, above its level at the start (MiB): the
    running sum of the profiler's allocation (+) and free (-) events."""
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak / 2**20


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/bert-mini-wiki-mlm",
                   help="a model folder (relative: under HARDMIX_DATA) or 'bert-base' (random init)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=4, help="timed steps per variant per round")
    p.add_argument("--batches", type=int, default=8, help="distinct real batches cycled through")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default=str(RESULTS / "text_throughput.json"))
    p.add_argument("--no-memory", action="store_true", help="time only (no memory probe per variant)")
    p.add_argument("--memory-only", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.memory_only:
        print(json.dumps({"peak_mib": measure_memory(args.memory_only, args, device)}))
        return 0

    times = measure_times(args, device)
    memory = {}
    for name in [] if args.no_memory else args.variants:
        if device.type == "cuda":
            memory[name] = measure_memory(name, args, device)
        else:  # the process-wide peak RSS only grows: one process per variant
            cmd = [sys.executable, __file__, "--memory-only", name, "--model", args.model, "--device", "cpu",
                   "--batch-size", str(args.batch_size), "--max-length", str(args.max_length)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            memory[name] = json.loads(out.strip().splitlines()[-1])["peak_mib"]

    floor = statistics.median(times["floor"]) if "floor" in times else None
    rows = []
    for name in args.variants:
        med = statistics.median(times[name])
        rows.append({
            "variant": name,
            "strategies": VARIANTS[name],
            "median_step_s": med,
            "sentences_per_s": args.batch_size / med,
            "vs_floor": med / floor if floor else None,
            "peak_step_memory_mib": memory.get(name),
            "step_times_s": times[name],
        })
    machine = {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "load_avg_1m": os.getloadavg()[0],
    }
    result = {"model": args.model, "batch_size": args.batch_size, "max_length": args.max_length,
              "rounds": args.rounds, "steps_per_round": args.steps, "machine": machine, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    print(f"text training step, {args.model}, batch {args.batch_size} (x2 views), max length "
          f"{args.max_length}, {device} ({machine['torch_threads']} threads), median of "
          f"{args.rounds * args.steps} steps")
    print(f"{'variant':<18} {'step ms':>9} {'sent/s':>9} {'x floor':>8} {'peak MiB':>9}")
    for r in rows:
        ratio = f"{r['vs_floor']:.3f}" if r["vs_floor"] is not None else "-"
        print(f"{r['variant']:<18} {1000 * r['median_step_s']:>9.1f} {r['sentences_per_s']:>9.1f} {ratio:>8} "
              f"{r['peak_step_memory_mib'] if r['peak_step_memory_mib'] is not None else float('nan'):>9.1f}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
