"""Where a quickstart comparison cell spends its time: start-up, data, model, steps, evaluations, saves.

Runs the first text cell and the first vision cell of ``configs/compare/quickstart.yaml`` (strategy ``none``,
seed 1) in this process, exactly as ``hardmix compare`` builds their configs (held-out evaluation included),
with a timer around each phase of the task and the engine, and times the process start-up separately
(``hardmix --help``, ``python -c "import torch"``, a bare ``python``: median of ``--startup-runs`` runs).
Each phase is given in wall seconds and in CPU seconds of the process (on a shared machine the second
moves less with the load; with one torch thread it is at most the first).

    python benchmarks/cell_costs.py --out results/cell_costs_2026-12-01/before.json

Phases (seconds): ``imports`` (torch, transformers, the task), ``check``, ``model_load`` (text: the backbone
and tokenizer), ``corpus_read`` (text), ``data_build`` (vision: decode and tensors), ``build_other``,
``steps`` (forward, backward, optimizer: the loop minus what is listed inside it), ``evaluations``
(selection evaluations, count given), ``best_exports`` (text: the model written at each new best),
``checkpoints`` (the engine's resume checkpoints), ``final_scores`` (the held-out evaluation), ``finish``,
``other`` (the rest of the run: results, folder, lock). Needs ``HARDMIX_DATA``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _median_seconds(cmd: list[str], runs: int) -> dict[str, float | list[float]]:
    """Wall seconds and CPU seconds (user + system of the child) of ``runs`` runs, and their medians."""
    times, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(round(time.perf_counter() - t0, 3))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 3))
    return {"median": statistics.median(times), "runs": times, "cpu_median": statistics.median(cpu),
            "cpu_runs": cpu}


def startup(runs: int) -> dict[str, object]:
    hardmix = shutil.which("hardmix") or "hardmix"
    return {
        "python_bare": _median_seconds([sys.executable, "-c", "pass"], runs),
        "import_torch": _median_seconds([sys.executable, "-c", "import torch"], runs),
        "hardmix_help": _median_seconds([hardmix, "--help"], runs),
        "hardmix_bad_argument": _median_seconds([hardmix, "train", "nosuchtask", "x.yaml"], runs),
        "hardmix_train_help": _median_seconds([hardmix, "train", "--help"], runs),
    }


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.inside_loop: set[str] = set()

    def wrap(self, owner: object, name: str, phase: str, in_loop: bool = False) -> None:
        original = getattr(owner, name)
        if in_loop:
            self.inside_loop.add(phase)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0
                self.cpu[phase] = self.cpu.get(phase, 0.0) + time.process_time() - c0
                self.calls[phase] = self.calls.get(phase, 0) + 1

        setattr(owner, name, timed)


def _split(s: dict[str, float], total_run: float, loop_checkpoints: float) -> dict[str, float]:
    """The phases, without overlaps: build minus its parts, the loop minus what ran inside it."""
    s = dict(s)
    build_parts = sum(s.get(k, 0.0) for k in ("model_load", "corpus_read", "data_build"))
    s["build_other"] = s.pop("build", 0.0) - build_parts
    loop = s.pop("loop", 0.0)
    s["steps"] = loop - s.get("evaluations", 0.0) - s.get("best_exports", 0.0) - loop_checkpoints
    s["other"] = total_run - sum(s.values())
    return {k: round(v, 3) for k, v in s.items()}


def run_cell(task_name: str, out: Path) -> dict[str, object]:
    t0, c0 = time.perf_counter(), time.process_time()
    import torch

    from hardmix.compare.grid import build_grid
    from hardmix.compare.spec import load_spec, select_tasks
    from hardmix.training import engine
    from hardmix.training.api import load_config_for, resolve_task

    task_cls = resolve_task(task_name)
    timers = Timers()
    if task_name == "text":
        import hardmix.text.task as module

        timers.wrap(module, "load_backbone", "model_load")
        timers.wrap(module, "read_corpus", "corpus_read")
    else:
        import hardmix.vision.task as module

        timers.wrap(module, "build_train_data", "data_build")
    imports, imports_cpu = time.perf_counter() - t0, time.process_time() - c0
    spec = select_tasks(load_spec(str(REPO / "configs/compare/quickstart.yaml")), task_name)
    cell = next(c for c in build_grid(spec, out, check_data=False) if c.strategy == "none" and c.seed == 1)
    overrides = [a for i, a in enumerate(cell.command()) if i and cell.command()[i - 1] == "--set"]
    cfg = load_config_for(task_cls, str(cell.task.config), overrides)
    timers.wrap(task_cls, "check", "check")
    timers.wrap(task_cls, "build", "build")
    timers.wrap(task_cls, "evaluate", "evaluations", in_loop=True)
    timers.wrap(task_cls, "on_new_best", "best_exports", in_loop=True)
    timers.wrap(task_cls, "finish", "finish")
    timers.wrap(task_cls, "final_scores", "final_scores")
    timers.wrap(_engine_class(engine), "_save", "checkpoints", in_loop=True)
    timers.wrap(_engine_class(engine), "_loop", "loop")
    t_run, c_run = time.perf_counter(), time.process_time()
    results = engine.run_training(task_cls, cfg, cell.run_dir)
    total_run, total_cpu = time.perf_counter() - t_run, time.process_time() - c_run
    size = sum(f.stat().st_size for f in cell.run_dir.rglob("*") if f.is_file())
    return {
        "cell": cell.label, "command": " ".join(cell.command()),
        "torch_threads": torch.get_num_threads(),
        "seconds": {"imports": round(imports, 3),
                    **_split(timers.seconds, total_run, _loop_checkpoint_seconds(timers, timers.seconds))},
        "cpu_seconds": {"imports": round(imports_cpu, 3),
                        **_split(timers.cpu, total_cpu, _loop_checkpoint_seconds(timers, timers.cpu))},
        "calls": timers.calls, "run_seconds": round(total_run, 3), "run_cpu_seconds": round(total_cpu, 3),
        "steps": results["steps"],
        "final_scores": results["final_scores"], "run_folder_bytes": size,
    }


def _engine_class(engine):
    return next(v for k, v in vars(engine).items() if isinstance(v, type) and hasattr(v, "_save"))


def _loop_checkpoint_seconds(timers: Timers, seconds: dict[str, float]) -> float:
    """The checkpoints written inside the loop (all but the final one, which follows it), pro rata."""
    n = timers.calls.get("checkpoints", 0)
    if n <= 1:
        return 0.0
    return seconds["checkpoints"] * (n - 1) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tasks", default="text,vision", help="cells to run (empty: the start-up only)")
    parser.add_argument("--startup-runs", type=int, default=5)
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell, print its JSON
    args = parser.parse_args()
    if args.cell:
        with tempfile.TemporaryDirectory() as tmp:
            print("CELL " + json.dumps(run_cell(args.cell, Path(tmp) / args.cell)))
        return
    record: dict[str, object] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "startup": startup(args.startup_runs),
        "cells": {},
    }
    for task in [t for t in args.tasks.split(",") if t]:  # each cell in a fresh process, as compare runs it
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--out", "-", "--cell", task], capture_output=True,
                              text=True, check=True)
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("CELL "))
        seconds = round(time.perf_counter() - t0, 3)
        record["cells"][task] = {**json.loads(line[5:]), "process_seconds": seconds}
    record["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
