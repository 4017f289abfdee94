"""hardmix.vision: image encoders trained with MoCo-v2 / MoCHi (and any core strategy), k-NN and linear
evaluation.

Modules (imported on demand; ``import hardmix.vision`` loads neither torchvision nor timm):

- :mod:`~hardmix.vision.config`: ``VisionConfig`` (YAML sections ``data``, ``augment``, ``model``, ``loss``,
  ``train``, ``eval``, ``log``; the shared keys are the engine's, :mod:`hardmix.training.config`).
- :mod:`~hardmix.vision.task`: ``VisionTask``, MoCo-v2 as a task of the training engine
  (``hardmix train vision``, ``hardmix.train("vision", ...)``).
- :mod:`~hardmix.vision.moco`: ``MoCo`` (query and momentum key encoders around the core's queue and loss).
- :mod:`~hardmix.vision.backbones`: ``build_backbone`` (torchvision ResNet-18/50, narrow ResNets, timm).
- :mod:`~hardmix.vision.augment`: ``TensorAugment`` (MoCo-v2's augmentations, batched) and ``pil_transform``.
- :mod:`~hardmix.vision.data` and :mod:`~hardmix.vision.pipeline`: image folders, class-balanced subsets,
  the uint8 tensor cache, and the per-step batches of two views.
- :mod:`~hardmix.vision.evaluation`, :mod:`~hardmix.vision.knn`, :mod:`~hardmix.vision.linear_probe`:
  ``backbone_and_config``, ``LabelledImages``, ``knn_predict``, ``linear_probe`` and the
  ``hardmix eval knn`` / ``hardmix eval linear`` CLIs.
- :mod:`~hardmix.vision.augmented_features`: ``AugmentedFeatures``, the linear probe's per-epoch crops and
  flips through the frozen backbone (``hardmix eval linear --augment``).
- :mod:`~hardmix.vision.export`: :func:`load_backbone` (also ``hardmix.vision.load_backbone``: a run's
  trained backbone as a module, images to pooled features) and ``export_backbone`` (``hardmix export
  vision RUN OUT``: a torchvision/timm state dict file).
- :mod:`~hardmix.vision.encoding`: :func:`encode` (also ``hardmix.vision.encode``: a folder of images to
  an (N, D) array and its paths, as the k-NN evaluation sees them) and ``hardmix encode MODEL --images
  FOLDER -o OUT.npy``.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("load_backbone", "export_backbone"):
        from hardmix.vision import export

        return getattr(export, name)
    if name == "encode":
        from hardmix.vision.encoding import encode

        return encode
    raise AttributeError(f"module 'hardmix.vision' has no attribute {name!r}")


__all__ = ["encode", "export_backbone", "load_backbone"]
