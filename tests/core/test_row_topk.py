"""row_topk_indices against a brute-force NumPy sort: long rows, ties, -inf, NaN, threads, other dtypes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hardmix.kernels import row_topk
from hardmix.kernels.row_topk import row_topk_indices


def _assert_top_sets(values: torch.Tensor, idx: torch.Tensor, n: int) -> None:
    """Each row of ``idx`` holds n distinct columns whose values are the row's n largest (NaN largest).

    Compared as sorted value lists (ties do not matter), with NaN mapped above every finite value.
    """
    assert idx.shape == (values.shape[0], n) and idx.dtype == torch.int64
    # Ascending columns: MoCHi's draws index positions in this list, on the fast and the plain path alike.
    assert bool((idx[:, 1:] > idx[:, :-1]).all()), "columns not in ascending order"
    v = values.double().numpy()
    for row, chosen in zip(v, idx.numpy()):
        assert len(set(chosen.tolist())) == n
        key = np.where(np.isnan(row), np.inf, row)  # rows with NaN hold no +inf in these tests
        want = np.sort(key)[::-1][:n]
        got = np.sort(key[chosen])[::-1]
        np.testing.assert_array_equal(got, want)


def test_row_topk_equals_brute_force_on_long_rows_with_ties_inf_and_nan() -> None:
    g = torch.Generator().manual_seed(21)
    b, k, n = 64, 16384, 1024
    values = torch.randn(b, k, generator=g)
    values[1] = torch.linspace(-1, 1, k)  # sorted
    values[2] = torch.randint(0, 4, (k,), generator=g).float()  # heavy ties at the n-th value
    values[3] = float("-inf")
    values[3, torch.randperm(k, generator=g)[: n + 100]] = torch.randn(n + 100, generator=g)
    values[4] = float("-inf")  # fewer than n finite values: -inf fills the rest, as in topk
    values[4, :500] = torch.randn(500, generator=g)
    values[5, torch.randperm(k, generator=g)[:30]] = float("nan")  # NaN counts as the largest
    values[6] = values[6].clamp(-0.5, 0.5)  # about 5000 ties at 0.5
    got = row_topk_indices(values, n)
    _assert_top_sets(values, got, n)
    _assert_top_sets(values, values.topk(n, dim=1).indices.sort(dim=1).values, n)  # the helper agrees


def test_rows_that_stray_into_a_neighbour_are_caught() -> None:
    """One row with n + 1 entries at or above its n-th value (a tie) and the next with n - 1 (a NaN):
    the total is B n, so only the column-range check tells that the rows do not split evenly."""
    n = 4
    values = torch.tensor(
        [
            [5.0, 4.0, 3.0, 2.0, 2.0, 0.0, -1.0],  # ties at its 4th value: 5 entries >= 2
            [float("nan"), 6.0, 1.0, 7.0, 0.5, 8.0, -3.0],  # NaN largest: 3 finite entries >= 6
            [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
        ]
    )
    a = values.numpy()
    kth = a.shape[1] - n
    threshold = np.partition(a, kth, axis=1)[:, kth, None]
    assert np.count_nonzero(a >= threshold) == a.shape[0] * n  # the fast path's size check passes
    got = row_topk_indices(values, n)
    _assert_top_sets(values, got, n)
    assert 0 in got[1].tolist()  # the NaN is chosen


def test_thread_blocks_give_the_same_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(3)
    values = torch.randn(100, 2000, generator=g)
    calls: list[int] = []
    original = row_topk._numpy_row_topk
    monkeypatch.setattr(row_topk, "_numpy_row_topk", lambda a, n: calls.append(a.shape[0]) or original(a, n))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        got = row_topk_indices(values, 50)
    finally:
        torch.set_num_threads(threads)
    assert sorted(calls) == [33, 33, 34]  # three blocks of rows
    _assert_top_sets(values, got, 50)


def test_other_dtypes_and_edge_sizes_go_through_topk_with_the_same_sets() -> None:
    g = torch.Generator().manual_seed(4)
    values = torch.randn(8, 40, generator=g, dtype=torch.float64)
    for v in (values, values.float(), values.bfloat16(), (values * 100).long(), values.T.contiguous().T):
        _assert_top_sets(v.double(), row_topk_indices(v, 7), 7)
    assert row_topk_indices(values, 0).shape == (8, 0)
    assert row_topk_indices(values[:0], 3).shape == (0, 3)
    _assert_top_sets(values, row_topk_indices(values, 40), 40)


def test_bad_arguments_name_the_argument() -> None:
    with pytest.raises(ValueError, match="values"):
        row_topk_indices(torch.randn(3, 4, 5), 2)
    for n in (-1, 6, 2.0, True):
        with pytest.raises(ValueError, match="n:"):
            row_topk_indices(torch.randn(3, 5), n)  # type: ignore[arg-type]
