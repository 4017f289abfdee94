"""``hardmix compare SPEC.yaml [--output DIR] [--jobs N] [--resume] [--print-commands] [--report-only]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from hardmix.errors import ConfigError, RunError

SPEC_COPY = "spec.yaml"


def register(top: argparse._SubParsersAction) -> None:
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
        "--print-commands",
        action="store_true",
        help="print a hardmix train command per cell "
        "that is not finished, for any scheduler, and run nothing",
    )
    p.add_argument("--report-only", action="store_true", help="build the report from the finished cells")
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
    p.add_argument("--no-download", action="store_true",
                   help="never fetch missing data (also HARDMIX_OFFLINE=1); list what is missing instead")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from hardmix.compare.grid import build_grid, print_commands, run_cells
    from hardmix.compare.plots import make_plots
    from hardmix.compare.report import write_csv, write_html, write_json, write_markdown
    from hardmix.compare.spec import load_spec, select_tasks
    from hardmix.compare.summary import cross_table, per_task_table, summarize, text_table

    spec = select_tasks(load_spec(args.spec), args.tasks)
    out = Path(args.output or spec.output or Path("runs/compare") / Path(args.spec).stem)
    jobs = args.jobs if args.jobs is not None else spec.jobs
    if jobs < 1:
        raise ConfigError(f"--jobs: expected a positive number, got {jobs}")
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads: expected a positive number, got {args.threads}")
    # Every cell validated before anything runs; the data is checked where the cells run (printed commands
    # may run on other machines).
    if args.launcher != "local" or args.status:  # the launcher: blocks, checked before anything runs
        from hardmix.compare import launcher

        for task in spec.tasks:
            launcher.launcher_for(spec, task)
    if args.status:
        return launcher.print_status(build_grid(spec, out, check_data=False), out)
    if args.launcher == "local" and not (args.print_commands or args.report_only):
        from hardmix.datasets.needs import ensure_for_spec  # missing data: fetched, or all listed at once

        ensure_for_spec(spec, download_allowed=not args.no_download)
    cells = build_grid(spec, out, check_data=not args.print_commands)
    saved = out / SPEC_COPY
    if args.print_commands:
        if args.launcher == "slurm":  # the sbatch file of every job that would be submitted
            for c in (c for c in cells if c.status() != "finished"):
                settings = launcher.launcher_for(spec, c.task.name)
                print(f"# {c.label}\n{launcher.sbatch_script(settings, c, out)}")
            return 0
        print("\n".join(print_commands(cells)))
        return 0
    if not args.report_only:
        if saved.is_file() and not args.resume:
            raise ConfigError(
                f"--output: {out} holds a comparison already; pass --resume to finish it (finished "
                "runs are never repeated) or choose another --output"
            )
        out.mkdir(parents=True, exist_ok=True)
        saved.write_text(yaml.safe_dump(spec.raw, sort_keys=False), encoding="utf-8")
        if args.launcher == "local":
            failed = run_cells(cells, out, jobs=jobs, threads=args.threads)
        else:
            waited = launcher.submit_cells(spec, cells, out, args.launcher, wait=args.wait)
            if waited is None:
                return 0  # the jobs run on: --status follows them, --report-only reports
            failed = waited
        if failed:
            for cell, log in failed:
                print(f"hardmix: {cell.label} failed; its log: {log}", file=sys.stderr)
    else:
        failed = []
    summary = summarize(spec, cells)
    if summary["finished"] == 0:
        raise RunError(f"{out}: no run of this comparison has finished yet; nothing to report")
    plots = make_plots(cells, summary, out / "plots")
    write_markdown(summary, out / "summary.md")
    write_csv(summary, out / "summary.csv")
    write_json(summary, spec.raw, out / "summary.json")
    write_html(summary, spec.raw, plots, out / "report.html")
    print(f"Paired difference from {spec.baseline} (mean [95% CI], paired t-test over seeds):")
    print(text_table(*cross_table(summary)))
    for task in summary["tasks"]:
        print(f"\n{task}:")
        print(text_table(*per_task_table(summary, task)))
    if summary["missing"]:
        print(f"\nmissing ({len(summary['missing'])}): {', '.join(summary['missing'])}")
    print(f"\nreport: {out / 'report.html'} (summary.md, summary.csv, summary.json, plots/)")
    return 1 if failed else 0


__all__ = ["register"]
