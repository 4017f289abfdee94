"""count_true against NumPy, on contiguous, expanded and transposed masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hardmix.utils.counting import count_true


def test_count_true_equals_numpy_on_every_layout() -> None:
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(37, 300, generator=g) > 0.3
    expanded = (torch.rand(1, 300, generator=g) > 0.5).expand(37, 300)
    for m in (mask, expanded, mask.T, mask[:, ::3]):
        n = m.numpy()
        assert count_true(m, dim=1).tolist() == n.sum(1).tolist()
        assert count_true(m, dim=0).tolist() == n.sum(0).tolist()
        assert int(count_true(m)) == int(np.sum(n))
        assert count_true(m).dtype == torch.int64
    assert int(count_true(torch.tensor(True))) == 1
    assert count_true(torch.ones(4, 300, dtype=torch.bool), dim=1).tolist() == [300] * 4  # above 255


def test_count_true_refuses_other_dtypes() -> None:
    with pytest.raises(ValueError, match="mask"):
        count_true(torch.ones(3))
