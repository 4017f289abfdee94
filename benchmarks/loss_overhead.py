"""Forward + backward time and peak extra memory of the contrastive loss, per mixing strategy.

Shapes are the papers':

- text (SimCSE / MixCSE, in-batch): D = 768, B = 64 (the paper's batch), 1024 and 4096 (as if gathered
  over GPUs). ``none`` in one direction and both; ``mixcse`` in one direction and both (second_direction);
  the estimators ``hcl`` (beta 1.0, tau_plus 0.1) and ``dcl`` (tau_plus 0.1), single-direction;
  ``false_negative_filter`` (top-k 10, single-direction); ``mixcse_adaptive`` in both directions
  (lam_max = 0.2, margin = 0.1) and ``mixcse`` in both directions with a ramp of lambda.
- vision (MoCo-v2 / MoCHi, queue): B = 256, D = 128, K = 16384 and 65536. ``none``; ``mochi`` with
  N = 1024, s = 1024, s' = 128; ``synco`` (SynCo's four extra kinds, its official code's counts: N = 1024,
  256 extrapolated and 64 each of noise, perturbed, adversarial); ``mixcse`` and ``mixcse_adaptive``
  against the queue (for information); ``hard_copies`` with MoCHi's arguments; ``false_negative_filter``
  (top-k 10); ``hcl`` and ``dcl``.

Only the loss is measured: the inputs are leaf tensors (the encoder outputs), and one run is
``loss_fn.in_batch(z1, z2).loss.backward()`` or ``loss_fn.queue(q, k, queue).loss.backward()``.

Time: the median of ``--reps`` repetitions after ``--warmup`` runs; repetitions are interleaved over the
cases (rep 1 of every case, then rep 2, ...) so that load from other processes spreads evenly over them.
A repetition of a case faster than 50 ms is the mean of as many back-to-back runs as fill 50 ms. Both
the wall-clock time and the process CPU time are recorded; on a shared machine, run with ``--threads 1``
and read the CPU time, which leaves out the time the process waited for a core (with two threads under
load, OpenMP's waits between threads dominate the wall-clock of small cases).

Peak extra memory:
- CPU: each case runs in a fresh subprocess: inputs are created and a small warm-up loss is run, the
  process's peak resident set size is reset to its current RSS (Linux: ``/proc/self/clear_refs``), one
  forward + backward of the case is run, and the peak RSS (``VmHWM``) is read. The difference is the
  memory the loss touched beyond what existed before it (its activations, saved tensors, gradients,
  temporaries and allocator/BLAS workspace). tracemalloc cannot see torch's allocations, and a fresh
  process keeps earlier cases' freed memory from hiding a case's peak. (``ru_maxrss`` would not do:
  on Linux a child inherits its parent's peak through fork and exec.)
- CUDA: ``torch.cuda.max_memory_allocated()`` minus the allocation before the run, in process.

Usage:
    python benchmarks/loss_overhead.py                      # CPU, all cases, JSON to results/
    python benchmarks/loss_overhead.py --device cuda
    python benchmarks/loss_overhead.py --only text-1024 --reps 5 --no-memory
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from hardmix.losses import ContrastiveLoss
from hardmix.utils.machine import cpu_model

RESULTS = Path(__file__).resolve().parents[1] / "results" / "loss_overhead.json"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Case:
    """One benchmark case: a loss configuration at one shape."""

    name: str  # e.g. "text-4096/mixcse-bi"
    family: str  # "text" (in-batch) or "vision" (queue)
    method: str  # none-single, none-sym, mixcse-single, mixcse-bi, mixcse-adaptive-bi, mixcse-sched-bi,
    # hcl-single, dcl-single, fnf-single; none, mochi, mixcse, mixcse-adaptive, synco, hcl, dcl,
    # hard-copies, fnf
    baseline: str | None  # the case this one is compared with
    batch: int
    dim: int
    queue: int = 0
    sample_ids: bool = False  # vision: pass sample ids (the trainer's default, mask_same_sample)

    @property
    def shape(self) -> str:
        if self.family == "text":
            return f"B={self.batch} D={self.dim}"
        return f"B={self.batch} D={self.dim} K={self.queue}" + (" ids" if self.sample_ids else "")


def all_cases() -> list[Case]:
    cases = []
    for b in (64, 1024, 4096):
        group = f"text-{b}"
        cases += [
            Case(f"{group}/none-single", "text", "none-single", None, b, 768),
            Case(f"{group}/none-sym", "text", "none-sym", None, b, 768),
            Case(f"{group}/mixcse-single", "text", "mixcse-single", f"{group}/none-single", b, 768),
            Case(f"{group}/mixcse-bi", "text", "mixcse-bi", f"{group}/none-sym", b, 768),
            Case(f"{group}/mixcse-adaptive-bi", "text", "mixcse-adaptive-bi", f"{group}/none-sym", b, 768),
            Case(f"{group}/mixcse-sched-bi", "text", "mixcse-sched-bi", f"{group}/none-sym", b, 768),
            Case(f"{group}/hcl-single", "text", "hcl-single", f"{group}/none-single", b, 768),
            Case(f"{group}/dcl-single", "text", "dcl-single", f"{group}/none-single", b, 768),
            Case(f"{group}/fnf-single", "text", "fnf-single", f"{group}/none-single", b, 768),
        ]
    for k in (16384, 65536):
        group = f"vision-{k}"
        cases += [
            Case(f"{group}/none", "vision", "none", None, 256, 128, k),
            Case(f"{group}/mochi", "vision", "mochi", f"{group}/none", 256, 128, k),
            Case(f"{group}/mixcse", "vision", "mixcse", f"{group}/none", 256, 128, k),
            Case(f"{group}/mixcse-adaptive", "vision", "mixcse-adaptive", f"{group}/none", 256, 128, k),
            Case(f"{group}/synco", "vision", "synco", f"{group}/none", 256, 128, k),
            Case(f"{group}/hcl", "vision", "hcl", f"{group}/none", 256, 128, k),
            Case(f"{group}/dcl", "vision", "dcl", f"{group}/none", 256, 128, k),
            Case(f"{group}/hard-copies", "vision", "hard-copies", f"{group}/none", 256, 128, k),
            Case(f"{group}/fnf", "vision", "fnf", f"{group}/none", 256, 128, k),
        ]
    # With sample ids, as the vision trainer calls the loss (for information; not a target).
    cases += [
        Case("vision-16384/none-ids", "vision", "none", None, 256, 128, 16384, sample_ids=True),
        Case("vision-16384/mochi-ids", "vision", "mochi", "vision-16384/none-ids", 256, 128, 16384, True),
    ]
    return cases


def loss_module(case: Case) -> ContrastiveLoss:
    if case.method == "none-single":
        return ContrastiveLoss(0.05, None, both_directions=False)
    if case.method == "none-sym":
        return ContrastiveLoss(0.05, None, both_directions=True)
    if case.method == "mixcse-single":
        return ContrastiveLoss(0.05, {"name": "mixcse", "lam": 0.2, "second_direction": False})
    if case.method == "mixcse-bi":
        return ContrastiveLoss(0.05, {"name": "mixcse", "lam": 0.2, "second_direction": True})
    if case.method == "mixcse-adaptive-bi":
        return ContrastiveLoss(0.05, {"name": "mixcse_adaptive", "margin": 0.1, "lam_max": 0.2})
    if case.method == "mixcse-sched-bi":
        ramp = {"start": 0.2, "end": 0.1, "steps": 1000}
        return ContrastiveLoss(0.05, {"name": "mixcse", "lam": ramp, "second_direction": True})
    if case.method == "none":
        return ContrastiveLoss(0.2)
    if case.method == "mochi":
        return ContrastiveLoss(0.2, {"name": "mochi", "n_hard": 1024, "n_pair": 1024, "n_query": 128})
    if case.method == "synco":  # the official code's counts: N = 1024, 256 + 64 + 64 + 64 points
        return ContrastiveLoss(0.2, {"name": "synco"})
    if case.method == "mixcse":
        return ContrastiveLoss(0.2, {"name": "mixcse", "lam": 0.2})
    if case.method == "hcl-single":
        return ContrastiveLoss(0.05, {"name": "hcl", "beta": 1.0, "tau_plus": 0.1})
    if case.method == "dcl-single":
        return ContrastiveLoss(0.05, {"name": "dcl", "tau_plus": 0.1})
    if case.method in ("hcl", "dcl"):
        return ContrastiveLoss(0.2, case.method)  # the defaults: beta 1.0, tau_plus 0.1
    if case.method == "fnf-single":
        return ContrastiveLoss(0.05, {"name": "false_negative_filter", "top_k": 10}, both_directions=False)
    if case.method == "fnf":
        return ContrastiveLoss(0.2, {"name": "false_negative_filter", "top_k": 10})
    if case.method == "hard-copies":
        return ContrastiveLoss(0.2, {"name": "hard_copies", "n_hard": 1024, "n_pair": 1024, "n_query": 128})
    if case.method == "mixcse-adaptive":
        return ContrastiveLoss(0.2, {"name": "mixcse_adaptive", "margin": 0.1, "lam_max": 0.2})
    raise ValueError(f"unknown method {case.method}")


class Runner:
    """The inputs of a case and one forward + backward of its loss."""

    def __init__(self, case: Case, device: torch.device, seed: int = 0) -> None:
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.case = case
        self.loss_fn = loss_module(case)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        b, d = case.batch, case.dim
        base = torch.randn(b, d, generator=g)
        self.z1 = (base + 0.5 * torch.randn(b, d, generator=g)).to(device).requires_grad_(True)
        self.z2 = (base + 0.5 * torch.randn(b, d, generator=g)).to(device).requires_grad_(True)
        self.query_ids = self.queue_ids = None
        if case.family == "vision":
            self.queue = torch.randn(case.queue, d, generator=g).to(device)
            if case.sample_ids:
                # Queries are samples 0..B-1 of a 50,000-image set; the queue holds random samples, 1% of
                # its slots empty (-1), and each query's own earlier key once.
                self.query_ids = torch.arange(b).to(device)
                ids = torch.randint(b, 50_000, (case.queue,), generator=g)
                ids[torch.randperm(case.queue, generator=g)[: case.queue // 100]] = -1
                ids[torch.randperm(case.queue, generator=g)[:b]] = torch.arange(b)
                self.queue_ids = ids.to(device)

    def __call__(self) -> float:
        self.z1.grad = None
        self.z2.grad = None
        if self.case.family == "text":
            loss = self.loss_fn.in_batch(self.z1, self.z2, generator=self.generator).loss
        else:
            loss = self.loss_fn.queue(
                self.z1, self.z2, self.queue, self.query_ids, self.queue_ids, generator=self.generator
            ).loss
        loss.backward()
        return float(loss.detach())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_cases(
    cases: list[Case], device: torch.device, reps: int, warmup: int, min_time: float = 0.05
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, int]]:
    """Seconds per forward + backward: ``reps`` interleaved repetitions per case after a warm-up.

    A repetition of a fast case runs it ``inner`` times in a row (enough for about ``min_time`` seconds)
    and records the mean, so that timer and scheduler jitter do not dominate millisecond cases.
    Returns the wall-clock and the process CPU times per repetition, and each case's ``inner``. With one
    intra-op thread the CPU time excludes the time the process waited for a core held by another process.
    """
    runners = {c.name: Runner(c, device) for c in cases}
    inner: dict[str, int] = {}
    for name, runner in runners.items():
        for _ in range(warmup):
            runner()
        _sync(device)
        t0 = time.perf_counter()
        runner()
        _sync(device)
        inner[name] = max(1, math.ceil(min_time / max(time.perf_counter() - t0, 1e-6)))
    times: dict[str, list[float]] = {c.name: [] for c in cases}
    cpu_times: dict[str, list[float]] = {c.name: [] for c in cases}
    for _ in range(reps):
        for c in cases:
            n = inner[c.name]
            _sync(device)
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(n):
                runners[c.name]()
            _sync(device)
            times[c.name].append((time.perf_counter() - t0) / n)
            cpu_times[c.name].append((time.process_time() - c0) / n)
    return times, cpu_times, inner


def _status_kib(field: str) -> int | None:
    """A field of /proc/self/status in KiB (Linux), or None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0); False if not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _rss_and_peak_bytes() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process in bytes.

    On Linux, VmRSS and VmHWM of /proc/self/status: VmHWM belongs to the process's own address space.
    (ru_maxrss is not used: on Linux it carries over the parent's peak through fork and exec, so a
    subprocess of a large benchmark process would start at the parent's peak.)
    """
    rss, hwm = _status_kib("VmRSS"), _status_kib("VmHWM")
    if rss is not None and hwm is not None:
        return rss * 1024, hwm * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = peak if sys.platform == "darwin" else peak * 1024
    return peak, peak


def memory_probe(case: Case, device: torch.device) -> int:
    """Peak extra bytes of one forward + backward (run in a fresh process on CPU; see the module doc)."""
    if device.type == "cuda":
        runner = Runner(case, device)
        Runner(Case("warm", case.family, case.method, None, 8, case.dim, min(case.queue, 2048)), device)()
        runner.z1.grad = runner.z2.grad = None
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        runner()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    cmd = [
        sys.executable,
        __file__,
        "--_probe",
        json.dumps(asdict(case)),
        "--threads",
        str(torch.get_num_threads()),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1])["extra_bytes"])


def _probe_main(spec: str) -> None:
    case = Case(**json.loads(spec))
    device = torch.device("cpu")
    runner = Runner(case, device)
    # Warm up the code paths (thread pools, BLAS, allocator) on a small instance of the same loss.
    small = Case("warm", case.family, case.method, None, 64, case.dim, min(case.queue, 4096) or 0)
    if case.method == "mochi":
        small = Case("warm", "vision", "mochi", None, 8, case.dim, 2048, case.sample_ids)
    Runner(small, device)()
    reset = _reset_peak_rss()
    rss, peak = _rss_and_peak_bytes()
    before = rss if reset else peak
    runner()
    print(json.dumps({"extra_bytes": _rss_and_peak_bytes()[1] - before, "peak_reset": reset}))


def machine_info(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "device": str(device),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def markdown_table(result: dict[str, Any]) -> str:
    """The results as a Markdown table (for docs/performance.md)."""
    lines = [
        "| case | shape | wall median ms | wall min ms | wall vs baseline | CPU median ms | CPU vs baseline "
        "| peak extra MiB | extra vs baseline MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["cases"]:
        ratio = f"{r['time_ratio']:.2f}x" if "time_ratio" in r else "baseline"
        cpu_ratio = f"{r['cpu_time_ratio']:.2f}x" if "cpu_time_ratio" in r else "baseline"
        mem = f"{r['extra_memory_bytes'] / MIB:.0f}" if "extra_memory_bytes" in r else "-"
        dmem = (
            f"{r['extra_memory_vs_baseline_bytes'] / MIB:+.0f}"
            if "extra_memory_vs_baseline_bytes" in r
            else "-"
        )
        lines.append(
            f"| {r['case']} | {r['shape']} | {r['median_s'] * 1e3:.1f} | {r['min_s'] * 1e3:.1f} | {ratio} "
            f"| {r['cpu_median_s'] * 1e3:.1f} | {cpu_ratio} | {mem} | {dmem} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions per case (median reported)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--only", default="", help="comma list of substrings selecting cases by name")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory probes")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--markdown", type=Path, default=None, help="print a results JSON as a Markdown table"
    )
    parser.add_argument("--_probe", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table(json.loads(args.markdown.read_text())))
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    if args._probe:
        _probe_main(args._probe)
        return 0
    if args.reps < 5:
        parser.error("--reps: at least 5 runs per case")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU is available")
    cases = all_cases()
    if args.only:
        wanted = [w for w in args.only.split(",") if w]
        cases = [c for c in cases if any(w in c.name for w in wanted)]
        names = {c.name for c in cases}
        extra = [c for c in all_cases() if c.name not in names and any(c.name == x.baseline for x in cases)]
        cases = extra + cases
    load_before = os.getloadavg()
    t0 = time.time()
    times, cpu_times, inner = time_cases(cases, device, args.reps, args.warmup)
    memory = {} if args.no_memory else {c.name: memory_probe(c, device) for c in cases}
    load_after = os.getloadavg()

    rows = []
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    cpu_medians = {name: statistics.median(ts) for name, ts in cpu_times.items()}
    for c in cases:
        row: dict[str, Any] = {
            "case": c.name,
            "family": c.family,
            "method": c.method,
            "shape": c.shape,
            "baseline": c.baseline,
            "times_s": times[c.name],
            "runs_per_rep": inner[c.name],
            "median_s": medians[c.name],
            "min_s": min(times[c.name]),
            "cpu_times_s": cpu_times[c.name],
            "cpu_median_s": cpu_medians[c.name],
        }
        if c.baseline in medians:
            row["time_ratio"] = medians[c.name] / medians[c.baseline]
            row["cpu_time_ratio"] = cpu_medians[c.name] / cpu_medians[c.baseline]
        if memory:
            row["extra_memory_bytes"] = memory[c.name]
            if c.baseline in memory:
                row["extra_memory_vs_baseline_bytes"] = memory[c.name] - memory[c.baseline]
        rows.append(row)

    header = ("case", "shape", "median ms", "min ms", "x base", "cpu ms", "x base", "peak MiB", "vs base")
    print(f"{header[0]:<28} {header[1]:<24} " + " ".join(f"{h:>9}" for h in header[2:]))
    for r in rows:
        ratio = f"{r['time_ratio']:.2f}" if "time_ratio" in r else "-"
        cpu_ratio = f"{r['cpu_time_ratio']:.2f}" if "cpu_time_ratio" in r else "-"
        mem = f"{r['extra_memory_bytes'] / MIB:.0f}" if "extra_memory_bytes" in r else "-"
        dmem = (
            f"{r['extra_memory_vs_baseline_bytes'] / MIB:+.0f}"
            if "extra_memory_vs_baseline_bytes" in r
            else "-"
        )
        print(
            f"{r['case']:<28} {r['shape']:<24} {r['median_s'] * 1e3:>9.1f} {r['min_s'] * 1e3:>9.1f} "
            f"{ratio:>9} {r['cpu_median_s'] * 1e3:>9.1f} {cpu_ratio:>9} {mem:>9} {dmem:>9}"
        )
    print(f"medians of {args.reps} runs; load average before {load_before}, after {load_after}")

    result = {
        "machine": machine_info(device),
        "reps": args.reps,
        "warmup": args.warmup,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0)),
        "seconds": time.time() - t0,
        "memory_method": (
            "cuda max_memory_allocated delta"
            if device.type == "cuda"
            else "peak RSS (VmHWM) delta, fresh subprocess"
        ),
        "cases": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
