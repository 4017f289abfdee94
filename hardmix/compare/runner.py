"""The local runner of ``hardmix compare`` (``--launcher local``, the default): every cell of the grid a
``hardmix train`` process on this machine, ``--jobs`` at a time, one progress bar in steps over them all.

A corrupt cell is set aside and runs again, a failed one is recorded (``failure.json``) and not retried
unless asked (``--retry-failed``), a finished one keeps no checkpoint and no exported model unless
``--keep`` names them; SIGTERM or SIGINT checkpoints the running cells before the comparison stops. The
cells themselves (their names, configs, commands, states) are :mod:`hardmix.compare.grid`'s; SLURM jobs are
:mod:`hardmix.compare.launcher`'s.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hardmix.compare.cell_process import cell_env, interpreter_command
from hardmix.compare.folder import FAILURE, LOGS, START_CACHE
from hardmix.compare.grid import (
    Cell,
    cell_log,
    is_number,
    task_class,
    task_metric,
)
from hardmix.training.results import ResultsError
from hardmix.training.run_folder import CHECKPOINT, METRICS
from hardmix.utils.confine import makedirs, open_for_write, remove_written, replace
from hardmix.utils.errors import RunError

# What a finished cell may keep besides its record (--keep): the resume checkpoint, the task's exports.
KEEP_CHOICES = ("checkpoints", "models")


def set_aside(cell: Cell, output: Path, base: Path | None = None) -> Path:
    """Move ``cell``'s run folder aside inside the comparison's folder ``output``, so that the cell runs
    again and nothing is deleted; returns where it went. ``base`` None: a corrupt cell's folder, to
    ``<run_dir>.corrupt`` (``.corrupt2``, ... when taken). Else (a run superseded or made from other data)
    the folder and its log, to ``base/seed<k>`` (``seed<k>.2``, ... when taken)."""
    if base is None:
        first, nth = cell.run_dir.name + ".corrupt", f"{cell.run_dir.name}.corrupt{{}}"
        folder = cell.run_dir.parent
    else:
        first, nth, folder = f"seed{cell.seed}", f"seed{cell.seed}.{{}}", base
    n, target = 1, folder / first
    while target.exists():
        n += 1
        target = folder / nth.format(n)
    if base is None:
        replace(cell.run_dir, target, output)
        return target
    makedirs(target.parent, output)
    replace(cell.run_dir, target, output)
    log = cell_log(cell, output)
    if log.is_file() and not log.is_symlink():
        replace(log, target / "cell.log", output)
    return target


class _Running:
    def __init__(self, cell: Cell, proc: subprocess.Popen, log: Path) -> None:
        self.cell, self.proc, self.log = cell, proc, log


_PLANNED = re.compile(r"; (\d+) steps of batch ")


class Progress:
    """One bar for a whole set of cells, in training steps (every cell's steps summed), with its ETA, the
    running cells and each one's latest selection score, read from the cells' ``metrics.jsonl`` and logs.

    A cell's planned steps are its ``results.json``'s once it has one, else what its log says when it
    starts, else those of a cell of the same task already known (the same data and budget), else its
    ``train.max_steps``; the bar's total grows as they become known.
    """

    def __init__(self, cells: list[Cell], output: Path, enabled: bool = True) -> None:
        self.cells, self.output = cells, output
        self.planned: dict[str, int] = {}
        self.done: dict[str, int] = {}
        self.score: dict[str, float] = {}
        self._offsets: dict[str, int] = {}
        for c in cells:
            try:
                record = c.record()
                self.planned[c.label] = record["total_steps"]
                self.done[c.label] = record["steps"]
            except ResultsError:
                self.done[c.label] = self._metrics_step(c)
        self.bar = tqdm(total=self.total(), initial=self.steps(), desc="compare", unit="step",
                        disable=not enabled, file=sys.stderr, dynamic_ncols=True)

    def _estimate(self, cell: Cell) -> int:
        if cell.label in self.planned:
            return self.planned[cell.label]
        same = [self.planned[c.label] for c in self.cells
                if c.label in self.planned and c.task.name == cell.task.name and _budget(c) == _budget(cell)]
        if same:
            return same[0]
        return int(cell.config.get("train", {}).get("max_steps") or 0)

    def total(self) -> int:
        return sum(max(self._estimate(c), self.done.get(c.label, 0)) for c in self.cells)

    def steps(self) -> int:
        return sum(self.done.values())

    def _metrics_step(self, cell: Cell) -> int:
        """The last step in the cell's ``metrics.jsonl`` (read on from where the last call stopped)."""
        path = cell.run_dir / METRICS
        step = self.done.get(cell.label, 0)
        try:
            with open(path, "rb") as f:
                f.seek(self._offsets.get(cell.label, 0))
                data = f.read()
        except OSError:
            return step
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        self._offsets[cell.label] = self._offsets.get(cell.label, 0) + end
        metric = task_metric(cell)
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                step = row["step"]
                if is_number(row.get(metric)):
                    self.score[cell.label] = float(row[metric])
        return step

    def _planned_from_log(self, cell: Cell) -> None:
        try:
            text = cell_log(cell, self.output).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        found = _PLANNED.findall(text)
        if found:
            self.planned[cell.label] = int(found[-1])

    def update(self, running: list[Cell], finished: Sequence[Cell] = ()) -> None:
        for c in running:
            if c.label not in self.planned:
                self._planned_from_log(c)
            self.done[c.label] = self._metrics_step(c)
        for c in finished:
            try:
                record = c.record()
                self.planned[c.label], self.done[c.label] = record["total_steps"], record["steps"]
            except ResultsError:
                self.done[c.label] = self._metrics_step(c)
        total, n = self.total(), self.steps()
        if total != self.bar.total:
            self.bar.total = total
        if n > self.bar.n:
            self.bar.update(n - self.bar.n)
        parts = []
        for c in running:
            planned = self.planned.get(c.label)
            at = f"{self.done.get(c.label, 0)}/{planned if planned is not None else '?'}"
            score = self.score.get(c.label)
            parts.append(f"{c.label} {at}" + (f" {task_metric(c)}={score:.2f}" if score is not None else ""))
        self.bar.set_postfix_str(" | ".join(parts), refresh=True)

    def close(self) -> None:
        self.bar.close()


def _budget(cell: Cell) -> tuple[Any, Any]:
    """What a cell's step count depends on: its data and its train section but the seed and threads."""
    train = {k: v for k, v in cell.config.get("train", {}).items() if k not in ("seed", "threads")}
    return cell.config.get("data"), train


def discard_unkept(cell: Cell, keep: frozenset[str] | set[str]) -> None:
    """A finished cell's resume checkpoint and its task's exports (:attr:`Task.exports`: ``best/``) go
    unless ``keep`` names them (``checkpoints``, ``models``). Only what hardmix itself wrote there, by
    name, is deleted: its record (config, metrics, results) and anything else in the folder stay."""
    names = [] if "checkpoints" in keep else [CHECKPOINT]
    if "models" not in keep:
        names += list(task_class(cell.task).exports)
    for name in names:
        remove_written(cell.run_dir / name, cell.run_dir)


def describe_stop(cells: list[Cell]) -> str:
    """What is true of ``cells`` after a stop: how many finished, and of the others whether each has a
    checkpoint to resume from (and at which step its record says it stopped) or starts over."""
    states = {c.label: c.status() for c in cells}
    finished = sum(s == "finished" for s in states.values())
    parts = [f"{finished} of {len(cells)} cells finished"]
    for c in cells:
        state = states[c.label]
        if state == "partial" and (c.run_dir / CHECKPOINT).is_file():
            try:
                step = f" at step {c.record()['steps']}"
            except ResultsError:
                step = ""
            parts.append(f"{c.label} checkpointed{step}")
        elif state == "partial":
            parts.append(f"{c.label} had no checkpoint yet (it starts over from step 0)")
        elif state == "corrupt":
            parts.append(f"{c.label} has a corrupt results.json")
    return "; ".join(parts)


def _stop_with_parent() -> None:
    """In a cell's process, before it starts: ask Linux to send it SIGTERM when ``hardmix compare`` dies,
    SIGKILL included (``prctl(PR_SET_PDEATHSIG)``), so no training process outlives the comparison; on
    SIGTERM a run checkpoints and stops, resumable. Elsewhere nothing is done."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() == 1:  # the comparison died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def run_cells(
    cells: list[Cell],
    output: Path,
    jobs: int = 1,
    threads: int | None = None,
    progress: bool = True,
    keep: frozenset[str] | set[str] = frozenset(),
    retry_failed: bool = False,
) -> list[tuple[Cell, Path]]:
    """Run every cell that is neither finished nor failed (failed ones too with ``retry_failed``: their
    failure record is removed first), ``jobs`` at a time, each a ``hardmix train`` process with
    ``train.threads`` = ``threads // jobs`` (``threads``: the CPU count by default) and its output in
    ``DIR/logs/``, sharing ``DIR/start_cache/`` (the cells that start from the same encoder score it once:
    :mod:`hardmix.training.shared_start`); one progress bar in steps over them all. A cell whose
    ``results.json`` is corrupt is said so, set aside (:func:`set_aside`) and run again. A finished cell
    keeps no checkpoint and no exported model unless ``keep`` names them. SIGTERM or SIGINT is passed on to
    the running cells (they checkpoint) before this stops, saying what each cell's state is.

    Returns:
        The cells that failed, with their log files.
    """
    for c in cells:
        if c.status() == "corrupt":
            try:
                c.record()
            except ResultsError as e:
                reason = str(e)
            moved = set_aside(c, output)
            print(f"hardmix: {reason}; the cell runs again (its folder was moved to {moved})",
                  file=sys.stderr)
    if retry_failed:
        for c in cells:
            if c.status() == "failed":
                remove_written(c.run_dir / FAILURE, c.run_dir)
    todo = [c for c in cells if c.status() not in ("finished", "failed")]
    per_job = max(1, (threads or os.cpu_count() or 1) // jobs)
    makedirs(output / LOGS, output)
    failed: list[tuple[Cell, Path]] = []
    running: list[_Running] = []
    stop: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stop.append(signum)
        for r in running:
            r.proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    bar = Progress(cells, output, enabled=progress)
    try:
        queue = list(todo)
        last = 0.0
        while queue or running:
            while queue and len(running) < jobs and not stop:
                cell = queue.pop(0)
                log = cell_log(cell, output)
                cmd = cell.command(
                    resume=cell.status() == "partial",
                    extra=[f"train.threads={per_job}", "log.progress=false"],
                )
                cmd = interpreter_command([*cmd, "--start-cache", str(output / START_CACHE)])
                with open_for_write(log, output, "a", encoding="utf-8") as f:
                    f.write(f"$ {shlex.join(cmd)}\n")
                    f.flush()
                    proc = subprocess.Popen(
                        cmd,
                        stdout=f,
                        stderr=subprocess.STDOUT,
                        env=cell_env(per_job),
                        preexec_fn=_stop_with_parent,
                    )
                running.append(_Running(cell, proc, log))
            time.sleep(0.2)
            ended = []
            for r in list(running):
                if r.proc.poll() is None:
                    continue
                running.remove(r)
                ended.append(r.cell)
                if r.proc.returncode != 0 and not stop:  # a result: recorded, not retried unless asked
                    r.cell.record_failure(r.proc.returncode, r.log, output)
                    failed.append((r.cell, r.log))
                if r.proc.returncode == 0 and r.cell.status() == "finished":
                    discard_unkept(r.cell, keep)
            if ended or time.time() - last > 1.0:
                bar.update([r.cell for r in running], ended)
                last = time.time()
            if stop and not running:
                break
    finally:
        bar.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stop:
        raise RunError(
            f"stopped by {signal.Signals(stop[0]).name}: {describe_stop(cells)}; rerun the same command "
            "with --resume to finish the grid"
        )
    return failed


__all__ = ["KEEP_CHOICES", "Progress", "describe_stop", "discard_unkept", "run_cells", "set_aside"]
