"""The entries of a key queue that a query may not use, sparsely: the empty slots and the query's own
earlier keys, found by one sort of the queue's ids instead of a (B, K) comparison. The plain path
(``ContrastiveLoss(impl="plain")``) builds the (B, K) mask instead."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from hardmix.utils.counting import count_true


@dataclass(frozen=True)
class QueueExclusions:
    """The queue entries a query may not use, sparsely (see :func:`excluded_queue_entries`)."""

    empty: Tensor  # (K,) bool: slots with id -1, excluded for every query
    rows: Tensor  # (M,) query of each non-empty entry that carries that query's own id
    cols: Tensor  # (M,) the entry
    counts: Tensor  # (B,) valid negatives per query: K - #empty - #own


def excluded_queue_entries(query_ids: Tensor | None, queue_ids: Tensor, batch: int) -> QueueExclusions:
    """The exclusions of ``ContrastiveLoss.queue`` without a (B, K) pass: one sort of the K ids and a
    binary search per query (a queue holds each sample a few times at most).

    Args:
        query_ids: optional (B,) sample ids of the queries (-1 matches only empty slots).
        queue_ids: (K,) sample ids of the queue entries; -1 marks an empty slot.
        batch: B.

    Returns:
        The empty slots, the (query, entry) pairs with the query's own id, and the valid count per query.

    Example:
        >>> ex = excluded_queue_entries(torch.tensor([3, 5]), torch.tensor([5, -1, 3, 3]), batch=2)
        >>> ex.rows.tolist(), ex.cols.tolist(), ex.counts.tolist()
        ([0, 0, 1], [2, 3, 0], [1, 2])
    """
    device = queue_ids.device
    empty = queue_ids == -1
    n_filled = queue_ids.numel() - int(count_true(empty))
    none = torch.empty(0, dtype=torch.long, device=device)
    if query_ids is None:
        return QueueExclusions(empty, none, none, torch.full((batch,), n_filled, device=device))
    query_ids = query_ids.to(device=device, dtype=queue_ids.dtype)
    sorted_ids, order = queue_ids.sort()
    low = torch.searchsorted(sorted_ids, query_ids)
    own = torch.searchsorted(sorted_ids, query_ids, right=True).sub_(low)
    own.masked_fill_(query_ids == -1, 0)  # an id of -1 matches only empty slots, excluded already
    rows = torch.repeat_interleave(torch.arange(batch, device=device), own)
    first = torch.repeat_interleave(low, own)
    within = torch.arange(rows.numel(), device=device) - torch.repeat_interleave(own.cumsum(0) - own, own)
    return QueueExclusions(empty, rows, order[first + within], n_filled - own)
