"""The names vulture reports in ``hardmix/`` (with ``hardmix/text/`` and ``hardmix/vision/``) that are
used where it cannot see: read with ``python -m vulture hardmix tests/vulture_whitelist.py
--min-confidence 60`` (``docs/architecture.md``, "Dead-code check"). Each call marks names as used, one
kind each; importing it (pytest collects it) does nothing.
"""

from __future__ import annotations


class _Names:
    """Any attribute and any call give this object back: importing the file (pytest collects it) runs."""

    def __getattr__(self, name: str) -> _Names:
        return self

    def __call__(self, *names: object) -> _Names:
        return self


_ = _Names()

# Parameters a caller's signature requires: signal handlers (signum, frame), __exit__ (exc_type, exc, tb),
# transformers' TrainerCallback.on_step_begin(args, state, control, **kwargs).
_.used(_.frame, _.exc_type, _.exc, _.control)

# Hooks a library calls by name: transformers' TrainerCallback.on_step_begin; sentence-transformers'
# get_config_dict and citation (model cards, saving); PEP 562's module __getattr__ (the lazy hardmix.text
# and hardmix.vision facades); torch's BatchNorm buffer num_batches_tracked (state_dict).
_.used(_.on_step_begin, _.get_config_dict, _.citation, _.__getattr__, _.num_batches_tracked)

# torchvision's CIFAR10 reads these class attributes of the subclass in hardmix/datasets/prepare_images.py.
_.used(_.base_folder, _.train_list, _.test_list)

# Subcommands named by a "module:function" string (hardmix.training.lazy_command in hardmix/text/cli.py and
# hardmix/vision/cli.py; hardmix.cli's for hardmix/commands/config.py).
_.used(_.cli_main, _.knn_cli_main, _.linear_cli_main, _.cmd_export, _.cmd_schema, _.cmd_show)

# Dataclass fields read by name: the comparison's statistics (report tables, summary.json, by
# dataclasses.asdict) and the compare spec's YAML key.
_.used(_.ci_low, _.ci_high, _.effect_size, _.min_detectable_difference, _.p_holm, _.p_exact_min,
        _.ci_simultaneous, _.ci_simultaneous_method,
        _.equal_budget)

# Public API of hardmix.text.losses.HardMixLoss for users (documented in its docstring): the core's
# LossOutput of the last call, and the TrainerCallback that counts optimizer steps.
_.used(_.last_output, _.callback)
