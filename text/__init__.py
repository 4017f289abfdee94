"""hardmix.text: sentence encoders trained with SimCSE / MixCSE (and any core strategy) on transformers."""

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


__all__ = ["encode"]
