"""What ``hardmix compare SPEC.yaml`` does (its options: :mod:`hardmix.compare.cli`): the spec read and
checked, every cell validated before anything runs, the cells run here or submitted
(:mod:`hardmix.compare.runner`, :mod:`hardmix.compare.launcher`), then the summary, its tables, the plots
and the report written and printed; ``--status``, ``--print-commands``, ``--report-only`` and
``--measure-start`` stop on the way.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from hardmix.compare import launcher
from hardmix.compare.fingerprints import check_cells
from hardmix.compare.floors import check_exact_floors, exact_floors, print_exact_floors
from hardmix.compare.folder import (
    LAUNCHER_RECORDS,
    LOGS,
    PLOTS_FOLDER,
    REPORT,
    RUNS,
    SPEC_COPY,
    SUMMARY_CSV,
    SUMMARY_JSON,
    SUMMARY_MD,
    SUPERSEDED,
    TUNE,
)
from hardmix.compare.grid import build_grid, print_commands
from hardmix.compare.plots import make_plots
from hardmix.compare.report import diagnostics_note, write_csv, write_html, write_json, write_markdown
from hardmix.compare.resume import (
    check_extension,
    read_growth,
    record_growth,
    remove_leftovers,
    use_recorded_precision,
)
from hardmix.compare.runner import KEEP_CHOICES, run_cells
from hardmix.compare.spec import load_spec, select_tasks
from hardmix.compare.start import measure_starts
from hardmix.compare.status import print_status
from hardmix.compare.summary import summarize
from hardmix.compare.summary_types import ComparisonSummary, Growth
from hardmix.compare.tables import (
    baselines_not_shown_to_learn,
    contrast_table,
    cross_table,
    learned_table,
    per_task_table,
    text_table,
)
from hardmix.compare.tuning import (
    best_points,
    first_points,
    point_folders,
    stale_cells,
    supersede,
    superseded_table,
    tuning_cells,
    tuning_table,
    write_point_order,
)
from hardmix.config.loader import load_yaml
from hardmix.datasets.needs import ensure_for_spec
from hardmix.training.run_folder import RunLock
from hardmix.utils.confine import makedirs, remove_folder_if_empty, remove_written, write_text
from hardmix.utils.errors import ConfigError, RunError


def parse_keep(value: str) -> frozenset[str]:
    """``--keep``'s comma list, checked against :data:`hardmix.compare.runner.KEEP_CHOICES`."""
    items = frozenset(v.strip() for v in value.split(",") if v.strip())
    bad = sorted(items - set(KEEP_CHOICES))
    if bad:
        raise ConfigError(f"--keep: {bad[0]!r} is not one of {', '.join(KEEP_CHOICES)}")
    return items


def main(args: argparse.Namespace) -> int:
    spec = select_tasks(load_spec(args.spec), args.tasks)
    out = Path(args.output or spec.output or Path("runs/compare") / Path(args.spec).stem)
    jobs = args.jobs if args.jobs is not None else spec.jobs
    if jobs < 1:
        raise ConfigError(f"--jobs: expected a positive number, got {jobs}")
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads: expected a positive number, got {args.threads}")
    keep = parse_keep(args.keep)
    if getattr(args, "measure_start", False) and (args.resume or args.print_commands or args.status):
        raise ConfigError("--measure-start: measures the start of a comparison's finished cells and reports; "
                          "it goes alone (or with --report-only), not with --resume, --print-commands or "
                          "--status")
    if getattr(args, "measure_start", False):
        args.report_only = True  # nothing trains: the comparison's cells as they are
    if getattr(args, "rerun_mismatched", False) and (args.report_only or args.print_commands or args.status):
        raise ConfigError("--rerun-mismatched: runs cells again; it goes with --resume, not with "
                          "--report-only, --print-commands or --status")
    floors = exact_floors(spec)
    check_exact_floors(floors, getattr(args, "strict", False))
    if args.launcher != "local" or args.status:  # the launcher: blocks, checked before anything runs
        for task in spec.tasks:
            launcher.launcher_for(spec, task)
    saved = out / SPEC_COPY
    if saved.is_file() and (args.resume or args.report_only or args.print_commands):
        check_extension(saved, spec.raw)
    if saved.is_file():  # train.precision: auto as the comparison first resolved it, wherever it ran
        use_recorded_precision(spec, saved)
    # each tuning point's folder: kept when values are added to the grid
    folders = point_folders(spec, out, load_yaml(saved) if saved.is_file() else None) if spec.tune else {}
    # SPEC given as the comparison's own saved copy (OUT/spec.yaml): continuing from it is fine, and the
    # file is never written over (a spec written by hand in that place keeps its comments and layout).
    spec_in_place = saved.is_file() and Path(args.spec).is_file() and saved.samefile(args.spec)
    started = any((out / part).exists() for part in (LOGS, RUNS, TUNE))
    if spec_in_place and not started:
        raise ConfigError(f"SPEC: {saved} is where the comparison keeps its own copy of the spec; keep your "
                          "spec outside the --output folder (or choose another --output)")
    # Every cell validated before anything runs (every tuning point too); the data is checked where the
    # cells run (printed commands may run on other machines).
    if args.launcher == "local" and not (args.print_commands or args.report_only or args.status):
        # missing data: fetched, or all listed at once
        ensure_for_spec(spec, download_allowed=not args.no_download)
    check_data = not (args.print_commands or args.status)
    tune = tuning_cells(spec, out, check_data=check_data, folders=folders) if spec.tune else []
    best = best_points(spec, tune) if tune else {}
    cells = build_grid(spec, out, check_data=check_data, points=best or first_points(spec),
                       check_existing=best is not None and not tune)
    stale = stale_cells(spec, cells, folders) if tune and best else []  # run at a point no longer chosen
    if args.status:
        return print_status(tune + cells, out)
    print_exact_floors(floors)  # every cell validated: what the seeds allow, before anything runs
    if args.print_commands:
        todo = tune if best is None else cells
        if args.launcher == "slurm":  # the sbatch file of every job that would be submitted
            for c in (c for c in todo if c.status() != "finished"):
                settings = launcher.launcher_for(spec, c.task.name)
                print(f"# {c.label}\n{launcher.sbatch_script(settings, c, out)}")
        else:
            print("\n".join(print_commands(todo)))
        print(start_line(spec), file=sys.stderr)
        for cell, i in stale:
            print(f"hardmix: {cell.label} ran at tune point{i}, which tuning no longer chooses: hardmix "
                  "compare --resume moves it to superseded/ and runs it again", file=sys.stderr)
        if best is None:
            print("hardmix: these are the tuning cells; the evaluation cells run each strategy's best point: "
                  "print the commands again once these have finished", file=sys.stderr)
        return 0
    if not args.report_only and saved.is_file() and not args.resume:
        raise ConfigError(
            f"--output: {out} holds a comparison already; pass --resume to finish it (finished "
            "runs are never repeated) or choose another --output"
        )
    makedirs(out, out)
    lock = RunLock(out)
    lock.acquire()
    try:
        remove_leftovers(out)
        if not args.report_only:
            _check_before_training(args, out, tune, cells, stale, best)
        return _run_and_report(args, spec, out, cells, tune, jobs, keep, spec_in_place, folders)
    finally:
        lock.release()


def refuse_unlearned(summary: ComparisonSummary) -> None:
    """``--strict``: a ConfigError naming each task whose baseline was not shown to beat its starting
    encoder (its ``learned`` verdict is false), before any of the comparison's files is written."""
    base = summary.baseline
    unlearned = baselines_not_shown_to_learn(summary)
    if unlearned:
        raise ConfigError(
            f"--strict: the baseline {base} was not shown to beat its starting encoder on "
            + ", ".join(f"{t} ({summary.tasks[t].learned[base].mean:+.2f} "
                        f"{summary.tasks[t].score})" for t in unlearned)
            + ": a verdict against a baseline not shown to have learned is refused (without --strict it is "
              "reported, marked)")


def start_line(spec) -> str:  # noqa: ANN001
    """What ``--print-commands`` says of the start before any compute: each cell scores its starting
    encoder before its first step (``eval.start``), the control every strategy's ``learned`` is paired
    with."""
    modes = sorted({next((o.split("=", 1)[1] for o in t.overrides if o.startswith("eval.start=")), "all")
                    for t in spec.tasks.values()})
    return ("hardmix: each cell also measures its starting encoder before its first step (eval.start: "
            f"{', '.join(modes)}; the control of every strategy's 'learned' verdict; eval.start: selection "
            "keeps it cheap, none skips it)")


def _check_before_training(args, out, tune, cells, stale, best) -> None:  # noqa: ANN001
    """Before any cell trains: every finished (or interrupted) cell against the data, inputs, config and
    hardmix it would be made from now (:func:`hardmix.compare.fingerprints.check_cells`), refused in one line
    naming the command that resolves it, or, with ``--rerun-mismatched``, each mismatched cell moved aside
    to run again. Nothing is checked when no cell would run (the summary alone is written again)."""
    rerun = getattr(args, "rerun_mismatched", False)
    retry = getattr(args, "retry_failed", False)
    done = {"finished"} if retry else {"finished", "failed"}  # a recorded failure runs again only on request
    if not rerun and all(c.status() in done for c in tune + cells):
        return
    set_aside = {c.label for c, _ in stale}  # run at a point tuning no longer chooses: moved aside anyway
    evaluated = [c for c in cells if c.label not in set_aside]
    before_choice = {c.label for c in cells} if best is None else set()  # their point is not chosen yet
    for cell, where in check_cells(tune + evaluated, args.spec, out, rerun, before_choice):
        print(f"hardmix: {cell.label} was not made from the data it would be made from now; it runs again "
              f"(the earlier run was moved to {where})", file=sys.stderr)


def _launch(args, spec, cells, out, jobs, keep):  # noqa: ANN001, ANN202
    """Run the cells here (:func:`hardmix.compare.runner.run_cells`) or submit them through the launcher;
    the failed cells with their logs, or None when submitted jobs run on without ``--wait``."""
    if args.launcher == "local":
        return run_cells(cells, out, jobs=jobs, threads=args.threads, keep=keep,
                         retry_failed=getattr(args, "retry_failed", False))
    return launcher.submit_cells(spec, cells, out, args.launcher, wait=args.wait)


def _run_and_report(args, spec, out, cells, tune, jobs, keep, spec_in_place=False,  # noqa: ANN001
                    folders=None) -> int:
    if getattr(args, "measure_start", False):
        measure_starts(cells, out, args.threads)
        return _report(spec, out, cells, tune, [], folders, strict=getattr(args, "strict", False))
    if args.report_only:
        return _report(spec, out, cells, tune, [], folders, strict=getattr(args, "strict", False))
    fresh = not (out / SPEC_COPY).is_file() and not (out / LOGS).exists()
    if folders:  # before the spec copy: the points made so far keep their folders
        write_point_order(folders, out)
    record_growth(out, spec.raw)  # seeds, strategies or grid values added: each look disclosed
    if not spec_in_place:  # with the precision train.precision: auto resolved to, for every later run
        if spec.auto_precision:
            spec.raw = {**spec.raw, "auto_precision": dict(spec.auto_precision)}
        write_text(yaml.safe_dump(spec.raw, sort_keys=False), out / SPEC_COPY, out)
    if args.launcher == "local":
        print(f"hardmix: each cell's output is in {out / LOGS}/", file=sys.stderr)
    try:
        return _launch_and_report(args, spec, out, cells, tune, jobs, keep, folders or {})
    except BaseException:
        if fresh and args.launcher != "local":
            _forget_unsubmitted(out)
        raise


def _forget_unsubmitted(out: Path) -> None:
    """A new comparison whose launcher submitted nothing (``sbatch`` missing, refused): remove the two
    things this run wrote, ``spec.yaml`` and the empty ``logs/``, so the folder is as it was and a rerun
    is not taken for a comparison under way. Nothing else is touched."""
    if (out / LAUNCHER_RECORDS).exists():
        return  # some job was submitted: the comparison exists
    remove_written(out / SPEC_COPY, out)
    remove_folder_if_empty(out / LOGS, out)


def _launch_and_report(args, spec, out, cells, tune, jobs, keep, folders) -> int:  # noqa: ANN001
    failed = []
    if tune:
        failed = _launch(args, spec, tune, out, jobs, keep)
        if failed is None:
            return 0  # the jobs run on: --status follows them, --resume then runs the evaluation cells
        best = best_points(spec, tune)
        if best is None:
            for cell, log in failed:
                print(f"hardmix: {cell.label} failed; its log: {log}", file=sys.stderr)
            raise RunError(f"{out}: tuning did not finish, so no strategy has its best point yet; fix "
                           "the failed cells and rerun with --resume")
        cells = build_grid(spec, out, check_data=False, points=best, check_existing=False)
        for cell, i in stale_cells(spec, cells, folders):  # tuning chose again: run at its new choice
            moved = supersede(cell, i, out)
            print(f"hardmix: {cell.label} ran at tune point{i}, which tuning no longer chooses; it runs "
                  f"again (the earlier run was moved to {moved})", file=sys.stderr)
    launched = _launch(args, spec, cells, out, jobs, keep)
    if launched is None:
        return 0  # the jobs run on: --status follows them, --report-only reports
    failed += launched
    for cell, log in failed:
        print(f"hardmix: {cell.label} failed; its log: {log}", file=sys.stderr)
    return _report(spec, out, cells, tune, failed, folders, strict=getattr(args, "strict", False))


def _report(spec, out, cells, tune, failed, folders=None, strict=False) -> int:  # noqa: ANN001
    corrupt = [c for c in cells if c.status() == "corrupt"]
    for c in corrupt:
        print(f"hardmix: {c.label}: corrupt results.json, left out (rerun with --resume to run it again)",
              file=sys.stderr)
    tuning = tuning_table(spec, tune) if tune else None
    summary = summarize(spec, [c for c in cells if c not in corrupt], tuning, folder=out)
    superseded = superseded_table({t: r.score for t, r in summary.tasks.items()}, out, folders or {})
    summary = replace(
        summary, missing=summary.missing + [c.label for c in corrupt],  # a corrupt record counts as missing
        cells=summary.cells + len(corrupt),
        # every look disclosed: each --resume that added seeds, strategies or grid values
        growth=[Growth.from_json(g) for g in read_growth(out)] or None,
        superseded=superseded or None)  # every look at the held-out data disclosed
    if summary.finished == 0:
        raise RunError(f"{out}: no run of this comparison has finished yet; nothing to report")
    if strict:
        refuse_unlearned(summary)
    plots = make_plots(cells, summary, out / PLOTS_FOLDER, out)
    write_markdown(summary, out / SUMMARY_MD, out)
    write_csv(summary, out / SUMMARY_CSV, out)
    write_json(summary, spec.raw, out / SUMMARY_JSON, out)
    write_html(summary, spec.raw, plots, out / REPORT, out)
    print(f"Paired difference from {spec.baseline} (mean [95% CI], paired t-test over seeds):")
    print(text_table(*cross_table(summary)))
    for task, t in summary.tasks.items():
        print(f"\n{task}:")
        print(text_table(*per_task_table(summary, task)))
        if t.start is not None:
            print(f"\n{task}, each against its cells' starting encoder (did they learn?):")
            print(text_table(*learned_table(summary, task)))
        if t.contrasts:
            print(f"\n{task}, each strategy against its control (Holm over these contrasts):")
            print(text_table(*contrast_table(summary, task)))
    note = diagnostics_note(summary)
    if note:
        print(f"\n{note}")
    if summary.failed:
        print(f"\nfailed ({len(summary.failed)}, recorded; --resume --retry-failed runs them again): "
              + "; ".join(f"{label}: {why}" for label, why in summary.failed.items()))
    if superseded:
        print(f"\nsuperseded ({len(superseded)}: set aside, kept in {out / SUPERSEDED}): "
              + "; ".join(f"{r.cell}" + (f" at {r.point}" if r.point is not None else "")
                          + f": {r.score} ({r.why})" for r in superseded))
    if summary.code.mixed:
        print("\ntrained by different code: " + "; ".join(
            f"{label}: {n} cells" for label, n in summary.code.counts.items()))
    if summary.missing:
        print(f"\nmissing ({len(summary.missing)}): {', '.join(summary.missing)}")
    print(f"\nreport: {out / REPORT} (summary.md, summary.csv, summary.json, plots/)")
    return 1 if failed else 0


__all__ = ["main", "parse_keep", "refuse_unlearned", "start_line"]
