"""The time budget of ``gpu_check.sh``'s full mode: measured on its first GPU run, and as first estimated.

Measured (:func:`measured`): the seconds of each stage of the first GPU run (2026-12-06, one NVIDIA H100
80GB HBM3, ``results/gpu_check_2026-12-06``), and what each stage of the next run will take, projected from
those figures where the check changed since (the text steps' fewer rounds and third group, the training's
planned seconds, the two new stages ``profile`` and ``paths``, whose GPU-specific parts are assumed, as
each row says). ``tests/test_gpu_check.py`` holds every projection within its stage's cap and the caps
with the set-up within the 6 minutes.

Estimated before any GPU ran it (:func:`estimate`, kept for comparison), per stage: process start-ups
and imports (CPU seconds measured on this project's CPU machine, taken as the GPU machine's per-core
speed), CUDA initialization (assumed), the GPU work (FLOP counts of the
stage's networks at its shapes, counted here with ``torch.utils.flop_counter`` on the meta device, times
the number of steps the stage runs, over the H200's measured bf16 matrix rate at an assumed range of
utilization), and the parts the script times itself (the loss benchmark's minimum repetition time, the
training's planned seconds). The hard bound is the stage caps (``benchmarks/gpu_check.py``) plus the
set-up. Every constant below says whether it is measured, counted or assumed.

Usage:
    python benchmarks/gpu_budget.py            # the tables (Markdown): measured and projected, estimated
    python benchmarks/gpu_budget.py --papers   # GPU-hours of configs/compare/papers_gpu.yaml's cells
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check  # noqa: E402
import gpu_steps  # noqa: E402
import gpu_training  # noqa: E402
import loss_overhead  # noqa: E402

#: bf16 dense rate: an 8192^3 bf16 product through PyTorch on a one-GPU H200 machine of this workplace
#: ran at 788 TFLOP/s (measured, /work/.library/device/KINDS.md, 2026-10-28; the datasheet says ~990)
H200_BF16_FLOPS = 788e12
#: the fraction of that rate the networks' steps reach: an assumed range, not measured (convolutions at
#: 32 px and BERT at 32 tokens are far from an 8192^3 product)
UTILIZATION = (0.2, 0.5)
#: per process, CUDA context and cuBLAS/cuDNN set-up: assumed (no GPU here to measure it)
CUDA_INIT_S = 3.0
#: measured here on 2026-12-01 (CPU seconds, user + sys, 2-core AMD EPYC under load from other jobs)
CPU_S = {
    "start_heavy": 7.95,  # python -c "import torch, torchvision, transformers, timm"
    "start_trainer": 3.74,  # python -c "import hardmix.vision.trainer, hardmix.cli"
    "decode_per_image": 0.58 / 2000,  # hardmix.vision.data.decode_images, 2,000 CIFAR-10 JPEGs, 1 worker
    "knn_per_1000_queries": 0.40,  # 1,000 x 20,000 x 512 product + top-200, one thread
    "device_tests_cpu": 3.4,  # tests/core/test_devices.py, the 14 CPU cases (pytest's own time)
}
#: SimCSE's wiki1m_for_simcse.txt: 10^6 sentences (one epoch of the papers' text recipe, docs/data.md)
WIKI1M_SENTENCES = 1_000_000
#: ImageNet-100's training set in batches of 256 (configs/vision/mocov2_imagenet100.yaml: 494 steps an epoch)
IMAGENET100_STEPS_PER_EPOCH = 494
#: cores of the GPU machine used for decoding (the training's data.num_workers) and the k-NN
GPU_MACHINE_WORKERS = 8


def step_flops(fn) -> float:  # noqa: ANN001 (a callable building and running the step on meta)
    """FLOPs of one call of ``fn`` (forward and backward as ``fn`` runs them), counted on the meta device."""
    with torch.device("meta"), FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def bert_fwd_bwd(sequences: int, length: int) -> float:
    """BERT-base-shaped encoder, forward and backward over ``sequences`` x ``length`` tokens."""
    from transformers import BertConfig, BertModel

    def run() -> None:
        model = BertModel(BertConfig(**gpu_steps.BERT_BASE), add_pooling_layer=False)
        ids = torch.zeros(sequences, length, dtype=torch.long)  # no mask: same FLOPs, no .item() on meta
        model(input_ids=ids).last_hidden_state.float().pow(2).mean().backward()

    return step_flops(run)


def resnet(s: dict, images: int, backward: bool) -> float:
    """The backbone of a vision group on ``images`` crops, forward (and backward)."""
    from hardmix.vision.backbones import build_backbone

    def run() -> None:
        net, _ = build_backbone(s["backbone"], s["width"], s["small_stem"])
        out = net(torch.zeros(images, 3, s["crop"], s["crop"]))
        if backward:
            out.pow(2).mean().backward()

    return step_flops(run)


def estimate() -> list[tuple[str, float, float, str]]:
    """(stage, low seconds, high seconds, how) for every stage and the set-up."""
    lo_u, hi_u = UTILIZATION
    gpu = (lambda f: f / (H200_BF16_FLOPS * hi_u), lambda f: f / (H200_BF16_FLOPS * lo_u))
    rows = []
    rows.append(("set-up", 6.0, 12.0, "pip install --no-deps (or the sitecustomize fallback), the device "
                 f"query: one start {CPU_S['start_trainer']:.1f} s + CUDA {CUDA_INIT_S:.0f} s (assumed), "
                 "nvidia-smi"))
    start = CPU_S["start_trainer"] + CUDA_INIT_S
    rows.append(("device_tests", start + 2 * CPU_S["device_tests_cpu"], start + 4 * CPU_S["device_tests_cpu"],
                 "start + CUDA + the CPU cases' measured time again for the CUDA cases (x2 to x4)"))
    n_cases = len(loss_overhead.all_cases())
    rows.append(("loss_overhead", start + n_cases * 5 * 0.05, start + n_cases * (5 * 0.05 + 0.2),
                 f"{n_cases} cases x 5 reps x >= 50 ms (the benchmark's minimum repetition), + warm-up "
                 "and memory probes"))
    warmup, rounds, steps = gpu_steps.TEXT_TIMING["full"]
    per_variant = warmup + rounds * steps
    text = 0.0
    for batch, length, _ in gpu_steps.TEXT_GROUPS["full"].values():
        text += per_variant * len(gpu_steps.TEXT_STRATEGIES) * bert_fwd_bwd(2 * batch, length)
    t_start = CPU_S["start_heavy"] + CUDA_INIT_S
    rows.append(("text_steps", t_start + gpu[0](text), t_start + gpu[1](text),
                 f"{text / 1e12:.0f} TFLOP counted ({per_variant} steps x 4 variants x 3 groups)"))
    warmup, rounds, steps = gpu_steps.TIMING["full"]
    per_variant = warmup + rounds * steps
    vis = 0.0
    for s in gpu_steps.VISION_GROUPS["full"].values():
        b = s["batch"]
        floor = resnet(s, 2 * b, True)
        moco = resnet(s, b, True) + resnet(s, b, False)
        vis += per_variant * (floor + 2 * moco)
    batch, n_batches, workers = gpu_steps.PIL_CHECK["full"]
    pil = 2.0 + batch * (n_batches + 1) * CPU_S["decode_per_image"] * 3 / workers  # 3: transforms (assumed)
    rows.append(("vision_steps", start + gpu[0](vis) + pil, start + gpu[1](vis) + pil,
                 f"{vis / 1e12:.0f} TFLOP counted; PIL check ~{pil:.0f} s (2 s worker start, assumed)"))
    planned = gpu_check.TRAIN_SECONDS * gpu_training.SAFETY
    decode = 45_000 * CPU_S["decode_per_image"] / GPU_MACHINE_WORKERS  # 25,000 eval + 20,000 train images
    knn = 3 * 5 * CPU_S["knn_per_1000_queries"] / GPU_MACHINE_WORKERS
    low = 3 * start + 2 * planned + decode + knn
    high = 3 * start + 2 * gpu_training.SAFETY ** -1 * planned + decode + knn + 10
    rows.append(("training", low, max(low, min(high, gpu_check.CAPS["training"])),
                 f"3 starts (untrained k-NN, 2 runs) + 2 x {planned:.0f} s planned training (up to "
                 f"{gpu_check.TRAIN_SECONDS:.0f} s if the trainer's step is slower than the benchmark's) "
                 f"+ {decode:.1f} s decoding + {knn:.1f} s k-NN search"))
    rows.append(("distributed", CPU_S["start_trainer"], CPU_S["start_trainer"] + CUDA_INIT_S,
                 "one GPU: a start, the config built, skipped"))
    return rows


#: the first GPU run of the check
RECORD = Path(__file__).resolve().parents[1] / "results" / "gpu_check_2026-12-06"
#: the timing of the step stages in that run (gpu_steps.TIMING["full"] then): warm-up, rounds, steps
RECORD_TIMING = (3, 5, 4)
#: assumed: the one-of-8 step costs its encoder's step at batch 64 and up to 10% more for the loss over
#: 512 gathered rows (the loss alone at 1,024 rows: 1.8 to 5.2 ms on the H100, loss_overhead.json)
GATHERED_FACTOR = 1.1
#: assumed: the profiler's own set-up (CUPTI) and overhead on the profiled steps, per profiled step
PROFILER_S = 5.0
#: assumed: a trainer's set-up inside a running process (config, data subset, model), per run
TRAINER_SETUP_S = 3.0


def _json(name: str) -> dict:
    import json

    return json.loads((RECORD / name).read_text())


def _medians(group: dict) -> dict[str, float]:
    return {r["variant"]: r["median_step_s"] for r in group["rows"]}


def measured() -> list[dict]:
    """Per stage of the next full run: the first run's seconds, the projection, the cap and how.

    Returns rows ``{"stage", "measured_s" (None for a new stage), "projected_s", "cap_s", "how"}``, the
    set-up first.
    """
    summary = _json("gpu_check.json")
    stages = summary["stages"]
    text, vision = _json("text_steps.json"), _json("vision_steps.json")
    old_steps = RECORD_TIMING[0] + RECORD_TIMING[1] * RECORD_TIMING[2]
    w, r, n = gpu_steps.TEXT_TIMING["full"]
    new_steps = w + r * n
    # the process start of a step stage: the vision stage's seconds less its groups and the PIL check
    vg = vision["groups"]
    start = stages["vision_steps"]["seconds"] - sum(g["seconds"] for g in vg.values()) \
        - vision["pil_pinned"]["seconds"]
    # the first CUDA work of a process: the first vision group's seconds less its timed steps
    r50 = vg["resnet50-224"]
    first_cuda = r50["seconds"] - old_steps * sum(_medians(r50).values())
    setup = summary["budget_s"] and gpu_check.BOUND_S - summary["budget_s"]
    rows = [{"stage": "set-up", "measured_s": setup, "projected_s": setup, "cap_s": gpu_check.SETUP_S,
             "how": "install and device query: the bound less the budget the script passed"}]
    for name in ("device_tests", "loss_overhead"):
        rows.append({"stage": name, "measured_s": stages[name]["seconds"], "projected_s":
                     stages[name]["seconds"], "cap_s": gpu_check.CAPS[name], "how": "as measured"})
    tg = text["groups"]
    fixed = {g: tg[g]["seconds"] - old_steps * sum(_medians(tg[g]).values()) for g in ("b64", "b512")}
    proj = {g: fixed[g] + new_steps * sum(_medians(tg[g]).values()) for g in ("b64", "b512")}
    proj["b64x8-gathered"] = fixed["b512"] + new_steps * GATHERED_FACTOR * sum(_medians(tg["b64"]).values())
    text_s = start + sum(proj.values())
    rows.append({"stage": "text_steps", "measured_s": stages["text_steps"]["seconds"], "projected_s": text_s,
                 "cap_s": gpu_check.CAPS["text_steps"],
                 "how": f"stopped at its cap then; {start:.1f} s start + per group its fixed cost + "
                        f"{new_steps} steps (was {old_steps}) x its 4 variants' medians: b64 "
                        f"{proj['b64']:.1f}, b512 {proj['b512']:.1f}, b64x8 {proj['b64x8-gathered']:.1f} "
                        f"(b512's fixed cost, b64's steps x {GATHERED_FACTOR})"})
    rows.append({"stage": "vision_steps", "measured_s": stages["vision_steps"]["seconds"],
                 "projected_s": stages["vision_steps"]["seconds"], "cap_s": gpu_check.CAPS["vision_steps"],
                 "how": "as measured"})
    import gpu_paths

    pw, ps = gpu_paths.PROFILE_STEPS["full"]
    vis_none = _medians(vg["resnet18-32"])["none"]
    text_none = _medians(tg["b64"])["none"]
    profile_s = start + first_cuda + (pw + 2 * ps) * (vis_none + text_none) + PROFILER_S
    rows.append({"stage": "profile", "measured_s": None, "projected_s": profile_s,
                 "cap_s": gpu_check.CAPS["profile"],
                 "how": f"new: {start:.1f} s start + {first_cuda:.1f} s first CUDA work (the first vision "
                        f"group's seconds less its steps) + {pw + 2 * ps} steps each of the vision and text "
                        f"none steps + {PROFILER_S:.0f} s profiler (assumed)"})
    resume_steps = gpu_paths.RESUME_STEPS["full"]
    mochi = _medians(vg["resnet18-32"])["mochi"]
    paths_s = start + first_cuda + 4 * TRAINER_SETUP_S + 2 * resume_steps * mochi \
        + gpu_paths.TEXT_STEPS * text_none + gpu_paths.PROBE_IMAGES * CPU_S["decode_per_image"]
    rows.append({"stage": "paths", "measured_s": None, "projected_s": paths_s,
                 "cap_s": gpu_check.CAPS["paths"],
                 "how": f"new: start + first CUDA work + 4 trainer set-ups of {TRAINER_SETUP_S:.0f} s "
                        f"(assumed: text_train, resume's 3 runs) + {2 * resume_steps} MoCHi steps + "
                        f"{gpu_paths.TEXT_STEPS} text steps (at most BERT-base b64's) + decoding"})
    training = _json("training.json")
    epochs_then = training["plan"]["epochs"]
    rate = stages["vision_steps"]["headline"]["resnet18-32/mochi_images_per_s"]
    plan = gpu_training.plan_epochs(rate, gpu_check.TRAIN_SECONDS, training["train_images"], False)
    epochs_now = plan["epochs"]
    trained = sum(run["train_seconds"] for run in training["runs"].values())
    train_s = stages["training"]["seconds"] - trained * (1 - epochs_now / epochs_then)
    rows.append({"stage": "training", "measured_s": stages["training"]["seconds"], "projected_s": train_s,
                 "cap_s": gpu_check.CAPS["training"],
                 "how": f"{epochs_now} epochs planned (was {epochs_then}, {trained:.1f} s of training in "
                        f"both runs): the training seconds scaled"})
    rows.append({"stage": "distributed", "measured_s": stages["distributed"]["seconds"],
                 "projected_s": stages["distributed"]["seconds"], "cap_s": gpu_check.CAPS["distributed"],
                 "how": "as measured (one GPU: skipped)"})
    return rows


def papers() -> list[tuple[str, int, float, float, float]]:
    """(task, cells, training TFLOP a cell, low and high GPU-hours for all its cells) of papers_gpu.yaml.

    Training steps only (forward and backward of the encoders at the configs' shapes, counted on the meta
    device), at the bf16 rate and assumed utilization above: evaluations, data loading and start-up are
    not counted, so these are lower bounds of the compute, not of the wall time.
    """
    import yaml

    root = Path(__file__).resolve().parents[1]
    spec = yaml.safe_load((root / "configs/compare/papers_gpu.yaml").read_text(encoding="utf-8"))
    text = yaml.safe_load((root / spec["tasks"]["text"]["config"]).read_text(encoding="utf-8"))
    vision = yaml.safe_load((root / spec["tasks"]["vision"]["config"]).read_text(encoding="utf-8"))
    cells = len(spec["strategies"]) * len(spec["seeds"])
    batch, length = text["train"]["batch_size"], text["data"]["max_length"]
    text_flops = -(-WIKI1M_SENTENCES * text["train"]["epochs"] // batch) * bert_fwd_bwd(2 * batch, length)
    model = vision["model"]
    s = dict(backbone=model["backbone"], width=model.get("width", 64),
             small_stem=model.get("small_stem", False), crop=vision["augment"]["crop_size"])
    b = vision["train"]["batch_size"]
    step = resnet(s, b, True) + resnet(s, b, False)  # query forward and backward, key forward
    vision_flops = vision["train"]["epochs"] * IMAGENET100_STEPS_PER_EPOCH * step
    lo_u, hi_u = UTILIZATION
    return [(task, cells, f / 1e12, cells * f / (H200_BF16_FLOPS * hi_u) / 3600,
             cells * f / (H200_BF16_FLOPS * lo_u) / 3600)
            for task, f in (("text", text_flops), ("vision", vision_flops))]


def main() -> int:
    if "--papers" in sys.argv[1:]:
        print("| task | cells | training TFLOP a cell | GPU-hours, all cells (50% to 20% of the bf16 rate) |")
        print("|---|---:|---:|---|")
        for task, cells, tflop, lo, hi in papers():
            print(f"| {task} | {cells} | {tflop:,.0f} | {lo:.1f} to {hi:.1f} |")
        return 0
    rows_m = measured()
    print("| stage | measured 2026-12-06 (s) | projected (s) | cap (s) | how |")
    print("|---|---:|---:|---:|---|")
    for m in rows_m:
        was = "-" if m["measured_s"] is None else f"{m['measured_s']:.1f}"
        print(f"| {m['stage']} | {was} | {m['projected_s']:.1f} | {m['cap_s']} | {m['how']} |")
    print(f"| **total** | **{sum(m['measured_s'] or 0 for m in rows_m):.1f}** | "
          f"**{sum(m['projected_s'] for m in rows_m):.1f}** | **{sum(m['cap_s'] for m in rows_m)}** | |")
    print()
    rows = estimate()
    print("| stage | estimate (s) | cap (s) | how |")
    print("|---|---:|---:|---|")
    for name, lo, hi, how in rows:
        cap = gpu_check.CAPS.get(name, gpu_check.SETUP_S)
        print(f"| {name} | {lo:.0f} to {hi:.0f} | {cap} | {how} |")
    lo = sum(r[1] for r in rows)
    hi = sum(r[2] for r in rows)
    caps = sum(gpu_check.CAPS.values()) + gpu_check.SETUP_S
    print(f"| **total** | **{lo:.0f} to {hi:.0f}** | {caps} | the caps (+ the set-up) bound it at "
          f"{caps / 60:.1f} min |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
