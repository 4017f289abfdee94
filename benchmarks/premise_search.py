"""Search for a CPU vision setting where MoCHi's premise holds: the proxy task gets solved.

MoCHi (Kalantidis et al., NeurIPS 2020, Sec. 3) argues that once MoCo's proxy task is mostly solved (the
positive key outscores every queue negative for most queries) the negatives are easy and mixing harder
ones helps. At ``benchmarks/configs/vision_step_cifar10.yaml``'s budget (the CPU vision config when this
search ran; ``configs/vision/cpu_mocov2_cifar10.yaml`` is now its winner) the logged ``proxy_acc`` stays
near 0.1, so a comparison there cannot test that argument. This script trains candidate settings (that
config with ``--set`` overrides: a smaller queue, fewer images seen more often, a smaller resolution, weaker
augmentations), each one run of seed 0 in a fresh process with one torch thread, and writes for each the
``proxy_acc`` curve (the 0-1 fraction logged every ``log.log_steps`` steps), the first step where it passes
0.8, the selection score ``val_knn_top1`` and the process's wall and CPU seconds.

    python benchmarks/premise_search.py --out results/premise_search_2026-12-02 [--only NAME]

Only the validation split is scored (``eval.final_scores: []``): the test images stay unseen while the
setting is chosen. Needs ``HARDMIX_DATA``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "benchmarks" / "configs" / "vision_step_cifar10.yaml"
# Shared by every candidate: a 1,000-image validation split, a 2,000-image k-NN bank, no test scores.
COMMON = ["data.val_samples=1000", "eval.knn_train_samples=2000", "eval.at_end=true",
          "eval.final_scores=[]", "train.save_steps=0", "log.log_steps=10", "train.seed=0"]
WEAK = ["augment.crop_scale=[0.5, 1.0]", "augment.blur_prob=0.0", "augment.jitter_prob=0.4"]
FLIP = ["augment.crop_scale=[0.8, 1.0]", "augment.blur_prob=0.0", "augment.jitter_prob=0.0",
        "augment.grayscale_prob=0.0"]
CANDIDATES: dict[str, list[str]] = {
    # 4,000 images x 8 epochs = 496 steps of 64, K 256 (4 batches), the CPU config's m 0.999: measured
    # first; proxy_acc stayed under 0.11 (the loss fell from 5.27 to 4.87 of ln 257 = 5.55), so the key
    # encoder's pace (m) and the augmentations' strength come next.
    "k256_4000x8": ["data.max_samples=4000", "train.epochs=8", "loss.queue_size=256"],
    # 1,000 images seen 32 times (480 steps), K 256, m 0.99 (the key encoder follows within ~100 steps),
    # weaker augmentations (larger crops, no blur, less colour jitter).
    "m099_k256_1000x32_weak": ["data.max_samples=1000", "train.epochs=32", "loss.queue_size=256",
                               "model.momentum=0.99", *WEAK],
    # 16-pixel crops (a quarter of the pixels): 2,000 images x 32 epochs (992 steps) at about the cost of
    # 250 steps at 32 pixels.
    "m099_k256_2000x32_16px_weak": ["data.max_samples=2000", "train.epochs=32", "loss.queue_size=256",
                                    "model.momentum=0.99", "augment.crop_size=16", *WEAK],
    # Those two left proxy_acc under 0.3 after its first steps, the negatives crowded (mean negative
    # similarity 0.54, uniformity -0.49): a queue of one batch (K 64) and MoCo-v2's temperature 0.2.
    "m099_k64_t02_1000x32_weak": ["data.max_samples=1000", "train.epochs=32", "loss.queue_size=64",
                                  "model.momentum=0.99", "loss.temperature=0.2", *WEAK],
    # Views that differ little (crops of 80-100%, flips only): the proxy task at its easiest, K 256.
    "m099_k256_1000x32_flip": ["data.max_samples=1000", "train.epochs=32", "loss.queue_size=256",
                               "model.momentum=0.99", *FLIP],
    # Those two learned (the loss fell to 2.1-2.5) but proxy_acc reached about 0.5: the easiest views
    # with a queue of one batch, and at 16 pixels with three times the epochs (1,440 steps).
    "m099_k64_1000x32_flip": ["data.max_samples=1000", "train.epochs=32", "loss.queue_size=64",
                              "model.momentum=0.99", *FLIP],
    "m099_k256_1000x96_16px_flip": ["data.max_samples=1000", "train.epochs=96", "loss.queue_size=256",
                                    "model.momentum=0.99", "augment.crop_size=16", *FLIP],
}


def run(name: str, overrides: list[str], out: Path) -> dict[str, object]:
    run_dir = out / "runs" / name
    cmd = [sys.executable, "-m", "hardmix", "train", "vision", str(CONFIG), "--output", str(run_dir)]
    for item in [*COMMON, *overrides]:
        cmd += ["--set", item]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record: dict[str, object] = {"name": name, "overrides": overrides, "returncode": proc.returncode,
                                 "wall_seconds": round(wall, 1),
                                 "cpu_seconds": round(after.ru_utime - before.ru_utime
                                                      + after.ru_stime - before.ru_stime, 1)}
    if proc.returncode:
        record["error"] = proc.stderr.strip().splitlines()[-1:] if proc.stderr else []
        return record
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [(x["step"], round(x["proxy_acc"], 4)) for x in lines if "proxy_acc" in x]
    results = json.loads((run_dir / "results.json").read_text())
    record.update({
        "steps": results["steps"],
        "proxy_acc": curve,
        "first_step_over_0.8": next((s for s, a in curve if a > 0.8), None),
        "final_proxy_acc": curve[-1][1] if curve else None,
        "val_knn_top1": results["final_scores"].get("val_knn_top1"),
    })
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", action="append", help="candidate names (default: all)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary_path = args.out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.python_version()}",
        "config": str(CONFIG.relative_to(REPO)), "common": COMMON, "runs": {}}
    for name in args.only or list(CANDIDATES):
        if name in summary["runs"] and summary["runs"][name].get("returncode") == 0:
            continue  # measured already
        load = os.getloadavg()
        record = run(name, CANDIDATES[name], args.out)
        record["load_before"] = [round(x, 2) for x in load]
        record["load_after"] = [round(x, 2) for x in os.getloadavg()]
        if summary_path.is_file():  # another invocation may have added runs meanwhile
            summary["runs"] = {**json.loads(summary_path.read_text())["runs"], **summary["runs"]}
        summary["runs"][name] = record
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
        print(name, {k: record.get(k) for k in ("wall_seconds", "first_step_over_0.8", "final_proxy_acc",
                                                 "val_knn_top1", "error")}, flush=True)


if __name__ == "__main__":
    main()
