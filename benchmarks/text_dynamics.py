"""Early training dynamics of SimCSE and MixCSE at CPU scale: STS-B dev and the diagnostics every few steps.

The companion of ``hardmix compare configs/compare/cpu_full.yaml --tasks text``: on bert-mini-wiki-mlm
every variant peaks on STS-B dev within the first tens of steps and then declines, so an evaluation every
20 steps may compare points of different phases. This script evaluates every ``--eval-steps`` (5) for
``--steps`` (60) steps and logs the loss,
the anchors' gradient norm (MixCSE's vanishing-gradient argument, Sec. 4.1), the positive, negative and
mixed-negative similarities and the uniformity, for SimCSE and MixCSE, plus SimCSE at a lower learning rate
(``--slow-lr``) as a control: if MixCSE only slowed training down, a slower SimCSE would match it.

Usage:
    python benchmarks/text_dynamics.py            # results in results/text_dynamics.json
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "text"
KEYS = ("loss", "anchor_grad_norm", "pos_sim", "neg_sim", "uniformity", "alignment", "mixcse/synthetic_sim")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slow-lr", type=float, default=1e-5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs-dir", default="runs/text_dynamics")
    p.add_argument("--out", default=str(RESULTS / "text_dynamics.json"))
    args = p.parse_args()

    import torch

    from hardmix.config.loader import load_yaml
    from hardmix.text.config import build_text_config
    from hardmix.text.task import TextTask
    from hardmix.training import run_training

    torch.set_num_threads(args.threads)
    runs = {"simcse": ("cpu_simcse.yaml", None), "mixcse": ("cpu_mixcse.yaml", None),
            f"simcse_lr{args.slow_lr:g}": ("cpu_simcse.yaml", args.slow_lr)}
    out: dict = {"steps": args.steps, "eval_steps": args.eval_steps, "seed": args.seed, "runs": {}}
    for name, (file, lr) in runs.items():
        data = copy.deepcopy(load_yaml(CONFIGS / file))
        data["train"].update(max_steps=args.steps, seed=args.seed, save_steps=0, threads=args.threads)
        if lr is not None:
            data["train"]["lr"] = lr
        data["eval"].update(eval_steps=args.eval_steps, at_end=True)
        data["log"].update(log_steps=args.eval_steps, progress=False)
        run_dir = Path(args.runs_dir) / name
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_training(TextTask, build_text_config(data), run_dir)
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        dev = {x["step"]: x["stsb_dev"] for x in lines if "stsb_dev" in x}
        logs = {x["step"]: {k: x.get(k) for k in KEYS} for x in lines if "loss" in x}
        curve = [{"step": s, "stsb_dev": dev[s], **logs.get(s, {})} for s in sorted(dev)]
        out["runs"][name] = {"lr": data["train"]["lr"], "curve": curve}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    for name, run in out["runs"].items():
        print(f"\n{name} (lr {run['lr']:g})")
        print(f"{'step':>5} {'dev':>7} {'loss':>7} {'grad':>7} {'pos':>6} {'neg':>6} {'mix':>6} {'unif':>7}")
        for r in run["curve"]:
            mix = r.get("mixcse/synthetic_sim")
            mix = float("nan") if mix is None else mix
            print(f"{r['step']:>5} {r['stsb_dev']:>7.2f} {r['loss']:>7.3f} {r['anchor_grad_norm']:>7.3f} "
                  f"{r['pos_sim']:>6.3f} {r['neg_sim']:>6.3f} {mix:>6.3f} "
                  f"{r['uniformity']:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
