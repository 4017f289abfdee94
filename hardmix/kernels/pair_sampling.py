"""Uniform draws of distinct unordered pairs per row, for MoCHi's pair mixtures (Kalantidis et al. 2020,
Sec. 4.1: s mixtures of two distinct hard negatives).

:func:`sample_distinct_pairs` is the contract: for each row, a uniform s-subset of the n(n-1)/2 pairs
a < b. The sampler below is a fast one (rejection of repeats over the whole batch at once, keys packed in
int32 where they fit); MoCHi's plain and fast paths both consume its draws, so that they mix the same
pairs, and the tests check its distribution.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from hardmix.errors import StrategyArgumentError


def sample_distinct_pairs(
    batch: int,
    n: int,
    n_pairs: int,
    generator: torch.Generator | None = None,
    device: torch.device | None = None,
) -> tuple[Tensor, Tensor]:
    """For each of ``batch`` rows, ``n_pairs`` distinct unordered pairs (a, b), a != b, of range(n).

    Uniform over the n(n-1)/2 pairs, without replacement within a row. Small pair sets are drawn exactly
    by ranking random keys; large ones by drawing with replacement and re-drawing duplicates (rounds
    over the whole batch at once, no loop over rows).

    Returns:
        Two (batch, n_pairs) int64 tensors ``first < second``.

    Example:
        >>> first, second = sample_distinct_pairs(2, 3, 3, torch.Generator().manual_seed(0))
        >>> sorted(zip(first[0].tolist(), second[0].tolist()))  # all 3 pairs of range(3)
        [(0, 1), (0, 2), (1, 2)]
    """
    first, second = draw_distinct_pairs(batch, n, n_pairs, generator, device)
    return first.long(), second.long()


def draw_distinct_pairs(
    batch: int, n: int, n_pairs: int, generator: torch.Generator | None, device: torch.device | None
) -> tuple[Tensor, Tensor]:
    """:func:`sample_distinct_pairs`, in int32 where row * n^2 + code fits (else int64)."""
    total = n * (n - 1) // 2
    if n_pairs > total:
        raise StrategyArgumentError(
            "n_pair", f"{n_pairs} distinct pairs requested from {n} items ({total} exist)"
        )
    if n_pairs == 0:
        empty = torch.empty(batch, 0, dtype=torch.long, device=device)
        return empty, empty.clone()
    if total <= 4 * n_pairs or batch * total <= 1 << 20:
        rows, cols = torch.triu_indices(n, n, offset=1, device=device)
        keys = torch.rand(batch, total, generator=generator, device=device)
        pick = keys.topk(n_pairs, dim=1, sorted=False).indices
        return rows[pick], cols[pick]
    # Integers in int32 where the keys below fit (row * n^2 + code < 2^31): int64 arithmetic is slower
    # on CPU (docs/performance.md).
    stride = n * n  # codes first * n + second are < n^2: rows never overlap
    key_dtype = torch.int32 if batch * stride < 2**31 else torch.long
    a = torch.randint(n, (batch, n_pairs), generator=generator, device=device, dtype=key_dtype)
    b = torch.randint(n - 1, (batch, n_pairs), generator=generator, device=device, dtype=key_dtype)
    b.add_(b >= a)  # uniform over the others
    first, second = torch.minimum(a, b), torch.maximum(a, b)
    # The repeated pairs (all but the first occurrence of each) are re-drawn, each new pair checked
    # against its row's pairs (binary search in the sorted keys row * n^2 + code, all rows as one sorted
    # array) and against the pairs accepted so far; rejected ones are drawn again. Like drawing
    # sequentially until a new pair comes, the result is a uniform s-subset.
    rows_offset = torch.arange(batch, device=device, dtype=key_dtype).unsqueeze(1) * stride
    keys = torch.add(second, first, alpha=n).add_(rows_offset)
    taken, rows, cols = repeated_keys(keys)
    accepted = torch.empty(0, dtype=key_dtype, device=device)  # row * n^2 + code of accepted re-draws
    for _ in range(100):
        k = rows.numel()
        if k == 0:
            return first, second
        a = torch.randint(n, (k,), generator=generator, device=device, dtype=key_dtype)
        b = torch.randint(n - 1, (k,), generator=generator, device=device, dtype=key_dtype)
        b.add_(b >= a)
        new_first, new_second = torch.minimum(a, b), torch.maximum(a, b)
        key = (rows * stride + new_first.long() * n + new_second).to(key_dtype)
        at = torch.searchsorted(taken, key).clamp_max(taken.numel() - 1)
        clash = taken[at] == key
        # Against the accepted re-draws and the earlier candidates of this round (first one wins).
        both = torch.cat([accepted, key])
        order2 = torch.sort(both, stable=True).indices
        sorted_both = both[order2]
        repeat = torch.zeros_like(sorted_both, dtype=torch.bool)
        repeat[1:] = sorted_both[1:] == sorted_both[:-1]
        clash |= torch.zeros_like(repeat).scatter_(0, order2, repeat)[accepted.numel() :]
        ok = ~clash
        first[rows[ok], cols[ok]] = new_first[ok]
        second[rows[ok], cols[ok]] = new_second[ok]
        accepted = torch.cat([accepted, key[ok]])
        rows, cols = rows[clash], cols[clash]
    raise RuntimeError("sample_distinct_pairs: could not draw distinct pairs")  # pragma: no cover


def repeated_keys(keys: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The sorted keys (flat) and the (row, col) positions of every repeat in ``keys`` (B, s): all but
    the first (lowest col) occurrence of each value in a row (the values of different rows differ).

    On CPU NumPy sorts the values alone (``np.sort``, faster than torch's stable sort with its indices;
    docs/performance.md) and, when they are few, the repeated values are found in their rows by a
    comparison; otherwise one stable sort of the flat keys gives their positions.
    """
    batch, s = keys.shape
    if keys.device.type == "cpu":
        array = keys.numpy()
        taken = np.sort(array, axis=None)
        values = np.unique(taken[1:][taken[1:] == taken[:-1]])  # the repeated values, each once
        if values.size <= 8 * batch:  # few (MoCHi: about one per row): search each in its row
            rows_v = np.searchsorted(taken, values) // s  # a value's row: the rows are sorted blocks of s
            where = np.flatnonzero(array[rows_v] == values[:, None])  # every occurrence, value-major
            which, cols = np.divmod(where, s)
            later = np.zeros(where.size, dtype=bool)  # the first occurrence of each value stays
            later[1:] = which[1:] == which[:-1]
            which, cols = which[later], cols[later]
            rows = rows_v[which]
            order = np.lexsort((cols, rows))  # row-major, as the sort path's nonzero gives them
            rows, cols = torch.from_numpy(rows[order].astype(np.int64)), torch.from_numpy(cols[order])
            return torch.from_numpy(taken), rows, cols.long()
    return repeated_keys_by_sort(keys)


def repeated_keys_by_sort(keys: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`repeated_keys` through one stable sort of the flat keys (any device)."""
    batch, s = keys.shape
    taken, order = keys.view(-1).sort(stable=True)
    repeated = torch.zeros_like(taken, dtype=torch.bool)
    repeated[1:] = taken[1:] == taken[:-1]
    position = torch.zeros_like(repeated).scatter_(0, order, repeated).view(batch, s)
    rows, cols = position.nonzero(as_tuple=True)
    return taken, rows, cols

