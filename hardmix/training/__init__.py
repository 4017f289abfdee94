"""The training engine every task (modality) shares: one run folder, one resume rule, one vocabulary.

A task (:class:`Task`) says how to build its model and data, one step's loss and how to evaluate, and its
:class:`ConfigFacts` what a config means before anything is built; the engine (:func:`run_training`) owns
the rest. :func:`train` runs a registered task from Python.
"""

from hardmix.training.api import load_config_for, train
from hardmix.training.config import EvalSection, LogSection, LossSection, TrainSection
from hardmix.training.engine import preserved_rng, run_training
from hardmix.training.registry import available_tasks, load_task
from hardmix.training.results import read_results
from hardmix.training.run_folder import RunFolderError
from hardmix.training.runtime import Runtime
from hardmix.training.task import ConfigFacts, StepResult, Task

__all__ = [
    "ConfigFacts",
    "EvalSection",
    "LogSection",
    "LossSection",
    "RunFolderError",
    "Runtime",
    "StepResult",
    "Task",
    "TrainSection",
    "available_tasks",
    "load_config_for",
    "load_task",
    "preserved_rng",
    "read_results",
    "run_training",
    "train",
]
