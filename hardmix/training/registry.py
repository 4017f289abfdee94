"""The tasks hardmix can train, found through the ``hardmix.tasks`` entry points.

A package registers a task in its ``pyproject.toml``::

    [project.entry-points."hardmix.tasks"]
    text = "hardmix.text.task:TextTask"

and ``hardmix train text CONFIG`` finds it; the core imports no task by name.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from hardmix.training.task import Task
from hardmix.utils.errors import ConfigError

GROUP = "hardmix.tasks"


def task_entry_points() -> dict[str, EntryPoint]:
    """The registered tasks by name (read anew on each call, so a package installed since is seen)."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def available_tasks() -> list[str]:
    """Names of the registered tasks, sorted."""
    return sorted(task_entry_points())


def load_task(name: str) -> type[Task]:
    """The :class:`~hardmix.training.task.Task` class registered as ``name``."""
    found = task_entry_points()
    if name not in found:
        known = ", ".join(sorted(found)) or "none (is hardmix installed?)"
        raise ConfigError(f"task: unknown task {name!r}; registered tasks: {known}")
    cls = found[name].load()
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ConfigError(f"task: the entry point {name!r} ({found[name].value}) is not a hardmix Task")
    return cls


__all__ = ["GROUP", "available_tasks", "load_task", "task_entry_points"]
