"""The training loop every task shares (:func:`run_training`).

Per step: the task's forward and loss; a non-finite loss is skipped or stops the run
(``train.max_nonfinite_steps``); backward (scaled in fp16), the task's pre-update hook (clipping), the
optimizer and scheduler; the task's post-update hook (queues). Every ``log.log_steps`` a line of
``metrics.jsonl`` (the window's mean loss, lr, wall time, the core's diagnostics), every
``eval.eval_steps`` the selection score (RNGs restored afterwards, so evaluating never changes the run),
every ``train.save_steps`` an atomic checkpoint. SIGTERM or SIGUSR1 checkpoints at the end of the step and
stops. A resumed run restores the model, optimizer, scheduler, scaler, the task's state (queues, random
streams), every process's RNGs, the step and the engine's own state (:class:`EngineState`), so on the CPU
its losses equal an uninterrupted run's bit for bit. The refusals before any work are
:mod:`hardmix.training.resume_checks`.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from tqdm.auto import tqdm

from hardmix.training import checkpoint as ckpt
from hardmix.training import resume_checks as checks
from hardmix.training import run_folder as folder
from hardmix.training.checkpoint import load_matching
from hardmix.training.config import plain_config
from hardmix.training.engine_state import EngineState, TrainingClock
from hardmix.training.fingerprint import result_fingerprint
from hardmix.training.learned import learned_of_run, measure_start, warnings
from hardmix.training.metrics import MetricsLog
from hardmix.training.optimization import Optimization
from hardmix.training.results import results_record, write_results
from hardmix.training.resume_checks import LEGACY_CHECKPOINTS, saved_precision
from hardmix.training.runtime import Runtime, end_runtime, start_runtime
from hardmix.training.shared_start import shared_or_measured, shared_start_key
from hardmix.training.signals import PreemptionSignals
from hardmix.training.task import StepResult, Task
from hardmix.utils.confine import makedirs, write_text
from hardmix.utils.errors import RunInterrupted
from hardmix.utils.offline import libraries_offline
from hardmix.utils.rng import preserved_rng, rng_state, set_rng_state


def run_training(task_class: type[Task], cfg: Any, output: str | Path | None = None,
                 resume: bool = False, start_cache: str | Path | None = None) -> dict[str, Any]:
    """Train ``task_class`` with the validated ``cfg``; returns the results record (``results.json``).

    Args:
        task_class: the modality's :class:`~hardmix.training.task.Task`.
        cfg: its validated config (``task_class.config_class``).
        output: the run folder (default ``cfg.output``).
        resume: continue the run in ``output`` from its ``checkpoint.pt``.
        start_cache: a folder shared by runs that may start from the same encoder: its start is measured
            once among them (:mod:`hardmix.training.shared_start`).

    Raises:
        ConfigError, RunFolderError, CheckpointError, FileNotFoundError, ValueError: before training, for a
            bad setup (the message says what to change). RunError: the loss diverged or the folder is in use.
    """
    out = Path(output or cfg.output)
    runtime = start_runtime(cfg.train.device, cfg.train.precision, cfg.train.threads, cfg.train.seed,
                            saved_precision(out) if resume else None, task_class.name,
                            task_class.about(cfg).auto_bf16())
    cfg.train.precision = runtime.precision  # config.yaml and results.json record the precision used
    try:
        with libraries_offline():  # HARDMIX_OFFLINE / --no-download reach transformers and the Hub client
            return _Run(task_class, cfg, out, resume, runtime,
                        Path(start_cache) if start_cache is not None else None).run()
    finally:
        end_runtime(runtime)


class _Run:
    """One run: its config, folder and runtime, the step, the engine's checkpointed :class:`EngineState`,
    and this process's training clock (``wall_seconds`` counts training only, never evaluations)."""

    def __init__(self, task_class: type[Task], cfg: Any, out: Path, resume: bool, runtime: Runtime,
                 start_cache: Path | None = None) -> None:
        self.cfg, self.out, self.resume, self.runtime = cfg, out, resume, runtime
        self.start_cache = start_cache
        self.task_class = task_class
        self.checkpoint_path = out / folder.CHECKPOINT
        self.saved: dict[str, Any] | None = None  # the checkpoint a resume continues from, until restored
        self.step = 0
        self.state = EngineState()
        self.clock = TrainingClock()  # this process's training seconds not yet in the state's wall_seconds

    # ------------------------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        self.saved, done = checks.start_point(self.task_class, self.cfg, self.out, self.resume,
                                              self.runtime.world, self.runtime.say)
        if done is not None:  # a finished run is final: never trained again
            return done
        task = self.task = self.task_class(self.cfg, self.runtime)
        task.check()
        checks.check_not_inside_inputs(task.facts.input_folders(), self.out)
        lock = folder.RunLock(self.out)
        with PreemptionSignals() as self.signals:  # from here on, a signal stops the run in a resumable state
            if self.runtime.main:
                lock.acquire()
                if note := folder.stale_temporaries_removed(self.out):  # a killed run's partial checkpoint
                    self.runtime.say(note)
            try:
                return self._train(task)
            except KeyboardInterrupt:  # a second Ctrl-C: the folder keeps its last checkpoint
                raise RunInterrupted("SIGINT", f"stopped by a second SIGINT at step {self.step}; "
                                     f"{self._resume_hint()}") from None
            finally:
                lock.release()

    def _train(self, task: Task) -> dict[str, Any]:
        cfg, runtime, saved = self.cfg, self.runtime, self.saved
        task.build()
        if task.loss_fn is not None:  # the strategies' schedules given in epochs, now in steps
            task.loss_fn.resolve_epochs(task.steps_for(1))
        data = task.facts.data_fingerprint()  # and what the build counted of the data
        self.data_fingerprint = None if data is None else {**task.data_counts(), **data}
        self.inputs_digest = task.facts.input_digest()  # at the start: what the model was loaded from
        total = task.steps_for(cfg.train.epochs)
        self.total_steps = min(total, cfg.train.max_steps) if cfg.train.max_steps else total
        if saved is not None:
            checks.check_same_run(saved, self.data_fingerprint, self.inputs_digest, self.total_steps)
        if task.loss_fn is not None:
            task.loss_fn.check_schedules(self.total_steps)
        self.stop_at = min(self.total_steps, cfg.train.stop_after_steps or self.total_steps)
        optimizer, scheduler = task.configure_optimizers(self.total_steps)
        self.opt = Optimization(optimizer, scheduler, runtime.grad_scaler(), runtime.world)
        if runtime.main:
            makedirs(self.out, self.out)
            write_text(yaml.safe_dump(plain_config(cfg), sort_keys=False), self.out / folder.CONFIG, self.out)
        self.metrics = MetricsLog(
            self.out / folder.METRICS, runtime.main, keep_until=saved["step"] if saved else None,
            tensorboard_dir=self.out / folder.TENSORBOARD if cfg.log.tensorboard else None, root=self.out)
        if saved is not None:
            self._restore(saved)
            self.saved = None
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
        """Step until ``stop_at``, logging, evaluating and checkpointing on their steps; returns the signal
        that stopped the run (checkpointed at the end of its step), or None."""
        cfg, runtime, signals = self.cfg, self.runtime, self.signals
        bar = tqdm(total=self.total_steps, initial=self.step, desc=f"train {task.name}", unit="step",
                   disable=not (runtime.main and cfg.log.progress), file=sys.stderr, dynamic_ncols=True)
        self.clock.start()
        samples = 0
        stopped = runtime.any(signals.received is not None)  # a signal while building: no step is taken
        try:
            for batch in () if stopped else task.batches(self.step, self.stop_at):
                log_now = (self.step + 1) % cfg.log.log_steps == 0 or self.step + 1 == self.stop_at
                result, loss, diagnostics = self._step(task, batch, log_now)
                samples += result.samples
                if loss is not None and log_now:
                    self._log(task, diagnostics)
                if cfg.eval.eval_steps and self.step % cfg.eval.eval_steps == 0:
                    self.clock.add_eval(self._evaluate(task))
                if cfg.train.save_steps and self.step % cfg.train.save_steps == 0 \
                        and self.step < self.stop_at:
                    self._save(task)
                bar.update(1)
                bar.set_postfix_str(self._postfix(loss), refresh=False)
                if runtime.any(signals.received is not None):
                    stopped = True
                    break
        finally:
            bar.close()
        self.state.wall_seconds += self.clock.stop(samples)
        if not stopped:
            return None
        self._save(task)
        return signals.received or "SIGTERM"

    def _step(self, task: Task, batch: Any, log_now: bool) -> tuple[StepResult, float | None, dict[str, Any]]:
        """One optimizer step (or a skipped non-finite one): the result, the mean loss, and on logging
        steps the diagnostics (taken before the task's post-update hook, so they see what the step saw)."""
        result, s = task.train_step(batch, self.step), self.state
        self._lr = self.opt.lr
        value = self.opt.mean_loss(result.loss)
        if not math.isfinite(value):
            s.nonfinite += 1
            self.opt.skip(value, self.step + 1, s.nonfinite, self.cfg.train.max_nonfinite_steps,
                          self.checkpoint_path, self.runtime.say)
            self.step += 1
            return result, None, {}
        self.opt.update(result.loss, task.before_optimizer_step)
        diagnostics = self._diagnostics(task, result) if log_now and self.cfg.log.diagnostics else {}
        task.after_optimizer_step(result, self.step)
        self.step += 1
        s.window_loss, s.window_steps = s.window_loss + value, s.window_steps + 1
        return result, value, diagnostics

    def _diagnostics(self, task: Task, result: StepResult) -> dict[str, Any]:
        """The core's loss statistics and the task's diagnostics of the step (every RNG restored after)."""
        out = dict(result.stats() if callable(result.stats) else result.stats or {})
        out.pop("loss", None)
        with preserved_rng():
            out.update(task.diagnostics(result, self.step))
        return out

    def _log(self, task: Task, diagnostics: dict[str, Any]) -> None:
        s = self.state
        self.metrics.write({"step": self.step, "epoch": round(task.epoch_at(self.step), 4),
                            "loss": s.window_loss / max(1, s.window_steps), "lr": self._lr,
                            "wall_seconds": round(self._training_seconds(), 3), **diagnostics})
        s.window_loss, s.window_steps = 0.0, 0

    def _evaluate(self, task: Task) -> float:
        """Score the current model (rank 0, RNGs restored); returns the seconds it took."""
        t0, s = time.perf_counter(), self.state
        if self.runtime.main:
            metric = task.selection_metric
            with preserved_rng():
                scores = task.evaluate()
            if metric not in scores:
                raise RuntimeError(f"task {task.name}: evaluate() returned no {metric}")
            if s.scored(scores, metric, self.step):
                with preserved_rng():
                    self._writing(lambda: task.on_new_best(self.out, self.step, scores))
            self.metrics.write({"step": self.step, "epoch": round(task.epoch_at(self.step), 4), **scores,
                                f"best_{metric}": s.best_score, "best_step": s.best_step})
        self.runtime.barrier()
        return time.perf_counter() - t0

    def _measure_start(self, task: Task) -> None:
        """Score the starting encoder before the first step (rank 0, outside the training clock), as
        ``eval.start`` asks: kept in the checkpoint, so a resumed run never measures it again."""
        mode = getattr(self.cfg.eval, "start", "all")
        if mode != "none" and (self.cfg.eval.at_end or self.cfg.eval.eval_steps):
            if self.runtime.main:
                def measure() -> dict[str, Any]:
                    return measure_start(task, mode, self.runtime.say)

                if self.start_cache is None:
                    self.state.start = measure()
                else:
                    key = shared_start_key(plain_config(self.cfg), self.cfg.train.seed
                                           if task.start_depends_on_seed else None, self.inputs_digest,
                                           self.data_fingerprint)
                    self.state.start = shared_or_measured(self.start_cache, key, measure,
                                                          task.selection_metric, self.runtime.say)
            self.runtime.barrier()

    def _writing(self, write: Any) -> None:
        """Run a task's write of the best model's export: a failure stops the run in one line."""
        folder.task_write(write, self.out / folder.BEST, f"at step {self.step}", self._resume_hint)

    def _resume_hint(self) -> str:
        return checks.resume_hint(self.task_class.name, self.out)

    def _training_seconds(self) -> float:
        """Training seconds over every process so far, this one included."""
        return self.state.wall_seconds + self.clock.running()

    def _postfix(self, loss: float | None) -> str:
        s = self.state
        parts = [f"loss={loss:.4f}" if loss is not None else "loss=skipped",
                 f"lr={self.opt.lr:.3g}"]
        if s.last_score is not None:
            parts.append(f"{self.task.progress_label}={s.last_score:.2f}")
            if s.best_score is not None:
                parts.append(f"best={s.best_score:.2f}@{s.best_step}")
        return " ".join(parts)

    # ---------------------------------------------------------------------------------- checkpoint
    def _save(self, task: Task) -> None:
        runtime = self.runtime
        streams = {key: stream.get_state() for key, stream in task.random_streams().items()}
        processes = runtime.gather({"rng": rng_state(), "task": streams})
        if runtime.main:
            own = {key: None if part is None else part.state_dict()
                   for key, part in task.checkpointed().items()}
            ckpt.save_checkpoint({
                "step": self.step, "total_steps": self.total_steps, "world_size": runtime.world,
                "config": plain_config(self.cfg), "model": task.model().state_dict(),
                **self.opt.state_dict(), "task_state": own, "processes": processes,
                "data": self.data_fingerprint, "inputs": self.inputs_digest,
                "engine": self.state.to_checkpoint(wall_seconds=self._training_seconds()),
            }, self.checkpoint_path, task=task.name, root=self.out)
        runtime.barrier()

    def _restore(self, saved: dict[str, Any]) -> None:
        task = self.task
        try:
            load_matching(task.model(), saved["model"], str(self.checkpoint_path))
        except ValueError as e:
            raise folder.RunFolderError(f"--resume: {e}") from None
        self.opt.load_state_dict(saved)
        for key, part in task.checkpointed().items():
            if part is not None:
                part.load_state_dict(saved["task_state"][key])
        mine = saved["processes"][self.runtime.rank]
        set_rng_state(mine["rng"])
        for key, stream in task.random_streams().items():
            stream.set_state(mine["task"][key])
        self.step = int(saved["step"])
        self.state = EngineState.from_checkpoint(saved["engine"])

    # ---------------------------------------------------------------------------------------- end
    def _end(self, task: Task, interrupted: str | None) -> dict[str, Any]:
        cfg, runtime, s = self.cfg, self.runtime, self.state
        finished = interrupted is None and self.step >= self.total_steps
        final: dict[str, float] = {}
        if finished:
            if cfg.eval.at_end and s.last_score_step != self.step:
                self._evaluate(task)
            if runtime.main:
                with preserved_rng():
                    self._writing(lambda: task.finish(self.out, selected=s.best_step is not None))
                    at_end = s.last_eval if s.last_score_step == self.step else None
                    final = task.final_scores(self.out, s.best_eval if task.keeps_best else at_end)
            runtime.barrier()
        late = self.signals.received if interrupted is None else None
        if late is not None and finished:  # during the final evaluation: resumed, it evaluates again
            finished, interrupted = False, late
        if interrupted is None or late is not None:
            self._save(task)
        negatives = task.facts.negatives()
        learned, chance = learned_of_run(self.out, task.selection_metric, s.start, final, negatives,
                                         task.facts.held_out_scores()) \
            if finished and runtime.main else (None, None)
        record = results_record(
            task=task.name, selection_metric=task.selection_metric, best_score=s.best_score,
            best_step=s.best_step, last_score=s.last_score, last_score_step=s.last_score_step,
            final_scores=final, steps=self.step, total_steps=self.total_steps, finished=finished,
            interrupted=interrupted, wall_seconds=round(s.wall_seconds, 3),
            samples_per_second=round(sps, 2) if (sps := self.clock.samples_per_second) else None,
            seed=cfg.train.seed, precision=runtime.precision,
            strategies=plain_config(cfg)["loss"]["strategies"], world_size=runtime.world,
            task_info=task.info(), run_dir=str(self.out),
            fingerprint=result_fingerprint(plain_config(cfg), self.data_fingerprint, self.inputs_digest),
            **s.start_entries(), learned=learned, chance=chance,
        )
        if runtime.main:
            write_results(record, self.out)
        if interrupted is not None:
            runtime.say(f"stopped by {interrupted} after step {self.step}; {self._resume_hint()}")
        elif finished and (note := s.late_best(task.selection_metric, self.step)):
            runtime.say(note)
        if finished and runtime.main:
            for line in warnings(record):
                runtime.say(f"warning: {line}")
        return record


__all__ = ["LEGACY_CHECKPOINTS", "EngineState", "preserved_rng", "run_training", "saved_precision"]
