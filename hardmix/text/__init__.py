"""hardmix.text: sentence encoders trained with SimCSE / MixCSE (and any core strategy) on transformers.

:func:`encode` embeds sentences; :mod:`hardmix.text.losses` holds ``MixCSELoss`` and ``HardMixLoss``,
sentence-transformers loss modules (also importable from here, lazily).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def encode(
    model_or_path: Any,
    sentences: Sequence[str],
    batch_size: int = 64,
    pooling: str | None = None,
    max_length: int | None = None,
) -> Any:
    """Embed sentences: (n, D) float32 array. See :func:`hardmix.text.encoding.encode` (imported lazily,
    so ``import hardmix.text`` stays light)."""
    from hardmix.text.encoding import encode as _encode

    return _encode(model_or_path, sentences, batch_size=batch_size, pooling=pooling, max_length=max_length)


def __getattr__(name: str) -> Any:
    if name in ("MixCSELoss", "HardMixLoss"):
        from hardmix.text import losses

        return getattr(losses, name)
    raise AttributeError(f"module 'hardmix.text' has no attribute {name!r}")


__all__ = ["HardMixLoss", "MixCSELoss", "encode"]
