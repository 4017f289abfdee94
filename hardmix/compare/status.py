"""``hardmix compare --status``: every cell's state (finished, running, queued, failed with its log's last
line, or missing), read from its run folder, its log and the record of the job the launcher submitted for it
(``DIR/launcher/jobs.json``, :func:`read_records`; :mod:`hardmix.compare.launcher` writes it).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hardmix.compare.folder import LAUNCHER_RECORDS
from hardmix.compare.grid import Cell, cell_log
from hardmix.training.run_folder import lock_holder, process_alive

#: The states ``--status`` reports.
STATES = ("finished", "running", "queued", "failed", "missing")


def read_records(out: Path) -> dict[str, dict[str, Any]]:
    """``DIR/launcher/jobs.json``: cell label -> its last job (launcher, job id, pid, host, time)."""
    try:
        return json.loads((out / LAUNCHER_RECORDS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def last_line(path: Path) -> str:
    """A log's last line that is not blank nor the command it ran (``$ ...``); empty when none."""
    try:
        lines = [x.strip() for x in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [x for x in lines if x and not x.startswith("$ ")]
    return lines[-1] if lines else ""


def _job_state(record: dict[str, Any] | None) -> str | None:
    """``queued``, ``running``, ``ended`` or None (no job, or its state unknown)."""
    if not record:
        return None
    if record.get("launcher") == "submitit-local":
        if record.get("host") != socket.gethostname():
            return None
        # the job's process is this one's child when it submitted it (--wait): reaped once it ends, or it
        # would stay a zombie, alive to os.kill
        return "running" if process_alive(int(record["job_id"]), reap=True) else "ended"
    try:
        from submitit.slurm.slurm import SlurmJob

        state = SlurmJob(folder=record["folder"], job_id=str(record["job_id"])).state.upper()
    except Exception:  # sacct is not reachable: the comparison folder decides
        return None
    if state.startswith(("PENDING", "REQUEUE", "CONFIGURING", "SUSPENDED", "RESIZING")):
        return "queued"
    if state.startswith(("RUNNING", "COMPLETING", "STAGE_OUT")):
        return "running"
    return None if state in ("UNKNOWN", "") else "ended"


def _lock_holder_alive(run_dir: Path) -> bool | None:
    """Whether the process holding the run's lock lives (False: no lock, or an unreadable one; None: held
    on another host). The lock's holder is a ``hardmix train`` started by a job, not this process's
    child: it is not reaped (:func:`~hardmix.training.run_folder.process_alive`)."""
    held = lock_holder(run_dir)
    if held is None:
        return False
    pid, host = held
    if host != socket.gethostname():
        return None
    return process_alive(pid)


@dataclass
class CellState:
    """One line of ``--status``."""

    cell: Cell
    state: str
    detail: str = ""


def cell_state(cell: Cell, out: Path, record: dict[str, Any] | None) -> CellState:
    """A cell's state from its run folder, its log and its launcher's record."""
    if cell.status() == "finished":
        return CellState(cell, "finished")
    job = _job_state(record)
    lock = _lock_holder_alive(cell.run_dir)
    where = f"job {record['job_id']}" if record else ""
    if lock or job == "running" or (lock is None and job is None):  # None: a lock of another host
        return CellState(cell, "running", where)
    if job == "queued":
        return CellState(cell, "queued", where)
    log = cell_log(cell, out)
    if record or log.is_file() or cell.run_dir.is_dir():
        line = last_line(log)
        if not line and record and record.get("folder"):
            from submitit.core.utils import JobPaths

            line = last_line(JobPaths(record["folder"], str(record["job_id"]), 0).stdout)
        return CellState(cell, "failed", line or "no log line")
    return CellState(cell, "missing")


def states(cells: list[Cell], out: Path) -> list[CellState]:
    records = read_records(out)
    return [cell_state(c, out, records.get(c.label)) for c in cells]


def print_status(cells: list[Cell], out: Path) -> int:
    """``--status``: every cell's state, then the counts. Returns 0."""
    rows = states(cells, out)
    width = max(len(r.cell.label) for r in rows)
    for r in rows:
        print(f"{r.cell.label:<{width}}  {r.state:<8}  {r.detail}".rstrip())
    counts = {s: sum(r.state == s for r in rows) for s in STATES}
    print(", ".join(f"{s} {n}" for s, n in counts.items()) + f" (of {len(rows)}) in {out}")
    return 0


__all__ = ["STATES", "CellState", "cell_state", "last_line", "print_status", "read_records", "states"]
