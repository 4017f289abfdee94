"""Collect the grid's run folders into grid.json (results per point; no checkpoints).

Usage: python3 collect.py OUT.json TUNE_DIR
"""
import json
import re
import sys
from pathlib import Path

runs = Path(sys.argv[2]) / "runs"
log = Path(sys.argv[2]) / "log.txt".read_text()
points = {"base": {}, "m0.99": {"model.momentum": 0.99}, "tau0.2": {"loss.temperature": 0.2},
          "lr1.0": {"train.lr": 1.0}, "K1024": {"loss.queue_size": 1024}, "lr0.25": {"train.lr": 0.25},
          "untrained1step": {"train.max_steps": 1}}
base = {"model.momentum": 0.999, "loss.temperature": 0.1, "loss.queue_size": 4096, "train.lr": 0.5}
grid, other = [], []
for name, change in points.items():
    f = runs / name / "results.json"
    if not f.is_file():
        continue
    r = json.loads(f.read_text())
    losses = [json.loads(x) for x in (runs / name / "metrics.jsonl").read_text().splitlines()]
    losses = [x for x in losses if "loss" in x]
    start = re.search(rf"^(\S+) start {re.escape(name)}: .*\(load ([\d.]+) ([\d.]+) ([\d.]+)\)", log, re.M)
    score = r["final_scores"]["val_knn_top1"]
    rec = {"name": name, "point": {**base, **change}, "seeds": {str(r["seed"]): score},
           "mean": r["final_scores"]["val_knn_top1"], "val_knn_top5": r["final_scores"]["val_knn_top5"],
           "steps": r["steps"], "training_seconds": r["wall_seconds"],
           "last_logged_loss": losses[-1]["loss"] if losses else None,
           "started_utc": start.group(1) if start else None,
           "load_average_at_start": [float(start.group(i)) for i in (2, 3, 4)] if start else None}
    (other if name == "untrained1step" else grid).append(rec)
best = max(grid, key=lambda g: g["mean"])
out = {"score": "val_knn_top1", "steps_per_run": 156, "runs": len(grid), "grid": grid,
       "best": best["point"], "reference_one_step": other,
       "validation": {"val_samples": 5000, "bank": "eval.knn_train_samples 5000 of the other training images",
                      "binomial_se_points_at_28pct": round(100 * (0.28 * 0.72 / 5000) ** 0.5, 2)}}
Path(sys.argv[1]).write_text(json.dumps(out, indent=1) + "\n")
for g in grid + other:
    print(g["name"], round(g["mean"], 2), round(g["val_knn_top5"], 2), g["training_seconds"])
