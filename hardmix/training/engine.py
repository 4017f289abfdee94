"""The training loop every task shares (:func:`run_training`).

Per step: the task's forward and loss; a non-finite loss is skipped or stops the run
(``train.max_nonfinite_steps``); backward (scaled in fp16), the task's pre-update hook (clipping), the
optimizer and scheduler; the task's post-update hook (queues). Every ``log.log_steps`` a line of
``metrics.jsonl`` (the window's mean loss, lr, wall time, the core's diagnostics), every
``eval.eval_steps`` the selection score (RNGs restored afterwards, so evaluating never changes the run),
every ``train.save_steps`` an atomic checkpoint. SIGTERM or SIGUSR1 checkpoints at the end of the step and
stops. A resumed run restores the model, optimizer, scheduler, scaler, the task's state (queues, random
streams), every process's RNGs and the step, so on the CPU its losses equal an uninterrupted run's bit for
bit.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch.distributed as dist
import yaml
from tqdm.auto import tqdm

from hardmix.training import checkpoint as ckpt
from hardmix.training.checkpoint import load_matching
from hardmix.training.config import MEANING, meaning_differences, plain_config, resume_differences
from hardmix.training.metrics import MetricsLog, tensorboard_writer_class
from hardmix.training.results import read_results, results_record, write_results
from hardmix.training.run_folder import (
    BEST,
    CHECKPOINT,
    CONFIG,
    METRICS,
    RESULTS,
    TENSORBOARD,
    RunFolderError,
    RunLock,
    run_files,
)
from hardmix.training.runtime import Runtime, end_runtime, start_runtime
from hardmix.training.signals import PreemptionSignals
from hardmix.training.task import StepResult, Task
from hardmix.utils.confine import makedirs, write_text
from hardmix.utils.errors import ConfigError, RunError, RunInterrupted
from hardmix.utils.offline import libraries_offline
from hardmix.utils.rng import rng_state, set_rng_state

#: Checkpoint names of hardmix before the shared engine: a folder holding one holds an older run.
LEGACY_CHECKPOINTS = ("last.pt", "checkpoint_last.pt")


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Restore every global RNG (Python, NumPy, torch CPU and CUDA) on exit."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def run_training(task_class: type[Task], cfg: Any, output: str | Path | None = None,
                 resume: bool = False) -> dict[str, Any]:
    """Train ``task_class`` with the validated ``cfg``; returns the results record (``results.json``).

    Args:
        task_class: the modality's :class:`~hardmix.training.task.Task`.
        cfg: its validated config (``task_class.config_class``).
        output: the run folder (default ``cfg.output``).
        resume: continue the run in ``output`` from its ``checkpoint.pt``.

    Raises:
        ConfigError, RunFolderError, CheckpointError, FileNotFoundError, ValueError: before training, for a
            bad setup (the message says what to change). RunError: the loss diverged or the folder is in use.
    """
    out = Path(output or cfg.output)
    runtime = start_runtime(cfg.train.device, cfg.train.precision, cfg.train.threads, cfg.train.seed,
                            saved_precision(out) if resume else None, task_class.name,
                            task_class.auto_bf16_for(cfg))
    cfg.train.precision = runtime.precision  # config.yaml and results.json record the precision used
    try:
        with libraries_offline():  # HARDMIX_OFFLINE / --no-download reach transformers and the Hub client
            return _Run(task_class, cfg, out, resume, runtime).run()
    finally:
        end_runtime(runtime)


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


#: What ``--resume`` reads of a checkpoint, checked at once (a missing one was a KeyError traceback).
RESUME_KEYS = ("config", "world_size", "step", "total_steps", "model", "optimizer", "scheduler", "task_state",
               "processes", "engine")


class _Run:
    def __init__(self, task_class: type[Task], cfg: Any, out: Path, resume: bool, runtime: Runtime) -> None:
        self.cfg, self.out, self.resume, self.runtime = cfg, out, resume, runtime
        self.task_class = task_class
        self.checkpoint_path = out / CHECKPOINT
        self.state: dict[str, Any] | None = None
        self.step = 0
        self.best_score: float | None = None
        self.best_step: int | None = None
        self.last_score: float | None = None
        self.last_score_step: int | None = None
        self.last_eval: dict[str, float] | None = None
        self.best_eval: dict[str, float] | None = None
        self.window_loss = 0.0
        self.window_steps = 0
        self.wall_seconds = 0.0  # training seconds of the processes accounted so far (checkpointed)
        self._session_start: float | None = None  # this process's training clock (None: stopped)
        self._eval_seconds = 0.0
        self.nonfinite = 0
        self.samples = 0
        self.start: dict[str, Any] | None = None  # the starting encoder's scores (None: not measured)

    # -------------------------------------------------------------------------------- before work
    def _check_folder(self) -> None:
        cfg, runtime = self.cfg, self.runtime
        if cfg.train.batch_size % runtime.world:
            raise ConfigError(f"train.batch_size: {cfg.train.batch_size} is not divisible by the "
                              f"{runtime.world} processes (it is the global batch)")
        legacy = [self.out / n for n in LEGACY_CHECKPOINTS if (self.out / n).is_file()]
        if legacy and not self.checkpoint_path.is_file():
            raise RunFolderError(f"{legacy[0]}: a run of an older hardmix (before checkpoint.pt); it cannot "
                                 "be resumed by this version: choose another --output")
        held = run_files(self.out)
        if not self.resume and held:
            raise RunFolderError(f"--output: {self.out} already holds a run ({self.out / held[0]}); pass "
                                 "--resume to continue it or choose another --output")
        if self.resume and not self.checkpoint_path.is_file():
            self._check_saved_config()
        elif self.resume:
            state = ckpt.load_checkpoint(self.checkpoint_path, task=self.task_class.name)
            missing = [k for k in RESUME_KEYS if k not in state]
            if missing or not isinstance(state["config"], dict):
                what = ", ".join(missing) or "run config"
                raise RunFolderError(f"--resume: {self.checkpoint_path} is not a complete hardmix checkpoint "
                                     f"(no {what}); it cannot be resumed: start a new run with another "
                                     "--output")
            self._check_same_meaning(state["config"], str(self.checkpoint_path))
            changed = resume_differences(state["config"], plain_config(cfg), self.task_class.resumable_keys)
            if changed:
                raise ConfigError(f"--resume: the config differs from the run's in {', '.join(changed)}; a "
                                  "resumed run keeps its model, data, loss, budget and seed (only "
                                  "train.stop_after_steps, train.save_steps, train.threads, train.device, "
                                  "log.* and the eval.* keys that leave the scores' meaning may change)")
            if state["world_size"] != runtime.world:
                raise RunFolderError(f"--resume: the run used {state['world_size']} processes, this one "
                                     f"{runtime.world}; resume with the same number to continue exactly")
            self.state = state
        if cfg.log.tensorboard:
            tensorboard_writer_class()

    def _check_same_meaning(self, saved: dict[str, Any], source: str) -> None:
        """Refuse a resume that changes a key fixing what the run's recorded numbers mean (the engine's
        :data:`~hardmix.training.config.MEANING` and the task's ``meaning_keys``), naming it, though its
        section may otherwise change."""
        task = self.task_class
        changed = meaning_differences(saved, plain_config(self.cfg), {**MEANING, **task.meaning_keys},
                                      lambda k, a, b: task.same_meaning(k, a, b, self.cfg))
        if changed:
            key, before, now, what = changed[0]
            more = f" (and {', '.join(c[0] for c in changed[1:])})" if changed[1:] else ""
            raise ConfigError(f"--resume: {key} was {before!r} in the run ({source}), {now!r} now{more}: it "
                              f"fixes {what}, so the run's recorded scores would mean two things; resume "
                              "with the run's value, or start a new run with another --output")

    def _check_same_data(self, saved: dict[str, Any] | None) -> None:
        """Refuse to resume on other data than the run's (its fingerprint is in the checkpoint): data that
        differ, or a fingerprint of another form (an older hardmix's) by which they cannot be known to be
        the same."""
        from hardmix.training.fingerprint import data_mismatch

        now = self.data_fingerprint
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

    def _check_same_inputs(self, state: dict[str, Any]) -> None:
        """Refuse to resume on other inputs than the run's (model files, evaluation sets: the task's
        ``input_digest``, kept in the checkpoint at the start): a relative path read from another working
        folder may name other files, and the result's fingerprint would name inputs it was not made from."""
        from hardmix.training.fingerprint import inputs_mismatch

        now = self.inputs_digest
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

    def _finished_already(self) -> dict[str, Any] | None:
        """A resumed run whose ``results.json`` says it finished, with or without its checkpoint (a
        comparison's cells never keep one): final, so nothing is trained again and its record is returned.
        A ``results.json`` that cannot be read is refused: no retrained run writes over it."""
        if not (self.out / RESULTS).exists():
            return None
        try:
            record = read_results(self.out)
        except ValueError as e:
            raise RunFolderError(f"--resume: {e}; whether the run finished is unknown, so it is not trained "
                                 "again over it: move the file aside to resume from the checkpoint") from None
        if not record.get("finished") or record.get("task") != self.task_class.name:
            return None  # not finished, or another task's run: the folder's checks say what to do
        self.runtime.say(f"{self.out} finished already ({record['steps']} steps); nothing to do")
        return where_it_is(record, self.out)

    # ------------------------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        self._check_folder()
        if self.resume:  # a finished run is final: never trained again
            done = self._finished_already()
            if done is not None:
                return done
            if not self.checkpoint_path.is_file():
                self.runtime.say(f"--resume: {self.out} holds no checkpoint (the run stopped before its "
                                 "first one, or never started); starting it from step 0")
        task = self.task = self.task_class(self.cfg, self.runtime)
        task.check()
        for key, folder in task.input_folders().items():
            src, real = os.path.realpath(folder), os.path.realpath(self.out)
            if real == src:
                raise RunFolderError(f"--output: {self.out} is the run's own {key} ({folder}); a run is "
                                     "never written into what it reads: choose another --output")
            if real.startswith(src.rstrip(os.sep) + os.sep):
                raise RunFolderError(f"--output: {real} is inside the run's {key} ({src}); a run is never "
                                     "written into what it reads (it would change that folder: a model's "
                                     "fingerprint, an image folder's images): choose another --output")
        lock = RunLock(self.out)
        with PreemptionSignals() as self.signals:  # from here on, a signal stops the run in a resumable state
            if self.runtime.main:
                lock.acquire()
                self._remove_stale_temporaries()
            try:
                return self._train(task)
            except KeyboardInterrupt:  # a second Ctrl-C: the folder keeps its last checkpoint
                raise RunInterrupted("SIGINT", f"stopped by a second SIGINT at step {self.step}; "
                                     f"{self._resume_hint()}") from None
            finally:
                lock.release()

    def _remove_stale_temporaries(self) -> None:
        """Delete the temporary files a killed run left in the run folder (a SIGKILL during a checkpoint's
        write leaves its whole size in a hidden ``.checkpoint.pt.*.tmp``), and say so: the folder's lock is
        held, so no other process writes there."""
        from hardmix.training.run_folder import process_alive
        from hardmix.utils.confine import remove_stale_temporaries, say_removed

        removed = remove_stale_temporaries(self.out, self.out, process_alive, held=True)
        note = say_removed(removed, str(self.out))
        if note:
            self.runtime.say(note)

    def _resume_hint(self) -> str:
        saved = (f"the last checkpoint is {self.checkpoint_path}" if self.checkpoint_path.is_file()
                 else "no checkpoint was written yet")
        return (f"{saved}; continue with: hardmix train {self.task_class.name} {self.out / CONFIG} --output "
                f"{self.out} --resume")

    def _check_saved_config(self) -> None:
        """A resumed run without a checkpoint still keeps the config it was started with."""
        saved = self.out / CONFIG
        if not saved.is_file():
            return
        try:
            before = yaml.safe_load(saved.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return  # cut by the kill that stopped the run: it is written again
        if isinstance(before, dict):
            self._check_same_meaning(before, str(saved))
            changed = resume_differences(before, plain_config(self.cfg), self.task_class.resumable_keys)
            if changed:
                raise ConfigError(f"--resume: the config differs from the run's ({saved}) in "
                                  f"{', '.join(changed)}; resume with the run's config or choose another "
                                  "--output")

    def _train(self, task: Task) -> dict[str, Any]:
        cfg, runtime = self.cfg, self.runtime
        task.build()
        if task.loss_fn is not None:  # the strategies' schedules given in epochs, now in steps
            task.loss_fn.resolve_epochs(task.steps_for(1))
        self.data_fingerprint = task.data_fingerprint()
        self.inputs_digest = task.input_digest()  # at the start: what the model was loaded from
        if self.state is not None:
            self._check_same_data(self.state.get("data"))
            self._check_same_inputs(self.state)
        total = task.steps_for(cfg.train.epochs)
        self.total_steps = min(total, cfg.train.max_steps) if cfg.train.max_steps else total
        if self.state is not None and int(self.state["total_steps"]) != self.total_steps:
            raise RunFolderError(f"--resume: the run planned {self.state['total_steps']} steps, this one "
                                 f"{self.total_steps} over the same config; resume with the run's data")
        if task.loss_fn is not None:
            task.loss_fn.check_schedules(self.total_steps)
        self.stop_at = min(self.total_steps, cfg.train.stop_after_steps or self.total_steps)
        self.optimizer, self.scheduler = task.configure_optimizers(self.total_steps)
        self.scaler = runtime.grad_scaler()
        if runtime.main:
            makedirs(self.out, self.out)
            write_text(yaml.safe_dump(plain_config(cfg), sort_keys=False), self.out / CONFIG, self.out)
        self.metrics = MetricsLog(
            self.out / METRICS, runtime.main, keep_until=self.state["step"] if self.state else None,
            tensorboard_dir=self.out / TENSORBOARD if cfg.log.tensorboard else None, root=self.out)
        if self.state is not None:
            self._restore(self.state)
            self.state = None
            runtime.say(f"resumed {self.out} at step {self.step}/{self.total_steps}")
        elif self.step == 0:
            self._measure_start(task)
        runtime.say(f"{task.describe()}; {self.total_steps} steps of batch {cfg.train.batch_size} on "
                    f"{runtime.device}" + (f" x {runtime.world} processes" if runtime.world > 1 else "")
                    + f" in {runtime.precision} ({runtime.precision_reason})")
        try:
            interrupted = self._loop(task)
        finally:
            self.metrics.close()
        return self._end(task, interrupted)

    def _loop(self, task: Task) -> str | None:
        cfg, runtime = self.cfg, self.runtime
        bar = tqdm(total=self.total_steps, initial=self.step, desc=f"train {task.name}", unit="step",
                   disable=not (runtime.main and cfg.log.progress), file=sys.stderr, dynamic_ncols=True)
        self._session_start, self._eval_seconds = time.perf_counter(), 0.0
        session_samples = 0
        signals = self.signals
        if runtime.any(signals.received is not None):  # while building: stop before the first step
            bar.close()
            self._account(session_samples)
            self._save(task)
            return signals.received or "SIGTERM"
        try:
            for batch in task.batches(self.step, self.stop_at):
                log_now = (self.step + 1) % cfg.log.log_steps == 0 or self.step + 1 == self.stop_at
                result, loss, diagnostics = self._step(task, batch, log_now)
                session_samples += result.samples
                if loss is not None and log_now:
                    self._log(task, diagnostics)
                if cfg.eval.eval_steps and self.step % cfg.eval.eval_steps == 0:
                    self._eval_seconds += self._evaluate(task)
                if cfg.train.save_steps and self.step % cfg.train.save_steps == 0 \
                        and self.step < self.stop_at:
                    self._save(task)
                bar.update(1)
                bar.set_postfix_str(self._postfix(loss), refresh=False)
                if runtime.any(signals.received is not None):
                    self._account(session_samples)
                    self._save(task)
                    return signals.received or "SIGTERM"
        finally:
            bar.close()
        self._account(session_samples)
        return None

    def _session_seconds(self) -> float:
        """Training seconds of this process not yet in ``wall_seconds`` (evaluations excluded)."""
        if self._session_start is None:  # accounted: the training clock has stopped
            return 0.0
        return time.perf_counter() - self._session_start - self._eval_seconds

    def _account(self, samples: int) -> None:
        """Fold this process's training seconds into ``wall_seconds`` and stop the training clock."""
        seconds = self._session_seconds()
        self.wall_seconds += seconds
        self.samples_per_second = samples / seconds if seconds > 0 else None
        self._session_start = None

    def _training_seconds(self) -> float:
        """Training seconds over every process so far, this one included."""
        return self.wall_seconds + self._session_seconds()

    def _postfix(self, loss: float | None) -> str:
        parts = [f"loss={loss:.4f}" if loss is not None else "loss=skipped"]
        parts.append(f"lr={self.scheduler.get_last_lr()[0]:.3g}")
        label = self.task.progress_label
        if self.last_score is not None:
            parts.append(f"{label}={self.last_score:.2f}")
            if self.best_score is not None:
                parts.append(f"best={self.best_score:.2f}@{self.best_step}")
        return " ".join(parts)

    def _step(self, task: Task, batch: Any, log_now: bool) -> tuple[StepResult, float | None, dict[str, Any]]:
        """One optimizer step (or a skipped non-finite one): the result, the mean loss, and on logging
        steps the diagnostics (taken before the task's post-update hook, so they see what the step saw)."""
        runtime = self.runtime
        result = task.train_step(batch, self.step)
        self._lr = float(self.scheduler.get_last_lr()[0])
        loss = result.loss.detach().float()
        if runtime.world > 1:
            loss = loss.clone()
            dist.all_reduce(loss)
            loss /= runtime.world
        value = float(loss)
        if not math.isfinite(value):
            self._skip_nonfinite(task, value)
            return result, None, {}
        if self.scaler is not None:
            self.scaler.scale(result.loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            result.loss.backward()
        task.before_optimizer_step()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        diagnostics = self._diagnostics(task, result) if log_now and self.cfg.log.diagnostics else {}
        task.after_optimizer_step(result, self.step)
        self.step += 1
        self.window_loss += value
        self.window_steps += 1
        return result, value, diagnostics

    def _diagnostics(self, task: Task, result: StepResult) -> dict[str, Any]:
        """The core's loss statistics and the task's diagnostics of the step (every RNG restored after)."""
        out = dict(result.stats() if callable(result.stats) else result.stats or {})
        out.pop("loss", None)
        with preserved_rng():
            out.update(task.diagnostics(result, self.step))
        return out

    def _skip_nonfinite(self, task: Task, value: float) -> None:
        cfg = self.cfg
        self.optimizer.zero_grad(set_to_none=True)
        self.nonfinite += 1
        step = self.step + 1
        if self.nonfinite > cfg.train.max_nonfinite_steps:
            if self.checkpoint_path.is_file():
                saved = ckpt.read_checkpoint_file(self.checkpoint_path)["step"]
                last = f"the last good checkpoint is {self.checkpoint_path} (step {saved})"
            else:
                last = "no checkpoint was written before it"
            raise RunError(
                f"the loss is {value} at step {step} ({self.nonfinite} non-finite, "
                f"train.max_nonfinite_steps={cfg.train.max_nonfinite_steps}); stopped, and {last}; lower "
                "train.lr, or raise train.max_nonfinite_steps to skip such steps")
        self.runtime.say(f"the loss is {value} at step {step}: step skipped ({self.nonfinite} of at most "
                         f"{cfg.train.max_nonfinite_steps})")
        self.scheduler.step()
        self.step += 1
        return None

    def _log(self, task: Task, diagnostics: dict[str, Any]) -> None:
        record: dict[str, Any] = {
            "step": self.step,
            "epoch": round(task.epoch_at(self.step), 4),
            "loss": self.window_loss / max(1, self.window_steps),
            "lr": self._lr,
            "wall_seconds": round(self._training_seconds(), 3),
        }
        record.update(diagnostics)
        self.window_loss, self.window_steps = 0.0, 0
        self.metrics.write(record)

    def _evaluate(self, task: Task) -> float:
        """Score the current model (rank 0, RNGs restored); returns the seconds it took."""
        t0 = time.perf_counter()
        if self.runtime.main:
            metric = task.selection_metric
            with preserved_rng():
                scores = task.evaluate()
            if metric not in scores:
                raise RuntimeError(f"task {task.name}: evaluate() returned no {metric}")
            score = float(scores[metric])
            self.last_eval, self.last_score, self.last_score_step = scores, score, self.step
            if math.isfinite(score) and (self.best_score is None or score > self.best_score):
                self.best_score, self.best_step, self.best_eval = score, self.step, scores
                with preserved_rng():
                    self._writing(lambda: task.on_new_best(self.out, self.step, scores), self.out / BEST)
            self.metrics.write({"step": self.step, "epoch": round(task.epoch_at(self.step), 4), **scores,
                                f"best_{metric}": self.best_score, "best_step": self.best_step})
        self.runtime.barrier()
        return time.perf_counter() - t0

    def _measure_start(self, task: Task) -> None:
        """Score the starting encoder before the first step (rank 0, RNGs restored, outside the training
        clock), as ``eval.start`` asks: kept in the checkpoint, so a resumed run never measures it again."""
        cfg = self.cfg
        mode = getattr(cfg.eval, "start", "all")
        if mode == "none" or not (cfg.eval.at_end or cfg.eval.eval_steps):
            return
        t0 = time.perf_counter()
        if self.runtime.main:
            with preserved_rng():
                scores, other = task.start_scores(selection_only=mode == "selection")
            self.start = {"scores": dict(scores), "other": {k: dict(v) for k, v in other.items()},
                          "mode": mode, "seconds": round(time.perf_counter() - t0, 3)}
            metric = task.selection_metric
            shown = scores.get(metric)
            self.runtime.say(f"the starting encoder: {metric} {shown:.2f} ({mode}, "
                             f"{self.start['seconds']:.1f}s)" if isinstance(shown, (int, float)) else
                             f"the starting encoder: {metric} not measured ({mode})")
        self.runtime.barrier()

    def _learned(self, task: Task, final: dict[str, float]) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """``learned`` (end against start on the selection score) and ``chance`` (did the contrastive task
        leave chance over the last tenth of the logged steps) of a finished run."""
        from hardmix.training.learned import chance_check, learned_entry
        from hardmix.training.metrics import read_metrics

        start = self.start or {}
        learned = learned_entry(task.selection_metric, start.get("scores") if self.start else None,
                                final or None, start.get("other") or None)
        try:
            lines = read_metrics(self.out / METRICS) if (self.out / METRICS).is_file() else []
        except (OSError, ValueError):
            lines = []
        return learned, chance_check(lines, task.negatives())

    def _fingerprint(self) -> dict[str, Any]:
        """What determines the result (``results.json``'s ``fingerprint``): the resolved config but where
        and how it ran (:data:`FREE_OF_RESULT`), the training data, the other inputs (model files,
        evaluation sets, as the run started with them) and hardmix's version. Two cells of a comparison
        pair only when theirs agree but for the seed."""
        from hardmix.training.fingerprint import FREE_OF_RESULT, config_digest
        from hardmix.version import __version__

        return {"config": config_digest(plain_config(self.cfg), FREE_OF_RESULT),
                "data": self.data_fingerprint, "inputs": self.inputs_digest, "hardmix": __version__}

    def _writing(self, write: Any, what: Path) -> None:
        """Run a task's write of ``what`` (the best model's export); any failure of it (a full disk, a
        library's own I/O error) stops the run with one line naming the folder, resumable from its last
        checkpoint, never a library's traceback (the exports are atomic: no half folder is left)."""
        try:
            write()
        except (ConfigError, RunError):
            raise
        except Exception as e:  # noqa: BLE001 - e.g. safetensors' SafetensorError on a full disk
            raise RunError(f"writing {what} failed at step {self.step} ({type(e).__name__}: {e}); "
                           f"{self._resume_hint()}") from None

    # ---------------------------------------------------------------------------------- checkpoint
    def _save(self, task: Task) -> None:
        runtime = self.runtime
        mine = {"rng": rng_state(), "task": task.process_state()}
        processes: list[Any] = [None] * runtime.world
        if runtime.world > 1:
            dist.all_gather_object(processes, mine)
        else:
            processes = [mine]
        if runtime.main:
            ckpt.save_checkpoint({
                "step": self.step,
                "total_steps": self.total_steps,
                "world_size": runtime.world,
                "config": plain_config(self.cfg),
                "model": task.model().state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "task_state": task.state_dict(),
                "processes": processes,
                "data": self.data_fingerprint,
                "inputs": self.inputs_digest,
                "engine": {
                    "best_score": self.best_score, "best_step": self.best_step,
                    "last_score": self.last_score, "last_score_step": self.last_score_step,
                    "last_eval": self.last_eval, "best_eval": self.best_eval,
                    "window_loss": self.window_loss,
                    "window_steps": self.window_steps, "wall_seconds": self._training_seconds(),
                    "nonfinite": self.nonfinite, "start": self.start,
                },
            }, self.checkpoint_path, task=task.name, root=self.out)
        runtime.barrier()

    def _restore(self, state: dict[str, Any]) -> None:
        task = self.task
        try:
            load_matching(task.model(), state["model"], str(self.checkpoint_path))
        except ValueError as e:
            raise RunFolderError(f"--resume: {e}") from None
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        task.load_state_dict(state["task_state"])
        mine = state["processes"][self.runtime.rank]
        set_rng_state(mine["rng"])
        task.load_process_state(mine["task"])
        self.step = int(state["step"])
        kept: dict[str, Any] = state["engine"]
        self.best_score, self.best_step = kept["best_score"], kept["best_step"]
        self.last_score, self.last_score_step, self.last_eval = kept["last_score"], kept["last_score_step"], \
            kept["last_eval"]
        self.best_eval = kept["best_eval"]
        self.window_loss, self.window_steps = float(kept["window_loss"]), int(kept["window_steps"])
        self.wall_seconds, self.nonfinite = float(kept["wall_seconds"]), int(kept["nonfinite"])
        self.start = kept.get("start")  # a checkpoint of an older hardmix holds none: "start not measured"

    # ---------------------------------------------------------------------------------------- end
    def _end(self, task: Task, interrupted: str | None) -> dict[str, Any]:
        cfg, runtime = self.cfg, self.runtime
        finished = interrupted is None and self.step >= self.total_steps
        final: dict[str, float] = {}
        if finished:
            if cfg.eval.at_end and self.last_score_step != self.step:
                self._evaluate(task)
            if runtime.main:
                with preserved_rng():
                    self._writing(lambda: task.finish(self.out, selected=self.best_step is not None),
                                  self.out / BEST)
                    if task.keeps_best:
                        evaluated = self.best_eval
                    else:
                        evaluated = self.last_eval if self.last_score_step == self.step else None
                    final = task.final_scores(self.out, evaluated)
            runtime.barrier()
        late = self.signals.received if interrupted is None else None
        if late is not None and finished:  # during the final evaluation: resumed, it evaluates again
            finished, interrupted = False, late
        if interrupted is None or late is not None:
            self._save(task)
        learned, chance = self._learned(task, final) if finished and runtime.main else (None, None)
        start = self.start or {}
        record = results_record(
            task=task.name, selection_metric=task.selection_metric, best_score=self.best_score,
            best_step=self.best_step, last_score=self.last_score, last_score_step=self.last_score_step,
            final_scores=final, steps=self.step, total_steps=self.total_steps, finished=finished,
            interrupted=interrupted, wall_seconds=round(self.wall_seconds, 3),
            samples_per_second=round(sps, 2) if (sps := getattr(self, "samples_per_second", None)) else None,
            seed=cfg.train.seed, precision=runtime.precision,
            strategies=plain_config(cfg)["loss"]["strategies"], world_size=runtime.world,
            task_info=task.info(), run_dir=str(self.out),
            fingerprint=self._fingerprint(),
            start_scores=start.get("scores") if self.start else None,
            start_scores_other=start.get("other") or {}, start_seconds=start.get("seconds"),
            learned=learned, chance=chance,
        )
        if runtime.main:
            write_results(record, self.out)
        if interrupted is not None:
            runtime.say(f"stopped by {interrupted} after step {self.step}; {self._resume_hint()}")
        elif finished and self.best_step is not None and self.last_score is not None \
                and self.best_score is not None and self.best_step < 0.5 * self.step \
                and self.last_score < self.best_score - 1.0:
            runtime.say(f"the best {task.selection_metric} ({self.best_score:.2f}) was at step "
                        f"{self.best_step}, long before the last step {self.step} ({self.last_score:.2f}); "
                        f"the selected model is the one of step {self.best_step}")
        if finished and runtime.main:
            from hardmix.training.learned import warnings

            for line in warnings(record):
                runtime.say(f"warning: {line}")
        return record


__all__ = ["LEGACY_CHECKPOINTS", "preserved_rng", "run_training", "saved_precision"]
