"""The GPU check's training stage (``gpu_training.py train``, MoCo-v2) on the CPU at reduced scale.

Every setting of ``gpu_training.FULL`` is kept (batch 256, temperature 0.2, the key encoder's momentum
0.99 -> 0.999 on a cosine, split-BN in 8 groups, head 2048-128, SGD with weight decay 1e-4, a cosine
learning rate after a warm-up of ``LR_WARMUP_FRACTION`` of the run, 11 epochs) except what a CPU needs: the
CIFAR ResNet-18 at ``--width`` (8: channels 8-64, against 64), ``--images`` class-balanced training images
of the shared CIFAR-10 (4,000, against the check's 15,000), fp32, one torch thread, and a smaller k-NN (a
bank of 5,000 training images, 1,000 test queries, k 200). Each variant changes one factor from its base
(``VARIANTS``): the first GPU run's settings (``FIRST_RUN``) or today's (``FULL`` as it is); ``demo`` changes
the four in which MoCo's CIFAR-10 demo differs, and ``today_638`` (:data:`GPU_LENGTH`) only the length, to
the GPU run's number of steps. The untrained network of the same seed is scored under the same protocol
before the first step (``eval.start: all``, ``results.json`` ``start_scores``). A probe follows its full
run's schedule but stops early (at step 45, ``solo_warmup`` at 300), unscored.

    python benchmarks/gpu_recipe_cpu.py --out results/gpu_recipe_cpu_2026-12-06 --only first_run
    python benchmarks/gpu_recipe_cpu.py --out DIR --table      # summary.json again from the run folders

Writes ``DIR/<variant>/`` (the run's ``metrics.jsonl``, ``results.json``, ``config.yaml``; no checkpoint,
no model) and ``DIR/summary.json`` (one row per variant, :func:`summarize`; :func:`table` prints it as the
README's table). Needs ``HARDMIX_DATA``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import gpu_training as gt  # noqa: E402  (the check's own settings and helpers)

from hardmix.training.run_folder import BEST  # noqa: E402

EPOCHS = 11  # the epochs the check planned on the first GPU run (75 s x 0.85 at 3,740 images/s)
#: what the CPU changes from the check's full mode (logical names of ``gpu_training.KEYS``)
REDUCED = {
    "device": "cpu", "threads": 1, "precision": "fp32", "channels_last": False, "num_workers": 2,
    "val_samples": 1000, "knn_train_samples": 5000, "knn_test_samples": 1000, "knn_k": 200,
    "log_steps": 5, "start": "all", "strategies": "none",
}
#: the check's settings of the first GPU run (2026-12-06) where they differ from today's ``FULL``
FIRST_RUN: dict[str, Any] = {"lr": 0.3, "queue_size": 4096}
#: extra config overrides (not in ``gpu_training.KEYS``) of the first run: none
FIRST_RUN_SETS: list[str] = []
#: a probe: the run's schedule, stopped after the collapse shows (it does by step 20 at lr 0.3), unscored
PROBE: dict[str, Any] = {"start": "none", "knn_final": False}
PROBE_SETS = ["train.stop_after_steps=45"]
#: the rest of MoCo's CIFAR-10 demo (He et al., facebookresearch/moco colab: m 0.99, wd 5e-4, its crops
#: without blur; its temperature 0.1 is a logical name)
DEMO_SETS = ["model.momentum_schedule=constant", "train.weight_decay=5e-4", "augment.blur_prob=0"]
#: variant -> (its base: "first_run" or "today" (``gpu_training.FULL`` as it is), logical-name changes,
#: raw ``--set`` overrides, what changed)
VARIANTS: dict[str, tuple[str, dict[str, Any], list[str], str]] = {
    "first_run": ("first_run", {}, [], "the first GPU run's settings: lr 0.3 per 256, K 4096"),
    "lr_0.03": ("first_run", {"lr": 0.03}, [], "lr 0.03 per 256 (MoCo-v2's rule)"),
    "warmup_x4": ("first_run", {"warmup_epochs": round(4 * 0.05 * EPOCHS, 3), **PROBE}, PROBE_SETS,
                  "a warm-up 4 times as long (0.2 of the run); stopped at step 45"),
    "m_0.999": ("first_run", PROBE, ["model.momentum=0.999", "model.momentum_schedule=constant", *PROBE_SETS],
                "the key encoder's momentum 0.999, constant (MoCo-v2's); stopped at step 45"),
    "bn_1": ("first_run", {"bn_splits": 1, **PROBE}, PROBE_SETS,
             "BatchNorm over the whole batch of 256 (no split-BN groups of 32); stopped at step 45"),
    "wd_0": ("first_run", PROBE, ["train.weight_decay=0", *PROBE_SETS],
             "no weight decay (1e-4 before); stopped at step 45"),
    "k_256": ("first_run", {"queue_size": 256, **PROBE}, PROBE_SETS,
              "a queue of one batch, K 256 (no random initial key after the first step); stopped at step 45"),
    "solo_warmup": ("first_run", {"epochs": 1000, "warmup_epochs": 10, **PROBE},
                    ["train.stop_after_steps=300"],
                    "solo-learn's schedule as the base config has it (1,000 epochs, 10 of warm-up: 150 steps "
                    "here); stopped at step 300"),
    "solo_short": ("first_run", {"epochs": 60, "warmup_epochs": 10}, [],
                   "solo-learn's lr 0.3 per 256 and warm-up of 10 epochs (150 steps) as the base config has "
                   "them, the cosine after it shortened to 60 epochs (900 steps)"),
    "today": ("today", {}, [], "today's settings: lr 0.03 and K 256"),
    "today_lr_0.06": ("today", {"lr": 0.06}, [], "today's settings at lr 0.06 per 256"),
    "today_638": ("today", {"epochs": 43, "warmup_epochs": round(0.05 * 43, 3)}, [],
                  "today's settings for the GPU run's number of steps (43 epochs of the 4,000 images: "
                  "645 steps, the GPU's 638 at 15,000 images)"),
    "demo": ("today", {"temperature": 0.1}, DEMO_SETS,
             "today's settings with the rest of MoCo's CIFAR-10 demo: key momentum 0.99 constant, "
             "temperature 0.1, weight decay 5e-4, no blur"),
    "demo_k4096": ("today", {"temperature": 0.1, "queue_size": 4096}, DEMO_SETS,
                   "`demo` with the demo's queue, K 4096"),
}
#: the run that shows today's settings
TODAY = "today"
#: today's settings for as many steps as the GPU run takes (its network still reduced): what says whether
#: the check's training stage learns
GPU_LENGTH = "today_638"
#: a row's loss: the mean of the first and of the last ``EDGE`` values logged from step ``FROM_STEP`` on,
#: where the first run's queue of 4096 keys (16 batches) holds no random initial key any more
EDGE = 3
FROM_STEP = FIRST_RUN["queue_size"] // gt.FULL["batch_size"]


#: the fields of a row that only the script's own call of a run records
RUN_ONLY = ("returncode", "wall_s", "load_after")


def settings_of(name: str, width: int, images: int) -> tuple[dict[str, Any], list[str]]:
    """The logical settings and the extra overrides of variant ``name``."""
    base, changes, sets, _ = VARIANTS[name]
    s: dict[str, Any] = {**gt.FULL, "epochs": EPOCHS,
                         "warmup_epochs": round(gt.LR_WARMUP_FRACTION * EPOCHS, 3)}
    extra = ["eval.final_scores=[knn_top1, knn_top5]"]
    if base == "first_run":
        s.update(FIRST_RUN)
        extra += FIRST_RUN_SETS
    s.update({**REDUCED, "width": width, "max_samples": images, **changes})
    return s, extra + sets


def summarize(run_dir: Path, name: str) -> dict[str, Any]:
    """One row of the table from a run folder: the loss from :data:`FROM_STEP` on (the mean of the
    first and of the last ``EDGE`` values logged from there; before, a queue of 4096 still holds random
    initial keys, easy negatives) and its chance level ln(K + 1); the proxy accuracy (the last logged
    value, the largest, the mean of the last 5); the query uniformity (its largest value from
    :data:`FROM_STEP` on, near 0 for a collapse, and the last); the test k-NN top-1 of the start
    (``start_scores``) and of the end (``final_scores``; none for a run stopped early); and the run's
    ``learned`` verdict (its validation k-NN against its start's)."""
    rows = [json.loads(x) for x in (run_dir / gt.RUN_FILES["metrics"]).read_text().splitlines()]
    logged = [r for r in rows if "loss" in r and "proxy_acc" in r]
    later = [r for r in logged if r["step"] >= FROM_STEP]
    losses = [r["loss"] for r in later]
    queue = max(r["queue_filled"] for r in logged)
    results = run_dir / gt.RUN_FILES["results"]
    res = json.loads(results.read_text()) if results.is_file() else {}
    start, end = res.get("start_scores") or {}, res.get("final_scores") or {}
    base, changes, sets, what = VARIANTS[name]
    return {
        "variant": name, "what": what, "base": base, "changes": changes, "sets": sets,
        "steps": logged[-1]["step"], "train_seconds": logged[-1]["wall_seconds"], "queue": queue,
        "loss_first": round(statistics.fmean(losses[:EDGE]), 4),
        "loss_last": round(statistics.fmean(losses[-EDGE:]), 4),
        "loss_chance": round(math.log(queue + 1), 4),
        "proxy_acc_last": round(logged[-1]["proxy_acc"], 4),
        "proxy_acc_max": round(max(r["proxy_acc"] for r in logged), 4),
        "proxy_acc_last5": round(statistics.fmean(r["proxy_acc"] for r in logged[-5:]), 4),
        "uniformity_max": round(max(r["uniformity"] for r in later), 4),
        "uniformity_last": round(logged[-1]["uniformity"], 4),
        "knn_top1_start": start.get("knn_top1"), "knn_top1_start_se": start.get("knn_top1_se"),
        "knn_top1_end": end.get("knn_top1"), "knn_top1_end_se": end.get("knn_top1_se"),
        "learned": (res.get("learned") or {}).get("verdict"),
    }


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table(summary: dict[str, Any]) -> list[str]:
    """The README's table: one row per run of ``summary.json``, in the order of :data:`VARIANTS`."""
    lines = ["| run | what changed | steps | loss: first -> last (chance) "
             "| proxy acc: max / mean of last 5 | uniformity: max / last "
             "| test k-NN top-1: start -> end |",
             "|---|---|---:|---|---|---|---|"]
    for name in VARIANTS:
        r = summary["runs"].get(name)
        if r is None:
            continue
        knn = (f"{_num(r['knn_top1_start'], 1)} -> {_num(r['knn_top1_end'], 1)}"
               if r["knn_top1_end"] is not None else "- (stopped early)")
        lines.append(f"| `{name}` | {r['what']} | {r['steps']} "
                     f"| {r['loss_first']:.2f} -> {r['loss_last']:.2f} ({r['loss_chance']:.2f}) "
                     f"| {r['proxy_acc_max']:.2f} / {r['proxy_acc_last5']:.2f} "
                     f"| {r['uniformity_max']:.4f} / {r['uniformity_last']:.4f} | {knn} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--only", nargs="*", default=None, help="variants to run (default: all)")
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--images", type=int, default=4000)
    p.add_argument("--cache", default="/tmp/hardmix_recipe_cache", help="the decoded-image cache")
    p.add_argument("--table", action="store_true", help="only rewrite summary.json from the run folders")
    args = p.parse_args(argv)
    summary_file = args.out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {"runs": {}}
    names = [] if args.table else (args.only or list(VARIANTS))
    for name in names:
        settings, extra = settings_of(name, args.width, args.images)
        run_dir = args.out / name
        if run_dir.exists():
            shutil.rmtree(run_dir)
        sets = gt.overrides(settings, args.cache) + extra
        t0 = time.perf_counter()
        r = gt.run_training(name, sets, run_dir, None, in_process=False)
        (run_dir / gt.RUN_FILES["checkpoint"]).unlink(missing_ok=True)  # the record keeps no model
        shutil.rmtree(run_dir / BEST, ignore_errors=True)
        summary["runs"][name] = {**summarize(run_dir, name), "returncode": r["returncode"],
                                 "wall_s": round(time.perf_counter() - t0, 1),
                                 "load_after": os.getloadavg()[0]}
        summary.update(machine=f"{platform.machine()} {platform.processor() or ''}".strip(),
                       cores=os.cpu_count(), width=args.width, images=args.images, epochs=EPOCHS,
                       reduced=REDUCED)
        args.out.mkdir(parents=True, exist_ok=True)
        summary_file.write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps(summary["runs"][name]), flush=True)
    if args.table:  # every variant's folder, whether or not its run was recorded by this script
        for name in VARIANTS:
            metrics = args.out / name / gt.RUN_FILES["metrics"]
            if metrics.is_file() and '"proxy_acc"' in metrics.read_text():
                was = summary["runs"].get(name, {})  # what only the run's own call saw: its exit, wall, load
                summary["runs"][name] = {**summarize(args.out / name, name),
                                         **{k: was[k] for k in RUN_ONLY if k in was}}
        summary_file.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
