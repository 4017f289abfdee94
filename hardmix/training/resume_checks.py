"""The refusals of a run folder and of ``--resume``, checked before any work: a folder of an older hardmix or
of another run, a checkpoint missing what resume reads, a config, data or inputs other than the run's, a key
changed that fixes what its scores mean. Each raises one line that says what to change.

The engine (:mod:`hardmix.training.engine`) calls them; each takes what it checks, nothing of the loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from hardmix.training import checkpoint as ckpt
from hardmix.training.config import MEANING, meaning_differences, plain_config, resume_differences
from hardmix.training.fingerprint import data_mismatch, inputs_mismatch
from hardmix.training.metrics import tensorboard_writer_class
from hardmix.training.results import read_results
from hardmix.training.run_folder import CHECKPOINT, CONFIG, RESULTS, RunFolderError, run_files
from hardmix.training.task import Task
from hardmix.utils.errors import ConfigError

#: Checkpoint names of hardmix before the shared engine: a folder holding one holds an older run.
LEGACY_CHECKPOINTS = ("last.pt", "checkpoint_last.pt")

#: What ``--resume`` reads of a checkpoint, checked at once (a missing one was a KeyError traceback).
RESUME_KEYS = ("config", "world_size", "step", "total_steps", "model", "optimizer", "scheduler", "task_state",
               "processes", "engine")


def saved_precision(out: Path) -> str | None:
    """The ``train.precision`` of the run in ``out`` (its ``config.yaml``), or None where there is none: a
    resumed run keeps the precision it started with (``auto`` resolves to it)."""
    try:
        saved = yaml.safe_load((out / CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    train = saved.get("train") if isinstance(saved, dict) else None
    value = train.get("precision") if isinstance(train, dict) else None
    return value if isinstance(value, str) else None


def start_point(task_class: type[Task], cfg: Any, out: Path, resume: bool, world: int,
                say: Callable[[str], None]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Where a run starts: the checkpoint a resume continues from (None: a new run, or a resumed one that
    stopped before its first checkpoint), and the record of a resumed run that finished already (final:
    nothing is trained again). Refuses first what :func:`check_run_folder` refuses."""
    saved = check_run_folder(task_class, cfg, out, resume, world)
    if cfg.log.tensorboard:  # asked for without its library: said before any work
        tensorboard_writer_class()
    if not resume:
        return saved, None
    done = finished_already(out, task_class.name, say)
    if done is None and not (out / CHECKPOINT).is_file():
        say(f"--resume: {out} holds no checkpoint (the run stopped before its first one, or never started); "
            "starting it from step 0")
    return saved, done


def check_run_folder(task_class: type[Task], cfg: Any, out: Path, resume: bool,
                 world: int) -> dict[str, Any] | None:
    """Refuse a folder this run cannot be written to or resumed from; returns the checkpoint a resume
    continues from (None: a new run, or a resumed one that stopped before its first checkpoint)."""
    checkpoint = out / CHECKPOINT
    if cfg.train.batch_size % world:
        raise ConfigError(f"train.batch_size: {cfg.train.batch_size} is not divisible by the "
                          f"{world} processes (it is the global batch)")
    legacy = [out / n for n in LEGACY_CHECKPOINTS if (out / n).is_file()]
    if legacy and not checkpoint.is_file():
        raise RunFolderError(f"{legacy[0]}: a run of an older hardmix (before checkpoint.pt); it cannot "
                             "be resumed by this version: choose another --output")
    held = run_files(out)
    if not resume and held:
        raise RunFolderError(f"--output: {out} already holds a run ({out / held[0]}); pass "
                             "--resume to continue it or choose another --output")
    if not resume:
        return None
    if not checkpoint.is_file():
        check_saved_config(task_class, cfg, out)
        return None
    state = ckpt.load_checkpoint(checkpoint, task=task_class.name)
    missing = [k for k in RESUME_KEYS if k not in state]
    if missing or not isinstance(state["config"], dict):
        what = ", ".join(missing) or "run config"
        raise RunFolderError(f"--resume: {checkpoint} is not a complete hardmix checkpoint "
                             f"(no {what}); it cannot be resumed: start a new run with another "
                             "--output")
    check_same_meaning(task_class, cfg, state["config"], str(checkpoint))
    changed = resume_differences(state["config"], plain_config(cfg), task_class.resumable_keys)
    if changed:
        raise ConfigError(f"--resume: the config differs from the run's in {', '.join(changed)}; a "
                          "resumed run keeps its model, data, loss, budget and seed (only "
                          "train.stop_after_steps, train.save_steps, train.threads, train.device, "
                          "log.* and the eval.* keys that leave the scores' meaning may change)")
    if state["world_size"] != world:
        raise RunFolderError(f"--resume: the run used {state['world_size']} processes, this one "
                             f"{world}; resume with the same number to continue exactly")
    return state


def check_saved_config(task_class: type[Task], cfg: Any, out: Path) -> None:
    """A resumed run without a checkpoint still keeps the config it was started with."""
    saved = out / CONFIG
    if not saved.is_file():
        return
    try:
        before = yaml.safe_load(saved.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # cut by the kill that stopped the run: it is written again
    if isinstance(before, dict):
        check_same_meaning(task_class, cfg, before, str(saved))
        changed = resume_differences(before, plain_config(cfg), task_class.resumable_keys)
        if changed:
            raise ConfigError(f"--resume: the config differs from the run's ({saved}) in "
                              f"{', '.join(changed)}; resume with the run's config or choose another "
                              "--output")


def check_same_meaning(task_class: type[Task], cfg: Any, saved: dict[str, Any], source: str) -> None:
    """Refuse a resume that changes a key fixing what the run's recorded numbers mean (the engine's
    :data:`~hardmix.training.config.MEANING` and the task's ``meaning_keys``), naming it, though its
    section may otherwise change."""
    changed = meaning_differences(saved, plain_config(cfg), {**MEANING, **task_class.meaning_keys},
                                  task_class.about(cfg).same_meaning)
    if changed:
        key, before, now, what = changed[0]
        more = f" (and {', '.join(c[0] for c in changed[1:])})" if changed[1:] else ""
        raise ConfigError(f"--resume: {key} was {before!r} in the run ({source}), {now!r} now{more}: it "
                          f"fixes {what}, so the run's recorded scores would mean two things; resume "
                          "with the run's value, or start a new run with another --output")


def check_same_data(saved: dict[str, Any] | None, now: dict[str, Any] | None) -> None:
    """Refuse to resume on other data than the run's (its fingerprint is in the checkpoint): data that
    differ, or a fingerprint of another form (an older hardmix's) by which they cannot be known to be
    the same."""
    why = data_mismatch(saved, now, exact=True)
    if why is None:
        return
    now = now or {}  # (a task of no fingerprint meets no mismatch)
    if why.other_form:
        raise RunFolderError(
            f"--resume: the run's checkpoint identifies its training data by "
            f"{', '.join(why.recorded or ['nothing'])}, this hardmix by {', '.join(sorted(now))} (its "
            "checkpoint is an older hardmix's): whether the data are the same cannot be established; "
            "resume it with the hardmix that started it, or start a new run with another --output")
    recorded = saved or {}  # (a record of no fingerprint differs in no entry)
    what = ", ".join(f"{k} {recorded[k]!r} -> {now[k]!r}" for k in sorted(why.differ))
    raise RunFolderError(f"--resume: the training data differ from the run's ({what}); resume with the "
                         "data the run started with, or start a new run with another --output")


def check_same_inputs(state: dict[str, Any], now: str | None) -> None:
    """Refuse to resume on other inputs than the run's (model files, evaluation sets: the task's
    ``input_digest``, kept in the checkpoint at the start): a relative path read from another working
    folder may name other files, and the result's fingerprint would name inputs it was not made from."""
    why = inputs_mismatch(state, now)
    if why == "unrecorded":
        raise RunFolderError(
            "--resume: the run's checkpoint does not record its inputs (model files, evaluation sets: an "
            "older hardmix started it), so whether they are the same cannot be established; resume it "
            "with the hardmix that started it, or start a new run with another --output")
    if why == "differ":
        saved = state["inputs"]
        short = [str(v)[:12] if v is not None else "none" for v in (saved, now)]
        raise RunFolderError(
            f"--resume: the run's inputs (model files, evaluation sets) differ from those it started "
            f"with (sha256 {short[0]}... then, {short[1]}... now; a relative path names the files of the "
            f"working folder, here {Path.cwd()}); resume with the inputs the run started with, from the "
            "folder it started in, or start a new run with another --output")


def check_same_run(state: dict[str, Any], data: dict[str, Any] | None, inputs: str | None,
                   total_steps: int) -> None:
    """Refuse to resume the checkpoint ``state`` on other training data, other inputs, or data that make
    another number of steps than the run planned (:func:`check_same_data`, :func:`check_same_inputs`)."""
    check_same_data(state.get("data"), data)
    check_same_inputs(state, inputs)
    if int(state["total_steps"]) != total_steps:
        raise RunFolderError(f"--resume: the run planned {state['total_steps']} steps, this one "
                             f"{total_steps} over the same config; resume with the run's data")


def check_not_inside_inputs(input_folders: Mapping[str, str | os.PathLike[str]], out: Path) -> None:
    """Refuse a run folder that is, or is inside, a folder the run reads (``ConfigFacts.input_folders``)."""
    for key, folder in input_folders.items():
        src, real = os.path.realpath(folder), os.path.realpath(out)
        if real == src:
            raise RunFolderError(f"--output: {out} is the run's own {key} ({folder}); a run is "
                                 "never written into what it reads: choose another --output")
        if real.startswith(src.rstrip(os.sep) + os.sep):
            raise RunFolderError(f"--output: {real} is inside the run's {key} ({src}); a run is never "
                                 "written into what it reads (it would change that folder: a model's "
                                 "fingerprint, an image folder's images): choose another --output")


def finished_already(out: Path, task_name: str, say: Callable[[str], None]) -> dict[str, Any] | None:
    """A resumed run whose ``results.json`` says it finished, with or without its checkpoint (a
    comparison's cells never keep one): final, so nothing is trained again and its record is returned.
    A ``results.json`` that cannot be read is refused: no retrained run writes over it."""
    if not (out / RESULTS).exists():
        return None
    try:
        record = read_results(out)
    except ValueError as e:
        raise RunFolderError(f"--resume: {e}; whether the run finished is unknown, so it is not trained "
                             "again over it: move the file aside to resume from the checkpoint") from None
    if not record.get("finished") or record.get("task") != task_name:
        return None  # not finished, or another task's run: the folder's checks say what to do
    say(f"{out} finished already ({record['steps']} steps); nothing to do")
    return where_it_is(record, out)


def where_it_is(record: dict[str, Any], out: Path) -> dict[str, Any]:
    """A finished run's record as seen from its folder now: a folder copied or moved since reports its own
    paths (``run_dir``, and the task's paths inside it, such as the exported model), not the old ones."""
    was = record.get("run_dir")
    if not isinstance(was, str) or Path(was) == out:
        return record

    def moved(value: Any) -> Any:
        if isinstance(value, str) and Path(value).is_relative_to(was):
            return str(out / Path(value).relative_to(was))
        return value

    info = record.get("task_info")
    return {**record, "run_dir": str(out),
            "task_info": {k: moved(v) for k, v in info.items()} if isinstance(info, dict) else info}


def resume_hint(task_name: str, out: Path) -> str:
    """Where the run stands and the command that continues it (the end of a stopped run's message)."""
    checkpoint = out / CHECKPOINT
    saved = (f"the last checkpoint is {checkpoint}" if checkpoint.is_file()
             else "no checkpoint was written yet")
    return f"{saved}; continue with: hardmix train {task_name} {out / CONFIG} --output {out} --resume"


__all__ = ["LEGACY_CHECKPOINTS", "RESUME_KEYS", "check_not_inside_inputs", "check_run_folder",
           "check_same_data", "check_same_inputs", "check_same_meaning", "check_same_run",
           "check_saved_config", "finished_already", "resume_hint", "saved_precision", "start_point",
           "where_it_is"]
