"""What the vision step launches and waits for, on the CPU: before and after a change, in one command.

For the code at ``--before`` (a git revision: its ``hardmix/`` is exported to a temporary folder) and the
working tree's, each in its own process on one thread:

- ``augment``: ``TensorAugment`` making both views of a batch of 256 uint8 images at 32 px (MoCo-v2's
  CIFAR recipe, the ResNet-18/32 px group of ``gpu_steps.py``): images per CPU second and per wall second
  (median of ``--rounds`` rounds of 4 batches; on a shared machine the CPU seconds, ``time.process_time``
  of the one-thread process, are the steadier of the two), the ``aten::`` operators per batch
  (``torch.profiler``), and the calls that copy a tensor to the images' device (``Tensor.to`` with a
  device, counted with a ``TorchFunctionMode``): on a CUDA device each of those was a copy from pageable
  memory that waits for the device's queue; the new code sends each view's draws in one non-blocking
  copy, and skips it on the CPU;
- ``step``: the vision ``none`` step of ``gpu_steps.py`` (augmentation, MoCo with split-BN 8 and the key
  shuffle, loss, SGD) at batch 256, 32 px, K 4096, on a ResNet-18 of width 8 (the operator count does not
  depend on the width): ``aten::`` operators per step; and the floor's (the bare backbone's forward,
  backward and SGD on the 2B views: ``gpu_steps.VisionFloor``);
- ``same_views``: whether both produce the same views, bit for bit, for the same seeds (the draws and
  formulas did not change, only how they reach the device).

Usage:
    python benchmarks/vision_step_ops.py --before 869db83 --out results/vision_step_ops_2026-12-06/ops.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _child(rounds: int) -> dict:
    """The measurements, in this process, of the hardmix on sys.path."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_steps

    import hardmix
    from hardmix.vision.augment import TensorAugment
    from hardmix.vision.config import AugmentSection
    from hardmix.vision.pipeline import TensorBatches

    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    cache = torch.randint(0, 256, (4096, 3, 32, 32), generator=g, dtype=torch.uint8)
    batches = TensorBatches(cache, TensorAugment(AugmentSection(crop_size=32)), 256, 0, device=cpu)

    class CountTransfers(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name == "to" and (kwargs.get("device") is not None or any(
                    isinstance(a, (torch.device, str)) for a in args[1:])):
                self.n += 1
            return func(*args, **kwargs)

    def aten_ops(fn) -> Counter:  # noqa: ANN001
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        return Counter(e.name for e in prof.events() if e.name.startswith("aten::"))

    batches.batch(0)  # warm-up
    times, cpu_times = [], []
    for r in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(4):
            batches.batch(1 + 4 * r + i)
        times.append((time.perf_counter() - t0) / 4)
        cpu_times.append((time.process_time() - c0) / 4)
    aug_ops = aten_ops(lambda: batches.batch(100))
    with CountTransfers() as counter:
        batches.batch(101)
    digest = hashlib.sha256()
    for step in range(3):
        v1, v2, _ = batches.batch(200 + step)
        digest.update(v1.numpy().tobytes())
        digest.update(v2.numpy().tobytes())

    s = {**gpu_steps.VISION_GROUPS["full"]["resnet18-32"], "width": 8}
    step = gpu_steps.VisionStep(s, None, batches, cpu, "fp32")
    step.step(0)
    step_ops = aten_ops(lambda: step.step(1))
    v1, v2, _ = batches.batch(0)
    floor = gpu_steps.VisionFloor(s, torch.cat([v1, v2]), cpu, "fp32")
    floor.step(0)
    floor_ops = aten_ops(lambda: floor.step(1))
    return {
        "hardmix": str(Path(hardmix.__file__).parent),
        "augment": {
            "batch": 256, "px": 32, "views": 2,
            "seconds_per_batch": times, "images_per_s": 256 / statistics.median(times),
            "cpu_seconds_per_batch": cpu_times, "images_per_cpu_s": 256 / statistics.median(cpu_times),
            "aten_ops_per_batch": sum(aug_ops.values()),
            "transfer_calls_per_batch": counter.n,
            "waiting_ops_per_batch": {k: aug_ops[k] for k in ("aten::_local_scalar_dense", "aten::nonzero")},
            "top_ops": aug_ops.most_common(12),
        },
        "step": {"settings": s, "aten_ops_per_step": sum(step_ops.values()),
                 "top_ops": step_ops.most_common(12)},
        "floor": {"aten_ops_per_step": sum(floor_ops.values())},
        "views_sha256": digest.hexdigest(),
    }


def _run(pythonpath: str, rounds: int) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(rounds)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="869db83", help="the git revision to compare with")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--pairs", type=int, default=3, help="before/after process pairs, interleaved")
    p.add_argument("--out", type=Path)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.rounds)))
        return 0
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "hardmix"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        # interleaved, so that the load of a shared machine falls on both alike
        runs = {"before": [], "after": []}
        for _ in range(args.pairs):
            runs["before"].append(_run(tmp, args.rounds))
            runs["after"].append(_run(str(ROOT), args.rounds))
    result = {
        "before": args.before,
        "after": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() + "+working tree",
        "machine": {"cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                    "python": platform.python_version(), "threads": 1,
                    "load_before": load_before, "load_after": os.getloadavg()},
        "runs": runs,
    }
    for side in ("before", "after"):
        rs = runs[side]
        result[side + "_summary"] = {
            "images_per_s": statistics.median(r["augment"]["images_per_s"] for r in rs),
            "images_per_cpu_s": statistics.median(r["augment"]["images_per_cpu_s"] for r in rs),
            "aten_ops_per_batch": rs[0]["augment"]["aten_ops_per_batch"],
            "transfer_calls_per_batch": rs[0]["augment"]["transfer_calls_per_batch"],
            "aten_ops_per_step": rs[0]["step"]["aten_ops_per_step"],
            "floor_aten_ops_per_step": rs[0]["floor"]["aten_ops_per_step"],
        }
    result["same_views"] = len({r["views_sha256"] for side in runs.values() for r in side}) == 1
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(json.dumps({k: result[k] for k in ("before_summary", "after_summary", "same_views")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
