"""The run folder: one layout for every task, and the lock that keeps two processes out of one folder.

::

    RUN/config.yaml      the resolved config
    RUN/metrics.jsonl    one JSON object a line: step, epoch, loss, lr, wall_seconds, the diagnostics;
                         evaluation lines carry the selection metric (stsb_dev, val_knn_top1, ...)
    RUN/checkpoint.pt    everything a resumed run needs (hardmix.training.checkpoint)
    RUN/results.json     the results record (hardmix.training.results)
    RUN/tensorboard/     TensorBoard events, when log.tensorboard is set
    RUN/best/            the selected step's model, where a task exports one (Task.exports: text's sentence
                         encoder, vision's backbone.pt beside its config.yaml); what else is one task's own
                         lives in a subfolder too
    RUN/.lock            held while a process trains in the folder

These names are said here only: every other module imports them (a test reads the sources for them).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

from hardmix.utils.confine import (
    makedirs,
    open_for_write,
    remove_stale_temporaries,
    remove_written,
    say_removed,
)
from hardmix.utils.errors import ConfigError, RunError

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
CHECKPOINT = "checkpoint.pt"
RESULTS = "results.json"
TENSORBOARD = "tensorboard"
LOCK = ".lock"
#: The subfolder of the selected step's model, where a task exports one (:attr:`Task.exports`).
BEST = "best"


#: What a run writes at its top level: a folder holding any of them holds a run (its lock alone is the
#: lock's business: a live process's is refused, a dead one's taken over).
RUN_FILES = (CONFIG, METRICS, CHECKPOINT, RESULTS, TENSORBOARD)


def run_files(folder: Path) -> list[str]:
    """The files of a run that ``folder`` holds (names, in :data:`RUN_FILES` order; none: it holds no run)."""
    return [name for name in RUN_FILES if os.path.lexists(folder / name)]


class RunFolderError(ValueError):
    """The folder does not fit the request: a run exists without ``--resume``, or none with it."""


def process_alive(pid: int, reap: bool = False) -> bool:
    """Whether process ``pid`` of this host lives (a pid of 0 or less names no one process: False).

    One check for the lock and for ``hardmix compare``'s launcher, which differ in one thing, ``reap``
    (one function with the choice as its argument, so that what "alive" means is written once and the
    reaping is asked for where it is meant):

    - without it (a lock's holder) a child of this process that has ended but is not yet waited for (a
      zombie) counts as alive, and it is left alone: the code that started it may still wait on it, and a
      child reaped behind the back of its :class:`subprocess.Popen` reads as exited with status 0 there
      (Python takes the missing child for a success), so a failed run would pass for a finished one. A
      lock check never knows whose child it looks at, so it never reaps;
    - with it, an ended child of this process is reaped (collected) and reported dead. The launcher asks
      this of the submitit-local jobs it started itself, whose exit nothing waits for (it keeps their pid,
      not submitit's job object): without reaping, each would stay a zombie and look alive, and
      ``--wait`` would never see it end. A pid that is not this process's child is answered as without
      ``reap``.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    if not reap:
        return True
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # not a child of this process: alive, as os.kill said
    return done == 0


def lock_holder(folder: Path) -> tuple[int, str] | None:
    """The pid and host that ``folder``'s lock names, or None where it has no lock or one that cannot be
    read (a process died while writing it): no live holder. The one reader of a lock: :class:`RunLock`
    refuses or takes over by it, and ``hardmix compare --status`` says by it whether a cell runs."""
    try:
        held = json.loads((folder / LOCK).read_text(encoding="utf-8"))
        return int(held["pid"]), str(held["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class RunLock:
    """``RUN/.lock``: the pid and host of the process training in the folder.

    A second process is refused while the holder lives; a lock left by a dead process (same host) is taken
    over. Released by :meth:`release` (the engine does so in a ``finally``).
    """

    def __init__(self, folder: Path, what: str = "a run", root: Path | None = None) -> None:
        self.folder = folder
        self.root = folder if root is None else root  # the named folder the lock is confined to
        self.path = folder / LOCK
        self.held = False
        self.what = what  # what the holder does there, for the refusal ("a run", "a download")

    def acquire(self) -> None:
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        makedirs(self.folder, self.root)
        for _ in range(2):
            try:
                f = open_for_write(self.path, self.root, "x", encoding="utf-8")
            except FileExistsError:
                self._refuse_or_clear(me)
                continue
            with f:
                json.dump(me, f)
            self.held = True
            return
        raise RunError(f"{self.path}: could not take the folder's lock")

    def _refuse_or_clear(self, me: dict[str, object]) -> None:
        """Another lock exists: refuse while its process lives, else remove it (a dead process's)."""
        # unreadable: a process died while writing it
        pid, host = lock_holder(self.path.parent) or (-1, str(me["host"]))
        if host != me["host"] or (pid != me["pid"] and process_alive(pid)):
            raise RunError(f"{self.path.parent}: {self.what} is in progress there (process {pid} on {host}); "
                           f"wait for it to end, or remove {self.path} if that process is gone")
        remove_written(self.path, self.root)

    def release(self) -> None:
        if self.held:
            remove_written(self.path, self.root)
            self.held = False


def unfinished_note(model: str | os.PathLike[str]) -> str | None:
    """What to say when ``model`` (given to a command that reads an encoder: a run folder, its checkpoint
    file or its ``best/``) belongs to a run that has not finished (its ``results.json`` is absent or not
    final): the weights are those of a step part way through. None otherwise (a model of no run).

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp()); _ = (run / CHECKPOINT).write_bytes(b""); (run / BEST).mkdir()
        >>> unfinished_note(run / BEST)
        '... is of an unfinished run (... holds no final results.json): its weights are those of a step ...'
        >>> unfinished_note(tempfile.mkdtemp()) is None
        True
    """
    path = Path(model)
    run = path.parent if path.name in (BEST, CHECKPOINT) else path
    if not (run / CHECKPOINT).is_file():
        return None
    try:
        record = json.loads((run / RESULTS).read_text(encoding="utf-8"))
        finished = isinstance(record, dict) and record.get("finished") is True
    except (OSError, ValueError):
        finished = False
    if finished:
        return None
    what = "the best step evaluated so far" if path.name == BEST else "its last checkpoint"
    return (f"{path} is of an unfinished run ({run} holds no final {RESULTS}): its weights are those of a "
            f"step part way through ({what}); finish it with hardmix train ... --resume")


def task_write(write: Callable[[], object], what: Path, when: str, hint: Callable[[], str]) -> None:
    """Run a task's ``write`` of ``what`` into the run folder (the best model's export); any failure of it (a
    full disk, a library's own I/O error) stops the run with one line naming the folder, ``when`` it failed
    and ``hint`` (resumable from its last checkpoint), never a library's traceback (the exports are
    atomic: no half folder is left)."""
    try:
        write()
    except (ConfigError, RunError):
        raise
    except Exception as e:  # noqa: BLE001 - e.g. safetensors' SafetensorError on a full disk
        raise RunError(f"writing {what} failed {when} ({type(e).__name__}: {e}); {hint()}") from None


def stale_temporaries_removed(out: Path) -> str | None:
    """Delete the temporary files a killed run left in the run folder ``out`` (a SIGKILL during a checkpoint's
    write leaves its whole size in a hidden ``.checkpoint.pt.*.tmp``); returns the line that says so (None:
    none). Only the holder of the folder's lock calls it, so no other process writes there."""
    return say_removed(remove_stale_temporaries(out, out, process_alive, held=True), str(out)) or None


__all__ = ["BEST", "CHECKPOINT", "CONFIG", "LOCK", "METRICS", "RESULTS", "RUN_FILES", "TENSORBOARD",
           "RunFolderError", "RunLock", "lock_holder", "process_alive", "run_files",
           "stale_temporaries_removed", "task_write",
           "unfinished_note"]
