"""What a comparison spec's cells cost in GPU-hours, estimated with ``gpu_budget.py``'s model (no GPU has
run these cells): the FLOPs of each cell's encoders at its shapes, counted with
``torch.utils.flop_counter`` on the meta device, times its steps, over a GPU's rate at ``gpu_budget``'s
assumed utilization range. Counted: the training steps' forward and backward passes (text: both views of
the batch through the encoder; vision: the query encoder forward and backward, the key encoder forward,
twice with ``loss.symmetric``) and the forward passes of the periodic evaluations. Not counted: the
strategies' loss (a few (B, N, D) products against the batch or the queue), data loading, start-up.

Rates: bf16 (the vision configs) is ``gpu_budget.H200_BF16_FLOPS``, measured on this workplace's H200.
fp32 (the text configs) has no measurement here: the H200 datasheet's FP32 rate without tensor cores
(67 TFLOP/s) is the fallback, which makes the text estimate an upper bound if TF32 is enabled.

Usage:
    python benchmarks/compare_cost.py [configs/compare/papers_gpu.yaml]   # a Markdown table
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_budget  # noqa: E402

#: H200 SXM datasheet FP32 (no tensor cores), TFLOP/s -> FLOP/s: not measured here
H200_FP32_FLOPS = 67e12
#: training images of ImageNet-100 (the 100 classes of CMC's list, ImageNet-1k train): 126,689
IMAGENET100_TRAIN = 126_689
IMAGENET100_VAL = 5_000
#: sentences of SimCSE's wiki1m_for_simcse.txt
WIKI1M = 1_000_000
#: sentence pairs of STS-B dev (1,500) evaluated at every eval.eval_steps
STSB_DEV_PAIRS = 1_500


def text_cell(cfg) -> tuple[int, float, str]:  # noqa: ANN001
    """(steps, FLOPs of the cell, precision) of a text config."""
    if cfg.model.name_or_path != "bert-base-uncased":
        raise SystemExit(f"{cfg.model.name_or_path}: only a BERT-base-shaped encoder is modelled")
    b, length = cfg.train.batch_size, cfg.data.max_length
    steps = (WIKI1M // b) * cfg.train.epochs
    if cfg.train.max_steps:
        steps = min(steps, cfg.train.max_steps)
    train = gpu_budget.bert_fwd_bwd(2 * b, length)  # both views of the batch
    evals = steps // cfg.eval.eval_steps if cfg.eval.eval_steps else 0
    # a forward is about a third of forward + backward
    evaluation = evals * gpu_budget.bert_fwd_bwd(2 * STSB_DEV_PAIRS, length) / 3
    return steps, steps * train + evaluation, cfg.train.precision


def vision_cell(cfg) -> tuple[int, float, str]:  # noqa: ANN001
    """(steps, FLOPs of the cell, precision) of a vision config on ImageNet-100."""
    b = cfg.train.batch_size
    spe = IMAGENET100_TRAIN // b
    steps = spe * cfg.train.epochs
    if cfg.train.max_steps:
        steps = min(steps, cfg.train.max_steps)
    s = {"backbone": cfg.model.backbone, "width": cfg.model.width, "small_stem": cfg.model.small_stem,
         "crop": cfg.augment.crop_size}
    views = 2 if cfg.loss.symmetric else 1
    train = views * (gpu_budget.resnet(s, b, True) + gpu_budget.resnet(s, b, False))
    evals = (steps // cfg.eval.eval_steps if cfg.eval.eval_steps else 0) + int(cfg.eval.at_end)
    per_image = gpu_budget.resnet(s, 1, False)
    evaluation = evals * (IMAGENET100_TRAIN + IMAGENET100_VAL) * per_image
    return steps, steps * train + evaluation, cfg.train.precision


def main(argv: list[str]) -> int:
    from hardmix.compare.spec import load_spec
    from hardmix.training.api import load_config_for, resolve_task

    spec = load_spec(argv[0] if argv else "configs/compare/papers_gpu.yaml")
    lo_u, hi_u = gpu_budget.UTILIZATION
    print("| task | config | steps | PFLOP per cell | precision, rate | GPU-hours per cell | cells | "
          "GPU-hours in all |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    total = [0.0, 0.0]
    for task in spec.tasks.values():
        cfg = load_config_for(resolve_task(task.task), task.config, list(task.overrides))
        steps, flops, precision = (text_cell if task.task == "text" else vision_cell)(cfg)
        rate = gpu_budget.H200_BF16_FLOPS if precision == "bf16" else H200_FP32_FLOPS
        lo, hi = flops / (rate * hi_u) / 3600, flops / (rate * lo_u) / 3600
        cells = len(task.strategies or spec.strategies) * len(spec.seeds)
        total[0] += cells * lo
        total[1] += cells * hi
        print(f"| {task.name} | {task.config.name} | {steps:,} | {flops / 1e15:,.0f} | {precision}, "
              f"{rate / 1e12:.0f} TFLOP/s | {lo:.1f} to {hi:.1f} | {cells} | {cells * lo:.0f} to "
              f"{cells * hi:.0f} |")
    print(f"| **all** | | | | | | | **{total[0]:.0f} to {total[1]:.0f}** |")
    print(f"\nutilization {lo_u:.0%} to {hi_u:.0%} of the rate (assumed, gpu_budget.UTILIZATION)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
