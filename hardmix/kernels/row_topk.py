"""The exact n largest entries of each row, in ascending column order, quickly on CPU; MoCHi's selection of
each query's hardest negatives.

``torch.topk`` on CPU runs ``std::nth_element`` over (value, index) pairs, row by row. NumPy's
``partition`` (an introselect on the values alone, SIMD-accelerated in NumPy 2) finds each row's n-th
largest value much faster; the entries at or above it are then the row's top n, found with one compare
and one ``flatnonzero``. Only rows with ties at their n-th value (or NaN) need ``argpartition``. NumPy
releases the GIL in these calls, so blocks of rows run on as many threads as torch's intra-op pool.

The measured speed-up over ``topk`` is in docs/performance.md.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

_MIN_ROWS_PER_THREAD = 32
_pools: dict[int, tuple[int, ThreadPoolExecutor]] = {}  # by process id (threads do not survive a fork)
_pools_lock = threading.Lock()


def row_topk_indices(values: Tensor, n: int) -> Tensor:
    """(B, n) int64 column indices of the ``n`` largest entries of each row of ``values`` (B, K).

    The same set per row as ``values.topk(n, dim=1).indices`` (ties at the n-th value broken arbitrarily;
    NaN counts as the largest value, as in ``topk``), in ascending column order: the order is part of
    the contract, because MoCHi's draws index positions in this list (its plain path sorts ``topk``'s
    indices the same way). fp32 and fp64 CPU tensors go through NumPy (see the module docstring);
    everything else through ``topk``. No gradient.

    Args:
        values: (B, K) tensor.
        n: how many per row, 0 <= n <= K.

    Example:
        >>> values = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.8, 0.2, 0.6, 0.4]])
        >>> row_topk_indices(values, 2).sort(dim=1).values
        tensor([[1, 3],
                [0, 2]])
    """
    if values.dim() != 2:
        raise ValueError(f"values: a (B, K) tensor expected, got shape {tuple(values.shape)}")
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= values.shape[1]:
        raise ValueError(f"n: must be an integer in [0, K = {values.shape[1]}], got {n!r}")
    values = values.detach()
    numpy_ok = values.device.type == "cpu" and values.dtype in (torch.float32, torch.float64)
    if not numpy_ok or n == 0 or values.numel() == 0:
        return values.topk(n, dim=1, sorted=False).indices.sort(dim=1).values
    array = values.contiguous().numpy()
    batch = array.shape[0]
    threads = min(torch.get_num_threads(), batch // _MIN_ROWS_PER_THREAD)
    if threads <= 1:
        return torch.from_numpy(_numpy_row_topk(array, n))
    hard = np.empty((batch, n), dtype=np.int64)
    bounds = np.linspace(0, batch, threads + 1).astype(int)

    def block(i: int) -> None:
        hard[bounds[i] : bounds[i + 1]] = _numpy_row_topk(array[bounds[i] : bounds[i + 1]], n)

    list(_pool(threads).map(block, range(threads)))  # list(): re-raises a worker's exception here
    return torch.from_numpy(hard)


def _pool(threads: int) -> ThreadPoolExecutor:
    key = os.getpid()
    with _pools_lock:
        size, pool = _pools.get(key, (0, None))
        if pool is None or size < threads:
            pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="hardmix-topk")
            _pools[key] = (threads, pool)
        return pool


def _numpy_row_topk(array: np.ndarray, n: int) -> np.ndarray:
    """(B, n) column indices of each row's n largest entries of ``array`` (B, K), 1 <= n <= K."""
    batch, k = array.shape
    kth = k - n
    threshold = np.partition(array, kth, axis=1)[:, kth, None]  # (B, 1): each row's n-th largest value
    above = array >= threshold
    flat = np.flatnonzero(above)  # row-major positions: each row's columns ascending
    offsets = np.arange(0, batch * k, k, dtype=np.int64)[:, None]
    if flat.size == batch * n:
        hard = flat.reshape(batch, n) - offsets
        # Every row holds exactly n entries >= its threshold unless some block strays into a neighbour
        # row (one row with more, another with fewer): then a column falls outside [0, K).
        if hard.min() >= 0 and hard.max() < k:
            return hard
    # Rows with ties at their n-th value (more than n entries >= it) or NaN (>= NaN is false: fewer).
    counts = np.count_nonzero(above, axis=1)
    starts = np.cumsum(counts) - counts
    exact = counts == n
    hard = np.empty((batch, n), dtype=np.int64)
    hard[exact] = flat[starts[exact, None] + np.arange(n)] - offsets[exact]
    if not exact.all():
        hard[~exact] = np.sort(np.argpartition(array[~exact], kth, axis=1)[:, kth:], axis=1)
    return hard


def hardest_negatives(similarities: Tensor, n_hard: int, valid: Tensor | None = None) -> Tensor:
    """Indices (B, n_hard) of the ``n_hard`` most similar valid negatives of each row, chosen in fp32.

    Exact: the same set as ``topk`` (ties at the N-th value broken arbitrarily), in ascending column
    order, through :func:`row_topk_indices` (NumPy's partition on CPU, ``topk`` elsewhere): the fast
    counterpart of :func:`hardmix.strategies.mochi.hardest`.

    Args:
        similarities: (B, K) anchor-negative similarities (any positive scale; under autocast pass the
            fp32 values: bf16 ties change the selection).
        n_hard: N, how many to keep per row.
        valid: optional (B, K) bool mask of the allowed negatives.

    Example:
        >>> sims = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.8, 0.2, 0.6, 0.4]])
        >>> hardest_negatives(sims, 2)
        tensor([[1, 3],
                [0, 2]])
    """
    sims = similarities.detach().float()
    if valid is not None:
        sims = sims.masked_fill(~valid, float("-inf"))
    return row_topk_indices(sims, n_hard)
