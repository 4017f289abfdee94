"""``hardmix compare SPEC.yaml [--output DIR] [--jobs N] [--resume] [--rerun-mismatched] [--keep WHAT]
[--print-commands] [--report-only] [--strict]``: the command's options; what it does is
:mod:`hardmix.compare.command`."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def register(top: argparse._SubParsersAction, run: Callable[[argparse.Namespace], int]) -> None:
    """Add ``compare`` to ``top``, run by ``run`` (:func:`hardmix.compare.command.main`, imported by
    ``hardmix.cli`` only when the command runs: nothing here loads torch)."""
    p = top.add_parser("compare", help="train strategies x tasks x seeds and report paired differences")
    p.add_argument("spec", help="a comparison spec (see configs/compare/)")
    p.add_argument(
        "--output",
        default=None,
        help="the comparison folder (default: the spec's output, or runs/compare/<spec name>)",
    )
    p.add_argument("--jobs", type=int, default=None, help="cells run at once (the CPU threads are divided)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads in all (default: the CPU count)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the comparison in --output (finished cells are never rerun; interrupted ones resume)",
    )
    p.add_argument(
        "--keep",
        default="",
        help="what a finished cell keeps beyond its record (config, metrics, results): a comma list of "
        "checkpoints (the resume checkpoint), models (the task's exported model); default: neither",
    )
    p.add_argument(
        "--print-commands",
        action="store_true",
        help="print a hardmix train command per cell "
        "that is not finished, for any scheduler, and run nothing",
    )
    p.add_argument("--report-only", action="store_true", help="build the report from the finished cells")
    p.add_argument("--measure-start", action="store_true",
                   help="measure the starting encoder of the finished cells whose records lack it (per seed "
                        "where it depends on the seed; into DIR/start/), trained nothing, then report")
    p.add_argument(
        "--launcher",
        choices=("local", "slurm", "submitit-local"),
        default="local",
        help="where cells run: local processes (default), one SLURM job per cell (the spec's launcher: "
        "block; needs hardmix[cluster]), or submitit's local executor",
    )
    p.add_argument("--status", action="store_true", help="list every cell: finished, running, queued, "
                   "failed (its log's last line) or missing, and run nothing")
    p.add_argument("--wait", action="store_true",
                   help="with a submitit launcher: wait for the jobs, then report")
    p.add_argument(
        "--tasks",
        default=None,
        help="comma list of the spec's tasks to run and report (default: all), e.g. --tasks text",
    )
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: run the cells whose run failed again (a failure is a recorded "
                        "result, never retried otherwise)")
    p.add_argument("--rerun-mismatched", action="store_true",
                   help="with --resume: move aside (to DIR/superseded/, kept) every cell made from other "
                        "data, inputs, config or hardmix than this comparison's now, or whose data cannot be "
                        "established (recorded by an older hardmix), and run it again; without it, such a "
                        "cell refuses the comparison before anything trains")
    p.add_argument("--strict", action="store_true",
                   help="refuse a spec in which a task's seeds and comparisons leave the exact sign-flip "
                        "test no possible verdict (its smallest Holm-adjusted p >= 0.05), before anything "
                        "runs; and refuse to report verdicts against a baseline not shown to beat its "
                        "starting encoder")
    p.add_argument("--no-download", action="store_true",
                   help="never fetch missing data (also HARDMIX_OFFLINE=1); list what is missing instead")
    p.set_defaults(func=run)


__all__ = ["register"]
