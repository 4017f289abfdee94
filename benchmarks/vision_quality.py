"""Vision quality at CPU scale: MoCo-v2 against MoCHi and MixCSE-style mixing, k-NN top-1 over seeds.

Each (dataset, strategy, seed) run trains the CPU config of the dataset (``configs/vision/cpu_*``) with the
overrides of ``BUDGET`` (none but the progress bar: the configs as shipped) and scores it with the
weighted k-NN (k 200, tau 0.1) on class-balanced subsets of the train (bank) and test splits. The
untrained network (same seeds) is scored alike as the floor that a short run has to clear. The
diagnostics are averaged over each run's last 5 logged steps: MoCo's proxy-task accuracy, the cosines of the
query to its key and to its hardest queue negative, the uniformity and alignment of the batch, how often
the query's own image sits in the queue, and the mixing strategy's synthetic-negative similarity and the
fraction of those harder than the positive.

Runs whose ``summary.json`` exists in the output folder, trained with the same config, are reused, so an
interrupted benchmark continues; a run of another config (an older budget) is trained again.
The JSON is rewritten after every run.

Usage:
    python benchmarks/vision_quality.py                      # CIFAR-10, MoCo-v2 and MoCHi, seeds 0 1 2
    python benchmarks/vision_quality.py [--datasets cifar10 imagenette-64] [--strategies none mochi mixcse]
        [--seeds 0 1 2] [--set key=value ...] [--out runs/bench/vision_quality] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from hardmix.training import run_training
from hardmix.training.config import config_differences, plain_config
from hardmix.training.config import load_task_config as load_config
from hardmix.vision.backbones import build_backbone
from hardmix.vision.config import VisionConfig, strategy_list
from hardmix.vision.evaluation import LabelledImages, eval_geometry
from hardmix.vision.task import VisionTask

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"cifar10": "cifar10", "imagenette-64": "imagenette64"}
# The budget is the CPU configs as shipped (the whole CIFAR-10 train set once, about 9 minutes a run on
# 2 cores; see the configs' headers): the benchmark only turns the progress bar off, so its seed-0 MoCo-v2
# run is the quickstart command. The previous budget (results/vision_quality_1000img.json) was the configs of
# commit 31b15e6 (K 1024, m 0.99, tau 0.2) with data.max_samples=1000 and train.epochs=6: it did not learn.
BUDGET = ["log.progress=false"]
DIAGNOSTICS = (
    "mochi/synthetic_sim",
    "mochi/synthetic_harder_than_positive",
    "mixcse/synthetic_sim",
    "mixcse/synthetic_harder_than_positive",
    "proxy_acc",
    "hardest_neg_sim",
    "pos_sim",
    "same_sample_in_queue",
    "uniformity",
    "alignment",
)


def _strategies(dataset: str, strategy: str, overrides: list[str]) -> Any:
    """``none``, ``mochi`` (the dataset's cpu_mochi config), ``mixcse`` (lam 0.2), or a YAML spec such as
    ``{name: mochi, n_hard: 128, n_pair: 128, n_query: 0, warmup_epochs: 1}`` (an ablation)."""
    if strategy.startswith(("{", "[")):
        import yaml

        return yaml.safe_load(strategy)
    if strategy == "mochi":
        mochi = load_config(
            VisionConfig, ROOT / f"configs/vision/cpu_mochi_{CONFIGS[dataset]}.yaml", overrides
        )
        return strategy_list(mochi.loss.strategies)
    if strategy == "mixcse":
        return [{"name": "mixcse", "lam": 0.2}]
    return strategy


def _slug(strategy: str) -> str:
    """A folder name for a strategy argument (YAML specs become their values joined by dashes)."""
    if not strategy.startswith(("{", "[")):
        return strategy
    import yaml

    spec = yaml.safe_load(strategy)
    items = spec if isinstance(spec, list) else [spec]
    return "+".join("-".join(str(v) for v in s.values()) for s in items).replace(" ", "")[:80] or "custom"


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _last_diagnostics(run: Path, last: int = 5) -> dict[str, float]:
    """Each diagnostic's mean over the last ``last`` steps that logged it (one batch of 64 is noisy)."""
    records = _records(run)
    out: dict[str, float] = {}
    for k in DIAGNOSTICS:
        values = [r[k] for r in records if k in r][-last:]
        if values:
            out[k] = statistics.fmean(values)
    return out


def _same_run(run: Path, cfg: VisionConfig) -> bool:
    """Whether ``run`` holds a finished run of ``cfg`` (its output folder and progress bar aside)."""
    if not ((run / "bench.json").is_file() and (run / "config.yaml").is_file()):
        return False
    import yaml

    done = yaml.safe_load((run / "config.yaml").read_text())
    want = plain_config(cfg)
    ignore = {"output", "log.progress"}
    return not [k for k in config_differences(done, want) if k not in ignore]


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["cifar10"], choices=list(CONFIGS))
    p.add_argument("--strategies", nargs="+", default=["none", "mochi"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="extra overrides after the benchmark's budget",
    )
    p.add_argument("--out", default=str(ROOT / "runs/bench/vision_quality"))
    p.add_argument("--json", default=str(ROOT / "benchmarks/results/vision_quality.json"))
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    overrides = BUDGET + args.overrides
    result: dict[str, Any] = {"budget": overrides, "runs": [], "random_init": []}
    out_root = Path(args.out)
    for dataset in args.datasets:
        base = ROOT / f"configs/vision/cpu_mocov2_{CONFIGS[dataset]}.yaml"
        cfg0 = load_config(VisionConfig, base, overrides)
        data = LabelledImages(
            dataset,
            eval_geometry(cfg0)[0],
            cfg0.eval.knn_train_samples,
            cfg0.eval.knn_test_samples,
            cfg0.data.cache_dir,
            cfg0.data.num_workers,
        )
        for seed in args.seeds:
            torch.manual_seed(seed)
            net, _ = build_backbone(cfg0.model.backbone, cfg0.model.width, cfg0.model.small_stem)
            scores = data.knn(net, cfg0, cfg0.eval.knn_k, cfg0.eval.knn_temperature)
            result["random_init"].append({"dataset": dataset, "seed": seed, "knn_top1": scores["top1"]})
        for strategy in args.strategies:
            for seed in args.seeds:
                run = out_root / dataset / _slug(strategy) / f"seed{seed}"
                cfg = load_config(VisionConfig, base, [*overrides, f"train.seed={seed}"])
                cfg.loss.strategies = _strategies(dataset, strategy, overrides)
                if _same_run(run, cfg):
                    summary = json.loads((run / "bench.json").read_text())
                else:
                    if run.exists():  # interrupted, or another config: start it again
                        import shutil

                        shutil.rmtree(run)
                    t = time.perf_counter()
                    record = run_training(VisionTask, cfg, run)
                    losses = [r["loss"] for r in _records(run) if "loss" in r]
                    summary = {**record["final_scores"], "final_loss": statistics.fmean(losses[-10:]),
                               "wall_s": round(time.perf_counter() - t, 1),
                               "load_avg_1m_at_end": os.getloadavg()[0]}
                    (run / "bench.json").write_text(json.dumps(summary, indent=2) + "\n")
                entry = {
                    "dataset": dataset,
                    "strategy": strategy,
                    "seed": seed,
                    "knn_top1": summary["knn_top1"],
                    "knn_top5": summary["knn_top5"],
                    "final_loss": summary["final_loss"],
                    "wall_s": summary.get("wall_s", summary.get("seconds")),
                    "load_avg_1m_at_end": summary.get("load_avg_1m_at_end"),
                    **_last_diagnostics(run),
                }
                result["runs"].append(entry)
                print(
                    f"{dataset:14s} {strategy:7s} seed {seed}: k-NN top-1 {entry['knn_top1']:.2f}% "
                    f"({entry['wall_s']} s)",
                    flush=True,
                )
                if args.json:
                    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
                    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    # The table.
    table = []
    for dataset in args.datasets:
        rnd = [r["knn_top1"] for r in result["random_init"] if r["dataset"] == dataset]
        m, s = _mean_std(rnd)
        table.append({"dataset": dataset, "strategy": "untrained", "mean": m, "std": s, "seeds": rnd})
        for strategy in args.strategies:
            vals = [
                r["knn_top1"] for r in result["runs"] if r["dataset"] == dataset and r["strategy"] == strategy
            ]
            m, s = _mean_std(vals)
            table.append({"dataset": dataset, "strategy": strategy, "mean": m, "std": s, "seeds": vals})
    result["table"] = table
    print(f"\n{'dataset':14s} {'strategy':10s} {'k-NN top-1 (mean ± std)':>24s}   per seed")
    for row in table:
        seeds = ", ".join(f"{v:.1f}" for v in row["seeds"])
        print(f"{row['dataset']:14s} {row['strategy']:10s} {row['mean']:16.2f} ± {row['std']:4.2f}   {seeds}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
