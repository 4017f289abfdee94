"""MoCo: momentum update, queue contents after wrap-around, split-BN and the key shuffle round trip."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import ContrastiveLoss
from hardmix.ops.distributed import SplitBatchNorm
from hardmix.vision.augment import TensorAugment
from hardmix.vision.backbones import build_backbone
from hardmix.vision.config import AugmentSection
from hardmix.vision.data import decode_images, scan_image_folder
from hardmix.vision.moco import MoCo, generator_on, lr_at, momentum_at

pytestmark = pytest.mark.usefixtures("vision_one_thread")


def _moco(queue_size: int = 40, bn_splits: int = 2) -> MoCo:
    torch.manual_seed(0)
    net, dim = build_backbone("resnet10", width=4, small_stem=True)
    return MoCo(
        net,
        dim,
        proj_hidden=32,
        proj_dim=16,
        queue_size=queue_size,
        bn_splits=bn_splits,
        queue_generator=torch.Generator().manual_seed(0),
    )


@pytest.fixture(scope="module")
def images(cifar_tree):
    listing = scan_image_folder(cifar_tree / "train")
    return decode_images(listing.paths[::5])[0]  # 64 real images


def test_momentum_update_is_an_exponential_moving_average():
    moco = _moco()
    with torch.no_grad():
        for p in moco.encoder_q.parameters():
            p.add_(1.0)
    before = [p.clone() for p in moco.encoder_k.parameters()]
    moco.momentum_update(0.9)
    for k0, k, q in zip(before, moco.encoder_k.parameters(), moco.encoder_q.parameters()):
        torch.testing.assert_close(k, 0.9 * k0 + 0.1 * q)
    assert not any(p.requires_grad for p in moco.encoder_k.parameters())


def test_queue_after_wrap_around_holds_the_last_keys_in_ring_order(images):
    moco = _moco(queue_size=40)
    aug = TensorAugment(AugmentSection(crop_size=32))
    loss_fn = ContrastiveLoss(0.2, {"name": "mochi", "n_hard": 8, "n_pair": 8, "n_query": 4})
    opt = torch.optim.SGD(moco.encoder_q.parameters(), lr=0.01)
    keys, ids = [], []
    for step in range(5):  # 5 x 16 = 80 keys through a queue of 40
        idx = torch.arange(16) + 16 * (step % 4)
        g = torch.Generator().manual_seed(step)
        out = moco(aug(images[idx], g), aug(images[idx], g), idx, loss_fn, 0.99, step, generator=g)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        keys.append(out.enqueued)
        ids.append(out.enqueued_ids)
    keys, ids = torch.cat(keys), torch.cat(ids)
    slot = torch.arange(80) % 40  # the ring position of each key, oldest first
    expected_ids = torch.empty(40, dtype=torch.long)
    expected_keys = torch.empty(40, 16)
    expected_ids[slot[40:]], expected_keys[slot[40:]] = ids[40:], keys[40:]
    assert torch.equal(moco.queue.ids, expected_ids)
    torch.testing.assert_close(moco.queue.keys, F.normalize(expected_keys, dim=1))
    assert int(moco.queue.ptr) == 0 and moco.queue.filled == 40


def test_two_queries_step_enqueues_both_views_keys(images):
    moco = _moco(queue_size=64)
    x = images[:8].float() / 255
    out = moco(x, x.flip(-1), torch.arange(8), ContrastiveLoss(0.2), 0.99, two_queries=True)
    assert len(out.outputs) == 2 and out.enqueued.shape == (16, 16)
    assert moco.queue.ids[:16].tolist() == list(range(8)) * 2


def test_split_bn_keeps_the_groups_apart(images):
    moco = _moco(bn_splits=2)
    assert any(isinstance(m, SplitBatchNorm) for m in moco.encoder_q.modules())
    assert any(isinstance(m, SplitBatchNorm) for m in moco.encoder_k.modules())
    x = images[:8].float() / 255
    y = x.clone()
    y[4:] = torch.rand_like(y[4:])  # group 1 (rows 4-7: the second rank's slice) changes, group 0 does not
    with torch.no_grad():
        a, b = moco.encoder_q(x), moco.encoder_q(y)
    torch.testing.assert_close(a[:4], b[:4])
    assert not torch.allclose(a[4:], b[4:])


def test_key_shuffle_round_trip(images):
    moco = _moco(bn_splits=2).eval()  # eval: no batch statistics, so the shuffle must be invisible
    x = images[:8].float() / 255
    with torch.no_grad():
        plain = moco.encoder_k(x)
    shuffled = moco.encode_keys(x, torch.Generator().manual_seed(1))
    torch.testing.assert_close(shuffled, plain)


def test_schedules():
    assert momentum_at(0, 100, 0.99, 1.0, "cosine") == pytest.approx(0.99)
    assert momentum_at(100, 100, 0.99, 1.0, "cosine") == pytest.approx(1.0)
    assert momentum_at(50, 100, 0.99, schedule="constant") == 0.99
    assert lr_at(0, 100, 1.0, warmup_steps=10) == pytest.approx(0.1)
    assert lr_at(10, 100, 1.0, warmup_steps=10) == pytest.approx(1.0)
    assert lr_at(100, 100, 1.0) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_moco_mochi_step_on_device_with_the_trainers_cpu_generator(device: str) -> None:
    """The trainer passes a CPU step generator (the shuffle draws on the CPU); MoCHi's pair draws happen
    on the loss's device, so the loss gets a generator there, seeded from the CPU one: the same seed gives
    the same loss, and on the CPU the generator is passed through unchanged."""
    g = torch.Generator().manual_seed(3)
    assert generator_on(g, torch.device("cpu")) is g and generator_on(None, torch.device(device)) is None
    x = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(1)).to(device)
    loss_fn = ContrastiveLoss(0.2, {"name": "mochi", "n_hard": 12, "n_pair": 10, "n_query": 4})
    losses = []
    for _ in range(2):
        moco = _moco(queue_size=40).to(device)
        out = moco(x, x.flip(-1), torch.arange(8), loss_fn, 0.99, generator=torch.Generator().manual_seed(5))
        out.loss.backward()
        assert math.isfinite(out.outputs[0].stats()["mochi/synthetic_sim"])  # MoCHi mixed at this step
        losses.append(float(out.loss.detach()))
    assert losses[0] == losses[1] and torch.isfinite(torch.tensor(losses)).all()
