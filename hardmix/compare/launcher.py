"""Where the cells of a comparison run: ``--launcher local`` (processes on this machine, the default),
``slurm`` (one SLURM job per cell through submitit) or ``submitit-local`` (submitit's local executor: the
same job path on this machine, for tests and a single workstation). ``--status`` reads every cell's state
(:mod:`hardmix.compare.status`).

The resources of a cell's job come from the spec's ``launcher:`` block, with a task's own ``launcher:``
block merged over it::

    launcher:
      partition: gpu
      nodes: 1
      gpus_per_node: 8          # one process per GPU (tasks_per_node defaults to it)
      cpus_per_task: 10
      mem_gb: 400
      time: "2-00:00:00"        # minutes, or [D-]HH:MM:SS
      account: my_lab
      sbatch: {qos: high, constraint: a100}   # any other sbatch option, as --key=value
      setup: ["source ~/venvs/hardmix/bin/activate"]   # shell lines before srun
    tasks:
      vision:
        launcher: {nodes: 2, time: "3-00:00:00"}

A job runs ``hardmix train`` once per process of the cell (srun starts ``nodes x tasks_per_node`` of them;
submitit exports the torchrun variables RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, so the
engine joins one process group across the nodes). SLURM's signal before the time limit (submitit's
``USR2``, ``signal_delay_s`` seconds ahead) and a preemption's SIGTERM reach the engine as SIGUSR1: every
process checkpoints at the end of the step, and submitit requeues the job, which resumes from
``checkpoint.pt``. The records of the submitted jobs live in ``DIR/launcher/jobs.json`` and submitit's
files in ``DIR/launcher/submitit/``.

submitit is an optional dependency: ``pip install 'hardmix[cluster]'``.
"""

from __future__ import annotations

import json
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hardmix.compare.cell_process import cell_env, interpreter_command
from hardmix.compare.folder import LAUNCHER_RECORDS, LAUNCHER_SUBMITIT, LOGS
from hardmix.compare.grid import Cell, cell_log
from hardmix.compare.launcher_spec import LauncherSpec, parse_time
from hardmix.compare.spec import CompareSpec
from hardmix.compare.status import last_line, read_records, states
from hardmix.training.results import read_results
from hardmix.training.run_folder import LOCK, run_files
from hardmix.utils.confine import check_folder, makedirs, open_for_write, remove_written, write_text
from hardmix.utils.errors import ConfigError, RunError

#: ``--launcher`` choices.
LAUNCHERS = ("local", "slurm", "submitit-local")


LAUNCHER_KEYS = tuple(f.name for f in fields(LauncherSpec))
_FIELDS = {f.name: f for f in fields(LauncherSpec)}


def _merge(base: LauncherSpec, raw: Any, key: str) -> LauncherSpec:
    if raw is None:
        return base
    if not isinstance(raw, dict):
        raise ConfigError(f"{key}: expected a mapping of {', '.join(LAUNCHER_KEYS)}")
    changes: dict[str, Any] = {}
    for k, v in raw.items():
        where = f"{key}.{k}"
        if k not in LAUNCHER_KEYS:
            raise ConfigError(f"{where}: unknown key (known keys: {', '.join(LAUNCHER_KEYS)})")
        if k in ("partition", "account"):
            if v is not None and not isinstance(v, str):
                raise ConfigError(f"{where}: expected a name, got {v!r}")
        elif k == "time":
            v = parse_time(v, where)
        elif k == "mem_gb":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"{where}: expected a positive number of GB, got {v!r}")
        elif k == "sbatch":
            if not isinstance(v, dict) or any(not isinstance(o, str) for o in v):
                raise ConfigError(f"{where}: expected a mapping of sbatch options to values")
            v = {**base.sbatch, **v}
        elif k == "setup":
            if not isinstance(v, list) or any(not isinstance(line, str) for line in v):
                raise ConfigError(f"{where}: expected a list of shell lines")
        else:
            low = _FIELDS[k].metadata["min"]
            if v is None and k in ("tasks_per_node", "cpus_per_task"):
                pass
            elif isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ConfigError(f"{where}: expected an integer >= {low}, got {v!r}")
        changes[k] = v
    return replace(base, **changes)


def launcher_for(spec: CompareSpec, task: str) -> LauncherSpec:
    """The resources of ``task``'s cells: the spec's ``launcher:`` block with the task's merged over it.

    Raises:
        ConfigError: naming the key at fault (``launcher.time``, ``tasks.vision.launcher.nodes``, ...).

    Example:
        >>> from hardmix.compare.spec import CompareSpec
        >>> spec = CompareSpec(seeds=[1], baseline="none", strategies={}, tasks={}, raw={"launcher": {
        ...     "gpus_per_node": 8, "time": "1:00:00"}, "tasks": {"vision": {"launcher": {"nodes": 2}}}})
        >>> ls = launcher_for(spec, "vision")
        >>> ls.nodes, ls.gpus_per_node, ls.processes_per_node, ls.time
        (2, 8, 8, 60)
    """
    where = f"{spec.source}: " if spec.source else ""
    try:
        base = _merge(LauncherSpec(), spec.raw.get("launcher"), "launcher")
        task_raw = (spec.raw.get("tasks") or {}).get(task) or {}
        return _merge(base, task_raw.get("launcher"), f"tasks.{task}.launcher")
    except ConfigError as e:
        raise ConfigError(f"{where}{e}") from None


def require_submitit(launcher: str) -> Any:
    """Import submitit, or a one-line error naming the extra that installs it."""
    try:
        import submitit
    except ImportError:
        raise ConfigError(f"--launcher {launcher} needs submitit: pip install 'hardmix[cluster]'") from None
    return submitit


def _job_name(cell: Cell) -> str:
    """One job name per cell (a tuning cell's point included), from its label."""
    return "hardmix-" + cell.label.replace("/", "-")


def train_overrides(ls: LauncherSpec) -> list[str]:
    """``--set`` items a launched cell adds: no progress bar (a log file), its CPU threads if given."""
    extra = ["log.progress=false"]
    if ls.cpus_per_task:
        extra.append(f"train.threads={ls.cpus_per_task}")
    return extra


# --------------------------------------------------------------------------------------- the job
def _ignore(signum: int) -> Any:
    def preexec() -> None:  # in the child, before exec: an ignored signal stays ignored across exec
        signal.signal(signum, signal.SIG_IGN)

    return preexec


def clear_own_lock(run_dir: Path, records: Path, label: str, job_id: str) -> bool:
    """Remove the run's lock when an earlier run of this same job left it (killed before it could release
    it); a requeued job may start on another node, where the engine cannot tell that the lock's process is
    gone. A scheduler runs one job id once at a time, so the job that the records give this cell, if it is
    this one, holds no other live process. Returns whether a lock was removed."""
    lock = run_dir / LOCK
    if not lock.is_file():
        return False
    try:
        recorded = json.loads(records.read_text(encoding="utf-8"))[label]["job_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if str(recorded) != job_id:
        return False
    remove_written(lock, run_dir)
    return True


class CellJob:
    """What a job runs in each of its processes: the cell's ``hardmix train`` (``--resume`` when a
    checkpoint exists) under the torchrun variables, SLURM's signals passed on to it as SIGUSR1.

    submitit calls :meth:`checkpoint` when the time limit nears: the job is requeued as itself and the
    engine resumes from the checkpoint it wrote on the signal.
    """

    def __init__(self, label: str, command: list[str], run_dir: str, log: str, threads: int | None,
                 records: str | None = None, output: str | None = None) -> None:
        self.label, self.command, self.run_dir, self.log, self.threads = label, command, run_dir, log, threads
        self.records = records
        # the comparison's folder, which the log lies in (DIR/logs/<cell>.log by default)
        self.output = output if output is not None else str(Path(log).parent.parent)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(self)

    def __call__(self) -> dict[str, Any]:
        import submitit

        env = submitit.JobEnvironment()
        if env.num_tasks > 1:
            # Every process of the job joins one process group (torch's env:// variables); all GPUs of a
            # node stay visible, the engine picks cuda:LOCAL_RANK.
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        resume = bool(run_files(Path(self.run_dir)))  # a checkpoint, or a run stopped before its first
        cmd = interpreter_command([*self.command, *(["--resume"] if resume else [])])
        child_env = cell_env(self.threads)
        usr = env._usr_sig()
        submitit_handler = signal.getsignal(usr)
        main = env.global_rank == 0
        if main and self.records:
            clear_own_lock(Path(self.run_dir), Path(self.records), self.label, str(env.job_id))
        log = open_for_write(self.log, getattr(self, "output", str(Path(self.log).parent.parent)), "a",
                             encoding="utf-8") if main else None
        try:
            if log is not None:
                log.write(f"$ {shlex.join(cmd)}\n")
                log.flush()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT if log else None, env=child_env,
                                    preexec_fn=_ignore(usr))
            received: list[int] = []

            def forward(signum: int, frame: Any) -> None:
                received.append(signum)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGUSR1)  # the engine checkpoints at the end of the step

            previous = {s: signal.signal(s, forward) for s in (usr, signal.SIGTERM)}
            try:
                rc = proc.wait()
            finally:
                for s, h in previous.items():
                    signal.signal(s, h)
        finally:
            if log is not None:
                log.close()
        if rc == 0:
            return read_results(Path(self.run_dir)) if main else {}
        if received:
            name = signal.Signals(received[0]).name
            if received[0] == usr and callable(submitit_handler):
                submitit_handler(usr, None)  # rank 0: requeue this job (it resumes) and exit
            raise RunError(f"{self.label}: stopped by {name}; it resumes from its checkpoint when requeued")
        last = last_line(Path(self.log)) if main else ""
        raise RunError(f"{self.label}: hardmix train exited with status {rc}" + (f": {last}" if last else ""))


# -------------------------------------------------------------------------------- the executors
def slurm_parameters(ls: LauncherSpec, cell: Cell) -> dict[str, Any]:
    """submitit's ``SlurmExecutor`` parameters of a cell's job (sbatch options)."""
    params: dict[str, Any] = {
        "job_name": _job_name(cell),
        "nodes": ls.nodes,
        "ntasks_per_node": ls.processes_per_node,
        "time": ls.time,
        "signal_delay_s": ls.signal_delay_s,
        "additional_parameters": {"requeue": True, **ls.sbatch},  # a preempted job goes back to the queue
        "stderr_to_stdout": True,
    }
    for key, value in (("partition", ls.partition), ("account", ls.account),
                       ("cpus_per_task", ls.cpus_per_task), ("setup", ls.setup or None)):
        if value is not None:
            params[key] = value
    if ls.gpus_per_node:
        params["gpus_per_node"] = ls.gpus_per_node
    if ls.mem_gb is not None:
        params["mem"] = f"{int(ls.mem_gb)}GB" if ls.mem_gb == int(ls.mem_gb) else f"{int(ls.mem_gb * 1024)}MB"
    return params


def sbatch_script(ls: LauncherSpec, cell: Cell, out: Path, python: str | None = None) -> str:
    """The sbatch file submitit writes for a cell's job (no SLURM needed to build it)."""
    submitit = require_submitit("slurm")
    from submitit.slurm.slurm import _make_sbatch_string

    folder = (out / LAUNCHER_SUBMITIT).resolve() / "%j"
    command = " ".join([python or shlex.quote(sys.executable), "-u -m submitit.core._submit",
                        shlex.quote(str(folder))])
    assert submitit  # imported for its error
    script = _make_sbatch_string(command=command, folder=folder, **slurm_parameters(ls, cell))
    train = shlex.join(cell.command(extra=train_overrides(ls)))
    return script.replace("\n# command\n", f"\n# command: each process runs {train} (--resume once it "
                          "has a checkpoint)\n", 1)


def _executor(kind: str, ls: LauncherSpec, cell: Cell, out: Path) -> Any:
    submitit = require_submitit(kind)
    folder = out / LAUNCHER_SUBMITIT / "%j"
    if kind == "slurm":
        try:
            ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=ls.max_requeue)
        except RuntimeError as e:  # no srun here
            raise ConfigError(f"--launcher slurm: {e} (run on the cluster's login node)") from None
        ex.update_parameters(**slurm_parameters(ls, cell))
        return ex
    if ls.nodes > 1:
        raise ConfigError(f"tasks.{cell.task.name}.launcher.nodes: submitit-local runs one node, "
                          f"got {ls.nodes}")
    ex = submitit.LocalExecutor(folder=folder, max_num_timeout=ls.max_requeue)
    ex.update_parameters(timeout_min=ls.time, tasks_per_node=ls.processes_per_node,
                         gpus_per_node=ls.gpus_per_node, signal_delay_s=ls.signal_delay_s,
                         stderr_to_stdout=True)
    return ex


# ----------------------------------------------------------------------------------- the records
def _write_records(out: Path, records: dict[str, dict[str, Any]]) -> None:
    write_text(json.dumps(records, indent=1, sort_keys=True), out / LAUNCHER_RECORDS, out)


# ------------------------------------------------------------------------------------ submitting
def submit_cells(spec: CompareSpec, cells: list[Cell], out: Path, launcher: str,
                 wait: bool = False, poll_s: float = 2.0) -> list[tuple[Cell, Path]] | None:
    """Submit every cell that failed or is missing as a job (running, queued and finished ones are left
    alone) and record it; with ``wait``, wait until no cell is queued or running.

    Returns:
        With ``wait``: the cells that failed, with their logs; without it None (the jobs run on).
    """
    require_submitit(launcher)
    settings = {t: launcher_for(spec, t) for t in spec.tasks}
    makedirs(out / LOGS, out)
    check_folder(out / LAUNCHER_SUBMITIT, out)  # submitit writes its files there by its own names
    records = read_records(out)
    todo = [s.cell for s in states(cells, out) if s.state in ("failed", "missing")]
    for cell in todo:
        ls = settings[cell.task.name]
        job = CellJob(cell.label, cell.command(extra=train_overrides(ls)), str(cell.run_dir),
                      str(cell_log(cell, out)), ls.cpus_per_task, str((out / LAUNCHER_RECORDS).resolve()),
                      str(out))
        submitted = _executor(launcher, ls, cell, out).submit(job)
        records[cell.label] = {
            "launcher": launcher, "job_id": str(submitted.job_id), "host": socket.gethostname(),
            "folder": str((out / LAUNCHER_SUBMITIT).resolve() / "%j"),
            "submitted": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        _write_records(out, records)
        print(f"hardmix: {cell.label}: job {submitted.job_id} ({launcher})", file=sys.stderr)
    print(f"hardmix: {len(todo)} job(s) submitted; follow them with: hardmix compare "
          f"{shlex.quote(str(spec.source or 'SPEC'))} --output {shlex.quote(str(out))} --status",
          file=sys.stderr)
    if not wait:
        return None
    while True:
        now = states(cells, out)
        if not any(s.state in ("running", "queued") for s in now):
            break
        time.sleep(poll_s)
    return [(s.cell, cell_log(s.cell, out)) for s in now if s.state == "failed"]


__all__ = [
    "LAUNCHERS", "CellJob", "LauncherSpec", "launcher_for", "parse_time", "require_submitit", "sbatch_script",
    "slurm_parameters", "submit_cells",
]
