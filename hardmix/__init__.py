"""hardmix: contrastive representation learning with feature-space hard-negative mixing.

The core (this package) is modality-agnostic: it knows unit vectors, logits and queues, never BERT or
ResNets. The trainers live in :mod:`hardmix.text` (SimCSE / MixCSE on transformers) and
:mod:`hardmix.vision` (MoCo-v2 / MoCHi on torchvision and timm).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
