"""Sentence poolings of a transformer's token states: the one pooling implementation of hardmix.text.

Names follow SimCSE (Gao et al., EMNLP 2021, ``models.py`` / ``evaluation.py``); averages are over the
non-padding tokens ([CLS] and [SEP] included, as SimCSE and sentence-transformers' mean pooling do):

- ``cls``: the last layer's [CLS] vector. The *trainer* puts SimCSE's MLP (dense + tanh) on top of it
  during training (:mod:`hardmix.text.model`); the pooling itself, and every export, is the bare vector.
- ``cls_before_pooler``: the last layer's [CLS] vector (the same tensor as ``cls`` here).
- ``avg``: the average of the last layer.
- ``avg_first_last``: the average of ``(hidden_states[1] + hidden_states[-1]) / 2``: the first Transformer
  layer's output (``hidden_states[0]`` is the embedding layer) and the last layer, as SimCSE's
  ``evaluation.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

POOLINGS: tuple[str, ...] = ("cls", "cls_before_pooler", "avg", "avg_first_last")


def check_pooling(pooling: str) -> str:
    """Return ``pooling`` if it is known, else raise ValueError listing :data:`POOLINGS`."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling: unknown pooling {pooling!r}; expected one of {', '.join(POOLINGS)}")
    return pooling


def needs_hidden_states(pooling: str) -> bool:
    """Whether ``pooling`` reads the intermediate layers (the forward needs ``output_hidden_states``)."""
    return check_pooling(pooling) == "avg_first_last"


def pool(
    last_hidden_state: Tensor,
    attention_mask: Tensor,
    pooling: str,
    hidden_states: Sequence[Tensor] | None = None,
) -> Tensor:
    """Pool token states to one vector per sentence.

    Args:
        last_hidden_state: (B, T, D) the last layer's token states.
        attention_mask: (B, T) 1 for real tokens, 0 for padding.
        pooling: one of :data:`POOLINGS`.
        hidden_states: the embedding output and every layer's output, each (B, T, D) (a transformers
            ``hidden_states`` tuple); needed by ``avg_first_last`` only.

    Returns:
        (B, D) sentence vectors, in the dtype of the token states.

    Example:
        >>> import torch
        >>> h = torch.arange(12.0).view(1, 3, 4)
        >>> pool(h, torch.tensor([[1, 1, 0]]), "avg").tolist()
        [[2.0, 3.0, 4.0, 5.0]]
    """
    check_pooling(pooling)
    if pooling in ("cls", "cls_before_pooler"):
        return last_hidden_state[:, 0]
    h = last_hidden_state
    if pooling == "avg_first_last":
        if hidden_states is None or len(hidden_states) < 2:
            raise ValueError("pooling: avg_first_last needs the hidden states of every layer "
                             "(call the model with output_hidden_states=True)")
        h = (hidden_states[1] + hidden_states[-1]) / 2.0
    m = attention_mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1)
