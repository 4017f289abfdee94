"""Where a step's time goes, and the paths the other stages skip (gpu_check stages ``profile`` and ``paths``).

``profile``: ``torch.profiler`` over a few steps, after a warm-up, of the vision ``none`` step at
ResNet-18/32 px (``gpu_steps.py``'s ``resnet18-32`` group: augmentation from the device cache, MoCo, SGD)
and of the text ``none`` step at batch 64 (BERT-base-shaped, bf16, length 32). Per step: the operators
(``aten::`` calls) and, on CUDA, the device kernels launched and the host-device synchronizations
(``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaEventSynchronize`` and blocking
``cudaMemcpy`` calls of the CUDA runtime); the top kernels and operators by time. On the CPU (the dry
mode) there are no kernels or synchronizations: the operators are counted, and the calls that would wait
for a device (``aten::_local_scalar_dense``, i.e. ``.item()``/``float()``, and ``aten::nonzero``).

``paths``: three cases, each with a status, written to the JSON as each ends (a stage stopped at its cap
keeps the cases it finished):

- ``text_train``: ``hardmix train text`` with ``train.precision bf16`` for :data:`TEXT_STEPS` real steps, on
  the tokenizer, model config and sentences that ``gpu_data.py`` carries (``$HARDMIX_DATA/text``); the model
  is random-initialized from the config here (no weights travel). Ok: the run ends, every logged loss
  finite, the run's record says bf16.
- ``linear_probe``: the linear probe's augmented features (:class:`hardmix.vision.augmented_features.
  AugmentedFeatures`: augmentation, channels-last and bf16 autocast on the device) of a ResNet-18 on the
  carried CIFAR-10 images. Ok: the same (indices, step) give the same features, another step others, and
  the device's features agree with the CPU's fp32 ones (the same crops: the draws are made on the CPU) to
  a cosine of at least :data:`PROBE_MIN_COSINE` (bf16).
- ``resume``: a short MoCHi vision run (``hardmix train vision``, bf16, channels-last) uninterrupted, and the
  same run stopped half-way (``train.stop_after_steps``) then continued with ``--resume``; its per-step
  losses are compared with the uninterrupted run's. cuDNN is set deterministic for the case. Ok: equal
  bitwise, or within a relative difference of :data:`RESUME_RTOL` at every step (recorded: ``bitwise`` and
  ``max_rel_diff``).

Usage:
    python benchmarks/gpu_paths.py profile --out profile.json --work WORK [--dry --device cpu]
    python benchmarks/gpu_paths.py paths --out paths.json --work WORK [--dry --device cpu] [--cases resume]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Deterministic cuBLAS for the resume case: must be set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_steps  # noqa: E402
import gpu_training  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: (warm-up steps, profiled steps) of each profiled step
PROFILE_STEPS = {"full": (3, 3), "dry": (1, 2)}
#: the text step profiled: batch (full, dry)
PROFILE_TEXT_BATCH = {"full": 64, "dry": 20}
#: CUDA runtime calls that make the host wait for the device
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
#: aten calls that wait for a device when their tensor lives on one
WAITING_OPS = ("aten::_local_scalar_dense", "aten::nonzero")
TOP = 15

#: text_train: steps, batch, and the config it starts from
TEXT_STEPS = 6
TEXT_CONFIG = ROOT / "configs" / "text" / "cpu_simcse.yaml"
#: the dry mode's model: the carried config, shrunk
TEXT_DRY_MODEL = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)
#: linear_probe: images, and the least cosine between the device's and the CPU's features
PROBE_IMAGES = 256
PROBE_MIN_COSINE = 0.99
#: resume: steps of the uninterrupted run (stopped at half), and the largest relative loss difference
RESUME_STEPS = {"full": 8, "dry": 4}
RESUME_RTOL = 1e-3


# ------------------------------------------------------------------------------------------ profile
def summarize(prof: Any, steps: int, device: torch.device) -> dict[str, Any]:
    """Per-step counts and the top operators (self CPU time) and kernels (device time) of a profile."""
    events = prof.events()
    ops = Counter(e.name for e in events if e.name.startswith("aten::"))
    kernels: Counter[str] = Counter()
    kernel_us: Counter[str] = Counter()
    syncs = 0
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name] += 1
            kernel_us[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        elif e.name.startswith(SYNC_CALLS) and (e.name != "cudaMemcpyAsync"):
            syncs += 1
    table = prof.key_averages()
    top_ops = sorted((a for a in table if a.key.startswith("aten::")), key=lambda a: -a.self_cpu_time_total)
    out: dict[str, Any] = {
        "steps": steps,
        "ops_per_step": sum(ops.values()) / steps,
        "waiting_ops_per_step": {k: ops[k] / steps for k in WAITING_OPS},
        "top_ops": [{"name": a.key, "calls_per_step": a.count / steps,
                     "self_cpu_ms_per_step": a.self_cpu_time_total / 1000 / steps} for a in top_ops[:TOP]],
    }
    if device.type == "cuda":
        out["kernels_per_step"] = sum(kernels.values()) / steps
        out["syncs_per_step"] = syncs / steps
        out["top_kernels"] = [{"name": k[:160], "calls_per_step": kernels[k] / steps,
                               "ms_per_step": us / 1000 / steps} for k, us in kernel_us.most_common(TOP)]
    else:
        out["kernels_per_step"] = None
        out["syncs_per_step"] = None
    return out


def profile_step(fn: Callable[[int], Any], device: torch.device, warmup: int, steps: int) -> dict[str, Any]:
    """Warm ``fn`` up, time ``steps`` steps without the profiler, then profile as many."""
    from torch.profiler import ProfilerActivity, profile

    for s in range(warmup):
        fn(s)
    gpu_steps._sync(device)
    times = []
    for s in range(warmup, warmup + steps):
        t0 = time.perf_counter()
        fn(s)
        gpu_steps._sync(device)
        times.append(time.perf_counter() - t0)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for s in range(warmup + steps, warmup + 2 * steps):
            fn(s)
        gpu_steps._sync(device)
    return {"step_ms": 1000 * sorted(times)[len(times) // 2], **summarize(prof, steps, device)}


def profile_vision(mode: str, device: torch.device, precision: str) -> dict[str, Any]:
    from hardmix.vision.augment import TensorAugment
    from hardmix.vision.config import AugmentSection
    from hardmix.vision.pipeline import TensorBatches

    s = gpu_steps.VISION_GROUPS[mode]["resnet18-32"]
    g = torch.Generator().manual_seed(0)
    cache = torch.randint(0, 256, (s["cache_images"], 3, s["cache_px"], s["cache_px"]), generator=g,
                          dtype=torch.uint8)
    batches = TensorBatches(cache, TensorAugment(AugmentSection(crop_size=s["crop"])), s["batch"], 0,
                            device=device)
    step = gpu_steps.VisionStep(s, None, batches, device, precision)
    return {"group": "resnet18-32", "variant": "none", "batch": s["batch"],
            **profile_step(step.step, device, *PROFILE_STEPS[mode])}


def profile_text(mode: str, device: torch.device, precision: str) -> dict[str, Any]:
    bert = gpu_steps.BERT_BASE if mode == "full" else gpu_steps.BERT_TINY
    batch = PROFILE_TEXT_BATCH[mode]
    length = 32 if mode == "full" else 16
    step = gpu_steps.TextStep("none", bert, device, precision)
    data = gpu_steps.token_batches(4, batch, length, bert["vocab_size"], 0, device)
    return {"variant": "none", "batch": batch, "max_length": length,
            **profile_step(lambda s: step.step(data[s % len(data)], s), device, *PROFILE_STEPS[mode])}


def cmd_profile(args: argparse.Namespace, device: torch.device, write: Callable[[dict], None]) -> int:
    mode = "dry" if args.dry else "full"
    result: dict[str, Any] = {"mode": mode, "precision": args.precision, "machine": gpu_steps.machine(device),
                              "profile_steps": PROFILE_STEPS[mode], "steps": {}}
    ok = True
    for name, fn in (("vision_resnet18_32_none", profile_vision), ("text_b64_none", profile_text)):
        t0 = time.perf_counter()
        try:
            entry = {"status": "ok", **fn(mode, device, args.precision)}
        except Exception as e:  # noqa: BLE001 - recorded, and the next one still runs
            entry = {"status": "failed", "error": f"{type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()}
            ok = False
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        result["steps"][name] = entry
        shown = {k: entry.get(k) for k in ("status", "step_ms", "ops_per_step", "kernels_per_step",
                                            "syncs_per_step", "seconds", "error")}
        print(f"profile {name}: {json.dumps(shown)}", flush=True)
        if entry.get("traceback"):
            print(entry["traceback"], flush=True)
        write(result)
    return 0 if ok else 1


# ------------------------------------------------------------------------------------------ paths
def _cli(argv: list[str]) -> int:
    from hardmix.cli import main as hardmix_main

    print(f"\n== python -m hardmix {' '.join(argv)}", flush=True)
    return int(hardmix_main(argv) or 0)


def _losses(run: Path) -> list[float]:
    metrics = run / gpu_training.RUN_FILES["metrics"]
    if not metrics.is_file():
        return []
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    return [r["loss"] for r in rows if "loss" in r]


def text_model(work: Path, dry: bool) -> tuple[Path, Path]:
    """A random-init BERT from the carried config and tokenizer in ``work``; (model folder, sentences)."""
    from transformers import BertConfig, BertModel

    from hardmix.datasets.paths import data_root

    carried = Path(data_root()) / "text"
    if not (carried / "tokenizer" / "config.json").is_file():
        raise FileNotFoundError(f"{carried}/tokenizer: no carried tokenizer (bash benchmarks/gpu_check.sh "
                                "--prepare-data .gpu_data, and carry it)")
    folder = work / "text_model"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(carried / "tokenizer", folder)
    config = BertConfig.from_json_file(str(folder / "config.json"))
    if dry:
        for k, v in TEXT_DRY_MODEL.items():
            setattr(config, k, v)
    torch.manual_seed(0)
    BertModel(config, add_pooling_layer=False).save_pretrained(str(folder))
    return folder, carried / "sentences.txt"


def case_text_train(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    work = Path(args.work)
    folder, sentences = text_model(work, args.dry)
    run = work / "runs" / "text_train"
    sets = {"model.name_or_path": str(folder), "data.train_file": str(sentences), "train.device": device.type,
            "train.precision": "bf16", "train.max_steps": TEXT_STEPS, "train.batch_size": 32,
            "train.save_steps": 0, "eval.eval_steps": 0, "eval.at_end": False, "log.log_steps": 1,
            "log.progress": False}
    argv = ["train", "text", str(TEXT_CONFIG), "--output", str(run)]
    for k, v in sets.items():
        argv += ["--set", f"{k}={json.dumps(v)}"]
    rc = _cli(argv)
    losses = _losses(run)
    results_file = run / gpu_training.RUN_FILES["results"]
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    precision = results.get("precision") or (results.get("config") or {}).get("train", {}).get("precision")
    ok = rc == 0 and len(losses) == TEXT_STEPS and all(math.isfinite(x) for x in losses)
    return {"status": "ok" if ok else "failed", "returncode": rc, "steps": len(losses), "losses": losses,
            "final_loss": losses[-1] if losses else None, "precision": precision, "device": device.type,
            "sentences": sum(1 for _ in open(sentences, encoding="utf-8"))}


def case_linear_probe(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from hardmix.vision.augmented_features import AugmentedFeatures, linear_augment_config
    from hardmix.vision.backbones import build_backbone
    from hardmix.vision.config import AugmentSection
    from hardmix.vision.data import dataset_root, decode_images, scan_image_folder, split_folder

    n = PROBE_IMAGES if not args.dry else 32
    paths = scan_image_folder(split_folder(dataset_root("cifar10"), "train")).paths[:n]
    images, _, _ = decode_images(paths, workers=4)
    torch.manual_seed(0)
    net, _ = build_backbone("resnet18", 64 if not args.dry else 4, True)
    aug = linear_augment_config(AugmentSection(crop_size=32))
    on_device = AugmentedFeatures(net.to(device), images, aug, seed=0, device=device)
    idx = torch.arange(min(n, 64))
    a, b, c = on_device(idx, step=0), on_device(idx, step=0), on_device(idx, step=1)
    net_cpu, _ = build_backbone("resnet18", 64 if not args.dry else 4, True)
    net_cpu.load_state_dict({k: v.cpu() for k, v in net.state_dict().items()})
    ref = AugmentedFeatures(net_cpu, images, aug, seed=0, device="cpu")(idx, step=0)
    cosine = torch.nn.functional.cosine_similarity(a.float(), ref.float(), dim=1)
    checks = {"finite": bool(torch.isfinite(a).all()), "same_step_equal": bool(torch.equal(a, b)),
              "other_step_differs": not torch.equal(a, c),
              "min_cosine_vs_cpu_fp32": float(cosine.min()), "cosine_at_least": PROBE_MIN_COSINE}
    ok = checks["finite"] and checks["same_step_equal"] and checks["other_step_differs"] \
        and checks["min_cosine_vs_cpu_fp32"] >= PROBE_MIN_COSINE
    return {"status": "ok" if ok else "failed", "images": n, "features": list(a.shape),
            "device": device.type, **checks}


def case_resume(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    mode = "dry" if args.dry else "full"
    steps = RESUME_STEPS[mode]
    base = gpu_training.DRY if args.dry else gpu_training.FULL
    batch = base["batch_size"]
    mochi = [{"name": "mochi", **gpu_training.MOCHI[mode], "warmup_steps": 0}]
    settings = {**base, "device": device.type, "epochs": 1, "warmup_epochs": 0.0, "strategies": mochi,
                "knn_final": False, "max_samples": steps * batch, "val_samples": None, "log_steps": 1,
                "save": 0}
    if args.dry:
        settings["max_samples"] = steps * batch  # the dry tree has 320 images
    work = Path(args.work)
    sets = gpu_training.overrides(settings, str(work / "cache"))
    cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        def run(out: Path, extra: list[str], resume: bool = False) -> int:
            argv = ["train", "vision", str(gpu_training.BASE_CONFIG), "--output", str(out)]
            for o in sets + extra:
                argv += ["--set", o]
            return _cli(argv + (["--resume"] if resume else []))

        whole, parts = work / "runs" / "resume_whole", work / "runs" / "resume_parts"
        rcs = [run(whole, []), run(parts, [f"train.stop_after_steps={steps // 2}"])]
        first = len(_losses(parts))
        rcs.append(run(parts, ["train.stop_after_steps=null"], resume=True))
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn
    a, b = _losses(whole), _losses(parts)
    same_length = len(a) == len(b) == steps
    rel = [abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b, strict=False)]
    max_rel = max(rel) if rel else None
    bitwise = same_length and a == b
    ok = all(rc == 0 for rc in rcs) and same_length and first == steps // 2 \
        and max_rel is not None and max_rel <= RESUME_RTOL
    return {"status": "ok" if ok else "failed", "returncodes": rcs, "steps": len(b),
            "stopped_after": first, "bitwise": bitwise, "max_rel_diff": max_rel, "rtol": RESUME_RTOL,
            "losses_uninterrupted": a, "losses_resumed": b, "device": device.type}


CASES = {"text_train": case_text_train, "linear_probe": case_linear_probe, "resume": case_resume}


def cmd_paths(args: argparse.Namespace, device: torch.device, write: Callable[[dict], None]) -> int:
    result: dict[str, Any] = {"mode": "dry" if args.dry else "full", "machine": gpu_steps.machine(device),
                              "cases": {}}
    ok = True
    wanted = [c for c in (getattr(args, "cases", "") or "").split(",") if c] or list(CASES)
    for name in wanted:
        case = CASES[name]
        t0 = time.perf_counter()
        try:
            entry = case(args, device)
        except Exception as e:  # noqa: BLE001 - recorded, and the next case still runs
            entry = {"status": "failed", "error": f"{type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()}
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        ok = ok and entry["status"] == "ok"
        result["cases"][name] = entry
        shown = {k: v for k, v in entry.items() if not k.startswith("losses") and k != "traceback"}
        print(f"case {name}: {json.dumps(shown)}", flush=True)
        if entry.get("traceback"):
            print(entry["traceback"], flush=True)
        write(result)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["profile", "paths"])
    p.add_argument("--dry", action="store_true", help="tiny sizes on the CPU (CI)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "gpu_check")
    p.add_argument("--cases", default="", help=f"paths: a comma list of {', '.join(CASES)} (default: all)")
    args = p.parse_args(argv)
    unknown = {c for c in args.cases.split(",") if c} - set(CASES)
    if unknown:
        p.error(f"--cases: unknown case(s) {', '.join(sorted(unknown))}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no GPU is available")
    args.work.mkdir(parents=True, exist_ok=True)

    def write(result: dict) -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    if args.dry:
        torch.set_num_threads(1)
    run = cmd_profile if args.what == "profile" else cmd_paths
    rc = run(args, device, write)
    print(f"wrote {args.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
