"""A comparison's ``launcher:`` block: the resources of one cell's SLURM job (:class:`LauncherSpec`).

The spec's block and a task's own are read when cells are launched (``--launcher slurm``, ``--status``:
:func:`hardmix.compare.launcher.launcher_for`, which merges the task's over the spec's); this module is the
one statement of their keys, their ranges and the JSON Schema (``hardmix config schema compare``).

Example:
    >>> import re
    >>> time = launcher_schema()["properties"]["time"]
    >>> [bool(re.match(time["anyOf"][1]["pattern"], t)) for t in ("2-00:00:00", "90 minutes")]
    [True, False]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from hardmix.config.loader import Parsed
from hardmix.config.schema import dataclass_schema
from hardmix.utils.errors import ConfigError

_TIME = re.compile(r"(?:(\d+)-)?(\d+):(\d\d)(?::(\d\d))?")


def parse_time(value: Any, key: str) -> int:
    """Minutes from an integer or a SLURM time ``[D-]HH:MM[:SS]``.

    Example:
        >>> parse_time("2-00:00:00", "launcher.time"), parse_time("1:30:00", "t"), parse_time(90, "t")
        (2880, 90, 90)
    """
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = _TIME.fullmatch(str(value).strip())
    if m is None:
        raise ConfigError(f"{key}: expected minutes or [D-]HH:MM[:SS], got {value!r}")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    total = days * 1440 + hours * 60 + minutes + (1 if seconds else 0)
    if total <= 0:
        raise ConfigError(f"{key}: the time limit must be positive, got {value!r}")
    return total


#: A time limit: minutes, or a SLURM time ``[D-]HH:MM[:SS]``.
Minutes = Annotated[int, Parsed(parse_time, lambda: {"anyOf": [
    {"type": "integer", "minimum": 1}, {"type": "string", "pattern": f"^{_TIME.pattern}$"}]})]


@dataclass
class LauncherSpec:
    """The resources of one cell's job (SLURM's ``sbatch`` options).

    Attributes:
        partition: SLURM's partition (None: the cluster's default).
        account: SLURM's account (None: the cluster's default).
        nodes: nodes of the job.
        gpus_per_node: GPUs per node (0: a CPU job).
        tasks_per_node: processes per node (default: ``gpus_per_node``, at least 1).
        cpus_per_task: CPU cores per process (also the run's ``train.threads``).
        mem_gb: memory per node in GB.
        time: the time limit in minutes, or ``[D-]HH:MM[:SS]``.
        signal_delay_s: seconds before the time limit at which SLURM signals the job to checkpoint.
        max_requeue: how many times a job that reached its time limit is requeued.
        sbatch: any other sbatch option (``{qos: high}`` is ``--qos=high``).
        setup: shell lines run before ``srun`` (modules, a virtual environment).
    """

    partition: str | None = None
    account: str | None = None
    nodes: int = field(default=1, metadata={"min": 1})
    gpus_per_node: int = field(default=0, metadata={"min": 0})
    tasks_per_node: int | None = field(default=None, metadata={"min": 1})
    cpus_per_task: int | None = field(default=None, metadata={"min": 1})
    mem_gb: float | None = field(default=None, metadata={"gt": 0})
    time: Minutes = 60
    signal_delay_s: int = field(default=120, metadata={"min": 0})
    max_requeue: int = field(default=3, metadata={"min": 0})
    sbatch: dict[str, Any] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)

    @property
    def processes_per_node(self) -> int:
        return self.tasks_per_node or max(1, self.gpus_per_node)


def launcher_schema() -> dict[str, Any]:
    """The JSON Schema of a ``launcher:`` block."""
    return dataclass_schema(LauncherSpec)


def as_given(value: Any, key: str) -> Any:
    """A ``launcher:`` block as the spec gives it: read when cells are launched (see the module)."""
    return value


#: The type of a spec's (and a task's) ``launcher:`` block.
LauncherBlock = Annotated[dict[str, Any] | None, Parsed(as_given, lambda: {
    "anyOf": [launcher_schema(), {"type": "null"}],
    "description": "the resources of each cell's SLURM job (--launcher slurm); a task's block is merged "
                   "over the spec's"})]

__all__ = ["LauncherBlock", "LauncherSpec", "Minutes", "launcher_schema", "parse_time"]
