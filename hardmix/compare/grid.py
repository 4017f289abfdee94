"""The cells of a comparison (task x strategy x seed), each an ordinary run folder, and how to run them.

Cell ``(task, strategy, seed)`` is ``hardmix train TASK CONFIG --output DIR/runs/<task>/<strategy>/seed<k>
--set ...`` with the task's overrides, ``loss.strategies`` and ``train.seed``: it can be inspected,
evaluated and resumed like any run. A finished cell (its ``results.json`` says so) is never run again; an
interrupted one (a ``checkpoint.pt`` without a finished record) resumes.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tqdm.auto import tqdm

from hardmix.compare.spec import CompareSpec, TaskSpec, override_value
from hardmix.errors import ConfigError, RunError
from hardmix.training.api import load_config_for, resolve_task
from hardmix.training.config import plain_config, resume_differences
from hardmix.training.results import ResultsError, read_results
from hardmix.training.run_folder import CONFIG, run_files


@dataclass
class Cell:
    """One run of the grid.

    Attributes:
        task: the task's spec; strategy: the strategy's name; seed: the seed.
        run_dir: its run folder.
        overrides: every ``--set`` of its command (the task's, the strategies, the seed).
        config: its validated config (plain, as ``config.yaml`` will hold it).
    """

    task: TaskSpec
    strategy: str
    seed: int
    run_dir: Path
    overrides: list[str]
    config: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.task.name}/{self.strategy}/seed{self.seed}"

    def status(self) -> str:
        """``finished``, ``partial`` (a run to resume: its checkpoint, or its files from before the first) or
        ``pending``."""
        try:
            if read_results(self.run_dir).get("finished"):
                return "finished"
        except ResultsError:
            pass
        # a run folder stopped before its first checkpoint is resumed too (from step 0): a new run may not
        # write over it
        return "partial" if run_files(self.run_dir) else "pending"

    def command(self, resume: bool = False, extra: list[str] | None = None) -> list[str]:
        """The ``hardmix train`` command of this cell (``--resume`` for a partial one)."""
        cmd = ["hardmix", "train", self.task.task, str(self.task.config), "--output", str(self.run_dir)]
        for item in [*self.overrides, *(extra or [])]:
            cmd += ["--set", item]
        return cmd + (["--resume"] if resume else [])


def build_grid(spec: CompareSpec, output: Path, check_data: bool = True) -> list[Cell]:
    """Every cell, its config built and validated, its score known to its task, its data there (the task's
    own checks, with ``check_data``), and any finished run folder of another config refused; nothing is
    run or written here.

    Raises:
        ConfigError: naming the task, strategy or key at fault.
    """
    cells = []
    for task in spec.tasks.values():
        try:
            task_cls = resolve_task(task.task)
        except ConfigError as e:
            raise ConfigError(f"tasks.{task.name}.task: {str(e).split(': ', 1)[-1]}") from None
        for name in task.strategy_args:
            used = name in spec.strategies or any(
                e["name"] == name for entries in spec.strategies.values() for e in entries
            )
            if not used:
                raise ConfigError(
                    f"tasks.{task.name}.strategy_args.{name}: neither a strategy of the spec nor used by one"
                )
        checked = False
        for strategy in task.strategies or spec.strategies:
            entries = spec.strategies_for(task, strategy)
            for seed in spec.seeds:
                strategies = f"loss.strategies={override_value(entries)}"
                overrides = [*task.overrides, strategies, f"train.seed={seed}"]
                try:
                    cfg = load_config_for(task_cls, task.config, overrides)
                except ConfigError as e:
                    raise ConfigError(f"tasks.{task.name} with strategy {strategy}: {e}") from None
                scores = task_cls.score_names(cfg)
                if task.score not in scores:
                    raise ConfigError(
                        f"tasks.{task.name}.score: {task.score!r} is not a final score of this "
                        f"{task.task} config (it has: {', '.join(scores) or 'none'})"
                    )
                if check_data and not checked:  # data, models, evaluation data (the same for every cell)
                    _check_task(task, task_cls, cfg)
                    checked = True
                run_dir = output / "runs" / task.name / strategy / f"seed{seed}"
                cell = Cell(task, strategy, seed, run_dir, overrides, plain_config(cfg))
                _check_same_config(cell)
                cells.append(cell)
    return cells


def _check_task(task: TaskSpec, task_cls: type, cfg: Any) -> None:
    """The task's own cheap checks (files, models, evaluation data) before any cell runs."""
    import torch

    from hardmix.training.runtime import Runtime

    try:
        task_cls(cfg, Runtime(torch.device("cpu"))).check()
    except (OSError, ValueError) as e:
        raise ConfigError(f"tasks.{task.name}: {e}") from None


def _check_same_config(cell: Cell) -> None:
    saved = cell.run_dir / CONFIG
    if not saved.is_file():
        return
    done = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
    done["output"] = cell.config.get("output")
    changed = resume_differences(done, cell.config)
    if changed:
        raise ConfigError(
            f"{cell.label}: {cell.run_dir} was trained with another config ({', '.join(changed)} "
            "differ); choose another --output, or restore the spec"
        )


def print_commands(cells: list[Cell]) -> list[str]:
    """One shell line per cell that is not finished (``--resume`` for a partial one)."""
    return [shlex.join(c.command(resume=c.status() == "partial")) for c in cells if c.status() != "finished"]


class _Running:
    def __init__(self, cell: Cell, proc: subprocess.Popen, log: Path) -> None:
        self.cell, self.proc, self.log, self.started = cell, proc, log, time.time()


def run_cells(
    cells: list[Cell], output: Path, jobs: int = 1, threads: int | None = None, progress: bool = True
) -> list[tuple[Cell, Path]]:
    """Run every cell that is not finished, ``jobs`` at a time, each a ``hardmix train`` process with
    ``train.threads`` = ``threads // jobs`` (``threads``: the CPU count by default) and its output in
    ``DIR/logs/``. SIGTERM or SIGINT is passed on to the running cells (they checkpoint) before this stops.

    Returns:
        The cells that failed, with their log files.
    """
    todo = [c for c in cells if c.status() != "finished"]
    per_job = max(1, (threads or os.cpu_count() or 1) // jobs)
    logs = output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    failed: list[tuple[Cell, Path]] = []
    running: list[_Running] = []
    stop: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stop.append(signum)
        for r in running:
            r.proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    bar = tqdm(
        total=len(cells),
        initial=len(cells) - len(todo),
        desc="compare",
        unit="run",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    try:
        queue = list(todo)
        while queue or running:
            while queue and len(running) < jobs and not stop:
                cell = queue.pop(0)
                log = logs / f"{cell.task.name}-{cell.strategy}-seed{cell.seed}.log"
                cmd = cell.command(
                    resume=cell.status() == "partial",
                    extra=[f"train.threads={per_job}", "log.progress=false"],
                )
                cmd = [sys.executable, "-m", "hardmix", *cmd[1:]]
                with open(log, "a", encoding="utf-8") as f:
                    f.write(f"$ {shlex.join(cmd)}\n")
                    f.flush()
                    proc = subprocess.Popen(
                        cmd,
                        stdout=f,
                        stderr=subprocess.STDOUT,
                        env={**os.environ, "OMP_NUM_THREADS": str(per_job)},
                    )
                running.append(_Running(cell, proc, log))
                bar.set_postfix_str(f"running {', '.join(r.cell.label for r in running)}", refresh=True)
            time.sleep(0.2)
            for r in list(running):
                if r.proc.poll() is None:
                    continue
                running.remove(r)
                if r.proc.returncode != 0 and not stop:
                    failed.append((r.cell, r.log))
                bar.update(1)
            if stop and not running:
                break
    finally:
        bar.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stop:
        raise RunError(
            f"stopped by {signal.Signals(stop[0]).name}; the running cells checkpointed: rerun the "
            "same command with --resume to finish the grid"
        )
    return failed


__all__ = ["Cell", "build_grid", "print_commands", "run_cells"]
