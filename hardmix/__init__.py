"""hardmix: contrastive representation learning with feature-space hard-negative mixing.

The core (this package) is modality-agnostic: it knows unit vectors, logits and queues, never BERT or
ResNets. :func:`train` runs any registered task through the training engine (:mod:`hardmix.training`).
The trainers live in :mod:`hardmix.text` (SimCSE / MixCSE on transformers) and
:mod:`hardmix.vision` (MoCo-v2 / MoCHi on torchvision and timm).
"""

from typing import Any

from hardmix.version import __version__


def train(
    task: Any, config: Any = None, overrides: Any = None, output: Any = None, resume: bool = False
) -> Any:
    """Train a registered task (``"text"``, ``"vision"``) and return its results record: see
    :func:`hardmix.training.api.train` (imported on first use, so ``import hardmix`` stays light)."""
    from hardmix.training.api import train as _train

    return _train(task, config, overrides=overrides, output=output, resume=resume)


__all__ = ["__version__", "train"]
