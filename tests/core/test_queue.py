"""KeyQueue: FIFO ring buffer of unit keys with sample ids, its checkpoint round trip, and that the loss
never writes synthetic points into it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import ContrastiveLoss
from hardmix.ops.queue import KeyQueue


def _keys(n: int, d: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed)) * 3


def test_fifo_wrap_around_keeps_the_newest_keys_normalized() -> None:
    q = KeyQueue(5, 4, random_init=False)
    assert q.filled == 0 and q.ids.tolist() == [-1] * 5
    a, b, c = _keys(3, seed=1), _keys(3, seed=2), _keys(7, seed=3)
    q.enqueue(a, torch.tensor([10, 11, 12]))
    assert q.filled == 3 and int(q.ptr) == 3
    q.enqueue(b, torch.tensor([20, 21, 22]))  # slots 3, 4, then wraps to 0
    assert int(q.ptr) == 1 and q.filled == 5
    assert q.ids.tolist() == [22, 11, 12, 20, 21]
    expected = torch.stack([b[2], a[1], a[2], b[0], b[1]])
    torch.testing.assert_close(q.keys, F.normalize(expected, dim=1))
    q.enqueue(c, torch.arange(30, 37))  # more than K: only the last K are kept, oldest first
    assert sorted(q.ids.tolist()) == [32, 33, 34, 35, 36]
    for slot, sid in enumerate(q.ids.tolist()):
        torch.testing.assert_close(q.keys[slot], F.normalize(c[sid - 30], dim=0))
    torch.testing.assert_close(q.keys.norm(dim=1), torch.ones(5))


def test_keys_enqueued_without_ids_remain_negatives() -> None:
    """Regression: they used to get id -1, the empty-slot marker, so the loss dropped every one of them."""
    q = KeyQueue(6, 4, random_init=False)
    q.enqueue(_keys(4, seed=4))
    assert q.ids.tolist()[:4] == [-2] * 4 and q.ids.tolist()[4:] == [-1, -1]
    query, key = _keys(2, seed=5), _keys(2, seed=6)
    masked = ContrastiveLoss(0.2).queue(query, key, q.keys, torch.tensor([0, 1]), q.ids).loss
    unmasked = ContrastiveLoss(0.2).queue(query, key, q.keys[:4]).loss
    assert abs(float(masked) - float(unmasked)) < 1e-6


def test_random_init_keys_are_unit_negatives_matching_no_sample() -> None:
    q = KeyQueue(8, 3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(q.keys.norm(dim=1), torch.ones(8))
    assert q.ids.tolist() == [-2] * 8 and q.filled == 0


def test_state_dict_round_trip_into_a_fresh_queue() -> None:
    q = KeyQueue(7, 4, generator=torch.Generator().manual_seed(1))
    q.enqueue(_keys(5, seed=7), torch.arange(5))
    q.enqueue(_keys(4, seed=8), torch.arange(5, 9))
    fresh = KeyQueue(7, 4, random_init=False)
    fresh.load_state_dict(q.state_dict())
    for name in ("keys", "ids", "ptr", "count"):
        assert torch.equal(getattr(fresh, name), getattr(q, name)), name
    assert fresh.filled == q.filled == 7
    # Both continue identically.
    nxt = _keys(3, seed=9)
    q.enqueue(nxt, torch.tensor([100, 101, 102]))
    fresh.enqueue(nxt, torch.tensor([100, 101, 102]))
    assert torch.equal(fresh.keys, q.keys) and torch.equal(fresh.ids, q.ids) and torch.equal(fresh.ptr, q.ptr)
    # Through a file as well.
    import io

    buf = io.BytesIO()
    torch.save(q.state_dict(), buf)
    buf.seek(0)
    third = KeyQueue(7, 4)
    third.load_state_dict(torch.load(buf))
    assert torch.equal(third.keys, q.keys) and torch.equal(third.ids, q.ids)


def test_loading_a_queue_of_another_shape_raises() -> None:
    with pytest.raises(ValueError, match="keys"):
        KeyQueue(4, 3).load_state_dict(KeyQueue(5, 3).state_dict())


@pytest.mark.parametrize(
    "kwargs,arg",
    [({"size": 0, "dim": 3}, "size"), ({"size": 3, "dim": 0}, "dim"), ({"size": True, "dim": 3}, "size")],
)
def test_bad_arguments(kwargs: dict, arg: str) -> None:
    with pytest.raises(ValueError, match=arg):
        KeyQueue(**kwargs)


def test_enqueue_shape_errors() -> None:
    q = KeyQueue(4, 3)
    with pytest.raises(ValueError, match="keys"):
        q.enqueue(torch.randn(2, 5))
    with pytest.raises(ValueError, match="ids"):
        q.enqueue(torch.randn(2, 3), torch.arange(3))


def test_the_loss_never_writes_synthetic_points_into_the_queue() -> None:
    queue = KeyQueue(64, 8, generator=torch.Generator().manual_seed(2))
    queue.enqueue(_keys(40, d=8, seed=10), torch.arange(40))
    before = {k: v.clone() for k, v in queue.state_dict().items()}
    loss_fn = ContrastiveLoss(
        0.2, [{"name": "mochi", "n_hard": 16, "n_pair": 20, "n_query": 8}, {"name": "mixcse", "lam": 0.3}]
    )
    q = _keys(6, d=8, seed=11).requires_grad_(True)
    out = loss_fn.queue(
        q,
        _keys(6, d=8, seed=12),
        queue.keys,
        torch.arange(6),
        queue.ids,
        generator=torch.Generator().manual_seed(3),
    )
    out.loss.backward()
    for k, v in queue.state_dict().items():
        assert torch.equal(v, before[k]), k
