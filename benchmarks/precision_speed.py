"""fp32 against bf16 autocast on the CPU: the training step of both trainers and a whole quickstart cell.

``steps``: short ``hardmix train`` runs of the CPU configs (text ``cpu_simcse.yaml``: bert-mini, batch 64, max
length 32; vision ``benchmarks/configs/vision_step_cifar10.yaml``, a step-timing workload: CIFAR ResNet-18 of
width 16, batch 64, K 4096), no evaluation or diagnostics, one ``metrics.jsonl`` line a step; a step's time is
the difference of two consecutive ``wall_seconds`` (the engine's training clock: forward, backward, optimizer,
the task's hooks, data). fp32 and bf16 runs alternate, ``--rounds`` of each; the first ``--skip`` steps of a
run are left out (warm-up); the figure is the median over every kept step of every run.

``layouts``: the vision step's network in fp32 and bf16, contiguous and channels-last, in this process
(median seconds a step, 1 and 2 threads): whether channels-last pays on the CPU.

``cells``: the quickstart's first text and vision cells (``configs/compare/quickstart.yaml``, strategy
``none``, seed 1, built by ``hardmix compare --print-commands``), run whole as ``hardmix train`` processes
(start-up, data, training, selection and held-out evaluation), fp32 and bf16 alternated: wall seconds
and the child's CPU seconds, medians over ``--cell-rounds``.

    python benchmarks/precision_speed.py --threads 1 --rounds 3 \
        --out results/precision_2026-12-03/speed.json

Needs ``HARDMIX_DATA``. The machine's name and its native-bf16 flags are recorded with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16")
STEP_RUNS = {
    "text": (
        "configs/text/cpu_simcse.yaml",
        ["eval.eval_steps=0", "eval.at_end=false", "train.save_steps=0"],
    ),
    "vision": (
        "benchmarks/configs/vision_step_cifar10.yaml",
        ["eval.at_end=false", "train.save_steps=0", "data.max_samples=4000", "data.val_samples=500"],
    ),
}


def _train(task: str, config: str, sets: list[str], out: Path) -> dict[str, float]:
    """One ``hardmix train`` process: wall seconds and the child's CPU seconds."""
    cmd = ["hardmix", "train", task, str(REPO / config), "--output", str(out)]
    for s in sets:
        cmd += ["--set", s]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"{shlex.join(cmd)} failed:\n{done.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3)}


def step_times(run: Path, skip: int) -> list[float]:
    """Seconds of each step of a run after the first ``skip``, from its ``metrics.jsonl``."""
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    clock = [r["wall_seconds"] for r in lines if "loss" in r]
    return [round(b - a, 4) for a, b in zip(clock[skip:], clock[skip + 1 :])]


def steps(task: str, n_steps: int, rounds: int, skip: int, threads: int, tmp: Path) -> dict[str, object]:
    config, sets = STEP_RUNS[task]
    times: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    for r in range(rounds):
        order = PRECISIONS if r % 2 == 0 else PRECISIONS[::-1]  # alternated: ABBA...
        for precision in order:
            out = tmp / f"{task}-{precision}-{r}"
            _train(
                task,
                config,
                [
                    *sets,
                    f"train.max_steps={n_steps}",
                    f"train.precision={precision}",
                    f"train.threads={threads}",
                    "log.log_steps=1",
                    "log.diagnostics=false",
                    "log.progress=false",
                ],
                out,
            )
            times[precision] += step_times(out, skip)
    batch = yaml.safe_load((out / "config.yaml").read_text())["train"]["batch_size"]  # the runs' own
    medians = {p: statistics.median(t) for p, t in times.items()}
    return {
        "config": config,
        "sets": sets,
        "steps_per_run": n_steps,
        "skipped": skip,
        "rounds": rounds,
        "batch": batch,
        **{
            p: {
                "median_step_seconds": round(medians[p], 4),
                "samples_per_second": round(batch / medians[p], 2),
                "steps": times[p],
            }
            for p in PRECISIONS
        },
        "speedup": round(medians["fp32"] / medians["bf16"], 3),
    }


def quickstart_cells(rounds: int, tmp: Path) -> dict[str, object]:
    """The quickstart's first text and vision cells, whole, as ``hardmix compare`` would launch them."""
    spec = REPO / "configs/compare/quickstart.yaml"
    printed = subprocess.run(
        ["hardmix", "compare", str(spec), "--print-commands", "--output", str(tmp / "qs")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    out: dict[str, object] = {}
    for task in ("text", "vision"):
        line = next(x for x in printed if x.startswith(f"hardmix train {task} ") and "/none/seed1" in x)
        argv = shlex.split(line)
        config, sets = argv[3], [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        runs: dict[str, list[dict[str, float]]] = {p: [] for p in PRECISIONS}
        for r in range(rounds):
            for precision in PRECISIONS if r % 2 == 0 else PRECISIONS[::-1]:
                folder = tmp / f"cell-{task}-{precision}-{r}"
                result = _train(
                    task, config, [*sets, f"train.precision={precision}", "log.progress=false"], folder
                )
                result["final_scores"] = json.loads((folder / "results.json").read_text())["final_scores"]
                runs[precision].append(result)
        out[task] = {
            "command": line,
            **{
                p: {
                    "wall_median": statistics.median(r["wall_seconds"] for r in runs[p]),
                    "cpu_median": statistics.median(r["cpu_seconds"] for r in runs[p]),
                    "runs": runs[p],
                }
                for p in PRECISIONS
            },
        }
        out[task]["speedup_wall"] = round(
            out[task]["fp32"]["wall_median"] / out[task]["bf16"]["wall_median"], 3
        )
    return out


def layouts(threads: int, steps: int, rounds: int) -> dict[str, object]:
    """The MoCo step of ``benchmarks/configs/vision_step_cifar10.yaml``'s network (CIFAR ResNet-18 of width
    16, head 512-128, K 4096, split-BN, batch 64 of 32 px) in fp32 and bf16, contiguous and channels-last, in
    this process, the four variants alternated ``rounds`` times (``steps`` steps each; round 0 warms up):
    whether channels-last pays on the CPU (``train.channels_last`` applies on CUDA only)."""
    import torch

    from hardmix.losses import ContrastiveLoss
    from hardmix.vision.backbones import build_backbone
    from hardmix.vision.moco import MoCo

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, ids, loss = torch.randn(64, 3, 32, 32), torch.arange(64), ContrastiveLoss(0.1)
    variants = {}
    for layout in ("contiguous", "channels_last"):
        for precision in PRECISIONS:
            net, dim = build_backbone("resnet18", width=16, small_stem=True)
            moco = MoCo(net, dim, 512, 128, 4096, bn_splits=2)
            fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
            variants[(layout, precision)] = (
                moco.to(memory_format=fmt),
                x.contiguous(memory_format=fmt),
                torch.optim.SGD(moco.encoder_q.parameters(), lr=0.1, momentum=0.9),
            )
    times: dict[tuple[str, str], list[float]] = {k: [] for k in variants}
    for r in range(rounds + 1):
        for (layout, precision), (moco, views, opt) in variants.items():
            for _ in range(steps):
                t0 = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                    out = moco(views, views, ids, loss, 0.999)
                out.loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if r:
                    times[(layout, precision)].append(time.perf_counter() - t0)
    return {
        f"{layout} {precision}": round(statistics.median(t), 4) for (layout, precision), t in times.items()
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--parts", nargs="+", default=["steps", "cells", "layouts"], choices=["steps", "cells", "layouts"]
    )
    p.add_argument("--tasks", nargs="+", default=["text", "vision"], choices=list(STEP_RUNS))
    p.add_argument("--threads", type=int, default=1, help="torch threads of each run (train.threads)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each precision for the step times")
    p.add_argument("--steps", type=int, default=12, help="steps of each run")
    p.add_argument("--skip", type=int, default=2, help="warm-up steps left out of each run")
    p.add_argument(
        "--cell-rounds", type=int, default=2, help="runs of each precision of each quickstart cell"
    )
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if not os.environ.get("HARDMIX_DATA"):
        sys.exit("set HARDMIX_DATA to the data root")
    from hardmix.training.runtime import cpu_bf16_flags
    from hardmix.utils.machine import cpu_model

    record: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": cpu_model(),
        "cores": os.cpu_count(),
        "bf16_flags": list(cpu_bf16_flags()),
        "python": platform.python_version(),
        "torch": __import__("torch").__version__,
        "threads": args.threads,
        "load_before": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="hardmix-precision-") as tmp:
        if "steps" in args.parts:
            record["steps"] = {
                t: steps(t, args.steps, args.rounds, args.skip, args.threads, Path(tmp)) for t in args.tasks
            }
        if "cells" in args.parts:
            record["cells"] = quickstart_cells(args.cell_rounds, Path(tmp))
        if "layouts" in args.parts:
            record["layouts"] = {f"{threads} threads": layouts(threads, 4, args.rounds) for threads in (1, 2)}
    record["load_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    for task, r in (record.get("steps") or {}).items():
        print(
            f"{task} step: fp32 {r['fp32']['median_step_seconds']} s, "
            f"bf16 {r['bf16']['median_step_seconds']} s, {r['speedup']}x"
        )
    for threads, r in (record.get("layouts") or {}).items():
        print(f"MoCo step, {threads}: " + ", ".join(f"{k} {v} s" for k, v in r.items()))
    for task, r in (record.get("cells") or {}).items():
        print(
            f"{task} quickstart cell: fp32 {r['fp32']['wall_median']:.1f} s, "
            f"bf16 {r['bf16']['wall_median']:.1f} s, {r['speedup_wall']}x"
        )


if __name__ == "__main__":
    main()
