"""The start of a comparison measured after the fact (``hardmix compare SPEC --output DIR --measure-start``).

A comparison whose cells were trained before runs measured their starting encoder (``results.json`` without
``start_scores``) gets its ``start`` rows here, without training anything: for each evaluation cell, the
cell's own recorded config (``runs/<task>/<strategy>/seed<k>/config.yaml``) is validated again, the task is
built as the engine builds it (the runtime seeded with the cell's seed, ``check``, ``build``, the optimizers
configured) and :meth:`~hardmix.training.task.Task.start_scores` scores the encoder before any step, under
``eval.start: all`` (every score the end has) and RNGs preserved, as the engine's ``_measure_start`` does.

One measurement serves every cell with the same *start key*: the config sections that decide the starting
encoder and how it is scored (``model``, ``data``, ``eval``, ``train.precision``), and the seed where the
task's untrained network depends on it (vision: the seed initializes the network; text: the pretrained model
is loaded as it is, the projection head is not part of the evaluated encoder, so the seed is left out and a
task's start is measured once). Each is written atomically to ``DIR/start/<task>/seed<k>_<key>.json``
(``start_<key>.json`` where the seed plays no part) with its key's digest, the date, the code that measured
it and the cells it serves; a file that exists is never measured again (resumable). The summary uses a file
for a cell whose record holds no ``start_scores`` and whose start key matches the file's
(:func:`starts_for`).
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from hardmix.compare.folder import START_DIR
from hardmix.compare.grid import Cell, task_class
from hardmix.compare.records import collect
from hardmix.config.loader import build_config
from hardmix.training.engine import preserved_rng
from hardmix.training.run_folder import CONFIG
from hardmix.training.runtime import end_runtime, start_runtime
from hardmix.training.shared_start import START_SECTIONS, digest, start_part
from hardmix.utils.confine import write_text
from hardmix.utils.offline import libraries_offline
from hardmix.utils.provenance import code_provenance

HOW = "measured after the fact by --measure-start"


def recorded_config(cell: Cell) -> dict[str, Any] | None:
    """The config a finished cell ran with (its ``config.yaml``), or None where it has none."""
    path = cell.run_dir / CONFIG
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def seed_free(cell: Cell) -> bool:
    """Whether the cell's starting encoder is the same for every seed (text's pretrained model:
    :attr:`~hardmix.training.task.Task.start_depends_on_seed`)."""
    return not task_class(cell.task).start_depends_on_seed


def start_key(cell: Cell, config: dict[str, Any]) -> str:
    """The digest of what decides the cell's start (the config's
    :data:`~hardmix.training.shared_start.START_SECTIONS`, and the seed unless :func:`seed_free`).

    >>> from types import SimpleNamespace as N
    >>> c = N(task=N(task="vision", name="vision"), seed=1)
    >>> start_key(c, {"model": {"width": 8}, "train": {"seed": 1}}) == start_key(
    ...     c, {"model": {"width": 8}, "train": {"seed": 1}, "loss": {"temperature": 0.2}})
    True
    """
    return digest(start_part(config, None if seed_free(cell) else cell.seed))[:16]


def start_file(out: Path, cell: Cell, key: str) -> Path:
    """Where the start of key ``key`` (:func:`start_key`) of a cell's task is kept:
    ``start/<task>/seed<k>_<key>.json``, or ``start/<task>/start_<key>.json`` where the seed plays no part."""
    name = "start" if seed_free(cell) else f"seed{cell.seed}"
    return out / START_DIR / cell.task.name / f"{name}_{key[:8]}.json"


def read_start(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("scores"), dict) else None


def measure(task_class: Any, config: dict[str, Any], threads: int | None = None) -> dict[str, Any]:
    """The starting encoder's scores of a run of ``config`` (a plain recorded config), as the engine
    measures them before the first step with ``eval.start: all``: ``{"scores", "other", "seconds"}``."""
    cfg = build_config(task_class.config_class, config, [])
    if threads is not None:
        cfg.train.threads = threads
    runtime = start_runtime(cfg.train.device, cfg.train.precision, cfg.train.threads, cfg.train.seed,
                            cfg.train.precision, task_class.name, task_class.about(cfg).auto_bf16())
    cfg.train.precision = runtime.precision
    t0 = time.perf_counter()
    try:
        with libraries_offline():
            task = task_class(cfg, runtime)
            task.check()
            task.build()
            if task.loss_fn is not None:
                task.loss_fn.resolve_epochs(task.steps_for(1))
            total = task.steps_for(cfg.train.epochs)
            total = min(total, cfg.train.max_steps) if cfg.train.max_steps else total
            task.configure_optimizers(total)
            with preserved_rng():
                scores, other = task.start_scores(selection_only=False)
    finally:
        end_runtime(runtime)
    return {"scores": dict(scores), "other": {k: dict(v) for k, v in other.items()},
            "seconds": round(time.perf_counter() - t0, 3)}


def measure_starts(cells: list[Cell], out: Path, threads: int | None = None) -> list[Path]:
    """Measure the start of every finished evaluation cell that has none (neither in its record nor in a
    start file of its key), once per start key, printing progress; returns the files written."""
    records, _ = collect(cells)
    todo: dict[Path, tuple[Cell, dict[str, Any], str, list[str]]] = {}
    for c in cells:
        record = records.get((c.task.name, c.strategy, c.seed))
        config = recorded_config(c)
        if record is None or config is None or isinstance(record.get("start_scores"), dict):
            continue
        key = start_key(c, config)
        path = start_file(out, c, key)
        if read_start(path) is not None:
            continue  # measured already
        if path in todo:
            todo[path][3].append(c.label)
        else:
            todo[path] = (c, config, key, [c.label])
    written = []
    for i, (path, (c, config, key, labels)) in enumerate(todo.items(), 1):
        print(f"hardmix: measuring the start {path.relative_to(out)} ({i}/{len(todo)}) from "
              f"{c.label}'s config", file=sys.stderr, flush=True)
        result = measure(task_class(c.task), config, threads)
        entry = {"task": c.task.name, "seed": None if seed_free(c) else c.seed, "key": key,
                 "key_sections": list(START_SECTIONS) + ([] if seed_free(c) else ["train.seed"]),
                 "from_config": str(c.run_dir.relative_to(out) / CONFIG),
                 "cells": labels, "how": HOW,
                 "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                 "code": code_provenance(), **result}
        write_text(json.dumps(entry, indent=2, sort_keys=False) + "\n", path, out)
        print(f"hardmix: {path} written ({result['seconds']:.1f}s)", file=sys.stderr, flush=True)
        written.append(path)
    if not todo:
        print("hardmix: every finished cell's start is measured already", file=sys.stderr)
    return written


def starts_for(cells: list[Cell], out: Path | None) -> dict[tuple[str, str, int], dict[str, Any]]:
    """The start measured after the fact of each cell it serves (same start key), by (task, strategy,
    seed): the file's content with its ``path``."""
    if out is None or not (out / START_DIR).is_dir():
        return {}
    found: dict[tuple[str, str, int], dict[str, Any]] = {}
    for c in cells:
        config = recorded_config(c)
        if config is None:
            continue
        key = start_key(c, config)
        path = start_file(out, c, key)
        entry = read_start(path)
        if entry is not None and entry.get("key") == key:
            found[(c.task.name, c.strategy, c.seed)] = {**entry, "path": str(path.relative_to(out))}
    return found


__all__ = ["HOW", "measure", "measure_starts", "start_file", "start_key",
           "starts_for"]
