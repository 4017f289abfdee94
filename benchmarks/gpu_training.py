"""A short real vision training on the GPU (gpu_check stage 5) and the 2-process NCCL run (stage 6).

``train``: MoCo-v2 against MoCHi on the carried CIFAR-10 subset (``HARDMIX_DATA`` pointing at the folder
``benchmarks/gpu_data.py`` made), through the command line ``python -m hardmix train vision``, with the
same seed, data and number of epochs. The epochs are as many as fit in ``--seconds`` of training at
``--images-per-s`` (the ResNet-18 MoCHi step of ``gpu_steps.py vision``, measured just before in the same
gpu_check run) with a safety margin. Reported: the final k-NN top-1/top-5 of both runs and of the
untrained network (same seed, same k-NN bank and queries), each run's proxy-task accuracy curve (MoCo's
proxy task: the fraction of queries whose key beats every queue negative, logged by the trainer) and
whether MoCHi's premise holds, i.e. whether the proxy task is mostly solved (mean of the last 5 logged
values at least ``PREMISE_PROXY_ACC``, a threshold chosen here: the paper gives none). Did they learn
(``learned``): each run's k-NN top-1 against the untrained network's, which it must beat by
``LEARNED_MARGIN`` points; in full mode a run that does not makes the stage fail (exit status 1), its JSON
saying which run, by how much and the margin; the dry mode, whose tiny runs cannot learn, records the
verdict and the margin without failing. ``judge`` recomputes the verdict of an existing ``training.json``.

``distributed``: ``torchrun --nproc_per_node 2 -m hardmix train vision`` with NCCL, a few steps on the
same data, where at least 2 GPUs exist; otherwise it says it was skipped (and, with ``--dry``, only
checks that its config builds).

Every config key, config attribute, run-folder file name and results field used by the GPU check is in
the block below (``KEYS``, ``PRECISION_VALUES``, ``RUN_FILES``, ``METRIC_FIELDS``, ``final_knn``,
``run_figures``, ``knn_arguments``): renaming one is an edit there only (``gpu_steps.py`` builds its
networks from the library's classes, not from configs).

Usage:
    python benchmarks/gpu_training.py train --out training.json --images-per-s 20000 --seconds 75
    python benchmarks/gpu_training.py train --dry --out /tmp/t.json
    python benchmarks/gpu_training.py distributed --out distributed.json
    python benchmarks/gpu_training.py judge --out training.json   # the learned verdict of a record
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# ---- the config keys, values and run-folder names the GPU check uses (the one place to rename them) ----
#: the base config, overridden below (a GPU CIFAR-10 recipe: CIFAR ResNet-18, tensor pipeline)
BASE_CONFIG = ROOT / "configs" / "vision" / "mocov2plus_cifar10.yaml"
#: logical name -> config key
KEYS = {
    "dataset": "data.dataset",
    "max_samples": "data.max_samples",
    "pipeline": "data.pipeline",
    "cache_dir": "data.cache_dir",
    "num_workers": "data.num_workers",
    "crop_size": "augment.crop_size",
    "backbone": "model.backbone",
    "width": "model.width",
    "small_stem": "model.small_stem",
    "proj_hidden": "model.proj_hidden",
    "proj_dim": "model.proj_dim",
    "queue_size": "loss.queue_size",
    "bn_splits": "model.bn_splits",
    "temperature": "loss.temperature",
    "two_queries": "loss.two_queries",
    "strategies": "loss.strategies",
    "epochs": "train.epochs",
    "batch_size": "train.batch_size",
    "lr": "train.lr",
    "warmup_epochs": "train.warmup_epochs",
    "seed": "train.seed",
    "device": "train.device",
    "threads": "train.threads",
    "precision": "train.precision",
    "channels_last": "train.channels_last",
    "log_steps": "log.log_steps",
    "save": "train.save_steps",
    "progress": "log.progress",
    "knn_final": "eval.at_end",
    "knn_every": "eval.eval_steps",
    "knn_train_samples": "eval.knn_train_samples",
    "knn_test_samples": "eval.knn_test_samples",
    "knn_k": "eval.knn_k",
    "val_samples": "data.val_samples",
    "start": "eval.start",
}
#: the value of KEYS["precision"] for each precision
PRECISION_VALUES = {"bf16": "bf16", "fp32": "fp32"}
#: the files of a run folder (the training engine's layout)
RUN_FILES = {"config": "config.yaml", "metrics": "metrics.jsonl", "checkpoint": "checkpoint.pt",
             "results": "results.json"}


#: the fields of a metrics.jsonl line that the proxy-task curve reads
METRIC_FIELDS = {"step": "step", "epoch": "epoch", "proxy_acc": "proxy_acc", "loss": "loss"}


def final_knn(results: dict[str, Any]) -> tuple[float | None, float | None]:
    """(k-NN top-1, top-5) from a run's results record (``final_scores``)."""
    scores = results.get("final_scores") or {}
    return scores.get("knn_top1"), scores.get("knn_top5")


def run_figures(results: dict[str, Any]) -> dict[str, Any]:
    """The steps, training seconds and images/s of a run's results file."""
    return {"steps": results.get("steps"), "train_seconds": results.get("wall_seconds"),
            "images_per_s": results.get("samples_per_second")}


def knn_arguments(cfg: Any) -> dict[str, Any]:
    """What the untrained network's k-NN reads from a built VisionConfig (its attribute names)."""
    d, m, e = cfg.data, cfg.model, cfg.eval
    return {"dataset": d.dataset, "cache_dir": d.cache_dir, "workers": d.num_workers,
            "backbone": (m.backbone, m.width, m.small_stem), "k": e.knn_k, "temperature": e.knn_temperature,
            "batch_size": e.batch_size, "backend": e.backend, "train_samples": e.knn_train_samples,
            "test_samples": e.knn_test_samples}


# ---- the training settings ------------------------------------------------------------------------
#: Full mode: the CIFAR ResNet-18 at width 64 of gpu_steps.py's "resnet18-32" group (batch 256, head
#: 2048-128, split-BN in 8), bf16, channels-last, the tensor pipeline on the GPU; the k-NN on all 20,000 +
#: 5,000 images. lr 0.03 per 256, MoCo-v2's rule (He et al. 2020; Chen et al. 2020), and a queue of one
#: batch (K 256; MoCHi's (N, s, s') = (K/8, K/8, K/32)). The first GPU run's lr 0.3 per 256 (the base
#: config's, solo-learn's with 10 warm-up epochs), warmed up over 0.05 of 11 epochs, collapsed the queries
#: within 20 steps whatever else was changed; at lr 0.03 a queue of 4096 let the loss climb back to chance,
#: one batch of keys did not (measured on the CPU at reduced scale: results/gpu_recipe_cpu_2026-12-06).
FULL = {
    "dataset": "cifar10", "max_samples": None, "pipeline": "tensor", "num_workers": 8,
    "crop_size": 32, "backbone": "resnet18", "width": 64, "small_stem": True, "proj_hidden": 2048,
    "proj_dim": 128, "queue_size": 256, "bn_splits": 8, "temperature": 0.2, "two_queries": False,
    "batch_size": 256, "lr": 0.03, "seed": 0, "device": "cuda", "precision": "bf16", "channels_last": True,
    "log_steps": 10, "save": 0, "progress": False, "knn_final": True, "knn_every": 0,
    "knn_train_samples": None, "knn_test_samples": None, "knn_k": 200, "val_samples": 5000,
    # each run's own start: the validation k-NN only (the stage scores the untrained network's test k-NN
    # once, below; the probe at the start would cost a linear probe per run)
    "start": "selection",
}
#: Dry mode: the same code on the CPU at tiny sizes (the dry data tree: 32 + 8 images per class).
DRY = {
    **FULL, "num_workers": 2, "crop_size": 16, "backbone": "resnet10", "width": 4, "proj_hidden": 16,
    "proj_dim": 8, "queue_size": 64, "bn_splits": 2, "batch_size": 32, "device": "cpu", "threads": 1,
    "precision": "fp32", "channels_last": False, "log_steps": 2, "knn_k": 20, "val_samples": 40,
}
MOCHI = {"full": {"n_hard": FULL["queue_size"] // 8, "n_pair": FULL["queue_size"] // 8,
                  "n_query": FULL["queue_size"] // 32, "beta_max": 0.5},
         "dry": {"n_hard": 16, "n_pair": 16, "n_query": 4, "beta_max": 0.5}}
#: MoCHi mixes after this fraction of the training (its ImageNet-100 recipe: 10 of 200 epochs)
MOCHI_WARMUP_FRACTION = 0.05
#: the learning-rate warm-up, as a fraction of the training
LR_WARMUP_FRACTION = 0.05
#: the proxy task counts as mostly solved from this accuracy on (our threshold; see the module docstring)
PREMISE_PROXY_ACC = 0.8
#: a run learned when its k-NN top-1 beats the untrained network's (same seed, bank and queries) by at
#: least this many points: about 1.5 binomial standard errors of a top-1 near 35% on the 5,000 test
#: queries of the full mode (sqrt(0.35 x 0.65 / 5000) = 0.67 points); our threshold
LEARNED_MARGIN = 1.0
#: the share of --seconds planned for, against a trainer step slower than the benchmark's
SAFETY = 0.85
MAX_EPOCHS = 200


def overrides(settings: dict[str, Any], cache_dir: str) -> list[str]:
    """``--set`` arguments for ``settings`` (logical names of :data:`KEYS`)."""
    out = []
    for name, value in {**settings, "cache_dir": cache_dir}.items():
        if name == "precision":
            value = PRECISION_VALUES[value]
        out.append(f"{KEYS[name]}={json.dumps(value)}")  # JSON is YAML: null, true, lists, mappings
    return out


def plan_epochs(images_per_s: float | None, seconds: float, n_train: int, dry: bool) -> dict[str, Any]:
    """How many epochs fit in ``seconds`` at ``images_per_s`` (with :data:`SAFETY`), at least 1."""
    if dry:
        return {"epochs": 1, "why": "dry mode: one epoch"}
    if not images_per_s:
        return {"epochs": 10, "why": "no measured step rate (stage 4 did not run): 10 epochs"}
    epochs = int(max(1, min(MAX_EPOCHS, seconds * SAFETY * images_per_s // n_train)))
    why = f"{seconds} s x {SAFETY} x {images_per_s:.0f} images/s / {n_train} images"
    return {"epochs": epochs, "why": why}


def count_train_images() -> int:
    """Training images of the ``cifar10`` tree under HARDMIX_DATA."""
    from hardmix.vision.data import dataset_root, scan_image_folder, split_folder

    return len(scan_image_folder(split_folder(dataset_root("cifar10"), "train")).paths)


def proxy_curve(metrics: Path) -> dict[str, Any]:
    """The proxy-task accuracy over training (every logged step) and its summary."""
    points, losses = [], []
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            r = json.loads(line)
            f = METRIC_FIELDS
            if f["proxy_acc"] in r:
                points.append([r[f["step"]], r[f["epoch"]], round(r[f["proxy_acc"]], 4)])
            if f["loss"] in r:
                losses.append(r[f["loss"]])
    last = [p[2] for p in points[-5:]]
    last_mean = statistics.fmean(last) if last else None
    return {
        "proxy_acc": points,  # [step, epoch, proxy accuracy]
        "proxy_acc_last5": last_mean,
        "proxy_acc_max": max((p[2] for p in points), default=None),
        "premise_reached": None if last_mean is None else last_mean >= PREMISE_PROXY_ACC,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
    }


def run_training(name: str, sets: list[str], run_dir: Path, timeout: float | None, in_process: bool) -> dict:
    """``python -m hardmix train vision BASE --set ... --output run_dir``; its results and curve.

    ``in_process`` calls the same command line's entry point (:func:`hardmix.cli.main`) in this process
    (the dry mode: one interpreter start for every stage); otherwise a subprocess, stopped after
    ``timeout`` seconds. The trainer's output goes to this process's stdout.
    """
    argv = ["train", "vision", str(BASE_CONFIG), "--output", str(run_dir)]
    for o in sets:
        argv += ["--set", o]
    print(f"\n== {name}: python -m hardmix {' '.join(argv)}", flush=True)
    t0 = time.perf_counter()
    if in_process:
        from hardmix.cli import main as hardmix_main

        rc: int | str = hardmix_main(argv)
    else:
        proc = subprocess.Popen([sys.executable, "-m", "hardmix", *argv], start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = "timeout"
    wall = time.perf_counter() - t0
    results_file = run_dir / RUN_FILES["results"]
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    top1, top5 = final_knn(results)
    return {"returncode": rc, "wall_s": round(wall, 1), "knn_top1": top1, "knn_top5": top5,
            **run_figures(results), **proxy_curve(run_dir / RUN_FILES["metrics"])}


def untrained_knn(settings: dict[str, Any], cache_dir: str) -> dict[str, Any]:
    """k-NN of the network at initialization (same seed as the runs), on the same bank and queries."""
    import torch

    from hardmix.config.loader import load_config
    from hardmix.vision.backbones import build_backbone
    from hardmix.vision.config import VisionConfig
    from hardmix.vision.evaluation import LabelledImages, eval_geometry

    t0 = time.perf_counter()
    cfg = load_config(VisionConfig, BASE_CONFIG, overrides(settings, cache_dir))
    if settings.get("threads"):
        torch.set_num_threads(settings["threads"])
    device = torch.device(settings["device"])
    a = knn_arguments(cfg)
    data = LabelledImages(a["dataset"], eval_geometry(cfg)[0], a["train_samples"], a["test_samples"],
                          a["cache_dir"], a["workers"])
    torch.manual_seed(settings["seed"])
    net, _ = build_backbone(*a["backbone"])
    scores = data.knn(net.to(device), cfg, a["k"], a["temperature"], a["batch_size"], device, a["backend"])
    return {"knn_top1": scores["top1"], "knn_top5": scores["top5"], "bank": len(data.train.labels),
            "queries": len(data.test.labels), "seconds": round(time.perf_counter() - t0, 1)}


def learned_check(untrained: dict[str, Any], runs: dict[str, dict[str, Any]],
                  enforced: bool) -> dict[str, Any]:
    """Whether each run beat the untrained network's k-NN top-1 by :data:`LEARNED_MARGIN` points:
    ``verdict`` true (every run did), false (one did not: ``why`` names it, its gain and the margin) or
    None (no untrained score, or no run scored); ``enforced``: the stage fails on a false verdict (full
    mode).

    >>> c = learned_check({"knn_top1": 34.38}, {"mocov2": {"knn_top1": 30.74}}, enforced=True)
    >>> c["verdict"], round(c["runs"]["mocov2"]["gain"], 2)
    (False, -3.64)
    """
    u = untrained.get("knn_top1")
    per: dict[str, Any] = {}
    for name, r in runs.items():
        k = r.get("knn_top1")
        gain = None if u is None or k is None else k - u
        per[name] = {"knn_top1": k, "gain": gain, "learned": None if gain is None else gain >= LEARNED_MARGIN}
    scored = [p["learned"] for p in per.values() if p["learned"] is not None]
    verdict = None if u is None or not scored else all(scored)
    out: dict[str, Any] = {"margin_points": LEARNED_MARGIN, "untrained_knn_top1": u, "runs": per,
                           "verdict": verdict, "enforced": enforced, "why": None}
    if verdict is False:
        short = [f"{n} {p['knn_top1']:.2f} ({p['gain']:+.2f})" for n, p in per.items()
                 if p["learned"] is False]
        out["why"] = (f"did not learn: k-NN top-1 of {', '.join(short)} against the untrained network's "
                      f"{u:.2f}; a run must beat it by {LEARNED_MARGIN:g} points")
    elif verdict is None:
        out["why"] = "not judged: no untrained k-NN or no run scored"
    return out


def cmd_judge(args: argparse.Namespace) -> int:
    """The learned verdict of an existing ``training.json`` (``--out``), written back into it."""
    result = json.loads(args.out.read_text())
    result["learned"] = learned_check(result.get("untrained") or {}, result.get("runs") or {},
                                      enforced=result.get("mode") != "dry")
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"learned: {result['learned']['verdict']}" + (f" ({result['learned']['why']})"
                                                       if result["learned"]["why"] else ""))
    return 1 if result["learned"]["enforced"] and result["learned"]["verdict"] is not True else 0


def cmd_train(args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    mode = "dry" if args.dry else "full"
    base = DRY if args.dry else FULL
    work = Path(args.work)
    cache = str(work / "cache")
    n_train = count_train_images()
    plan = plan_epochs(args.images_per_s, args.seconds, n_train, args.dry)
    epochs = plan["epochs"]
    common = {**base, "epochs": epochs, "warmup_epochs": round(LR_WARMUP_FRACTION * epochs, 3)}
    mochi = [{"name": "mochi", **MOCHI[mode], "warmup_epochs": round(MOCHI_WARMUP_FRACTION * epochs, 3)}]
    result: dict[str, Any] = {
        "mode": mode, "base_config": str(BASE_CONFIG.relative_to(ROOT)), "train_images": n_train,
        "plan": plan, "settings": common, "mochi": mochi, "premise_threshold": PREMISE_PROXY_ACC,
        "runs": {},
    }

    def write() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    write()
    try:
        result["untrained"] = untrained_knn(common, cache)
    except Exception as e:  # noqa: BLE001 - recorded; the trainings still run
        result["untrained"] = {"error": f"{type(e).__name__}: {e}"}
    print(f"untrained network: {result['untrained']}", flush=True)
    write()
    for name, strategies in (("mocov2", "none"), ("mochi", mochi)):
        run_dir = work / "runs" / name
        sets = overrides({**common, "strategies": strategies}, cache)
        timeout = args.run_timeout
        if args.stage_seconds:  # end before the stage's cap, so that this JSON gets the run's outcome
            left = args.stage_seconds - (time.perf_counter() - t_start) - 3.0
            timeout = left if timeout is None else min(timeout, left)
        r = run_training(name, sets, run_dir, timeout, args.in_process)
        result["runs"][name] = r
        print(f"{name}: k-NN top-1 {r['knn_top1']} top-5 {r['knn_top5']}, {r['steps']} steps in "
              f"{r['train_seconds']} s ({r['images_per_s']} images/s), wall {r['wall_s']} s, proxy accuracy "
              f"last-5 {r['proxy_acc_last5']}, premise reached: {r['premise_reached']}", flush=True)
        write()
    ok = all(r["returncode"] == 0 and r["knn_top1"] is not None for r in result["runs"].values())
    ok = ok and "error" not in result["untrained"]
    learned = result["learned"] = learned_check(result["untrained"], result["runs"], enforced=not args.dry)
    write()
    print(f"learned (margin {LEARNED_MARGIN:g} points over the untrained k-NN top-1): {learned['verdict']}"
          + (f"; {learned['why']}" if learned["why"] else "")
          + ("" if learned["enforced"] else " (dry mode: recorded, not enforced)"), flush=True)
    if learned["enforced"] and learned["verdict"] is False:
        ok = False
    return 0 if ok else 1


def cmd_distributed(args: argparse.Namespace) -> int:
    import torch

    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    settings = {**(DRY if args.dry else FULL), "epochs": 1, "warmup_epochs": 0.0, "strategies": "none",
                "knn_final": False, "max_samples": 2048 if not args.dry else 64}
    if not args.dry:
        settings["device"] = "cuda"
    sets = overrides(settings, str(Path(args.work) / "cache"))
    run_dir = Path(args.work) / "runs" / "ddp2"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
           "hardmix", "train", "vision",
           str(BASE_CONFIG), "--output", str(run_dir)] + [x for o in sets for x in ("--set", o)]
    result: dict[str, Any] = {"gpus": n_gpu, "command": cmd}
    if n_gpu < 2:
        from hardmix.config.loader import load_config
        from hardmix.vision.config import VisionConfig

        load_config(VisionConfig, BASE_CONFIG, sets)  # the command's config builds
        result.update(status="skipped", reason=f"{n_gpu} GPU(s): the NCCL path needs 2; its config builds")
        print(f"NCCL 2-process run skipped: {result['reason']}")
    else:
        t0 = time.perf_counter()
        print(f"\n== torchrun: {' '.join(cmd)}", flush=True)
        proc = subprocess.Popen(cmd, start_new_session=True)
        try:
            rc: int | str = proc.wait(timeout=args.run_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = "timeout"
        results_file = run_dir / RUN_FILES["results"]
        results = json.loads(results_file.read_text()) if results_file.is_file() else {}
        result.update(status="ok" if rc == 0 else "failed", returncode=rc, results=results,
                      wall_s=round(time.perf_counter() - t0, 1))
        print(f"NCCL 2-process run: {result['status']} in {result['wall_s']} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["status"] in ("ok", "skipped") else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["train", "distributed", "judge"])
    p.add_argument("--dry", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--in-process", action="store_true", help="run the trainings in this process (dry mode)")
    p.add_argument("--work", default=str(ROOT / "runs" / "gpu_check"), help="run folders and the cache")
    p.add_argument("--images-per-s", type=float, default=None, help="the measured training-step rate")
    p.add_argument("--seconds", type=float, default=75.0, help="training seconds planned per run")
    p.add_argument("--run-timeout", type=float, default=None, help="stop a run after this many seconds")
    p.add_argument("--stage-seconds", type=float, default=None,
                   help="the whole command's time: a run is stopped 3 s before it runs out")
    args = p.parse_args(argv)
    if args.what == "judge":
        return cmd_judge(args)
    return cmd_train(args) if args.what == "train" else cmd_distributed(args)


if __name__ == "__main__":
    sys.exit(main())
