"""The stages of ``benchmarks/gpu_check.sh``: run each under its own time cap, write the JSON after each.

Stages (see the shell script's header for what each exercises and the time budget):

1. ``device_tests``: ``tests/core/test_devices.py`` (every loss path on CUDA in fp32 and under bf16
   autocast against float64 on the CPU) and the MoCo step with MoCHi and the trainer's CPU generator on
   CUDA (``tests/vision/test_moco.py``);
2. ``loss_overhead``: ``benchmarks/loss_overhead.py`` on the device at the papers' shapes;
3. ``text_steps``: ``benchmarks/gpu_steps.py text`` (BERT-base-shaped encoder, bf16);
4. ``vision_steps``: ``benchmarks/gpu_steps.py vision`` (ResNet-50 at 224, ResNet-18 at 32, bf16,
   channels-last, augmentation on the GPU; the PIL path with pinned memory);
5. ``profile``: ``benchmarks/gpu_paths.py profile`` (torch.profiler over the vision ``none`` step at
   ResNet-18/32 px and the text step at batch 64: top kernels and operators, kernels launched and
   host-device synchronizations per step);
6. ``paths``: ``benchmarks/gpu_paths.py paths`` (the cases ``text_train``, ``linear_probe`` and ``resume``:
   the text trainer's bf16 loop, the linear probe's augmented features, a vision run stopped and resumed);
7. ``training``: ``benchmarks/gpu_training.py train`` (MoCo-v2 against MoCHi on the carried CIFAR-10
   subset, epochs planned from stage 4's measured ResNet-18 step rate);
8. ``distributed``: ``benchmarks/gpu_training.py distributed`` (NCCL with 2 processes where 2 GPUs exist,
   otherwise skipped).

Full mode: every stage is a subprocess (its own process group), stopped at ``min(cap, budget left)``;
a stage that fails or is stopped does not stop the others. Dry mode (``--dry``): the same entry points
with the same arguments, at tiny sizes on the CPU, all in this one process (one interpreter start: the
CI machine has 2 shared cores). ``$OUT/gpu_check.json`` is rewritten after every stage: per stage its
status, seconds, cap, JSON file and headline figures.

Usage (normally through the shell script):
    python benchmarks/gpu_check.py --out OUT --work WORK [--dry] [--budget 345] [--only training]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"

#: the MoCo step on CUDA with the trainer's CPU step generator (stage 1, besides the core's device tests)
MOCO_DEVICE_TEST = "test_moco_mochi_step_on_device_with_the_trainers_cpu_generator"
#: the whole check's bound (the shell script's GPU_CHECK_SECONDS default) and the share of it kept for the
#: shell script's set-up (install, device query; 8 s measured on 2026-12-06); the script passes what is
#: left as --budget
BOUND_S = 360
SETUP_S = 15
#: stage -> time cap in seconds (full mode): sized from the first GPU run's measured seconds
#: (results/gpu_check_2026-12-06, benchmarks/gpu_budget.py's measured table); they sum to BOUND_S - SETUP_S
CAPS = {"device_tests": 25, "loss_overhead": 30, "text_steps": 40, "vision_steps": 42, "profile": 30,
        "paths": 40, "training": 128, "distributed": 10}
#: training seconds per run of the training stage (planned at SAFETY x this at the measured rate), and
#: the cap of one run (its start, data, training and k-NN): two runs and the untrained k-NN fit in the
#: stage's cap (measured 2026-12-06: 124.1 s at 75 s, 11 epochs; 65 s plans 10)
TRAIN_SECONDS = 65.0
RUN_TIMEOUT = 80.0
#: the JSON file of each stage under $OUT (with gpu_check.json and gpu_check.log: 9 files)
FILES = {"device_tests": None, "loss_overhead": "loss_overhead.json", "text_steps": "text_steps.json",
         "vision_steps": "vision_steps.json", "profile": "profile.json", "paths": "paths.json",
         "training": "training.json", "distributed": "distributed.json"}

#: what the dry mode cannot run on a CPU (said in its log and its gpu_check.json)
DRY_SKIPS = [
    "the CUDA cases of tests/core/test_devices.py (collected only where CUDA is available)",
    "loss_overhead on CUDA (the dry mode times the text-64 cases on the CPU)",
    "bf16 autocast on CUDA and channels-last kernels (the same calls run on the CPU)",
    "pinned memory (PilBatches pins only for CUDA)",
    "the NCCL 2-process run (needs 2 GPUs; its config is built)",
]


class Stage:
    """One stage: its entry point (``module.main(argv)``) and arguments for the mode."""

    def __init__(self, name: str, runner: str, argv: Callable[[argparse.Namespace, dict], list[str]],
                 headline: Callable[[Path, Path], dict]) -> None:
        self.name, self.runner, self.argv, self.headline = name, runner, argv, headline


# ---- the stages' arguments ------------------------------------------------------------------------
def _device_tests_argv(a: argparse.Namespace, done: dict) -> list[str]:
    return ["-q", "-rs", "-p", "no:cacheprovider", str(ROOT / "tests/core/test_devices.py"),
            f"{ROOT / 'tests/vision/test_moco.py'}::{MOCO_DEVICE_TEST}",
            "--junitxml", str(Path(a.work) / "device_tests.xml")]


def _loss_argv(a: argparse.Namespace, done: dict) -> list[str]:
    out = ["--output", str(Path(a.out) / FILES["loss_overhead"])]
    if a.dry:  # the small text cases, on one thread, no memory probes (their subprocesses)
        return ["--device", "cpu", "--only", "text-64", "--reps", "5", "--warmup", "1", "--no-memory",
                "--threads", "1", *out]
    return ["--device", "cuda", "--reps", "5", "--warmup", "1", *out]


def _steps_argv(what: str) -> Callable[[argparse.Namespace, dict], list[str]]:
    def argv(a: argparse.Namespace, done: dict) -> list[str]:
        out = [what, "--out", str(Path(a.out) / FILES[f"{what}_steps"])]
        return out + (["--dry", "--device", "cpu", "--threads", "1"] if a.dry else ["--device", "cuda"])

    return argv


def _paths_argv(what: str) -> Callable[[argparse.Namespace, dict], list[str]]:
    def argv(a: argparse.Namespace, done: dict) -> list[str]:
        out = [what, "--out", str(Path(a.out) / FILES[what]), "--work", a.work]
        return out + (["--dry", "--device", "cpu"] if a.dry else ["--device", "cuda"])

    return argv


def _training_argv(a: argparse.Namespace, done: dict) -> list[str]:
    argv = ["train", "--out", str(Path(a.out) / FILES["training"]), "--work", a.work,
            "--seconds", str(TRAIN_SECONDS), "--run-timeout", str(RUN_TIMEOUT),
            "--stage-seconds", str(done["_cap_s"])]
    rate = done.get("vision_steps", {}).get("headline", {}).get("resnet18-32/mochi_images_per_s")
    if rate:
        argv += ["--images-per-s", str(rate)]
    return argv + (["--dry", "--in-process"] if a.dry else [])


def _distributed_argv(a: argparse.Namespace, done: dict) -> list[str]:
    argv = ["distributed", "--out", str(Path(a.out) / FILES["distributed"]), "--work", a.work,
            "--run-timeout", str(CAPS["distributed"])]
    return argv + (["--dry"] if a.dry else [])


# ---- headline figures of each stage's JSON ----------------------------------------------------------
def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _device_tests_headline(out: Path, work: Path) -> dict:
    xml = work / "device_tests.xml"
    if not xml.is_file():
        return {}
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    cases = suite.findall("testcase")
    cuda = [c for c in cases if "cuda" in c.get("name", "")]
    bad = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
    return {"tests": len(cases), "cuda_tests": len(cuda), "failed": bad,
            "skipped": sum(c.find("skipped") is not None for c in cases)}


def _loss_headline(out: Path, work: Path) -> dict:
    r = _read(out / FILES["loss_overhead"])
    return {c["case"]: {k: round(c[k], 3) for k in ("time_ratio",) if k in c}
            | ({"extra_mib": round(c["extra_memory_bytes"] / 2**20, 1)} if "extra_memory_bytes" in c else {})
            | {"median_ms": round(1000 * c["median_s"], 3)} for c in r.get("cases", [])}


def _steps_headline(name: str) -> Callable[[Path, Path], dict]:
    def headline(out: Path, work: Path) -> dict:
        r = _read(out / FILES[name])
        h: dict[str, Any] = {}
        for group, e in r.get("groups", {}).items():
            if e.get("status") != "ok":
                h[group] = e.get("status")
                continue
            for row in e["rows"]:
                h[f"{group}/{row['variant']}_steps_per_s"] = round(row["steps_per_s"], 2)
                h[f"{group}/{row['variant']}_images_per_s" if name == "vision_steps"
                  else f"{group}/{row['variant']}_sentences_per_s"] = round(row["items_per_s"], 1)
                if row["variant"] != "floor":
                    h[f"{group}/{row['variant']}_vs_floor"] = round(row["vs_floor"], 3)
        if "pil_pinned" in r:
            keys = ("status", "images_per_s", "batches_pinned")
            h["pil_pinned"] = {k: r["pil_pinned"].get(k) for k in keys}
        return h

    return headline


def _profile_headline(out: Path, work: Path) -> dict:
    r = _read(out / FILES["profile"])
    keys = ("status", "ops_per_step", "kernels_per_step", "syncs_per_step", "step_ms")
    return {name: {k: e.get(k) for k in keys if k in e} for name, e in r.get("steps", {}).items()}


def _paths_headline(out: Path, work: Path) -> dict:
    r = _read(out / FILES["paths"])
    return {name: {k: v for k, v in e.items() if k in ("status", "seconds", "reason", "error", "bitwise",
                                                      "max_rel_diff", "steps", "final_loss")}
            for name, e in r.get("cases", {}).items()}


def _training_headline(out: Path, work: Path) -> dict:
    r = _read(out / FILES["training"])
    h: dict[str, Any] = {"epochs": r.get("plan", {}).get("epochs"),
                         "untrained_knn_top1": r.get("untrained", {}).get("knn_top1")}
    for name, run in r.get("runs", {}).items():
        h[name] = {k: run.get(k) for k in ("knn_top1", "steps", "train_seconds", "wall_s", "proxy_acc_last5",
                                           "premise_reached", "returncode")}
    learned = r.get("learned")
    if learned:  # each run against the untrained network, by the stated margin
        h["learned"] = {k: learned.get(k) for k in ("verdict", "margin_points", "untrained_knn_top1",
                                                    "enforced", "why")}
    return h


def training_status(status: str, headline: dict[str, Any]) -> tuple[str, str | None]:
    """The training stage's status and why: not ``ok`` where a run did not beat the untrained network's
    k-NN by the stated margin (full mode: ``enforced``), whatever its exit status.

    >>> training_status("ok", {"learned": {"verdict": False, "enforced": True, "why": "did not learn"}})
    ('failed', 'did not learn')
    >>> training_status("ok", {"learned": {"verdict": False, "enforced": False, "why": "did not learn"}})
    ('ok', None)
    """
    learned = headline.get("learned") or {}
    if learned.get("enforced") and learned.get("verdict") is not True:
        return ("failed" if status == "ok" else status), learned.get("why")
    return status, None


def _distributed_headline(out: Path, work: Path) -> dict:
    r = _read(out / FILES["distributed"])
    return {k: r.get(k) for k in ("status", "reason", "gpus", "wall_s")}


STAGES = [
    Stage("device_tests", "pytest", _device_tests_argv, _device_tests_headline),
    Stage("loss_overhead", "loss_overhead", _loss_argv, _loss_headline),
    Stage("text_steps", "gpu_steps", _steps_argv("text"), _steps_headline("text_steps")),
    Stage("vision_steps", "gpu_steps", _steps_argv("vision"), _steps_headline("vision_steps")),
    Stage("profile", "gpu_paths", _paths_argv("profile"), _profile_headline),
    Stage("paths", "gpu_paths", _paths_argv("paths"), _paths_headline),
    Stage("training", "gpu_training", _training_argv, _training_headline),
    Stage("distributed", "gpu_training", _distributed_argv, _distributed_headline),
]


# ---- running ---------------------------------------------------------------------------------------
def _command(runner: str, argv: list[str]) -> list[str]:
    if runner == "pytest":
        return [sys.executable, "-m", "pytest", *argv]
    return [sys.executable, str(BENCH / f"{runner}.py"), *argv]


def _call_in_process(runner: str, argv: list[str]) -> int:
    """The stage's entry point in this process (dry mode)."""
    if runner == "pytest":
        import pytest

        return int(pytest.main(argv))
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    module = __import__(runner)
    return int(module.main(argv) or 0)


def _cpu_seconds() -> float:
    """CPU seconds (user + sys) of this process and of its children that have ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_capped(cmd: list[str], timeout: float) -> int | str:
    """Run ``cmd`` in its own process group; kill the whole group after ``timeout`` seconds."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "timeout"


def environment() -> dict[str, Any]:
    """Versions and devices (torch imported here, after the stages' processes need it anyway)."""
    import torch

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "cuda_available": torch.cuda.is_available(), "cpu_count": os.cpu_count()}
    for dist in ("torchvision", "transformers", "timm", "faiss-cpu", "faiss-gpu", "numpy", "pytest"):
        try:  # the installed distribution's version, without importing it
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[dist] = None
    if torch.cuda.is_available():
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        env["cuda"] = torch.version.cuda
        env["bf16_supported"] = torch.cuda.is_bf16_supported()
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", required=True, help="run folders, caches and scratch files (not brought back)")
    p.add_argument("--dry", action="store_true")
    p.add_argument("--budget", type=float, default=float(sum(CAPS.values())), help="seconds for all stages")
    p.add_argument("--only", default="", help="comma list of stages to run (default: all)")
    args = p.parse_args(argv)
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    wanted = [s for s in args.only.split(",") if s]
    unknown = set(wanted) - {s.name for s in STAGES}
    if unknown:
        p.error(f"--only: unknown stage(s) {', '.join(sorted(unknown))}")
    t_start = time.perf_counter()
    summary: dict[str, Any] = {"mode": "dry" if args.dry else "full", "budget_s": args.budget, "caps_s": CAPS,
                               "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "environment": environment(),
                               "stages": {}}

    def write() -> None:
        summary["seconds"] = round(time.perf_counter() - t_start, 1)
        (out / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n")

    if args.dry:
        summary["skipped_on_cpu"] = DRY_SKIPS
        print("dry mode, on the CPU: CUDA steps skipped: " + "; ".join(DRY_SKIPS), flush=True)
    write()
    for stage in STAGES:
        if wanted and stage.name not in wanted:
            continue
        left = args.budget - (time.perf_counter() - t_start)
        cap = min(CAPS[stage.name], left)
        entry: dict[str, Any] = {"cap_s": round(cap, 1), "json": FILES[stage.name]}
        print(f"\n==== stage {stage.name} (cap {cap:.0f} s{', dry' if args.dry else ''})", flush=True)
        if cap < 5:
            entry.update(status="not run", reason=f"{left:.0f} s of the budget left")
        else:
            stage_argv = stage.argv(args, {**summary["stages"], "_cap_s": round(cap, 1)})
            entry["argv"] = stage_argv
            t0, c0 = time.perf_counter(), _cpu_seconds()
            if args.dry:
                try:
                    rc: int | str = _call_in_process(stage.runner, stage_argv)
                except (Exception, SystemExit):  # noqa: BLE001 - recorded; the next stage still runs
                    traceback.print_exc()
                    rc = "exception"
                sys.stdout.flush()
            else:
                rc = run_capped(_command(stage.runner, stage_argv), cap)
            entry["seconds"] = round(time.perf_counter() - t0, 1)
            entry["cpu_s"] = round(_cpu_seconds() - c0, 1)  # this process's and its finished children's
            entry["returncode"] = rc
            entry["status"] = "ok" if rc == 0 else ("timeout" if rc == "timeout" else "failed")
            try:
                entry["headline"] = stage.headline(out, work)
            except Exception as e:  # noqa: BLE001
                entry["headline"] = {"error": f"{type(e).__name__}: {e}"}
            if stage.name == "distributed" and entry["headline"].get("status") == "skipped":
                entry["status"] = "skipped"
            if stage.name == "training":  # not ok where a run did not learn (full mode), saying why
                entry["status"], why = training_status(entry["status"], entry["headline"])
                if why:
                    entry["why"] = why
        summary["stages"][stage.name] = entry
        print(f"==== stage {stage.name}: {entry['status']} in {entry.get('seconds', 0)} s", flush=True)
        write()
    bad = [n for n, e in summary["stages"].items() if e["status"] not in ("ok", "skipped")]
    summary["failed_stages"] = bad
    write()
    print(f"\ngpu_check ({summary['mode']}): {len(summary['stages'])} stages in {summary['seconds']} s; "
          + (f"not ok: {', '.join(bad)}" if bad else "all ok") + f"; summary in {out / 'gpu_check.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
