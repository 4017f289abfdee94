"""Every cell a comparison holds checked against the data it would be made from now, before any cell trains.

A finished cell's ``results.json`` records the fingerprint of what made it (``fingerprint``: its config,
training data, inputs and hardmix's version); an interrupted one's ``checkpoint.pt`` records its training
data and inputs. Before ``hardmix compare`` trains anything in a folder that holds cells (a ``--resume``, an
extended spec, a fresh run over existing cells), :func:`check_cells` computes each task's fingerprint
parts now, from the cells' configs and the files alone
(:meth:`hardmix.training.task.ConfigFacts.data_fingerprint`,
:meth:`~hardmix.training.task.ConfigFacts.input_digest`: no model is built), and compares them with every
such record. A part that differs, or a record whose fingerprint (or a part of it) is missing or of another
form (an older hardmix's: the listing of an image folder, not its content), so that its data cannot be
established, is a mismatch; every mismatch is found, and the comparison is refused in one line naming the
cells, the part and the command that resolves it: ``--rerun-mismatched``, which moves each mismatched
cell's folder aside (:func:`set_aside_mismatched`: ``DIR/superseded/<task>/<strategy>/mismatched/...``,
kept, never deleted) and runs it again.

Re-summarizing alone (``--report-only``, or a ``--resume`` with nothing left to run) checks nothing here:
the summary pools only cells whose records agree (:func:`hardmix.compare.summary.check_fingerprints`).
"""

from __future__ import annotations

import shlex
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from hardmix.compare.folder import MISMATCHED, SUPERSEDED
from hardmix.compare.grid import Cell, task_class
from hardmix.compare.runner import set_aside
from hardmix.config.loader import build_config
from hardmix.training.fingerprint import FREE_OF_RESULT, config_digest, data_mismatch, inputs_mismatch
from hardmix.training.run_folder import CHECKPOINT
from hardmix.utils.errors import ConfigError
from hardmix.version import __version__

#: Under ``DIR/superseded/<task>/<strategy>/``: the cells moved aside by ``--rerun-mismatched``.

# What a task's data and inputs are computed from: its config but the strategies and what is free of the
# result (each strategy's cells, every seed, share one computation).
_NOT_DATA = (*FREE_OF_RESULT, "loss.")


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text[:12] + "..." if len(text) > 15 else text


class _Now:
    """Each cell's fingerprint parts as they would be recorded now, computed once per task config."""

    def __init__(self) -> None:
        self._parts: dict[tuple[str, str], tuple[Any, Any]] = {}

    def parts(self, cell: Cell) -> tuple[dict[str, Any] | None, str | None]:
        task_cls = task_class(cell.task)
        key = (task_cls.name, config_digest(cell.config, _NOT_DATA))
        if key not in self._parts:
            cfg: Any = build_config(task_cls.config_class, cell.config)
            try:
                facts = task_cls.about(cfg)
                self._parts[key] = (facts.data_fingerprint(), facts.input_digest())
            except (OSError, ValueError) as e:
                raise ConfigError(f"tasks.{cell.task.name}: its data could not be fingerprinted before any "
                                  f"cell trains ({e})") from None
        return self._parts[key]


def _data_mismatch(recorded: Any, now: dict[str, Any] | None, what: str) -> str | None:
    """Why ``recorded`` (a record's or a checkpoint's training data fingerprint) does not establish the
    data of ``now`` (:func:`~hardmix.training.fingerprint.data_mismatch`: a record may hold more, the counts
    only building knows), or None; ``now`` None: the task cannot tell before building (the cell's own resume
    and the summary check it)."""
    why = data_mismatch(recorded, now)
    if why is None or now is None:  # (no now: why is None)
        return None
    if why.recorded is None:
        return f"its {what} records no training data fingerprint, so its data cannot be established"
    if why.other_form:
        return (f"its {what} identifies its training data by {', '.join(why.recorded) or 'nothing'}, not "
                f"by {', '.join(why.missing)} (an older hardmix's fingerprint), so its data cannot be "
                "established")
    return "its training data differ (" + ", ".join(
        f"{k} {_short(recorded[k])} then, {_short(now[k])} now" for k in why.differ) + ")"


def _inputs_mismatch(recorded: dict[str, Any], now: str | None, what: str) -> str | None:
    """Why ``recorded`` (a record's fingerprint, a checkpoint) does not establish the inputs (model files,
    evaluation sets) of ``now`` (:func:`~hardmix.training.fingerprint.inputs_mismatch`), or None; ``now``
    None: the task does not say before building (the cell's own resume checks it)."""
    if now is None:
        return None
    why = inputs_mismatch(recorded, now)
    if why == "unrecorded":
        return f"its {what} records no inputs (an older hardmix's), so its inputs cannot be established"
    if why == "differ":
        return (f"its inputs (model files, evaluation sets) differ ({_short(recorded['inputs'])} then, "
                f"{_short(now)} now)")
    return None


def record_mismatch(record: dict[str, Any], cell: Cell, data: dict[str, Any] | None, inputs: str | None,
                    check_config: bool = True) -> str | None:
    """Why a finished cell's record does not match what the cell would be made from now (its config, the
    ``data`` and ``inputs`` fingerprints computed now, this hardmix), or None when it does."""
    fp = record.get("fingerprint")
    if not isinstance(fp, dict):
        return "its record has no fingerprint (an older hardmix made it), so its data cannot be established"
    why = _data_mismatch(fp.get("data"), data, "record")
    if why is not None:
        return why
    why = _inputs_mismatch(fp, inputs, "record")
    if why is not None:
        return why
    if fp.get("hardmix") != __version__:
        return f"it was made by hardmix {fp.get('hardmix')}, this is {__version__}"
    if check_config and fp.get("config") != config_digest(cell.config, FREE_OF_RESULT):
        return "its config fingerprint differs from its config's now"
    return None


def checkpoint_mismatch(cell: Cell, data: dict[str, Any] | None, inputs: str | None) -> str | None:
    """Why an interrupted cell's checkpoint does not match the data and inputs it would resume on now (what
    its resume would refuse), or None. The file is mapped, not read: its weights are not loaded."""
    try:
        state = torch.load(cell.run_dir / CHECKPOINT, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - unreadable: the cell's own resume names the problem
        return None
    if not isinstance(state, dict):
        return None
    why = _data_mismatch(state.get("data"), data, "checkpoint")
    if why is not None:
        return why
    return _inputs_mismatch(state, inputs, "checkpoint")


def mismatched_cells(cells: list[Cell], skip_config: Collection[str] = frozenset()) -> list[tuple[Cell, str]]:
    """Each finished cell whose record, and each interrupted cell whose checkpoint, does not match what it
    would be made from now, with why (:func:`record_mismatch`, :func:`checkpoint_mismatch`); the config of
    the cells labelled in ``skip_config`` is not compared (evaluation cells before tuning has chosen)."""
    now = _Now()
    out = []
    for c in cells:
        status = c.status()
        if status == "finished":
            data, inputs = now.parts(c)
            why = record_mismatch(c.record(), c, data, inputs, c.label not in skip_config)
        elif status == "partial" and (c.run_dir / CHECKPOINT).is_file():
            data, inputs = now.parts(c)
            why = checkpoint_mismatch(c, data, inputs)
        else:
            continue
        if why is not None:
            out.append((c, why))
    return out


def rerun_command(spec_path: str, out: Path) -> str:
    """The command that resolves a mismatch: the comparison resumed, its mismatched cells run again."""
    return f"hardmix compare {shlex.quote(str(spec_path))} --output {shlex.quote(str(out))} --resume " \
           "--rerun-mismatched"


def refusal(found: list[tuple[Cell, str]], spec_path: str, out: Path) -> ConfigError:
    """The one-line refusal naming every mismatched cell (the first three with why) and the command."""
    shown = "; ".join(f"{c.label}: {why}" for c, why in found[:3])
    more = f"; and {len(found) - 3} more" if len(found) > 3 else ""
    n = len(found)
    cells, them = (f"{n} cells of this comparison were", "them") if n != 1 else \
        ("1 cell of this comparison was", "it")
    return ConfigError(
        f"{out}: {cells} not made from the data it would be made from now, found before any cell trained "
        f"({shown}{more}); `{rerun_command(spec_path, out)}` moves {them} to {out / SUPERSEDED}/ (kept) "
        f"and runs {them} again, or restore the data {them} {'was' if n == 1 else 'were'} made from")


def set_aside_mismatched(cell: Cell, output: Path) -> Path:
    """Move a mismatched cell's folder and its log to ``DIR/superseded/<task>/<strategy>/mismatched/seed<k>``
    (a tuning cell's under ``.../mismatched/point<i>/seed<k>``; ``seed<k>.2``, ... when taken): kept, not
    deleted, and the cell runs again. Returns where it went."""
    base = output / SUPERSEDED / cell.task.name / cell.strategy / MISMATCHED
    if cell.point_index is not None:
        base = base / f"point{cell.point_index}"
    return set_aside(cell, output, base)


def check_cells(cells: list[Cell], spec_path: str, out: Path, rerun: bool,
                skip_config: Collection[str] = frozenset()) -> list[tuple[Cell, Path]]:
    """Refuse a comparison holding a mismatched cell (:func:`mismatched_cells`), naming them all and the
    command that resolves it; with ``rerun`` (``--rerun-mismatched``), move each aside instead
    (:func:`set_aside_mismatched`) so it runs again. Returns the cells moved, with where they went."""
    found = mismatched_cells(cells, skip_config)
    if found and not rerun:
        raise refusal(found, spec_path, out)
    return [(c, set_aside_mismatched(c, out)) for c, _ in found]


__all__ = ["check_cells", "checkpoint_mismatch", "mismatched_cells", "record_mismatch",
           "rerun_command", "set_aside_mismatched"]
